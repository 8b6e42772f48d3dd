"""Exports launchable as printed: the command in each header, run (verl's main itself) or composed exactly
as it composes, and the launcher that puts each verl role on its planned GPU type."""

from __future__ import annotations

import json
import re
import shlex

import pytest
import yaml

from mosearch.export import ExportContext, launch, render
from mosearch.export import launch_verl as LV
from mosearch.export import layout as L
from mosearch.export import verl as V

from .targets import Workdir, check_verl, hydra_overrides, printed_command, verl_compose, write_export


def _header(text: str) -> list[str]:
    return [line[2:] for line in text.splitlines() if line.startswith("# ")]


def test_each_header_names_the_command_that_starts_its_file(tmp_path, colocated, hetero_disagg, ctx):
    for target in ("verl", "areal", "rlinf"):
        path = tmp_path / f"{target}.yaml"
        text = render(target, colocated, ctx, path)
        path.write_text(text)
        (words,) = printed_command(path)
        if target == "verl":
            assert words[:3] == ["python", "-m", "verl.trainer.main_ppo"]
            assert (words[words.index("--config-path") + 1], words[words.index("--config-name") + 1]) == (
                str(tmp_path), "verl")
            cfg = yaml.safe_load(text)
            assert cfg["defaults"] == [V.config_name(colocated), "_self_"]
            assert cfg["hydra"]["searchpath"] == [launch.VERL_SEARCHPATH]
        elif target == "areal":
            assert words == ["python3", launch.AREAL_ENTRY, "--config", str(path)]
            assert yaml.safe_load(text)["defaults"] == ["areal_base", "_self_"]
        else:
            assert words[:2] == ["python", launch.RLINF_ENTRY] and words[-1] == "rlinf"
            assert yaml.safe_load(text)["defaults"] == ["rlinf_base", "_self_"]
    # printed (no --out): saved under a name the header gives, started from that directory
    text = render("verl", colocated, ctx)
    assert f"save this output as verl-{colocated.plan_id}.yaml" in text
    assert f'--config-path "$PWD" --config-name verl-{colocated.plan_id}' in text


def test_the_workload_without_a_model_directory_leaves_one_placeholder_in_the_command(colocated, ctx):
    import dataclasses

    cmd = launch.commands("verl", colocated, ctx)[-1]
    assert cmd.endswith(f"actor_rollout_ref.model.path={launch.MODEL_PLACEHOLDER}")
    ppo = dataclasses.replace(ctx, algorithm="ppo", reference=True)
    assert launch.commands("verl", colocated, ppo)[-1].endswith(f"critic.model.path={launch.MODEL_PLACEHOLDER}")
    assert launch.MODEL_PLACEHOLDER not in launch.commands("verl", colocated, dataclasses.replace(ctx, model_dir="/m"))[-1]


def test_megatron_keys_verl_does_not_list_compose_from_the_file_not_as_plain_overrides(tmp_path, async_plan, ctx):
    """override_transformer_config keys (apply_rope_fusion) are refused by verl as plain command-line
    overrides; the export's file (a defaults list on ppo_megatron_trainer) composes with them."""
    import dataclasses

    from hydra.errors import ConfigCompositionException

    c = dataclasses.replace(ctx, elementwise_kernels="fused")
    cfg = V.export(async_plan, c)
    plain = [o.lstrip("+") for o in hydra_overrides(cfg)]
    with pytest.raises(ConfigCompositionException, match="apply_rope_fusion"):
        verl_compose("ppo_megatron_trainer", plain)
    from .targets import verl_compose_file

    path = write_export("verl", async_plan, c, tmp_path)
    composed = verl_compose_file(path, [])
    t = composed.actor_rollout_ref.actor.megatron.override_transformer_config
    assert t.apply_rope_fusion is True and t.recompute_granularity is None  # verl's own keys of the block kept
    assert composed.actor_rollout_ref.actor.strategy == "megatron"  # ppo_megatron_trainer's


def test_ray_start_lines_give_each_node_the_gpus_each_role_takes_there(hetero_disagg, async_plan, ctx):
    for plan in (hetero_disagg, async_plan):
        assert launch.needs_role_pinning(plan, ctx)
        nodes = L.nodes(plan, ctx)
        lines = launch.ray_start_lines(plan, ctx)
        assert len(lines) == len(nodes)
        assert "--head" in lines[0] and all("--address=HEAD_IP:6379" in ln for ln in lines[1:])
        for rank, (line, n) in enumerate(zip(lines, nodes)):
            res = json.loads(re.search(r"--resources='(.*)'", line).group(1))
            assert res == {launch.ROLE_RESOURCE[r]: n.count(r) for r in (L.ROLLOUT, L.TRAIN) if n.count(r)}
            assert f"--num-gpus={n.size}" in line and line.startswith(f"node {rank} ({n.pool})")
        total = {r: sum(json.loads(re.search(r"--resources='(.*)'", ln).group(1)).get(launch.ROLE_RESOURCE[r], 0)
                        for ln in lines) for r in (L.ROLLOUT, L.TRAIN)}
        assert total == {L.ROLLOUT: L.role_gpus(plan, "rollout"), L.TRAIN: L.role_gpus(plan, "train")}
        cmd = launch.commands("verl", plan, ctx)
        assert cmd[-1].startswith("python -m mosearch.export.launch_verl --config-path")
    # one GPU type, or colocated: verl's own entry
    assert not launch.needs_role_pinning(hetero_disagg.model_copy(update={"pools": hetero_disagg.pools[:1]}), ctx)


