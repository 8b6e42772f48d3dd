"""Reading YAML input files with one-line errors: `FILE: KEY: problem (expected)`.

Files are read with `yaml.safe_load` only; pydantic validation errors are reduced to the first
problem, named by its dotted key path.
"""

from __future__ import annotations

import difflib
import types
import typing
from pathlib import Path
from typing import TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError, ValidationInfo, field_validator
from pydantic_core import PydanticCustomError

from problems.errors import InputError

M = TypeVar("M", bound=BaseModel)


def key_path(loc: tuple) -> str:
    """('node_groups', 0, 'gpu') -> 'node_groups[0].gpu'."""
    key = ""
    for part in loc:
        if part == "[key]":  # pydantic's mark of a mapping's key (rather than its value) that is wrong
            continue
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
    if kind == "finite_number":
        return f"got {given!r}", "a finite number"
    if kind == NOT_A_BOOL:
        return msg, "a number, not true or false"
    if kind == "literal_error":
        return f"got {given!r}", msg.replace("Input should be ", "one of ")
    if kind == "value_error":
        return msg.removeprefix("Value error, "), None
    return msg, None


def _model_at(model: type[BaseModel] | None, loc: tuple) -> type[BaseModel] | None:
    """The pydantic model that holds the key at `loc` (list indices and mapping keys stepped
    over), or None where the path leaves the models."""
    ann = model
    for part in loc[:-1]:
        while ann is not None and not (isinstance(ann, type) and issubclass(ann, BaseModel)):
            args = [a for a in typing.get_args(ann) if a is not type(None)]
            origin = typing.get_origin(ann)
            if origin in (list, tuple, set, frozenset) and isinstance(part, int):
                ann, part = args[0] if args else None, None
                break
            if origin is dict:
                ann, part = args[-1] if args else None, None
                break
            ann = args[0] if len(args) == 1 else None  # Optional[X] -> X; a union of several: unknown
        if part is None:
            continue
        if not (isinstance(ann, type) and issubclass(ann, BaseModel)) or part not in ann.model_fields:
            return None
        ann = ann.model_fields[part].annotation
    while ann is not None and not (isinstance(ann, type) and issubclass(ann, BaseModel)):
        args = [a for a in typing.get_args(ann) if a is not type(None)]
        ann = args[-1] if args else None
    return ann


def _unknown_key(error: dict, errors: list[dict], model: type[BaseModel] | None) -> str:
    """'did you mean X?' with the nearest known key beside an unknown one (the keys of its model,
    or else the keys reported missing beside it), or the known keys when none is near."""
    loc = error["loc"]
    holder = _model_at(model, loc)
    known = (list(holder.model_fields) if holder is not None else
             [e["loc"][-1] for e in errors if e["type"] == "missing" and e["loc"][:-1] == loc[:-1]])
    near = difflib.get_close_matches(str(loc[-1]), [str(k) for k in known], n=1, cutoff=0.6)
    if near:
        return f"did you mean {near[0]}?"
    return f"known keys: {', '.join(map(str, known))}" if known else "remove it or check its spelling"


def validation_error(path: str | Path, err: ValidationError, model: type[BaseModel] | None = None) -> InputError:
    """The first problem, an unknown key before the rest: a misspelt key is also reported as its
    right spelling missing, and the misspelling is the cause."""
    errors = _without_branch_tags(err.errors())
    # a union (`model: str | ModelSpec`) reports a type mismatch for each branch the value is not of:
    # the problem is in the branch it is of, when that one reports something
    wrong_branch = [e for e in errors if e.get("branch") and e["type"].endswith("_type")]
    if len(wrong_branch) < len(errors):
        errors = [e for e in errors if e not in wrong_branch]
    first = next((e for e in errors if e["type"] == "extra_forbidden"), errors[0])
    problem, expected = _describe(first)
    if first["type"] == "extra_forbidden":
        expected = _unknown_key(first, errors, model)
    elif first in wrong_branch:
        others = [_describe(e)[1] for e in wrong_branch if e["loc"] == first["loc"] and e is not first]
        expected = " or ".join(dict.fromkeys([expected, *others]))
    return InputError(str(path), key_path(first["loc"]), problem, expected)


