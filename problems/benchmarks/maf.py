"""MaF1-MaF15, the CEC'2017 many-objective benchmark suite, as vectorised pymoo problems.

Definitions follow the suite's technical report (Cheng et al., "A benchmark test
suite for evolutionary many-objective optimization", Complex & Intelligent Systems
2017) and the competition's reference implementation (PlatEMO 1.x files MaF1.m ..
MaF15.m in the competition repository ranchengcn/IEEE-CEC-MaOO-Competition, 2017).

Competition defaults (same sources): D = M + 9 for MaF1-6 and MaF10-12 (MaF11 rounded
so its distance part is even), M + 19 for MaF7, 2 for MaF8-9, 5 for MaF13, about 20M
for MaF14-15 (the exact count comes out of the LSMOP grouping); MaxFEs =
max(100000, 10000 * D).

`pareto_front()` returns the reference set the competition computed IGD against: the
competition code asked for 10,000 points, and its samplers give about that many
(Das-Dennis lattice with an inner layer when M is large, grids for the
disconnected/degenerate fronts, filtered to the non-dominated part where the code
filtered). Sizes therefore differ a little from exactly 10,000; they are the same
sets the published IGD numbers were measured on.
"""

from __future__ import annotations

from functools import lru_cache
from math import comb

import numpy as np
from pymoo.core.problem import Problem
from pymoo.util.ref_dirs import get_reference_directions

from problems.pareto import non_dominated

# Number of reference points the competition asked each sampler for.
N_FRONT_POINTS = 10_000


# ---------------------------------------------------------------- samplers


def uniform_points(n: int, m: int) -> np.ndarray:
    """Das-Dennis points on the unit simplex, two layers when one lattice is too coarse.

    Mirrors the competition's `UniformPoint`: the largest outer lattice with at most n
    points; if its partition count is below m an inner lattice (shrunk by 1/2 around
    the centre) fills the remaining budget. Coordinates are floored at 1e-6.
    """
    h1 = 1
    while comb(h1 + m, m - 1) <= n:
        h1 += 1
    w = get_reference_directions("das-dennis", m, n_partitions=h1)
    if h1 < m:
        h2 = 0
        while comb(h1 + m - 1, m - 1) + comb(h2 + m, m - 1) <= n:
            h2 += 1
        if h2 > 0:
            inner = get_reference_directions("das-dennis", m, n_partitions=h2) / 2.0 + 1.0 / (2 * m)
            w = np.vstack([w, inner])
    return np.maximum(w, 1e-6)


def grid_points(n: int, d: int) -> np.ndarray:
    """A full grid on [0,1]^d with ceil(n^(1/d)) levels per axis (the code's ReplicatePoint)."""
    if d == 1:
        return np.linspace(0.0, 1.0, n)[:, None]
    levels = int(np.ceil(n ** (1.0 / d) - 1e-9))
    gap = np.linspace(0.0, 1.0, levels)
    mesh = np.meshgrid(*([gap] * d), indexing="ij")
    return np.stack([g.ravel(order="F") for g in mesh], axis=1)


def non_dominated_mask(F: np.ndarray) -> np.ndarray:
    """True for rows of F no other row dominates (minimisation); equal rows all stay."""
    return non_dominated(F, keep_duplicates=True)


# ---------------------------------------------------------------- shapes


def _linear(x: np.ndarray) -> np.ndarray:
    """DTLZ1-style product: f_i = prod_{j < M-i} x_j * (1 - x_{M-i}), i = 1..M (no 1/2)."""
    n, k = x.shape
    ones = np.ones((n, 1))
    head = np.cumprod(np.hstack([ones, x]), axis=1)[:, ::-1]
    tail = np.hstack([ones, 1.0 - x[:, ::-1]])
    return head * tail


def _spherical(x: np.ndarray) -> np.ndarray:
    """DTLZ2-style: f_i = prod cos(x_j pi/2) * sin(x_{M-i} pi/2)."""
    n = len(x)
    ones = np.ones((n, 1))
    head = np.cumprod(np.hstack([ones, np.cos(x * np.pi / 2)]), axis=1)[:, ::-1]
    tail = np.hstack([ones, np.sin(x[:, ::-1] * np.pi / 2)])
    return head * tail