def test_launch_verl_pins_each_pool_to_its_roles_resource(monkeypatch):
    """verl's own RayResourcePool.get_placement_groups, after install(): every bundle of the trainer's
    global pool asks for one mosearch_train unit, every bundle of a standalone rollout pool one
    mosearch_rollout unit; other pools (reward, teacher) and the bundles' GPU and CPU requests unchanged."""
    from verl.single_controller.ray import base

    made = []

    class PG:
        def ready(self):
            return None

    def record(bundles, strategy="PACK", name="", *args, **kwargs):
        made.append((name, bundles, strategy))
        return PG()

    monkeypatch.setattr(base, "placement_group", record)
    monkeypatch.setattr(base.ray, "get", lambda refs: refs)
    monkeypatch.setattr(base, "sort_placement_group_by_node_ip", lambda pgs: pgs)
    LV.install()
    LV.install()  # idempotent: one wrapper
    assert base.placement_group._mosearch_pinned
    for pool in ("global_pool", "rollout_pool_3", "rollout_pool_reward_0"):
        base.RayResourcePool(process_on_nodes=[2, 1], use_gpu=True, max_colocate_count=3,
                             name_prefix=pool).get_placement_groups(device_name="cpu")
    by_pool = {}
    for name, bundles, strategy in made:
        by_pool.setdefault(name.split("verl_group")[0], []).append(bundles)
        assert strategy == "STRICT_PACK"  # verl's own choice kept
    gpu = base.get_platform().ray_resource_name() if hasattr(base, "get_platform") else "GPU"
    for pool, res in (("global_pool", LV.TRAIN_RESOURCE), ("rollout_pool_3", LV.ROLLOUT_RESOURCE)):
        assert [len(b) for b in by_pool[pool]] == [2, 1]  # one placement group per node, a bundle per GPU
        assert all(b[res] == 1 and b["CPU"] == 3 and b[gpu] == 1 for bs in by_pool[pool] for b in bs)
    assert all(set(b) == {"CPU", gpu} for bs in by_pool["rollout_pool_reward_0"] for b in bs)
    assert len(made) == 6  # install() twice wrapped once: each pool asked Ray once per node


def test_launch_verl_adds_the_hook_that_installs_it_in_rays_workers():
    argv = LV.argv_for_verl(["--config-path", "/d", "--config-name", "n", "x=1"])
    assert argv[:5] == ["--config-path", "/d", "--config-name", "n", "x=1"]
    assert argv[-1] == "++ray_kwargs.ray_init.runtime_env.worker_process_setup_hook=mosearch.export.launch_verl.install"
    # the hook is importable by the name Ray resolves
    import importlib

    mod, fn = LV.HOOK.rsplit(".", 1)
    assert getattr(importlib.import_module(mod), fn) is LV.install
    assert launch.ROLE_RESOURCE == {L.TRAIN: LV.TRAIN_RESOURCE, L.ROLLOUT: LV.ROLLOUT_RESOURCE}


