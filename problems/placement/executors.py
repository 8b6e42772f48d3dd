"""The executors a front is searched for, and the rules their start-up code puts on a plan.

A front is searched for one executor (`mosearch plan --executor`): this project's trainer
(`mosearch`, no rule beyond the plan's own structure), verl 0.9.1, AReaL 1.0.4 or RLinf 0.3.0. Each
external executor's rules are constraints of the search space, applied where every plan is made or
scored: `repair` (vectorised, called at the end of `Layout.repair`, so every generator of plans gets
them) moves a plan to the nearest one the executor can start, and `violations` (the problem's
`executor` constraint) marks what repair cannot fix, e.g. a batch that does not split. `why` names the
first rule a single plan breaks, in one line, for `mosearch export`.

Where each rule comes from (read in the executors' code, see docs/export.md):
- verl 0.9.1: `verl/utils/config.py` validate_config (real_train_batch_size divisible by the trainer
  GPUs, or by Megatron DP x micro-batch); `trainer/ppo/v1/trainer_base.py` _init_resource_pool_mgr (one
  pool of `[n_gpus_per_node] * nnodes` for actor, reference and critic); `workers/rollout/llm_server.py`
  and `replica.py` (engines of one TP over `rollout.nnodes x n_gpus_per_node`); `trainer_separate_async.py`
  (the only mode on separate rollout GPUs is asynchronous); Megatron's distributed optimizer (ZeRO-1) and
  its CPU optimizer (`optimizer_cpu_offload`), FSDP's no-shard / reshard_after_forward.
- AReaL 1.0.4: `areal/infra/scheduler/local.py` create_workers (a colocated role needs as many replicas
  as its target: one rollout engine per actor GPU, so TP 1), `areal/infra/utils/launcher.py`
  validate_config_for_distributed_launcher and `infra/launcher/ray.py` (n_nodes x n_gpus_per_node GPUs,
  generation on whole nodes, vLLM TP within a node); `actor.mb_spec` packs a rank's share into micro-batches
  of at most max_tokens_per_mb tokens (none larger than the share),
  its FSDP engine (always fully sharded), Megatron for
  pipeline stages, `actor.offload` (between phases only: no optimizer offload during the step).
- RLinf 0.3.0: `rlinf/utils/placement.py` ModelParallelComponentPlacement (contiguous GPU ranges;
  disaggregated placement needs dedicated `inference` GPUs and a critic apart from the actor, which the
  plans do not have: colocated only), `workers/actor/megatron_actor_worker.py` (rollout TP <= actor TP),
  `workers/critic` (Megatron critics only), `rlinf/config.py` (FSDP: global batch divisible by micro-batch
  x actor GPUs; Megatron's `optim.optimizer_cpu_offload`).
- Expert parallelism (a mixture of experts' `train.ep` > 1): each executor's Megatron backend alone has it, so
  an EP plan trains with Megatron and its rules (sharding, offload, batch): verl's
  `actor_rollout_ref.actor.megatron.expert_model_parallel_size` / `expert_tensor_parallel_size` (its FSDP
  workers have no EP), AReaL 1.0.4's allocation mode (`areal/api/alloc_mode.py`: ModelAllocation refuses
  expert_parallel_size > 1 on the fsdp backend; megatron's `(attn:...|ffn:e<ep>)` needs world size divisible
  by pp x expert TP x ep), RLinf's Megatron `expert_model_parallel_size`. EP divides dp*tp (the plan schema).
  AReaL 1.0.4's allocation grammar takes that hybrid `(attn|ffn)` form only unnamed ("megatron[actor]:(attn:..."
  is a parsing error), and its colocation and per-role allocations name the actor: AReaL fronts keep EP 1.
- All three: one rollout TP for all engines, no key for streamed chunks or staged weight sync, Megatron's
  pipeline stages of equal layer counts (num_layers divisible by PP).
"""

from __future__ import annotations

from dataclasses import dataclass, field
import numpy as np

from problems.placement.names import EAGER_KERNELS, EXECUTOR_NAMES, MODES, SHARDINGS

DEFAULT_EXECUTOR = "mosearch"
_NONE, _Z1, _Z2, _Z3, _FSDP = range(5)
_COLO, _DISAGG, _ASYNC = range(3)


