"""Catalog and presets: every number has a source, every preset matches its published size."""

from __future__ import annotations

import pytest

from problems.placement.catalog import gpu_catalog, model_presets
from problems.placement.specs import load_cluster

REQUIRED_GPUS = ["H100", "H200", "A100-80G", "A100-40G", "L40S", "L4", "A10G", "V100", "T4", "RTX-4090", "MI300X",
                 "GB200", "B200", "MI355X", "RTX-A6000", "RTX-3090", "H20", "H800", "A800", "A40"]
SOURCED = ["tflops", "memory_gb", "bandwidth_tbs", "intra_node", "price_usd_h", "mfu", "prefill_eff", "decode_eff"]


@pytest.mark.parametrize("name", REQUIRED_GPUS)
def test_catalog_gpu_has_every_figure_with_a_source(name):
    gpu = gpu_catalog()[name]
    for field in SOURCED:
        assert gpu.sources.get(field), f"{name}.{field} has no source"


def test_no_sparse_tflops_figures():
    # sparse peaks are double the dense ones; these are the dense BF16/FP16 figures
    cat = gpu_catalog()
    assert cat["H100"].tflops < 1000 and cat["L40S"].tflops < 400


@pytest.mark.parametrize("name", [n for n, a in model_presets().items() if a.published_params])
def test_preset_param_count_matches_published(name):
    arch = model_presets()[name]
    assert abs(arch.params / arch.published_params - 1) < 0.02


def test_a_part_has_a_peak_only_for_the_precisions_it_runs():
    """Datasheets (gpus.yaml DS, MEAS-GPUS): Volta and Turing have FP16 tensor cores and no BF16, Ampere
    BF16 and no FP8, Ada, Hopper and Blackwell FP8. A precision without a peak is refused, not run at
    `tflops` (a bf16 V100 was predicted at 78% MFU of an FP16 peak, an fp8 A100 at its BF16 peak)."""
    cat = gpu_catalog()
    for name in ("V100", "T4", "RTX-2080Ti", "Titan-RTX"):
        assert "bf16" not in cat[name].peak_tflops and "fp16" in cat[name].peak_tflops, name
        assert not cat[name].runs("bf16") and not cat[name].runs("fp8")
    for name in ("A100-80G", "A100-40G", "A800", "A10G", "A40", "RTX-A6000", "RTX-3090"):
        assert cat[name].runs("bf16") and not cat[name].runs("fp8"), name
    for name in ("L4", "L40S", "RTX-4090", "H100", "H200", "H20", "H800", "GH200", "B200", "GB200", "MI300X"):
        assert cat[name].runs("fp8"), name
    with pytest.raises(ValueError, match="V100 cannot run bf16: its peak_tflops has no bf16 figure"):
        cat["V100"].peak("bf16")
    with pytest.raises(ValueError, match="A100-80G cannot run fp8"):
        cat["A100-80G"].peak("fp8")
    assert cat["V100"].peak("tf32") == cat["V100"].peak("fp32") == 15.7  # no TF32 units: fp32 storage, FP32 units


def test_an_override_keeps_the_precisions_a_part_runs(tmp_path):
    """An override of `tflops` replaced the catalog's peaks by an empty set, every precision then ran
    at the figure (bf16 on a V100 again); a `peak_tflops` override dropped the precisions it did not name."""
    path = tmp_path / "c.yaml"
    path.write_text("name: c\nregions: {r: {inter_node_gbs: 10}}\n"
                    "gpu_types:\n  V100: {tflops: 100}\n  H100: {peak_tflops: {fp8: 1500}}\n"
                    "node_groups:\n  - {gpu: V100, nodes: 1, gpus_per_node: 8, region: r}\n"
                    "  - {gpu: H100, nodes: 1, gpus_per_node: 8, region: r}\n")
    pools = {p.id: p.gpu for p in load_cluster(path).pools}
    assert pools["V100@r"].peak("fp16") == 100 and pools["V100@r"].peak("fp32") == 100
    assert not pools["V100@r"].runs("bf16")
    assert pools["H100@r"].peak("fp8") == 1500 and pools["H100@r"].peak("bf16") == 989
    assert pools["H100@r"].peak("fp32") == 67


def test_tiny_preset_is_vllm_cpu_compatible():
    tiny = model_presets()["tiny"]
    assert tiny.hd == 64  # vLLM's CPU attention rejects head_dim 16


