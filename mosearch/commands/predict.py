"""`mosearch predict`: the model's figures for one explicit layout, without a search.

A plain training job (flags, or `--job job.yaml` with the same keys) or the RL step of a plan file
(`--plan plan.yaml`, optionally with the settings a run uses). Both go through the planner's model
(`problems.placement.predict`).

Exit status: 0 the layout fits, 3 it does not fit (reserved memory over a GPU's capacity, or a KV
cache smaller than one sample; the figures are still printed, and the JSON has `fits: false`),
2 bad input (one line naming the key).
"""

from __future__ import annotations

import argparse
import json

from problems.errors import InputError
from problems.placement.names import PRECISIONS, RECOMPUTE, SHARDINGS

JOB_FLAGS = ("model", "precision", "attention", "seq_len", "global_batch", "micro_batch", "dp", "tp", "pp",
             "gpu", "gpus_per_node", "inter_node_gbs", "sharding", "interleave", "ep")
EXIT_DOES_NOT_FIT = 3
JOB_ONLY = (*JOB_FLAGS, "stage_layers", "stage_gpus", "replica_gpus", "replica_stage_gpus", "recompute",
            "sequence_parallel", "no_reshard_after_forward")
RL_ONLY = ("prompts_per_step", "group_size", "prompt_len", "response_mean", "response_max", "mini_batches")
PRECISION_HELP = ("bf16 | fp16 | fp8 (bf16 storage, FP8 Linear matmuls) | tf32 | fp32. Both tf32 and fp32 store "
                  "4 bytes; they differ in the matmul units: tf32 = TF32 tensor cores, what fp32 training runs at "
                  "with torch.backends.cuda.matmul.allow_tf32 = True (Megatron-LM and most training scripts set "
                  "it); fp32 = the FP32 units, PyTorch's own default since 1.12 (allow_tf32 = False), 4-8x slower")


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "predict", help="predict one layout: a training job's iteration, or a plan's RL step, with the breakdown",
        description="Score one explicit layout with the performance model (no search): iteration time, "
                    "throughput, the breakdown (compute, pipeline bubble, TP/PP/DP communication, optimizer), "
                    "memory by kind and the assumptions used.")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--plan", help="a plan file: predict its RL step")
    src.add_argument("--job", help="a training job YAML (keys as the flags below, with underscores)")
    g = p.add_argument_group("training job (without --plan/--job)")
    g.add_argument("--model", help="model preset (e.g. llama3.1-8b); an architecture mapping needs --job")
    g.add_argument("--precision", choices=PRECISIONS, help=PRECISION_HELP)
    g.add_argument("--attention", choices=["flash", "unfused"])
    g.add_argument("--seq-len", type=int)
    g.add_argument("--global-batch", type=int, help="sequences per optimizer step")
    g.add_argument("--micro-batch", type=int)
    g.add_argument("--dp", type=int)
    g.add_argument("--tp", type=int)
    g.add_argument("--pp", type=int)
    g.add_argument("--ep", type=int, help="expert-parallel size of a mixture of experts (divides dp*tp and the "
                                          "routed experts; default 1)")
    g.add_argument("--stage-layers", help="layers per pipeline stage, comma separated (default even)")
    g.add_argument("--gpu", help="GPU type (catalog name)")
    g.add_argument("--stage-gpus", help="GPU type per pipeline stage, comma separated")
    g.add_argument("--replica-gpus", help="GPU type per data-parallel replica, comma separated (mixed data parallelism)")
    g.add_argument("--replica-stage-gpus", help="stage types of each replica: replicas separated by ';', stages by "
                                                "',' (e.g. 'A100,A100;H100,L40S' for dp 2, pp 2)")
    g.add_argument("--gpus-per-node", type=int)
    g.add_argument("--inter-node-gbs", help="per-node network bandwidth, GB/s: one figure, or per GPU type "
                                            "('H100=400,RTX-4090=1.25': a network per node group)")
    g.add_argument("--sharding", choices=SHARDINGS)
    g.add_argument("--recompute", nargs="?", const="full", choices=list(RECOMPUTE),
                   help="activation recomputation: full (the default when given alone) or selective-op "
                        "(torchtitan's selective op checkpointing)")
    g.add_argument("--sequence-parallel", action="store_true", help="Megatron sequence parallelism (with --tp > 1)")
    g.add_argument("--interleave", type=int, help="virtual pipeline stages per rank (interleaved 1F1B)")
    g.add_argument("--no-reshard-after-forward", action="store_true",
                   help="ZeRO-3/FSDP units keep their gathered weights from forward to backward (FSDP2 "
                        "reshard_after_forward=False): one all-gather fewer per micro-batch, the stage's weights held")
    r = p.add_argument_group("RL step of a plan (with --plan): the settings a run uses")
    r.add_argument("--prompts-per-step", type=int)
    r.add_argument("--group-size", type=int, help="samples per prompt")
    r.add_argument("--prompt-len", type=int)
    r.add_argument("--response-mean", type=int)
    r.add_argument("--response-max", type=int)
    r.add_argument("--mini-batches", type=int, help="optimizer updates per step (default 1)")
    p.add_argument("--json", action="store_true", help="print the prediction as JSON")
    p.set_defaults(func=run)