def _wfg_convex(x: np.ndarray) -> np.ndarray:
    """WFG convex shape over the M-1 position parameters x[:, :M-1] (last column of x unused)."""
    n = len(x)
    ones = np.ones((n, 1))
    p = x[:, :-1]
    head = np.cumprod(np.hstack([ones, 1.0 - np.cos(p * np.pi / 2)]), axis=1)[:, ::-1]
    tail = np.hstack([ones, 1.0 - np.sin(p[:, ::-1] * np.pi / 2)])
    return head * tail


def _wfg_concave(x: np.ndarray) -> np.ndarray:
    n = len(x)
    ones = np.ones((n, 1))
    p = x[:, :-1]
    head = np.cumprod(np.hstack([ones, np.sin(p * np.pi / 2)]), axis=1)[:, ::-1]
    tail = np.hstack([ones, np.cos(p[:, ::-1] * np.pi / 2)])
    return head * tail


def _s_linear(y, a):
    return np.abs(y - a) / np.abs(np.floor(a - y) + a)


# ---------------------------------------------------------------- base class


class MaF(Problem):
    """Common parts: competition default dimension, budget, cached reference front."""

    number = 0

    def __init__(self, n_obj: int = 5, n_var: int | None = None, xl=0.0, xu=1.0):
        if n_obj < 2:
            raise ValueError(f"MaF{self.number} needs at least 2 objectives, got {n_obj}")
        n_var = self.default_n_var(n_obj) if n_var is None else n_var
        super().__init__(n_var=n_var, n_obj=n_obj, xl=xl, xu=xu, vtype=float)

    @staticmethod
    def default_n_var(m: int) -> int:
        return m + 9

    @property
    def max_evals(self) -> int:
        """The competition budget, max(1e5, 1e4 * D)."""
        return max(100_000, 10_000 * self.n_var)

    def _calc_pareto_front(self, *args, **kwargs):
        return _front(type(self), self.n_obj, self.n_var)

    def front(self) -> np.ndarray:
        raise NotImplementedError


@lru_cache(maxsize=64)
def _front(cls, m: int, d: int) -> np.ndarray:
    pf = cls(n_obj=m, n_var=d).front()
    pf.setflags(write=False)
    return pf


# ---------------------------------------------------------------- MaF1-7


class MaF1(MaF):
    """Inverted DTLZ1 with the DTLZ2 distance function: a linear, inverted front."""

    number = 1

    def _evaluate(self, x, out, *args, **kwargs):
        m = self.n_obj
        g = np.sum((x[:, m - 1 :] - 0.5) ** 2, axis=1, keepdims=True)
        out["F"] = (1 + g) * (1.0 - _linear(x[:, : m - 1]))

    def front(self):
        return 1.0 - uniform_points(N_FRONT_POINTS, self.n_obj)


class MaF2(MaF):
    """DTLZ2BZ: a concave front limited to a band of each position angle."""

    number = 2

    def _evaluate(self, x, out, *args, **kwargs):
        n, d = x.shape
        m = self.n_obj
        step = (d - m + 1) // m
        z = x / 2 + 0.25
        g = np.empty((n, m))
        for i in range(m):
            lo = m - 1 + i * step
            hi = m - 1 + (i + 1) * step if i < m - 1 else d
            g[:, i] = np.sum((z[:, lo:hi] - 0.5) ** 2, axis=1)
        out["F"] = (1 + g) * _spherical(z[:, : m - 1])

    def front(self):
        m = self.n_obj
        f = uniform_points(N_FRONT_POINTS, m)
        c = np.zeros((len(f), m - 1))
        # c holds cosines of the position angles, solved from the direction of f.
        for j in range(2, m + 1):
            prod = np.prod(c[:, m - j + 1 : m - 1], axis=1) if j > 2 else 1.0
            temp = f[:, j - 1] / f[:, 0] * prod
            c[:, m - j] = np.sqrt(1.0 / (1.0 + temp**2))
        lo, hi = np.cos(3 * np.pi / 8), np.cos(np.pi / 8)
        if m > 5:
            c = c * (hi - lo) + lo
        else:
            c = c[~np.any((c < lo) | (c > hi), axis=1)]
        ones = np.ones((len(c), 1))
        head = np.cumprod(np.hstack([ones, c]), axis=1)[:, ::-1]
        tail = np.hstack([ones, np.sqrt(1 - c[:, ::-1] ** 2)])
        return head * tail


