"""`mosearch train --plan P`: run RL post-training with the placement a plan describes."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from problems.errors import InputError
from problems.placement.names import ASYNC


# the KL coefficient a workload's `kl_reference` trains with unless --kl-coef gives one: verl's default
# actor_rollout_ref.actor.kl_loss_coef (ppo_trainer.yaml)
WORKLOAD_KL_COEF = 0.001


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
    p.add_argument("--task", default="arithmetic",
                   help="arithmetic | sorting | counting, or data: PATH.jsonl, PATH.parquet, a datasets directory "
                        "(TRL's or verl's columns; docs/training.md)")
    p.add_argument("--reward", action="append", default=None,
                   help="reward function: module:function or path/to/file.py[:function] (TRL's, verl's or "
                        "f(prompt, completion, answer) signature); repeat for several (default: exact match)")
    p.add_argument("--reward-weights", default=None, help="comma-separated weights, one per --reward (default 1 each)")
    p.add_argument("--reward-errors", default="raise", choices=["raise", "skip"],
                   help="a reward that raises stops the run (raise) or its score is left out and counted (skip)")
    p.add_argument("--no-chat-template", action="store_true",
                   help="send chat-message prompts as their text instead of through the tokenizer's chat template")
    p.add_argument("--logger", default="jsonl", help="comma list of jsonl (always), tensorboard, wandb (offline)")
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
    p.add_argument("--kl-coef", type=float, default=None,
                   help="> 0 adds KL to the initial model (default: %g when the workload names a kl_reference, as "
                        "verl's kl_loss_coef; else 0)" % WORKLOAD_KL_COEF)
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
    p.add_argument("--on-node-loss", default="replace", choices=["replace", "replan", "stop"],
                   help="when a Ray node is lost: replace (default) re-places its engines and ranks on the surviving "
                        "nodes where the plan's GPU types still fit; replan runs the planner on the surviving cluster "
                        "(same workload, limits and pick rule) and continues with the new plan, resharded from the last "
                        "checkpoint; stop ends with one line giving the resume command (exit 3). Replace or replan "
                        "that cannot go on stop the same way")
    p.add_argument("--replan-evals", type=int, default=None,
                   help="evaluations of a re-plan's search (default 3000)")
    p.add_argument("--no-progress", action="store_true")
    from mosearch.commands.profile import add_profile_flag

    add_profile_flag(p)
    p.set_defaults(func=run)
    global _PARSER
    _PARSER = p


_PARSER = None
EXIT_STOPPED = 3  # a node was lost and the run stopped (--on-node-loss, or no way to go on): resumable


def resume_command(args: argparse.Namespace, out: str) -> str:
    """The command line that continues this run: its own flags (those not at their defaults), --out
    and --resume."""
    import shlex

    words = ["mosearch", "train"]
    for a in _PARSER._actions:
        if not a.option_strings or a.dest in ("help", "out", "resume"):
            continue
        v = getattr(args, a.dest, None)
        if v == a.default or v is None:
            continue
        flag = a.option_strings[0]
        if v is True:
            words.append(flag)
        else:  # an appended flag (--reward) once per value
            words += [x for item in (v if isinstance(v, list) else [v]) for x in (flag, str(item))]
    return " ".join(shlex.quote(w) for w in [*words, "--out", out, "--resume"])


def run(args: argparse.Namespace) -> int:
    from mosearch.commands.profile import follow_machine

    follow_machine(args)
    from problems.placement.planfiles import PlanInputs
    from problems.placement.plancheck import check_plan
    from trainer.driver import RunConfig
    from trainer.driver import run as train

    inputs = PlanInputs.load(args.plan)  # the plan and the specs it names, each read once
    plan = inputs.plan
    # the workload is needed: TP must shard its model's heads (one line, exit 2) before any process starts
    check_plan(plan, inputs.workload(), None, str(args.plan))
    if args.emulate:
        print(emulation_line(plan, args.plan), file=sys.stderr)
    # command line > the plan's workload file > RunConfig defaults
    given = {"model": args.model, "algo": args.algo, "prompts_per_step": args.prompts_per_step,
             "group_size": args.group_size, "max_new_tokens": args.max_new_tokens, "kl_coef": args.kl_coef}
    from_workload = workload_defaults(inputs.workload())
    shape = from_workload | {k: v for k, v in given.items() if v is not None}
    shape["model_from"] = ("--model" if args.model else f"the workload {inputs.workload().path}"
                           if "model" in from_workload else "the default")
    cfg = RunConfig(
        plan=args.plan, out=args.out or f"runs/{plan.plan_id}", steps=args.steps, task=args.task,
        reward=args.reward, temperature=args.temperature, lr=args.lr, lr_schedule=args.lr_schedule,
        lr_final_ratio=args.lr_final_ratio, lr_warmup_steps=args.lr_warmup_steps,
        mini_batches=args.mini_batches, **shape,
        seed=args.seed, eval_every=args.eval_every, eval_size=args.eval_size,
        checkpoint_every=args.checkpoint_every, backend=args.backend, emulate=args.emulate, resume=args.resume,
        warm_start_steps=args.warm_start_steps, progress=not args.no_progress, sync_bucket_mb=args.sync_bucket_mb,
        weight_sync=args.weight_sync, reward_weights=_weights(args.reward_weights), reward_errors=args.reward_errors,
        chat_template=not args.no_chat_template, loggers=args.logger, on_node_loss=args.on_node_loss,
    )
    log = lambda m: print(m, file=sys.stderr)  # noqa: E731
    replan = None
    if args.on_node_loss == "replan":
        from mosearch.replan import REPLAN_EVALS, replanner

        replan = replanner(inputs, cfg.out, args.replan_evals or REPLAN_EVALS, log)
    summary = train(cfg, log=log, plan=plan, replan=replan)
    if summary["status"] == "stopped":
        print(f"mosearch: {summary['stopped']}; stopped at step {summary['steps']}, resume with: "
              f"{resume_command(args, cfg.out)}", file=sys.stderr)
        return EXIT_STOPPED
    if summary.get("plan_file") and summary["plan_file"] != str(args.plan):  # re-planned: compare with what ran last
        inputs = PlanInputs.load(summary["plan_file"])
        plan = inputs.plan
    sync_s = model_sync_s(summary, inputs) if unpredicted_moe(summary, inputs) is None else None
    if sync_s is not None:  # the model's figure for what ran (engines, regions, bytes), beside the measurement
        summary.setdefault("predicted_run_layout", {})["sync_s"] = sync_s
        (Path(cfg.out) / "summary.json").write_text(json.dumps(summary, indent=1))
    print(f"{summary['status']}: {summary['steps']} steps, mode {summary['mode']}, "
          f"held-out reward {summary['reward_heldout_last']}; run in {cfg.out}")
    lay = summary["layout"]
    etp = sorted(set(lay.get("engine_tp") or []))
    print(f"layout: {lay['engines']} engines" + (f" (rollout TP {'/'.join(map(str, etp))})" if etp else "")
          + f"; train dp={lay['dp']} tp={lay['tp']} pp={lay['pp']} "
          + (f"ep={lay['ep']} ({lay['experts']} experts per layer) " if lay.get("experts") else "")
          + f"sharding={lay['sharding']}, layers per stage {lay['stages']}, parameters per rank {lay['params_per_rank']}")
    for line in [f"note: {n}" for n in lay["notes"]] + summary["warnings"]:
        print(line)
    extra = []
    if sync_s is not None and "sync_s" in summary["measured"]:  # the model for the engines and bytes that ran
        ws = summary["layout"]["weight_sync"]
        extra.append((f"sync_s ({len(ws['engine_regions'])} engine(s), {ws['copy_bytes'] / 1e6:.3g} MB as ran)",
                      sync_s, summary["measured"]["sync_s"]))
    predicted = print_comparison(summary, inputs, Path(cfg.out), extra)
    if summary["status"] not in ("interrupted", "stopped") and summary["steps"] >= 2:
        refit_line(inputs.plan_file, summary, predicted, inputs, cfg.out)
    return 130 if summary["status"] == "interrupted" else 0


def refit_line(plan_file, summary: dict, predicted: dict, inputs, out) -> None:
    """Every run refits this machine's profile (problems/placement/runfit.py); one line says how."""
    from problems.placement.runfit import refit_after_run

    measured = None
    if summary.get("mode") != ASYNC:  # the per-step medians (a slow step on a busy machine moves a mean)
        from mosearch.calibrate_logs import phases

        try:
            measured = {k: v for k, v in phases("mosearch", out)[0].items() if k != "step_s"}
        except InputError:
            measured = None
    try:
        line = refit_after_run(plan_file, summary, predicted, inputs, out, measured)
    except (InputError, OSError, ValueError) as err:
        line = f"run not refitted: {err}"
    if line:
        print(line)


