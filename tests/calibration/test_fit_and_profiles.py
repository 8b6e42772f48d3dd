"""Calibration: the fit recovers known parameters; a cluster's profile replaces catalog figures."""

from __future__ import annotations

import numpy as np
import pytest
import yaml

from problems.errors import InputError
from problems.placement import PlacementProblem
from problems.placement.calibration import fit
from problems.placement.profile import Profile
from problems.placement.specs import load_cluster

PARAMS, LAYERS, HIDDEN, KV_TOKEN, WEIGHTS = 500_000, 2, 128, 2048, 2_000_000
TRUE = dict(tflops=0.2, bw_tbs=0.015, mfu=0.3, train_over=0.004, prefill_eff=0.4, prefill_over=0.01,
            decode_eff=0.2, decode_over=0.003)


def synthetic_measurements(noise: float = 0.0, seed: int = 0, legacy: bool = False) -> dict:
    """Rows as `mosearch profile` writes them, generated from known parameters with the model's
    formulas: a micro-batch = overhead + FLOPs at mfu + element-wise traffic at decode_eff; a grid
    step adds one Adam update (states streamed through memory). `legacy`: rows from before the
    profile timed forward + backward on its own."""
    from problems.placement.model.training import layer_elementwise_bytes

    rng = np.random.default_rng(seed)
    jitter = lambda: 1 + noise * rng.standard_normal()  # noqa: E731
    peak = TRUE["tflops"] * 1e12
    mem = TRUE["bw_tbs"] * 1e12 * TRUE["decode_eff"]
    adam = PARAMS * 2 * (4 + 4 + 8) / mem
    train = []
    for mb in (1, 4, 8):
        for seq in (32, 64, 128):
            tokens = mb * seq
            flops = 6 * PARAMS * tokens + 12 * LAYERS * HIDDEN * seq * tokens
            ew_f, ew_b = layer_elementwise_bytes(tokens, HIDDEN, 4 * HIDDEN, 4, True)
            fb = (TRUE["train_over"] + flops / (peak * TRUE["mfu"]) + LAYERS * (ew_f + ew_b) / mem) * jitter()
            row = {"micro_batch": mb, "seq_len": seq, "tokens": tokens, "params": PARAMS, "seconds": fb + adam}
            if not legacy:
                row["fwd_bwd_seconds"] = fb
            train.append(row)
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


def test_fit_of_legacy_rows_takes_the_models_adam_update_out():
    """Profiles that timed an optimizer update with every grid step refit to the same parameters."""
    new = fit(synthetic_measurements(), PARAMS, LAYERS, HIDDEN, KV_TOKEN, WEIGHTS)
    old = fit(synthetic_measurements(legacy=True), PARAMS, LAYERS, HIDDEN, KV_TOKEN, WEIGHTS)
    assert old.mfu == pytest.approx(new.mfu, rel=1e-6)
    assert old.train_overhead_s == pytest.approx(new.train_overhead_s, rel=1e-6)


def write_profile(dir_, device_type="cpu-local"):
    f = fit(synthetic_measurements(), PARAMS, LAYERS, HIDDEN, KV_TOKEN, WEIGHTS)
    prof = Profile(device_type=device_type, measurements=synthetic_measurements(), fitted=f)
    (dir_ / "prof.yaml").write_text(yaml.safe_dump(prof.model_dump(mode="json")))
    return f


def catalog_local(repo_root, dir_):
    """The shipped local cluster without its profile: the catalog's cpu-local figures."""
    data = yaml.safe_load((repo_root / "problems" / "clusters" / "local.yaml").read_text())
    data.pop("profiles", None)
    path = dir_ / "local-catalog.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


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
    catalog = PlacementProblem.from_files(catalog_local(repo_root, tmp_path), workload)
    assert calibrated.efficiencies["cpu-local"]["decode_step_s"] == pytest.approx(fitted.decode_step_overhead_s)
    X = np.random.default_rng(0).uniform(catalog.xl, catalog.xu, (200, catalog.n_var))
    slow, fast = calibrated.evaluate_matrix(X)["step_s"], catalog.evaluate_matrix(X)["step_s"]
    assert np.all(slow > fast)  # per-step overheads and a lower measured peak only add time