def _rastrigin_g(x_dist: np.ndarray, d: int, m: int) -> np.ndarray:
    return 100 * (d - m + 1 + np.sum((x_dist - 0.5) ** 2 - np.cos(20 * np.pi * (x_dist - 0.5)), axis=1, keepdims=True))


class MaF3(MaF):
    """Convex DTLZ3: multimodal distance, convex front."""

    number = 3

    def _evaluate(self, x, out, *args, **kwargs):
        m, d = self.n_obj, x.shape[1]
        g = _rastrigin_g(x[:, m - 1 :], d, m)
        f = (1 + g) * _spherical(x[:, : m - 1])
        out["F"] = np.hstack([f[:, : m - 1] ** 4, f[:, m - 1 :] ** 2])

    def front(self):
        f = uniform_points(N_FRONT_POINTS, self.n_obj) ** 2
        temp = np.sum(np.sqrt(f[:, :-1]), axis=1) + f[:, -1]
        scale = np.hstack([np.repeat((temp**2)[:, None], f.shape[1] - 1, axis=1), temp[:, None]])
        return f / scale


class MaF4(MaF):
    """Inverted, badly scaled DTLZ3 (objective i scaled by 2^i)."""

    number = 4

    def _evaluate(self, x, out, *args, **kwargs):
        m, d = self.n_obj, x.shape[1]
        g = _rastrigin_g(x[:, m - 1 :], d, m)
        f = (1 + g) * (1.0 - _spherical(x[:, : m - 1]))
        out["F"] = f * 2.0 ** np.arange(1, m + 1)

    def front(self):
        m = self.n_obj
        f = uniform_points(N_FRONT_POINTS, m)
        f = f / np.linalg.norm(f, axis=1, keepdims=True)
        return (1 - f) * 2.0 ** np.arange(1, m + 1)


class MaF5(MaF):
    """Scaled DTLZ4 (bias 100, objective i scaled by 2^(M-i+1))."""

    number = 5

    def _evaluate(self, x, out, *args, **kwargs):
        m = self.n_obj
        p = x[:, : m - 1] ** 100
        g = np.sum((x[:, m - 1 :] - 0.5) ** 2, axis=1, keepdims=True)
        out["F"] = (1 + g) * _spherical(p) * 2.0 ** np.arange(m, 0, -1)

    def front(self):
        m = self.n_obj
        f = uniform_points(N_FRONT_POINTS, m)
        f = f / np.linalg.norm(f, axis=1, keepdims=True)
        return f * 2.0 ** np.arange(m, 0, -1)


class MaF6(MaF):
    """DTLZ5(I, M) with I = 2: a degenerate (curve) front."""

    number = 6
    I = 2

    def _evaluate(self, x, out, *args, **kwargs):
        m, i = self.n_obj, self.I
        g = np.sum((x[:, m - 1 :] - 0.5) ** 2, axis=1, keepdims=True)
        p = x[:, : m - 1].copy()
        p[:, i - 1 : m - 1] = (1 + 2 * g * p[:, i - 1 : m - 1]) / (2 + 2 * g)
        out["F"] = (1 + 100 * g) * _spherical(p)

    def front(self):
        m, i = self.n_obj, self.I
        f = uniform_points(N_FRONT_POINTS, i)
        f = f / np.linalg.norm(f, axis=1, keepdims=True)
        f = np.hstack([np.repeat(f[:, :1], m - i, axis=1), f])
        expo = np.maximum(np.concatenate([[m - i], np.arange(m - i, 1 - i, -1)]), 0)
        return f / np.sqrt(2.0) ** expo


