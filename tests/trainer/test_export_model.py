"""`mosearch export-model` on its own: a one-file checkpoint becomes a Hugging Face directory with the
trainer's weights. The multi-file layouts: pipeline stages and ZeRO-3 shards merge to the trainer's
gathered state in test_parallel.py, TP 2 end to end in test_own_model.py."""

from __future__ import annotations

import pytest
import torch

from problems.errors import InputError
from tests.trainer.test_parallel import ALGO, _batch, _port
from trainer import checkpoint as ckpt
from trainer.export_model import export


def test_one_file_checkpoint_exports_the_trainers_model(tiny_model, tmp_path):
    from transformers import AutoModelForCausalLM

    from trainer.workers import TrainWorker

    w = TrainWorker(str(tiny_model), 0, 1, _port(), {**ALGO, "lr": 0.5}, 3)
    batch = _batch()
    w.accumulate(batch, len(batch), n_micro=2, last=True)
    w.apply()
    run = tmp_path / "run"
    stage = ckpt.staging_dir(run / "checkpoints", 1)
    w.save(str(stage / "state.pt"))
    ckpt.commit(run / "checkpoints", stage, 1, {"step": 1})
    info = export(run, tmp_path / "out", log=lambda m: None)
    assert info["files_merged"] == 1 and info["step"] == 1
    hf = AutoModelForCausalLM.from_pretrained(tmp_path / "out", dtype=torch.float32)
    base = AutoModelForCausalLM.from_pretrained(tiny_model, dtype=torch.float32)
    state, trained = hf.state_dict(), dict(w.state_items())
    assert all(torch.equal(state[k], v) for k, v in trained.items())  # the same tensors, bit for bit
    assert any(not torch.equal(base.state_dict()[k], v) for k, v in trained.items())
    assert (tmp_path / "out" / "tokenizer.json").is_file()
    # a second export replaces the first; a directory that is not an export is refused
    export(run, tmp_path / "out", step=1, log=lambda m: None)
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep")
    with pytest.raises(InputError, match="not an earlier export"):
        export(run, tmp_path / "mine", log=lambda m: None)
    with pytest.raises(InputError, match="no checkpoint of step 7"):
        export(run, tmp_path / "out", step=7, log=lambda m: None)
    # an --out that is a file, or under one: was NotADirectoryError
    (tmp_path / "f.txt").write_text("x")
    for out in (tmp_path / "f.txt", tmp_path / "f.txt" / "model"):
        with pytest.raises(InputError, match="is a file"):
            export(run, out, log=lambda m: None)
    assert (tmp_path / "f.txt").read_text() == "x"
