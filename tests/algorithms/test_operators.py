"""The exploitative corner mutation (Eq. 5) and random-permutation pairing."""

import numpy as np

from mosearch.algorithms.operators import corner_mutation, mutation_alpha, random_pairs, unbounded_sbx


def test_alpha_decays_to_near_zero():
    assert mutation_alpha(0, 10_000, 100) == 0.7
    assert 0.0 < mutation_alpha(10_000, 10_000, 100) < 0.7 * 0.02 + 1e-12
    assert mutation_alpha(5_000, None, 100) == 0.7


def test_children_in_bounds_and_each_changes():
    rng = np.random.default_rng(0)
    xl, xu = np.array([0.0, -2.0, 0.0, 0.0]), np.array([1.0, 2.0, 10.0, 1.0])
    parents = np.repeat([[0.99, 1.9, 0.1, 0.5]], 2000, axis=0)
    kids = corner_mutation(parents, xl, xu, 0.7, rng)
    assert np.all(kids >= xl) and np.all(kids <= xu)
    assert np.all((kids != parents).any(axis=1))
    # about 1/D of the variables mutate (at least one per child)
    frac = (kids != parents).mean()
    assert 0.25 <= frac <= 0.45


def test_reflection_lands_between_parent_and_bound():
    rng = np.random.default_rng(1)
    parents = np.full((5000, 1), 0.9)
    kids = corner_mutation(parents, np.zeros(1), np.ones(1), 0.7, rng)
    moved_up = kids[:, 0] > 0.9
    # a value pushed past 1 comes back to 1 - 0.5 r (1 - 0.9), i.e. into [0.95, 1]
    assert np.all(kids[moved_up, 0] >= 0.9)


def test_smaller_alpha_gives_smaller_steps():
    rng = np.random.default_rng(2)
    p = np.full((5000, 1), 0.5)
    big = np.abs(corner_mutation(p, np.zeros(1), np.ones(1), 0.7, rng) - 0.5).mean()
    small = np.abs(corner_mutation(p, np.zeros(1), np.ones(1), 0.05, rng) - 0.5).mean()
    assert small < big / 3


def test_random_pairs_disjoint():
    pairs = random_pairs(11, np.random.default_rng(3))
    assert pairs.shape == (5, 2)
    assert len(set(pairs.ravel().tolist())) == 10


def test_unbounded_sbx_keeps_midpoint_and_crosses_about_half():
    rng = np.random.default_rng(4)
    p1, p2 = rng.random((4000, 6)), rng.random((4000, 6))
    kids = unbounded_sbx(p1, p2, 20.0, rng)
    c1, c2 = kids[:4000], kids[4000:]
    assert np.allclose((c1 + c2) / 2, (p1 + p2) / 2)  # children symmetric about the parents' midpoint
    untouched = np.isclose(c1, p1) | np.isclose(c1, p2)
    assert 0.45 <= untouched.mean() <= 0.65  # half the variables keep a parent's value (beta = +-1)
    assert np.any(kids < 0) or np.any(kids > 1)  # unbounded: may leave the box before clipping
