"""Reward functions in the signatures users already have, several of them weighted.

A reward is named `module:function` (imported with the working directory on the path, as `python -m`
does) or `path/to/file.py[:function]` (loaded from the file; the function defaults to
`compute_score`, verl's name). Its convention is read from its parameters:

- TRL (batched): `f(prompts, completions, **columns) -> list[float]`: one call per batch of samples;
  every other parameter is a data column of that name (one value per sample), and `completion_ids`
  the generated token ids (TRL's `trainer_state` is not passed). Chat prompts pass as
  their messages and completions as `[{"role": "assistant", "content": text}]`, as TRL does. A
  `None` in the list means "no score" for that sample (TRL's convention).
- verl: `compute_score(data_source, solution_str, ground_truth, extra_info=None) -> float | dict`:
  one call per sample with the row's `data_source`, the decoded response, `reward_model.ground_truth`
  and `extra_info`; a dict's `score` is the reward.
- mosearch: `f(prompt, completion, answer) -> float`, one call per sample.

Several rewards add up with weights (default 1 each), skipping a function that gave no score for a
sample, as TRL's GRPOTrainer does. A reward that raises stops the run with one line naming the
function and the sample; with `errors="skip"` that score is left out instead and counted.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from problems.errors import InputError
from trainer.data import Example

TRL, VERL, PLAIN = "trl", "verl", "plain"
FAILED = "_failed"  # in a sample's reward parts: how many of its scores were left out (a reward raised)
ERRORS = ("raise", "skip")
_TRL_OWN = {"prompts", "completions", "completion_ids", "trainer_state"}  # what TRL itself passes
_VERL = ("data_source", "solution_str", "ground_truth")


class RewardError(InputError):
    """A user's reward function failed on a sample: exit 1 with one line."""

    exit_code = 1


def exact_match(prompt: str, completion: str, answer: str) -> float:
    """1 when the completion (up to the end of sequence, whitespace-trimmed) is the answer."""
    return 1.0 if completion.strip() == answer.strip() else 0.0


def _load_file(path: Path, fn_name: str, spec: str):
    if not path.is_file():
        raise InputError(None, "reward", f"{spec!r}: no such file {path}", "path/to/file.py[:function] or module:function")
    name = f"mosearch_reward_{abs(hash(str(path.resolve())))}"
    loader = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(loader)
    sys.modules[name] = mod  # dataclasses and pickling look the module up by name
    try:
        loader.loader.exec_module(mod)
    except Exception as err:  # noqa: BLE001 (the user's module failed to run)
        sys.modules.pop(name, None)
        raise InputError(str(path), None, f"importing the reward file failed: {type(err).__name__}: {err}",
                         "a Python file that imports cleanly") from None
    return mod


def load_fn(spec: str) -> tuple[str, Callable]:
    """(label, function) for `module:function` or `path.py[:function]`."""
    head, colon, fn_name = spec.rpartition(":")
    if not colon:
        head, fn_name = spec, ""
    if head.endswith(".py") or "/" in head or "\\" in head:
        mod = _load_file(Path(head), fn_name, spec)
        fn_name = fn_name or "compute_score"
        label = f"{Path(head).name}:{fn_name}"
    else:
        if not fn_name:
            raise InputError(None, "reward", f"got {spec!r}", "module:function or path/to/file.py[:function]")
        if str(Path.cwd()) not in sys.path and "" not in sys.path:
            sys.path.insert(0, str(Path.cwd()))  # as `python -m` would: the user's own folder
        try:
            mod = importlib.import_module(head)
        except ImportError as err:
            raise InputError(None, "reward", f"cannot import {spec!r}: {err}",
                             "an importable module:function, or path/to/file.py[:function]") from None
        label = spec
    fn = getattr(mod, fn_name, None)
    if fn is None:
        raise InputError(None, "reward", f"cannot import {spec!r}: no function {fn_name!r} in it",
                         "module:function or path/to/file.py[:function]")
    if not callable(fn):
        raise InputError(None, "reward", f"{spec!r} is not callable", "a reward function")
    return label, fn


