"""Time one MaOEA-CS environmental selection: 2N = 500 candidates, N = 250 survivors, M = 10.

    python -m mosearch.bench.selection_speed [--m 10] [--n 250] [--repeats 50]

The candidates are a late-run-like population: 2N points near a 10-objective simplex
front with small noise, so the first front is larger than N and the full path runs
(non-dominated sort, corners, nadir filter, max-min angle selection). Target: <= 20 ms.
"""

from __future__ import annotations

import argparse
import os
import time

# One BLAS thread: on a shared machine a second BLAS thread waits for a busy core and
# multiplies the wall time of these small matrix products by ten.
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

from mosearch.algorithms.dsa import dsa_select  # noqa: E402


def population(n2: int, m: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = rng.random((n2, m)) ** 2
    F = x / x.sum(axis=1, keepdims=True)
    return F + 0.02 * rng.random((n2, m))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--m", type=int, default=10)
    ap.add_argument("--n", type=int, default=250)
    ap.add_argument("--repeats", type=int, default=50)
    args = ap.parse_args(argv)
    pops = [population(2 * args.n, args.m, seed=s) for s in range(args.repeats)]
    dsa_select(pops[0], args.n)  # warm up imports and caches
    wall, cpu = [], []
    for F in pops:
        w0, c0 = time.perf_counter(), time.process_time()
        sel = dsa_select(F, args.n)
        wall.append(time.perf_counter() - w0)
        cpu.append(time.process_time() - c0)
        assert len(sel.survivors) == args.n
    w, c = np.array(wall) * 1e3, np.array(cpu) * 1e3
    # CPU time is what the code costs; wall time also counts waiting for a shared core.
    print(f"environmental selection, 2N={2 * args.n} -> N={args.n}, M={args.m}, {args.repeats} runs: "
          f"CPU median {np.median(c):.2f} ms (p90 {np.percentile(c, 90):.2f}); "
          f"wall median {np.median(w):.2f} ms (min {w.min():.2f}, p90 {np.percentile(w, 90):.2f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
