"""Reading YAML input files with one-line errors: `FILE: KEY: problem (expected)`.

Files are read with `yaml.safe_load` only; pydantic validation errors are reduced to the first
problem, named by its dotted key path.
"""

from __future__ import annotations

from pathlib import Path
from typing import TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from problems.errors import InputError

M = TypeVar("M", bound=BaseModel)


def key_path(loc: tuple) -> str:
    """('node_groups', 0, 'gpu') -> 'node_groups[0].gpu'."""
    key = ""
    for part in loc:
        if isinstance(part, int):
            key += f"[{part}]"
        else:
            key += f".{part}" if key else str(part)
    return key or "<root>"


def _describe(error: dict) -> tuple[str, str | None]:
    kind, msg, ctx = error["type"], error["msg"], error.get("ctx") or {}
    given = error.get("input")
    if kind == "missing":
        return "missing", "required key"
    if kind == "extra_forbidden":
        return "unknown key", "remove it or check its spelling"
    if kind in ("greater_than", "greater_than_equal", "less_than", "less_than_equal"):
        bound = {"greater_than": ">", "greater_than_equal": ">=", "less_than": "<", "less_than_equal": "<="}[kind]
        limit = next(iter(ctx.values()), "?")
        return f"got {given!r}", f"a number {bound} {limit}"
    if kind.endswith("_type") or kind.endswith("_parsing"):
        wanted = kind.split("_")[0]
        names = {"int": "an integer", "float": "a number", "bool": "true or false", "string": "a string",
                 "dict": "a mapping", "list": "a list", "model": "a mapping"}
        return f"got {given!r}", names.get(wanted, msg)
    if kind == "literal_error":
        return f"got {given!r}", msg.replace("Input should be ", "one of ")
    if kind == "value_error":
        return msg.removeprefix("Value error, "), None
    return msg, None


def validation_error(path: str | Path, err: ValidationError) -> InputError:
    first = err.errors()[0]
    problem, expected = _describe(first)
    return InputError(str(path), key_path(first["loc"]), problem, expected)


def read_yaml_mapping(path: str | Path, what: str) -> dict:
    """Load a YAML file that must hold a mapping; `what` says what the file should be."""
    path = Path(path)
    if not path.is_file():
        raise InputError(str(path), None, "no such file", what)
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        reason = getattr(err, "problem", None) or "syntax error"
        raise InputError(str(path), "<root>", f"invalid YAML{where}: {reason}", what) from None
    if not isinstance(data, dict):
        raise InputError(str(path), "<root>", f"got {type(data).__name__}", f"a mapping: {what}")
    return data


def load_model(path: str | Path, model: type[M], what: str, context: dict | None = None) -> M:
    data = read_yaml_mapping(path, what)
    try:
        return model.model_validate(data, context=context)
    except ValidationError as err:
        raise validation_error(path, err) from None
