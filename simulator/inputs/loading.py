"""Safe YAML loading into validated pydantic models, with one-line errors."""

from __future__ import annotations

import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any, Iterable, Iterator, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from simulator.errors import InputError, pydantic_error_to_input_error

M = TypeVar("M", bound=BaseModel)


MAX_YAML_ALIASES = 100  # a scenario or profile needs none or a few; an alias bomb needs thousands


class _UniqueKeyLoader(yaml.SafeLoader):
    """yaml's safe loader, refusing a mapping that repeats a key (yaml keeps the last one silently) and a document
    with more than ``MAX_YAML_ALIASES`` aliases (a 'billion laughs' document expands exponentially: refused before
    anything is constructed)."""

    def compose_node(self, parent, index):
        if self.check_event(yaml.events.AliasEvent):
            self._aliases = getattr(self, "_aliases", 0) + 1
            if self._aliases > MAX_YAML_ALIASES:
                mark = self.peek_event().start_mark
                raise yaml.composer.ComposerError(None, None, f"more than {MAX_YAML_ALIASES} aliases (*name): refused",
                                                  mark)
        return super().compose_node(parent, index)


def _unique_mapping(loader: _UniqueKeyLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    seen: set = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
        try:
            seen.add(key)
        except TypeError:
            pass  # unhashable keys: the mapping constructor reports them
    return loader.construct_mapping(node, deep=deep)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _unique_mapping)


def non_finite_path(obj: object, path: tuple = (), _seen: set | None = None) -> str | None:
    """Dotted path of the first NaN or infinite number in a parsed document, or None (a container shared through
    YAML aliases is walked once)."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return ".".join(map(str, path)) or "(top level)"
    if isinstance(obj, dict):
        items = obj.items()
    elif isinstance(obj, list):
        items = enumerate(obj)
    else:
        return None
    seen = set() if _seen is None else _seen
    if id(obj) in seen:
        return None
    seen.add(id(obj))
    for k, v in items:
        found = non_finite_path(v, (*path, k), seen)
        if found:
            return found
    return None


MAX_EXPANDED_VALUES = 1_000_000  # values of a document once its aliases are expanded (what validation will walk)


def expanded_size(obj: object, _memo: dict | None = None) -> int:
    """Number of values of a parsed document with every alias expanded, counted once per shared container
    (memoised by identity: linear in the document's text, however large its expansion)."""
    if not isinstance(obj, (dict, list)):
        return 1
    memo = {} if _memo is None else _memo
    if id(obj) in memo:
        return memo[id(obj)]
    memo[id(obj)] = 1  # a (YAML-impossible) cycle counts once
    vals = obj.values() if isinstance(obj, dict) else obj
    n = 1 + sum(expanded_size(v, memo) for v in vals)
    memo[id(obj)] = n
    return n


def read_yaml(path: str | Path) -> object:
    """A YAML file through the safe loader; duplicate keys, NaN and infinities are input errors."""
    p = Path(path)
    if not p.is_file():
        raise InputError(str(p), None, "file not found")
    try:
        with p.open("r", encoding="utf-8") as fh:
            data = yaml.load(fh, Loader=_UniqueKeyLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as e:
        mark, opened = getattr(e, "problem_mark", None), getattr(e, "context_mark", None)
        where = f"line {mark.line + 1}" if mark is not None else None
        context = getattr(e, "context", None)
        started = (f"; {context} at line {opened.line + 1}" if context and opened is not None and mark is not None
                   and opened.line != mark.line else "")  # an unclosed { or [ is noticed lines after it opens
        raise InputError(str(p), where, f"malformed YAML ({getattr(e, 'problem', None) or e}{started})") from None
    except UnicodeDecodeError:
        raise InputError(str(p), None, "not a UTF-8 text file") from None
    except RecursionError:
        raise InputError(str(p), None, "nested too deeply") from None
    if expanded_size(data) > MAX_EXPANDED_VALUES:
        raise InputError(str(p), None, f"expands to more than {MAX_EXPANDED_VALUES:,} values through YAML aliases (*name): refused")
    bad = non_finite_path(data)
    if bad:
        raise InputError(str(p), bad, "must be a finite number (got NaN or infinity)")
    return data


def unique_json_object(pairs: list[tuple[str, Any]]) -> dict:
    """``json.loads(..., object_pairs_hook=unique_json_object)``: a repeated key is a ValueError."""
    out: dict = {}
    for k, v in pairs:
        if k in out:
            raise ValueError(f"duplicate key {k!r}")
        out[k] = v
    return out


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


def temp_beside(path: str | Path) -> tuple[int, str]:
    """(fd, name) of a new temporary file in ``path``'s folder, to be renamed over ``path``: every atomic write of
    the project goes through here. ``mkstemp`` creates it 0600; the file gets the mode a plain ``open`` would
    give it (0666 less the umask), so reports and profiles are readable as the user's other files are."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    mask = os.umask(0)
    os.umask(mask)
    os.fchmod(fd, 0o666 & ~mask)
    return fd, tmp


def _refuse_non_regular(path: Path) -> None:
    """An existing device node, FIFO or socket is never replaced by a file (simulator.output_contract)."""
    if path.exists() and not path.is_file():
        raise InputError(str(path), None, "not a regular file (a folder, device, FIFO or socket): refusing to write "
                         "over it")


def replace_atomic(path: str | Path, write) -> Path:
    """Call ``write(tmp)`` on a temporary file beside ``path`` and rename it over ``path`` (a failed write leaves
    the previous file whole and no temporary behind): every atomic write of the project goes through here."""
    path = Path(path)
    _refuse_non_regular(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = temp_beside(path)
    except OSError as e:  # the folder cannot hold a file (read-only, /proc): say so of the path asked for
        raise InputError(str(path), None, f"cannot write here ({e.strerror or e})") from None
    os.close(fd)
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        Path(tmp).unlink(missing_ok=True)
    return path


def finite_or_none(obj: Any) -> Any:
    """``obj`` with every NaN or infinite float (numpy's too) replaced by None, recursively through dicts, lists
    and tuples: what strict JSON can hold (``null``), for :func:`json_text`."""
    if isinstance(obj, dict):
        return {k: finite_or_none(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [finite_or_none(v) for v in obj]
    if type(obj).__module__ == "numpy" and hasattr(obj, "tolist"):  # a numpy scalar or array: Python values
        return finite_or_none(obj.tolist())
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


def json_text(obj: Any, **dumps_kw) -> str:
    """``obj`` as strict JSON text (no NaN / Infinity tokens, which JSON does not have: ``null`` instead), with a
    final newline; ``dumps_kw`` as for :func:`json.dumps` (indent, default, sort_keys)."""
    return json.dumps(finite_or_none(obj), allow_nan=False, **dumps_kw) + "\n"


def write_atomic(path: str | Path, text: str) -> Path:
    """Write ``text`` to ``path`` via a temporary file in the same directory and os.replace."""

    def write(tmp: str) -> None:
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(text)

    return replace_atomic(path, write)


def save_figure_atomic(fig, path: str | Path, **savefig_kw) -> Path:
    """Save a matplotlib figure as PNG at ``path`` via a temporary file and os.replace (a failed save leaves
    the previous file whole)."""
    return replace_atomic(path, lambda tmp: fig.savefig(tmp, **{"dpi": 110, "bbox_inches": "tight", "format": "png",
                                                                 **savefig_kw}))
