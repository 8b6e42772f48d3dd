"""The project's one non-dominated filter and its epsilon front, against plain loops."""

import numpy as np
import pytest

from problems.pareto import coarsely_dominated, covers, epsilon_front, merge, non_dominated


def _dominates(a, b):
    return bool((a <= b).all() and (a < b).any())


def brute(F, keep_duplicates):
    keep = []
    for i, f in enumerate(F):
        dom = ((F <= f).all(axis=1) & (F < f).any(axis=1)).any()
        dup = (F[:i] == f).all(axis=1).any()
        keep.append(not dom and (keep_duplicates or not dup))
    return np.array(keep)


@pytest.mark.parametrize("m", [1, 2, 3, 4, 6])
@pytest.mark.parametrize("keep_duplicates", [True, False])
def test_non_dominated_matches_brute_force(m, keep_duplicates):
    rng = np.random.default_rng(m)
    F = np.round(rng.random((160, m)), 1)  # coarse values: many ties and duplicates
    assert (non_dominated(F, keep_duplicates) == brute(F, keep_duplicates)).all()


def test_empty_and_single():
    assert non_dominated(np.empty((0, 3))).shape == (0,)
    assert non_dominated(np.ones((1, 3))).tolist() == [True]
    assert epsilon_front(np.empty((0, 3)), 0.1).shape == (0,)


def test_merge_in_batches_equals_front_of_everything():
    rng = np.random.default_rng(4)
    F = np.round(rng.random((900, 4)), 1)
    held = np.empty((0, 4))
    for s in range(0, len(F), 70):
        stay, fresh = merge(held, F[s:s + 70])
        held = np.vstack([held[stay], F[s:s + 70][fresh]])
    want = F[brute(F, keep_duplicates=False)]
    assert sorted(map(tuple, held)) == sorted(map(tuple, want))


@pytest.mark.parametrize("seed", range(4))
def test_epsilon_front_covers_every_point_and_is_non_dominated(seed):
    rng = np.random.default_rng(seed)
    # a curved 4-objective front plus dominated points
    w = rng.dirichlet(np.ones(4), size=600)
    F = np.vstack([w / np.linalg.norm(w, axis=1, keepdims=True), rng.random((200, 4)) + 0.5])
    eps = np.array([0.05, 0.05, 0.1, 0.2])
    idx = epsilon_front(F, eps)
    E = F[idx]
    # every point is matched by a front point within eps in every objective (a plain loop)
    for f in F:
        assert any((e <= f + eps).all() for e in E)
    # no point of F dominates a front point
    for e in E:
        assert not any(_dominates(f, e) for f in F)
    # the best point of each objective is on the front
    for j in range(4):
        assert F[:, j].min() in E[:, j]
    assert len(idx) < len(F[brute(F, False)])  # it does thin the front


def test_epsilon_zero_keeps_the_distinct_non_dominated_points():
    rng = np.random.default_rng(7)
    F = np.round(rng.random((300, 3)), 1)
    idx = epsilon_front(F, 0.0)
    assert set(idx.tolist()) == set(np.flatnonzero(brute(F, keep_duplicates=False)).tolist())


def test_covers_is_the_plain_relation():
    rng = np.random.default_rng(8)
    A, B = rng.random((30, 3)), rng.random((40, 3))
    eps = np.array([0.1, 0.0, 0.2])
    C = covers(A, B, eps)
    for i in range(len(A)):
        for j in range(len(B)):
            assert C[i, j] == all(A[i, k] <= B[j, k] + eps[k] for k in range(3))


def test_negative_epsilon_is_refused():
    with pytest.raises(ValueError):
        epsilon_front(np.ones((2, 2)), -1.0)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_coarse_dominance_matches_a_plain_loop(seed):
    rng = np.random.default_rng(seed)
    F = np.round(rng.uniform(0, 1, (150, 4)), 2)  # ties and near ties
    eps = np.array([0.05, 0.05, 0.1, 0.0])
    strict = np.array([True, True, False, False])
    got = coarsely_dominated(F, eps, strict)
    want = [any((a <= b + eps).all() and (a[strict] < b[strict] - eps[strict]).all() for a in F) for b in F]
    assert got.tolist() == want
    assert 0 < got.sum() < len(F)
    # a chain of coarse dominance ends at a kept row, better still in the strict objectives
    kept = F[~got]
    for b in F[got]:
        assert (kept[:, strict] < b[strict] - eps[strict]).all(axis=1).any()


def test_coarse_dominance_needs_a_margin_beyond_eps():
    eps = np.array([0.1, 0.1])
    strict = np.array([True, True])
    # better by exactly eps in both, or by more in one only: kept
    assert not coarsely_dominated(np.array([[0.0, 0.0], [0.1, 0.1]]), eps, strict).any()
    assert not coarsely_dominated(np.array([[0.0, 0.0], [0.5, 0.05]]), eps, strict).any()
    assert coarsely_dominated(np.array([[0.0, 0.0], [0.11, 0.11]]), eps, strict).tolist() == [False, True]
    with pytest.raises(ValueError):
        coarsely_dominated(np.zeros((2, 2)), eps, np.array([False, False]))