def test_override_and_new_gpu_type(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(
        "name: c\nregions: {r: {inter_node_gbs: 10}}\n"
        "gpu_types:\n  H100: {price_usd_h: 1.5, source: our contract}\n"
        "  X1: {tflops: 200, memory_gb: 32, bandwidth_tbs: 1.2, price_usd_h: 0.9, generation: ada}\n"
        "node_groups:\n  - {gpu: h100-sxm, nodes: 1, gpus_per_node: 8, region: r}\n"
        "  - {gpu: X1, nodes: 2, gpus_per_node: 4, region: r}\n"
    )
    cluster = load_cluster(path)
    pools = {p.id: p for p in cluster.pools}
    assert pools["H100@r"].gpu.price_usd_h == 1.5
    assert pools["H100@r"].gpu.sources["price_usd_h"] == "our contract"
    assert pools["H100@r"].gpu.tflops == gpu_catalog()["H100"].tflops  # untouched fields kept
    assert pools["X1@r"].count == 8 and pools["X1@r"].gpu.memory_gb == 32
    # efficiencies it does not give come from its generation's prior, which its sources name
    x1 = pools["X1@r"].gpu
    assert x1.decode_eff == gpu_catalog()["L40S"].decode_eff
    assert x1.sources["decode_eff"].startswith("prior of generation ada")


def test_a_new_gpu_type_without_a_generation_or_efficiencies_is_refused(tmp_path):
    from problems.errors import InputError

    path = tmp_path / "c.yaml"
    path.write_text("name: c\nregions: {r: {inter_node_gbs: 10}}\n"
                    "gpu_types:\n  X1: {tflops: 200, memory_gb: 32, bandwidth_tbs: 1.2, price_usd_h: 0.9}\n"
                    "node_groups:\n  - {gpu: X1, nodes: 1, gpus_per_node: 4, region: r}\n")
    with pytest.raises(InputError, match=r"gpu_types\.X1\.generation: missing"):
        load_cluster(path)
    path.write_text(path.read_text().replace("price_usd_h: 0.9}", "price_usd_h: 0.9, generation: kepler}"))
    with pytest.raises(InputError, match="unknown generation 'kepler'"):
        load_cluster(path)
    # all three efficiencies given: no prior needed
    path.write_text(path.read_text().replace("generation: kepler", "mfu: 0.4, prefill_eff: 0.5, decode_eff: 0.7"))
    assert load_cluster(path).pools[0].gpu.mfu == 0.4


def test_every_generation_prior_has_a_source_and_every_catalog_type_a_generation():
    from problems.placement.catalog import generation_priors

    for name, g in generation_priors().items():
        assert g["source"] and 0 < g["mfu"] <= 1 and 0 < g["decode_eff"] <= 1, name
    assert all(g.generation for n, g in gpu_catalog().items() if n != "cpu-local")


def test_six_and_ten_gpu_servers_take_the_tp_degrees_that_tile_them(tmp_path):
    from problems.placement.encoding import Layout
    from problems.placement.specs import load_workload

    path = tmp_path / "c.yaml"
    path.write_text("name: c\nregions: {r: {inter_node_gbs: 10}}\nnode_groups:\n"
                    "  - {gpu: RTX-4090, nodes: 2, gpus_per_node: 6, region: r}\n"
                    "  - {gpu: L40S, nodes: 1, gpus_per_node: 10, region: r}\n")
    cluster = load_cluster(path)
    wl = load_workload("problems/workloads/qwen2.5-7b-grpo.yaml")  # 28 heads, 4 KV heads
    lay = Layout.build(cluster, wl)
    assert list(lay.tp_options) == [1, 2]  # 3, 5, 6 and 10 do not divide the 4 KV heads (Megatron)
    opts = {p.id: list(lay.rtp_options[i][: lay.rtp_n[i]]) for i, p in enumerate(cluster.pools)}
    assert opts == {"RTX-4090@r": [1, 2], "L40S@r": [1, 2]}  # vLLM also needs the 28 heads divided


def test_nodes_of_different_sizes_are_planned_at_their_common_divisor_and_exported_as_they_are(tmp_path):
    """One GPU type in one region on an 8-GPU and a 4-GPU machine (and a 3-GPU one): plans take nodes of
    the sizes' common divisor, which every machine holds whole, and say so; the export lists the real
    machines (not made-up nodes of the smallest size)."""
    from mosearch.export import ExportContext, layout_lines
    from problems.placement.plan import Plan

    path = tmp_path / "c.yaml"
    groups = "  - {gpu: H100, nodes: 1, gpus_per_node: 8, region: r}\n  - {gpu: H100, nodes: 1, gpus_per_node: 4, region: r}\n"
    path.write_text("name: c\nregions: {r: {inter_node_gbs: 25}}\nnode_groups:\n" + groups)
    cluster = load_cluster(path)
    (pool,) = cluster.pools
    assert (pool.count, pool.gpus_per_node, pool.node_sizes) == (12, 4, (8, 4))
    (note,) = cluster.notes
    assert note.startswith(f"{path}: H100@r has nodes of 8 and 4 GPUs: plans treat them as nodes of 4")
    path.write_text(path.read_text() + "  - {gpu: H100, nodes: 1, gpus_per_node: 3, region: r}\n")
    assert load_cluster(path).pools[0].gpus_per_node == 1
    path.write_text("name: c\nregions: {r: {inter_node_gbs: 25}}\nnode_groups:\n" + groups.replace("8", "4"))
    uniform = load_cluster(path)
    assert (uniform.pools[0].gpus_per_node, uniform.pools[0].node_sizes, uniform.notes) == (4, (), [])
    # an 8-GPU rollout engine set and 4 training GPUs on the 8 + 4 machines
    path.write_text("name: c\nregions: {r: {inter_node_gbs: 25}}\nnode_groups:\n" + groups)
    ref = {"name": "c", "path": str(path), "sha256": "0" * 64}
    plan = Plan.model_validate({
        "plan_id": "p", "cluster": ref, "workload": dict(ref, name="w"),
        "pools": [{"pool": "H100@r", "gpu": "H100", "region": "r", "rollout_gpus": 8, "train_gpus": 4,
                   "shared_gpus": 0, "rollout_tp": 4}],
        "rollout": {"kv_mem_frac": 0.8, "max_num_seqs": 64},
        "train": {"dp": 1, "tp": 4, "pp": 1, "sharding": "none", "micro_batch": 1},
        "execution": {"mode": "async", "staleness_bound": 1, "pipeline_chunks": 1},
        "weight_sync": {"route": "direct"}})
    assert layout_lines(plan, ExportContext.from_specs(cluster)) == [
        "node 0: H100@r, GPUs 0-7: rollout 8", "node 1: H100@r, GPUs 8-11: train 4"]


def test_widest_path_routes_through_a_relay(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(
        "name: c\nregions: {a: {inter_node_gbs: 10}, b: {inter_node_gbs: 10}, c: {inter_node_gbs: 10}}\n"
        "links:\n  - {between: [a, b], bandwidth_gbs: 10, latency_ms: 10, egress_usd_per_gb: 0.01}\n"
        "  - {between: [b, c], bandwidth_gbs: 5, latency_ms: 20, egress_usd_per_gb: 0.02}\n"
        "  - {between: [a, c], bandwidth_gbs: 1, latency_ms: 5, egress_usd_per_gb: 0.1}\n"
        "node_groups:\n  - {gpu: L4, nodes: 1, gpus_per_node: 1, region: a}\n"
        "  - {gpu: L4, nodes: 1, gpus_per_node: 1, region: c}\n"
    )
    cluster = load_cluster(path)
    a, c = cluster.region_index("a"), cluster.region_index("c")
    assert cluster.region_bw[a, c] == 5  # via b beats the 1 GB/s direct link
    assert cluster.region_latency[a, c] == pytest.approx(0.030)
    assert cluster.region_egress[a, c] == pytest.approx(0.03)


def test_tiny_preset_matches_the_model_the_trainer_builds():
    from trainer.models.tiny import CHARS, SPECIAL_TOKENS, TINY_ARCH

    tiny = model_presets()["tiny"]
    assert (tiny.layers, tiny.hidden, tiny.heads, tiny.kv_heads, tiny.ffn, tiny.hd, tiny.tied_embeddings) == (
        TINY_ARCH["num_hidden_layers"], TINY_ARCH["hidden_size"], TINY_ARCH["num_attention_heads"],
        TINY_ARCH["num_key_value_heads"], TINY_ARCH["intermediate_size"], TINY_ARCH["head_dim"],
        TINY_ARCH["tie_word_embeddings"])
    assert tiny.vocab == len(SPECIAL_TOKENS) + len(CHARS)


def test_a_node_groups_own_link_is_shown_with_its_kind(tmp_path, capsys):
    """H100 nodes given `intra_node: {kind: pcie, bandwidth_gbs: 64}` were shown as 'nvlink 64 GB/s' (the
    catalog's kind beside the group's figure)."""
    from mosearch.cli import main

    path = tmp_path / "c.yaml"
    path.write_text("name: c\nregions: {r: {inter_node_gbs: 25}}\nnode_groups:\n  - {gpu: H100, nodes: 2, "
                    "gpus_per_node: 4, region: r, intra_node: {kind: pcie, bandwidth_gbs: 64}}\n"
                    "  - {gpu: A100, nodes: 1, gpus_per_node: 8, region: r}\n")
    pools = {p.id: p for p in load_cluster(path).pools}
    assert (pools["H100@r"].link_kind, pools["H100@r"].intra_gbs) == ("pcie", 64)
    assert (pools["A100-80G@r"].link_kind, pools["A100-80G@r"].intra_gbs) == ("nvlink", 600)
    assert main(["inspect", "--cluster", str(path)]) == 0
    out = capsys.readouterr().out
    assert "pcie 64 GB/s" in out and "nvlink 64" not in out and "nvlink 600 GB/s" in out


def test_a_catalog_type_overridden_under_an_alias_takes_that_name(tmp_path):
    """`A100: {memory_gb: 40}` left the pool named 'A100-80G@r' with 40 GB, and an override of alias A100
    changed the nodes named A100-80G too (one pool of both). The override is now a type of the name it is
    given under; the catalog part keeps its other names and its figures."""
    path = tmp_path / "c.yaml"
    path.write_text("name: c\nregions: {r: {inter_node_gbs: 25}}\n"
                    "gpu_types:\n  A100: {memory_gb: 40, bandwidth_tbs: 1.555, price_usd_h: 0.5}\n"
                    "node_groups:\n  - {gpu: A100, nodes: 1, gpus_per_node: 4, region: r}\n"
                    "  - {gpu: A100-SXM-80G, nodes: 1, gpus_per_node: 8, region: r}\n")
    pools = {p.id: p for p in load_cluster(path).pools}
    assert set(pools) == {"A100@r", "A100-80G@r"}
    assert (pools["A100@r"].count, pools["A100@r"].gpu.memory_gb, pools["A100@r"].gpu.price_usd_h) == (4, 40, 0.5)
    assert pools["A100@r"].gpu.peak("bf16") == 312 and pools["A100@r"].gpu.mfu == gpu_catalog()["A100-80G"].mfu
    assert (pools["A100-80G@r"].count, pools["A100-80G@r"].gpu.memory_gb) == (8, 80)
    # under its own name it stays the catalog type, overridden
    path.write_text(path.read_text().replace("  A100: {", "  A100-80G: {"))
    pools = {p.id: p for p in load_cluster(path).pools}
    assert set(pools) == {"A100-80G@r"} and pools["A100-80G@r"].gpu.memory_gb == 40


def test_usable_memory_is_the_runtimes_figure_of_the_part():
    """A part sold as N GB holds N GiB, less what the driver and ECC keep (GDDR6 with ECC: 1/16): the runtime's
    figure lies between 90% of N GiB and N GiB, and names its source. The measured H200 is the one this project measured itself."""
    cat = gpu_catalog()
    given = [g for g in cat.values() if g.usable_memory_gb]
    assert {"H100", "H200", "A100-80G", "MI300X", "L40S"} <= {g.name for g in given}
    for g in given:
        assert 0.90 * g.memory_gb * 2**30 / 1e9 <= g.usable_memory_gb <= g.memory_gb * 2**30 / 1e9, g.name
        assert g.sources.get("usable_memory_gb"), g.name
        assert g.capacity_gb == g.usable_memory_gb
    assert cat["H200"].usable_memory_gb == pytest.approx(150.10988032, abs=0.005)  # results/bench/gpu_probe_h200.jsonl
    without = next(g for g in cat.values() if not g.usable_memory_gb)
    assert without.capacity_gb == without.memory_gb


def test_a_variant_keeps_the_parts_runtime_share(tmp_path):
    """A cluster that overrides memory_gb (an H100 with 96 GB) gets the catalog part's usable share of it
    unless it gives usable_memory_gb itself."""
    path = tmp_path / "c.yaml"
    path.write_text("name: c\nregions: {r: {inter_node_gbs: 10}}\n"
                    "gpu_types:\n  H100: {memory_gb: 96}\n"
                    "node_groups:\n  - {gpu: H100, nodes: 1, gpus_per_node: 8, region: r}\n")
    h100 = gpu_catalog()["H100"]
    got = load_cluster(path).pools[0].gpu
    assert got.memory_gb == 96 and got.capacity_gb == pytest.approx(96 * h100.usable_memory_gb / 80)
    path.write_text(path.read_text().replace("{memory_gb: 96}", "{memory_gb: 96, usable_memory_gb: 95}"))
    assert load_cluster(path).pools[0].gpu.capacity_gb == 95