class MaF7(MaF):
    """DTLZ7: disconnected front (2^(M-1) regions)."""

    number = 7
    # Ends of the two non-dominated intervals of each position variable (the code's constants).
    INTERVAL = (0.0, 0.251412, 0.631627, 0.859401)

    @staticmethod
    def default_n_var(m):
        return m + 19

    def _evaluate(self, x, out, *args, **kwargs):
        m = self.n_obj
        g = 1 + 9 * np.mean(x[:, m - 1 :], axis=1, keepdims=True)
        fp = x[:, : m - 1]
        h = m - np.sum(fp / (1 + g) * (1 + np.sin(3 * np.pi * fp)), axis=1, keepdims=True)
        out["F"] = np.hstack([fp, (1 + g) * h])

    def front(self):
        m = self.n_obj
        a0, a1, b0, b1 = self.INTERVAL
        median = (a1 - a0) / (b1 - b0 + a1 - a0)
        x = grid_points(N_FRONT_POINTS, m - 1)
        low = x <= median
        x = np.where(low, x * (a1 - a0) / median + a0, (x - median) * (b1 - b0) / (1 - median) + b0)
        last = 2 * (m - np.sum(x / 2 * (1 + np.sin(3 * np.pi * x)), axis=1, keepdims=True))
        return np.hstack([x, last])


# ---------------------------------------------------------------- MaF8-9 (2-D distance problems)


def _polygon(m: int) -> np.ndarray:
    """Vertices of the regular M-gon on the unit circle, first at angle pi/2 - 2pi/M, clockwise."""
    ang = np.pi / 2 - np.arange(1, m + 1) * 2 * np.pi / m
    return np.stack([np.cos(ang), np.sin(ang)], axis=1)


def _in_polygon(pts: np.ndarray, poly: np.ndarray, boundary: bool = True) -> np.ndarray:
    """Even-odd ray casting, vectorised over points; points on an edge count as inside."""
    x, y = pts[:, 0], pts[:, 1]
    inside = np.zeros(len(pts), dtype=bool)
    on_edge = np.zeros(len(pts), dtype=bool)
    k = len(poly)
    for i in range(k):
        (x1, y1), (x2, y2) = poly[i], poly[(i + 1) % k]
        crosses = (y1 > y) != (y2 > y)
        with np.errstate(divide="ignore", invalid="ignore"):
            xint = x1 + (y - y1) * (x2 - x1) / (y2 - y1)
        inside ^= crosses & (x < xint)
        if boundary:
            cross = (x2 - x1) * (y - y1) - (y2 - y1) * (x - x1)
            within = (np.minimum(x1, x2) - 1e-12 <= x) & (x <= np.max([x1, x2]) + 1e-12)
            within &= (np.minimum(y1, y2) - 1e-12 <= y) & (y <= np.max([y1, y2]) + 1e-12)
            on_edge |= (np.abs(cross) <= 1e-12) & within
    return inside | on_edge


class MaF8(MaF):
    """Multi-point distance minimisation: objective i is the distance to vertex i of a regular M-gon."""

    number = 8

    def __init__(self, n_obj: int = 5, n_var: int | None = None):
        super().__init__(n_obj, 2 if n_var is None else n_var, xl=-10_000.0, xu=10_000.0)
        self.points = _polygon(n_obj)

    @staticmethod
    def default_n_var(m):
        return 2

    def _evaluate(self, x, out, *args, **kwargs):
        out["F"] = np.linalg.norm(x[:, None, :] - self.points[None, :, :], axis=2)

    def _grid_inside(self):
        side = int(np.ceil(np.sqrt(N_FRONT_POINTS)))
        g = np.linspace(-1, 1, side)
        gx, gy = np.meshgrid(g, g, indexing="ij")
        pts = np.stack([gx.ravel(order="F"), gy.ravel(order="F")], axis=1)
        return pts[_in_polygon(pts, self.points)]

    def front(self):
        return np.linalg.norm(self._grid_inside()[:, None, :] - self.points[None, :, :], axis=2)