@pytest.fixture(scope="module")
def verl_plans(fronts):
    """From the verl front of mixed-64 x qwen2.5-7b-grpo: a Megatron plan, an FSDP plan, and a plan whose
    rollout and training sit on different GPU types (started through mosearch.export.launch_verl)."""
    plans, c, w = fronts("verl", "mixed-64", "qwen2.5-7b-grpo")
    ctx = ExportContext.from_specs(c, w)
    def first(want):  # verl's own entry where the front has such a plan
        found = [p for p in plans if want(p)]
        return next((p for p in found if not launch.needs_role_pinning(p, ctx)), found[0] if found else None)

    pick = {"megatron": first(V.megatron), "fsdp": first(lambda p: not V.megatron(p)),
            "pinned": next((p for p in plans if launch.needs_role_pinning(p, ctx)), None)}
    return pick, ctx, w


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["megatron", "fsdp", "pinned"])
def test_verls_own_main_runs_the_printed_command(verl_plans, tmp_path, kind):
    """`verl.trainer.main_ppo.main` itself (hydra.main, its validate_config) with the header's arguments, or
    mosearch.export.launch_verl's main around it, up to run_ppo (Ray and the GPU workers): the config it
    passes on starts the v1 trainer as planned; launch_verl's carries the hook into Ray's workers."""
    from trainer.models.tiny import build_tiny

    pick, ctx, w = verl_plans
    plan = pick[kind]
    if plan is None:
        pytest.fail(f"the verl front has no {kind} plan to start")
    work = Workdir(tmp_path, str(build_tiny(tmp_path / "tiny")))
    got = check_verl(plan, ctx, w, work, via_main=True)
    hook = got["config"].ray_kwargs.ray_init.runtime_env.get("worker_process_setup_hook")
    pinned = launch.needs_role_pinning(plan, ctx)
    assert pinned or kind != "pinned"
    assert hook == (LV.HOOK if pinned else None)
    words = shlex.split(launch.commands("verl", plan, ctx, got["path"])[-1])
    assert words[2] == ("mosearch.export.launch_verl" if pinned else "verl.trainer.main_ppo")
    assert (got["config"].actor_rollout_ref.actor.strategy == "megatron") == V.megatron(plan)


@pytest.mark.integration
def test_ray_places_launch_verls_pools_only_on_their_roles_gpus():
    """A real local Ray node started as the header's `ray start` line for a node holding both roles
    (2 rollout and 2 training GPUs, as logical GPUs, 2 more free): verl's own pools, after install(), take
    the roles' units; a trainer pool asking for a third training GPU waits though the node has free GPUs,
    while an unpinned pool of the same size is placed (tests/export/ray_pinning.py, its own process)."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    run = subprocess.run([sys.executable, "-m", "tests.export.ray_pinning"], cwd=root, capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    out = json.loads(run.stdout.strip().splitlines()[-1])
    assert all(b[LV.TRAIN_RESOURCE] == 1 for b in out["bundles"]["global_pool"])
    assert all(b[LV.ROLLOUT_RESOURCE] == 1 for b in out["bundles"]["rollout_pool_0"])
    assert out["left"] == {"GPU": 2, LV.TRAIN_RESOURCE: 0, LV.ROLLOUT_RESOURCE: 0}
    assert out["third_train_placed"] is False and out["unpinned_placed"] is True


def test_the_executors_megatron_checks_run_and_refuse(tmp_path, ctx):
    """The Megatron branches are the executors' own: RLinf's validate_cfg divides the model's vocabulary by
    TP (a vocabulary it cannot split is refused), verl's validate_config divides the step's samples by
    Megatron DP x micro-batch (a micro-batch that does not split them is refused)."""
    from problems.placement.specs import load_workload

    from .conftest import WORKLOAD, make_plan, pool
    from .targets import (Workdir, hf_config_dir, rlinf_base, rlinf_compose, rlinf_start_config, verl_compose_file,
                          verl_start)

    w = load_workload(WORKLOAD)
    plan = make_plan("mega", [pool("A100-80G@eu-west", shared=16, tp=2)],
                     {"dp": 8, "tp": 2, "pp": 1, "sharding": "zero1", "micro_batch": 1}, "colocated")
    nodes = [(n.gpu, n.size) for n in L.nodes(plan, ctx)]
    work = Workdir(tmp_path, "unused")
    for vocab, refused in ((w.model.vocab, False), (w.model.vocab + 1, True)):  # Qwen2.5's 152064, then odd
        folder = tmp_path / f"rlinf-{vocab}"
        model = w.model.model_copy(update={"vocab": vocab})
        folder.mkdir()
        (folder / "rlinf_base.yaml").write_text(yaml.safe_dump(rlinf_base(hf_config_dir(model, folder / "model"))))
        merged = rlinf_compose(write_export("rlinf", plan, ctx, folder))
        if refused:
            with pytest.raises(AssertionError, match=rf"padded_vocab_size \({vocab}\) must be divisible by "
                                                     r"tensor_model_parallel_size \(2\)"):
                rlinf_start_config(merged, nodes)
        else:
            got = rlinf_start_config(merged, nodes)["config"]
            assert got.actor.model.padded_vocab_size == vocab and got.actor.training_backend == "megatron"
    # verl: 128 x 8 samples over DP 8 x micro-batch 3 do not split
    odd = plan.model_copy(update={"train": plan.train.model_copy(update={"micro_batch": 3})})
    config = verl_compose_file(write_export("verl", odd, ctx, work.folder("verl")),
                               ["actor_rollout_ref.model.path=/m"])
    with pytest.raises(AssertionError, match=r"real_train_batch_size \(1024\) must be divisible by minimal possible "
                                             r"batch size \(24\)"):
        verl_start(config)
