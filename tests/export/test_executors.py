"""Fronts searched for an executor (`mosearch plan --executor`) start in that executor as planned.

Every plan of the front (front.csv) of a 7B GRPO run on mixed-64, 70B PPO runs on h100-64 and mixed-64
and a small 1.5B run on mixed-8, per executor, is exported and started by the executor's own start-up
code (tests/export/targets.py): a refusal fails the test, and what the executor asks for (GPUs per
node and in all, DP, TP/PP, the critic's layout, engines, mode) must be exactly the plan's.

The fronts are searched once per session with a reduced budget (conftest.py `fronts`), so CI spends its
time on the executors' checks.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from mosearch.export import EXPORTERS, ExportContext
from mosearch.export import layout as L
from mosearch.export import verl as V
from problems.errors import NoFeasiblePlan
from problems.placement.problem import PlacementProblem
from problems.placement.specs import load_cluster, load_workload

from .conftest import EVALS, front_paths as _paths
from .targets import areal_start, rlinf_start, verl_asks, verl_start

ROOT = Path(__file__).resolve().parents[2]
CASES = [("mixed-64", "qwen2.5-7b-grpo"), ("h100-64", "llama3.1-70b-ppo"), ("mixed-64", "llama3.1-70b-ppo"),
         ("mixed-8", "qwen2.5-1.5b-grpo")]
# AReaL has no optimizer offload during the step and always shards fully: 70B PPO does not fit
# mixed-64's GPUs without it (the model's memory), so that front is empty (checked below)
EMPTY = {("areal", "mixed-64", "llama3.1-70b-ppo")}
# what a user's RLinf config holds that an export leaves to them (paths, model type)
RLINF_BASE = {"runner": {"task_type": "reasoning", "seq_length": 2048},
              "rollout": {"model": {"model_path": "/models/user", "model_type": "qwen2.5"}, "return_logprobs": False,
                          "sglang": {}, "vllm": {}},
              "data": {"max_prompt_length": 1024}, "actor": {"model": {"model_path": "/models/user"}}}


@pytest.fixture(scope="session")
def model_path(tmp_path_factory) -> str:
    """verl reads the critic's HF config from disk: the local tiny model stands in for the user's."""
    from trainer.models.tiny import build_tiny

    return str(build_tiny(tmp_path_factory.mktemp("model") / "tiny"))


def _role_gpus(plan, role: str) -> int:
    return sum(getattr(p, f"{role}_gpus") for p in plan.pools)


def _train_gpus(plan) -> int:
    return _role_gpus(plan, "train") + _role_gpus(plan, "shared")


def _check_verl(plan, ctx, workload, model_path) -> None:
    cfg = EXPORTERS["verl"](plan, ctx)
    config, trainer = verl_start(cfg, V.config_name(plan), model_path)
    asks = verl_asks(config, trainer)
    nodes = L.nodes(plan, ctx)
    colocated = plan.execution.mode == "colocated"
    t = plan.train
    role = L.SHARED if colocated else L.TRAIN
    assert asks["train_nodes"] == L.per_node(nodes, role), "trainer pool != the plan's training GPUs per node"
    assert sum(asks["train_nodes"]) == _train_gpus(plan)
    assert asks["rollout_nodes"] == ([] if colocated else L.per_node(nodes, L.ROLLOUT))
    assert (asks["actor"]["tp"], asks["actor"]["pp"], asks["actor"]["dp"]) == (t.tp, t.pp, t.dp)
    assert asks["actor"]["cp"] == 1
    if workload.has_critic:
        assert asks["critic"] == asks["actor"], "the critic does not train with the actor's layout"
    else:
        assert asks["critic"] is None
    assert asks["engines"] == plan.rollout_engines and asks["rollout_tp"] == L.rollout_tp(plan)[0]
    assert asks["mode"] == ("sync" if colocated else "separate_async")
    assert asks["hybrid"] == colocated
    if not colocated:
        assert config.trainer.v1.sampler.max_off_policy_threshold == plan.execution.staleness_bound + 1
    assert config.data.train_batch_size * config.actor_rollout_ref.rollout.n == workload.samples_per_step
    assert config.actor_rollout_ref.actor.ppo_mini_batch_size == config.data.train_batch_size  # one step


def _check_areal(plan, ctx, workload) -> None:
    got = areal_start(EXPORTERS["areal"](plan, ctx), workload.algorithm)
    a, t = got["allocs"], plan.train
    colocated = plan.execution.mode == "colocated"
    actor = a["actor"].parallel
    assert (actor.dp_size, actor.tp_size, actor.pp_size) == (t.dp, t.tp, t.pp)
    assert actor.world_size == _train_gpus(plan)
    r = a["rollout"].parallel
    assert (r.dp_size, r.tp_size) == (plan.rollout_engines, L.rollout_tp(plan)[0])
    assert r.world_size == (_role_gpus(plan, "shared") if colocated else _role_gpus(plan, "rollout"))
    if workload.has_critic:
        c = a["critic"].parallel
        assert (c.dp_size, c.tp_size, c.pp_size) == (t.dp, t.tp, t.pp)
        assert got["workers"]["critic"] == got["workers"]["actor"]
    assert got["workers"]["actor"] == _train_gpus(plan)
    assert got["workers"]["rollout"] == plan.rollout_engines
    cfg = got["config"]
    assert cfg.cluster.n_nodes * cfg.cluster.n_gpus_per_node == plan.used_gpus
    legacy = got["legacy"]  # the launchers' one-string form says the same
    assert (legacy.gen.world_size, legacy.train.world_size) == (r.world_size, actor.world_size)
    assert legacy.gen.tp_size == r.tp_size and legacy.train.tp_size == t.tp
    assert cfg.rollout.max_head_offpolicyness == plan.execution.staleness_bound
    assert cfg.gconfig.n_samples * cfg.train_dataset.batch_size == workload.samples_per_step


def _check_rlinf(plan, ctx, workload) -> None:
    nodes = L.nodes(plan, ctx)
    got = rlinf_start(EXPORTERS["rlinf"](plan, ctx), [(n.gpu, n.size) for n in nodes], RLINF_BASE)
    pl, t = got["placement"], plan.train
    assert pl.is_collocated
    assert pl.actor_world_size == _train_gpus(plan) and pl.rollout_world_size == _train_gpus(plan)
    assert (pl.actor_tp_size, pl.actor_pp_size, pl.actor_dp_size) == (t.tp, t.pp, t.dp)
    assert (pl.rollout_tp_size, pl.rollout_dp_size) == (L.rollout_tp(plan)[0], plan.rollout_engines)
    if workload.has_critic:
        assert (pl.critic_world_size, pl.critic_tp_size, pl.critic_pp_size) == (pl.actor_world_size, t.tp, t.pp)
    # every process on GPUs of one node, and the node of the plan's pool for those GPUs
    for comp, procs in got["placed"].items():
        for node, gpus, _ in procs:
            assert max(gpus) < nodes[node].size, (comp, node, gpus)
            assert all(nodes[node].roles[g] == L.SHARED for g in gpus), (comp, node, gpus)
    assert got["config"].actor.global_batch_size == workload.samples_per_step  # one optimizer step


CHECKS = {"verl": _check_verl, "areal": _check_areal, "rlinf": _check_rlinf}
PARAMS = [(e, c, w) for e in CHECKS for c, w in CASES if (e, c, w) not in EMPTY]


@pytest.mark.slow
@pytest.mark.parametrize("executor,cluster,workload", PARAMS, ids=[f"{e}-{c}-{w}" for e, c, w in PARAMS])
def test_every_front_plan_starts_in_its_executor_as_planned(fronts, model_path, executor, cluster, workload):
    plans, c, w = fronts(executor, cluster, workload)
    assert plans, "the front is empty"
    ctx = ExportContext.from_specs(c, w)
    problem = PlacementProblem(c, w, executor=executor)
    for plan in plans:
        assert problem.executor_problem(plan) is None
        if executor == "verl":
            _check_verl(plan, ctx, w, model_path)
        else:
            CHECKS[executor](plan, ctx, w)


@pytest.mark.slow
def test_areal_cannot_fit_70b_ppo_on_mixed_64(tmp_path):
    """No optimizer offload in AReaL: the search reports why it found no plan instead of a front."""
    from mosearch.planner.run import plan_run
    from mosearch.planner.search import SearchSettings

    c, w = _paths("mixed-64", "llama3.1-70b-ppo")
    with pytest.raises(NoFeasiblePlan, match="least memory found"):
        plan_run(str(c), str(w), tmp_path, SearchSettings(evals=EVALS, seed=0, progress=False), report=False,
                 executor="areal", restriction=False)


def test_rules_name_what_each_executor_refuses():
    """A plan the unrestricted search likes, checked against each executor: the rule comes back in one line."""
    cp, wp = _paths("mixed-64", "qwen2.5-7b-grpo")
    c, w = load_cluster(cp), load_workload(wp)
    free = PlacementProblem(c, w)
    X = free.layout.repair(free.xl + np.random.default_rng(1).random((400, free.n_var)) * (free.xu - free.xl))
    plans = [free.decode(x, lifetime=False) for x in X[:120]]
    for executor in ("verl", "areal", "rlinf"):
        pb = PlacementProblem(c, w, executor=executor)
        whys = [pb.executor_problem(p) for p in plans]
        refused = [y for y in whys if y]
        assert refused, executor
        assert all("\n" not in y and y.startswith(pb.executor.runs) for y in refused)
        # repair moves every plan into the executor's space: the rules then hold (or the constraint says not)
        R = pb.layout.repair(X)
        assert (pb.layout.repair(R) == R).all()  # idempotent
        r = pb.evaluate_matrix(R)
        ok = r["executor"] == 0
        assert ok.mean() > 0.5, (executor, ok.mean())
        for x in R[ok][:40]:
            assert pb.executor_problem(pb.decode(x, lifetime=False)) is None
