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


def per_sample(thr, usd_1k, mem=None, stale=None):
    """Plans given by throughput and $ per 1k samples (cost $/h = $/1k x samples/s x 3.6)."""
    thr, usd_1k = np.asarray(thr, dtype=float), np.asarray(usd_1k, dtype=float)
    return front(thr, usd_1k * thr * 3.6, mem, stale)


def test_knee_is_the_bulge_of_throughput_against_dollars_per_sample():
    # t = (8 - T) / 6 = [1, .33, .17, 0], c = (u - 1) / 2 = [0, .05, .3, 1]: t + c is least at plan 1
    F = per_sample([2.0, 6.0, 7.0, 8.0], [1.0, 1.1, 1.6, 3.0])
    assert decide.knee(F) == 1
    assert decide.usd_per_1k(F) == pytest.approx([1.0, 1.1, 1.6, 3.0])


def test_knee_moves_with_the_bulge():
    # t + c = 1 at both ends, more in between: the ends tie, the cheaper per sample wins
    F = per_sample([2.0, 6.0, 7.0, 8.0], [1.0, 1.9, 2.0, 2.1])
    assert decide.knee(F) == 0
    assert decide.knee(F[[3, 0]]) == 1  # two plans only: the same
    F = per_sample([2.0, 3.0, 7.8, 8.0], [1.0, 1.9, 1.1, 3.0])  # plan 2: t = .03, c = .05
    assert decide.knee(F) == 2


def test_a_plan_fastest_and_cheapest_per_sample_is_the_knee():
    # the case: a small plan at 0.83 $/1k while one twice as fast costs 0.71 $/1k
    F = per_sample([2.0, 4.0, 3.0], [0.83, 0.71, 0.9])
    assert decide.knee(F) == 1


def test_knee_ignores_order():
    F = per_sample([2.0, 6.0, 7.0, 8.0, 5.0], [1.0, 1.1, 1.6, 3.0, 2.0])
    perm = np.array([4, 0, 3, 2, 1])
    assert perm[decide.knee(F[perm])] == 1


def test_memory_breaks_ties_at_the_knee_but_does_not_move_it():
    # plan 3 is plan 1 within the resolution, with far less memory; plan 4 saves memory by being slow
    F = per_sample([2.0, 6.0, 8.0, 5.97, 3.0], [1.0, 1.1, 3.0, 1.105, 1.2], mem=[0.5, 0.9, 0.5, 0.4, 0.1])
    assert decide.knee(F) == 3
    F[3, 0] = 5.5  # now 8% slower: no longer the same point
    assert decide.knee(F) == 1
    # a plan 20% faster at the knee's $ per sample and little memory is a different point, not a tie
    G = per_sample([2.0, 6.0, 8.0, 7.2], [1.0, 1.1, 3.0, 1.12], mem=[0.5, 0.9, 0.5, 0.1])
    assert decide.knee(G[[0, 1, 2]]) == 1
    assert decide.knee(G) == 3  # it is the better knee: faster at almost the same $ per sample


def test_a_slightly_worse_plan_does_not_replace_the_knee_for_a_small_memory_saving():
    # same $/h; plan 1 is slower and dearer per sample, saving 0.07 of memory (< 0.15): not a reason
    F = per_sample([6.93, 6.61, 2.0, 8.0], [1.380, 1.445, 1.2, 3.0], mem=[0.83, 0.76, 0.5, 0.5])
    assert decide.knee(F) == 0


def test_single_plan_front():
    assert decide.knee(front([3.0], [2.0])) == 0


def test_budget_gives_the_fastest_plan_within_it():
    # the runs: a budget of 15 $/h chose 2.41 samples/s at 7.2 $/h though 5.04 at 14.4 existed
    F = front([2.41, 5.04, 10.0, 25.7], [7.2, 14.4, 88.0, 472.0])
    assert decide.choose(F, Limits(max_cost=15)).index == 1
    assert decide.choose(F, Limits(max_cost=500)).index == 3
    assert decide.choose(F, Limits(max_cost=15)).rule == "fastest"


def test_floor_gives_the_cheapest_plan_reaching_it():
    F = front([2.41, 5.04, 10.0, 25.7], [7.2, 14.4, 88.0, 472.0])
    c = decide.choose(F, Limits(min_throughput=5.0))
    assert c.index == 1 and c.rule == "cheapest"
    assert decide.choose(F, Limits(min_throughput=11)).index == 3


def test_ties_within_the_resolution():
    # 1% apart in throughput: equally fast, so the cheaper; equal cost: less memory, then less staleness
    F = front([10.0, 9.9, 9.9, 9.9], [30.0, 20.0, 20.0, 20.0], mem=[0.5, 0.7, 0.6, 0.6], stale=[0, 1, 1, 0.5])
    assert decide.choose(F, Limits(max_cost=100)).index == 3
    res = decide.RESOLUTION.copy()
    res[0] = 0.0  # no resolution: the strictly fastest
    assert decide.choose(F, Limits(max_cost=100), res=res).index == 0
    # the cheapest reaching 5: 20 and 20.3 $/h are equally cheap at 2%, so the faster
    G = front([6.0, 7.0, 9.0], [20.0, 20.3, 25.0])
    assert decide.choose(G, Limits(min_throughput=5)).index == 1


def brute_choice(F, limits, rule, res):
    """The documented rules as plain loops."""
    ok = [i for i in range(len(F)) if (limits.max_cost is None or F[i][1] <= limits.max_cost)
          and (limits.min_throughput is None or F[i][0] >= limits.min_throughput)
          and (limits.max_mem_frac is None or F[i][2] <= limits.max_mem_frac)
          and (limits.max_staleness is None or F[i][3] <= limits.max_staleness)]
    if not ok:
        return None
    return cascade_scan(F, ok, res, (0, 1, 2, 3) if rule == "fastest" else (1, 0, 2, 3))


