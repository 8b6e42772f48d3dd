"""The training worker group: the ranks of a plan's dp x tp x pp layout as Ray actors.

It owns what the driver loop should not see: one actor per bundle of the train placement group,
the rank -> data-parallel replica mapping, the split of a batch over replicas (in proportion to
replica speed, as the performance model assumes), and the fan-out calls. The driver keeps the loop
and fault handling; every call here returns Ray refs for it to gather.
"""

from __future__ import annotations

import socket

from trainer import placement as P
from trainer.batch import split


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
