"""Predicted vs measured on this machine: profile, plan, train, compare.

    python -m mosearch.bench.predictor_accuracy [--profile profiles/local.yaml] [--steps 8]

1. Profiles the local device with `mosearch profile` (unless --profile names an existing file).
2. Builds the local cluster with that profile and scores a set of distinct plans (colocated,
   disaggregated, elastic pipelining, asynchronous k = 1 and 2, different micro-batches and
   data-parallel sizes) with the calibrated model.
3. Runs `mosearch train` on each plan and reads the measured steady-state figures from the run's
   summary.json.
4. Writes results/bench/predictor_accuracy.md: per plan predicted vs measured step time,
   samples/s and staleness; MAPE; whether the ranking by throughput agrees (Kendall tau).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import yaml

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from problems.atomic import atomic_write_text  # noqa: E402
from problems.placement import PlacementProblem  # noqa: E402
from problems.placement.names import MODES, SHARDINGS  # noqa: E402
from problems.placement.profile import RUN_FITTED  # noqa: E402
from mosearch.bench import provenance  # noqa: E402

WORKLOAD = REPO / "problems" / "workloads" / "tiny-grpo.yaml"

# name -> (mode, rollout devices, train devices, log2 micro-batch, staleness k, log2 chunks[, layout]);
# layout: (train tp, train pp, sharding[, rollout tp]), default (1, 1, "none", 1)
PLANS = {
    "colocated-dp2-mb4": ("colocated", 2, 0, 2, 0, 0),
    "colocated-dp1-mb16": ("colocated", 1, 0, 4, 0, 0),
    "colocated-dp1-mb1": ("colocated", 1, 0, 0, 0, 0),
    "disagg-mb8": ("disaggregated", 1, 1, 3, 0, 0),
    "disagg-pipelined4-mb2": ("disaggregated", 1, 1, 1, 0, 2),
    "async-k1-mb8": ("async", 1, 1, 3, 1, 0),
    "async-k2-mb8": ("async", 1, 1, 3, 2, 0),
    "colocated-dp2-mb1": ("colocated", 2, 0, 0, 0, 0),
    "colocated-tp2-mb4": ("colocated", 2, 0, 2, 0, 0, (2, 1, "none")),
    "colocated-pp2-mb4": ("colocated", 2, 0, 2, 0, 0, (1, 2, "none")),
    "colocated-zero3-dp2-mb4": ("colocated", 2, 0, 2, 0, 0, (1, 1, "zero3")),
    "colocated-rollout-tp2-mb4": ("colocated", 2, 0, 2, 0, 0, (1, 1, "none", 2)),
}


def plan_vector(problem: PlacementProblem, mode, rollout, train, log2_mb, k, log2_chunks,
                layout=(1, 1, "none")) -> np.ndarray:
    lay = problem.layout
    tp, pp, sharding = layout[:3]
    rollout_tp = layout[3] if len(layout) > 3 else 1
    x = np.zeros(problem.n_var)
    # one pool: rollout devices, training devices, the index of the rollout TP among the pool's options
    x[0], x[1], x[2] = rollout, train, list(lay.rtp_options[0]).index(rollout_tp)
    x[lay.g("kv_mem_frac")] = 0.5
    x[lay.g("log2_max_num_seqs")] = 8
    x[lay.g("train_tp_idx")] = list(lay.tp_options).index(tp)
    x[lay.g("train_pp_idx")] = list(lay.pp_options).index(pp)
    x[lay.g("sharding")] = SHARDINGS.index(sharding)
    x[lay.g("log2_micro_batch")] = log2_mb
    x[lay.g("mode")] = MODES.index(mode)
    x[lay.g("staleness_bound")] = k
    x[lay.g("log2_pipeline_chunks")] = log2_chunks
    return x


def calibrated_cluster(profile: Path, workdir: Path) -> Path:
    """The local cluster with `profile` as its cpu-local profile (whatever the shipped file names)."""
    data = yaml.safe_load((REPO / "problems" / "clusters" / "local.yaml").read_text())
    data["profiles"] = {"cpu-local": str(profile.resolve())}
    path = workdir / "local-calibrated.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def mosearch(*argv: str, log: Path) -> None:
    with log.open("a") as f:
        subprocess.run([sys.executable, "-m", "mosearch.cli", *argv], check=True, cwd=REPO, stdout=f, stderr=f)


def kendall_tau(a, b) -> float:
    a, b = np.asarray(a), np.asarray(b)
    i, j = np.triu_indices(len(a), 1)
    s = np.sign(a[i] - a[j]) * np.sign(b[i] - b[j])
    return float(s.sum() / len(s))


def step_throughputs(run_dir: Path) -> list[float]:
    """Samples/s of each training step after the first (the steady state the summary averages)."""
    steps = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    steps = [m for m in steps if not m.get("eval_only")]
    return [m["samples"] / m["time"]["wall"] for m in steps[1:] if m["time"]["wall"] > 0]


def discordant_pairs(rows: list[dict], alpha: float = 0.05) -> list[tuple[str, str, float, float]]:
    """Pairs the model orders against the measurement: (a, b, Welch t-test p-value of the two runs'
    per-step throughputs, predicted difference in %). A pair with p >= alpha is a measured tie."""
    from scipy.stats import ttest_ind

    out = []
    for i in range(len(rows)):
        for j in range(i + 1, len(rows)):
            a, b = rows[i], rows[j]
            if np.sign(a["pred_sps"] - b["pred_sps"]) * np.sign(a["meas_sps"] - b["meas_sps"]) < 0:
                p = float(ttest_ind(a["step_sps"], b["step_sps"], equal_var=False).pvalue)
                out.append((a["plan"], b["plan"], p, 100 * abs(a["pred_sps"] / b["pred_sps"] - 1)))
    return out


def predict(problem_for, name: str, overheads: dict | None, lengths: tuple[int, int] | None = None) -> dict:
    problem = problem_for(overheads, lengths)
    return problem.decode(plan_vector(problem, *PLANS[name]), plan_id=name, lifetime=False).predicted


def fit_overheads(rows: list[dict]) -> dict:
    """Orchestration overheads from measured runs: the rollout phase's residual (synchronous plans,
    where the driver waits for rollout) as a cost per call plus a cost per sample of an engine's
    share (non-negative least squares); per training step and per micro-batch of the training loop
    from single-rank plans whose training runs alone (non-negative least squares over their micro-batch
    counts), and per micro-batch of a rank when dp > 1 (what DDP ranks add beyond the single-device
    micro-benchmarks). Fitted on plain data-parallel plans only (tp = pp = 1, no sharding): the
    tensor-, pipeline- and sharded plans have the model's own collective terms, measured by the
    profile, and are predicted with these overheads, never fitted on."""
    from scipy.optimize import nnls

    rows = [r for r in rows if r.get("plain", True)]
    sync = [r for r in rows if r["mode"] != "async"]
    call_s = sample_s = 0.0
    if sync:
        a = np.array([[r["chunks"], r["engine_samples"]] for r in sync], dtype=float)
        res = np.array([r["meas_rollout_s"] - r["pred0_rollout_s"] for r in sync])
        if np.ptp(a[:, 1] / a[:, 0]) > 0:  # both terms identifiable: calls and shares vary apart
            call_s, sample_s = (float(v) for v in nnls(a, res)[0])
        else:
            call_s = max(0.0, float(np.median(res / a[:, 0])))
    # per training step and per micro-batch of the loop: single-rank plans whose training runs alone (not
    # beside rollout, as async and pipelined plans' does on shared cores: that contention is no
    # per-step constant); the two split where their micro-batch counts differ, else all is per step
    single = [r for r in rows if r["dp"] == 1 and r["mode"] != "async" and r["chunks"] == 1]
    res = np.array([r["meas_train_s"] - r["pred0_train_s"] for r in single])
    mbs = np.array([r["rank_micro_batches"] for r in single], dtype=float)
    train_call = loop_s = 0.0
    if len(single) and np.ptp(mbs) > 0:
        train_call, loop_s = (float(v) for v in nnls(np.column_stack([np.ones_like(mbs), mbs]), res)[0])
    elif len(single):
        train_call = max(0.0, float(np.median(res)))
    multi = [(r["meas_train_s"] - r["pred0_train_s"] - train_call) / r["rank_micro_batches"] - loop_s
             for r in rows if r["dp"] > 1]
    return {"rollout_call_s": call_s, "rollout_sample_s": sample_s,
            "train_call_s": train_call, "microbatch_loop_s": loop_s,
            "dp_microbatch_s": max(0.0, float(np.median(multi))) if multi else 0.0}


def set_fitted(text: str, values: dict) -> str:
    """The profile's text with these `fitted:` figures replaced or added, its comments kept."""
    lines = text.splitlines()
    start = lines.index("fitted:") + 1
    end = next((i for i in range(start, len(lines)) if not lines[i].startswith(" ")), len(lines))
    block = {ln.split(":")[0].strip(): i for i, ln in enumerate(lines[start:end], start)}
    for k, v in values.items():
        if k in block:
            lines[block[k]] = f"  {k}: {v!r}"
        else:
            lines.insert(end, f"  {k}: {v!r}")
            end += 1
    assert yaml.safe_load("\n".join(lines))["fitted"] == {**yaml.safe_load(text)["fitted"], **values}
    return "\n".join(lines) + "\n"


