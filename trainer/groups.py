"""The driver's two worker groups, as Ray actors in the bundles of their placement groups.

- RolloutGroup: one engine per bundle of the rollout placement group; spawning and the in-place
  restart of a lost engine (its incarnation counter tells a redo from a stale result).
- TrainGroup: the ranks of a plan's dp x tp x pp layout; the rank -> data-parallel replica mapping,
  the split of a batch over replicas (in proportion to replica speed, as the performance model
  assumes) and gathering the full weights.
They own what the driver loop should not see; the driver keeps the loop and the fault handling,
and every call here returns Ray refs for it to gather.
"""

from __future__ import annotations

import socket

from trainer import placement as P
from trainer.batch import split


class RolloutGroup:
    def __init__(self, cls, layout: P.Layout, found: P.Found, pg, env: dict, init: dict, seed: int):
        self.cls, self.layout, self.found, self.pg, self.env = cls, layout, found, pg, env
        self.init, self.seed = init, seed  # engine keyword arguments shared by every engine
        self.actors: list = []
        self.gen: list[int] = []  # incarnation of each engine (bumped on each restart)

    def spawn(self) -> list:
        self.actors = [self._spawn(i) for i in range(len(self.layout.engines))]
        self.gen = [0] * len(self.actors)
        return self.actors

    def _spawn(self, i: int):
        """Engine i in bundle i (colocated: half of a shared device; else its tp devices)."""
        lay, e = self.layout, self.layout.engines[i]
        share = 0.5 if lay.colocated else float(e.tp)
        opts = P.actor_options(e.gpu, self.found, share, (self.pg, i))
        return self.cls.options(runtime_env=self.env, **opts).remote(tp=e.tp, seed=self.seed + i, **self.init)

    def restart(self, i: int):
        """Kill engine i and start a new one in the same bundle; returns the old actor."""
        import ray

        old = self.actors[i]
        ray.kill(old, no_restart=True)  # first: the bundle holds one engine
        self.actors[i] = self._spawn(i)
        self.gen[i] += 1
        return old

    def call(self, method: str, *args) -> list:
        return [getattr(a, method).remote(*args) for a in self.actors]


class TrainGroup:
    def __init__(self, cls, layout: P.Layout, found: P.Found, pg, env: dict, share: float, init: dict):
        self.cls, self.layout, self.found, self.pg, self.env, self.share = cls, layout, found, pg, env, share
        self.init = init  # TrainWorker keyword arguments shared by every rank
        self.actors: list = []

    def spawn(self) -> list:
        """Every rank in its bundle, as a fresh process group (a new rendezvous port)."""
        lay, port = self.layout, _free_port()
        self.actors = []
        for r, pool in enumerate(lay.rank_pools):
            opts = P.actor_options(pool.split("@")[0], self.found, self.share, (self.pg, r))
            self.actors.append(self.cls.options(runtime_env=self.env, **opts).remote(
                rank=r, world_size=lay.world, master_port=port, tp=lay.tp, pp=lay.pp, **self.init))
        return self.actors

    def call(self, method: str, *args) -> list:
        """The same call on every rank; their refs in rank order."""
        return [getattr(a, method).remote(*args) for a in self.actors]

    def replica(self, rank: int) -> int:
        return (rank // self.layout.tp) % self.layout.dp

    def accumulate(self, samples: list, n_global: int, last: bool, micro_batch: int) -> list:
        """One chunk's gradients: each dp replica (all its tp and pp ranks) gets its share of the samples."""
        lay = self.layout
        shards = split(samples, lay.replica_weights)
        n_micro = [max(1, -(-len(sh) // micro_batch)) for sh in shards]  # as the model counts them, per replica
        if lay.sharding in ("zero3", "fsdp"):  # FSDP's all-gathers need the same number of passes on every rank
            n_micro = [max(n_micro)] * lay.dp
        return [a.accumulate.remote(shards[self.replica(r)], n_global, n_micro[self.replica(r)], last)
                for r, a in enumerate(self.actors)]

    @property
    def sharded(self) -> bool:
        """True when no single rank holds the whole model (TP/PP cut or FSDP)."""
        lay = self.layout
        return lay.tp > 1 or lay.pp > 1 or (lay.sharding in ("zero3", "fsdp") and lay.dp > 1)

    def state_ref(self):
        """A ref to the full model state (rank 0's): gathering a cut or sharded model is a collective
        every rank joins; a replicated one is rank 0's copy alone."""
        if not self.sharded:
            return self.actors[0].state_items.remote()
        return self.call("state_items")[0]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
