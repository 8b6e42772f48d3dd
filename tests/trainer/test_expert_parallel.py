"""Expert parallelism against a single rank: with ep=2 each rank holds half of every MoE layer's experts,
tokens go to their experts' rank and back by all-to-all over gloo, and one step from the same weights and
batch gives the same loss, the same gradient norm and, after the update, the same full weights as one
rank holding every expert (the comparison of tests/trainer/test_parallel.py: plain SGD, each tensor's
change within a tolerance relative to its own largest change). A doubled or a dropped expert gradient,
injected after the gradient synchronisation, must fail that comparison.

Each layout runs as plain processes over gloo (no Ray)."""

from __future__ import annotations

import pytest
import torch

from tests.trainer.test_parallel import ALGO, MICRO, _batch, _port, checkpoint_round_trip, spawn_ranks
from trainer import expert_parallel as EP


def _rank(rank, world, port, model, ep, fault, out, one_sided=False):
    torch.set_num_threads(1)
    from trainer.workers import TrainWorker

    if one_sided:
        _route_to_first_two()

    w = TrainWorker(model, rank, world, port, ALGO, MICRO, "none", ep=ep)
    if fault:  # the test's injection point: an expert gradient counted twice, or lost, on one rank
        sync = w._sync_grads

        def faulty():
            grads = sync()
            experts = [p for p in w.params if id(p) in w.expert_ids]
            if fault == "double" and rank == 0:
                experts[0].grad.mul_(2.0)
            if fault == "drop" and rank == world - 1:
                experts[-1].grad.zero_()
            return grads

        w._sync_grads = faulty
    batch = _batch()
    w.accumulate(batch[w.c.dp_idx::world], len(batch), n_micro=2, last=True)
    st = w.apply()
    state = checkpoint_round_trip(w, out)  # of the EP layout too
    torch.save((rank, st["loss"], w.params_held, state if rank == 0 else None, st["grad_norm"], w.layout_info()),
               f"{out}/rank{rank}.pt")
    w.shutdown()


def run_ep(model: str, world: int, ep: int, out, fault: str | None = None, one_sided: bool = False) -> dict:
    got = spawn_ranks(_rank, world, lambda r, port: (r, world, port, model, ep, fault, str(out), one_sided), out,
                      weights_only=False)
    return {"loss": [g[1] for g in got], "params": [g[2] for g in got], "state": got[0][3],
            "grad_norm": [g[4] for g in got], "info": [g[5] for g in got]}


def _route_to_first_two(setattr_=setattr) -> None:
    """Make every Qwen3-MoE router of this process send each token to experts 0 and 1 only: with ep=2
    rank 1 then receives no token, yet must run every all-to-all of the forward and backward."""
    from transformers.models.qwen3_moe import modeling_qwen3_moe as M

    def forward(self, hidden):
        logits = torch.nn.functional.linear(hidden.reshape(-1, self.hidden_dim), self.weight)
        logits = logits.masked_fill(torch.arange(self.num_experts) >= 2, float("-inf"))
        top, idx = torch.topk(torch.softmax(logits.float(), -1), self.top_k, dim=-1)
        return logits, (top / top.sum(-1, keepdim=True)).to(logits.dtype), idx

    setattr_(M.Qwen3MoeTopKRouter, "forward", forward)


def _reference(model):
    from trainer.workers import TrainWorker

    w = TrainWorker(str(model), 0, 1, _port(), ALGO, MICRO)
    before = {k: v.clone() for k, v in w.state_items()}
    batch = _batch()
    w.accumulate(batch, len(batch), n_micro=4, last=True)
    st = w.apply()
    return {"loss": st["loss"], "state": dict(w.state_items()), "before": before, "params": w.params_held,
            "grad_norm": st["grad_norm"]}


@pytest.fixture(scope="module")
def reference(tiny_moe_model):
    return _reference(tiny_moe_model)


