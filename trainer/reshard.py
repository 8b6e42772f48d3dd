"""Carrying a checkpoint to another training layout (after a re-plan: other dp, tp, pp or sharding).

A checkpoint's `state.pt` is the ranks' own state: rank 0's file holds the whole model and optimizer
only when no rank cuts or shards anything (tp = pp = 1, no ZeRO/FSDP with dp > 1); then any such
layout loads it, whatever its dp. Otherwise a run that may re-plan (`--on-node-loss replan`) also
writes `weights.pt`, the full model in Hugging Face names (the ranks gather it as for a weight sync),
and a new layout loads its own cut or shard of each tensor from it; its optimizer state starts
afresh (said in the run's notes).

The two functions run inside the training actors (`actor.__ray_call__`), on every rank together.
"""

from __future__ import annotations

import os

WEIGHTS = "weights.pt"


def layout_key(layout) -> dict:
    return {"dp": layout.dp, "tp": layout.tp, "pp": layout.pp, "ep": layout.ep, "sharding": layout.sharding}


def _whole(key: dict) -> bool:
    """Rank 0's state file holds the whole model and optimizer state."""
    return (key["tp"] == 1 and key["pp"] == 1 and key.get("ep", 1) == 1
            and (key["sharding"] == "none" or key["dp"] == 1))


def loads_directly(saved: dict, now: dict) -> bool:
    """The ranks of layout `now` can load the state files a layout `saved` wrote."""
    same = {"ep": 1, **saved} == {"ep": 1, **now}  # a checkpoint written before EP existed: ep 1
    return same or (_whole(saved) and _whole(now))


def save_weights(worker, path: str) -> None:
    """Rank 0 writes the full model (HF names), gathered by every rank together."""
    import torch

    items = worker.state_items()
    if worker.rank == 0:
        tmp = path + ".tmp"
        torch.save({k: v for k, v in items}, tmp)
        os.replace(tmp, path)


def load_weights(worker, path: str) -> int:
    """Each rank copies its part of every tensor it holds from the full model at `path`: a plain
    tensor whole, a DTensor (TP, FSDP) by its placements, an EP rank's experts as their slice.
    Returns the tensors loaded."""
    import torch
    from torch.distributed.tensor import DTensor, distribute_tensor

    full = torch.load(path, map_location="cpu", weights_only=True)
    held = worker.model.state_dict()
    with torch.no_grad():
        for local, hf in worker._names.items():
            t = held[local]
            src = full[hf].to(device=worker.device, dtype=t.dtype)
            if local in worker.expert_names:  # EP: this rank's experts, a slice along the expert axis
                n = t.shape[0]
                src = src[worker.epg.ep_idx * n:(worker.epg.ep_idx + 1) * n]
            if isinstance(t, DTensor):
                t.copy_(distribute_tensor(src, t.device_mesh, t.placements))
            else:
                t.copy_(src)
    return len(worker._names)