def layout_of(name: str) -> tuple:
    """A plan's (train tp, train pp, sharding, rollout tp), its defaults filled in."""
    layout = (PLANS[name][6:] or [(1, 1, "none")])[0]
    return (*layout[:3], layout[3] if len(layout) > 3 else 1)


def engine_count(name: str) -> int:
    """Rollout engines of a plan: its rollout devices over the rollout TP."""
    return PLANS[name][1] // layout_of(name)[3]


def rank_micro_batches(problem: PlacementProblem, name: str, dp: int) -> int:
    """Micro-batches one rank runs per step: chunks x ceil(its share of a chunk / micro-batch)."""
    mode, _, _, log2_mb, _, log2_chunks = PLANS[name][:6]
    chunks = 1 if mode == "colocated" else 2 ** log2_chunks
    samples = problem.workload.prompts_per_step * problem.workload.samples_per_prompt
    return chunks * math.ceil(samples / dp / chunks / 2 ** log2_mb)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--profile", default=str(REPO / "profiles" / "local.yaml"))
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--plans", nargs="*", default=list(PLANS))
    ap.add_argument("--runs", default=str(REPO / "runs" / "predictor-accuracy"))
    ap.add_argument("--analyse-only", action="store_true", help="reuse the runs' summary.json files, train nothing")
    ap.add_argument("--out", default=str(REPO / "results" / "bench" / "predictor_accuracy.md"))
    ap.add_argument("--keep-profile", action="store_true",
                    help="do not write the overheads fitted here into the profile (it keeps its own)")
    args = ap.parse_args()

    runs = Path(args.runs)
    runs.mkdir(parents=True, exist_ok=True)
    log = runs / "log.txt"
    profile = Path(args.profile)
    # every prediction here and in the runs it starts uses this profile, not this machine's cached one
    os.environ["MOSEARCH_PROFILE"] = str(profile.resolve())
    started = time.time()
    if not profile.is_file():
        print(f"profiling the local device -> {profile}", flush=True)
        mosearch("profile", "--out", str(profile), log=log)

    work = Path(tempfile.mkdtemp(prefix="mosearch-acc-"))
    cluster = calibrated_cluster(profile, work)
    base = PlacementProblem.from_files(cluster, WORKLOAD)

    def problem_for(overheads, lengths=None):
        # the profile's own run overheads are replaced: stage 1 = none, stage 2 = these; `lengths`: the
        # run's measured mean prompt and response tokens (what ran, as `mosearch train` predicts it)
        over = {**dict.fromkeys(RUN_FITTED, 0.0), **(overheads or {})}
        wl = base.workload
        if lengths is not None:
            wl = dataclasses.replace(wl, prompt_len=lengths[0], response_mean=lengths[1],
                                     response_max=max(wl.response_max, lengths[1]))
        return PlacementProblem(base.cluster, wl, efficiencies={"cpu-local": over})

    rows = []
    for name in args.plans:
        out = runs / name
        if not args.analyse_only:
            plan = problem_for(None).decode(plan_vector(base, *PLANS[name]), plan_id=name)
            path = work / f"{name}.yaml"
            path.write_text(plan.to_yaml())
            print(f"training {name} ({args.steps} steps)", flush=True)
            mosearch("train", "--plan", str(path), "--steps", str(args.steps), "--out", str(out), "--eval-every", "0",
                     "--checkpoint-every", "0", "--no-progress", log=log)
            (out / "load.json").write_text(json.dumps(os.getloadavg()))
        measured = json.loads((out / "summary.json").read_text())["measured"]
        lengths = tuple(max(1, round(measured[k])) for k in ("prompt_tokens_mean", "response_tokens_mean"))
        p0 = predict(problem_for, name, None, lengths)
        mode, _, _, _, k, log2_chunks = PLANS[name][:6]
        plain = layout_of(name) == (1, 1, "none", 1)
        rows.append({"plan": name, "mode": mode, "k": k, "chunks": 2 ** log2_chunks if mode != "colocated" else 1,
                     "plain": plain,
                     "meas_step_s": measured["step_s"], "meas_sps": measured["throughput_samples_s"],
                     "meas_stale": measured["staleness"], "meas_rollout_s": measured["rollout_s"],
                     "meas_train_s": measured["train_s"], "meas_sync_s": measured["sync_s"],
                     "load": json.loads((out / "load.json").read_text()) if (out / "load.json").is_file() else None,
                     "pred0_step_s": p0["step_s"], "pred0_sps": p0["throughput_samples_s"],
                     "pred0_rollout_s": p0["rollout_s"], "pred0_train_s": p0["train_s"],
                     "pred_stale": p0["staleness"], "dp": int(p0["dp"]),
                     "rank_micro_batches": rank_micro_batches(base, name, int(p0["dp"])),
                     "engine_samples": base.workload.prompts_per_step * base.workload.samples_per_prompt
                     / engine_count(name),
                     "lengths": lengths, "step_sps": step_throughputs(out)})
        print(json.dumps(rows[-1]), flush=True)

    # stage 2, held out: each plan predicted with overheads fitted on the OTHER plans' runs
    for i, r in enumerate(rows):
        over = fit_overheads(rows[:i] + rows[i + 1:])
        p = predict(problem_for, r["plan"], over, tuple(r["lengths"]))
        r.update(pred_step_s=p["step_s"], pred_sps=p["throughput_samples_s"], pred_stale=p["staleness"],
                 pred_rollout_s=p["rollout_s"], pred_train_s=p["train_s"], pred_sync_s=p["sync_s"])
    overall = fit_overheads(rows)

    def ape(pred, meas):
        return abs(pred - meas) / meas * 100

    def mape(pred_key, meas_key):
        return float(np.mean([ape(r[pred_key], r[meas_key]) for r in rows]))

    tau0 = kendall_tau([r["pred0_sps"] for r in rows], [r["meas_sps"] for r in rows])
    tau = kendall_tau([r["pred_sps"] for r in rows], [r["meas_sps"] for r in rows])
    order_pred = [r["plan"] for r in sorted(rows, key=lambda r: -r["pred_sps"])]
    order_meas = [r["plan"] for r in sorted(rows, key=lambda r: -r["meas_sps"])]
    against = discordant_pairs(rows)
    significant = [d for d in against if d[2] < 0.05]
    worst = sorted(rows, key=lambda r: -ape(r["pred_step_s"], r["meas_step_s"]))[:2]
    run_loads = ", ".join("/".join(f"{x:.1f}" for x in r["load"]) if r["load"] else "not recorded" for r in rows)
    lines = [
        "# Predictor accuracy: calibrated model vs measured training runs (this machine)",
        "", provenance.line(), "",
        f"Regenerate: `python -m mosearch.bench.predictor_accuracy --steps {args.steps}"
        f"{' --keep-profile' if args.keep_profile else ''}` (it runs "
        "`mosearch profile --out profiles/local.yaml` first when that file is missing). "
        f"Cluster `local` ({base.cluster.pools[0].count} cpu-local devices) with that profile, workload "
        f"`tiny-grpo`; each plan trained {args.steps} steps by `mosearch train` (vLLM CPU build rollouts, PyTorch/gloo "
        "training, Ray); measured = steady-state mean over steps 2..N from the run's summary.json. "
        f"Load average (1/5/15 min) after each run: {run_loads} (2 cores shared with other work). "
        + (f"Wall time {time.time() - started:.0f} s." if not args.analyse_only else "Analysis of earlier runs (--analyse-only)."),
        "",
        "Two stages of calibration: **profile only** (micro-benchmarks of the device: matmul, bandwidth, "
        "training steps, vLLM prefill/decode) and **profile + runs**, which adds four orchestration "
        "overheads fitted from measured runs (seconds per rollout call, per sample of an engine's share, and "
        "per training step: Ray round trips, the engine's per-request work, reward scoring, batch assembly; seconds per micro-batch of a data-parallel rank when dp > 1) - fitted **leave-one-out**: each plan's prediction uses "
        "overheads fitted on the other plans' runs only, and only on plain data-parallel plans (tp = pp = 1, no "
        "sharding, rollout TP 1): the tp, pp, zero3 and rollout-TP plans are never fitted on; their collectives "
        "are the model's own terms with the profile's measured latencies and per-op costs.",
        "",
        "| plan | mode | k | dp | chunks | step s meas | step s profile only | err % | step s profile + runs | err % | samples/s meas | samples/s pred | err % | staleness meas | pred |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(f"| {r['plan']} | {r['mode']} | {r['k']} | {r['dp']} | {r['chunks']} | {r['meas_step_s']:.3f} | "
                     f"{r['pred0_step_s']:.3f} | {ape(r['pred0_step_s'], r['meas_step_s']):.1f} | "
                     f"{r['pred_step_s']:.3f} | {ape(r['pred_step_s'], r['meas_step_s']):.1f} | {r['meas_sps']:.1f} | "
                     f"{r['pred_sps']:.1f} | {ape(r['pred_sps'], r['meas_sps']):.1f} | {r['meas_stale']:.2f} | "
                     f"{r['pred_stale']:.2f} |")
    lines += [
        "",
        f"- Profile only: MAPE step time **{mape('pred0_step_s', 'meas_step_s'):.1f}%**, samples/s **{mape('pred0_sps', 'meas_sps'):.1f}%**; "
        f"ranking by throughput Kendall tau {tau0:.2f}.",
        f"- Profile + runs (held out): MAPE step time **{mape('pred_step_s', 'meas_step_s'):.1f}%**, samples/s **{mape('pred_sps', 'meas_sps'):.1f}%** "
        f"(target <= 15%, aim 8%); ranking by throughput Kendall tau {tau:.2f} "
        f"({'the same order' if order_pred == order_meas else 'orders differ'}).",
        f"- Predicted order: {', '.join(order_pred)}. Measured order: {', '.join(order_meas)}.",
        f"- Ranking, pair by pair: of {len(rows) * (len(rows) - 1) // 2} pairs the model orders {len(against)} against the "
        f"measurement, {len(significant)} of them measurably (two runs' per-step throughputs apart by a Welch t-test, "
        f"p < 0.05): the ranking **{'matches' if not significant else 'does not match'}** on every pair the "
        "measurements can tell apart."
        + ("".join(f" {a} / {b}: predicted {d:.1f}% apart, measured p = {p:.2f};" for a, b, p, d in against)[:-1] + "."
           if against else ""),
        "- Phases, held out (synchronous plans, whose measured rollout phase is the rollout): MAPE rollout "
        f"{np.mean([ape(r['pred_rollout_s'], r['meas_rollout_s']) for r in rows if r['mode'] != 'async']):.1f}%, "
        f"training {np.mean([ape(r['pred_train_s'], r['meas_train_s']) for r in rows if r['mode'] != 'async']):.1f}%, "
        f"weight sync {np.mean([ape(r['pred_sync_s'], r['meas_sync_s']) for r in rows if r['mode'] != 'async']):.1f}% "
        "(per plan: " + ", ".join(f"{r['plan']} {r['pred_sync_s'] * 1e3:.1f} / {r['meas_sync_s'] * 1e3:.1f} ms"
                                  for r in rows if r['mode'] != 'async') + ", predicted / measured).",
        f"- Staleness, mean absolute error: {np.mean([abs(r['pred_stale'] - r['meas_stale']) for r in rows]):.2f} versions.",
        f"- Overheads fitted on all runs ({'not written into the profile: --keep-profile' if args.keep_profile else 'written into the profile'}): rollout call {overall['rollout_call_s'] * 1e3:.0f} ms "
        f"plus {overall['rollout_sample_s'] * 1e3:.2f} ms per sample of an engine's share, "
        f"training step {overall['train_call_s'] * 1e3:.0f} ms, micro-batch of the training loop "
        f"{overall['microbatch_loop_s'] * 1e3:.1f} ms, and of a rank when dp > 1 "
        f"{overall['dp_microbatch_s'] * 1e3:.1f} ms.",
        "",
        "## Phase breakdown (seconds per step, profile only)",
        "",
        "| plan | rollout pred | rollout meas | train pred | train meas |",
        "|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(f"| {r['plan']} | {r['pred0_rollout_s']:.3f} | {r['meas_rollout_s']:.3f} | "
                     f"{r['pred0_train_s']:.3f} | {r['meas_train_s']:.3f} |")
    lines += ["", "## Worst plans (profile + runs)", ""]
    for r in worst:
        lines.append(f"- {r['plan']}: step {r['pred_step_s']:.3f} s predicted vs {r['meas_step_s']:.3f} s measured.")
    lines += ["", "What the model misses: (1) per-call and per-sample costs of the vLLM engine inside a Ray actor "
              f"(about {overall['rollout_call_s'] * 1e3:.0f} ms per call and {overall['rollout_sample_s'] * 1e3:.2f} ms "
              "per sample here) are absent from the micro-benchmarks, so profile-only predictions of the rollout phase are "
              "2-3x short and only the run-fitted overhead covers them; (2) ranks of a data-parallel group cost "
              "more per micro-batch than the single-device micro-benchmark (DDP hooks, and two ranks plus the driver "
              "and engines on two shared cores), which the dp > 1 micro-batch term absorbs; (3) the measured rollout "
              "phase of asynchronous plans is only the driver's wait, as rollout overlaps training; (4) an engine and "
              "a training rank overlapping on two shared cores slow each other, which the model (separate devices) "
              "does not see. The profile's training grid times forward + backward of one micro-batch on its own "
              "(the model adds the optimizer update once per step); profiles from before that split are refitted "
              "with the model's own Adam-update estimate taken out (`mosearch profile --refit`).",
              "",
              "Tensor, pipeline and sharded layouts: the model charges each collective a layout issues per "
              "micro-batch (tp: 2 forward all-reduces per layer and one per column-parallel projection in backward; "
              "zero3: every unit gathered in forward, the layers again in backward, each unit reduce-scattered; pp: "
              "a send each way per stage boundary) its gloo latency and the per-op cost of DTensor / FSDP2 around it, "
              "both measured by `mosearch profile` (profiles/local.yaml); where one step of each layout spends its "
              "time is in results/bench/layout_collectives.md. Colocated engines take the weights through the same "
              "broadcast as remote ones (the model's sync_s, results/bench/weight_sync.md)."]
    atomic_write_text(args.out, "\n".join(lines) + "\n")
    (runs / "rows.json").write_text(json.dumps(rows, indent=1))

    if not args.keep_profile:  # the profile keeps the run-fitted overheads, so plans made with it include them
        atomic_write_text(profile, set_fitted(profile.read_text(), overall))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
