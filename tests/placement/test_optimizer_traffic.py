"""The optimizer step's HBM traffic the model charges (`model/training.py` ADAMW_FOREACH_BYTES, GRAD_CLIP_BYTES)
against the bytes PyTorch's own AdamW and clip_grad_norm_ move: every aten operation they dispatch is recorded
with the tensors it reads and writes."""

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from problems.placement.model.training import ADAMW_FOREACH_BYTES, GRAD_CLIP_BYTES


class _Traffic(TorchDispatchMode):
    """Bytes of the tensors each dispatched operation takes (read) and mutates or returns (written);
    scalars (one element: the step counter) are not per-parameter traffic."""

    def __init__(self):
        super().__init__()
        self.read = self.written = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        schema = func._schema
        values = list(args) + [kwargs.get(a.name) for a in schema.arguments[len(args):]]
        mutates = False
        for arg, value in zip(schema.arguments, values):
            b = _bytes(value)
            self.read += b
            if arg.alias_info is not None and arg.alias_info.is_write:
                self.written += b
                mutates = True
        if not mutates:
            self.written += _bytes(out)
        return out


def _bytes(value) -> int:
    return sum(t.numel() * t.element_size() for t in tree_flatten(value)[0]
               if isinstance(t, torch.Tensor) and t.numel() > 1)


def _params(n: int = 3):
    torch.manual_seed(0)
    return [torch.nn.Parameter(torch.randn(256, 64)) for _ in range(n)]


def _step_traffic(**kw) -> float:
    ps = _params()
    opt = torch.optim.AdamW(ps, lr=1e-3, weight_decay=0.01, **kw)
    for _ in range(2):  # the second step: moments exist, as in every step after the first
        for p in ps:
            p.grad = torch.randn_like(p)
        t = _Traffic()
        with t:
            opt.step()
    return (t.read + t.written) / sum(p.numel() for p in ps)


def test_adamw_foreach_moves_the_bytes_the_model_charges():
    assert _step_traffic(foreach=True) == pytest.approx(ADAMW_FOREACH_BYTES, abs=0.01)


def test_fused_adamw_moves_what_the_fused_charge_assumes():
    # one kernel: weight, gradient, both moments read; weight, moments (and the gradient, which the fused
    # kernel's schema marks mutable) written: 32 bytes, the model's 2 x (4 + 4 + 8) for fp32 states
    assert _step_traffic(fused=True) == pytest.approx(2.0 * (4 + 4 + 8), abs=0.01)


def test_gradient_clipping_moves_the_bytes_the_model_charges():
    ps = _params()
    for p in ps:
        p.grad = torch.randn_like(p)
    t = _Traffic()
    with t:
        torch.nn.utils.clip_grad_norm_(ps, 1.0, foreach=True)
    # (the per-tensor norms, a few bytes per tensor, fall under the tolerance)
    assert (t.read + t.written) / sum(p.numel() for p in ps) == pytest.approx(GRAD_CLIP_BYTES, abs=0.01)
