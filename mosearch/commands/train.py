"""`mosearch train --plan P`: run RL post-training with the placement a plan describes."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("train", help="run GRPO/PPO training on Ray with vLLM rollouts, as a plan says",
                              description="Run distributed RL training (vLLM rollouts, PyTorch training on Ray) "
                                          "with the placement of a plan file.")
    p.add_argument("--plan", required=True, help="plan file written by `mosearch pick`")
    p.add_argument("--steps", type=int, default=20, help="training steps (default 20)")
    p.add_argument("--out", default=None, help="run directory (default runs/<plan_id>)")
    p.add_argument("--resume", action="store_true", help="continue from the last checkpoint in --out")
    p.add_argument("--emulate", action="store_true",
                   help="run a plan made for another cluster on this machine, scaled down (GPU types emulated)")
    p.add_argument("--model", default=None, help="'tiny' (built locally) or a local Hugging Face model directory (default: the plan's workload, else tiny)")
    p.add_argument("--task", default="arithmetic", help="arithmetic | sorting | counting | jsonl:PATH")
    p.add_argument("--reward", default=None, help="reward function module:function for a user task")
    p.add_argument("--algo", default=None, choices=["grpo", "ppo"])
    p.add_argument("--prompts-per-step", type=int, default=None)
    p.add_argument("--group-size", type=int, default=None, help="samples per prompt")
    p.add_argument("--max-new-tokens", type=int, default=None)
    p.add_argument("--lr", type=float, default=2e-4)
    p.add_argument("--lr-schedule", default="constant", choices=["constant", "cosine", "linear"],
                   help="decay the learning rate over the run to lr x --lr-final-ratio")
    p.add_argument("--lr-final-ratio", type=float, default=0.1)
    p.add_argument("--lr-warmup-steps", type=int, default=0, help="linear warm-up of the learning rate first")
    p.add_argument("--mini-batches", type=int, default=1,
                   help="optimizer updates per step, each on a slice of whole groups (PPO-style; > 1 trains on the "
                        "whole batch, without elastic pipelining)")
    p.add_argument("--kl-coef", type=float, default=0.0, help="> 0 adds KL to the initial model")
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--eval-every", type=int, default=5)
    p.add_argument("--eval-size", type=int, default=128)
    p.add_argument("--checkpoint-every", type=int, default=10)
    p.add_argument("--warm-start-steps", type=int, default=0, help="supervised steps on the task before RL (tiny demo)")
    p.add_argument("--backend", default="vllm", choices=["vllm", "hf"], help="rollout engine (hf: tests only)")
    p.add_argument("--sync-bucket-mb", type=float, default=512.0,
                   help="weight-sync bucket size in MiB (default 512, verl's default); bounds the extra memory")
    p.add_argument("--weight-sync", default="broadcast", choices=["broadcast", "object_store"],
                   help="broadcast along the plan's route (default), or the object-store path (noted in the summary)")
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from problems.placement.plan import load_plan
    from trainer.driver import RunConfig, comparison_table, workload_defaults
    from trainer.driver import run as train

    plan = load_plan(args.plan)
    # command line > the plan's workload file > RunConfig defaults
    given = {"model": args.model, "algo": args.algo, "prompts_per_step": args.prompts_per_step,
             "group_size": args.group_size, "max_new_tokens": args.max_new_tokens}
    shape = workload_defaults(plan, args.plan) | {k: v for k, v in given.items() if v is not None}
    cfg = RunConfig(
        plan=args.plan, out=args.out or f"runs/{plan.plan_id}", steps=args.steps, task=args.task,
        reward=args.reward, temperature=args.temperature, lr=args.lr, lr_schedule=args.lr_schedule,
        lr_final_ratio=args.lr_final_ratio, lr_warmup_steps=args.lr_warmup_steps,
        mini_batches=args.mini_batches, **shape,
        kl_coef=args.kl_coef, seed=args.seed, eval_every=args.eval_every, eval_size=args.eval_size,
        checkpoint_every=args.checkpoint_every, backend=args.backend, emulate=args.emulate, resume=args.resume,
        warm_start_steps=args.warm_start_steps, progress=not args.no_progress, sync_bucket_mb=args.sync_bucket_mb,
        weight_sync=args.weight_sync,
    )
    summary = train(cfg, log=lambda m: print(m, file=sys.stderr))
    sync_s = model_sync_s(summary, plan, args.plan)
    if sync_s is not None:  # the model's figure for what ran (engines, regions, bytes), beside the measurement
        summary.setdefault("predicted_run_layout", {})["sync_s"] = sync_s
        (Path(cfg.out) / "summary.json").write_text(json.dumps(summary, indent=1))
    print(f"{summary['status']}: {summary['steps']} steps, mode {summary['mode']}, "
          f"held-out reward {summary['reward_heldout_last']}; run in {cfg.out}")
    for note in summary["layout"].get("notes") or []:  # every way the run deviated from the plan
        print(f"note: {note}")
    print(f"{'figure':<24}{'predicted':>12}{'measured':>12}")
    for name, pred, meas in comparison_table(summary):
        print(f"{name:<24}{pred:>12}{meas:>12}")
    if sync_s is not None and "sync_s" in summary["measured"]:
        print(f"{'sync_s, this run layout':<24}{sync_s:>12.4g}{summary['measured']['sync_s']:>12.4g}"
              f"  (model for the {len(summary['layout']['weight_sync']['engine_regions'])} engine(s) and "
              f"{summary['layout']['weight_sync']['copy_bytes'] / 1e6:.3g} MB that ran)")
    return 130 if summary["status"] == "interrupted" else 0


def model_sync_s(summary: dict, plan, plan_file: str) -> float | None:
    """The performance model's weight-sync time for the layout the run had: its engines (regions, GPU
    types), the bytes of one copy it sent, the plan's route, on the plan's cluster. None when the run
    did not broadcast, was colocated (the model counts a reshard there) or the cluster file is not found."""
    from problems.placement.specs import load_cluster

    ws = summary.get("layout", {}).get("weight_sync") or {}
    if ws.get("path") != "broadcast" or not ws.get("copy_bytes") or summary.get("mode") == "colocated":
        return None
    for base in (Path.cwd(), Path(plan_file).resolve().parent):
        if (base / plan.cluster.path).is_file():
            cluster = load_cluster(base / plan.cluster.path)
            break
    else:
        return None
    if ws["sender_region"] not in cluster.regions or any(r not in cluster.regions for r in ws["engine_regions"]):
        return None
    return layout_sync_s(cluster, float(ws["copy_bytes"]), ws["engine_regions"], ws.get("engine_gpus") or [],
                         ws["sender_region"], ws["route"] == "staged")


def layout_sync_s(cluster, copy_bytes: float, engine_regions: list[str], engine_gpus: list[str],
                  sender_region: str, staged: bool) -> float:
    """The model's sync_s (problems/placement/model: the route over the cluster's links, then the
    engines' fitted load rate and fixed cost) for engines given one by one (one pseudo-pool each)."""
    from problems.placement.model.comm import engine_sync_s, sync_copies, weight_sync_s
    from problems.placement.model.params import DEFAULTS

    regions = cluster.regions
    P = len(engine_regions)
    engines = np.ones((1, P))
    eff = [DEFAULTS | cluster.efficiencies.get(g, {}) for g in (engine_gpus or [None] * P)]
    where = np.array([regions.index(r) for r in engine_regions])
    route, _, _ = weight_sync_s(copy_bytes, np.array([regions.index(sender_region)]), engines, where,
                                cluster.region_bw * 1e9, cluster.region_latency, cluster.region_egress / 1e9,
                                np.array([staged]), len(regions))
    copies = sync_copies(engines, where, np.array([staged]), len(regions))
    t = engine_sync_s(route, copy_bytes, engines, copies, np.array([e["sync_load_gbs"] for e in eff]),
                      np.array([e["sync_overhead_s"] for e in eff]))
    return float(t[0])
