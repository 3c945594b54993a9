"""Safe YAML loading into validated pydantic models, with one-line errors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterable, Iterator, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from simulator.errors import InputError, pydantic_error_to_input_error

M = TypeVar("M", bound=BaseModel)


def read_yaml(path: str | Path) -> object:
    p = Path(path)
    if not p.is_file():
        raise InputError(str(p), None, "file not found")
    try:
        with p.open("r", encoding="utf-8") as fh:
            return yaml.safe_load(fh)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark is not None else None
        raise InputError(str(p), where, f"malformed YAML ({getattr(e, 'problem', None) or e})") from None
    except UnicodeDecodeError:
        raise InputError(str(p), None, "not a UTF-8 text file") from None


def validate_model(data: object, model: type[M], file: str | Path | None) -> M:
    if not isinstance(data, dict):
        raise InputError(str(file) if file else None, None, f"expected a mapping at the top level, got {type(data).__name__}")
    try:
        return model.model_validate(data)
    except ValidationError as e:
        raise pydantic_error_to_input_error(str(file) if file else None, e) from None


def load_yaml_model(path: str | Path, model: type[M]) -> M:
    return validate_model(read_yaml(path), model, path)


def iter_jsonl(lines: Iterable[str], where: str) -> Iterator[tuple[int, Any]]:
    """(line number, parsed value) of every non-blank JSONL line; a bad line is an
    :class:`InputError` located ``where:N`` ("not valid JSON (...)")."""
    for i, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        try:
            yield i, json.loads(raw)
        except json.JSONDecodeError as e:
            raise InputError(f"{where}:{i}", None, f"not valid JSON ({e.msg})") from None
