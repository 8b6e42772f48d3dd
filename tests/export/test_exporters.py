"""Exported keys checked against values worked out by hand from the fixture plans."""

from __future__ import annotations

import pytest
import yaml

from mosearch.export import EXPORTERS, NOTES, render
from mosearch.export import layout as L

from problems.placement.problem import PlacementProblem
from problems.placement.specs import load_cluster, load_workload

from .conftest import CLUSTER, WORKLOAD, make_plan, pool


def test_registry_names_three_targets():
    assert sorted(EXPORTERS) == ["areal", "rlinf", "verl"] == sorted(NOTES)


@pytest.mark.parametrize("target", ["verl", "areal", "rlinf"])
@pytest.mark.parametrize("which", ["hetero_disagg", "colocated", "async_plan"])
def test_every_exporter_handles_every_mode(target, which, request, ctx):
    plan = request.getfixturevalue(which)
    text = render(target, plan, ctx)
    assert text.startswith(f"# {target} configuration")
    data = yaml.safe_load(text)
    launch_keys = {"verl": {"hydra", "defaults"}, "areal": {"defaults", "experiment_name", "trial_name", "scheduler"},
                   "rlinf": {"defaults"}}[target]
    assert set(data) - set(EXPORTERS[target](plan, ctx)) == launch_keys  # what its launch command composes it with
    assert {k: v for k, v in data.items() if k not in launch_keys} == EXPORTERS[target](plan, ctx)
    assert all(isinstance(n, str) and n for n in NOTES[target](plan, ctx))
    # exporters are pure: no context still gives a config (8 GPUs per node assumed)
    assert isinstance(EXPORTERS[target](plan, None), dict)


# ------------------------------------------------------------------ heterogeneous, disaggregated

def test_verl_hetero_disaggregated(hetero_disagg, ctx):
    cfg = EXPORTERS["verl"](hetero_disagg, ctx)
    assert cfg["trainer"]["nnodes"] == 2 and cfg["trainer"]["n_gpus_per_node"] == 8  # 16 H100
    assert cfg["trainer"]["use_v1"] is True
    assert cfg["trainer"]["v1"] == {"trainer_mode": "separate_async", "separate_async": {"parameter_sync_step": 1},
                                    "sampler": {"max_off_policy_threshold": 1}}  # staleness 0: spans one version
    arr = cfg["actor_rollout_ref"]
    assert (arr["rollout"]["nnodes"], arr["rollout"]["n_gpus_per_node"]) == (4, 8)  # 32 L40S
    assert arr["rollout"]["checkpoint_engine"] == {"backend": "nccl"}
    assert arr["hybrid_engine"] is False
    assert arr["rollout"]["tensor_model_parallel_size"] == 2
    assert arr["rollout"]["gpu_memory_utilization"] == 0.85
    assert arr["rollout"]["n"] == 8
    assert arr["actor"]["strategy"] == "megatron"  # train TP 2 needs Megatron in verl
    assert arr["actor"]["megatron"]["tensor_model_parallel_size"] == 2
    assert arr["actor"]["megatron"]["override_transformer_config"]["recompute_granularity"] == "full"
    # one optimizer step per plan step: the 4 streamed chunks are not 4 updates
    assert arr["actor"]["ppo_mini_batch_size"] == cfg["data"]["train_batch_size"] == 128
    assert arr["actor"]["ppo_micro_batch_size_per_gpu"] == 2
    assert cfg["algorithm"] == {"adv_estimator": "grpo", "use_kl_in_reward": False}
    assert (cfg["data"]["max_prompt_length"], cfg["data"]["max_response_length"]) == (512, 8192)
    notes = NOTES["verl"](hetero_disagg, ctx)
    assert any("cannot name a GPU type" in n and "L40S@eu-west x8" in n for n in notes)
    assert any("pipeline_chunks 4" in n for n in notes)