class MaF9(MaF8):
    """Multi-line distance minimisation with infeasible regions outside the polygon.

    As in the competition code, a decision vector inside an infeasible region is
    resampled uniformly until it leaves them, and the replaced vector is written back
    into the population (out["X"]), so algorithms never hold an infeasible point.
    """

    number = 9

    def __init__(self, n_obj: int = 5, n_var: int | None = None, seed: int = 0):
        super().__init__(n_obj, n_var)
        self.rng = np.random.default_rng(seed)
        self.regions = self._infeasible_regions()

    def _infeasible_regions(self):
        m, p = self.n_obj, self.points
        regions = []
        for span in range(1, int(np.ceil(m / 2 - 2)) + 1):
            for head in range(m):
                tail = head + span
                idx = np.arange(head, tail + 1) % m
                a, b = p[(head - 1) % m], p[head % m]
                c, d = p[tail % m], p[(tail + 1) % m]
                r = _line_intersection(a, b, c, d)
                chain = p[idx]
                regions.append(np.vstack([chain, 2 * r - chain]))
        return regions

    def _infeasible(self, x):
        bad = np.zeros(len(x), dtype=bool)
        for poly in self.regions:
            bad |= _in_polygon(x, poly, boundary=False)
        return bad & ~_in_polygon(x, self.points)

    def _evaluate(self, x, out, *args, **kwargs):
        x = np.array(x, dtype=float, copy=True)
        bad = self._infeasible(x)
        while np.any(bad):
            x[bad] = self.rng.uniform(self.xl, self.xu, size=(int(bad.sum()), 2))
            bad = self._infeasible(x)
        out["X"] = x
        out["F"] = self._lines(x)

    def _lines(self, x):
        p = self.points
        a, b = p, np.roll(p, -1, axis=0)  # line i passes through vertices i and i+1
        num = np.abs((a[None, :, 0] - x[:, None, 0]) * (b[None, :, 1] - x[:, None, 1]) - (b[None, :, 0] - x[:, None, 0]) * (a[None, :, 1] - x[:, None, 1]))
        return num / np.linalg.norm(a - b, axis=1)[None, :]

    def front(self):
        return self._lines(self._grid_inside())


def _line_intersection(a, b, c, d):
    """Intersection of line ab with line cd (both extended)."""
    da, dc = b - a, d - c
    denom = da[0] * dc[1] - da[1] * dc[0]
    t = ((c[0] - a[0]) * dc[1] - (c[1] - a[1]) * dc[0]) / denom
    return a + t * da


# ---------------------------------------------------------------- MaF10-12 (WFG1, WFG2, WFG9, K = M-1)


class _WFG(MaF):
    def __init__(self, n_obj: int = 5, n_var: int | None = None):
        n_var = self.default_n_var(n_obj) if n_var is None else n_var
        super().__init__(n_obj, n_var, xl=0.0, xu=2.0 * np.arange(1, n_var + 1))
        self.k = n_obj - 1
        self.scale = 2.0 * np.arange(1, n_obj + 1)

    def _finish(self, t_pos, t_dist, shape):
        """Map reduced parameters to objectives: x_i = max(x_M, 1)(t_i - 0.5) + 0.5 (A = 1)."""
        xm = t_dist[:, None]
        xs = np.maximum(xm, 1.0) * (t_pos - 0.5) + 0.5
        xfull = np.hstack([xs, xm])
        h = shape(xfull)
        return xm + self.scale * h


def _convex_mixed(x):
    h = _wfg_convex(x)
    x1 = x[:, 0]
    h[:, -1] = 1 - x1 - np.cos(10 * np.pi * x1 + np.pi / 2) / (10 * np.pi)
    return h


def _convex_disc(x):
    h = _wfg_convex(x)
    x1 = x[:, 0]
    h[:, -1] = 1 - x1 * np.cos(5 * np.pi * x1) ** 2
    return h


