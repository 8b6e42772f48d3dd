"""Max-min angle selection and the DSA environmental selection built on it."""

import numpy as np

from mosearch.algorithms.angle_selection import max_min_angle_select
from mosearch.algorithms.dsa import dsa_select, first_front


def _quarter_circle(n):
    a = np.linspace(0, np.pi / 2, n)
    return np.stack([np.cos(a), np.sin(a)], axis=1), a


def test_greedy_picks_largest_minimum_angle():
    F, ang = _quarter_circle(91)  # one point per degree
    sel = max_min_angle_select(F, np.array([0, 90]), 5, np.zeros(2), np.ones(2))
    assert list(sel[:2]) == [0, 90]
    assert np.degrees(ang[sel[2]]) == 45
    third = sorted(np.degrees(ang[sel[3:]]))
    assert abs(third[0] - 22.5) <= 1 and abs(third[1] - 67.5) <= 1


def test_selection_keeps_extremes_and_is_distinct():
    rng = np.random.default_rng(1)
    x = rng.random((400, 4))
    F = x / x.sum(axis=1, keepdims=True)
    extremes = np.argmax(F, axis=0)
    sel = max_min_angle_select(F, extremes, 60, F.min(0), F.max(0))
    assert len(sel) == 60 == len(set(sel.tolist()))
    assert set(extremes.tolist()) <= set(sel.tolist())
    # spread: the selected set's smallest pairwise angle beats a random subset's
    def min_angle(idx):
        U = F[idx] / np.linalg.norm(F[idx], axis=1, keepdims=True)
        c = U @ U.T
        np.fill_diagonal(c, -1)
        return np.arccos(np.clip(c.max(), -1, 1))

    assert min_angle(sel) > min_angle(rng.choice(400, 60, replace=False))


def test_dsa_keeps_axis_corners_when_front_too_large():
    rng = np.random.default_rng(2)
    x = rng.random((500, 10))
    F = x / np.linalg.norm(x, axis=1, keepdims=True)  # 500 non-dominated points, M = 10
    assert first_front(F).all()
    s = dsa_select(F, 250)
    assert len(s.survivors) == 250 == len(set(s.survivors.tolist()))
    assert set(s.corners.tolist()) <= set(s.survivors.tolist())
    assert np.all(F[s.survivors] <= s.nadir + 1e-12)  # dominance-space reduction


def test_dsa_fills_small_front_with_points_nearest_ideal():
    F = np.array([[0.0, 1.0], [1.0, 0.0], [1.0, 1.0], [3.0, 3.0], [1.5, 1.2]])
    s = dsa_select(F, 4)
    assert set(s.survivors.tolist()) == {0, 1, 2, 4}
