"""Every bad-input case of the specs: exit status 2 and one exact line naming file, key, problem."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from mosearch.cli import main

REPO = Path(__file__).resolve().parents[2]
GOOD_CLUSTER = """\
name: two-regions
regions:
  east: {inter_node_gbs: 50}
  west: {inter_node_gbs: 25}
links:
  - {between: [east, west], bandwidth_gbs: 10, latency_ms: 70, egress_usd_per_gb: 0.02}
node_groups:
  - {gpu: H100, nodes: 1, gpus_per_node: 8, region: east}
  - {gpu: L40S, nodes: 2, gpus_per_node: 4, region: west}
"""
GOOD_WORKLOAD = """\
name: w
model: qwen2.5-1.5b
algorithm: grpo
prompts_per_step: 8
samples_per_prompt: 4
prompt_len: 128
response_len: {mean: 256, max: 1024}
max_staleness: 2
"""


def run_inspect(tmp_path, cluster: str, workload: str | None, capsys):
    c = tmp_path / "cluster.yaml"
    c.write_text(textwrap.dedent(cluster))
    argv = ["inspect", "--cluster", str(c)]
    w = None
    if workload is not None:
        w = tmp_path / "workload.yaml"
        w.write_text(textwrap.dedent(workload))
        argv += ["--workload", str(w)]
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err, str(c), str(w)


def test_good_specs_pass(tmp_path, capsys):
    code, out, err, _, _ = run_inspect(tmp_path, GOOD_CLUSTER, GOOD_WORKLOAD, capsys)
    assert code == 0, err
    assert "H100@east" in out and "L40S@west" in out and "verdict" in out

NEW_GPU = ("gpu_types:\n  X9: {{tflops: 100, memory_gb: 32, bandwidth_tbs: 1, price_usd_h: 1, generation: ada, "
           "peak_tflops: {peak}}}\n")

CLUSTER_CASES = {
    "yaml syntax": (GOOD_CLUSTER.replace("regions:\n", "regions: [\n"),
                    "<root>: invalid YAML at line 4, column 3: expected ',' or ']', but got '<scalar>' "
                    "(a cluster spec (see problems/clusters/))"),
    "missing key": (GOOD_CLUSTER.replace("gpu: H100, ", ""),
                    "node_groups[0].gpu: missing (required key)"),
    "wrong type": (GOOD_CLUSTER.replace("nodes: 2", "nodes: two"),
                   "node_groups[1].nodes: got 'two' (an integer)"),
    "zero count": (GOOD_CLUSTER.replace("nodes: 2", "nodes: 0"),
                   "node_groups[1].nodes: got 0 (a number > 0)"),
    "negative count": (GOOD_CLUSTER.replace("gpus_per_node: 8", "gpus_per_node: -8"),
                       "node_groups[0].gpus_per_node: got -8 (a number > 0)"),
    "unknown gpu": (GOOD_CLUSTER.replace("gpu: H100", "gpu: H10"),
                    "node_groups[0].gpu: unknown GPU type 'H10' (a catalog type or one defined under "
                    "gpu_types; nearest: H100, H20, V100)"),
    "new gpu type without a generation": (GOOD_CLUSTER.replace("node_groups:", "gpu_types:\n  X9: {tflops: 100, "
                                          "memory_gb: 24, bandwidth_tbs: 1, price_usd_h: 1}\nnode_groups:"),
                                          "gpu_types.X9.generation: missing for a GPU type not in the catalog (its "
                                          "architecture generation (hopper, blackwell, ampere, ampere-gddr, ada, turing, "
                                          "volta, cdna3, cdna4), or mfu, prefill_eff and decode_eff)"),
    "link to unknown region": (GOOD_CLUSTER.replace("between: [east, west]", "between: [east, north]"),
                               "links[0].between[1]: unknown region 'north' (one of the regions: east, west)"),
    "unreachable region": (GOOD_CLUSTER.replace(
        "links:\n  - {between: [east, west], bandwidth_gbs: 10, latency_ms: 70, egress_usd_per_gb: 0.02}\n", ""),
        "links: region 'west' is unreachable from 'east' (links connecting every region that has GPUs)"),
    "empty cluster": (GOOD_CLUSTER.split("node_groups:")[0] + "node_groups: []\n",
                      "node_groups: empty cluster (at least one node group with GPUs)"),
    "node group in unknown region": (GOOD_CLUSTER.replace("region: west", "region: south"),
                                     "node_groups[1].region: unknown region 'south' (one of the regions: east, west)"),
    "unknown key": (GOOD_CLUSTER.replace("gpu: H100,", "gpu: H100, colour: red,"),
                    "node_groups[0].colour: unknown key (known keys: name, gpu, nodes, gpus_per_node, region, "
                    "intra_node, inter_node_gbs)"),
    # a misspelt key is named with the nearest known one, not reported as its right spelling missing
    "misspelt key": (GOOD_CLUSTER.replace("gpus_per_node: 8", "gpu_per_node: 8"),
                     "node_groups[0].gpu_per_node: unknown key (did you mean gpus_per_node?)"),
    "misspelt key of a mapping entry": (GOOD_CLUSTER.replace("east: {inter_node_gbs: 50}", "east: {inter_node_gb: 50}"),
                                        "regions.east.inter_node_gb: unknown key (did you mean inter_node_gbs?)"),
    "misspelt top-level key": (GOOD_CLUSTER.replace("node_groups:", "nodegroups:"),
                               "nodegroups: unknown key (did you mean node_groups?)"),
    "not a mapping": ("- just\n- a list\n", "<root>: got list (a mapping: a cluster spec (see problems/clusters/))"),
    # pydantic reads true as 1: a boolean where a number is expected is a mistake, not one node
    "boolean for a count": (GOOD_CLUSTER.replace("nodes: 2", "nodes: true"),
                            "node_groups[1].nodes: got true (a number, not true or false)"),
    "boolean for a bandwidth": (GOOD_CLUSTER.replace("east: {inter_node_gbs: 50}", "east: {inter_node_gbs: true}"),
                                "regions.east.inter_node_gbs: got true (a number, not true or false)"),
    "boolean in a mapping of numbers": (GOOD_CLUSTER + "gpu_types:\n  H100: {peak_tflops: {bf16: 989, fp8: false}}\n",
                                        "gpu_types.H100.peak_tflops: fp8: got false (a number, not true or false)"),
    # a peak that is not a positive, finite figure gave negative or infinite times (and the MILP baseline a
    # solver traceback) in `mosearch plan`
    "negative peak": (GOOD_CLUSTER + NEW_GPU.format(peak="{bf16: 5000, fp8: -3}"),
                      "gpu_types.X9.peak_tflops.fp8: got -3 (a number > 0.0)"),
    "zero peak": (GOOD_CLUSTER + NEW_GPU.format(peak="{bf16: 0}"), "gpu_types.X9.peak_tflops.bf16: got 0 (a number > 0.0)"),
    "infinite peak": (GOOD_CLUSTER + NEW_GPU.format(peak="{bf16: .inf}"),
                      "gpu_types.X9.peak_tflops.bf16: got inf (a finite number)"),
    "peak of an unknown precision": (GOOD_CLUSTER + NEW_GPU.format(peak="{bf17: 100}"),
                                     "gpu_types.X9.peak_tflops.bf17: got 'bf17' (one of 'bf16', 'fp16', 'tf32', "
                                     "'fp32' or 'fp8')"),
    "two node groups of one name": (GOOD_CLUSTER.replace("  - {gpu: L40S", "  - {name: a, gpu: L40S").replace(
        "  - {gpu: H100", "  - {name: a, gpu: H100"),
        "node_groups[1].name: 'a' names node_groups[0] too (a name of its own for each node group)"),
    # a generation supplies a new type's efficiencies; on a catalog type it was silently ignored
    "generation of a catalog type": (GOOD_CLUSTER + "gpu_types:\n  H100: {generation: turing}\n",
                                     "gpu_types.H100.generation: 'turing' for catalog type H100, of generation hopper "
                                     "(no generation for a catalog type (it picks a new type's efficiencies); mfu, "
                                     "prefill_eff or decode_eff to change this one's)"),
    "new gpu type lacks figures": (GOOD_CLUSTER + "gpu_types:\n  X9: {tflops: 100}\n",
                                   "gpu_types.X9.memory_gb: missing for a GPU type not in the catalog "
                                   "(tflops, memory_gb, bandwidth_tbs and price_usd_h for a new type)"),
}


@pytest.mark.parametrize("case", sorted(CLUSTER_CASES))
def test_bad_cluster(tmp_path, capsys, case):
    text, expected = CLUSTER_CASES[case]
    code, out, err, cpath, _ = run_inspect(tmp_path, text, None, capsys)
    assert code == 2
    assert out == ""  # nothing printed that looks like a report
    assert err == f"mosearch: {cpath}: {expected}\n"


WORKLOAD_CASES = {
    "unknown preset": (GOOD_WORKLOAD.replace("qwen2.5-1.5b", "qwen2.5-1.6b"),
                       "model: unknown model preset 'qwen2.5-1.6b' (a preset name, a local Hugging Face model directory or an architecture mapping; "
                       "nearest: qwen2.5-1.5b, qwen2.5-14b, qwen2.5-0.5b)"),
    "bad algorithm": (GOOD_WORKLOAD.replace("grpo", "dpo"),
                      "algorithm: got 'dpo' (one of 'grpo' or 'ppo')"),
    "zero prompts": (GOOD_WORKLOAD.replace("prompts_per_step: 8", "prompts_per_step: 0"),
                     "prompts_per_step: got 0 (a number > 0)"),
    "max below mean": (GOOD_WORKLOAD.replace("max: 1024", "max: 100"),
                       "response_len: max (100) is below mean (256)"),
    "misspelt key": (GOOD_WORKLOAD.replace("prompt_len:", "prompt_length:"),
                     "prompt_length: unknown key (did you mean prompt_len?)"),
    "misspelt nested key": (GOOD_WORKLOAD.replace("{mean: 256, max: 1024}", "{mean: 256, maxi: 1024}"),
                            "response_len.maxi: unknown key (did you mean max?)"),
    "kv heads do not divide heads": (GOOD_WORKLOAD.replace(
        "model: qwen2.5-1.5b",
        "model: {layers: 2, hidden: 128, heads: 4, kv_heads: 3, ffn: 256, vocab: 100}"),
        "model.kv_heads: 4 heads are not divisible by 3 kv_heads (a divisor of heads)"),
    "grpo with groups of one": (GOOD_WORKLOAD.replace("samples_per_prompt: 4", "samples_per_prompt: 1"),
                                "samples_per_prompt: 1 with algorithm grpo (at least 2 (GRPO scores each sample "
                                "against its group), or algorithm ppo)"),
    # the architecture mapping's own problem, not "model.str: ... (a string)" from the union's other branch
    "architecture with zero layers": (GOOD_WORKLOAD.replace(
        "model: qwen2.5-1.5b", "model: {layers: 0, hidden: 128, heads: 4, kv_heads: 2, ffn: 256, vocab: 100}"),
        "model.layers: got 0 (a number > 0)"),
    "architecture missing a key": (GOOD_WORKLOAD.replace(
        "model: qwen2.5-1.5b", "model: {layers: 2, hidden: 128, heads: 4, kv_heads: 2, ffn: 256}"),
        "model.vocab: missing (required key)"),
    "architecture misspelt key": (GOOD_WORKLOAD.replace(
        "model: qwen2.5-1.5b", "model: {layers: 2, hiden: 128, heads: 4, kv_heads: 2, ffn: 256, vocab: 100}"),
        "model.hiden: unknown key (did you mean hidden?)"),
    "model neither name nor mapping": (GOOD_WORKLOAD.replace("model: qwen2.5-1.5b", "model: 7"),
                                       "model: got 7 (a string or a mapping)"),
    # a 1M-token response for a 131072-token model was planned
    "response beyond the model's context": (GOOD_WORKLOAD.replace("max: 1024", "max: 1000000"),
                                            "response_len.max: prompt_len 128 + response_len.max 1000000 = 1000128 "
                                            "tokens, beyond the 131072 of qwen2.5-1.5b's context "
                                            "(max_position_embeddings) (at most 130944)"),
    "model fits nowhere": (GOOD_WORKLOAD.replace("qwen2.5-1.5b", "llama3.1-70b"),
                           "model: weights of llama3.1-70b need 141.1 GB in bf16; the whole cluster 'tiny' has "
                           "48.0 GB (a smaller model or a larger cluster)"),
}


@pytest.mark.parametrize("case", sorted(WORKLOAD_CASES))
def test_bad_workload(tmp_path, capsys, case):
    text, expected = WORKLOAD_CASES[case]
    cluster = GOOD_CLUSTER
    if case == "model fits nowhere":
        cluster = "name: tiny\nregions: {r: {inter_node_gbs: 10}}\nnode_groups:\n  - {gpu: L4, nodes: 1, gpus_per_node: 2, region: r}\n"
    code, out, err, _, wpath = run_inspect(tmp_path, cluster, text, capsys)
    assert code == 2
    assert out == ""
    assert err == f"mosearch: {wpath}: {expected}\n"


def test_a_model_directory_gives_its_context_length(tmp_path):
    """A local Hugging Face model's max_position_embeddings bounds prompt + response as a preset's does."""
    import json

    from tokenizers import Tokenizer, models

    from problems.errors import InputError
    from problems.placement.specs import load_workload

    m = tmp_path / "m"
    m.mkdir()
    (m / "config.json").write_text(json.dumps({
        "architectures": ["Qwen2ForCausalLM"], "num_hidden_layers": 2, "hidden_size": 128, "num_attention_heads": 2,
        "num_key_value_heads": 1, "intermediate_size": 256, "vocab_size": 300, "max_position_embeddings": 64}))
    Tokenizer(models.WordLevel({"<unk>": 0, "hello": 1}, unk_token="<unk>")).save(str(m / "tokenizer.json"))
    w = tmp_path / "w.yaml"
    w.write_text("name: w\nmodel: m\nalgorithm: grpo\nprompts_per_step: 4\nsamples_per_prompt: 2\nprompt_len: 16\n"
                 "response_len: {mean: 16, max: 48}\nmax_staleness: 1\n")
    assert load_workload(w).model.max_context == 64
    w.write_text(w.read_text().replace("max: 48", "max: 49"))
    with pytest.raises(InputError, match=r"response_len\.max: prompt_len 16 \+ response_len\.max 49 = 65 tokens, "
                                         r"beyond the 64 of m's context .* \(at most 48\)$"):
        load_workload(w)


def test_inspect_says_which_pools_cannot_run_the_workloads_precision(tmp_path, capsys):
    cluster = ("name: c\nregions: {r: {inter_node_gbs: 10}}\nnode_groups:\n"
               "  - {gpu: V100, nodes: 1, gpus_per_node: 8, region: r}\n  - {gpu: A100, nodes: 1, gpus_per_node: 8, region: r}\n")
    code, out, err, _, wpath = run_inspect(tmp_path, cluster, GOOD_WORKLOAD, capsys)
    assert code == 0, err
    assert "note: pools left out: V100@r (8 GPUs) cannot run bf16 (no bf16 figure in peak_tflops)" in out
    assert "cluster 640 GB" in out  # the verdict over the A100s alone (8 x 80 GB)
    code, out, err, _, wpath = run_inspect(tmp_path, cluster.split("  - {gpu: A100")[0], GOOD_WORKLOAD, capsys)
    assert code == 2 and out == ""
    assert err == (f"mosearch: {wpath}: precision: bf16 runs on no pool of cluster 'c': V100@r (8 GPUs) (no bf16 figure "
                   "in peak_tflops) (a precision every pool runs (fp16, tf32, fp32), or GPUs that run bf16)\n")


def test_missing_file(tmp_path, capsys):
    code = main(["inspect", "--cluster", str(tmp_path / "nope.yaml")])
    err = capsys.readouterr().err
    assert code == 2 and err.strip().endswith("nope.yaml: no such file (a cluster spec (see problems/clusters/))")


def test_a_directory_is_not_a_missing_file(tmp_path, capsys):
    code = main(["inspect", "--cluster", str(tmp_path)])
    assert code == 2
    assert capsys.readouterr().err == f"mosearch: {tmp_path}: is a directory (a file: a cluster spec (see problems/clusters/))\n"


@pytest.mark.parametrize("text", ["", "# only a comment\n", "\n\n"])
def test_an_empty_file_says_so(tmp_path, capsys, text):
    path = tmp_path / "c.yaml"
    path.write_text(text)
    code = main(["inspect", "--cluster", str(path)])
    assert code == 2
    assert capsys.readouterr().err == f"mosearch: {path}: the file is empty (a cluster spec (see problems/clusters/))\n"


def test_a_boolean_for_a_number_is_refused_in_a_job_and_a_plan(tmp_path):
    from problems.errors import InputError
    from problems.placement.plan import load_plan
    from problems.placement.predict import load_job

    job = tmp_path / "job.yaml"
    job.write_text("model: qwen2.5-1.5b\nseq_len: 1024\nglobal_batch: 8\ndp: true\n")
    with pytest.raises(InputError, match=r"job\.yaml: dp: got true \(a number, not true or false\)$"):
        load_job(job)
    job.write_text("model: qwen2.5-1.5b\nseq_len: 1024\nglobal_batch: 8\nstage_layers: [14, true]\npp: 2\n")
    with pytest.raises(InputError, match=r"stage_layers: \[1\]: got true"):
        load_job(job)
    plan = tmp_path / "plan.yaml"
    plan.write_text("schema_version: true\n")
    with pytest.raises(InputError, match=r"schema_version: got true"):
        load_plan(plan)


def test_a_plan_of_a_schema_version_this_code_does_not_know_is_refused(tmp_path, capsys):
    from problems.placement.plan import Plan, load_plan

    plan = Plan.model_validate({
        "plan_id": "p", "cluster": {"name": "c", "path": "c.yaml", "sha256": "0" * 64},
        "workload": {"name": "w", "path": "w.yaml", "sha256": "0" * 64},
        "pools": [{"pool": "H100@r", "gpu": "H100", "region": "r", "rollout_gpus": 0, "train_gpus": 0, "shared_gpus": 1,
                   "rollout_tp": 1}],
        "rollout": {"kv_mem_frac": 0.8, "max_num_seqs": 64}, "train": {"dp": 1, "tp": 1, "pp": 1, "micro_batch": 1},
        "execution": {"mode": "colocated", "staleness_bound": 0, "pipeline_chunks": 1}, "weight_sync": {"route": "direct"}})
    path = tmp_path / "plan.yaml"
    path.write_text(plan.to_yaml())
    assert load_plan(path).schema_version == 1
    path.write_text(plan.to_yaml().replace("schema_version: 1", "schema_version: 2"))
    assert main(["predict", "--plan", str(path)]) == 2
    assert capsys.readouterr().err == (f"mosearch: {path}: schema_version: got 2, a version this mosearch does not know "
                                       "(it reads and writes version 1: pick the plan again with this mosearch)\n")


@pytest.mark.parametrize("cluster", sorted((REPO / "problems" / "clusters").glob("*.yaml")), ids=lambda p: p.stem)
def test_inspect_runs_on_every_shipped_cluster(cluster, capsys):
    assert main(["inspect", "--cluster", str(cluster)]) == 0
    assert "cluster" in capsys.readouterr().out
