"""Data-parallel gradient sync across nodes: a node all-reduces what its GPUs hold (hand-computed)."""

import numpy as np

from problems.placement.model.comm import dp_gradient_sync_s

GB = 1e9


def _sync(gpus_per_replica, dp, nodes, gpus_per_node):
    a = lambda v: np.array([v], dtype=float)  # noqa: E731
    return float(dp_gradient_sync_s(a(16 * GB), a(dp), a(gpus_per_replica), a(nodes), a(300 * GB), a(50 * GB),
                                    a(np.inf), a(1), np.array([False]), 0.0, a(gpus_per_node))[0])


def test_a_replica_inside_a_node_sends_its_whole_gradient_over_the_nic():
    # tp 8 on 8-GPU nodes, 4 replicas on 4 nodes: nodes ring-all-reduce 16 GB: 2 * 3/4 * 16 / 50 s,
    # plus the intra-node step over 2 ranks of a 2 GB shard: 2 * 1/2 * 2 / 300 s
    assert np.isclose(_sync(8, 4, 4, 8), 2 * 0.75 * 16 / 50 + 2 * 0.5 * 2 / 300)


def test_a_replica_spanning_nodes_sends_only_its_nodes_shards():
    # tp 8 x pp 4 = 32 GPUs per replica on 8-GPU nodes: a node holds 8/32 of the gradient (4 GB);
    # 4 replicas on 16 nodes: 2 * 15/16 * 4 / 50 s, plus the intra-node step of a 0.5 GB shard
    assert np.isclose(_sync(32, 4, 16, 8), 2 * 15 / 16 * 4 / 50 + 2 * 0.5 * 0.5 / 300)
    # the same layout with 32-GPU nodes holds whole replicas again
    assert np.isclose(_sync(32, 4, 4, 32), 2 * 0.75 * 16 / 50 + 2 * 0.5 * 0.5 / 300)