def _job_from_flags(args):
    from problems.placement.predict import TrainingJob
    from problems.specio import validation_error
    from pydantic import ValidationError

    given = {k: getattr(args, k) for k in JOB_FLAGS if getattr(args, k) is not None}
    if args.recompute:
        given["recompute"] = args.recompute
    if args.sequence_parallel:
        given["sequence_parallel"] = True
    if args.no_reshard_after_forward:
        given["reshard_after_forward"] = False
    if "inter_node_gbs" in given:
        given["inter_node_gbs"] = _networks(given["inter_node_gbs"])
    if args.replica_stage_gpus:
        given["replica_stage_gpus"] = [[g.strip() for g in r.split(",") if g.strip()]
                                       for r in args.replica_stage_gpus.split(";") if r.strip()]
    for key in ("stage_layers", "stage_gpus", "replica_gpus"):
        text = getattr(args, key)
        if text:
            items = [s.strip() for s in text.split(",") if s.strip()]
            if key == "stage_layers":
                try:
                    items = [int(s) for s in items]
                except ValueError:
                    raise InputError("command line", "--stage-layers", f"got {text!r}", "integers, comma separated") from None
            given[key] = items
    for need in ("model", "seq_len", "global_batch"):
        if need not in given:
            raise InputError("command line", "--" + need.replace("_", "-"), "missing",
                             "--plan, --job, or a training job's --model, --seq-len and --global-batch")
    try:
        return TrainingJob(**given)
    except ValidationError as err:
        e = validation_error("command line", err)
        raise InputError(e.file, "--" + (e.key or "").replace("_", "-") if e.key != "<root>" else None,
                         e.problem, e.expected) from None


def _networks(text: str):
    """'400' -> 400.0; 'H100=400,RTX-4090=1.25' -> {type: GB/s}."""
    try:
        if "=" not in text:
            return float(text)
        return {k.strip(): float(v) for k, v in (item.split("=", 1) for item in text.split(",") if item.strip())}
    except ValueError:
        raise InputError("command line", "--inter-node-gbs", f"got {text!r}",
                         "GB/s, or TYPE=GB/s pairs separated by commas") from None


def run(args: argparse.Namespace) -> int:
    from problems.placement.predict import load_job, predict_plan, predict_training

    # a flag of the other kind of prediction would be ignored: say so instead of printing figures without it
    unused = JOB_ONLY if args.plan else RL_ONLY + JOB_ONLY if args.job else RL_ONLY
    # (identity: 0 == False, and a flag given as 0 is given)
    wrong = [f for f in unused if getattr(args, f) is not None and getattr(args, f) is not False]
    if wrong:
        why = ("with --plan (the plan gives the layout)" if args.plan else
               f"with --job (give it in {args.job})" if args.job else "without --plan")
        raise InputError("command line", "--" + wrong[0].replace("_", "-"), f"not used {why}",
                         "the RL-step flags with --plan; the training-job flags without --plan and --job")
    if args.plan:
        pred = predict_plan(args.plan, prompts_per_step=args.prompts_per_step, group_size=args.group_size,
                            prompt_len=args.prompt_len, response_mean=args.response_mean,
                            response_max=args.response_max,
                            mini_batches=1 if args.mini_batches is None else args.mini_batches)
        print(json.dumps(pred, indent=1) if args.json else format_plan(pred))
        return 0 if pred["fits"] else EXIT_DOES_NOT_FIT
    job = load_job(args.job) if args.job else _job_from_flags(args)
    pred = predict_training(job, args.job or "command line")
    print(json.dumps(pred, indent=1) if args.json else format_job(pred))
    return 0 if pred["fits"] else EXIT_DOES_NOT_FIT