@dataclass(frozen=True)
class Executor:
    """What one executor can start as planned."""

    name: str
    runs: str  # the executor and version a front is for, as shown
    modes: tuple[str, ...] = MODES
    # what makes its trainer Megatron: train tp>1, pp>1, a PPO critic, expert parallelism (ep>1)
    megatron_on: tuple[str, ...] = ("tp", "pp", "ep")
    fsdp_shardings: tuple[str, ...] = SHARDINGS
    megatron_shardings: tuple[str, ...] = SHARDINGS
    fsdp_offload: bool = True  # optimizer state on CPU during the step (the plan's optimizer_offload)
    megatron_offload: bool = True
    one_rollout_tp: bool = False
    streams_chunks: bool = True  # a key for pipeline_chunks > 1
    staged_sync: bool = True
    equal_stages: bool = False  # Megatron: num_layers divisible by PP
    whole_nodes: bool = False  # repair: each role on whole nodes (or one node)
    nodes: str = ""  # "uniform" (verl) | "logical" (AReaL) | "contiguous" (RLinf)
    batch: str = ""  # "verl" | "rlinf"
    colocated_rollout_tp1: bool = False
    rollout_tp_le_train_tp: bool = False  # with Megatron
    # its FSDP trainer runs Hugging Face's eager modules whatever the workload says (no kernel switch):
    # the front is scored so (`scored_workload`)
    eager_modules: bool = False
    expert_parallel: bool = True  # a key for a mixture of experts' EP (train.ep > 1)
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def external(self) -> bool:
        return self.name != DEFAULT_EXECUTOR


EXECUTORS: dict[str, Executor] = {
    "mosearch": Executor("mosearch", "mosearch (this project's trainer)"),
    "verl": Executor(
        "verl", "verl 0.9.1 (v1 trainer)", modes=("colocated", "async"),
        fsdp_shardings=("none", "zero2", "zero3", "fsdp"), megatron_shardings=("none", "zero1"), fsdp_offload=False,
        one_rollout_tp=True, streams_chunks=False, staged_sync=False, equal_stages=True, whole_nodes=True,
        nodes="uniform", batch="verl"),
    "areal": Executor(
        "areal", "AReaL 1.0.4", megatron_on=("pp", "ep"), fsdp_shardings=("zero3", "fsdp"), megatron_shardings=("zero1",),
        fsdp_offload=False, megatron_offload=False, one_rollout_tp=True, streams_chunks=False, staged_sync=False,
        equal_stages=True, whole_nodes=True, nodes="logical", batch="areal", colocated_rollout_tp1=True,
        eager_modules=True, expert_parallel=False),
    "rlinf": Executor(
        "rlinf", "RLinf 0.3.0 (reasoning runner)", modes=("colocated",), megatron_on=("tp", "pp", "critic", "ep"),
        fsdp_shardings=("none", "zero2", "zero3", "fsdp"), megatron_shardings=("none", "zero1"), fsdp_offload=False,
        one_rollout_tp=True, streams_chunks=False, staged_sync=False, equal_stages=True, whole_nodes=True,
        nodes="contiguous", batch="rlinf", rollout_tp_le_train_tp=True),
}


assert tuple(EXECUTORS) == EXECUTOR_NAMES  # the plan schema validates against the names alone


def get(name: str | None) -> Executor:
    return EXECUTORS[name or DEFAULT_EXECUTOR]


def scored_workload(ex: Executor, workload):
    """(the workload as the executor runs it, the line that says how it differs or None). AReaL 1.0.4's
    FSDP engine builds Hugging Face modules with no switch for fused kernels (its FSDPEngineConfig in
    cli_args.py has no key for them; docs/export.md), so its plans' layers are eager: slower, and they
    keep more activations (model/memory.py `hf_layer_bytes_per_token`). Megatron-engine plans (pp > 1)
    are scored the same way: that engine's fusions are set by its model bridge, with no key either."""
    import dataclasses

    if not ex.eager_modules or workload.elementwise_kernels == EAGER_KERNELS:
        return workload, None
    return (dataclasses.replace(workload, elementwise_kernels=EAGER_KERNELS),
            f"{ex.runs} trains Hugging Face's eager modules (no switch for fused kernels): its plans are scored with "
            f"elementwise_kernels {EAGER_KERNELS}, where the workload says {workload.elementwise_kernels}")


