"""Random vectors -> repair -> decode -> Plan validates -> encode -> decode round-trips."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from problems.placement.plan import Plan
from tests.placement.conftest import CASES

settings.register_profile("placement", max_examples=60, deadline=None,
                          suppress_health_check=[HealthCheck.function_scoped_fixture])
settings.load_profile("placement")


def unit_vectors(n_max=40):
    return st.lists(st.floats(-0.5, 1.5, allow_nan=False), min_size=n_max, max_size=n_max)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c[0])
@given(u=unit_vectors())
def test_repair_decode_validate_roundtrip(problems_by_case, case, u):
    p = problems_by_case[case]
    raw = p.xl + np.array(u[: p.n_var]) * (p.xu - p.xl)  # includes out-of-bounds values
    x = p.layout.repair(raw)[0]
    assert np.array_equal(p.layout.repair(x)[0], x), "repair is idempotent"
    plan = p.decode(x, lifetime=False)
    again = Plan.model_validate(plan.model_dump())  # the trainer's validators accept it
    assert again == plan
    x2 = p.encode(plan)
    assert np.allclose(x2, x)
    assert p.decode(x2, lifetime=False).model_dump() == plan.model_dump()
    # structure: every replica in one pool, engines tile their pool's rollout GPUs, TP in a node
    t = plan.train
    for pool, spec in zip(plan.pools, p.cluster.pools):
        assert (pool.train_gpus + pool.shared_gpus) % (t.tp * t.pp) == 0
        assert (pool.rollout_gpus + pool.shared_gpus) % pool.rollout_tp == 0
        assert pool.rollout_tp <= spec.gpus_per_node and pool.used_gpus <= spec.count
        if pool.train_gpus + pool.shared_gpus:
            assert t.tp <= spec.gpus_per_node
    assert plan.predicted["structure"] == 0.0
    assert plan.cluster.sha256 and len(plan.cluster.sha256) == 64


@pytest.mark.parametrize("case", CASES, ids=lambda c: c[0])
def test_population_repair_is_valid(problems_by_case, case):
    p = problems_by_case[case]
    rng = np.random.default_rng(3)
    X = p.layout.repair(p.xl - 1 + rng.random((3000, p.n_var)) * (p.xu - p.xl + 2))
    r = p.evaluate_matrix(X)
    assert r["structure"].max() == 0 and r["repaired"].max() == 0
    assert np.all(X >= p.xl) and np.all(X <= p.xu)
    ints = p.integer_mask
    assert np.array_equal(X[:, ints], np.rint(X[:, ints]))
    for k, v in r.items():
        assert np.all(np.isfinite(v)), k


def test_encode_rejects_foreign_layout(problems_by_case):
    p = problems_by_case[("mixed-8", "qwen2.5-7b-grpo")]
    plan = p.decode(p.layout.repair(np.zeros(p.n_var))[0], lifetime=False)
    bad = plan.model_copy(update={"train": plan.train.model_copy(update={"pp": 3})})
    with pytest.raises(ValueError):
        p.encode(bad)