def test_areal_hetero_disaggregated(hetero_disagg, ctx):
    cfg = EXPORTERS["areal"](hetero_disagg, ctx)
    assert cfg["rollout"]["backend"] == "vllm:d16p1t2"  # 32 L40S / TP 2
    assert cfg["actor"]["backend"] == "fsdp:d8p1t2"
    # the legacy one-string form names both components (AReaL's colocation grammar requires names)
    assert cfg["allocation_mode"] == "vllm[rollout]:d16p1t2+fsdp[actor]:d8p1t2"
    assert cfg["rollout"]["max_head_offpolicyness"] == 0
    assert cfg["cluster"] == {"n_nodes": 6, "n_gpus_per_node": 8}
    assert cfg["actor"]["use_decoupled_loss"] is False
    assert "scheduling_strategy" not in cfg["rollout"]
    assert cfg["gconfig"]["n_samples"] == 8


def test_rlinf_runs_disaggregated_plans_not_as_planned(hetero_disagg, ctx):
    """RLinf's disaggregated reasoning placement needs dedicated inference GPUs the plan does not have."""
    problem = PlacementProblem(load_cluster(CLUSTER), load_workload(WORKLOAD), executor="rlinf")
    why = problem.executor_problem(hetero_disagg)
    assert why.startswith("RLinf 0.3.0") and "one of its modes: colocated" in why and "disaggregated" in why


# ------------------------------------------------------------------ colocated

def test_verl_colocated(colocated, ctx):
    cfg = EXPORTERS["verl"](colocated, ctx)
    assert cfg["trainer"] == {"use_v1": True, "nnodes": 2, "n_gpus_per_node": 8, "v1": {"trainer_mode": "sync"}}
    arr = cfg["actor_rollout_ref"]
    assert "nnodes" not in arr["rollout"] and "checkpoint_engine" not in arr["rollout"]
    assert arr["hybrid_engine"] is True and arr["rollout"]["free_cache_engine"] is True
    assert arr["rollout"]["tensor_model_parallel_size"] == 4
    assert arr["actor"]["strategy"] == "fsdp2"
    # verl's FSDP optimizer_offload moves the state out between phases only: not the plan's offload, which
    # verl's rules refuse (its Megatron CPU optimizer is the one that matches)
    assert arr["actor"]["fsdp_config"] == {"fsdp_size": -1, "reshard_after_forward": True,
                                           "param_offload": False, "optimizer_offload": False}
    why = PlacementProblem(load_cluster(CLUSTER), load_workload(WORKLOAD), executor="verl").executor_problem(colocated)
    assert "the optimizer state on the GPUs with this backend" in why
    assert arr["actor"]["ppo_mini_batch_size"] == 128


def test_areal_colocated(colocated, ctx):
    cfg = EXPORTERS["areal"](colocated, ctx)
    assert cfg["allocation_mode"] == "vllm[rollout]:d4p1t4|fsdp[actor]:d16p1t1"  # '|' = colocation, named
    assert cfg["rollout"]["scheduling_strategy"] == {"type": "colocation", "target": "actor"}
    assert cfg["rollout"]["max_head_offpolicyness"] == 0
    assert cfg["enable_offload"] is True and cfg["vllm"]["enable_sleep_mode"] is True
    assert cfg["vllm"]["gpu_memory_utilization"] == 0.5
    assert cfg["actor"]["offload"] is False  # between phases only in AReaL: not the plan's optimizer offload
    assert cfg["actor"]["weight_update_mode"] == "disk"  # rl_trainer._validate_cfg with colocation


def test_rlinf_colocated(colocated, ctx):
    cfg = EXPORTERS["rlinf"](colocated, ctx)
    assert cfg["cluster"]["component_placement"] == {"actor,rollout,reward": "all"}
    assert cfg["cluster"]["num_nodes"] == 2
    assert cfg["actor"]["enable_offload"] is True
    assert cfg["actor"]["fsdp_config"]["sharding_strategy"] == "full_shard"
    assert cfg["rollout"]["tensor_parallel_size"] == 4


def test_partial_colocation_gives_ranges_and_uneven_nodes(ctx):
    plan = make_plan("part", [pool("A100-80G@eu-west", shared=12, tp=4)],
                     {"dp": 12, "tp": 1, "pp": 1, "micro_batch": 1}, "colocated")
    assert EXPORTERS["rlinf"](plan, ctx)["cluster"]["component_placement"] == {"actor,rollout,reward": "0-11"}
    out = EXPORTERS["verl"](plan, ctx)
    assert (out["trainer"]["nnodes"], out["trainer"]["n_gpus_per_node"]) == (2, 8)  # 8 + 4: the largest node
    assert any("uneven [8, 4]" in n for n in NOTES["verl"](plan, ctx))
    assert EXPORTERS["areal"](plan, ctx)["allocation_mode"] == "vllm[rollout]:d3p1t4|fsdp[actor]:d12p1t1"
    # nodes of 8 and 4 shared GPUs: AReaL's launcher counts 3 nodes of 4
    assert EXPORTERS["areal"](plan, ctx)["cluster"] == {"n_nodes": 3, "n_gpus_per_node": 4}


