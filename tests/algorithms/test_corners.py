"""Corner solutions (both kinds) and the nadir estimate, on hand-made fronts."""

import numpy as np

from mosearch.algorithms.corners import axis_directions, corner_indices, nadir_from_corners

# Three points hugging the axes, one kind-2 candidate beyond the kind-1 nadir in f2,
# one interior point. All mutually non-dominated.
FRONT = np.array(
    [
        [5.0, 0.1, 0.1],  # near axis 1
        [0.1, 5.0, 0.1],  # near axis 2
        [0.1, 0.1, 5.0],  # near axis 3
        [0.0, 6.0, 3.0],  # smallest f1 of the rest, exceeds the kind-1 nadir in f2
        [1.0, 1.0, 1.0],  # interior: smallest f2 and f3 of the rest, but inside the nadir
    ]
)


def test_axis_directions_are_unit_and_near_axes():
    w = axis_directions(4)
    assert np.allclose(np.linalg.norm(w, axis=1), 1.0)
    assert np.all(np.argmax(w, axis=1) == np.arange(4))


def test_both_corner_kinds_on_hand_made_front():
    idx = corner_indices(FRONT)
    assert list(idx[:3]) == [0, 1, 2]  # kind 1, one per axis, in axis order
    assert list(idx[3:]) == [3]  # kind 2
    assert np.allclose(nadir_from_corners(FRONT[idx]), [5.0, 6.0, 5.0])


def test_kind_two_rejected_when_sum_too_large():
    front = FRONT.copy()
    front[3] = [0.0, 60.0, 3.0]  # beyond the nadir, but its sum exceeds 1.5x the nadir's
    idx = corner_indices(front)
    assert 3 not in idx
    assert len(idx) == 3


def test_duplicates_removed_and_ideal_shift_matters():
    front = np.vstack([FRONT[:3], FRONT[:1]])  # a repeated objective vector
    idx = corner_indices(front)
    assert len(np.unique(front[idx], axis=0)) == len(idx) == 3
    # Shifting every objective by a constant moves the ideal point with it: same corners.
    assert list(corner_indices(FRONT + 100.0)) == list(corner_indices(FRONT))


def test_corner_count_bounded_by_2m():
    rng = np.random.default_rng(0)
    x = rng.random((300, 5))
    F = x / np.linalg.norm(x, axis=1, keepdims=True)  # points on a sphere: non-dominated
    idx = corner_indices(F)
    assert 5 <= len(idx) <= 10
    # each kind-1 corner is the point closest to its axis
    for i in range(5):
        others = np.delete(F, i, axis=1)
        assert np.argmin(np.linalg.norm(others, axis=1)) == idx[i]
