"""The placement problem as a vectorised pymoo Problem with a structural Repair.

Objectives (all minimised), in this order: OBJECTIVES =
    -throughput_samples_s, cost_usd_h, peak_mem_frac, staleness
Inequality constraints (G <= 0 is feasible), in this order: CONSTRAINTS =
    mem_fits          peak memory fraction on the most loaded GPU - max_mem_frac (the caching allocator's
                      reserved memory, what an out-of-memory follows: model/memory.py)
    kv_fits           (tokens of one longest sample - KV tokens of the smallest engine) / that
    max_cost          (cost - max_cost_usd_h) / max_cost_usd_h            (-1 without a limit)
    min_throughput    (min_throughput - throughput) / min_throughput     (-1 without a limit)
    max_staleness     staleness - max_staleness                          (-1 without a limit)
    structure         1 if the repaired vector is still not a valid plan, else 0
    executor          rules of the executor the plans are for that the plan breaks (0 for this
                      project's trainer; problems/placement/executors.py)
`_evaluate` repairs its input first (repair is idempotent), so any vector gets a meaningful score.
"""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path

import numpy as np
from pymoo.core.problem import Problem
from pymoo.core.repair import Repair

from problems.placement import model as _model
from problems.placement.encoding import Layout
from problems.placement.model.params import ModelContext
from problems.placement.names import OBJECTIVE_COLUMNS
from problems.placement.names import OBJECTIVES as NAMED_OBJECTIVES
from problems.placement.plan import Plan, SpecRef, file_sha256
from problems.placement.specs import Cluster, Workload, for_precision, load_cluster, load_workload
from problems.placement.model.reduce import pany, psum

# the minimised objectives, in the registry's order (a maximised one as its negative)
OBJECTIVES = tuple(("neg_" if o.sense < 0 else "") + o.column for o in NAMED_OBJECTIVES)
CONSTRAINTS = ("mem_fits", "kv_fits", "max_cost", "min_throughput", "max_staleness", "structure", "executor")
# keys of Plan.predicted besides the whole evaluate_matrix breakdown
PREDICTED_OBJECTIVES = OBJECTIVE_COLUMNS


def _spec_ref(name: str, path: str) -> SpecRef:
    p = Path(path)
    sha = file_sha256(p) if p.is_file() else "0" * 64
    return SpecRef(name=name, path=str(path), sha256=sha)


class PlacementRepair(Repair):
    """Rounds integer variables, clips to bounds and makes every vector a structurally valid plan."""

    def _do(self, problem, X, **kwargs):
        return problem.layout.repair(np.asarray(X, dtype=float))


