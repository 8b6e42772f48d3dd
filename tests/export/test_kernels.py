"""The workload's `elementwise_kernels` in each export (the target's own switch, or one note line saying
what the target runs instead), and read back by `mosearch import`."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from mosearch.commands.import_config import import_plan
from mosearch.export import EXPORTERS, NOTES, render
from mosearch.export import verl as V
from mosearch.export.read import read_verl
from problems.placement.names import ELEMENTWISE_KERNELS

from .targets import RLINF_BASE, hydra_overrides, rlinf_start, verl_compose

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "docs/examples"

# worked out from the modules: Liger fuses all three (on where RMSNorm is planned fused); Megatron-core
# fuses RMSNorm always and RoPE / the activation only when asked
LIGER = {"fused": True, "eager": False, "eager-fused-norm": True, "eager-activation": True}
MEGATRON = {"fused": (True, True), "eager": (False, False), "eager-fused-norm": (False, False),
            "eager-activation": (True, False)}
# notes expected: FSDP with Liger on (the package, or faster than planned); Megatron asked for eager RMSNorm
LIGER_NOTE = {"fused": True, "eager": False, "eager-fused-norm": True, "eager-activation": True}
READ_BACK_MEGATRON = {"fused": "fused", "eager": "eager-fused-norm", "eager-fused-norm": "eager-fused-norm",
                      "eager-activation": "eager-activation"}


def _notes(target, plan, ctx, word):
    return [n for n in NOTES[target](plan, ctx) if word in n]


@pytest.mark.parametrize("kernels", ELEMENTWISE_KERNELS)
def test_verl_switches(kernels, colocated, async_plan, ctx):
    c = replace(ctx, elementwise_kernels=kernels)
    fsdp = EXPORTERS["verl"](colocated, c)
    assert fsdp["actor_rollout_ref"]["model"]["use_liger"] is LIGER[kernels]
    assert len(_notes("verl", colocated, c, "use_liger")) == int(LIGER_NOTE[kernels])
    composed = verl_compose(V.config_name(colocated), hydra_overrides(fsdp))  # keys verl's schema has
    assert composed.actor_rollout_ref.model.use_liger is LIGER[kernels]

    mega = EXPORTERS["verl"](async_plan, c)
    over = mega["actor_rollout_ref"]["actor"]["megatron"]["override_transformer_config"]
    assert (over["apply_rope_fusion"], over["bias_activation_fusion"]) == MEGATRON[kernels]
    assert "use_liger" not in mega["actor_rollout_ref"]["model"]
    assert len(_notes("verl", async_plan, c, "fused kernel (no switch)")) == int(kernels == "eager")
    composed = verl_compose(V.config_name(async_plan), hydra_overrides(mega))
    t = composed.actor_rollout_ref.actor.megatron.override_transformer_config
    assert (t.apply_rope_fusion, t.bias_activation_fusion) == MEGATRON[kernels]
    assert t.recompute_granularity is None  # verl's own keys of the block kept

    # read back by `mosearch import` (the export's YAML, header and all)
    for plan, want in ((colocated, "fused" if LIGER[kernels] else "eager"), (async_plan, READ_BACK_MEGATRON[kernels])):
        cfg = yaml.safe_load(render("verl", plan, c))
        cfg["_hydra"] = {"config_name": V.config_name(plan), "model_engine": None}
        assert read_verl(cfg, "f").elementwise_kernels == want


def test_verl_ppo_critic_gets_the_same_switch(colocated, ctx):
    c = replace(ctx, algorithm="ppo", reference=True, elementwise_kernels="fused")
    assert EXPORTERS["verl"](colocated, c)["critic"]["model"]["use_liger"] is True


def test_no_workload_no_switch(colocated, async_plan, ctx):
    for plan in (colocated, async_plan):
        for target in EXPORTERS:
            text = yaml.safe_dump(EXPORTERS[target](plan, replace(ctx, elementwise_kernels=None)))
            assert "liger" not in text and "fusion" not in text


@pytest.mark.parametrize("kernels", ELEMENTWISE_KERNELS)
def test_areal_says_what_it_runs_instead(kernels, colocated, async_plan, ctx):
    c = replace(ctx, elementwise_kernels=kernels)
    # FSDP engine: Hugging Face's eager modules, no switch
    fsdp = _notes("areal", colocated, c, "elementwise_kernels")
    assert len(fsdp) == int(kernels != "eager")
    assert all("eager modules (no switch)" in n and "slower and its activations larger" in n for n in fsdp)
    # a plan of a front searched for AReaL was scored with those modules already: nothing to say
    assert _notes("areal", colocated.model_copy(update={"executor": "areal"}), c, "elementwise_kernels") == []
    # Megatron engine (pipeline stages): no fusion keys at all
    assert len(_notes("areal", async_plan, c, "elementwise_kernels")) == 1
    for plan in (colocated, async_plan):
        text = yaml.safe_dump(EXPORTERS["areal"](plan, c))
        assert "liger" not in text and "fusion" not in text


@pytest.mark.parametrize("kernels", ELEMENTWISE_KERNELS)
def test_rlinf_switches(kernels, colocated, async_plan, ctx):
    c = replace(ctx, elementwise_kernels=kernels)
    fsdp = EXPORTERS["rlinf"](colocated, c)
    assert fsdp["actor"]["fsdp_config"]["use_liger_kernel"] is LIGER[kernels]
    notes = _notes("rlinf", colocated, c, "use_liger_kernel")
    assert len(notes) == int(LIGER_NOTE[kernels]) and all("model types" in n for n in notes)
    merged = rlinf_start(fsdp, [("A100-80G", 8), ("A100-80G", 8)], RLINF_BASE)["config"]
    assert merged.actor.fsdp_config.use_liger_kernel is LIGER[kernels]  # kept through validate_fsdp_cfg

    model = EXPORTERS["rlinf"](async_plan, c)["actor"]["model"]
    assert (model["apply_rope_fusion"], model["bias_activation_fusion"]) == MEGATRON[kernels]
    assert len(_notes("rlinf", async_plan, c, "fused kernel (no switch)")) == int(kernels == "eager")


def test_import_scores_the_kernels_the_config_runs():
    """verl's FSDP workers run eager modules unless use_liger: the example (no use_liger) scores slower than
    with Liger, and says so in one line; with Liger it matches the workload's fused kernels."""
    config, workload = str(EXAMPLES / "verl-gsm8k-grpo.yaml"), str(EXAMPLES / "verl-gsm8k-grpo-workload.yaml")
    cluster = str(ROOT / "problems/clusters/h100-64.yaml")
    eager, w_eager = import_plan("verl", config, [], cluster, workload)
    fused, w_fused = import_plan("verl", config, ["actor_rollout_ref.model.use_liger=true"], cluster, workload)
    said = [w for w in w_eager if "elementwise_kernels" in w]
    assert len(said) == 1 and "runs elementwise_kernels eager, the workload says fused" in said[0]
    assert not any("elementwise_kernels" in w for w in w_fused)
    assert eager.predicted["train_compute_s"] > fused.predicted["train_compute_s"] * 1.05
