"""The training-time formulas and the validation fit are physical: hand-counted FLOPs and bytes,
efficiencies in (0, 1], a fit that recovers known parameters, and the placement model using the
same element-wise term."""

import sys
from pathlib import Path

import numpy as np
import pytest

from problems.placement.model.training import layer_elementwise_bytes, layer_fwd_flops

from tests.placement.conftest import problem

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
import model_validation as mv  # noqa: E402


def test_layer_fwd_flops_matches_a_hand_count():
    # GPT-Neo-2.7B layer, h=2560, ffn=10240, one 2048-token sequence, full score matrix:
    # weights 4*2560^2 + 2*2560*10240 = 78,643,200; per token 2*78,643,200 + 4*2560*2048
    assert layer_fwd_flops(78_643_200, 2560, 2048, 1, 2048) == 2048 * (157_286_400 + 20_971_520)
    # causal flash attention counts half the context
    assert layer_fwd_flops(0, 2560, 2048, 1, 1024) == pytest.approx(0.5 * layer_fwd_flops(0, 2560, 2048, 1, 2048))


def test_elementwise_bytes_hand_count():
    # one token, h=1, no MLP, fp16: forward 2 layer norms (r+w) + 2 dropout-residual adds (3 + mask)
    fwd, bwd = layer_elementwise_bytes(1, 1, 0, 2, gated=False)
    assert fwd == 2 * 2 * 2 + 2 * (3 * 2 + 1)
    # backward: 2 layer-norm grads (r x, r dy, w dx), 2 dropout grads (r dy, w dx, mask), 2 residual sums
    assert bwd == 2 * 3 * 2 + 2 * (2 * 2 + 1) + 2 * 3 * 2
    # the score matrix: fused softmax moves fewer bytes than the unfused fp32 path, per element size
    f16 = layer_elementwise_bytes(0, 1, 0, 2, score_elems=1.0)
    f32 = layer_elementwise_bytes(0, 1, 0, 4, score_elems=1.0, fused_softmax=False)
    assert f16 == (13.0, 19.0) and f32[0] > 2 * f16[0] and f32[1] > 2 * f16[1]
    # SwiGLU reads two inputs where GeLU reads one
    assert layer_elementwise_bytes(1, 0, 100, 2)[0] > layer_elementwise_bytes(1, 0, 100, 2, gated=False)[0]


def test_fit_recovers_known_efficiencies():
    rng = np.random.default_rng(0)
    n = 60
    comm = np.where(rng.random(n) < 0.5, 0, rng.uniform(1, 20, n))
    X = np.column_stack([rng.uniform(1, 50, n), rng.uniform(1, 30, n), comm])
    gpus = np.array(["A100-40"] * 30 + ["V100-16"] * 30)
    true = {"A100-40": (0.7, 0.8, 1.5), "V100-16": (0.6, 0.9, 0.5)}  # eff_c, eff_m, c ms
    eff_link = 0.4  # both on NVLink
    y = np.array([X[i, 0] / true[g][0] + X[i, 1] / true[g][1] + X[i, 2] / eff_link + true[g][2]
                  for i, g in enumerate(gpus)])
    fit = mv.fit_training(X, y, gpus, gpus)
    for g, (ec, em, c) in true.items():
        inv_c, inv_m, inv_l, floor = fit[g]
        assert 1 / inv_c == pytest.approx(ec, rel=1e-4) and 1 / inv_m == pytest.approx(em, rel=1e-4)
        assert 1 / inv_l == pytest.approx(eff_link, rel=1e-4) and floor == pytest.approx(c, rel=1e-3)


@pytest.fixture(scope="module")
def training_results():
    return mv.validate_training()


def test_fitted_efficiencies_are_physical(training_results):
    assert training_results
    for r in training_results:
        inv_c, inv_m, inv_l, c = r["sol"]
        for inv in (inv_c, inv_m, inv_l):
            assert np.isfinite(inv) and inv >= 1.0 - 1e-9  # efficiency in (0, 1]
        assert c >= 0


def test_training_held_out_medians(training_results):
    by_gpu: dict[str, list] = {}
    for r in training_results:
        by_gpu.setdefault(r["gpu"], []).extend(r["err_held"][~np.isnan(r["err_held"])])
    assert set(by_gpu) == {"A100-40", "A100-80", "GH-96", "RTX-2080", "RTX-3090", "Titan-RTX", "V100-16"}
    assert all(len(v) for v in by_gpu.values())  # every GPU type has held-out rows
    # RTX-3090 misses the target (tp=2 vs tp>=4 link topology, see the report); the rest meet it
    for gpu, err in by_gpu.items():
        if gpu != "RTX-3090":
            assert np.median(err) <= 0.15, gpu


def test_placement_training_time_uses_the_elementwise_term():
    # the same element-wise HBM term as the validation: a lower bandwidth efficiency slows training
    base = problem("local", "tiny-grpo")
    slow_mem = problem("local", "tiny-grpo", efficiencies={"cpu-local": {"decode_eff": 0.01}})
    raw = base.xl + np.random.default_rng(1).random((100, base.n_var)) * (base.xu - base.xl)
    X = base.layout.repair(raw)
    a, b = base.evaluate_matrix(X), slow_mem.evaluate_matrix(X)
    assert np.all(b["train_compute_s"] > a["train_compute_s"])
