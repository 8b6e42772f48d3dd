"""Recovery: what a run does when part of it is lost, and the fault-injection points that test it.

    lost rollout engine  -> restarted in its own bundle with the current weights; only its chunks
                            are redone (trainer/groups.py RolloutGroup.restart: inside the step)
    lost training rank   -> every rank replaced (the process group is broken) and restored, with
                            the driver's step, policy version and prompt stream, from the newest
                            valid checkpoint (`Recovery.worker_lost`, `Recovery.restore`)
    killed driver        -> `mosearch train --resume` (`Recovery.restore(at_start=True)`)

Faults are injected for tests with MOSEARCH_INJECT_FAULTS="engine@STEP[:INDEX],worker@STEP[:RANK],
sync@STEP[:INDEX],driver@STEP[:POINT]" (see `Fault` for where in its step each fires).
"""

from __future__ import annotations

import os
import re
import signal
from dataclasses import dataclass

from problems.errors import InputError
from trainer import checkpoint as ckpt
from trainer.groups import ENGINE, WORKER, Lost
from trainer.tasks import PromptSampler

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


class Recovery:
    """The driver's recovery path: it reads and sets the driver's loop state (step, version,
    prompt stream) and its worker groups."""

    def __init__(self, driver):
        self.d = driver
        self.faults = parse_faults(os.environ.get(FAULT_ENV))

    # -- fault injection (tests) ------------------------------------------------------------------
    def check_faults(self, engines: int, world: int) -> None:
        """Every injected fault names an engine or rank that exists (a driver fault's index is its point)."""
        for f in [f for f in self.faults if f.kind != "driver"]:
            n = engines if f.kind in ("engine", "sync") else world
            if f.index >= n:
                raise InputError(None, FAULT_ENV, f"{f.kind} {f.index} does not exist", f"an index below {n}")

    def inject(self, point: str, step: int) -> None:
        """Test hook: fire the MOSEARCH_INJECT_FAULTS entries due at this point of this step, once each."""
        d = self.d
        for f in [f for f in self.faults if f.point == point and f.step == step]:
            self.faults.remove(f)
            d.log(f"fault injected: killing {f.kind} {f.index} during step {step}")
            if f.kind == "driver":  # a deterministic stand-in for a kill -9 from outside
                os.kill(os.getpid(), signal.SIGKILL)
            (d.rollout if f.kind == ENGINE else d.train).kill(f.index)

    def sync_faults(self) -> set[int]:
        """Test hook: engines that are to die in this step's weight sync (MOSEARCH_INJECT_FAULTS sync@STEP:INDEX)."""
        step = self.d.step
        due = [f for f in self.faults if f.point == "sync" and f.step == step]
        for f in due:
            self.faults.remove(f)
            self.d.log(f"fault injected: engine {f.index} dies in the weight sync of step {step}")
        return {f.index for f in due}

    # -- recovery ---------------------------------------------------------------------------------
    def handle(self, lost: Lost) -> None:
        """A step ended with an actor lost: recover so that the loop can go on (or re-raise)."""
        if lost.role != WORKER:
            raise lost
        self.d.strategy.reset()  # batches drawn ahead: the restored sampler draws them again
        self.worker_lost(lost)

    def worker_lost(self, lost: Lost) -> None:
        """A training rank died: every rank is replaced and all restore from the newest valid
        checkpoint (or the initial model when there is none yet)."""
        d = self.d
        failed_step = d.step + 1
        d.train.respawn()
        if d.rollout.asleep:  # colocated, lost in the training phase: the redone step starts by generating
            d.rollout.wake()
        self.restore(max_step=d.step, at_start=False)
        d.log(f"training rank {lost.index} lost in step {failed_step}: every rank restored to step {d.step}")
        d.recovered.append({"lost": WORKER, "index": lost.index, "failed_step": failed_step,
                            "restored_step": d.step})

    def restore(self, max_step: int | None, at_start: bool) -> None:
        """Load the newest valid checkpoint (at or before `max_step`) into the ranks and the driver,
        rewind metrics.jsonl to it and give the engines its weights. No checkpoint: step 0."""
        d = self.d
        path, state = ckpt.load_newest_valid(d.records.out / "checkpoints", max_step, warn=d.log)
        if path is None:
            d.step = d.version = d.draws = 0
            d.sampler = PromptSampler(len(d.task.train), d.cfg.seed)
            if at_start:
                d.log("resume: no checkpoint yet, starting from step 0")
        else:
            d.train.run("load", str(path / "state.pt"))
            d.step, d.version, d.draws = state["step"], state["version"], state["draws"]
            d.sampler.load(state["sampler"])
        d.cursor = {}
        d.records.rewind(d.step, state.get("row") if state else None, keep_eval=not at_start or d.step > 0)
        d.rollout.reset_sync()  # a broadcast in flight went to ranks that are gone
        d.rollout.receive_weights(wait=True, die=self.sync_faults())
        if path is not None and at_start:
            d.log(f"resumed from {path.name} (step {d.step})")
