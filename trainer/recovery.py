"""Recovery: what a run does when part of it is lost, and the fault-injection points that test it.

    lost rollout engine  -> restarted in its own bundle with the current weights; only its chunks
                            are redone (trainer/groups.py RolloutGroup.restart: inside the step)
    lost training rank   -> every rank replaced (the process group is broken) and restored, with
                            the driver's step, policy version and prompt stream, from the newest
                            valid checkpoint (`Recovery.worker_lost`, `Recovery.restore`)
    lost node            -> told from an actor loss by Ray's node table (the GCS declares a node dead
                            when its health checks fail; `placement.dead_node_of` waits for that),
                            then by --on-node-loss (`Recovery.node_lost`):
                              replace: Ray re-places the node's bundles on the surviving nodes when
                                       the plan's GPU types still fit there; its engines restart in
                                       them, every rank is replaced, all restore from the checkpoint
                              replan:  the re-planner (mosearch train's: the planner on the surviving
                                       cluster, same workload, limits and rule) gives a new plan; the
                                       run is set up again for it and restores from the checkpoint,
                                       resharded to the new layout (trainer/reshard.py)
                              stop:    the run ends with one line naming the resume command
                            (replace or replan that cannot go on stop the same way)
    killed driver        -> `mosearch train --resume` (`Recovery.restore(at_start=True)`)

Every restore rewinds metrics.jsonl and the prompt stream to the checkpoint: steps stay continuous
and every sample is trained once.

Faults are injected for tests with MOSEARCH_INJECT_FAULTS="engine@STEP[:INDEX],worker@STEP[:RANK],
sync@STEP[:INDEX],driver@STEP[:POINT],node@STEP[:RANK]" (see `Fault` for where in its step each fires).
"""

from __future__ import annotations

import os
import re
import signal
from dataclasses import dataclass

from problems.errors import InputError
from trainer import checkpoint as ckpt
from trainer import placement as P
from trainer import reshard
from trainer.groups import ENGINE, WORKER, Lost, NodeLost
from trainer.tasks import PromptSampler

FAULT_ENV = "MOSEARCH_INJECT_FAULTS"
NODE_POLICIES = ("replace", "replan", "stop")  # --on-node-loss; replace is the default


class RunStopped(Exception):
    """The run ends on purpose, resumable from its last checkpoint: the message says why, in one line."""