def format_job(p: dict) -> str:
    lay = p["layout"]
    where = (f"replicas on {lay['replica_gpus']}" if lay["replica_gpus"] else
             f"replica stages on {lay['replica_stage_gpus']}" if lay.get("replica_stage_gpus") else f"on {lay['stage_gpus']}")
    lines = [f"{p['model']} on {p['gpus']} GPUs: dp {lay['dp']} x tp {lay['tp']} x pp {lay['pp']}, micro-batch "
             f"{lay['micro_batch']} ({lay['micro_batches_per_rank']} per rank), stages {lay['stage_layers']} {where}",
             f"  iteration        {p['step_s']:.4g} s",
             f"  throughput       {p['samples_s']:.4g} samples/s, {p['tokens_s']:.4g} tokens/s, "
             f"{p['tokens_s_per_gpu']:.4g} tokens/s/GPU",
             f"  model TFLOP/s    {p['model_tflops_per_gpu']:.4g} per GPU (MFU {p['mfu']:.1%})",
             "  breakdown (s):"]
    names = {"train_compute_s": "compute (pipeline, incl. the rows below)", "pipeline_bubble_s": "  pipeline bubble",
             "tp_comm_s": "  TP all-reduces", "pp_comm_s": "  PP transfers", "ep_comm_s": "  EP all-to-alls", "dp_sync_s": "DP gradient sync",
             "optimizer_s": "optimizer step"}
    lines += [f"    {names[k]:<42}{v:>10.4g}" for k, v in p["breakdown"].items()]
    m = p["memory_gb"]
    lines.append("  memory per GPU (GB, most loaded stage):")
    lines += [f"    {k:<42}{v:>10.3g}" for k, v in m.items()]
    if not p["fits"]:
        lines.append(f"  DOES NOT FIT: {m['allocated']:.1f} GB allocated > {m['capacity']:.0f} GB (exit status 3)")
    elif p.get("tight"):
        lines.append(f"  TIGHT: {m['allocated']:.1f} GB allocated fits {m['capacity']:.0f} GB, the {m['reserved']:.1f} GB "
                     "reserved estimate (30% allocator fragments assumed) does not: it runs if the allocator fragments "
                     "less (PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True helps)")
    lines.append("  assumptions:")
    lines += [f"    - {a}" for a in p["assumptions"]]
    return "\n".join(lines)


PLAN_KEYS = ("step_s", "throughput_samples_s", "throughput_tokens_s", "rollout_s", "train_s", "train_compute_s",
             "pipeline_bubble_s", "tp_comm_s", "pp_comm_s", "ep_comm_s", "dp_sync_s", "optimizer_s", "sync_s", "switch_s",
             "decode_tokens_s", "peak_mem_gb_train", "train_allocated_gb", "train_reserved_gb", "peak_mem_gb_rollout",
             "model_states_gb", "cost_usd_h", "staleness")


def format_plan(p: dict) -> str:
    lines = [f"RL step of {int(p['samples_per_step'])} samples:"]
    lines += [f"  {k:<24}{p[k]:>12.4g}" for k in PLAN_KEYS if k in p]
    if not p["fits"]:
        lines.append(f"  DOES NOT FIT: peak memory {p['peak_mem_frac']:.0%} of a GPU (reserved), KV shortfall "
                     f"{max(p['kv_shortfall'], 0):.0%} of one sample (exit status 3)")
    lines += [f"  assumption: {a}" for a in p.get("assumptions", [])]
    return "\n".join(lines)