def workload_defaults(workload) -> dict:
    """RunConfig fields the plan's workload gives: its algorithm and batch shape, and the model when it
    is the tiny one the trainer builds or a model directory (a preset of a large model names its
    architecture only)."""
    out = {"algo": workload.algorithm, "precision": workload.precision, "prompts_per_step": workload.prompts_per_step,
           "group_size": workload.samples_per_prompt, "max_new_tokens": workload.response_max}
    if workload.has_reference and workload.algorithm == "grpo":  # the workload's KL term, unless --kl-coef
        out["kl_coef"] = WORKLOAD_KL_COEF
    from trainer.models.tiny import TINY_PRESETS

    if workload.model_dir is not None:
        out["model"] = workload.model_dir
    elif workload.model.name in TINY_PRESETS:  # the test models the trainer builds
        out["model"] = workload.model.name
    return out


def _weights(text: str | None) -> list[float] | None:
    if text is None:
        return None
    try:
        return [float(x) for x in text.split(",")]
    except ValueError:
        raise InputError(None, "--reward-weights", f"got {text!r}", "comma-separated numbers, one per --reward") from None


def emulation_line(plan, plan_file: str) -> str:
    """What an emulated run replaces, said before anything else."""
    from trainer import placement as P

    lay = P.layout(plan, P.detect(), True, plan_file)
    if not lay.emulated:
        return "--emulate: this machine has what the plan needs; nothing is emulated"
    gpus = sorted({p.gpu for p in plan.pools if p.used_gpus})
    return (f"EMULATED run: plan for cluster {plan.cluster.name!r} ({', '.join(gpus)}) runs on this machine's CPU "
            f"with {len(lay.engines)} engine(s) and {lay.dp} training rank(s); "
            + "; ".join(n.removeprefix("emulated: ") for n in lay.notes)
            + ". Predictions below are for what runs here, not for the plan's GPUs.")