def test_profile_of_another_device_is_refused(tmp_path):
    write_profile(tmp_path, device_type="H100")
    with pytest.raises(InputError, match="profiles.cpu-local: .*profiles 'H100', not 'cpu-local'"):
        load_cluster(cluster_with_profile(tmp_path))


def test_run_overheads_add_per_call_and_per_step(repo_root, tmp_path):
    cluster = catalog_local(repo_root, tmp_path)
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


def test_dp_microbatch_overhead_charges_each_micro_batch_of_a_rank_only_when_dp_exceeds_one(repo_root, tmp_path):
    cluster = catalog_local(repo_root, tmp_path)
    workload = repo_root / "problems" / "workloads" / "tiny-grpo.yaml"
    plain = PlacementProblem.from_files(cluster, workload)
    ddp = PlacementProblem(plain.cluster, plain.workload, efficiencies={"cpu-local": {"dp_microbatch_s": 0.01}})
    X = plain.repair()._do(plain, np.random.default_rng(2).uniform(plain.xl, plain.xu, (400, plain.n_var)))
    a, b = plain.evaluate_matrix(X), ddp.evaluate_matrix(X)
    extra = b["train_s"] - a["train_s"]
    dp = np.array([plain.decode(x, lifetime=False).train.dp for x in X])
    assert (dp == 1).any() and (dp > 1).any()
    assert np.allclose(extra[dp == 1], 0.0)
    mb = np.array([plain.decode(x, lifetime=False).train.micro_batch for x in X])
    chunks = np.where(X[:, plain.layout.g("mode")] == 0, 1, 2 ** X[:, plain.layout.g("log2_pipeline_chunks")])
    samples = plain.workload.prompts_per_step * plain.workload.samples_per_prompt
    per_rank = chunks * np.ceil(samples / dp / chunks / mb)
    sel = dp > 1
    assert np.allclose(extra[sel], 0.01 * per_rank[sel])
    # the training loop's own cost is charged on every rank's micro-batches, dp 1 too
    loop = PlacementProblem(plain.cluster, plain.workload, efficiencies={"cpu-local": {"microbatch_loop_s": 0.01}})
    assert np.allclose(loop.evaluate_matrix(X)["train_s"] - a["train_s"], 0.01 * per_rank)


def test_refit_rewrites_the_fit_from_raw_measurements_and_keeps_run_overheads(tmp_path, repo_root):
    import subprocess
    import sys

    f = fit(synthetic_measurements(legacy=True), PARAMS, LAYERS, HIDDEN, KV_TOKEN, WEIGHTS)
    stale = f.model_copy(update={"mfu": 0.9, "rollout_call_s": 0.07, "dp_microbatch_s": 0.004})
    prof = Profile(device_type="cpu-local", model={"path": "tiny"}, measurements=synthetic_measurements(legacy=True),
                   fitted=stale)
    (tmp_path / "old.yaml").write_text(yaml.safe_dump(prof.model_dump(mode="json")))
    env = {"MOSEARCH_CACHE": str(tmp_path / "cache"), "PATH": "/usr/bin:/bin"}
    r = subprocess.run([sys.executable, "-m", "mosearch.cli", "profile", "--refit", str(tmp_path / "old.yaml"),
                        "--out", str(tmp_path / "new.yaml")], capture_output=True, text=True, cwd=repo_root, env=env)
    assert r.returncode == 0, r.stderr
    new = Profile(**yaml.safe_load((tmp_path / "new.yaml").read_text()))
    assert new.fitted.mfu != 0.9 and new.fitted.mfu == pytest.approx(TRUE["mfu"], rel=0.05)
    assert new.fitted.rollout_call_s == 0.07 and new.fitted.dp_microbatch_s == 0.004
    assert new.measurements == prof.measurements