def compare(got: dict, reference: dict) -> None:
    """The layout's step equals the reference's (loss, gradient norm, every tensor's change)."""
    ref, before = reference["state"], reference["before"]
    assert set(got["state"]) == set(ref)  # HF naming: the full expert tensors, gathered
    assert got["loss"] == pytest.approx([reference["loss"]] * len(got["loss"]), rel=1e-5, abs=1e-6)
    assert got["grad_norm"] == pytest.approx([reference["grad_norm"]] * len(got["grad_norm"]), rel=1e-5)
    for k, v in ref.items():
        step_ref = v - before[k]
        scale = float(step_ref.abs().max())
        tol = 1e-4 * scale + 4 * torch.finfo(torch.float32).eps * float(v.abs().max())
        torch.testing.assert_close(got["state"][k] - before[k], step_ref, rtol=0, atol=tol,
                                   msg=lambda m, k=k: f"{k}: {m}")


@pytest.mark.parametrize("world", [2, 4])  # 4: two EP groups, expert gradients summed over expert-DP pairs
def test_ep2_matches_single_rank(reference, tiny_moe_model, tmp_path, world):
    got = run_ep(str(tiny_moe_model), world, 2, tmp_path)
    compare(got, reference)
    # every expert of every layer got tokens and moved: agreeing on them is not trivial
    experts = [k for k in reference["state"] if EP.is_expert(k)]
    assert len(experts) == 4  # 2 layers x (gate_up_proj, down_proj)
    for k in experts:
        moved = (reference["state"][k] - reference["before"][k]).flatten(1).abs().amax(1)
        assert bool((moved > 0).all()), (k, moved)
    # each rank holds half the experts: fewer parameters than the whole model, the same on every rank
    expert_params = sum(reference["state"][k].numel() for k in experts)
    assert got["params"] == [reference["params"] - expert_params // 2] * world
    assert [i["experts"] for i in got["info"]] == [[0, 2], [2, 4]] * (world // 2)
    if world == 2:
        # `mosearch export-model` merges the EP ranks' files (its ranks again, over gloo) to the same state
        from trainer.export_model import merged_state, read_layout

        layout = read_layout(tmp_path / "ckpt")
        assert layout["files"] == 2 and layout["ep"] == 2
        merged = merged_state(tmp_path / "ckpt", layout, tmp_path)
        assert set(merged) == set(got["state"]) and all(torch.equal(merged[k], v) for k, v in got["state"].items())


@pytest.mark.parametrize("fault", ["double", "drop"])
def test_wrong_expert_gradient_fails_the_comparison(reference, tiny_moe_model, tmp_path, fault):
    got = run_ep(str(tiny_moe_model), 2, 2, tmp_path, fault)
    with pytest.raises(AssertionError):
        compare(got, reference)


def test_a_rank_that_receives_no_token_keeps_step(tiny_moe_model, tmp_path, monkeypatch):
    _route_to_first_two(monkeypatch.setattr)
    ref = _reference(tiny_moe_model)
    got = run_ep(str(tiny_moe_model), 2, 2, tmp_path, one_sided=True)
    compare(got, ref)
    for k in (k for k in ref["state"] if EP.is_expert(k)):  # experts 2, 3 got no token: unchanged
        moved = (ref["state"][k] - ref["before"][k]).flatten(1).abs().amax(1)
        assert bool((moved[:2] > 0).all()) and bool((moved[2:] == 0).all()), (k, moved)


def test_checkpoint_items_are_what_save_pretrained_writes(tiny_moe_model):
    """The per-expert names and slices weight sync sends vLLM are those of the saved checkpoint."""
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    m = AutoModelForCausalLM.from_pretrained(tiny_moe_model, dtype=torch.float32)
    saved = load_file(str(tiny_moe_model / "model.safetensors"))
    items = dict(EP.checkpoint_items(m.state_dict().items()))
    tied = {"lm_head.weight"} - set(saved)  # a tied head is not saved
    assert set(items) - tied == set(saved)
    assert all(torch.equal(items[k], v) for k, v in saved.items())


def test_layout_problems():
    from types import SimpleNamespace

    moe = SimpleNamespace(num_experts=4, model_type="qwen3_moe")
    assert EP.layout_problem(moe, 2, 2, 1, 1, "none") is None
    assert "divide the model's 4 experts" in EP.layout_problem(moe, 3, 3, 1, 1, "none")
    assert "dense" in EP.layout_problem(SimpleNamespace(model_type="qwen2"), 2, 2, 1, 1, "none")
    assert "tp=1 and pp=1" in EP.layout_problem(moe, 2, 4, 2, 1, "none")
    assert "sharding none" in EP.layout_problem(moe, 2, 2, 1, 1, "zero3")


def test_fit_model_runs_ep_as_the_model_allows():
    from types import SimpleNamespace

    from problems.errors import InputError
    from trainer.placement import Layout, fit_model

    def cfg(experts):
        return SimpleNamespace(num_attention_heads=2, num_key_value_heads=2, intermediate_size=256,
                               num_hidden_layers=2, num_experts=experts, model_type="qwen3_moe")

    lay = Layout([], ["p"] * 2, False, False, ep=2)
    fit_model(lay, cfg(4))
    assert lay.ep == 2 and lay.notes == []
    lay = Layout([], ["p"] * 2, False, False, ep=2)
    fit_model(lay, cfg(0))  # a dense model: nothing to shard
    assert lay.ep == 1 and lay.notes == ["train ep=2 runs as ep=1: the model is dense (no experts)"]
    lay = Layout([], ["p"] * 6, False, False, ep=6)
    fit_model(lay, cfg(4))  # 6 does not divide 4 experts: the largest that divides both
    assert lay.ep == 2 and lay.notes == ["train ep=6 runs as ep=2: the model has 4 experts per layer"]
    lay = Layout([], ["p"] * 2, False, False, ep=2, sharding="zero3")
    with pytest.raises(InputError, match="train.ep.*sharding none"):
        fit_model(lay, cfg(4), "plan.yaml")


def test_tiny_moe_is_qwen3_moe_with_the_documented_architecture(tiny_moe_model):
    import json

    from problems.placement.catalog import model_presets
    from trainer.models.tiny import TINY_MOE_ARCH, resolve_model

    cfg = json.loads((tiny_moe_model / "config.json").read_text())
    assert cfg["architectures"] == ["Qwen3MoeForCausalLM"]
    # transformers 5 writes num_experts as num_local_experts (Qwen3MoeConfig.attribute_map); Qwen's own
    # config.json files say num_experts: a reader takes either
    cfg["num_experts"] = cfg.get("num_experts", cfg.get("num_local_experts"))
    assert {k: cfg[k] for k in TINY_MOE_ARCH} == TINY_MOE_ARCH
    assert resolve_model("tiny-moe") == tiny_moe_model  # built once, then read from the cache
    # the catalog preset the workload names is this model: its layers, experts and parameter count
    arch = model_presets()["tiny-moe"]
    got = (arch.layers, arch.hidden, arch.heads, arch.kv_heads, arch.vocab, arch.tied_embeddings, arch.max_context)
    assert got == (
        cfg["num_hidden_layers"], cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"],
        cfg["vocab_size"], cfg["tie_word_embeddings"], cfg["max_position_embeddings"])
    assert (arch.experts, arch.experts_per_token, arch.moe_ffn) == (
        cfg["num_experts"], cfg["num_experts_per_tok"], cfg["moe_intermediate_size"])
    import math

    from safetensors import safe_open

    with safe_open(str(tiny_moe_model / "model.safetensors"), "pt") as f:
        saved = sum(math.prod(f.get_slice(k).get_shape()) for k in f.keys())
    assert arch.params == saved  # the model's count of all experts, router and tied head
