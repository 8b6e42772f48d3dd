"""Calibration: the fit recovers known parameters; a cluster's profile replaces catalog figures."""

from __future__ import annotations

import numpy as np
import pytest
import yaml

from problems.errors import InputError
from problems.placement import PlacementProblem
from problems.placement.calibration import Profile, fit
from problems.placement.specs import load_cluster

PARAMS, LAYERS, HIDDEN, KV_TOKEN, WEIGHTS = 500_000, 2, 128, 2048, 2_000_000
TRUE = dict(tflops=0.2, bw_tbs=0.015, mfu=0.3, train_over=0.004, prefill_eff=0.4, prefill_over=0.01,
            decode_eff=0.2, decode_over=0.003)


def synthetic_measurements(noise: float = 0.0, seed: int = 0) -> dict:
    """Rows as `mosearch profile` writes them, generated from known parameters."""
    rng = np.random.default_rng(seed)
    jitter = lambda: 1 + noise * rng.standard_normal()  # noqa: E731
    peak = TRUE["tflops"] * 1e12
    train = []
    for mb in (1, 4, 8):
        for seq in (32, 64, 128):
            tokens = mb * seq
            flops = 6 * PARAMS * tokens + 12 * LAYERS * HIDDEN * seq * tokens
            train.append({"micro_batch": mb, "seq_len": seq, "tokens": tokens, "params": PARAMS,
                          "seconds": (TRUE["train_over"] + flops / (peak * TRUE["mfu"])) * jitter()})
    prefill, decode = [], []
    for b in (1, 8, 32):
        for p in (16, 64):
            s = (TRUE["prefill_over"] + 2 * PARAMS * b * p / (peak * TRUE["prefill_eff"])) * jitter()
            prefill.append({"batch": b, "prompt_len": p, "tokens": b * p, "seconds": s, "tokens_s": b * p / s})
            ctx = p + 16
            step = (TRUE["decode_over"] + (WEIGHTS + b * ctx * KV_TOKEN) / (TRUE["bw_tbs"] * 1e12 * TRUE["decode_eff"])) * jitter()
            decode.append({"batch": b, "context": ctx, "step_seconds": step, "tokens_s": b / step})
    return {
        "matmul": [{"n": 512, "dtype": "float32", "seconds": 1.0, "tflops": TRUE["tflops"]}],
        "memory_bandwidth": [{"mib": 64, "seconds": 1.0, "gbs": TRUE["bw_tbs"] * 1e3}],
        "train_step": train, "prefill": prefill, "decode": decode,
        "weight_sync": [{"bytes": WEIGHTS, "seconds": 0.02}],
        "collective": [{"bytes": 2**20, "world": 2, "backend": "gloo", "seconds": 0.01, "bus_gbs": 1.5}],
        "offload": [{"bytes": 8e6, "seconds": 0.002}], "engine_switch": [{"what": "x", "seconds": 0.001}],
    }


@pytest.mark.parametrize("noise", [0.0, 0.02])
def test_fit_recovers_known_parameters(noise):
    f = fit(synthetic_measurements(noise), PARAMS, LAYERS, HIDDEN, KV_TOKEN, WEIGHTS)
    tol = 1e-6 if noise == 0 else 0.15
    assert f.mfu == pytest.approx(TRUE["mfu"], rel=tol)
    assert f.prefill_eff == pytest.approx(TRUE["prefill_eff"], rel=tol)
    assert f.decode_eff == pytest.approx(TRUE["decode_eff"], rel=tol)
    assert f.train_overhead_s == pytest.approx(TRUE["train_over"], rel=max(tol, 1e-6) * 3)
    assert f.decode_step_overhead_s == pytest.approx(TRUE["decode_over"], rel=max(tol, 1e-6) * 3)
    assert f.intra_gbs == 1.5 and f.switch_s == pytest.approx(0.003)


def write_profile(dir_, device_type="cpu-local"):
    f = fit(synthetic_measurements(), PARAMS, LAYERS, HIDDEN, KV_TOKEN, WEIGHTS)
    prof = Profile(device_type=device_type, measurements=synthetic_measurements(), fitted=f)
    (dir_ / "prof.yaml").write_text(yaml.safe_dump(prof.model_dump(mode="json")))
    return f


def cluster_with_profile(dir_, gpu="cpu-local"):
    path = dir_ / "cluster.yaml"
    path.write_text("name: c\nregions: {r: {inter_node_gbs: 5}}\n"
                    f"profiles: {{{gpu}: prof.yaml}}\n"
                    f"node_groups:\n  - {{gpu: {gpu}, nodes: 1, gpus_per_node: 2, region: r}}\n")
    return path


def test_profile_replaces_catalog_figures_and_feeds_the_model(tmp_path, repo_root):
    fitted = write_profile(tmp_path)
    cluster = load_cluster(cluster_with_profile(tmp_path))
    gpu = cluster.pools[0].gpu
    assert gpu.tflops == fitted.tflops and gpu.mfu == pytest.approx(fitted.mfu)
    assert gpu.sources["mfu"] == "profile prof.yaml"
    assert cluster.pools[0].intra_gbs == fitted.intra_gbs
    workload = repo_root / "problems" / "workloads" / "tiny-grpo.yaml"
    calibrated = PlacementProblem.from_files(cluster_with_profile(tmp_path), workload)
    catalog = PlacementProblem.from_files(repo_root / "problems" / "clusters" / "local.yaml", workload)
    assert calibrated.efficiencies["cpu-local"]["decode_step_s"] == pytest.approx(fitted.decode_step_overhead_s)
    X = np.random.default_rng(0).uniform(catalog.xl, catalog.xu, (200, catalog.n_var))
    slow, fast = calibrated.evaluate_matrix(X)["step_s"], catalog.evaluate_matrix(X)["step_s"]
    assert np.all(slow > fast)  # per-step overheads and a lower measured peak only add time


def test_profile_of_another_device_is_refused(tmp_path):
    write_profile(tmp_path, device_type="H100")
    with pytest.raises(InputError, match="profiles.cpu-local: .*profiles 'H100', not 'cpu-local'"):
        load_cluster(cluster_with_profile(tmp_path))


def test_run_overheads_add_per_call_and_per_step(repo_root):
    cluster = repo_root / "problems" / "clusters" / "local.yaml"
    workload = repo_root / "problems" / "workloads" / "tiny-grpo.yaml"
    plain = PlacementProblem.from_files(cluster, workload)
    slow = PlacementProblem(plain.cluster, plain.workload,
                            efficiencies={"cpu-local": {"rollout_call_s": 0.1, "train_call_s": 0.05}})
    X = plain.repair()._do(plain, np.random.default_rng(1).uniform(plain.xl, plain.xu, (300, plain.n_var)))
    a, b = plain.evaluate_matrix(X), slow.evaluate_matrix(X)
    chunks = np.where(X[:, plain.layout.g("mode")] == 0, 1, 2 ** X[:, plain.layout.g("log2_pipeline_chunks")])
    assert np.allclose(b["rollout_s"] - a["rollout_s"], 0.1 * chunks)
    assert np.allclose(b["train_s"] - a["train_s"], 0.05)
    assert np.all(b["step_s"] >= a["step_s"])