class MaF10(_WFG):
    """WFG1: flat bias, polynomial bias, convex + mixed front."""

    number = 10

    def _evaluate(self, x, out, *args, **kwargs):
        k, n = self.k, x.shape[1]
        z = x / (2.0 * np.arange(1, n + 1))
        t1 = z.copy()
        t1[:, k:] = _s_linear(z[:, k:], 0.35)
        t2 = t1.copy()
        y = t1[:, k:]
        a, b, c = 0.8, 0.75, 0.85
        flat = a + np.minimum(0, np.floor(y - b)) * a * (b - y) / b - np.minimum(0, np.floor(c - y)) * (1 - a) * (y - c) / (1 - c)
        t2[:, k:] = np.round(flat, 6)  # the code rounds b_flat to 1e-6
        t3 = t2**0.02
        w = 2.0 * np.arange(1, n + 1)
        # K = M-1 position parameters: one per group, so the weighted sum is the value itself.
        t_pos = t3[:, :k]
        t_dist = np.sum(t3[:, k:] * w[k:], axis=1) / np.sum(w[k:])
        out["F"] = self._finish(t_pos, t_dist, _convex_mixed)

    def front(self):
        m = self.n_obj
        h = uniform_points(N_FRONT_POINTS, m)
        n = len(h)
        c = np.ones((n, m))
        # Invert the convex shape: solve c_(M-j+1) from the ratio h_j / h_1 (all h > 0).
        for j in range(2, m + 1):
            prod = np.prod(1 - c[:, m - j + 1 : m - 1], axis=1)
            temp = h[:, j - 1] / h[:, 0] * prod
            c[:, m - j] = (temp**2 - temp + np.sqrt(2 * temp)) / (temp**2 + 1)
        out = np.empty((n, m))
        for j in range(1, m + 1):
            out[:, j - 1] = np.prod(1 - c[:, : m - j], axis=1) * (1 - np.sqrt(1 - c[:, m - j] ** 2))
        temp = np.arccos(np.clip(c[:, 0], -1, 1)) * 2 / np.pi
        out[:, m - 1] = 1 - temp - np.cos(10 * np.pi * temp + np.pi / 2) / (10 * np.pi)
        return out * self.scale


class MaF11(_WFG):
    """WFG2: non-separable distance, convex + disconnected front."""

    number = 11

    @staticmethod
    def default_n_var(m):
        d = m + 9
        return int(np.ceil((d - m + 1) / 2) * 2 + m - 1)

    def _evaluate(self, x, out, *args, **kwargs):
        k, n = self.k, x.shape[1]
        if (n - k) % 2:
            raise ValueError("MaF11 needs an even number of distance variables")
        z = x / (2.0 * np.arange(1, n + 1))
        t1 = z.copy()
        t1[:, k:] = _s_linear(z[:, k:], 0.35)
        a, b = t1[:, k::2], t1[:, k + 1 :: 2]
        t2 = (a + b + 2 * np.abs(a - b)) / 3
        out["F"] = self._finish(t1[:, :k], np.mean(t2, axis=1), _convex_disc)

    def front(self):
        m = self.n_obj
        x = grid_points(N_FRONT_POINTS, m - 1)
        x[:, 0] = np.sqrt(x[:, 0])
        x = np.hstack([x, np.zeros((len(x), 1))])
        h = _convex_disc(x) * self.scale
        return h[non_dominated_mask(h)]


def _s_decept(y, a, b, c):
    return 1 + (np.abs(y - a) - b) * (
        np.floor(y - a + b) * (1 - c + (a - b) / b) / (a - b) + np.floor(a + b - y) * (1 - c + (1 - a - b) / b) / (1 - a - b) + 1 / b
    )


def _s_multi(y, a, b, c):
    r = np.abs(y - c) / 2 / (np.floor(c - y) + c)
    return (1 + np.cos((4 * a + 2) * np.pi * (0.5 - r)) + 4 * b * r**2) / (b + 2)


