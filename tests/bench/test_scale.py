"""What keeps a default search bounded on many GPU pools: the MILP baseline's node limit."""

from __future__ import annotations

import numpy as np

from problems.placement.baselines import milp


def _instance(seed: int):
    # 24 pools x 4 engine TP options: a MILP that needs branching (8 nodes to optimality for seed 0)
    rng = np.random.default_rng(seed)
    P = 24
    rtp = np.tile([1, 2, 4, 8], (P, 1))
    counts = rng.choice([64, 128], P).astype(float)
    rho = rng.uniform(0.1, 1.0, (P, 4))
    tau = rng.uniform(0.05, 0.5, P)
    price = rng.uniform(1, 4, P)
    return rho, rtp, tau, 8, counts, price, 701.3


def test_milp_at_the_node_limit_returns_its_best_integer_plan(monkeypatch):
    rho, rtp, tau, g, counts, price, budget = _instance(0)
    exact = milp.solve(rho, rtp, tau, g, counts, price, budget)
    monkeypatch.setattr(milp, "NODE_LIMIT", 2)
    cut = milp.solve(rho, rtp, tau, g, counts, price, budget)
    assert exact is not None and cut is not None  # stopped early, still a plan
    roll, train, opt = cut
    assert (roll + train <= counts).all() and train.sum() >= g and roll.sum() >= 1
    spend = float(price @ (roll + train))
    assert spend <= budget + 1e-6
    # rollout keeps up with training in the linear model, as the MILP requires
    assert (rho[np.arange(len(rho)), opt] * roll).sum() >= (tau * train).sum() - 1e-6
    # never better than the optimum
    assert (tau * train).sum() <= (tau * exact[1]).sum() + 1e-6