def cascade_scan(F, ok, res, order):
    """Keep plans within the resolution of the best in each objective of `order` in turn; then
    the best in them exactly, in that order."""
    sign = [-1, 1, 1, 1]
    for j in order:
        if j == 0:
            best = max(F[i][0] for i in ok)
            ok = [i for i in ok if F[i][0] * (1 + res[0]) >= best]
        elif j == 1:
            best = min(F[i][1] for i in ok)
            ok = [i for i in ok if F[i][1] <= best * (1 + res[1])]
        else:
            best = min(F[i][j] for i in ok)
            ok = [i for i in ok if F[i][j] <= best + res[j]]
    return min(ok, key=lambda i: (*(sign[j] * F[i][j] for j in order), i))


@pytest.mark.parametrize("seed", range(6))
def test_rules_match_a_plain_scan(seed):
    rng = np.random.default_rng(seed)
    n = 400
    thr = np.round(rng.uniform(1, 30, n), 1)  # coarse: many ties
    F = front(thr, np.round(thr * rng.uniform(1, 4, n)), np.round(rng.uniform(0.3, 1, n), 2),
              rng.integers(0, 3, n).astype(float))
    for _ in range(10):
        lim = Limits(max_cost=float(rng.uniform(5, 120)), max_mem_frac=0.8 if rng.random() < 0.5 else None)
        c = decide.choose(F, lim)
        assert c.index == brute_choice(F, lim, "fastest", decide.RESOLUTION)
        lim = Limits(min_throughput=float(rng.uniform(1, 30)), max_staleness=float(rng.choice([0, 1, 2])))
        c = decide.choose(F, lim)
        assert c.index == brute_choice(F, lim, "cheapest", decide.RESOLUTION)


def test_epsilon_front_matches_every_plan_within_the_resolution():
    rng = np.random.default_rng(3)
    n = 600
    thr = rng.uniform(1, 30, n)
    F = front(thr, thr * rng.uniform(1, 3, n) + rng.uniform(0, 5, n), rng.uniform(0.3, 1, n),
              rng.integers(0, 3, n) * rng.uniform(0.9, 1.1, n))
    idx = decide.epsilon_front(F)
    r = decide.RESOLUTION
    E = F[idx]
    assert 0 < len(idx) < n
    for f in F:  # some front plan is within the resolution of it in every objective
        assert any(e[0] * (1 + r[0]) >= f[0] and e[1] <= f[1] * (1 + r[1]) and e[2] <= f[2] + r[2]
                   and e[3] <= f[3] + r[3] for e in E)
    M = decide.minimised(F)
    for e in decide.minimised(E):  # and nothing found beats a front plan at all
        assert not ((M <= e).all(axis=1) & (M < e).any(axis=1)).any()


def test_neighbours_on_the_front():
    F = front([2.0, 4.0, 6.0, 8.0], [2.0, 4.0, 6.0, 8.0])
    assert decide.neighbours(F, F[1]) == (2, 0)
    assert decide.neighbours(F, F[3]) == (None, 2)
    assert decide.neighbours(F, F[0]) == (1, None)


def test_resolution_parsing():
    r = decide.parse_resolution("throughput=0.05, staleness=1")
    assert r.tolist() == [0.05, decide.RESOLUTION[1], decide.RESOLUTION[2], 1.0]
    for bad in ("speed=1", "cost", "memory=-1", "cost=x"):
        with pytest.raises(ValueError):
            decide.parse_resolution(bad)


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


def test_found_front_drops_plans_beaten_in_throughput_and_cost_beyond_the_resolution():
    # the case: a $325/h plan (half of it egress) kept only for a little less memory than a
    # faster, cheaper one; and plans that each win somewhere by more than the resolution
    F = front([52.0, 48.0, 30.0, 49.0, 20.0, 20.5],
              [160.0, 325.0, 100.0, 158.0, 90.0, 60.0],
              [0.80, 0.70, 0.60, 0.40, 0.50, 0.95],
              [1.0, 1.0, 0.0, 1.0, 0.0, 0.0])
    kept = decide.found_front(F).tolist()
    # plan 1 goes: plan 0 is faster (8%) and cheaper by more than 5%, its memory 0.10 worse (< 0.15).
    # Plan 3 is not beaten by 0 (cost within 5%), plan 4 not by 2 (2 costs more): both stay
    assert kept == [0, 2, 3, 4, 5]
    # by the memory margin alone: with the memory 0.16 worse the $325 plan stays
    F2 = F.copy()
    F2[1, 2] = 0.80 - 0.16
    assert 1 in decide.found_front(F2).tolist()
    # plan 0 only 4% faster than plan 1: not beaten beyond the resolution, so it stays
    F3 = F.copy()
    F3[0, 0] = 48.0 * 1.04
    assert 1 in decide.found_front(F3).tolist()


def test_found_front_keeps_every_plan_unbeaten_beyond_the_resolution():
    rng = np.random.default_rng(4)
    n = 400
    thr = rng.uniform(1, 30, n)
    F = front(thr, thr * rng.uniform(1, 3, n), rng.uniform(0.3, 1, n), rng.integers(0, 3, n).astype(float))
    kept = set(decide.found_front(F).tolist())
    r = decide.RESOLUTION
    for j, b in enumerate(F):
        beaten = any(a[0] > b[0] * (1 + r[0]) and a[1] * (1 + r[1]) < b[1] and a[2] <= b[2] + r[2]
                     and a[3] <= b[3] + r[3] and a[0] * (1 + r[0]) >= b[0] and a[1] <= b[1] * (1 + r[1]) for a in F)
        assert (j not in kept) == beaten
    assert 0 < len(kept) < n