@dataclass(frozen=True)
class RuleContext:
    """What the rules read besides the plan: node sizes and the workload's shape."""

    gpn: np.ndarray  # (P,) GPUs per node of each pool
    layers: int
    samples: int  # samples per step
    ppo: bool  # a critic is trained
    max_staleness: int


def megatron(ex: Executor, tp, pp, ppo: bool, ep=None) -> np.ndarray:
    """Whether the executor trains this layout with Megatron (else FSDP); `ep`: a mixture of experts' EP."""
    tp, pp = np.asarray(tp), np.asarray(pp)
    m = np.zeros(np.broadcast(tp, pp).shape, dtype=bool)
    if "ep" in ex.megatron_on and ep is not None:
        m |= np.asarray(ep) > 1
    if "tp" in ex.megatron_on:
        m |= tp > 1
    if "pp" in ex.megatron_on:
        m |= pp > 1
    if "critic" in ex.megatron_on and ppo:
        m |= True
    return m


def _map_sharding(s: np.ndarray, allowed: tuple[str, ...]) -> np.ndarray:
    """Each level to the least allowed level at or above it, else the largest allowed."""
    idx = sorted(SHARDINGS.index(a) for a in allowed)
    table = np.array([next((a for a in idx if a >= v), idx[-1]) for v in range(len(SHARDINGS))])
    return table[s.astype(np.int64)]


# ------------------------------------------------------------------------------------------ repair

def pre_repair(ex: Executor, L, X: np.ndarray) -> np.ndarray:
    """Knobs decided before the roles are repaired: the execution mode (colocated plans share GPUs)."""
    if not ex.external:
        return X
    mode_j, k_j = L.g("mode"), L.g("staleness_bound")
    mode = X[:, mode_j].astype(np.int64)
    allowed = np.array([m in ex.modes for m in MODES])
    bad = ~allowed[mode]
    if bad.any():
        can_async = "async" in ex.modes and L.max_staleness >= 1
        # a synchronous plan on separate GPUs becomes async with the least lag the executor allows
        to_async = bad & (mode == _DISAGG) & can_async
        X[to_async, mode_j] = _ASYNC
        X[to_async, k_j] = np.maximum(X[to_async, k_j], 1)
        X[bad & ~to_async, mode_j] = _COLO if "colocated" in ex.modes else MODES.index(ex.modes[0])
    if ex.name == "verl":  # verl's async lag is at least one version (an on-policy separate mode has no trainer)
        a = X[:, mode_j] == _ASYNC
        if L.max_staleness >= 1:
            X[a, k_j] = np.maximum(X[a, k_j], 1)
        else:
            X[a, mode_j] = _COLO
    return X


