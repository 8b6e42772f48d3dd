"""What a run leaves in its directory: metrics.jsonl, checkpoints and summary.json.

- metrics: one row per step, appended and flushed; `rewind` makes the file end at a restored step
  (temp file + rename), moving later rows to metrics.superseded.jsonl.
- checkpoints (trainer/checkpoint.py does the atomic write and the verification): the ranks' state
  plus the driver's (step, version, prompt stream position before any batch drawn ahead, the step's
  metrics row).
- the summary: measured figures over the steady steps beside the plan's predictions, the layout
  that ran (and where each actor landed), versions and warnings.

The driver (trainer/driver.py) owns the state these read; recovery (trainer/recovery.py) restores it.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict
from pathlib import Path

import numpy as np

from trainer import checkpoint as ckpt
from trainer import expert_parallel as EP
from trainer import reshard


class Records:
    def __init__(self, driver):
        self.d = driver
        self.out = Path(driver.cfg.out)
        self._metrics_f = None

    # -- metrics ----------------------------------------------------------------------------------
    def open(self) -> None:
        self._metrics_f = open(self.out / "metrics.jsonl", "a")

    def close(self) -> None:
        if self._metrics_f is not None:
            self._metrics_f.close()

    def write(self, row: dict) -> None:
        self._metrics_f.write(json.dumps(row) + "\n")
        self._metrics_f.flush()
        self.d.loggers.log(row)  # TensorBoard, wandb (trainer/loggers.py)

    def fresh_run_dir(self) -> None:
        """A run without --resume owns its directory: old metrics and checkpoints would mix with its own."""
        old = ckpt.steps(self.out / "checkpoints")
        if old:
            self.d.log(f"note: starting afresh in {self.out}: removing {len(old)} old checkpoint(s) (use --resume to continue)")
            import shutil

            shutil.rmtree(self.out / "checkpoints", ignore_errors=True)
        for name in ("metrics.jsonl", "metrics.superseded.jsonl"):
            (self.out / name).unlink(missing_ok=True)

    def rewind(self, step: int, saved_row: dict | None, keep_eval: bool) -> None:
        """Make metrics.jsonl end at `step` (atomically: temp file + rename). Rows of steps after it
        were trained by a run that is being redone: they move to metrics.superseded.jsonl. A row the
        kill cut off (or that was never written after its checkpoint) comes back from the checkpoint."""
        path = self.out / "metrics.jsonl"
        keep, gone = [], []
        if path.is_file():
            for line in path.read_text().splitlines():
                try:
                    r = json.loads(line)
                except json.JSONDecodeError:  # a line torn by the kill
                    continue
                (keep if r.get("step", 0) <= (step if keep_eval else -1) else gone).append(r)
        if saved_row and not any(r.get("step") == step and not r.get("eval_only") for r in keep):
            keep.append(saved_row)
        if self._metrics_f is not None and not self._metrics_f.closed:
            self._metrics_f.close()
        tmp = path.with_suffix(".jsonl.tmp")
        tmp.write_text("".join(json.dumps(r) + "\n" for r in keep))
        os.replace(tmp, path)
        if gone:
            with open(self.out / "metrics.superseded.jsonl", "a") as f:
                f.writelines(json.dumps({**r, "superseded_by_restore_to": step}) + "\n" for r in gone)
        if self._metrics_f is not None:
            self._metrics_f = open(path, "a")
        self.d.history = [r for r in self.d.history if r.get("step", 0) <= step]

    # -- checkpoints ------------------------------------------------------------------------------
    def save_checkpoint(self, row: dict | None = None) -> Path:
        """Ranks' state + the driver's (step, version, prompt stream position, this step's metrics row)."""
        d = self.d
        root = self.out / "checkpoints"
        tmp = ckpt.staging_dir(root, d.step)
        d.train.run("save", str(tmp / "state.pt"))
        if d.cfg.on_node_loss == "replan":  # a re-planned layout may not read the ranks' own files
            d.train.run_each(reshard.save_weights, str(tmp / reshard.WEIGHTS))
        d.recovery.inject("checkpoint", d.step)  # test hook: the ranks' state is staged, not yet committed
        # async: later batches may already be drawn; the checkpoint holds the stream before them
        sampler, draws = d.cursor.get(d.step, (d.sampler.state(), d.draws))
        d.cursor = {k: v for k, v in d.cursor.items() if k >= d.step}
        state = {"step": d.step, "version": d.version, "draws": draws, "sampler": sampler,
                 "config": asdict(d.cfg), "plan_id": d.plan.plan_id, "layout": reshard.layout_key(d.layout),
                 "row": row}
        path = ckpt.commit(root, tmp, d.step, state)
        ckpt.prune(root)
        return path

    # -- the summary ------------------------------------------------------------------------------
    def summary(self) -> dict:
        d = self.d
        rows = [r for r in d.history if "time" in r and r["step"] > d.since_step]  # the plan running now
        steady = rows[1:] or rows  # the first step carries engine warm-up
        busy = sum(r["time"]["wall"] - r["time"]["eval"] - r["time"]["checkpoint"] for r in steady)
        measured = {}
        if steady and busy > 0:
            measured = {
                "throughput_samples_s": sum(r["samples"] for r in steady) / busy,
                "throughput_tokens_s": sum(r["gen_tokens"] + r["prompt_tokens"] for r in steady) / busy,
                "gen_tokens_s": sum(r["gen_tokens"] for r in steady) / busy,
                "staleness": float(np.mean([r["staleness_mean"] for r in steady])),
                "step_s": busy / len(steady),
                "rollout_s": float(np.mean([r["time"]["rollout"] for r in steady])),
                "train_s": float(np.mean([r["time"]["train"] for r in steady])),
                "sync_s": float(np.mean([r["time"]["weight_sync"] for r in steady])),
                "switch_s": float(np.mean([r["time"]["switch"] for r in steady])),
                "decode_tokens_s": sum(r["gen_tokens"] for r in steady) / max(1e-9, sum(r["busy"]["rollout_gen_s"] for r in steady)),
                "peak_rss_gb": max(max(v for k, v in r["memory"].items() if k.endswith("rss_gb")) for r in steady),
                "prompt_tokens_mean": sum(r["prompt_tokens"] for r in steady) / max(1, sum(r["samples"] for r in steady)),
                "response_tokens_mean": sum(r["gen_tokens"] for r in steady) / max(1, sum(r["samples"] for r in steady)),
                "response_tokens_max": max(r.get("response_max", 0) for r in steady),
                "rollout_gen_s": float(np.mean([r["busy"].get("rollout_gen_wall_s", 0.0) for r in steady])),
            }
            for key in ("train_gpu_gb", "train_gpu_reserved_gb", "train_rss_gb"):
                seen = [r["memory"][key] for r in steady if key in r["memory"]]
                if seen:
                    measured[f"peak_{key}"] = max(seen)
            split = [r["sync"] for r in steady if r.get("sync", {}).get("path") == "broadcast"]
            for k in ("gather_s", "transfer_s", "load_s") if split else ():
                measured[f"sync_{k}"] = float(np.mean([x[k] for x in split]))
        layout, r = self.layout_summary(), d.rollout
        fallbacks = r.fallbacks if r else 0
        if fallbacks:
            layout["notes"] = [*layout["notes"], f"weight sync: the broadcast failed twice in {fallbacks} "
                               "sync(s); the object store carried those versions"]
        layout["weight_sync"] = {"path": r.sync_path if r else None, "route": r.sync_route if r else None,
                                 "bucket_bytes": int(d.cfg.sync_bucket_mb * 2**20), "fallbacks": fallbacks,
                                 "copy_bytes": r.last_sync.get("copy_bytes") if r else None,
                                 "transport": r.last_sync.get("transport") if r else None,
                                 **(r.sync_regions if r else {})}
        held = [r["reward_heldout"] for r in rows if "reward_heldout" in r]
        out = {
            "status": d.status, "plan_id": d.plan.plan_id, "mode": d.mode, "steps": d.step,
            "layout": layout,
            "run": {k: getattr(d.cfg, k) for k in ("model", "algo", "prompts_per_step", "group_size", "mini_batches",
                                                   "kl_coef")}
                   | {"max_new_tokens": d.task.max_new_tokens},
            "measured": measured, "predicted": dict(d.plan.predicted),
            "versions": d.versions, "warnings": list(d.warnings),
            "reward_heldout_last": held[-1] if held else None,
        }
        if d.nodes_lost:  # survived: replaced, or re-planned (then measured from the new plan's first step)
            out["nodes_lost"] = list(d.nodes_lost)
            out["measured_from_step"] = d.since_step + 1
            out["plan_file"] = str(d.plan_file)
        if d.stopped:
            out["stopped"] = d.stopped
        self.out.mkdir(parents=True, exist_ok=True)
        (self.out / "summary.json").write_text(json.dumps(out, indent=1))
        return out

    def layout_summary(self) -> dict:
        """The layout that ran: engines, dp x tp x pp, sharding, layers per pipeline stage and the
        model parameters each training rank held (after TP/PP cutting and sharding)."""
        d = self.d
        lay = d.layout
        info = sorted(d.rank_info, key=lambda x: x["rank"])
        stages: dict[int, list[int]] = {i["pp_idx"]: i["layers"] for i in info}
        return {"engines": len(d.engines), "dp": lay.dp if lay else 0, "tp": lay.tp if lay else 0,
                "pp": lay.pp if lay else 0, "ep": lay.ep if lay else 0, "sharding": lay.sharding if lay else None,
                # routed experts per MoE layer (0: dense)
                "experts": EP.num_experts(d._config()) if getattr(d, "model_path", None) else 0,
                "stages": [b - a for a, b in (stages[k] for k in sorted(stages))],
                "params_per_rank": [i["params"] for i in info],
                "engine_tp": d.engine_tp,  # as each engine reports it
                "device": "cuda" if d.found.cuda else "cpu",  # what the work ran on
                "precision": d.train_precision,  # what the training ranks ran in
                "emulated": bool(lay and lay.emulated), "notes": lay.notes if lay else [],
                "placed": d.placed,
                # where the training ranks met: rank 0's node address (multi-rank layouts)
                "rendezvous": d.train.rendezvous[0] if d.train and d.train.rendezvous and lay and lay.world > 1 else None}
