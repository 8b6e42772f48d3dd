"""The learning-rate schedule the driver hands the workers each step."""

import math

import pytest

from trainer.driver import RunConfig, lr_at


def _cfg(schedule, lr=1e-3, final=0.1):
    return RunConfig(plan="p.yaml", lr=lr, lr_schedule=schedule, lr_final_ratio=final)


def test_constant_never_changes():
    cfg = _cfg("constant")
    assert {lr_at(cfg, s, 100) for s in (0, 50, 99, 500)} == {1e-3}


@pytest.mark.parametrize("schedule", ["cosine", "linear"])
def test_decay_starts_at_lr_ends_at_final_and_never_rises(schedule):
    cfg = _cfg(schedule)
    lrs = [lr_at(cfg, s, 50) for s in range(60)]
    assert lrs[0] == pytest.approx(1e-3)
    assert lrs[49] == pytest.approx(1e-4)
    assert lrs[59] == pytest.approx(1e-4)  # past the horizon it stays at the final rate
    assert all(b <= a + 1e-15 for a, b in zip(lrs, lrs[1:]))


def test_cosine_midpoint_and_linear_midpoint_differ_as_formulas_say():
    cos, lin = _cfg("cosine"), _cfg("linear")
    assert lr_at(lin, 50, 101) == pytest.approx(1e-3 + (1e-4 - 1e-3) * 0.5)
    assert lr_at(cos, 25, 101) == pytest.approx(1e-4 + 0.5 * 9e-4 * (1 + math.cos(math.pi * 0.25)))


def test_unknown_schedule_is_refused_with_the_key():
    from problems.errors import InputError
    from trainer.driver import Driver

    with pytest.raises(InputError, match="lr_schedule"):
        Driver(_cfg("step"), plan=object())


def test_warmup_ramps_linearly_then_the_decay_spans_the_rest():
    cfg = RunConfig(plan="p.yaml", lr=1e-3, lr_schedule="linear", lr_final_ratio=0.1, lr_warmup_steps=10)
    assert [lr_at(cfg, s, 110) for s in (0, 4, 9)] == pytest.approx([1e-4, 5e-4, 1e-3])
    assert lr_at(cfg, 10, 110) == pytest.approx(1e-3)
    assert lr_at(cfg, 109, 110) == pytest.approx(1e-4)
