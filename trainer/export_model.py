"""A run's trained model out as a Hugging Face directory: `mosearch export-model RUN [--step N] --out DIR`.

A checkpoint holds each rank's state as the layout left it (trainer/workers.py `save`): one file when
every rank holds the whole model, else one per rank (TP shards, pipeline stages, FSDP/ZeRO-3 shards, as
DTensors; an expert-parallel rank's share of the experts), with `layout.json` naming the layout and the
base model. A single file is read directly; several are merged by the trainer's own code: the layout's
ranks start again as plain processes over gloo (no Ray, on CPU), each loads its file, and they gather
the full state in Hugging Face naming as a weight sync does (`iter_full_state`). The directory written
has the weights as safetensors (fp32, as trained), config.json, generation_config.json and the base
model's tokenizer files, so `from_pretrained` and vLLM load it. A PPO run's critic (a value head) is not
part of it.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from problems.errors import InputError
from problems.placement.names import params_sharded_by
from trainer import checkpoint as ckpt

WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf")
MARKER = "mosearch_export.json"


def find_checkpoint(run: Path, step: int | None) -> tuple[Path, dict]:
    """The checkpoint directory (newest valid one, or step `step`) of run directory `run`, verified."""
    run = Path(run)
    if (run / "manifest.json").is_file():  # a checkpoint directory itself
        return run, ckpt.verify(run)
    root = run / "checkpoints"
    have = ckpt.steps(root)
    if not have:
        raise InputError(str(run), None, "no checkpoints in this run directory",
                         "the --out directory of a `mosearch train` run with --checkpoint-every > 0")
    if step is None:
        path, state = ckpt.load_newest_valid(root, warn=lambda m: None)
        return path, state
    path = dict(have).get(step)
    if path is None:
        raise InputError(str(root), "--step", f"no checkpoint of step {step}",
                         f"one of {', '.join(str(s) for s, _ in sorted(have))}")
    return path, ckpt.verify(path)


def read_layout(path: Path) -> dict:
    f = path / "layout.json"
    if not f.is_file():
        raise InputError(str(path), "layout.json", "missing: the checkpoint was written before model export existed",
                         "a checkpoint written by this version of `mosearch train`")
    return json.loads(f.read_text())


def _rank(rank: int, port: int, layout: dict, state_file: str, out_file: str) -> None:
    """One rank of the checkpoint's layout: load its file, join the gather, rank 0 saves the full state."""
    import torch

    torch.set_num_threads(1)
    from trainer.workers import TrainWorker

    algo = dict(layout["algo"], kl_coef=0.0)  # the reference model is not in a checkpoint
    w = TrainWorker(layout["model_path"], rank, layout["world"], port, algo, layout["micro_batch"], layout["sharding"],
                    pad_id=layout["pad_id"], tp=layout["tp"], pp=layout["pp"], ep=layout.get("ep", 1))
    w.load(state_file)
    items = w.state_items()
    if rank == 0:
        torch.save(dict(items), out_file)
    w.shutdown()


def merged_state(path: Path, layout: dict, work: Path) -> dict:
    """The full model state dict (HF naming) of checkpoint `path`."""
    import torch

    state_file = path / "state.pt"
    whole = (layout["tp"] == layout["pp"] == layout.get("ep", 1) == 1
             and not params_sharded_by(layout["sharding"], layout["world"]))
    if layout["files"] == 1 or whole:  # rank 0 holds every weight (ZeRO-1/2 shard only the optimizer)
        return torch.load(state_file, map_location="cpu", weights_only=True)["model"]
    missing = [r for r in range(1, layout["world"]) if not (path / f"state.rank{r}.pt").is_file()]
    if missing:
        raise InputError(str(path), f"state.rank{missing[0]}.pt", "missing", f"one state file per rank ({layout['world']})")
    import torch.multiprocessing as mp

    out_file = work / "full_state.pt"
    ctx = mp.get_context("spawn")
    from trainer.weight_sync import free_port  # torch, only when a checkpoint is exported

    port = free_port()
    old = os.environ.get("CUDA_VISIBLE_DEVICES")
    os.environ["CUDA_VISIBLE_DEVICES"] = ""  # every rank on the CPU over gloo, whatever the run had
    try:
        procs = [ctx.Process(target=_rank, args=(r, port, layout, str(state_file), str(out_file)))
                 for r in range(layout["world"])]
        for p in procs:
            p.start()
        for p in procs:
            p.join(3600)
    finally:
        if old is None:
            os.environ.pop("CUDA_VISIBLE_DEVICES", None)
        else:
            os.environ["CUDA_VISIBLE_DEVICES"] = old
    codes = [p.exitcode for p in procs]
    for p in procs:
        if p.exitcode is None:
            p.kill()
    if codes != [0] * len(procs) or not out_file.is_file():
        raise RuntimeError(f"merging the {layout['world']} ranks' files failed (exit codes {codes})")
    return torch.load(out_file, map_location="cpu", weights_only=True)


