"""Step timings from the logs a team's runs already write, as the model's phases.

Per executor, the names its trainer logs each step (read from its code: verl 0.9.1
`trainer/ppo/ray_trainer.py` marked_timer names, logged as `timing_s/<name>` by
`trainer/ppo/metric_utils.py`; AReaL 1.0.4 `trainer/rl_trainer.py` stats_tracker.record_timing names,
logged as `timeperf/<name>`; RLinf 0.3.0 `runners/reasoning_runner.py`, logged as `time/<name>`; this
trainer's metrics.jsonl `time` object) and the formats they are written in:

- verl console (`LocalLogger`: `step:3 - timing_s/gen:12.5 - timing_s/step:40.1 - ...`), verl's file
  logger JSONL (`{"step": 3, "data": {...}}`), or plain JSONL of flat metric dicts;
- AReaL's console table (`tabulate_stats`: "Train step 3/100 done." then a grid of name | value cells);
- a TensorBoard event directory (any of the three: their scalars under the same names);
- a Weights & Biases offline run (`wandb/offline-run-*/run-*.wandb`, what `wandb.init(mode="offline")` writes,
  verl's and AReaL's `wandb` logger without a network): its history records, read from the file's
  framing (the LevelDB log format: 32 KiB blocks of records, each a 7-byte header of CRC-32, length and
  kind, a record split across blocks as first / middle / last pieces; the file opens with `:W&B`, 0xBEE1
  and a version byte) and the installed wandb package's protobuf `Record`;
- this trainer's metrics.jsonl.

Each phase is the sum of the named timings present per step; the first step (warm-up, compilation) is
dropped and the median of the rest taken: other work on the machine only ever adds time to a step, and
the median is the steady state least disturbed by it (one slow step moves a mean).
"""

from __future__ import annotations

import json
import math
import statistics
import re
from pathlib import Path

from problems.errors import InputError

# phase -> (timings summed into it, required: the phase must be in the log)
PHASES = {
    "verl": {"rollout_s": (["timing_s/gen"], True),
             "train_s": (["timing_s/old_log_prob", "timing_s/ref", "timing_s/values", "timing_s/adv",
                          "timing_s/update_critic", "timing_s/update_actor"], True),
             "sync_s": (["timing_s/update_weights"], False),
             "step_s": (["timing_s/step"], True)},
    "areal": {"rollout_s": (["timeperf/rollout"], True),
              "train_s": (["timeperf/recompute_logp", "timeperf/ref_logp", "timeperf/critic_values",
                           "timeperf/compute_advantage", "timeperf/train_step", "timeperf/critic_train_step"], True),
              "sync_s": (["timeperf/update_weights"], False),
              "step_s": ([], False)},
    "rlinf": {"rollout_s": (["time/rollout"], True),
              "train_s": (["time/actor/inference", "time/critic/inference", "time/actor/training",
                           "time/critic/training"], True),
              "sync_s": (["time/sync_weights"], False),
              "step_s": (["time/step"], True)},
    "mosearch": {"rollout_s": (["rollout"], True), "train_s": (["train"], True), "sync_s": (["weight_sync"], False),
                 "switch_s": (["switch"], False), "step_s": (["wall"], True)},
}
# lengths the logs give (verl's data metrics), to predict for what ran
LENGTHS = {"prompt_len": "prompt_length/mean", "response_mean": "response_length/mean",
           "response_max": "response_length/max"}


def _num(text: str) -> float | None:
    try:
        v = float(text)
    except ValueError:
        return None
    return v if math.isfinite(v) else None


def _console_verl(text: str) -> list[dict]:
    rows = []
    for line in text.splitlines():
        m = re.search(r"step:(\d+) - (.*)$", line)
        if not m:
            continue
        row = {"step": int(m.group(1))}
        for part in m.group(2).split(" - "):
            k, _, v = part.partition(":")
            if _num(v.strip()) is not None:
                row[k.strip()] = _num(v.strip())
        rows.append(row)
    return rows


def _console_areal(text: str) -> list[dict]:
    rows, row = [], None
    for line in text.splitlines():
        m = re.search(r"Train step (\d+)/\d+ done", line)
        if m:
            row = {"step": int(m.group(1))}
            rows.append(row)
            continue
        if row is None or "│" not in line:
            continue
        cells = [c.strip() for c in line.strip().strip("│").split("│")]
        for k, v in zip(cells[0::2], cells[1::2]):
            if k and _num(v) is not None:
                row[k] = _num(v)
    return rows


def _jsonl(text: str) -> list[dict]:
    rows = []
    for line in text.splitlines():
        if not line.strip():
            continue
        try:
            d = json.loads(line)
        except json.JSONDecodeError:
            return []
        if not isinstance(d, dict):
            return []
        if isinstance(d.get("data"), dict):  # verl's file logger
            d = {"step": d.get("step"), **d["data"]}
        if isinstance(d.get("time"), dict):  # this trainer's metrics.jsonl
            if d.get("eval_only"):
                continue
            d = {"step": d.get("step"), **{k: v for k, v in d["time"].items() if isinstance(v, (int, float))}}
        rows.append(d)
    return rows