# ------------------------------------------------------------------ asynchronous

def test_areal_async(async_plan, ctx):
    cfg = EXPORTERS["areal"](async_plan, ctx)
    assert cfg["rollout"]["max_head_offpolicyness"] == 3
    assert cfg["actor"]["use_decoupled_loss"] is True
    assert cfg["actor"]["backend"] == "megatron:d2p2t2"  # pipeline stages need Megatron
    # TP 2 on 8 H100 and TP 4 on 12 L40S: one TP per string; the larger share (4) over 20 GPUs
    assert cfg["rollout"]["backend"] == "vllm:d5p1t4"
    # per-node shares 8, 8, 4 (L40S half node), 8: logical nodes of 4, 28 GPUs
    assert cfg["cluster"] == {"n_nodes": 7, "n_gpus_per_node": 4}
    assert any("different rollout TP" in n for n in NOTES["areal"](async_plan, ctx))


def test_verl_async(async_plan, ctx):
    cfg = EXPORTERS["verl"](async_plan, ctx)
    # k = 3 versions of lag: a trajectory may span 4 policy versions
    assert cfg["trainer"]["v1"]["sampler"]["max_off_policy_threshold"] == 4
    assert cfg["trainer"]["v1"]["trainer_mode"] == "separate_async"
    roll = cfg["actor_rollout_ref"]["rollout"]
    assert (roll["nnodes"], roll["n_gpus_per_node"]) == (3, 8)  # rollout GPUs per node 8, 8, 4: uneven
    actor = cfg["actor_rollout_ref"]["actor"]
    assert actor["megatron"]["pipeline_model_parallel_size"] == 2
    assert actor["ppo_mini_batch_size"] == 128


def test_verl_refuses_uneven_rollout_nodes(async_plan):
    """Rollout GPUs per node 8, 8, 4: nnodes x n_gpus_per_node cannot say that."""
    why = PlacementProblem(load_cluster(CLUSTER), load_workload(WORKLOAD), executor="verl").executor_problem(async_plan)
    assert why.startswith("verl 0.9.1") and ("nnodes x n_gpus_per_node" in why or "rollout TP" in why)


def test_ranges():
    assert L.ranges([0, 1, 2, 5, 6, 9]) == "0-2,5-6,9-9"
    assert L.ranges([]) == ""


def test_a_workload_model_directory_fills_each_targets_weight_keys(colocated, ctx):
    import dataclasses

    own = dataclasses.replace(ctx, model_dir="/models/team-7b")
    ppo = dataclasses.replace(own, algorithm="ppo", reference=True)
    verl = EXPORTERS["verl"](colocated, ppo)
    assert verl["actor_rollout_ref"]["model"]["path"] == "/models/team-7b"
    assert verl["critic"]["model"]["path"] == "/models/team-7b"
    areal = EXPORTERS["areal"](colocated, ppo)
    assert areal["tokenizer_path"] == areal["actor"]["path"] == areal["critic"]["path"] == areal["ref"]["path"] \
        == "/models/team-7b"
    rlinf = EXPORTERS["rlinf"](colocated, own)
    assert rlinf["rollout"]["model"]["model_path"] == rlinf["actor"]["model"]["model_path"] == "/models/team-7b"
    for target in ("verl", "areal", "rlinf"):
        # filled: the note says so; a workload naming an architecture: the note names the keys to set
        assert any("set to the workload's model directory" in n for n in NOTES[target](colocated, own)), target
        asked = [n for n in NOTES[target](colocated, ctx) if n.startswith("model weights: set ")]
        assert len(asked) == 1 and ctx.model in asked[0], target
        assert "path" not in str(EXPORTERS[target](colocated, ctx)).replace("model_path", ""), target
