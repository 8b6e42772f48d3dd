"""Generated spec files, valid and broken: the tools never raise a traceback.

Each generated file either works or makes `mosearch inspect` exit non-zero with exactly one line
that names the file (and a key).
"""

from __future__ import annotations

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mosearch.cli import main

GPU_NAMES = ["H100", "A100-80G", "L40S", "L4", "h100-sxm", "H10", "", "MI300X"]
REGIONS = ["a", "b", "c"]

scalar = st.one_of(st.none(), st.booleans(), st.integers(-3, 20), st.floats(-1, 1e3), st.just(float("nan")), st.just(float("inf")),
                   st.text(max_size=6), st.sampled_from(GPU_NAMES + REGIONS))


def maybe(value_strategy):
    """The right kind of value most of the time, junk some of the time."""
    return st.one_of(value_strategy, value_strategy, value_strategy, scalar)


node_group = st.fixed_dictionaries(
    {"gpu": maybe(st.sampled_from(GPU_NAMES)), "nodes": maybe(st.integers(0, 4)),
     "gpus_per_node": maybe(st.sampled_from([1, 2, 3, 4, 8])), "region": maybe(st.sampled_from(REGIONS))},
    optional={"intra_node": maybe(st.fixed_dictionaries({"kind": st.sampled_from(["nvlink", "pcie", "wifi"]),
                                                         "bandwidth_gbs": st.integers(-1, 900)}))},
)
link = st.fixed_dictionaries({
    "between": maybe(st.lists(st.sampled_from(REGIONS + ["z"]), min_size=2, max_size=2)),
    "bandwidth_gbs": maybe(st.floats(0, 100)), "latency_ms": maybe(st.floats(0, 200)),
    "egress_usd_per_gb": maybe(st.floats(0, 0.1)),
})
cluster = st.fixed_dictionaries(
    {"name": maybe(st.text(min_size=1, max_size=8)),
     "regions": maybe(st.dictionaries(st.sampled_from(REGIONS), st.fixed_dictionaries({"inter_node_gbs": maybe(st.floats(0, 100))}), max_size=3)),
     "node_groups": maybe(st.lists(node_group, max_size=3))},
    optional={"links": maybe(st.lists(link, max_size=3)),
              "gpu_types": maybe(st.dictionaries(st.sampled_from(["H100", "X1"]),
                                                 st.dictionaries(st.sampled_from(["tflops", "memory_gb", "price_usd_h", "bandwidth_tbs"]), scalar, max_size=4),
                                                 max_size=2))},
)
workload = st.fixed_dictionaries(
    {"name": maybe(st.text(min_size=1, max_size=8)),
     "model": maybe(st.one_of(st.sampled_from(["tiny", "qwen2.5-7b", "llama3.1-70b", "gpt5"]),
                              st.fixed_dictionaries({"layers": st.integers(-1, 4), "hidden": st.sampled_from([0, 64, 128]),
                                                     "heads": st.integers(0, 4), "kv_heads": st.integers(0, 4),
                                                     "ffn": st.integers(1, 256), "vocab": st.integers(1, 100)}))),
     "algorithm": maybe(st.sampled_from(["grpo", "ppo", "dpo"])),
     "prompts_per_step": maybe(st.integers(-1, 64)), "samples_per_prompt": maybe(st.integers(0, 8)),
     "prompt_len": maybe(st.integers(0, 512)),
     "response_len": maybe(st.fixed_dictionaries({"mean": st.integers(0, 100), "max": st.integers(0, 200)})),
     "max_staleness": maybe(st.integers(-1, 4))},
)


def check_one_line_or_success(code: int, err: str, *paths: str) -> None:
    assert code in (0, 1, 2)
    if code == 2:
        lines = err.strip().splitlines()
        assert len(lines) == 1, err
        assert "Traceback" not in err
        assert any(p in lines[0] for p in paths), lines[0]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(c=cluster, w=workload, raw_junk=st.sampled_from(["", "::", "[", "a: [1, 2", "- x", "\t-", "{}"]), junk_file=st.integers(0, 5))
def test_generated_specs_never_crash(tmp_path, capsys, c, w, raw_junk, junk_file):
    cpath, wpath = tmp_path / "cluster.yaml", tmp_path / "workload.yaml"
    cpath.write_text(raw_junk if junk_file == 0 else yaml.safe_dump(c))
    wpath.write_text(raw_junk if junk_file == 1 else yaml.safe_dump(w))
    code = main(["inspect", "--cluster", str(cpath), "--workload", str(wpath)])
    out, err = capsys.readouterr()
    check_one_line_or_success(code, err, str(cpath), str(wpath))
    if code == 2:
        assert out == ""