class MaF12(_WFG):
    """WFG9: parameter-dependent bias, deceptive and multimodal shifts, concave front."""

    number = 12

    def _evaluate(self, x, out, *args, **kwargs):
        k, n = self.k, x.shape[1]
        z = x / (2.0 * np.arange(1, n + 1))
        # b_param: y_i^(0.02 + 49.98 (0.98/49.98 - (1 - 2u) |floor(0.5 - u) + 0.98/49.98|)), u = mean of later y.
        tail_sum = np.cumsum(z[:, ::-1], axis=1)[:, ::-1] - z
        counts = np.arange(n - 1, -1, -1, dtype=float)
        with np.errstate(divide="ignore", invalid="ignore"):
            u = tail_sum / counts
        a = 0.98 / 49.98
        t1 = z.copy()
        uu = u[:, :-1]
        t1[:, :-1] = z[:, :-1] ** (0.02 + (50 - 0.02) * (a - (1 - 2 * uu) * np.abs(np.floor(0.5 - uu) + a)))
        t2 = np.hstack([_s_decept(t1[:, :k], 0.35, 0.001, 0.05), _s_multi(t1[:, k:], 30, 95, 0.35)])
        d = t2[:, k:]
        L = d.shape[1]
        pair = 0.5 * np.sum(np.abs(d[:, :, None] - d[:, None, :]), axis=(1, 2))
        t_dist = (np.sum(d, axis=1) + 2 * pair) / np.ceil(L / 2) / (1 + 2 * L - 2 * np.ceil(L / 2))
        out["F"] = self._finish(t2[:, :k], t_dist, _wfg_concave)

    def front(self):
        h = uniform_points(N_FRONT_POINTS, self.n_obj)
        return h / np.linalg.norm(h, axis=1, keepdims=True) * self.scale


# ---------------------------------------------------------------- MaF13 (P7)


class MaF13(MaF):
    """P7: a degenerate front in the first three objectives, the rest functions of them."""

    number = 13

    def __init__(self, n_obj: int = 5, n_var: int | None = None):
        n_var = 5 if n_var is None else n_var
        xl = np.r_[0.0, 0.0, np.full(n_var - 2, -2.0)]
        xu = np.r_[1.0, 1.0, np.full(n_var - 2, 2.0)]
        super().__init__(n_obj, n_var, xl=xl, xu=xu)

    @staticmethod
    def default_n_var(m):
        return 5

    def _evaluate(self, x, out, *args, **kwargs):
        n, d = x.shape
        m = self.n_obj
        y = x - 2 * x[:, 1:2] * np.sin(2 * np.pi * x[:, 0:1] + np.arange(1, d + 1) * np.pi / d)
        f1 = np.sin(x[:, 0] * np.pi / 2) + 2 * np.mean(y[:, 3::3] ** 2, axis=1)
        f2 = np.cos(x[:, 0] * np.pi / 2) * np.sin(x[:, 1] * np.pi / 2) + 2 * np.mean(y[:, 4::3] ** 2, axis=1)
        f3 = np.cos(x[:, 0] * np.pi / 2) * np.cos(x[:, 1] * np.pi / 2) + 2 * np.mean(y[:, 2::3] ** 2, axis=1)
        rest = f1**2 + f2**10 + f3**10 + 2 * np.mean(y[:, 3:] ** 2, axis=1)
        out["F"] = np.column_stack([f1, f2, f3] + [rest] * (m - 3))

    def front(self):
        f = uniform_points(N_FRONT_POINTS, 3)
        f = f / np.linalg.norm(f, axis=1, keepdims=True)
        extra = f[:, 0] ** 2 + f[:, 1] ** 10 + f[:, 2] ** 10
        return np.hstack([f, np.repeat(extra[:, None], self.n_obj - 3, axis=1)])


# ---------------------------------------------------------------- MaF14-15 (LSMOP3, inverted LSMOP8)


def _lsmop_groups(m: int, nk: int = 2):
    """Subcomponent lengths of the LSMOP grouping from a logistic map (chaos-based sizes)."""
    c = [3.8 * 0.1 * (1 - 0.1)]
    for _ in range(m - 1):
        c.append(3.8 * c[-1] * (1 - c[-1]))
    c = np.asarray(c)
    d0 = 20 * m
    # MATLAB round() is half away from zero; the values here are never exactly .5.
    sublen = np.ceil(np.round(c / c.sum() * d0) / nk).astype(int)
    length = np.concatenate([[0], np.cumsum(sublen * nk)])
    return sublen, length


