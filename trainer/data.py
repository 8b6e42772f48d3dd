"""A user's prompts: JSONL and parquet files and local Hugging Face `datasets` directories, in the
column layouts TRL's and verl's users already have.

- TRL: `prompt` (a string, or chat messages `[{"role", "content"}, ...]`) or `messages` (a
  conversation; trailing assistant turns are dropped, the rest is the prompt); every other column
  goes to the reward functions by name (TRL's `f(prompts, completions, **columns)`).
- verl: `data_source`, `prompt` as chat messages, `reward_model: {"style", "ground_truth"}`,
  `extra_info` (verl's `compute_score(data_source, solution_str, ground_truth, extra_info)`).
- mosearch's first format: `prompt` and `answer` strings (the reward `f(prompt, completion, answer)`).

A row's answer, for the exact-match default and the three-argument reward, is its `answer` column,
else verl's `reward_model.ground_truth`. The held-out split: rows whose `split` (or verl's
`extra_info.split`) says heldout/test/validation, a DatasetDict's test/validation split, else a
seeded 10% of the rows. Message prompts reach the model through the tokenizer's chat template
(`render`), or as their contents joined by newlines when the template is turned off.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from pathlib import Path

from problems.errors import InputError

FORMATS = ("jsonl", "parquet", "hf")
HELD_SPLITS = ("heldout", "test", "validation", "val", "eval")
EXPECTED = "a JSONL or parquet file or a Hugging Face datasets directory"


@dataclass
class Example:
    """One prompt: its text or chat messages, and every other column of its row."""

    prompt: str | list[dict]
    columns: dict = field(default_factory=dict)

    @property
    def answer(self) -> str | None:
        """The `answer` column, else verl's `reward_model.ground_truth`; None when the row has neither."""
        if self.columns.get("answer") is not None:
            return str(self.columns["answer"])
        rm = self.columns.get("reward_model")
        if isinstance(rm, dict) and rm.get("ground_truth") is not None:
            return str(rm["ground_truth"])
        return None

    @property
    def chat(self) -> bool:
        return not isinstance(self.prompt, str)

    @property
    def text(self) -> str:
        """The prompt as plain text: messages' contents joined by newlines."""
        return self.prompt if isinstance(self.prompt, str) else "\n".join(m["content"] for m in self.prompt)


def parse_source(name: str) -> tuple[str, Path] | None:
    """`jsonl:PATH`, `parquet:PATH`, `hf:DIR`, or a bare path whose suffix or contents tell the format;
    None when `name` names no data (a built-in task)."""
    for fmt in FORMATS:
        if name.startswith(fmt + ":"):
            return fmt, Path(name[len(fmt) + 1:])
    path = Path(name)
    if path.suffix in (".jsonl", ".json"):
        return "jsonl", path
    if path.suffix == ".parquet":
        return "parquet", path
    if path.is_dir():
        return "hf", path
    return None


def _rows_jsonl(path: Path) -> list[tuple[str, dict]]:
    rows = []
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as err:
            raise InputError(str(path), f"line {n}", f"invalid JSON: {err.msg}", "one JSON object per line") from None
        if not isinstance(row, dict):
            raise InputError(str(path), f"line {n}", "not a JSON object", "one object per line")
        rows.append((f"line {n}", row))
    return rows


def _rows_parquet(path: Path) -> list[tuple[str, dict]]:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise InputError(str(path), None, "reading parquet needs pyarrow", "pip install pyarrow (./setup.sh installs it)") from None
    try:
        table = pq.read_table(path)
    except Exception as err:  # noqa: BLE001 (pyarrow raises several types for a bad file)
        raise InputError(str(path), None, f"not a readable parquet file: {str(err).splitlines()[0]}", EXPECTED) from None
    return [(f"row {i}", r) for i, r in enumerate(table.to_pylist())]


def _rows_hf(path: Path) -> tuple[list[tuple[str, dict]], list[tuple[str, dict]] | None]:
    """A `save_to_disk` directory: a Dataset, or a DatasetDict (its train split, and test/validation held out)."""
    if not any((path / f).is_file() for f in ("dataset_info.json", "state.json", "dataset_dict.json")):
        raise InputError(str(path), None, "not a Hugging Face datasets directory (no dataset_info.json, state.json "
                         "or dataset_dict.json)", EXPECTED)
    try:
        from datasets import Dataset, load_from_disk
    except ImportError:
        raise InputError(str(path), None, "reading a datasets directory needs the `datasets` package",
                         "pip install datasets (./setup.sh installs it)") from None
    ds = load_from_disk(str(path))
    if isinstance(ds, Dataset):
        return [(f"row {i}", r) for i, r in enumerate(ds.to_list())], None
    if "train" not in ds:
        raise InputError(str(path), "splits", f"no train split (has {', '.join(ds)})", "a DatasetDict with a train split")
    held = next((s for s in HELD_SPLITS if s in ds), None)
    rows = [(f"train row {i}", r) for i, r in enumerate(ds["train"].to_list())]
    return rows, [(f"{held} row {i}", r) for i, r in enumerate(ds[held].to_list())] if held else None