def export(run: str | Path, out: str | Path, step: int | None = None, log=print) -> dict:
    """Write checkpoint `step` (default: the newest valid) of `run` as a Hugging Face directory `out`."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, GenerationConfig
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    path, driver_state = find_checkpoint(Path(run), step)
    layout = read_layout(path)
    base = Path(layout["model_path"])
    if not (base / "config.json").is_file():
        raise InputError(str(path / "layout.json"), "model_path", f"base model {base} is gone",
                         "the model directory the run trained (its config and tokenizer are exported with the weights)")
    out = Path(out)
    first = next((d for d in (out, *out.parents) if d.exists()), None)
    if first is not None and not first.is_dir():  # iterdir / mkdir would raise NotADirectoryError
        raise InputError(str(out), None, f"{first} is a file", "a new directory")
    if out.exists() and any(out.iterdir()) and not (out / MARKER).is_file():
        raise InputError(str(out), None, "exists and is not an earlier export", "a new directory")
    tmp = out.with_name(out.name + f".tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        state = merged_state(path, layout, tmp)
        (tmp / "full_state.pt").unlink(missing_ok=True)
        config = AutoConfig.from_pretrained(base)
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
        missing, unexpected = model.load_state_dict(state, strict=False)
        if missing or unexpected:
            raise RuntimeError(f"the checkpoint's tensors do not match {base.name}'s: missing {missing[:3]}, "
                               f"unexpected {unexpected[:3]}")
        if (base / "generation_config.json").is_file():
            model.generation_config = GenerationConfig.from_pretrained(base)
        model.save_pretrained(tmp, safe_serialization=True)
        written = {p.name for p in tmp.iterdir()}
        for f in base.iterdir():  # the tokenizer (and chat template) files, unchanged
            if f.is_file() and f.name not in written and not f.name.endswith(WEIGHT_SUFFIXES + (".index.json",)):
                shutil.copy2(f, tmp / f.name)
        info = {"run": str(run), "step": driver_state.get("step"), "checkpoint": str(path), "base_model": str(base),
                "layout": {k: layout.get(k, 1) for k in ("world", "tp", "pp", "ep", "sharding")},
                "files_merged": layout["files"],
                "parameters": sum(p.numel() for p in model.parameters()), "dtype": "float32"}
        (tmp / MARKER).write_text(json.dumps(info, indent=1))
        if out.exists():
            shutil.rmtree(out)
        os.replace(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    lay = info["layout"]
    dp = lay["world"] // (lay["tp"] * lay["pp"])
    log(f"exported step {info['step']} of {run} (dp={dp} tp={lay['tp']} pp={lay['pp']}"
        + (f" ep={lay['ep']}" if lay["ep"] > 1 else "") + f" sharding={lay['sharding']}; "
        + (f"merged from {info['files_merged']} rank files" if info["files_merged"] > 1 else "one state file")
        + f") to {out}: model.safetensors ({info['parameters']:,} parameters, fp32), config.json, "
        f"generation_config.json, tokenizer of {base.name}" + ("; the critic's value head is not exported"
                                                               if layout["algo"].get("name") == "ppo" else ""))
    return info
