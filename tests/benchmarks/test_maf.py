"""MaF1-MaF15 against their formulas: reference fronts, optimal decision vectors, defaults."""

import numpy as np
import pytest
from pymoo.util.nds.non_dominated_sorting import NonDominatedSorting

from problems.benchmarks.maf import PROBLEMS, _lsmop_groups, get_problem, grid_points, non_dominated_mask, uniform_points

MS = (5, 10)
CASES = [(name, m) for name in PROBLEMS for m in MS]


def _dominated_by(A, B, tol=1e-9):
    """For each row of A: is some row of B no worse anywhere and better by more than tol somewhere?"""
    le = np.all(B[None, :, :] <= A[:, None, :] + 1e-9, axis=2)
    lt = np.any(B[None, :, :] < A[:, None, :] - tol, axis=2)
    return np.any(le & lt, axis=1)


@pytest.mark.parametrize("name,m", CASES)
def test_front_points_mutually_non_dominated(name, m):
    pf = get_problem(name, m).pareto_front()
    assert pf.ndim == 2 and pf.shape[1] == m and np.all(np.isfinite(pf))
    assert 100 <= len(pf) <= 20_000
    sub = pf[np.random.default_rng(0).choice(len(pf), min(len(pf), 1500), replace=False)]
    assert len(NonDominatedSorting().do(sub, only_non_dominated_front=True)) == len(sub)


def test_uniform_points_sizes_match_competition_sampler():
    assert len(uniform_points(10_000, 5)) == 8855  # one layer, H = 19
    assert len(uniform_points(10_000, 10)) == 5005 + 2002  # H1 = 6 outer, H2 = 5 inner
    w = uniform_points(10_000, 10)
    assert np.allclose(w.sum(axis=1), 1, atol=1e-4)


def test_default_dimensions():
    assert get_problem("MaF1", 5).n_var == 14 and get_problem("MaF7", 10).n_var == 29
    assert get_problem("MaF8", 10).n_var == 2 and get_problem("MaF13", 10).n_var == 5
    assert get_problem("MaF11", 5).n_var == 14
    assert (get_problem("MaF11", 5).n_var - 4) % 2 == 0
    d14 = get_problem("MaF14", 5).n_var
    assert d14 == 4 + _lsmop_groups(5)[1][-1] and 90 <= d14 <= 120
    assert get_problem("MaF1", 5).max_evals == 140_000
    with pytest.raises(KeyError):
        get_problem("MaF16", 5)


def _optimal_x(name, m, n=300, seed=0):
    """Decision vectors on the Pareto set, built from each problem's definition."""
    p = get_problem(name, m)
    rng = np.random.default_rng(seed)
    d = p.n_var
    x = rng.uniform(p.xl, p.xu, size=(n, d))
    if name in ("MaF1", "MaF2", "MaF3", "MaF4", "MaF5", "MaF6"):
        x[:, m - 1 :] = 0.5
    elif name == "MaF7":
        a0, a1, b0, b1 = p.INTERVAL
        u = rng.random((n, m - 1))
        x[:, : m - 1] = np.where(u < 0.5, a0 + (a1 - a0) * u * 2, b0 + (b1 - b0) * (u - 0.5) * 2)
        x[:, m - 1 :] = 0.0
    elif name in ("MaF8", "MaF9"):
        r, a = np.sqrt(rng.random(n)) * 0.5, rng.random(n) * 2 * np.pi  # inside the inscribed circle
        x = np.stack([r * np.cos(a), r * np.sin(a)], axis=1)
    elif name in ("MaF10", "MaF11"):
        x[:, m - 1 :] = 0.35 * 2 * np.arange(m, d + 1)
    elif name == "MaF12":
        z = np.empty(d - (m - 1))
        z[-1] = 0.35
        a = 0.98 / 49.98
        for i in range(len(z) - 2, -1, -1):  # solve the dependent bias backward so every t1 = 0.35
            u = z[i + 1 :].mean()
            expo = 0.02 + 49.98 * (a - (1 - 2 * u) * abs(np.floor(0.5 - u) + a))
            z[i] = 0.35 ** (1 / expo)
        x[:, m - 1 :] = z * 2 * np.arange(m, d + 1)
    elif name == "MaF13":
        i = np.arange(1, d + 1)
        y0 = 2 * x[:, 1:2] * np.sin(2 * np.pi * x[:, 0:1] + i * np.pi / d)
        x[:, 2:] = y0[:, 2:]
    elif name in ("MaF14", "MaF15"):
        idx = np.arange(m, d + 1)
        target = np.zeros(d - m + 1)
        if name == "MaF14":
            sub, length = p.sublen, p.len
            for k in range(1, m, 2):  # even objectives use Rosenbrock, optimum at 1
                lo = length[k]
                target[lo : lo + 2 * sub[k]] = 1.0
            factor = 1 + idx / d
        else:
            factor = 1 + np.cos(idx / d * np.pi / 2)
        x[:, m - 1 :] = (target + 10 * x[:, :1]) / factor
    assert np.all(x >= p.xl - 1e-9) and np.all(x <= p.xu + 1e-9)
    return p, x