class PlacementProblem(Problem):
    """Placement of one RL workload on one cluster; evaluates whole populations as arrays.

    Variables: see `problems.placement.encoding` (integer-valued except kv_mem_frac; use
    `problem.repair()` or `PlacementRepair` with any pymoo algorithm).
    """

    def __init__(self, cluster: Cluster, workload: Workload, *, max_cost_usd_h: float | None = None,
                 min_throughput: float | None = None, max_staleness: float | None = None,
                 max_mem_frac: float = 1.0, efficiencies: dict[str, dict[str, float]] | None = None,
                 executor: str | None = None):
        from problems.placement.executors import get as executor_named, scored_workload

        # pools whose GPUs cannot run the workload's precision hold no plan: the problem is the rest
        cluster, self.left_out = for_precision(cluster, workload)
        self.cluster = cluster
        self.workload = workload  # as given (a problem without the executor starts from it)
        self.executor = executor_named(executor)  # the executor the plans are for
        # the workload as the executor runs it, and the line that says where that differs
        scored, self.executor_note = scored_workload(self.executor, workload)
        self.limits = {"max_cost_usd_h": max_cost_usd_h, "min_throughput": min_throughput,
                       "max_staleness": max_staleness, "max_mem_frac": max_mem_frac}
        # fitted by calibration (the cluster's profiles), then any given here on top
        self.efficiencies = {g: dict(v) for g, v in cluster.efficiencies.items()}
        for gpu, over in (efficiencies or {}).items():
            self.efficiencies.setdefault(gpu, {}).update(over)
        self.layout = Layout.build(cluster, scored, self.executor.name)
        self.ctx: ModelContext = _model.build_context(cluster, scored, self.efficiencies, executor=self.executor.name)
        self.cluster_ref = _spec_ref(cluster.name, cluster.path)
        self.workload_ref = _spec_ref(workload.name, workload.path)
        xl, xu = self.layout.bounds()
        super().__init__(n_var=self.layout.n_var, n_obj=len(OBJECTIVES), n_ieq_constr=len(CONSTRAINTS),
                         xl=xl, xu=xu, vtype=float, elementwise=False)

    @classmethod
    def from_files(cls, cluster_path: str | Path, workload_path: str | Path, **limits) -> "PlacementProblem":
        return cls(load_cluster(cluster_path), load_workload(workload_path), **limits)

    # ------------------------------------------------------------ pymoo
    def repair(self) -> PlacementRepair:
        return PlacementRepair()

    @property
    def var_names(self) -> list[str]:
        return self.layout.names([p.id for p in self.cluster.pools])

    @property
    def integer_mask(self) -> np.ndarray:
        return self.layout.integer_mask()

    def _evaluate(self, X, out, *args, **kwargs):
        r = self.evaluate_matrix(X)
        out["F"] = objectives(r)
        out["G"] = self._constraints(r)

    def _constraints(self, r: dict[str, np.ndarray]) -> np.ndarray:
        lim = self.limits
        n = len(r["step_s"])
        none = np.full(n, -1.0)
        cost = (r["cost_usd_h"] - lim["max_cost_usd_h"]) / lim["max_cost_usd_h"] if lim["max_cost_usd_h"] else none
        thr = ((lim["min_throughput"] - r["throughput_samples_s"]) / lim["min_throughput"]
               if lim["min_throughput"] else none)
        stale = r["staleness"] - lim["max_staleness"] if lim["max_staleness"] is not None else none
        return np.column_stack([r["peak_mem_frac"] - lim["max_mem_frac"], r["kv_shortfall"], cost, thr, stale,
                                r["structure"], r["executor"]])

    # ------------------------------------------------------------ evaluation
    def evaluate_matrix(self, X) -> dict[str, np.ndarray]:
        """Full named breakdown (N,) for a population; repairs X first (see `structure`)."""
        X = np.atleast_2d(np.asarray(X, dtype=float))
        R = self.layout.repair(X)
        f = self.layout.fields(R)
        r = _model.evaluate(self.ctx, f)
        r["structure"] = self._structure_violation(f)
        r["executor"] = self._executor_violation(f)
        r["repaired"] = pany(np.abs(R - X) > 1e-9).astype(float)
        r["feasible"] = (self._constraints(r) <= 0).all(axis=1).astype(float)
        return r

    def _structure_violation(self, f) -> np.ndarray:
        g = f["tp"] * f["pp"]
        train = f["train_gpus"] + f["shared_gpus"]
        used = f["rollout_gpus"] + f["train_gpus"] + f["shared_gpus"]
        engines = (f["rollout_gpus"] + f["shared_gpus"]) // f["rollout_tp"]
        bad = pany((train % g[:, None]) != 0)
        bad |= pany(used > self.layout.counts)
        bad |= psum(engines) < 1
        bad |= psum(train) < 1
        bad |= pany((train > 0) & (self.layout.gpn[None, :] % f["tp"][:, None] != 0))
        return bad.astype(float)

    def _executor_violation(self, f) -> np.ndarray:
        from problems.placement.executors import violation_count

        L = self.layout
        if L.executor is None:
            return np.zeros(len(f["mode"]))
        return violation_count(L.executor, L, f, L.rule_ctx)

    def without_executor(self) -> "PlacementProblem":
        """The same problem (limits, efficiencies) without the executor's rules."""
        if not self.executor.external:
            return self
        lim = self.limits
        return PlacementProblem(self.cluster, self.workload, max_cost_usd_h=lim["max_cost_usd_h"],
                                min_throughput=lim["min_throughput"], max_staleness=lim["max_staleness"],
                                max_mem_frac=lim["max_mem_frac"], efficiencies=self.efficiencies)

    def executor_problem(self, plan: Plan) -> str | None:
        """The first rule of this problem's executor that `plan` breaks, as it is (not repaired)."""
        from problems.placement.executors import why

        L = self.layout
        if L.executor is None:
            return None
        return why(L.executor, L, L.fields(self.encode(plan)[None, :]), L.rule_ctx)

    def executor_refusal(self, plan: Plan) -> str | None:
        """Why this problem's executor cannot run `plan` as planned: the first rule it breaks, or, where
        the executor runs the workload otherwise than it was given (`executor_note`) and the plan was
        scored as given, the memory the plan then needs beyond its GPUs' where it fitted as scored."""
        rule = self.executor_problem(plan)
        if rule is not None or self.executor_note is None or plan.executor == self.executor.name:
            return rule
        frac = float(self.evaluate_plans([plan])["peak_mem_frac"][0])
        if frac > 1.0 and float(self._as_given.evaluate_plans([plan])["peak_mem_frac"][0]) <= 1.0:
            return f"{self.executor_note}; so scored, the plan needs {frac:.0%} of its GPUs' memory (by the model)"
        return None

    @functools.cached_property
    def _as_given(self) -> "PlacementProblem":
        """The problem scoring the workload as given (once for every plan `executor_refusal` checks)."""
        return self.without_executor()

    def evaluate_plans(self, plans: list[Plan]) -> dict[str, np.ndarray]:
        return self.evaluate_matrix(np.array([self.encode(p) for p in plans]))

    # ------------------------------------------------------------ plans
    def encode(self, plan: Plan) -> np.ndarray:
        return self.layout.from_plan(plan, self.cluster)

    def decode(self, x, plan_id: str | None = None, lifetime: bool = True) -> Plan:
        """A repaired vector as a Plan, with the model's predictions in `predicted`."""
        x = self.layout.repair(np.asarray(x, dtype=float))[0]
        r = self.evaluate_matrix(x[None, :])
        pred = {k: float(v[0]) for k, v in r.items()}
        if lifetime:
            pred.update(self.lifetime_peak(x))
        pid = plan_id or "p" + hashlib.sha1(np.round(x, 6).tobytes()).hexdigest()[:10]
        plan = self.layout.to_plan(x, self.cluster, self.cluster_ref, self.workload_ref, pid, pred)
        return with_train_speeds(plan, self.ctx)

    def lifetime_peak(self, x) -> dict[str, float]:
        """Offline lifetime-planned vs caching-allocator peak of one training iteration (GB)."""
        from problems.placement.model.lifetime import iteration_peaks

        f = {k: v[0] for k, v in self.layout.fields(np.atleast_2d(x)).items()}
        return iteration_peaks(self.ctx, f)


def with_train_speeds(plan: Plan, ctx) -> Plan:
    """The plan with each training pool's replica speed, the weights of the model's data split."""
    from problems.placement.model.training import replica_speed

    speed = replica_speed(ctx, np.array([plan.train.tp]), np.array([plan.train.pp]))[0]
    pools = [p.model_copy(update={"train_speed": round(float(speed[i]) / 1e12, 6)}) if p.train_gpus + p.shared_gpus else p
             for i, p in enumerate(plan.pools)]
    return plan.model_copy(update={"pools": pools})


def objectives(r: dict[str, np.ndarray]) -> np.ndarray:
    """The (N, M) minimised objective matrix from an evaluate_matrix result (names.OBJECTIVES order)."""
    return np.column_stack([o.sense * r[o.column] for o in NAMED_OBJECTIVES])
