"""Bad input `mosearch train` refuses in one line before any engine starts: a model vLLM's CPU
attention cannot run (head size 16: hidden 64 over 4 heads, what a first tiny config often has),
named by config.json's head_dim (it failed at the first decode step with vLLM's RuntimeError and a
traceback), and an --out that is a file."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from mosearch.cli import main

ROOT = Path(__file__).resolve().parents[2]


def _build(out: Path, hidden: int, heads: int) -> Path:
    spec = importlib.util.spec_from_file_location("own_model_build", ROOT / "docs/examples/own-model/build_model.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    mod.build(out)  # the docs' model (head_dim 64), then this test's attention shape
    import json

    cfg = json.loads((out / "config.json").read_text())
    cfg.update(hidden_size=hidden, num_attention_heads=heads, num_key_value_heads=heads, head_dim=None)
    (out / "config.json").write_text(json.dumps(cfg))
    return out


def test_head_size_vllm_cpu_cannot_run_is_one_line(tmp_path, capsys, monkeypatch):
    pytest.importorskip("vllm")
    import torch

    if torch.cuda.is_available():
        pytest.skip("the check is for vLLM's CPU attention")
    model = _build(tmp_path / "model", hidden=64, heads=4)
    monkeypatch.chdir(ROOT)
    code = main(["train", "--plan", "tests/trainer/data/local_plan.yaml", "--model", str(model), "--steps", "1",
                 "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err
    line = [x for x in err.splitlines() if x.startswith("mosearch:")]
    assert code == 2 and len(line) == 1 and "Traceback" not in err, err[-2000:]
    assert "head_dim: 16" in line[0] and str(model) in line[0] and "64" in line[0]


def test_supported_head_size_passes_the_check(tmp_path):
    from transformers import AutoConfig

    from problems.errors import InputError
    from trainer.rollout.vllm_engine import check_model

    pytest.importorskip("vllm")
    ok = AutoConfig.from_pretrained(_build(tmp_path / "ok", hidden=128, heads=2))
    check_model(ok, tmp_path / "ok", cuda=False)  # head 64: no error
    bad = AutoConfig.from_pretrained(_build(tmp_path / "bad", hidden=64, heads=4))
    check_model(bad, tmp_path / "bad", cuda=True)  # CUDA attention is not this check's
    with pytest.raises(InputError):
        check_model(bad, tmp_path / "bad", cuda=False)


def test_train_out_that_is_a_file_is_one_line_before_anything_starts(tmp_path, capsys, monkeypatch):
    """`train --out FILE` ended in FileExistsError with a traceback, after Ray and the engines had started."""
    a_file = tmp_path / "f.txt"
    a_file.write_text("x")
    monkeypatch.chdir(ROOT)
    for out in (a_file, a_file / "run"):
        code = main(["train", "--plan", "tests/trainer/data/local_plan.yaml", "--steps", "1", "--out", str(out)])
        err = capsys.readouterr().err
        line = [x for x in err.splitlines() if x.startswith("mosearch:")]
        assert code == 2 and len(line) == 1 and f"{a_file} is a file" in line[0], err[-1500:]
    assert a_file.read_text() == "x"