def post_repair(ex: Executor, L, X: np.ndarray, rc: RuleContext) -> np.ndarray:
    """After the structural repair: the knobs and GPU counts the executor can express. Only lowers
    counts and TPs (so every replica and engine stays whole) and keeps the plan structurally valid."""
    if not ex.external or len(X) == 0:
        return X
    P = L.n_pools
    g = L.g
    colo = X[:, g("mode")].astype(np.int64) == _COLO
    if not ex.streams_chunks:
        X[:, g("log2_pipeline_chunks")] = 0
    if not ex.staged_sync:
        X[:, g("sync_route")] = 0
    if L.moe and not ex.expert_parallel:
        X[:, g("train_ep_idx")] = 0
    # Megatron's pipeline stages hold equal layer counts
    if ex.equal_stages:
        pp_i = X[:, g("train_pp_idx")].astype(np.int64)
        for _ in range(len(L.pp_options)):
            bad = (rc.layers % L.pp_options[pp_i]) != 0
            if not bad.any():
                break
            pp_i = np.where(bad & (pp_i > 0), pp_i - 1, pp_i)
        X[:, g("train_pp_idx")] = pp_i
    tp = L.tp_options[X[:, g("train_tp_idx")].astype(np.int64)]
    pp = L.pp_options[X[:, g("train_pp_idx")].astype(np.int64)]
    ep = L.ep_options[X[:, g("train_ep_idx")].astype(np.int64)] if L.moe else None
    mg = megatron(ex, tp, pp, rc.ppo, ep)
    shard = X[:, g("sharding")].astype(np.int64)
    X[:, g("sharding")] = np.where(mg, _map_sharding(shard, ex.megatron_shardings), _map_sharding(shard, ex.fsdp_shardings))
    off_ok = np.where(mg, ex.megatron_offload, ex.fsdp_offload)
    X[:, g("optimizer_offload")] = np.where(off_ok, X[:, g("optimizer_offload")], 0)
    # one rollout TP for every engine: the smallest any pool uses (options are one power-of-two list per pool)
    rtp_i = X[:, 2 * P:3 * P].astype(np.int64)
    gen = X[:, :P] > 0
    if ex.one_rollout_tp or ex.colocated_rollout_tp1 or ex.rollout_tp_le_train_tp:
        rtp = np.take_along_axis(L.rtp_options, rtp_i.T, axis=1).T
        common = np.where(gen, rtp, np.iinfo(np.int64).max).min(axis=1)
        common = np.where(gen.any(axis=1), common, 1)
        if ex.colocated_rollout_tp1:
            common = np.where(colo, 1, common)
        if ex.rollout_tp_le_train_tp:
            common = np.where(mg, np.minimum(common, tp), common)
        want = np.broadcast_to(common[:, None], rtp.shape)  # every pool's engines at the common TP
        # the index of `want` in each pool's options (the largest option not above it)
        opts = L.rtp_options[None, :, :]
        ok = opts <= want[:, :, None]
        # idle pools keep theirs (nothing reads it; canonical.py writes it as 1)
        rtp_i = np.where(gen, np.clip(ok.sum(axis=2) - 1, 0, L.rtp_n[None, :] - 1), rtp_i)
        X[:, 2 * P:3 * P] = rtp_i
    if ex.whole_nodes:
        X = _whole_nodes(L, X, tp * pp, colo)
    if ex.batch:
        X = _batch_micro(ex, L, X, rc, mg)
    return X