_TYPE_TAGS = {"str", "int", "float", "bool", "dict", "list", "none"}


def _without_branch_tags(errors: list[dict]) -> list[dict]:
    """pydantic names the union branch in an error's location ('model', 'ModelSpec', 'layers'): the
    key path a user wrote leaves it out; `branch` marks such errors."""
    models = set()
    todo = [BaseModel]
    while todo:
        for sub in todo.pop().__subclasses__():
            models.add(sub.__name__)
            todo.append(sub)
    out = []
    for e in errors:
        loc = tuple(part for i, part in enumerate(e["loc"])
                    if not (i and isinstance(part, str) and (part in models or part in _TYPE_TAGS)))
        out.append({**e, "loc": loc, "branch": len(loc) < len(e["loc"])})
    return out


def read_yaml_mapping(path: str | Path, what: str) -> dict:
    """Load a YAML file that must hold a mapping; `what` says what the file should be."""
    path = Path(path)
    if path.is_dir():
        raise InputError(str(path), None, "is a directory", f"a file: {what}")
    if not path.is_file():
        raise InputError(str(path), None, "no such file", what)
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        reason = getattr(err, "problem", None) or "syntax error"
        raise InputError(str(path), "<root>", f"invalid YAML{where}: {reason}", what) from None
    if data is None:  # nothing but whitespace and comments
        raise InputError(str(path), None, "the file is empty", what)
    if not isinstance(data, dict):
        raise InputError(str(path), "<root>", f"got {type(data).__name__}", f"a mapping: {what}")
    return data


def load_model(path: str | Path, model: type[M], what: str, context: dict | None = None) -> M:
    data = read_yaml_mapping(path, what)
    try:
        return model.model_validate(data, context=context)
    except ValidationError as err:
        raise validation_error(path, err, model) from None


# -- booleans where a number is expected ------------------------------------------------------------
# pydantic's lax mode reads true as 1 and false as 0 for int and float fields: `nodes: true` would be one
# node. Strict mode would refuse it but also the YAML lists that tuple fields take, so the spec models
# refuse booleans themselves, for every field whose annotation wants a number and not a bool.
NOT_A_BOOL = "number_not_bool"


def _alternatives(ann) -> tuple:
    """The types an annotation admits: the members of a union (Optional included), Annotated unwrapped."""
    if typing.get_origin(ann) is typing.Annotated:
        return _alternatives(typing.get_args(ann)[0])
    if typing.get_origin(ann) in (typing.Union, types.UnionType):
        return tuple(a for arg in typing.get_args(ann) for a in _alternatives(arg))
    return (ann,)


def _bool_at(ann, value, key: str = "") -> tuple[str, bool] | None:
    """(where, the boolean) of a boolean in `value` that stands for a number `ann` wants (where: '' for
    the value itself, '.k' or '[i]' within a mapping or list); None where there is none."""
    alts = _alternatives(ann)
    if isinstance(value, bool):
        return (key, value) if bool not in alts and any(a in (int, float) for a in alts) else None
    for a in alts:
        origin, args = typing.get_origin(a), typing.get_args(a)
        if isinstance(value, dict) and origin is dict and len(args) == 2:
            items = ((f"{key}.{k}", args[1], v) for k, v in value.items())
        elif isinstance(value, (list, tuple)) and origin in (list, tuple) and args:
            items = ((f"{key}[{i}]", args[0] if origin is list or args[-1] is Ellipsis or i >= len(args) else args[i], v)
                     for i, v in enumerate(value))
        else:
            continue
        for where, inner, v in items:
            hit = _bool_at(inner, v, where)
            if hit is not None:
                return hit
    return None


class Spec(BaseModel):
    """Base of the models read from input files: unknown keys and booleans given for numbers refused."""

    model_config = ConfigDict(extra="forbid")

    @field_validator("*", mode="before")
    @classmethod
    def _no_bool_for_a_number(cls, value, info: ValidationInfo):
        field = cls.model_fields.get(info.field_name) if info.field_name else None
        hit = None if field is None else _bool_at(field.annotation, value)
        if hit is not None:
            where, given = hit
            raise PydanticCustomError(NOT_A_BOOL, f"{where.lstrip('.') + ': ' if where else ''}got {str(given).lower()}")
        return value