def _tensorboard(path: Path) -> list[dict]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    steps: dict[int, dict] = {}
    for events in sorted({p.parent for p in path.rglob("events.out.tfevents.*")}):
        acc = EventAccumulator(str(events), size_guidance={"scalars": 0})
        acc.Reload()
        for tag in acc.Tags().get("scalars", []):
            for e in acc.Scalars(tag):
                steps.setdefault(int(e.step), {"step": int(e.step)})[tag] = float(e.value)
    return [steps[s] for s in sorted(steps)]


WANDB_HEAD = b":W&B"
_WANDB_BLOCK = 32768
_FULL, _FIRST, _MIDDLE, _LAST = 1, 2, 3, 4


def _wandb_records(path: Path):
    """The serialised records of a .wandb file (module doc); a piece whose CRC-32 does not match (a run still
    being written, a damaged file) ends the read."""
    import zlib

    data = path.read_bytes()
    if data[:4] != WANDB_HEAD:
        raise InputError(str(path), None, "not a wandb offline run file (no :W&B header)",
                         "the run-*.wandb file of a `wandb offline` run")
    pos, parts = 7, b""
    while pos + 7 <= len(data):
        room = _WANDB_BLOCK - pos % _WANDB_BLOCK
        if room < 7:  # a block's tail too short for a header is padding
            pos += room
            continue
        crc = int.from_bytes(data[pos:pos + 4], "little")
        length, kind = int.from_bytes(data[pos + 4:pos + 6], "little"), data[pos + 6]
        body = data[pos + 7:pos + 7 + length]
        if kind == 0 or len(body) < length or zlib.crc32(body, zlib.crc32(bytes([kind]))) != crc:
            return
        pos += 7 + length
        if kind == _FULL:
            yield body
        elif kind == _FIRST:
            parts = body
        elif kind == _MIDDLE:
            parts += body
        elif kind == _LAST:
            yield parts + body


def _wandb_value(item):
    if item.value_json:
        try:
            v = json.loads(item.value_json)
        except json.JSONDecodeError:
            return None
        return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None
    return None


def _wandb(path: Path) -> list[dict]:
    from wandb.proto import wandb_internal_pb2

    files = [path] if path.is_file() else sorted(path.rglob("run-*.wandb"))
    rows = []
    for f in files:
        for raw in _wandb_records(f):
            rec = wandb_internal_pb2.Record()
            try:
                rec.ParseFromString(raw)
            except Exception:  # noqa: BLE001 - protobuf's DecodeError: a record of another wandb version
                continue
            if not rec.HasField("history"):
                continue
            row = {"step": rec.history.step.num}
            for item in rec.history.item:
                key = item.key or "/".join(item.nested_key)
                v = _wandb_value(item)
                if v is not None and math.isfinite(v):
                    row[key] = v
            rows.append(row)
    return rows


def read_rows(path: str | Path) -> list[dict]:
    """Per-step metric dicts from a log file or a TensorBoard directory."""
    p = Path(path)
    if not p.exists():
        raise InputError(str(p), None, "not found", "a run's log (console output, JSONL, TensorBoard directory, wandb offline run)")
    if p.suffix == ".wandb":
        return _wandb(p)
    if p.is_dir():
        if (p / "metrics.jsonl").is_file():
            return _jsonl((p / "metrics.jsonl").read_text())
        if next(p.rglob("run-*.wandb"), None) is not None:
            return _wandb(p)
        return _tensorboard(p)
    text = p.read_text(errors="replace")
    for reader in (_jsonl, _console_verl, _console_areal):
        rows = reader(text)
        if rows:
            return rows
    return []


def phases(source: str, path: str | Path) -> tuple[dict, dict, int]:
    """({phase: mean seconds over steps 2..N}, {length: mean}, steps) of a run's log."""
    rows = read_rows(path)
    names = PHASES[source]
    known = {n for spec, _ in names.values() for n in spec}
    timed = [r for r in rows if known & set(r)]
    if not timed:
        raise InputError(str(path), None, f"no step timings of {source} in it",
                         "a log with " + ", ".join(sorted(known)[:4]) + ", ... per step")
    steady = timed[1:] if len(timed) > 1 else timed
    out = {}
    for phase, (spec, required) in names.items():
        present = [n for n in spec if any(n in r for r in steady)]
        if not present:
            if required and spec:
                raise InputError(str(path), spec[0], f"missing: the log times no {phase.removesuffix('_s')} phase",
                                 f"{' or '.join(spec)} per step")
            continue
        out[phase] = float(statistics.median(sum(r.get(n, 0.0) for n in present) for r in steady))
    lengths = {k: sum(r[m] for r in steady if m in r) / sum(1 for r in steady if m in r)
               for k, m in LENGTHS.items() if any(m in r for r in steady)}
    return out, lengths, len(timed)