def _round_down(c: np.ndarray, unit: np.ndarray) -> np.ndarray:
    return (c // unit) * unit


def _whole_nodes(L, X: np.ndarray, g_rep: np.ndarray, colo: np.ndarray) -> np.ndarray:
    """Each role's GPUs of a pool rounded down to whole nodes (a replica or engine wider than a node:
    to whole replicas of nodes); a role that would vanish keeps its largest pool's share of one node."""
    P = L.n_pools
    n = L.gpn[None, :]
    rtp = np.take_along_axis(L.rtp_options, X[:, 2 * P:3 * P].astype(np.int64).T, axis=1).T
    r, t = X[:, :P].astype(np.int64), X[:, P:2 * P].astype(np.int64)
    g = g_rep[:, None]

    def fit(c, unit_in_node):
        whole = _round_down(c, np.maximum(n, unit_in_node))
        gone = (whole.sum(axis=1) == 0) & (c.sum(axis=1) > 0)
        if gone.any():  # one (partial) node of the pool that had the most
            best = np.argmax(c, axis=1)
            one = _round_down(np.minimum(c, n), unit_in_node)
            pick = gone[:, None] & (np.arange(P)[None, :] == best[:, None])
            whole = np.where(pick, np.where(one > 0, one, c), whole)
        return whole

    s = fit(r, np.maximum(rtp, g))
    r2 = fit(r, rtp)
    t2 = fit(t, g)
    X[:, :P] = np.where(colo[:, None], s, r2)
    X[:, P:2 * P] = np.where(colo[:, None], s, t2)
    return X


def _batch_micro(ex: Executor, L, X: np.ndarray, rc: RuleContext, mg: np.ndarray) -> np.ndarray:
    """The largest micro-batch (power of two, at most the plan's) with which the step's samples split
    over the data-parallel ranks x micro-batch, where the executor requires that."""
    j = L.g("log2_micro_batch")
    P = L.n_pools
    colo = X[:, L.g("mode")] == _COLO
    train = np.where(colo[:, None], X[:, :P], X[:, P:2 * P]).sum(axis=1).astype(np.int64)
    tp = L.tp_options[X[:, L.g("train_tp_idx")].astype(np.int64)]
    pp = L.pp_options[X[:, L.g("train_pp_idx")].astype(np.int64)]
    dp = np.maximum(train // (tp * pp), 1)
    # verl FSDP checks the trainer GPUs alone (the micro-batch does not enter its rule)
    uses_mb = mg if ex.batch == "verl" else np.ones(len(X), dtype=bool)
    lg = X[:, j].astype(np.int64)
    for _ in range(int(lg.max(initial=0)) + 1):
        if ex.batch == "areal":  # a micro-batch no larger than a rank's share of the step
            bad = (dp * 2 ** lg > rc.samples) & (lg > 0)
        else:
            bad = uses_mb & (rc.samples % (dp * 2 ** lg) != 0) & (lg > 0)
        if not bad.any():
            break
        lg = np.where(bad, lg - 1, lg)
    X[:, j] = lg
    return X


# ------------------------------------------------------------------------------------------ nodes

def node_parts(r: np.ndarray, t: np.ndarray, n: np.ndarray) -> dict[str, np.ndarray]:
    """How a pool's GPUs fall on its nodes when rollout takes the first r and training the next t
    (colocated: shared GPUs as r, t = 0), as the exports lay them out (mosearch/export/layout.py)."""
    fr, rr = r // n, r % n
    tm = np.where((rr > 0) & (t > 0), np.minimum(t, n - rr), 0)
    t2 = t - tm
    return {"full_r": fr, "part_r": np.where(t > 0, 0, rr), "mixed_r": np.where(t > 0, rr, 0), "mixed_t": tm,
            "mixed_idle": np.where(tm > 0, n - rr - tm, 0), "full_t": t2 // n, "part_t": t2 % n, "n": n + 0 * r}


def _uniform(values: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(uniform, min, max) over the per-node counts given as (count, present) pairs of (N,P) arrays."""
    big = np.iinfo(np.int64).max
    lo = np.min(np.stack([np.where(p, c, big).min(axis=1) for c, p in values]), axis=0)
    hi = np.max(np.stack([np.where(p, c, 0).max(axis=1) for c, p in values]), axis=0)
    return (lo == hi) | (hi == 0), lo, hi


def role_counts(f: dict) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    colo = f["mode"] == _COLO
    r = np.where(colo[:, None], f["shared_gpus"], f["rollout_gpus"])
    return r, f["train_gpus"], colo


# ------------------------------------------------------------------------------------------ rules

def violations(ex: Executor, L, f: dict, rc: RuleContext) -> dict[str, np.ndarray]:
    """Rule name -> (N,) bool: the rules each plan (named fields of a repaired population) breaks."""
    N = len(f["mode"])
    out: dict[str, np.ndarray] = {}
    if not ex.external:
        return out
    mode = f["mode"]
    out["mode"] = ~np.array([m in ex.modes for m in MODES])[mode]
    if ex.name == "verl":
        out["mode"] |= (mode == _ASYNC) & (f["staleness_bound"] < 1)
    r, t, colo = role_counts(f)
    gen = r > 0
    rtp = f["rollout_tp"]
    if ex.one_rollout_tp:
        big = np.iinfo(np.int64).max
        out["rollout_tp"] = np.where(gen, rtp, big).min(axis=1) != np.where(gen, rtp, 0).max(axis=1)
    if not ex.streams_chunks:
        out["chunks"] = f["pipeline_chunks"] > 1
    if not ex.staged_sync:
        out["route"] = f["route"] == 1
    tp, pp = f["tp"], f["pp"]
    mg = megatron(ex, tp, pp, rc.ppo, f.get("ep"))
    allowed_f = np.array([s in ex.fsdp_shardings for s in SHARDINGS])
    allowed_m = np.array([s in ex.megatron_shardings for s in SHARDINGS])
    out["sharding"] = np.where(mg, ~allowed_m[f["sharding"]], ~allowed_f[f["sharding"]])
    out["offload"] = (f["optimizer_offload"] > 0) & ~np.where(mg, ex.megatron_offload, ex.fsdp_offload)
    if ex.equal_stages:
        out["stages"] = (rc.layers % pp) != 0
    rmax = np.where(gen, rtp, 0).max(axis=1)
    if ex.colocated_rollout_tp1:
        out["colocated_tp"] = colo & (rmax > 1)
    if ex.rollout_tp_le_train_tp:
        out["rollout_tp_le_tp"] = mg & (rmax > tp)
    train = (f["train_gpus"] + f["shared_gpus"]).sum(axis=1)
    dp = train // np.maximum(tp * pp, 1)
    if f.get("ep") is not None:  # Megatron-core: expert-parallel groups tile one stage's dp x tp ranks
        out["ep"] = (dp * tp) % np.maximum(f["ep"], 1) != 0
        if not ex.expert_parallel:
            out["no_ep"] = f["ep"] > 1
    if ex.batch == "verl":
        unit = np.where(mg, dp * f["micro_batch"], train)
        out["batch"] = rc.samples % np.maximum(unit, 1) != 0
    elif ex.batch == "areal":
        out["batch_share"] = dp * f["micro_batch"] > rc.samples
    elif ex.batch == "rlinf":
        out["batch"] = rc.samples % np.maximum(dp * f["micro_batch"], 1) != 0
    n = rc.gpn[None, :]
    parts = node_parts(r, np.where(colo[:, None], 0, t), n)
    if ex.nodes == "uniform":
        big = np.iinfo(np.int64).max
        ru, rlo, _ = _uniform([(n + 0 * r, parts["full_r"] > 0), (parts["part_r"], parts["part_r"] > 0),
                               (parts["mixed_r"], parts["mixed_r"] > 0)])
        tu, tlo, _ = _uniform([(parts["mixed_t"], parts["mixed_t"] > 0), (n + 0 * t, parts["full_t"] > 0),
                               (parts["part_t"], parts["part_t"] > 0)])
        # whole engines and TP groups on every node (powers of two: their lcm is the larger); colocated
        # GPUs hold both
        r_unit = np.where(colo, np.maximum(np.maximum(rmax, 1), tp), np.maximum(rmax, 1))
        ok_r = ru & ((rlo % r_unit == 0) | (rlo == big))
        ok_t = tu & ((tlo % tp == 0) | (tlo == big))
        out["nodes"] = ~(ok_r & ok_t)
    elif ex.nodes == "logical":
        u = _gcd_rows([n * (parts["full_r"] > 0), parts["part_r"], parts["mixed_r"], parts["mixed_t"],
                       n * (parts["full_t"] > 0), parts["part_t"]])
        out["nodes"] = (u % np.maximum(rmax, 1) != 0) | (u % np.maximum(tp, 1) != 0)
    elif ex.nodes == "contiguous":
        out["nodes"] = ~contiguous_roles(parts)
    return {k: np.asarray(v, dtype=bool).reshape(N) for k, v in out.items()}


def _gcd_rows(arrays: list[np.ndarray]) -> np.ndarray:
    """Row-wise gcd of every (N,P) entry (zeros are neutral)."""
    stacked = np.concatenate([np.asarray(a, dtype=np.int64) for a in arrays], axis=1)
    return np.gcd.reduce(stacked, axis=1)


def contiguous_roles(parts: dict) -> np.ndarray:
    """Whether each role's global GPU indices are one range in the exports' node order (rollout-only
    nodes, full before partial; mixed nodes; training-only nodes, full before partial)."""
    part_r = (parts["part_r"] > 0).sum(axis=1)
    mixed = (parts["mixed_r"] > 0).sum(axis=1)
    part_t = (parts["part_t"] > 0).sum(axis=1)
    full_t = parts["full_t"].sum(axis=1)
    mixed_idle = (parts["mixed_idle"] > 0).sum(axis=1)
    roll_ok = part_r + mixed <= 1
    train_ok = (mixed <= 1) & (part_t <= 1) & ~((mixed_idle > 0) & ((full_t + part_t) > 0))
    return roll_ok & train_ok


def violation_count(ex: Executor, L, f: dict, rc: RuleContext) -> np.ndarray:
    v = violations(ex, L, f, rc)
    if not v:
        return np.zeros(len(f["mode"]))
    return np.sum(np.stack(list(v.values())), axis=0).astype(float)


# ------------------------------------------------------------------------------------------ one plan

RULE_TEXT = {
    "mode": "one of its modes: {modes}",
    "rollout_tp": "one rollout TP for every engine",
    "chunks": "pipeline_chunks 1 (no key streams the step's batch to training in chunks)",
    "route": "weight-sync route direct (no key for staged sync)",
    "sharding": "sharding {shardings}",
    "offload": "the optimizer state on the GPUs with this backend (no key offloads it during the step)",
    "stages": "Megatron pipeline stages of equal layer counts (num_layers divisible by PP)",
    "colocated_tp": "rollout TP 1 when colocated (a colocated role has as many replicas as its target: one engine per actor GPU)",
    "rollout_tp_le_tp": "rollout TP <= actor TP with Megatron (its Megatron actor asserts it)",
    "batch": "the step's samples divisible by {unit}",
    "batch_share": "a micro-batch no larger than a data-parallel rank's share of the step (mb_spec packs a rank's share)",
    "nodes": "{nodes}",
    "ep": "an expert-parallel size dividing DP x TP (Megatron-core's expert groups tile a stage's ranks)",
    "no_ep": "expert parallel size 1 (its allocation string has no named expert-parallel form)",
}
NODE_TEXT = {
    "uniform": "each role as nnodes x n_gpus_per_node: the same GPU count on every node of a role, whole engines and TP groups per node",
    "logical": "n_nodes x n_gpus_per_node GPUs with each role on whole (logical) nodes that hold whole engines and TP groups",
    "contiguous": "one contiguous GPU range per component",
}


def why(ex: Executor, L, f: dict, rc: RuleContext) -> str | None:
    """The first rule one plan (fields of one row) breaks, as one sentence, or None."""
    v = violations(ex, L, f, rc)
    for name, bad in v.items():
        if bad[0]:
            mg = bool(megatron(ex, f["tp"], f["pp"], rc.ppo, f.get("ep"))[0])
            train = int((f["train_gpus"] + f["shared_gpus"]).sum())
            dp = train // max(int(f["tp"][0] * f["pp"][0]), 1)
            unit = (f"DP x micro-batch = {dp} x {int(f['micro_batch'][0])}" if mg or ex.batch != "verl"
                    else f"the {train} trainer GPUs")
            text = RULE_TEXT[name].format(
                modes=", ".join(ex.modes), unit=unit, nodes=NODE_TEXT.get(ex.nodes, ""),
                shardings=(" / ".join(ex.megatron_shardings if mg else ex.fsdp_shardings)
                           + (" with Megatron" if mg else " with FSDP")))
            detail = _detail(name, f, rc)
            return f"{ex.runs} needs {text}{detail}"
    return None


def _detail(name: str, f: dict, rc: RuleContext) -> str:
    if name == "mode":
        return f" (the plan is {MODES[int(f['mode'][0])]}, staleness bound {int(f['staleness_bound'][0])})"
    if name in ("batch", "batch_share"):
        return f" ({rc.samples} samples per step, DP {int((f['train_gpus'] + f['shared_gpus']).sum()) // max(int(f['tp'][0] * f['pp'][0]), 1)}, micro-batch {int(f['micro_batch'][0])})"
    if name == "stages":
        return f" ({rc.layers} layers, PP {int(f['pp'][0])})"
    if name == "sharding":
        return f" (the plan has {SHARDINGS[int(f['sharding'][0])]})"
    if name in ("rollout_tp", "colocated_tp", "rollout_tp_le_tp"):
        tps = sorted({int(x) for x, used in zip(f["rollout_tp"][0], (f["rollout_gpus"] + f["shared_gpus"])[0]) if used})
        return f" (the plan's rollout TP {tps}, train TP {int(f['tp'][0])})"
    if name == "nodes":
        r, t, colo = role_counts(f)
        return f" (GPUs per pool: rollout {r[0].tolist()}, train {t[0].tolist()}, node sizes {rc.gpn.tolist()})"
    return ""
