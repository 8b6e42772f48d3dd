"""A mixture of experts' verl front: every plan passes verl's start-up with its expert parallelism as planned
(the Megatron actor's expert_model_parallel_size, the vLLM engines' expert_parallel_size)."""

from __future__ import annotations

import pytest

from mosearch.export import EXPORTERS, ExportContext
from mosearch.export import layout as L
from problems.placement.problem import PlacementProblem

from .targets import Workdir, check_rlinf, check_verl


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Workdir:
    """Exports composed as their printed commands compose them; the local tiny model stands in for the user's
    weights (verl reads the critic's HF config from disk)."""
    from trainer.models.tiny import build_tiny

    root = tmp_path_factory.mktemp("exports")
    return Workdir(root, str(build_tiny(root / "tiny")))


@pytest.mark.slow
def test_a_moe_verl_front_starts_with_its_expert_parallelism(fronts, work):
    plans, c, w = fronts("verl", "mixed-64", "qwen3-30b-a3b-grpo")
    assert plans, "the front is empty"
    assert any(p.train.ep > 1 for p in plans), "no plan of the front uses EP"
    ctx = ExportContext.from_specs(c, w)
    assert ctx.experts == 128
    problem = PlacementProblem(c, w, executor="verl")
    for plan in plans:
        assert problem.executor_problem(plan) is None
        config = check_verl(plan, ctx, w, work)["config"]
        actor, rollout = config.actor_rollout_ref.actor, config.actor_rollout_ref.rollout
        if plan.train.ep > 1:
            assert actor.strategy == "megatron"
            assert actor.megatron.expert_model_parallel_size == plan.train.ep
            assert actor.megatron.expert_tensor_parallel_size == 1
        tp = L.rollout_tp(plan)[0]
        assert rollout.expert_parallel_size == (tp if tp > 1 else 1)


def test_a_dense_export_has_no_expert_keys(colocated):
    cfg = EXPORTERS["verl"](colocated, ExportContext())
    assert "expert_parallel_size" not in cfg["actor_rollout_ref"]["rollout"]
    assert "expert_model_parallel_size" not in str(cfg)


@pytest.mark.slow
def test_a_moe_verl_export_imports_back_with_its_ep(fronts, tmp_path):
    """Export then `mosearch import` of the MoE verl front: the same placement, EP included."""
    from mosearch.commands.import_config import import_plan
    from mosearch.export import render

    from .conftest import front_paths

    plans, c, w = fronts("verl", "mixed-64", "qwen3-30b-a3b-grpo")
    ctx = ExportContext.from_specs(c, w)
    cpath, wpath = front_paths("mixed-64", "qwen3-30b-a3b-grpo")
    eps = set()
    for i, plan in enumerate(plans):
        path = tmp_path / f"verl-{i}.yaml"
        path.write_text(render("verl", plan, ctx))
        back, _ = import_plan("verl", str(path), [], str(cpath), str(wpath))
        assert back.train.ep == plan.train.ep, plan.plan_id
        assert (back.train.dp, back.train.tp, back.train.pp) == (plan.train.dp, plan.train.tp, plan.train.pp)
        eps.add(plan.train.ep)
    assert max(eps) > 1


@pytest.mark.slow
def test_a_moe_rlinf_front_starts_with_its_expert_parallelism(fronts, work):
    plans, c, w = fronts("rlinf", "mixed-64", "qwen3-30b-a3b-grpo")
    assert plans, "the front is empty"
    problem = PlacementProblem(c, w, executor="rlinf")
    if not any(p.train.ep > 1 for p in plans):
        # whether the front's fastest plans use EP follows the fitted step terms; the export of EP must hold
        # either way: the front's plans with EP 2 where their training ranks allow it, as RLinf accepts them
        variants = [p.model_copy(update={"plan_id": p.plan_id + "-ep2", "train": p.train.model_copy(update={"ep": 2})})
                    for p in plans if (p.train.dp * p.train.tp) % 2 == 0]
        plans = plans + [v for v in variants if problem.executor_problem(v) is None]
    assert any(p.train.ep > 1 for p in plans), "no plan of the front, nor an EP variant RLinf accepts, uses EP"
    ctx = ExportContext.from_specs(c, w)
    for plan in plans:
        merged = check_rlinf(plan, ctx, w, work)["config"]
        assert merged.actor.model.get("expert_model_parallel_size", 1) == plan.train.ep