def _messages(value, where: tuple[str, str]) -> list[dict] | None:
    """Chat messages as a list of {role, content} strings; None if `value` is not a list."""
    if not isinstance(value, list):
        return None
    for i, m in enumerate(value):
        if not (isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)):
            raise InputError(where[0], f"{where[1]}[{i}]", "not a chat message",
                             'a {"role": ..., "content": ...} object with string values')
    return [{"role": m["role"], "content": m["content"]} for m in value]


def example(row: dict, file: str, where: str) -> Example:
    """One row in TRL's, verl's or mosearch's layout."""
    cols = {k: v for k, v in row.items() if k not in ("prompt", "messages")}
    prompt = row.get("prompt")
    if isinstance(prompt, str):
        return Example(prompt, cols)
    msgs = _messages(prompt, (file, f"{where}.prompt"))
    if msgs is None and "messages" in row:  # TRL's conversational rows: the turns before the answer
        msgs = _messages(row["messages"], (file, f"{where}.messages"))
        while msgs and msgs[-1]["role"] == "assistant":
            msgs.pop()
    if not msgs:
        raise InputError(file, f"{where}.prompt", "missing, empty or not a string or chat messages",
                         "a prompt string, or chat messages in `prompt` (verl, TRL) or `messages` (TRL)")
    return Example(msgs, cols)


def _split_of(row: dict) -> str | None:
    split = row.get("split")
    if split is None and isinstance(row.get("extra_info"), dict):
        split = row["extra_info"].get("split")
    if not isinstance(split, str):
        return None
    return "heldout" if split.lower() in HELD_SPLITS else "train" if split.lower() == "train" else None


def load_examples(name: str, seed: int, heldout_frac: float = 0.1) -> tuple[list[Example], list[Example]]:
    """(train, held-out) examples of a data source `parse_source` recognises."""
    fmt, path = parse_source(name) or (None, Path(name))
    if fmt == "hf":
        if not path.is_dir():
            raise InputError(str(path), None, "no such directory", EXPECTED)
        rows, held_rows = _rows_hf(path)
    else:
        if not path.is_file():
            raise InputError(str(path), None, "no such file", EXPECTED)
        rows, held_rows = (_rows_parquet(path) if fmt == "parquet" else _rows_jsonl(path)), None
    train, held, unsplit = [], [], []
    for where, row in rows:
        ex = example(row, str(path), where)
        {"train": train, "heldout": held}.get(_split_of(row) if held_rows is None else "train", unsplit).append(ex)
    if held_rows is not None:
        held = [example(r, str(path), w) for w, r in held_rows]
    random.Random(seed).shuffle(unsplit)
    cut = int(round(len(unsplit) * heldout_frac)) if not held else 0
    held += unsplit[:cut]
    train += unsplit[cut:]
    if not train:
        raise InputError(str(path), None, "no training prompts", "at least one row")
    return train, held or train[:1]


def columns(examples: list[Example]) -> list[str]:
    """The column names the rows have (the prompt's excepted), in first-seen order."""
    return list(dict.fromkeys(k for ex in examples for k in ex.columns))


def render(examples: list[Example], tok, chat_template: bool, source: str) -> list[list[int]]:
    """Each prompt's token ids: a text prompt as BOS + its tokens (as the built-in tasks are encoded);
    chat messages through the tokenizer's chat template (which adds what special tokens it wants),
    or, with `chat_template` off, as the text of their contents. A prompt that encodes to no token is
    an error (a broken tokenizer would reach the engines as empty prompts)."""
    bos = [tok.bos_token_id] if tok.bos_token_id is not None else []
    if chat_template and any(ex.chat for ex in examples) and not getattr(tok, "chat_template", None):
        raise InputError(source, "prompt", "the prompts are chat messages and the model's tokenizer has no chat template",
                         "a tokenizer with a chat_template, or --no-chat-template to send the messages' text")
    out = []
    for i, ex in enumerate(examples):
        if ex.chat and chat_template:
            text = tok.apply_chat_template(ex.prompt, tokenize=False, add_generation_prompt=True)
            ids = tok.encode(text, add_special_tokens=False)
        else:
            ids = bos + tok.encode(ex.text, add_special_tokens=False)
        if len(ids) <= len(bos) and not (ex.chat and chat_template and ids):
            raise InputError(source, f"prompt {i}", f"encodes to no tokens: {ex.text[:60]!r}",
                             "a non-empty prompt and a tokenizer that encodes it")
        out.append(ids)
    return out
