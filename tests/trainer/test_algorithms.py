"""Losses against values computed by hand."""

import math

import pytest
import torch

from trainer import algorithms as A


def test_grpo_advantages_hand_computed():
    # group 1: rewards 1,0,0,1 -> mean .5, unbiased std sqrt(1/3); group 2: all equal -> 0
    adv = A.grpo_advantages(torch.tensor([1.0, 0, 0, 1, 2, 2, 2, 2]), group_size=4, eps=0.0)
    s = math.sqrt(1 / 3)
    assert adv[:4].tolist() == pytest.approx([0.5 / s, -0.5 / s, -0.5 / s, 0.5 / s])
    assert torch.isnan(adv[4:]).all()  # eps=0 on a zero-std group: the caller's eps is what saves it
    adv = A.grpo_advantages(torch.tensor([2.0, 2, 2, 2]), group_size=4)
    assert adv.abs().max().item() == 0.0


def test_policy_loss_clipped_ratio():
    logp = torch.tensor([[math.log(1.5), math.log(0.5)]])
    old = torch.zeros(1, 2)
    mask = torch.ones(1, 2)
    # A = +1: token 1 ratio 1.5 clipped to 1.2 -> 1.2; token 2 ratio .5 -> min(.5, .8) = .5
    loss, stats = A.policy_loss(logp, old, torch.tensor([1.0]), mask, clip_eps=0.2)
    assert loss.item() == pytest.approx(-(1.2 + 0.5))
    assert stats["clip_frac"] == pytest.approx(1.0)
    # A = -1: min(-1.5, -1.2) = -1.5; min(-.5, -.8) = -.8
    loss, _ = A.policy_loss(logp, old, torch.tensor([-1.0]), mask, clip_eps=0.2)
    assert loss.item() == pytest.approx(1.5 + 0.8)


def test_policy_loss_weights_and_gradient_on_policy():
    logp = torch.tensor([[-1.0, -2.0, -3.0]], requires_grad=True)
    w = torch.tensor([[0.5, 0.5, 0.0]])  # a 2-token sequence mean; third position is padding
    loss, _ = A.policy_loss(logp, logp.detach(), torch.tensor([2.0]), w)
    assert loss.item() == pytest.approx(-2.0)  # ratio 1: -(.5*2 + .5*2)
    loss.backward()
    assert logp.grad[0].tolist() == pytest.approx([-1.0, -1.0, 0.0])  # d/dlogp of -w*A*ratio


def test_decoupled_objective_weights_by_prox_over_behav():
    prox = torch.tensor([[-1.0, -1.0]])
    behav = torch.tensor([[-1.0 - math.log(2), -1.0 + math.log(4)]])  # pi_prox/pi_behav = 2 and 1/4
    logp = prox.clone()
    loss, stats = A.policy_loss(logp, prox, torch.tensor([1.0]), torch.ones(1, 2), behav_logp=behav)
    assert loss.item() == pytest.approx(-(2.0 + 0.25))
    assert stats["behav_weight"] == pytest.approx(1.125)
    capped, _ = A.policy_loss(logp, prox, torch.tensor([1.0]), torch.ones(1, 2), behav_logp=behav, behav_cap=1.0)
    assert capped.item() == pytest.approx(-(1.0 + 0.25))


def test_kl_k3():
    logp = torch.tensor([[math.log(0.5)]])
    ref = torch.tensor([[math.log(0.25)]])
    d = math.log(0.5)  # ref - logp
    assert A.kl_k3(logp, ref, torch.ones(1, 1)).item() == pytest.approx(math.exp(d) - d - 1)
    assert A.kl_k3(logp, logp, torch.ones(1, 1)).item() == 0.0


def test_gae_hand_computed():
    # one sequence, 3 response tokens at positions 1..3 of 4, reward 1 at the end, gamma 1, lambda .5
    mask = torch.tensor([[0.0, 1, 1, 1]])
    values = torch.tensor([[0.0, 0.2, 0.4, 0.6]]) * mask
    r = A.terminal_rewards(torch.tensor([1.0]), mask)
    assert r.tolist() == [[0, 0, 0, 1]]
    adv, ret = A.gae(r, values, mask, gamma=1.0, lam=0.5)
    d3 = 1 - 0.6
    d2 = 0.6 - 0.4
    d1 = 0.4 - 0.2
    a3, a2 = d3, d2 + 0.5 * d3
    a1 = d1 + 0.5 * a2
    assert adv[0].tolist() == pytest.approx([0.0, a1, a2, a3])
    assert ret[0].tolist() == pytest.approx([0.0, a1 + 0.2, a2 + 0.4, a3 + 0.6])


def test_value_loss_clipped():
    v, old, ret = torch.tensor([[1.0]]), torch.tensor([[0.0]]), torch.tensor([[2.0]])
    # unclipped (1-2)^2 = 1, clipped V = .2: (.2-2)^2 = 3.24 -> max 3.24 * .5
    assert A.value_loss(v, old, ret, torch.ones(1, 1), clip=0.2).item() == pytest.approx(1.62)


def test_advantages_stay_on_the_batch_device():
    """GAE and the terminal rewards build no tensor on the CPU: on a GPU a CPU tensor beside the batch's
    stops PPO's first step (it did, on an H200). The meta device refuses the same mix on any machine."""
    mask = torch.ones(2, 5, device="meta")
    rewards = A.terminal_rewards(torch.ones(2, device="meta"), mask)
    adv, ret = A.gae(rewards, torch.zeros(2, 5, device="meta"), mask)
    assert rewards.device.type == adv.device.type == ret.device.type == "meta"


@pytest.mark.parametrize("requested,device,runs,noted", [
    ("bf16", "cpu", "fp32", True), ("fp32", "cpu", "fp32", False), ("bf16", "cuda", "bf16", False),
    ("tf32", "cuda", "tf32", False), ("fp32", "cuda", "fp32", False), ("fp16", "cuda", "bf16", True),
    ("fp8", "cuda", "bf16", True)])
def test_training_precision_for_the_workloads(requested, device, runs, noted):
    from trainer.workers import run_precision

    got, note = run_precision(requested, device)
    assert got == runs
    assert (note is not None) == noted and (note is None or requested in note)