# (label, predicted key, measured key): phases, throughput and the training side's peak memory
ROWS = [(k, k, k) for k in ("step_s", "rollout_s", "train_s", "sync_s", "switch_s", "throughput_samples_s",
                             "throughput_tokens_s")]
# the run measures generated tokens / generation time (prefill, scheduling and the tail included)
ROWS.append(("generated tokens/s", "generated_tokens_s", "decode_tokens_s"))


def comparison_table(summary: dict, predicted: dict, extra: list[tuple] = ()) -> list[tuple[str, str, str, str]]:
    """(figure, predicted for this run, measured, error) rows; memory: the training side's peak,
    max_memory_allocated on a GPU, the worker's RSS on the CPU. Async: the rollout phase the driver
    times is its wait for generation, so the model's rollout time is set against the engines'
    generation time (the busiest engine's per step). `extra`: more (label, predicted, measured)."""
    meas = summary.get("measured", {})
    rows = [(label, predicted.get(p), meas.get(m)) for label, p, m in ROWS]
    if summary.get("mode") == ASYNC:  # the phases the driver times are waits: compare the work itself
        sync = [meas.get(f"sync_{k}_s") for k in ("gather", "transfer", "load")]
        swap = {"rollout_s": ("rollout_s (generation)", meas.get("rollout_gen_s")),
                "sync_s": ("sync_s (gather+send+load)", sum(sync) if None not in sync else None)}
        rows = [(swap[r[0]][0], r[1], swap[r[0]][1]) if r[0] in swap else r for r in rows]
    if "peak_train_gpu_gb" in meas:  # PyTorch's counters: the model's peaks without the CUDA context's share
        def less(k):
            return None if predicted.get(k) is None else predicted[k] - predicted.get("train_runtime_gb", 0.0)

        rows.append(("train_peak_gb (allocated)", less("train_allocated_gb"), meas["peak_train_gpu_gb"]))
        if "peak_train_gpu_reserved_gb" in meas:
            rows.append(("train_peak_gb (reserved)", less("train_reserved_gb"), meas["peak_train_gpu_reserved_gb"]))
    elif "peak_train_rss_gb" in meas:
        rows.append(("train_peak_gb (RSS)", predicted.get("peak_mem_gb_train"), meas["peak_train_rss_gb"]))
    rows += list(extra)
    fmt = lambda v: "-" if v is None else f"{v:.4g}"  # noqa: E731
    err = lambda p, m: f"{(p / m - 1) * 100:+.0f}%" if p is not None and m else "-"  # noqa: E731
    return [(label, fmt(p), fmt(m), err(p, m)) for label, p, m in rows]