def convention(label: str, fn: Callable) -> tuple[str, list[str]]:
    """(TRL | verl | plain, the data columns the function requires by name)."""
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return PLAIN, []
    names = set(params)
    if all(n in names for n in _VERL):
        return VERL, ["data_source", "reward_model.ground_truth"]
    if "completions" in names:
        need = [n for n, p in params.items() if n not in _TRL_OWN and p.default is p.empty
                and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)]
        return TRL, need
    positional = [p for p in params.values() if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if len(positional) >= 3 or any(p.kind == p.VAR_POSITIONAL for p in params.values()):
        return PLAIN, ["answer"]
    raise InputError(None, "reward", f"{label} takes ({', '.join(params)})",
                     "f(prompts, completions, **columns) as TRL, compute_score(data_source, solution_str, "
                     "ground_truth, extra_info) as verl, or f(prompt, completion, answer)")


def _has(ex: Example, col: str) -> bool:
    if col == "answer":
        return ex.answer is not None
    if col == "reward_model.ground_truth":
        rm = ex.columns.get("reward_model")
        return isinstance(rm, dict) and rm.get("ground_truth") is not None
    return col in ex.columns


@dataclass
class Reward:
    label: str
    fn: Callable
    kind: str
    needs: list[str]
    weight: float = 1.0


@dataclass
class Scored:
    rewards: list[float]  # the weighted sum per sample
    parts: list[dict[str, float]]  # each function's score per sample (NaN: no score)
    errors: int = 0  # scores left out because the function raised (errors="skip")
    failed: list[str] = field(default_factory=list)  # one line per function that raised


def _show(ex: Example, completion: str) -> str:
    ans = ex.answer
    return (f"prompt {ex.text[-80:]!r}, completion {completion[:80]!r}"
            + (f", answer {ans[:40]!r}" if ans is not None else ""))


class RewardSet:
    """The run's reward functions and how they are combined."""

    def __init__(self, specs: list[str] | None, weights: list[float] | None = None, errors: str = "raise"):
        if errors not in ERRORS:
            raise InputError(None, "reward_errors", f"got {errors!r}", " | ".join(ERRORS))
        self.errors = errors
        loaded = [load_fn(s) for s in specs] if specs else [("exact_match", exact_match)]
        if weights is not None and len(weights) != len(loaded):
            raise InputError(None, "reward_weights", f"{len(weights)} weight(s) for {len(loaded)} reward function(s)",
                             "one weight per --reward")
        self.rewards = [Reward(label, fn, *convention(label, fn), w)
                        for (label, fn), w in zip(loaded, weights or [1.0] * len(loaded))]
        labels = [r.label for r in self.rewards]
        for i, r in enumerate(self.rewards):  # unique names for the metrics
            if labels.count(r.label) > 1:
                r.label = f"{r.label}#{i}"

    @property
    def names(self) -> list[str]:
        return [r.label for r in self.rewards]

    def check(self, examples: list[Example], source: str) -> None:
        """Every column a reward needs is in every row (one line naming the first row without it)."""
        cols = {c for ex in examples for c in ex.columns}
        for r in self.rewards:
            for col in r.needs:
                miss = next((i for i, ex in enumerate(examples) if not _has(ex, col)), None)
                if miss is not None:
                    what = ("an `answer` column or verl's reward_model.ground_truth" if col == "answer"
                            else f"a `{col}` column")
                    raise InputError(source, f"row {miss}", f"reward {r.label} needs {what}; the data has "
                                     f"{', '.join(sorted(cols)) or 'only prompts'}",
                                     f"{what} in every row, or a reward that does not need it")

    def score(self, examples: list[Example], completions: list[str], completion_ids: list | None = None) -> Scored:
        """Rewards of `completions[i]` (token ids `completion_ids[i]`, for TRL functions that take them)
        for the prompt `examples[i]`."""
        n = len(examples)
        parts: list[dict] = [dict() for _ in range(n)]
        errors, failed = 0, []
        for r in self.rewards:
            try:
                vals = self._call(r, examples, completions, completion_ids)
            except RewardError as err:
                if self.errors == "raise":
                    raise
                vals = [("failed", err.line())] * n
            for p, v in zip(parts, vals):
                if isinstance(v, tuple):  # this function's score of this sample is left out
                    errors += 1
                    p[FAILED] = p.get(FAILED, 0) + 1
                    if v[1] not in failed:
                        failed.append(v[1])
                    v = math.nan
                p[r.label] = v
        total = []
        for p in parts:
            got = [(p[r.label], r.weight) for r in self.rewards if not math.isnan(p[r.label])]
            total.append(sum(v * w for v, w in got) if got else math.nan)
        return Scored(total, parts, errors, failed)

    def _fail(self, r: Reward, err: Exception, ex: Example, completion: str, batch: int = 1) -> RewardError:
        where = f"in a batch of {batch}, the first sample: " if batch > 1 else "on sample: "
        msg = str(err).splitlines()[0] if str(err) else ""
        return RewardError(None, f"reward {r.label}", f"raised {type(err).__name__}{': ' + msg if msg else ''} "
                           f"{where}{_show(ex, completion)}", "--reward-errors skip to leave such scores out")

    def _call(self, r: Reward, examples: list[Example], completions: list[str], ids: list | None) -> list:
        if r.kind == TRL:
            return self._call_trl(r, examples, completions, ids)
        out = []
        for ex, c in zip(examples, completions):
            try:
                if r.kind == VERL:
                    kw = {"data_source": ex.columns.get("data_source"), "solution_str": c,
                          "ground_truth": ex.columns["reward_model"]["ground_truth"]}
                    if _takes(r.fn, "extra_info"):
                        kw["extra_info"] = ex.columns.get("extra_info")
                    v = r.fn(**kw)
                    v = v.get("score") if isinstance(v, dict) else v
                else:
                    v = r.fn(ex.prompt, c, ex.answer)
                out.append(_number(r, v, ex, c))
            except RewardError:
                raise
            except Exception as err:  # noqa: BLE001 (the user's function)
                e = self._fail(r, err, ex, c)
                if self.errors == "raise":
                    raise e from None
                out.append(("failed", e.line()))
        return out

    def _call_trl(self, r: Reward, examples: list[Example], completions: list[str], ids: list | None) -> list[float]:
        cols = {k: [ex.columns.get(k) for ex in examples] for k in dict.fromkeys(c for ex in examples for c in ex.columns)}
        if "answer" not in cols and any(ex.answer is not None for ex in examples):
            cols["answer"] = [ex.answer for ex in examples]
        comps = [[{"role": "assistant", "content": c}] if ex.chat else c for ex, c in zip(examples, completions)]
        params = inspect.signature(r.fn).parameters
        if ids is not None:
            cols["completion_ids"] = [list(x) for x in ids]
        if not any(p.kind == p.VAR_KEYWORD for p in params.values()):
            cols = {k: v for k, v in cols.items() if k in params}
        try:
            vals = r.fn(prompts=[ex.prompt for ex in examples], completions=comps, **cols)
        except Exception as err:  # noqa: BLE001 (the user's function)
            e = self._fail(r, err, examples[0], completions[0], len(examples))
            if self.errors == "raise":
                raise e from None
            return [("failed", e.line())] * len(examples)
        if not isinstance(vals, (list, tuple)) or len(vals) != len(examples):
            raise RewardError(None, f"reward {r.label}", f"returned {type(vals).__name__}"
                              + (f" of {len(vals)}" if isinstance(vals, (list, tuple)) else ""),
                              f"a list of {len(examples)} floats, one per completion")
        return [math.nan if v is None else _number(r, v, ex, c) for v, ex, c in zip(vals, examples, completions)]


def _takes(fn: Callable, name: str) -> bool:
    params = inspect.signature(fn).parameters
    return name in params or any(p.kind == p.VAR_KEYWORD for p in params.values())


def _number(r: Reward, v, ex: Example, completion: str) -> float:
    try:
        return float(v)
    except (TypeError, ValueError):
        raise RewardError(None, f"reward {r.label}", f"returned {v!r} on sample: {_show(ex, completion)}",
                          "a number") from None


def fill_unscored(rewards: list[float], group_size: int) -> list[float]:
    """Samples no reward function scored (every score left out): the mean of their group's scored
    samples (consecutive `group_size` rows), so GRPO gives them no advantage; 0 when none was scored."""
    out = list(rewards)
    for a in range(0, len(out), group_size):
        got = [r for r in out[a:a + group_size] if not math.isnan(r)]
        fill = sum(got) / len(got) if got else 0.0
        out[a:a + group_size] = [fill if math.isnan(r) else r for r in out[a:a + group_size]]
    return out
