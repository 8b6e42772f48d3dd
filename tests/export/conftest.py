"""Hand-built plans for the exporter tests: one per execution mode, on the mixed-64 cluster."""

from __future__ import annotations

from pathlib import Path

import pytest

from problems.placement.plan import Plan, file_sha256
from problems.placement.specs import load_cluster, load_workload
from mosearch.export import ExportContext

ROOT = Path(__file__).resolve().parents[2]
CLUSTER = ROOT / "problems/clusters/mixed-64.yaml"
WORKLOAD = ROOT / "problems/workloads/qwen2.5-7b-grpo.yaml"


def pool(pid: str, rollout=0, train=0, shared=0, tp=1) -> dict:
    gpu, region = pid.split("@")
    return {"pool": pid, "gpu": gpu, "region": region, "rollout_gpus": rollout, "train_gpus": train,
            "shared_gpus": shared, "rollout_tp": tp}


def make_plan(plan_id, pools, train, mode, k=0, chunks=1, kv=0.85, seqs=256, route="direct") -> Plan:
    return Plan.model_validate({
        "plan_id": plan_id,
        "cluster": {"name": "mixed-64", "path": str(CLUSTER), "sha256": file_sha256(CLUSTER)},
        "workload": {"name": "qwen2.5-7b-grpo", "path": str(WORKLOAD), "sha256": file_sha256(WORKLOAD)},
        "pools": pools,
        "rollout": {"kv_mem_frac": kv, "max_num_seqs": seqs},
        "train": train,
        "execution": {"mode": mode, "staleness_bound": k, "pipeline_chunks": chunks},
        "weight_sync": {"route": route},
    })


@pytest.fixture
def hetero_disagg() -> Plan:
    """H100@us-east trains on 16 GPUs, L40S@eu-west generates on 32 GPUs with TP 2."""
    return make_plan(
        "hetero", [pool("H100@us-east", train=16), pool("A100-80G@eu-west"), pool("L40S@eu-west", rollout=32, tp=2)],
        {"dp": 8, "tp": 2, "pp": 1, "sharding": "zero1", "micro_batch": 2, "recompute": True},
        "disaggregated", chunks=4, route="staged")


@pytest.fixture
def colocated() -> Plan:
    """All 16 A100s do both, rollout TP 4, FSDP over 16 ranks."""
    return make_plan(
        "coloc", [pool("A100-80G@eu-west", shared=16, tp=4)],
        {"dp": 16, "tp": 1, "pp": 1, "sharding": "fsdp", "micro_batch": 4, "optimizer_offload": True},
        "colocated", kv=0.5, seqs=128)


@pytest.fixture
def async_plan() -> Plan:
    """k = 3; the H100 pool is split (8 rollout TP 2, 8 train), 12 L40S generate with TP 4."""
    return make_plan(
        "async", [pool("H100@us-east", rollout=8, train=8, tp=2), pool("L40S@eu-west", rollout=12, tp=4)],
        {"dp": 2, "tp": 2, "pp": 2, "sharding": "zero1", "micro_batch": 1},
        "async", k=3, chunks=2)


@pytest.fixture(scope="session")
def ctx() -> ExportContext:
    c, w = load_cluster(CLUSTER), load_workload(WORKLOAD)
    return ExportContext(
        gpus_per_node={p.id: p.gpus_per_node for p in c.pools}, pool_order=tuple(p.id for p in c.pools),
        model=w.model.name, algorithm=w.algorithm, prompts_per_step=w.prompts_per_step,
        samples_per_prompt=w.samples_per_prompt, prompt_len=w.prompt_len, response_max=w.response_max,
        reference=w.has_reference)


# ------------------------------------------------------------------ fronts searched for an executor

# `mosearch plan --executor` with a reduced budget: EVALS evaluations plus the structured stage outside
# it (the stage finds most of the front; the search adds little at this size), once per session
EVALS = 600


def front_paths(cluster: str, workload: str) -> tuple[Path, Path]:
    """A shipped cluster, else one written for the benchmarks (benchmarks/clusters/)."""
    c = ROOT / f"problems/clusters/{cluster}.yaml"
    return (c if c.is_file() else ROOT / f"benchmarks/clusters/{cluster}.yaml"), ROOT / f"problems/workloads/{workload}.yaml"


@pytest.fixture(scope="session")
def fronts(tmp_path_factory):
    """(executor, cluster, workload) -> (plans of front.csv, cluster, workload), searched on first use."""
    from mosearch.planner.run import plan_run
    from mosearch.planner.search import SearchSettings

    cache: dict = {}

    def get(executor: str, cluster: str, workload: str):
        key = (executor, cluster, workload)
        if key not in cache:
            c, w = front_paths(cluster, workload)
            out = tmp_path_factory.mktemp(f"{executor}-{cluster}-{workload}")
            settings = SearchSettings(evals=EVALS, seed=0, progress=False)
            res = plan_run(str(c), str(w), out, settings, report=False, executor=executor, restriction=False)
            cache[key] = ([res.plans[i] for i in res.front], load_cluster(c), load_workload(w))
        return cache[key]

    return get


