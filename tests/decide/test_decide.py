"""Knee, limits and weighted choice on hand-made fronts (natural units:
throughput samples/s, cost $/h, peak memory fraction, staleness)."""

import numpy as np
import pytest

from mosearch import decide
from mosearch.decide import Limits


def front(thr, cost, mem=None, stale=None):
    n = len(thr)
    return np.column_stack([thr, cost, mem if mem is not None else np.full(n, 0.5),
                            stale if stale is not None else np.zeros(n)])


def test_knee_is_the_bulge_of_a_convex_front():
    # throughput rises fast up to 2 $/h, then barely: the knee is the plan at 2 $/h
    F = front([1.0, 6.0, 7.0, 7.5, 7.8, 8.0], [1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
    assert decide.knee(F) == 1


def test_knee_moves_with_the_bulge():
    F = front([1.0, 2.0, 3.0, 7.5, 7.8, 8.0], [1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
    assert decide.knee(F) == 3


def test_knee_ignores_order_and_constant_objectives():
    F = front([1.0, 6.0, 7.0, 7.5, 7.8, 8.0], [1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
    perm = np.array([4, 0, 5, 2, 1, 3])
    assert perm[decide.knee(F[perm])] == 1


def test_knee_in_four_objectives_prefers_the_balanced_plan():
    # three extreme plans, each best in one objective and bad in the others, and one balanced plan
    F = np.array([
        [10.0, 10.0, 0.9, 4.0],  # fastest
        [1.0, 1.0, 0.9, 4.0],  # cheapest
        [1.0, 10.0, 0.2, 4.0],  # least memory
        [2.0, 10.0, 0.9, 0.0],  # on-policy
        [8.0, 3.0, 0.4, 1.0],  # balanced
    ])
    assert decide.knee(F) == 4


def test_single_plan_front():
    assert decide.knee(front([3.0], [2.0])) == 0


def test_limits_filter_and_closest():
    F = front([1.0, 5.0, 9.0], [1.0, 4.0, 10.0], stale=[0.0, 2.0, 3.0])
    lim = Limits(max_cost=5.0, min_throughput=4.0)
    assert decide.within(F, lim).tolist() == [False, True, False]
    c = decide.choose(F, lim)
    assert c.index == 1
    none = Limits(max_cost=2.0, min_throughput=8.0)
    c = decide.choose(F, none)
    assert c.index is None
    # plan 0 misses throughput by 7/8, plan 1 misses both by 3/8 + 1, plan 2 misses cost by 4
    assert c.closest.tolist() == [0, 1, 2]


def test_staleness_limit_zero_means_on_policy():
    F = front([5.0, 9.0], [1.0, 1.0], stale=[0.0, 1.5])
    assert decide.choose(F, Limits(max_staleness=0)).index == 0


def test_weights_pull_toward_their_objective():
    F = front([1.0, 6.0, 7.0, 7.5, 7.8, 8.0], [1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
    assert decide.by_weights(F, decide.parse_weights("throughput=1")) == 5
    assert decide.by_weights(F, decide.parse_weights("cost=1")) == 0
    mid = decide.by_weights(F, decide.parse_weights("throughput=1,cost=1"))
    assert mid not in (0, 5)


def test_achievement_reaches_a_concave_part_that_weighted_sums_miss():
    # normalised: A = (0, 1), B = (1, 0), C = (0.6, 0.6): C lies above the line A-B
    F = front([10.0, 0.0, 4.0], [10.0, 0.0, 6.0])
    w = np.array([1.0, 1.0, 0.0, 0.0])
    N = decide.normalise(decide.minimised(F))
    assert np.argmin(N @ w) != 2  # a weighted sum never picks C
    assert decide.by_weights(F, w) == 2


@pytest.mark.parametrize("text", ["speed=1", "throughput", "cost=-1", "cost=x", "throughput=0"])
def test_bad_weights(text):
    with pytest.raises(ValueError):
        decide.parse_weights(text)


def test_choose_with_weights_inside_limits():
    F = front([1.0, 6.0, 7.0, 7.5, 7.8, 8.0], [1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
    c = decide.choose(F, Limits(max_cost=4.5), decide.parse_weights("throughput=1"))
    assert c.index == 3 and c.rule == "weights"