class _LSMOP(MaF):
    nk = 2

    def __init__(self, n_obj: int = 5, n_var: int | None = None):
        self.sublen, self.len = _lsmop_groups(n_obj, self.nk)
        n_var = self.default_n_var(n_obj) if n_var is None else n_var
        xu = np.r_[np.ones(n_obj - 1), np.full(n_var - n_obj + 1, 10.0)]
        super().__init__(n_obj, n_var, xl=0.0, xu=xu)

    @staticmethod
    def default_n_var(m):
        _, length = _lsmop_groups(m)
        return int(m - 1 + length[-1])

    def _g(self, y, odd_fn, even_fn):
        m = self.n_obj
        n = len(y)
        g = np.zeros((n, m))
        for i in range(m):
            fn = odd_fn if i % 2 == 0 else even_fn  # objective i+1 odd -> first function
            s = self.sublen[i]
            for j in range(self.nk):
                lo = self.len[i] + m - 1 + j * s
                g[:, i] += fn(y[:, lo : lo + s])
        return g / self.sublen / self.nk


def _rastrigin(x):
    return np.sum(x**2 - 10 * np.cos(2 * np.pi * x) + 10, axis=1)


def _rosenbrock(x):
    return np.sum(100 * (x[:, :-1] ** 2 - x[:, 1:]) ** 2 + (x[:, :-1] - 1) ** 2, axis=1)


def _griewank(x):
    return np.sum(x**2, axis=1) / 4000 - np.prod(np.cos(x / np.sqrt(np.arange(1, x.shape[1] + 1))), axis=1) + 1


def _sphere(x):
    return np.sum(x**2, axis=1)


class MaF14(_LSMOP):
    """LSMOP3: large-scale, partially separable Rastrigin/Rosenbrock, linear front."""

    number = 14

    def _evaluate(self, x, out, *args, **kwargs):
        m, d = self.n_obj, x.shape[1]
        y = x.copy()
        idx = np.arange(m, d + 1)
        y[:, m - 1 :] = (1 + idx / d) * x[:, m - 1 :] - 10 * x[:, :1]
        g = self._g(y, _rastrigin, _rosenbrock)
        out["F"] = (1 + g) * _linear(x[:, : m - 1])

    def front(self):
        return uniform_points(N_FRONT_POINTS, self.n_obj)


class MaF15(_LSMOP):
    """Inverted LSMOP8: large-scale, mixed separability, inverted spherical front."""

    number = 15

    def _evaluate(self, x, out, *args, **kwargs):
        m, d = self.n_obj, x.shape[1]
        y = x.copy()
        idx = np.arange(m, d + 1)
        y[:, m - 1 :] = (1 + np.cos(idx / d * np.pi / 2)) * x[:, m - 1 :] - 10 * x[:, :1]
        g = self._g(y, _griewank, _sphere)
        g_next = np.hstack([g[:, 1:], np.zeros((len(g), 1))])
        out["F"] = (1 + g + g_next) * (1 - _spherical(x[:, : m - 1]))

    def front(self):
        f = uniform_points(N_FRONT_POINTS, self.n_obj)
        return 1 - f / np.linalg.norm(f, axis=1, keepdims=True)


PROBLEMS: dict[str, type[MaF]] = {f"MaF{c.number}": c for c in (MaF1, MaF2, MaF3, MaF4, MaF5, MaF6, MaF7, MaF8, MaF9, MaF10, MaF11, MaF12, MaF13, MaF14, MaF15)}


def get_problem(name: str, n_obj: int) -> MaF:
    """A MaF problem by name ('MaF1'..'MaF15', case-insensitive) at the competition's default size."""
    key = {k.lower(): k for k in PROBLEMS}.get(name.lower())
    if key is None:
        raise KeyError(f"unknown problem {name!r}; expected one of {', '.join(PROBLEMS)}")
    return PROBLEMS[key](n_obj=n_obj)
