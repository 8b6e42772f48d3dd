"""Every export loaded by its target's own config code: verl 0.9.1 (generated config in struct mode,
validate_config, RolloutConfig, separate_async's start-up asserts), AReaL 1.0.4 (cli_args
dataclasses, alloc_mode parser) and RLinf's documented placement rules; on plans of every shipped
cluster x workload x mode and on hypothesis-drawn plans."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mosearch.export import EXPORTERS, NOTES, ExportContext
from mosearch.export import layout as L
from mosearch.export import verl as V
from problems.placement.problem import PlacementProblem
from problems.placement.specs import load_cluster, load_workload

from .targets import areal_config, rlinf_placement_ok, verl_config, verl_separate_async_ok

ROOT = Path(__file__).resolve().parents[2]
CLUSTERS = sorted((ROOT / "problems/clusters").glob("*.yaml"))
WORKLOADS = sorted((ROOT / "problems/workloads").glob("*.yaml"))
MODES = ("colocated", "disaggregated", "async")


@lru_cache(maxsize=None)
def _problem(cluster: Path, workload: Path):
    c, w = load_cluster(cluster), load_workload(workload)
    return PlacementProblem(c, w), ExportContext.from_specs(c, w), w


def _plans_by_mode(cluster: Path, workload: Path) -> dict:
    pb, ctx, _ = _problem(cluster, workload)
    X = pb.layout.repair(pb.xl + np.random.default_rng(0).random((60, pb.n_var)) * (pb.xu - pb.xl))
    out: dict = {}
    for x in X:
        plan = pb.decode(x, lifetime=False)
        out.setdefault(plan.execution.mode, plan)
    return out


@pytest.fixture(scope="session")
def model_path(tmp_path_factory) -> str:
    """verl reads the critic's HF config from disk: the local tiny model stands in for the user's."""
    from trainer.models.tiny import build_tiny

    return str(build_tiny(tmp_path_factory.mktemp("model") / "tiny"))


# the local cluster is one CPU "node": its decoded plans are colocated or async (checked below)
CASES = [(c, w, m) for c in CLUSTERS for w in WORKLOADS for m in MODES
         if not (c.stem == "local" and m == "disaggregated")]


def check_all_targets(plan, ctx, workload, model_path) -> None:
    cfg = EXPORTERS["verl"](plan, ctx)
    if V.refusals(plan, ctx):  # the exporter says verl will refuse it: verl's own check must agree
        with pytest.raises(AssertionError, match="divisible"):
            verl_config(cfg, V.config_name(plan), model_path)
        merged = None
    else:
        merged = verl_config(cfg, V.config_name(plan), model_path)
    if merged is not None:
        check_verl(merged, plan, workload)
    check_areal_rlinf(plan, ctx, workload)


def check_verl(merged, plan, workload) -> None:
    assert merged.trainer.use_v1 is True
    assert merged.algorithm.adv_estimator == ("gae" if workload.algorithm == "ppo" else "grpo")
    assert merged.data.max_response_length == workload.response_max  # not verl's 512 default
    assert merged.data.max_prompt_length == workload.prompt_len
    assert merged.actor_rollout_ref.rollout.n == workload.samples_per_prompt
    # one optimizer step per plan step, as the plan models it
    assert merged.actor_rollout_ref.actor.ppo_mini_batch_size == merged.data.train_batch_size
    if plan.execution.mode == "colocated":
        assert merged.trainer.v1.trainer_mode == "sync"
    else:
        assert merged.trainer.v1.trainer_mode == "separate_async"
        verl_separate_async_ok(merged)
        assert merged.trainer.v1.sampler.max_off_policy_threshold == plan.execution.staleness_bound + 1


def check_areal_rlinf(plan, ctx, workload) -> None:

    obj, allocs = areal_config(EXPORTERS["areal"](plan, ctx), workload.algorithm)
    train_gpus = plan.train.dp * plan.train.tp * plan.train.pp
    assert allocs["actor"].parallel.world_size == train_gpus
    assert allocs["actor"].parallel.tensor_parallel_size == plan.train.tp
    assert allocs["actor"].parallel.pipeline_parallel_size == plan.train.pp
    assert allocs["rollout"].parallel.tensor_parallel_size == L.rollout_tp(plan)[0]
    assert obj.rollout.max_head_offpolicyness == plan.execution.staleness_bound
    assert obj.actor.ppo_n_minibatches == 1
    assert obj.gconfig.n_samples == workload.samples_per_prompt
    assert obj.gconfig.max_new_tokens == workload.response_max

    rlinf = EXPORTERS["rlinf"](plan, ctx)
    assert rlinf["algorithm"]["n_minibatches"] == 1
    assert rlinf["algorithm"]["adv_type"] == ("gae" if workload.algorithm == "ppo" else "grpo")
    assert rlinf["runner"]["seq_length"] - rlinf["data"]["max_prompt_length"] == workload.response_max
    assert rlinf["algorithm"]["group_size"] == workload.samples_per_prompt
    if not any("refuse" in n for n in NOTES["rlinf"](plan, ctx)):
        rlinf_placement_ok(rlinf)
    # one hardware type per node group, so no process (one GPU) spans two types
    nodes = L.nodes(plan, ctx)
    for g in rlinf["cluster"]["node_groups"]:
        ranks = [int(r) for part in g["node_ranks"].split(",") for r in range(int(part.split("-")[0]),
                                                                            int(part.split("-")[1]) + 1)]
        assert len({nodes[r].gpu for r in ranks}) == 1, g


@pytest.mark.parametrize("cluster,workload,mode", CASES, ids=[f"{c.stem}-{w.stem}-{m}" for c, w, m in CASES])
def test_shipped_plans_pass_the_targets_own_checks(cluster, workload, mode, model_path):
    plan = _plans_by_mode(cluster, workload)[mode]
    _, ctx, w = _problem(cluster, workload)
    check_all_targets(plan, ctx, w, model_path)


def test_every_shipped_pair_covers_its_modes():
    missing = [(c.stem, w.stem, m) for c, w, m in CASES if m not in _plans_by_mode(c, w)]
    assert missing == []


@settings(max_examples=10, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(st.sampled_from([(c, w) for c in CLUSTERS if c.stem in ("mixed-8", "mixed-64")
                        for w in WORKLOADS]),
       st.lists(st.floats(0, 1), min_size=64, max_size=64))
def test_drawn_plans_pass_the_targets_own_checks(model_path, pair, unit):
    pb, ctx, w = _problem(*pair)
    u = np.resize(np.array(unit), pb.n_var)
    plan = pb.decode(pb.layout.repair((pb.xl + u * (pb.xu - pb.xl))[None])[0], lifetime=False)
    check_all_targets(plan, ctx, w, model_path)


def test_verl_refuses_an_unknown_key(model_path):
    """The check has teeth: a key verl does not have is refused in struct mode."""
    pb, ctx, _ = _problem(ROOT / "problems/clusters/mixed-64.yaml", ROOT / "problems/workloads/qwen2.5-7b-grpo.yaml")
    plan = _plans_by_mode(ROOT / "problems/clusters/mixed-64.yaml", ROOT / "problems/workloads/qwen2.5-7b-grpo.yaml")["async"]
    cfg = EXPORTERS["verl"](plan, ctx)
    cfg["async_training"] = {"staleness_threshold": 1.0}  # the old fully-async recipe's key
    with pytest.raises(Exception, match="async_training"):
        verl_config(cfg, V.config_name(plan), model_path)


def test_areal_parser_refuses_pipeline_stages_on_fsdp():
    from areal.api.alloc_mode import ModelAllocation

    with pytest.raises(Exception):
        ModelAllocation.from_str("fsdp:d2p2t2")
    assert ModelAllocation.from_str("megatron:d2p2t2").parallel.world_size == 8