@dataclass
class Fault:
    """An injected fault in training step `step` (1-based, as in metrics): kill `kind` (engine | worker)
    number `index`, or SIGKILL the driver itself (kind driver; index 0: while the ranks compute the step's
    gradients, 1: while its checkpoint is written, after the ranks saved their state), or (kind node)
    SIGKILL the raylet of the node training rank `index` runs on, while the ranks compute the step's
    gradients, and wait until Ray's node table has that node dead (a test hook: the raylet must be
    a process of this machine)."""

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
        m = re.fullmatch(r"(engine|worker|driver|sync|node)@(\d+)(?::(\d+))?", part)
        if not m or (m[1] == "driver" and int(m[3] or 0) > 1):
            raise InputError(None, FAULT_ENV, f"got {part!r}",
                             "kind@step[:index] with kind engine, worker, sync, node or driver (index 0 or 1)")
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
            if f.kind == "node":
                self._kill_node(d.train.actors[f.index])
                continue
            (d.rollout if f.kind == ENGINE else d.train).kill(f.index)

    def _kill_node(self, actor) -> None:
        """SIGKILL the raylet under `actor` (its parent process), then wait until the GCS has the
        node dead: the fault is in place before the step goes on, on any machine's speed."""
        import time

        import ray

        node_id, pid = P.raylet_of(actor)
        os.kill(pid, signal.SIGKILL)
        end = time.monotonic() + P.NODE_WAIT_S
        while any(n["NodeID"] == node_id and n.get("Alive") for n in ray.nodes()) and time.monotonic() < end:
            time.sleep(0.2)
        self.d.log(f"fault injected: node {node_id[:8]} killed (raylet pid {pid}); Ray has it dead")

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
        """A step ended with an actor lost: recover so that the loop can go on (or re-raise, or
        RunStopped)."""
        if isinstance(lost, NodeLost):
            self.node_lost(lost)
            return
        if lost.role != WORKER:
            raise lost
        self.d.strategy.reset()  # batches drawn ahead: the restored sampler draws them again
        self.worker_lost(lost)

    def node_lost(self, lost: NodeLost) -> None:
        """A node is gone with actors of ours: --on-node-loss replace | replan | stop (module doc)."""
        d = self.d
        failed_step = d.step + 1
        hosts = {p["node_id"] for p in d.placed}
        nodes = P.dead_nodes({k: v for k, v in d.nodes.items() if k in hosts}) or [d.nodes.get(lost.node["node_id"], lost.node)]
        what = "node" + ("s " if len(nodes) > 1 else " ") + ", ".join(
            f"{n['node_id'][:8]} ({n['address']}, {_fmt(n['resources'])})" for n in nodes)
        policy = d.cfg.on_node_loss
        d.log(f"{what} lost in step {failed_step} ({lost.role} {lost.index} with it); --on-node-loss {policy}")
        event = {"lost": "node", "nodes": [n["node_id"] for n in nodes], "failed_step": failed_step}
        if policy == "stop":
            raise RunStopped(f"{what} lost in step {failed_step}")
        found = P.alive()
        d.strategy.reset()  # batches drawn ahead: the restored sampler draws them again
        if policy == "replace":
            missing = P.shortfall(d.plan, found)
            if missing:
                raise RunStopped(f"{what} lost in step {failed_step}; the surviving nodes cannot hold the plan: they "
                                 f"lack {'; '.join(missing)} (--on-node-loss replan re-plans for what is left)")
            if not P.wait_placed(d.placement_groups()):
                raise RunStopped(f"{what} lost in step {failed_step}; Ray did not re-place its bundles on the "
                                 f"surviving nodes within {P.PG_WAIT_S:g} s (free CPUs?)")
            self._replace()
            event["action"] = "replace"
        else:
            old = d.plan.plan_id
            self._replan(found, f"{what} lost in step {failed_step}")
            event.update(action="replan", plan_from=old, plan_to=d.plan.plan_id, plan_file=str(d.plan_file))
        d.placed = d.where_placed()
        event["restored_step"] = d.step
        d.recovered.append(event)
        d.nodes_lost.append(event)
        done = {"replace": "actors re-placed", "replan": f"re-planned ({d.plan.plan_id})"}[event["action"]]
        d.log(f"{what}: {done}; every rank restored to step {d.step}, actors now on "
              f"{len({p['node_id'] for p in d.placed})} node(s)")

    def _replace(self) -> None:
        """The lost node's engines restart in their re-placed bundles; every rank is replaced (a peer
        may be stuck in a collective with a lost one) and all restore from the checkpoint."""
        d = self.d
        for i in P.dead_actors(d.engines):
            d.rollout.restart(i, load=False)  # the restore below gives every engine the weights
        d.train.respawn()
        if d.rollout.asleep:
            d.rollout.wake()
        self.restore(max_step=d.step, at_start=False)

    def _replan(self, found: P.Found, why: str) -> None:
        """A new plan for the surviving cluster from the re-planner; the run set up again for it and
        restored from the checkpoint, resharded to the new layout."""
        d = self.d
        if d.replan is None:
            raise RunStopped(f"{why}; no re-planner in this run (mosearch train --on-node-loss replan gives one)")
        try:
            plan, plan_file = d.replan(found)
        except InputError as err:
            raise RunStopped(f"{why}; re-planning for the surviving nodes failed: {err.line()}") from None
        d.relaunch(plan, plan_file, found)
        self.restore(max_step=d.step, at_start=False)
        d.since_step = d.step  # the summary measures the new plan only

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
            self._load_ranks(path, state)
            d.step, d.version, d.draws = state["step"], state["version"], state["draws"]
            d.sampler.load(state["sampler"])
        d.cursor = {}
        d.records.rewind(d.step, state.get("row") if state else None, keep_eval=not at_start or d.step > 0)
        d.rollout.reset_sync()  # a broadcast in flight went to ranks that are gone
        d.rollout.receive_weights(wait=True, die=self.sync_faults())
        if path is not None and at_start:
            d.log(f"resumed from {path.name} (step {d.step})")

    def _load_ranks(self, path, state: dict) -> None:
        """The checkpoint into the ranks: their own state files when this layout can read them, else
        (a re-planned layout) the full weights resharded, with a fresh optimizer state (noted)."""
        d = self.d
        now = reshard.layout_key(d.layout)
        saved = state.get("layout") or now  # checkpoints written before layouts were recorded
        if reshard.loads_directly(saved, now):
            d.train.run("load", str(path / "state.pt"))
            return
        weights = path / reshard.WEIGHTS
        if not weights.is_file():
            raise RunStopped(f"checkpoint {path.name} was written by layout {_fmt(saved)} and holds no layout-free "
                             f"weights for layout {_fmt(now)} (runs with --on-node-loss replan write them)")
        d.train.run_each(reshard.load_weights, str(weights))
        note = (f"re-planned: weights resharded from {path.name} (layout {_fmt(saved)} -> {_fmt(now)}); the "
                "optimizer state restarted" + (" and so did the PPO value head" if d.cfg.algo == "ppo" else ""))
        d.layout.notes.append(note)
        d.log(f"note: {note}")


def _fmt(d: dict) -> str:
    return " ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in d.items()) or "nothing"
