"""The driver's two worker groups: Ray actors in the bundles of their placement groups.

- RolloutGroup: one engine per bundle of the rollout placement group. Generates chunks of prompts,
  sleeps and wakes (colocated), restarts a lost engine in its bundle with the trainer's current
  weights (an incarnation counter tells a redo from a stale result), and receives the weights along
  the plan's route (a broadcast, or the object store; retried, then the fallback).
- TrainGroup: the ranks of a plan's dp x tp x pp layout. Splits a batch over dp replicas (in
  proportion to replica speed, as the performance model assumes), accumulates and applies updates,
  offloads/onloads, saves/loads, holds the policy version and the full state for weight sync, and
  replaces every rank when one is lost (the process group is broken).
- Roster: both groups' actors by Ray id, so an actor error names the role and index it is about;
  `gather` waits on calls and fails fast on the first lost actor.

The driver's loop sees only these calls; every `ray` call of the trainer's control path is here.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from problems.placement.names import PARAM_SHARDINGS, params_sharded_by
from trainer import placement as P
from trainer.batch import Sample, split

ENGINE, WORKER = "engine", "worker"  # the two roles an actor can have
BROADCAST, OBJECT_STORE = "broadcast", "object_store"  # weight-sync paths


class Lost(Exception):
    """An actor of ours died: role 'engine' or 'worker' and its index."""

    def __init__(self, role: str, index: int, detail: str = ""):
        super().__init__(f"{role} {index} lost: {detail}")
        self.role, self.index = role, index


class NodeLost(Lost):
    """An actor of ours died with its node (Ray's node table has the node dead): nothing is restarted
    in place (its bundle is gone with the node); the driver's recovery decides (trainer/recovery.py)."""

    def __init__(self, role: str, index: int, node: dict, detail: str = ""):
        super().__init__(role, index, detail)
        self.node = node  # node_id, address, resources (P.dead_node_of)


def _in_place(lost: Lost) -> bool:
    """An engine lost on its own: restarted in its bundle. A rank, or anything lost with its node, goes up."""
    return lost.role == ENGINE and not isinstance(lost, NodeLost)


@dataclass
class Chunk:
    """Prompts sent to one engine in one call, and the sample ids they will get."""

    step: int
    prompt_idx: list[int]
    draws: list[int]  # run-wide prompt draw counter of each prompt
    prompts: list[list[int]]  # their token ids (a redo sends exactly these again)
    seed: int = 0
    engine: int = 0
    gen: int = 0  # the engine's incarnation the call went to (bumped on each restart)
    ref: object = None


class Roster:
    """Our actors by Ray id across both groups, and the ids of those we replaced."""

    def __init__(self):
        self.ids: dict[str, tuple[str, int]] = {}  # Ray actor id -> (role, index)
        self.retired: set[str] = set()
        self.groups: list = []  # probed in this order when an error names no actor of ours

    def add(self, role: str, i: int, actor) -> None:
        self.ids[actor._actor_id.hex()] = (role, i)

    def retire(self, actor) -> None:
        self.retired.add(actor._actor_id.hex())
        self.ids.pop(actor._actor_id.hex(), None)

    def lost(self, err) -> Lost | None:
        """Which of our actors an actor error is about; None if it is one we already replaced."""
        import ray
        from ray.exceptions import GetTimeoutError, RayActorError

        aid = getattr(err, "actor_id", None) or ""
        if aid in self.retired:
            return None
        if aid in self.ids:
            return self._classify(aid, *self.ids[aid], str(err).splitlines()[0] if str(err) else "")
        # Unknown id: probe every actor; an unidentified failure restores the ranks (the safe answer).
        for g in self.groups:
            for i, a in enumerate(g.actors):
                try:
                    ray.get(getattr(a, g.probe).remote(), timeout=60)
                except RayActorError:
                    return self._classify(a._actor_id.hex(), g.role, i, "found dead by probe")
                except GetTimeoutError:
                    pass
        return Lost(WORKER, 0, f"unidentified actor failure: {err}")

    @staticmethod
    def _classify(aid: str, role: str, i: int, detail: str) -> Lost:
        """Lost, or NodeLost when Ray's node table says the actor's node is gone too."""
        node = P.dead_node_of(aid)
        return NodeLost(role, i, node, detail) if node else Lost(role, i, detail)

    def gather(self, refs: list) -> list:
        """ray.get that fails fast: the first lost actor raises Lost without waiting on the others
        (a rank whose peer died may block in a collective)."""
        import ray
        from ray.exceptions import RayActorError

        got, left = {}, list(refs)
        while left:
            done, left = ray.wait(left, num_returns=1)
            try:
                got[done[0]] = ray.get(done[0])
            except RayActorError as err:
                lost = self.lost(err)
                if lost is not None:
                    raise lost from err
                got[done[0]] = None
        return [got[r] for r in refs]


def _kill(actor) -> None:
    import ray

    ray.kill(actor, no_restart=True)


class TrainGroup:
    role, probe = WORKER, "memory"

    def __init__(self, cls, layout: P.Layout, found: P.Found, pg, env: dict, share: float, init: dict,
                 roster: Roster, owns_pg: bool = True):
        self.cls, self.layout, self.found, self.pg, self.env, self.share = cls, layout, found, pg, env, share
        self.owns_pg = owns_pg  # colocated: the bundles are the rollout group's, shared
        self.init = init  # TrainWorker keyword arguments shared by every rank
        self.roster = roster
        self.actors: list = []
        self.rendezvous: tuple[str, int] | None = None  # rank 0's node address and port (spawn)
        self.version = 0  # the policy version the ranks hold (one per training step)

    def spawn(self) -> list:
        """Every rank in its bundle, as a fresh process group (a new rendezvous port on rank 0's node)."""
        from trainer.weight_sync import free_port

        lay = self.layout
        self.rendezvous = rendezvous_address(self.pg, 0, self.env) if lay.world > 1 else ("127.0.0.1", free_port())
        host, port = self.rendezvous
        self.actors = []
        for r, pool in enumerate(lay.rank_pools):
            opts = P.actor_options(pool.split("@")[0], self.found, self.share, (self.pg, r))
            self.actors.append(self.cls.options(runtime_env=self.env, **opts).remote(
                rank=r, world_size=lay.world, master_addr=host, master_port=port, tp=lay.tp, pp=lay.pp, ep=lay.ep,
                **self.init))
            self.roster.add(WORKER, r, self.actors[-1])
        return self.actors

    def respawn(self) -> None:
        """A rank died: its process group is broken, so every rank is replaced (the caller restores
        their state from a checkpoint)."""
        for w in self.actors:
            self.roster.retire(w)
            _kill(w)
        self.spawn()

    def kill(self, rank: int) -> None:
        """Test hook: kill rank `rank` (fault injection)."""
        _kill(self.actors[rank])

    def call(self, method: str, *args) -> list:
        """The same call on every rank; their refs in rank order."""
        return [getattr(a, method).remote(*args) for a in self.actors]

    def run(self, method: str, *args) -> list:
        """The same call on every rank, waited for; their results in rank order (Lost on a dead actor)."""
        return self.roster.gather(self.call(method, *args))

    def run_each(self, fn, *args) -> list:
        """`fn(worker, *args)` inside every rank (Ray's __ray_call__), waited for; results in rank order."""
        return self.roster.gather([a.__ray_call__.remote(fn, *args) for a in self.actors])

    def replica(self, rank: int) -> int:
        return (rank // self.layout.tp) % self.layout.dp

    def accumulate(self, samples: list, n_global: int, last: bool, micro_batch: int) -> list:
        """One chunk's gradients: each dp replica (all its tp and pp ranks) gets its share of the samples."""
        lay = self.layout
        shards = split(samples, lay.replica_weights)
        n_micro = [max(1, -(-len(sh) // micro_batch)) for sh in shards]  # as the model counts them, per replica
        # FSDP's all-gathers, and EP's all-to-alls in every MoE layer, need the same number of passes on every rank
        if lay.sharding in PARAM_SHARDINGS or lay.ep > 1:
            n_micro = [max(n_micro)] * lay.dp
        return [a.accumulate.remote(shards[self.replica(r)], n_global, n_micro[self.replica(r)], last)
                for r, a in enumerate(self.actors)]

    def apply(self, refs: list, lr: float) -> list[dict]:
        """Wait for the accumulations in flight, then one optimizer step on every rank; their stats."""
        self.roster.gather(refs)
        return self.run("apply", lr)

    def update(self, samples: list[Sample], n_global: int, lr: float, mini_batches: int, group_size: int,
               micro_batch: int, computing=lambda: None) -> list[dict]:
        """Train on a whole batch in `mini_batches` optimizer updates, each on consecutive whole groups
        (GRPO's advantages are per group; one update divides by `n_global`, several by their slice's
        size); returns each rank's stats, busy time summed over updates. `computing` runs while the
        first update's gradients are being computed (a fault-injection point)."""
        n = group_size
        groups = [samples[i:i + n] for i in range(0, len(samples), n)]
        u = max(1, min(mini_batches, len(groups)))
        cuts = [round(len(groups) * q / u) for q in range(u + 1)]
        total: list[dict] | None = None
        first: list[float] = []  # each rank's behaviour log-prob gap in the first update: the synced weights'
        for q in range(u):
            part = [x for g in groups[cuts[q]:cuts[q + 1]] for x in g]
            refs = self.accumulate(part, len(part) if u > 1 else n_global, True, micro_batch)
            if q == 0:
                computing()
            stats = self.apply(refs, lr)
            if q == 0:
                first = [st.get("behav_abs_diff_mean", 0.0) for st in stats]
            if total is not None:
                for a, b in zip(stats, total):
                    a["busy_s"] += b["busy_s"]
                    a["tokens"] += b["tokens"]
            total = stats
        for st, f in zip(total, first):
            st["behav_abs_diff_first"] = f
        return total

    @property
    def sharded(self) -> bool:
        """True when no single rank holds the whole model (TP/PP cut, FSDP or EP)."""
        lay = self.layout
        return lay.tp > 1 or lay.pp > 1 or lay.ep > 1 or params_sharded_by(lay.sharding, lay.dp)

    def state_ref(self):
        """A ref to the full model state (rank 0's): gathering a cut or sharded model is a collective
        every rank joins; a replicated one is rank 0's copy alone."""
        if not self.sharded:
            return self.actors[0].state_items.remote()
        return self.call("state_items")[0]

    def shutdown(self) -> None:
        import ray

        for a in self.actors:
            try:
                ray.get(a.shutdown.remote(), timeout=10)
            except Exception:  # already dead: nothing to close
                pass
        for a in self.actors:
            ray.kill(a)
        self.actors = []
        if self.owns_pg:
            _release(self.pg)
        self.pg = None


class RolloutGroup:
    role, probe = ENGINE, "get_version"

    def __init__(self, cls, layout: P.Layout, found: P.Found, pg, env: dict, init: dict, seed: int,
                 roster: Roster, source: TrainGroup, sampling: dict, log=print, events: list | None = None):
        self.cls, self.layout, self.found, self.pg, self.env = cls, layout, found, pg, env
        self.init, self.seed = init, seed  # engine keyword arguments shared by every engine
        self.roster, self.source = roster, source  # source: the train group whose weights the engines take
        self.sampling = sampling  # n, max_new_tokens, temperature of training rollouts
        self.log = log
        self.events = events if events is not None else []  # faults survived, for the metrics row
        self.actors: list = []
        self.gen: list[int] = []  # incarnation of each engine (bumped on each restart)
        self.asleep = False  # colocated: the engines were put to sleep for the training phase
        # weight sync (set up by setup_sync)
        self.sync_path, self.sync_route, self.sync_regions, self.sync_groups = BROADCAST, None, {}, []
        self.bucket_bytes = 0
        self._sync_key: tuple = ()  # actors the sync groups were built for
        self._bcast: dict | None = None  # the broadcast in flight (async) or None
        self.pending: list = []  # refs of a sync not waited for (async)
        self.last_sync: dict = {}  # the last finished sync's split, for the metrics row
        self.fallbacks = 0  # syncs that went through the object store after the broadcast failed

    # -- spawning and restart ---------------------------------------------------------------------
    def spawn(self) -> list:
        self.actors = [self._spawn(i) for i in range(len(self.layout.engines))]
        self.gen = [0] * len(self.actors)
        return self.actors

    def _spawn(self, i: int):
        """Engine i in bundle i (colocated: half of a shared device; else its tp devices)."""
        lay, e = self.layout, self.layout.engines[i]
        share = 0.5 if lay.colocated else float(e.tp)
        opts = P.actor_options(e.gpu, self.found, share, (self.pg, i))
        actor = self.cls.options(runtime_env=self.env, **opts).remote(tp=e.tp, seed=self.seed + i, **self.init)
        self.roster.add(ENGINE, i, actor)
        return actor

    def ready(self) -> list[int]:
        """Wait until every engine has started; each engine's tensor-parallel degree as it reports
        it (the processes holding its model)."""
        import ray

        return ray.get(self.call("tp_workers"))

    def kill(self, i: int) -> None:
        """Test hook: kill engine i (fault injection)."""
        _kill(self.actors[i])

    def restart(self, i: int, load: bool = True) -> None:
        """Replace engine i in its own bundle and load the trainer's current weights (the version its
        lost calls were for); asleep if the others are."""
        t0 = time.perf_counter()
        old = self.actors[i]
        self.roster.retire(old)
        _kill(old)  # first: the bundle holds one engine
        self.actors[i] = self._spawn(i)
        self.gen[i] += 1
        version = self.source.version
        if load:
            self._finish_sync(self._start_sync(version))
        if self.asleep:
            self.roster.gather([self.actors[i].sleep.remote()])
        self.log(f"rollout engine {i} lost: restarted in its bundle"
                 + (f" with weights v{version}" if load else "") + f" ({time.perf_counter() - t0:.1f}s)")
        self.events.append({"lost": ENGINE, "index": i, "version": version})

    def wait(self, refs: list) -> list:
        """Wait on calls to engines; an engine that died is restarted at once (with the current weights)."""
        return self._each(refs, self.restart)

    def _each(self, refs: list, on_lost) -> list:
        """Results of calls to engines, one by one; a lost engine gives None and `on_lost(index)`."""
        out = []
        for ref in refs:
            try:
                out.append(self.roster.gather([ref])[0])
            except Lost as lost:
                if not _in_place(lost):
                    raise
                on_lost(lost.index)
                out.append(None)
        return out

    def call(self, method: str, *args) -> list:
        return [getattr(a, method).remote(*args) for a in self.actors]

    # -- generation -------------------------------------------------------------------------------
    def send(self, ch: Chunk) -> None:
        """(Re)send a chunk to its engine: a redo after a restart asks for exactly the same rollouts."""
        sp = self.sampling
        ch.gen = self.gen[ch.engine]
        ch.ref = self.actors[ch.engine].generate.remote(ch.prompts, sp["n"], sp["max_new_tokens"],
                                                        sp["temperature"], ch.seed)

    def next_chunk(self, pending: dict) -> tuple[Chunk, dict | None]:
        """The next finished chunk of `pending` (ref -> chunk) and its result. A chunk whose engine
        died is sent again (to the restarted engine) and comes back with None; a lost training rank
        raises Lost."""
        import ray
        from ray.exceptions import RayActorError

        done, _ = ray.wait(list(pending), num_returns=1)
        ch = pending.pop(done[0])
        try:
            return ch, ray.get(done[0])
        except RayActorError as err:
            lost = self.roster.lost(err)
            if lost is not None and not _in_place(lost):
                raise lost from err
            if ch.gen == self.gen[ch.engine]:  # not yet restarted since this chunk went out
                self.restart(ch.engine)
            self.send(ch)  # redo exactly this chunk's rollouts, nothing else
            pending[ch.ref] = ch
            return ch, None

    def generate_all(self, prompts: list[list[int]], max_new_tokens: int) -> list[tuple[np.ndarray, dict]]:
        """Greedy completions (n=1, temperature 0) of `prompts` split across the engines: (indices, result)
        per engine; a lost engine is restarted and the whole call redone (up to 3 times)."""
        for attempt in range(4):
            parts = [p for p in np.array_split(np.arange(len(prompts)), len(self.actors)) if len(p)]
            refs = [e.generate.remote([prompts[i] for i in part], 1, max_new_tokens, 0.0, 0)
                    for e, part in zip(self.actors, parts)]
            try:
                return list(zip(parts, self.roster.gather(refs)))
            except Lost as lost:
                if not _in_place(lost) or attempt == 3:
                    raise
                self.restart(lost.index)

    # -- colocated context switch -----------------------------------------------------------------
    def sleep(self) -> None:
        self.asleep = True
        self.wait(self.call("sleep"))

    def wake(self) -> None:
        self.asleep = False
        self.wait(self.call("wake_up"))

    # -- weight sync ------------------------------------------------------------------------------
    def setup_sync(self, plan, choice: str, bucket_bytes: int) -> None:
        """The plan's weight-sync route as broadcast groups (trainer/weight_sync.py); the object
        store where the engines cannot receive a broadcast (noted in the layout)."""
        import ray

        from trainer import weight_sync as WS

        lay = self.layout
        region = {p.pool: p.region for p in plan.pools}
        self.bucket_bytes = bucket_bytes
        self.sync_route = plan.weight_sync.route
        self.sync_regions = {"engine_regions": [region[e.pool] for e in lay.engines],
                             "engine_gpus": [e.gpu for e in lay.engines],
                             "sender_region": region[lay.train_pools[0]]}
        self.sync_groups = WS.route_groups(self.sync_route, self.sync_regions["engine_regions"],
                                           self.sync_regions["sender_region"])
        self.sync_path = BROADCAST
        if choice == OBJECT_STORE:
            self.sync_path = OBJECT_STORE
            lay.notes.append("weight sync: object store, not the planned broadcast (asked for: "
                             "weight_sync=object_store)")
        elif not all(ray.get(self.call("sync_capable"))):
            self.sync_path = OBJECT_STORE
            lay.notes.append("weight sync: object store, not the planned broadcast (rollout TP > 1 "
                             "on CUDA runs vLLM's workers in other processes)")

    def receive_weights(self, wait: bool, die: set[int] = frozenset()) -> None:
        """Take the train group's current weights along the plan's route; without `wait` (async) the
        sync stays in flight (the previous one is finished, and its figures recorded, when the next
        one starts). `die`: engines to kill mid-sync (fault injection)."""
        if self._bcast is not None:
            self._finish_sync(self._bcast)
        sync = self._start_sync(self.source.version, die)
        if wait:
            self._finish_sync(sync)
        else:
            self._bcast, self.pending = sync, sync["w"] + sync["e"]

    def wait_pending(self) -> None:
        """Wait for a sync left in flight (before an evaluation, which must see these weights)."""
        if self.pending:
            self.wait(self.pending)

    def reset_sync(self) -> None:
        """Forget a sync in flight: it went to ranks that are gone."""
        self._bcast = None
        self.pending = []

    def _start_sync(self, version: int, die: set[int] = frozenset(), path: str | None = None) -> dict:
        """Start sending weights `version`: a broadcast on the route's groups (rebuilt when an actor
        was replaced), or the object store. Returns the calls in flight."""
        from trainer import weight_sync as WS

        train = self.source
        if (path or self.sync_path) == OBJECT_STORE:
            items = train.state_ref()
            return {"path": OBJECT_STORE, "version": version, "w": [],
                    "e": [e.update_weights.remote(items, version) for e in self.actors]}
        key = tuple(a._actor_id.hex() for a in train.actors + self.actors)
        if key != self._sync_key:
            import ray

            colocated = self.layout.colocated
            try:
                joined = self.roster.gather(WS.connect(self.sync_groups, train.actors, self.actors, share=colocated))
            except ray.exceptions.RayActorError as err:  # from a source's address call
                raise self.roster.lost(err) or Lost(ENGINE, 0, str(err)) from err
            self._sync_key = key
            if colocated and self.found.cuda and not all(v for j in joined for v in j.values()):
                # an engine and a rank share each GPU: NCCL cannot put two ranks of a group on one
                # device, and an engine on another GPU than the sender cannot map its CUDA IPC handle
                for a in train.actors + self.actors:
                    a.sync_close.remote()
                self.sync_path, self._sync_key = OBJECT_STORE, ()
                self.layout.notes.append("weight sync: object store, not the planned broadcast (colocated on "
                                         "CUDA with an engine on another GPU than training rank 0)")
                return self._start_sync(version, die, OBJECT_STORE)
        return {"path": BROADCAST, "version": version, "t0": time.perf_counter(),
                "w": train.call("broadcast_weights", version, self.bucket_bytes),
                "e": [e.receive_weights.remote(version, 1 if i in die else None) for i, e in enumerate(self.actors)]}

    def _finish_sync(self, sync: dict, retry: bool = True) -> None:
        """Wait for a started sync. A dead engine is restarted; a broken broadcast is redone on
        rebuilt groups (every engine: the live ones may hold a partial update), and if that fails
        too, the object store carries this version (counted in the summary)."""
        self._bcast = None
        if sync["path"] == OBJECT_STORE:
            self.wait(sync["e"])
            self.last_sync = {"path": OBJECT_STORE, "version": sync["version"]}
            return
        sent = self.roster.gather(sync["w"])  # a lost rank raises Lost('worker')
        dead: list[int] = []  # restarted after the others finish, then every engine is resent
        got = self._each(sync["e"], dead.append)
        errors = [x["error"] for x in sent + got if x and x.get("error")]
        if dead or errors or any(x is None for x in got):
            for i in dead:
                self.restart(i, load=False)
            self._sync_key = ()
            # resend what the ranks hold now (async: they may have moved on since this sync started)
            version = self.source.version
            if retry:
                self._finish_sync(self._start_sync(version), retry=False)
            else:
                self.log(f"weight sync v{version}: broadcast failed twice ({errors[:1]}); using the object store")
                self.fallbacks += 1
                self._finish_sync(self._start_sync(version, path=OBJECT_STORE))
            return
        src = sent[0]
        self.last_sync = {"path": BROADCAST, "route": self.sync_route, "version": sync["version"],
                          "gather_s": max(x["gather_s"] for x in sent), "transfer_s": src["transfer_s"],
                          "load_s": max(x["load_s"] for x in got), "recv_s": max(x["transfer_s"] for x in got),
                          "bytes_sent": src["bytes"], "copy_bytes": got[0]["bytes"], "buckets": src["buckets"],
                          "bucket_bytes": self.bucket_bytes, "transport": src.get("transport", "bytes"),
                          "shared_bytes": src.get("shared_bytes", 0)}

    def shutdown(self) -> None:
        import ray

        for a in self.actors:
            ray.kill(a)
        self.actors = []
        _release(self.pg)
        self.pg = None


def _release(pg) -> None:
    """Give a group's placement bundles back to Ray."""
    if pg is not None:
        from ray.util.placement_group import remove_placement_group

        remove_placement_group(pg)


def rendezvous_address(pg, bundle: int, env: dict) -> tuple[str, int]:
    """The address of the node holding `bundle` of `pg` and a free port on it: where rank 0 (placed
    in that bundle) serves the group's rendezvous, so ranks on other machines can reach it (a
    loopback address would send each rank to its own machine). Found by a task that takes no
    resources, pinned to the bundle's node."""
    import ray
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    from trainer.weight_sync import free_address

    probe = ray.remote(num_cpus=0)(free_address).options(
        runtime_env=env, scheduling_strategy=PlacementGroupSchedulingStrategy(pg, bundle))
    return tuple(ray.get(probe.remote()))