ANALYTIC = {
    "MaF1": lambda F, m: np.sum(1 - F, axis=1) - 1,
    "MaF2": lambda F, m: np.sum(F**2, axis=1) - 1,
    "MaF3": lambda F, m: np.sum(np.sqrt(F[:, :-1]), axis=1) + F[:, -1] - 1,
    "MaF4": lambda F, m: np.sum((1 - F / 2.0 ** np.arange(1, m + 1)) ** 2, axis=1) - 1,
    "MaF5": lambda F, m: np.sum((F / 2.0 ** np.arange(m, 0, -1)) ** 2, axis=1) - 1,
    "MaF12": lambda F, m: np.sum((F / (2.0 * np.arange(1, m + 1))) ** 2, axis=1) - 1,
    "MaF13": lambda F, m: np.r_[np.sum(F[:, :3] ** 2, axis=1) - 1, F[:, 3] - F[:, 0] ** 2 - F[:, 1] ** 10 - F[:, 2] ** 10],
    "MaF14": lambda F, m: np.sum(F, axis=1) - 1,
    "MaF15": lambda F, m: np.sum((1 - F) ** 2, axis=1) - 1,
}


@pytest.mark.parametrize("name,m", CASES)
def test_optimal_decisions_lie_on_the_front(name, m):
    p, x = _optimal_x(name, m)
    F = p.evaluate(x)
    pf = p.pareto_front()
    if name in ANALYTIC:
        assert np.max(np.abs(ANALYTIC[name](F, m))) < 1e-8
    # No reference point beats a Pareto-optimal objective vector (MaF11's position sweep also
    # covers the dominated parts of its disconnected curve: see the next test)...
    sub = pf[np.random.default_rng(1).choice(len(pf), min(len(pf), 3000), replace=False)]
    if name != "MaF11":
        assert not np.any(_dominated_by(F, sub, tol=1e-5))
    if name == "MaF2":
        return  # its distance variables barely move f (z = x/2 + 1/4), and the 5-objective sample is sparse
    # ...and optimal vectors sit on the sampled front: nearer than random decision vectors do.
    near = np.min(np.linalg.norm(F[:, None, :] - sub[None, :, :], axis=2), axis=1)
    rnd = p.evaluate(np.random.default_rng(9).uniform(p.xl, p.xu, size=(300, p.n_var)))
    far = np.min(np.linalg.norm(rnd[:, None, :] - sub[None, :, :], axis=2), axis=1)
    assert np.median(near) < np.median(far)


@pytest.mark.parametrize("m", MS)
def test_maf8_outside_polygon_is_dominated(m):
    p = get_problem("MaF8", m)
    F = p.evaluate(np.array([[3.0, 3.0], [-2.0, 0.5], [0.0, -5.0]]))
    assert np.all(_dominated_by(F, p.pareto_front()))


def test_maf9_repairs_infeasible_points():
    p = get_problem("MaF9", 5)
    assert len(p.regions) == 5
    X = np.random.default_rng(0).uniform(p.xl, p.xu, size=(2000, 2))
    X[:10] = p.regions[0].mean(axis=0)  # the centre of an infeasible region
    out = p.evaluate(X, return_as_dictionary=True)
    assert not np.any(p._infeasible(out["X"]))
    assert not np.allclose(out["X"][:10], X[:10])


@pytest.mark.parametrize("m", MS)
def test_maf11_front_is_the_image_of_its_optimal_grid(m):
    """Evaluating MaF11 at the optimal decision vectors behind its reference grid gives the reference set."""
    p = get_problem("MaF11", m)
    t = grid_points(10_000, m - 1)
    t[:, 0] = np.sqrt(t[:, 0])
    x = np.hstack([t * 2 * np.arange(1, m), np.tile(0.35 * 2 * np.arange(m, p.n_var + 1), (len(t), 1))])
    F = p.evaluate(x)
    F = F[non_dominated_mask(F)]
    pf = p.pareto_front()
    assert F.shape == pf.shape
    assert np.allclose(np.unique(np.round(F, 8), axis=0), np.unique(np.round(pf, 8), axis=0))