def format_table(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> list[str]:
    """Lines of a table whose columns are as wide as their widest cell, two spaces apart: a long
    figure widens its column, never runs into the next. The first column left-aligned, the rest right."""
    width = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    return ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, width))).rstrip()
            for r in [header, *rows]]


def print_comparison(summary: dict, inputs, out: Path | None = None, extra: list[tuple] = ()) -> dict:
    """`inputs`: the run's PlanInputs (or a plan file); `extra`: more (label, predicted, measured) rows.
    Returns the predicted figures."""
    from problems.placement.planfiles import PlanInputs
    from problems.placement.predict import LOCAL_CLUSTER, predict_run

    if not isinstance(inputs, PlanInputs):
        inputs = PlanInputs.load(inputs)
    moe = unpredicted_moe(summary, inputs)
    if moe is not None:  # measured figures only, said in one line
        print(moe)
        for line in format_table(("figure", "predicted", "measured", "error"), comparison_table(summary, {})):
            print(line)
        if out is not None and out.is_dir():
            (out / "predicted_for_run.json").write_text(json.dumps({"predicted": {}, "notes": [moe]}, indent=1))
        return
    try:
        predicted, notes = predict_run(inputs.plan_file, summary, LOCAL_CLUSTER, inputs=inputs)
    except (InputError, OSError, ValueError) as err:  # the specs moved since planning: keep the plan's figures
        predicted = summary.get("predicted", {})
        notes = [f"could not re-predict with the run's settings ({err}); the plan's predictions are shown"]
    run = summary.get("run", {})
    print(f"predicted for this run's settings: {run.get('prompts_per_step')} prompts x {run.get('group_size')} "
          f"samples, {run.get('mini_batches')} update(s) per step, responses <= {run.get('max_new_tokens')} tokens"
          + "".join(f"; {n}" for n in notes))
    for line in format_table(("figure", "predicted", "measured", "error"), comparison_table(summary, predicted, extra)):
        print(line)
    if out is not None and out.is_dir():  # beside summary.json: what the comparison was made against
        (out / "predicted_for_run.json").write_text(json.dumps({"predicted": predicted, "notes": notes}, indent=1))
    return predicted


def unpredicted_moe(summary: dict, inputs) -> str | None:
    """The line a run of a mixture-of-experts model prints in place of predictions while the workload's
    architecture does not describe its experts (the performance model would predict a dense model);
    None when the run's model is dense or its experts are described."""
    lay = summary.get("layout", {})
    n = lay.get("experts") or 0
    if not n:
        return None
    arch = inputs.workload().model if inputs.has("workload") else None
    if arch is not None and any(getattr(arch, k, None) for k in ("experts", "num_experts")):
        return None
    return (f"predicted: none - the performance model does not predict mixture-of-experts plans yet (this model: "
            f"{n} experts per layer, ep={lay.get('ep', 1)}); measured figures only")


def model_sync_s(summary: dict, inputs) -> float | None:
    """The performance model's weight-sync time for the layout the run had (None: not a broadcast, or no
    cluster file). `inputs`: the run's PlanInputs."""
    from problems.placement.predict import run_sync_s

    if not inputs.has("cluster"):
        return None
    return run_sync_s(summary, inputs.cluster(), inputs.workload().model if inputs.has("workload") else None)
