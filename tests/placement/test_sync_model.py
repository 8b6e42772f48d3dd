"""The model's weight sync as the trainer runs it: the route, then the engines' load and a fixed cost."""

import numpy as np
import pytest

from problems.placement.calibration import _line
from problems.placement.model.comm import engine_sync_s, sync_copies


def test_unprofiled_engines_leave_the_route_time_unchanged():
    route = np.array([0.5, 2.0])
    engines = np.array([[1, 0], [0, 3]])
    assert np.array_equal(engine_sync_s(route, 1e9, engines, np.array([1.0, 3.0]), np.zeros(2), np.zeros(2)), route)


def test_the_slower_of_route_and_load_plus_the_fixed_cost_of_the_pools_with_engines():
    route = np.array([0.5, 0.5, 0.5])
    engines = np.array([[1, 0], [0, 1], [1, 1]])
    load_gbs = np.array([1.0, 4.0])  # 1 GB at 1 GB/s takes 1 s, at 4 GB/s 0.25 s
    over = np.array([0.1, 0.3])
    t = engine_sync_s(route, 1e9, engines, np.array([1.0, 1.0, 2.0]), load_gbs, over)
    # the third plan's source sends two copies: 2 s at the slower pool's rate
    assert t == pytest.approx([1.0 + 0.1, 0.5 + 0.3, 2.0 + 0.3])


def test_copies_follow_the_route():
    engines = np.array([[2, 1, 0], [3, 0, 1], [1, 0, 0]])  # pools 0 and 2 in region 0, pool 1 in region 1
    region = np.array([0, 1, 0])
    assert sync_copies(engines, region, np.array([False] * 3), 2).tolist() == [3, 4, 1]
    # staged: one copy per region, or the fan-out of the biggest region (4 engines: 3 more copies)
    assert sync_copies(engines, region, np.array([True] * 3), 2).tolist() == [2, 3, 1]


def test_two_model_sizes_give_a_fixed_cost_and_a_rate():
    a, b = _line([2e6, 2e8], [0.05 + 2e6 / 0.2e9, 0.05 + 2e8 / 0.2e9])  # calibration.fit's rule
    assert a == pytest.approx(0.05) and 1 / b / 1e9 == pytest.approx(0.2)
