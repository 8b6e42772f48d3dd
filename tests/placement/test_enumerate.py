"""Exhaustive enumeration: exact space count, the rules that shrink it, and the exact front."""

import itertools

import numpy as np
import pytest

from problems.placement.enumerate import canonical, enumerate_front, nondominated, space_size
from problems.placement.problem import objectives

from tests.placement.conftest import problem


def _dominates(a, b):
    return (a <= b).all() and (a < b).any()


# the mixed-8 enumeration (slow) is tested with the baselines it must cover, in test_baselines.py


def test_nondominated_matches_brute_force():
    rng = np.random.default_rng(0)
    F = np.round(rng.random((700, 4)), 1)  # rounding makes ties and duplicates
    idx = set(nondominated(F).tolist())
    brute = {i for i in range(len(F)) if not any(_dominates(F[j], F[i]) for j in range(len(F)))}
    assert idx == brute


@pytest.mark.parametrize("case", [("mixed-8", "qwen2.5-7b-grpo"), ("mixed-64", "qwen2.5-32b-grpo"),
                                  ("local", "tiny-grpo")])
def test_rules_never_lose_a_plan(case):
    """Each canonical vector is a fixed point of repair and scores no worse on every objective
    and constraint than the vector it replaces (the rules R1-R6 of the module)."""
    p = problem(*case)
    rng = np.random.default_rng(1)
    X = p.layout.repair(p.xl + rng.random((5000, p.n_var)) * (p.xu - p.xl))
    C = canonical(p, X)
    assert (np.abs(C - X).max(axis=1) > 0).mean() > 0.5  # the rules do change most vectors
    assert np.array_equal(p.layout.repair(C), C)
    a, b = p.evaluate_matrix(X), p.evaluate_matrix(C)
    Fa, Fb = objectives(a), objectives(b)
    Ga, Gb = p._constraints(a), p._constraints(b)
    assert (Fb <= Fa + 1e-9 * (1 + np.abs(Fa))).all()
    assert (Gb <= Ga + 1e-9 * (1 + np.abs(Ga))).all()


def test_local_space_is_counted_and_front_exact():
    """On the 2-device local cluster: every discrete vector through repair (axes that repair
    never couples held at one value, then crossed back in) gives exactly space_size distinct
    vectors, and the enumerated front equals the front of all of them."""
    p = problem("local", "tiny-grpo")
    lay = p.layout
    kv = (0.5, 0.9)
    held = ("kv_mem_frac", "log2_max_num_seqs", "log2_micro_batch", "recompute", "optimizer_offload")
    axes = [range(int(lo), int(hi) + 1) for lo, hi in zip(p.xl, p.xu)]
    for name in held:
        axes[lay.g(name)] = [p.xl[lay.g(name)]]
    R = np.unique(lay.repair(np.array(list(itertools.product(*axes)), dtype=float)), axis=0)
    grid = list(itertools.product(kv, *[range(int(p.xl[lay.g(n)]), int(p.xu[lay.g(n)]) + 1) for n in held[1:]]))
    full = np.repeat(R, len(grid), axis=0)
    full[:, [lay.g(n) for n in held]] = np.tile(np.array(grid, dtype=float), (len(R), 1))
    assert np.array_equal(lay.repair(full), full)
    assert len(full) == space_size(p, kv)
    res = enumerate_front(p, kv_grid=kv)
    assert res.n_space == len(full) and res.n_evaluated < res.n_space and res.kept_all
    r = p.evaluate_matrix(full)
    ok = (p._constraints(r) <= 0).all(axis=1)
    F = objectives(r)[ok]
    brute = np.unique(F[nondominated(F)], axis=0)
    assert np.allclose(np.unique(res.front_F, axis=0), brute)
