"""Dotted engine versions as numbers, the one rule every catalog and fit orders them by.

``"0.11"`` and ``"0.11.0"`` are the same release (a version is padded to at least three parts), ``"0.10"`` comes
after ``"0.9"``, and a local build label (``"0.11.0+cu128"``) is the release it was built from. Anything that is not dotted numbers is refused with an :class:`~simulator.errors.InputError` naming
where it came from, never ordered by a guess."""

from __future__ import annotations

from simulator.errors import InputError

PARTS = 3  # a version's numbers are padded with zeros to at least this many


def version_key(version: str, source: str | None = None, field: str = "version") -> tuple[int, ...]:
    """``version`` as a tuple of at least three numbers ("0.14" -> (0, 14, 0)); an InputError naming ``source``
    (a file, or None for the caller's own input) and ``field`` for anything that is not dotted numbers."""
    parts = str(version).split("+")[0].split(".")
    if not all(p.isdigit() for p in parts):
        raise InputError(source, field, f"version {version!r} is not dotted numbers (e.g. 0.11 or 0.14.0)")
    numbers = tuple(int(p) for p in parts)
    return numbers + (0,) * (PARTS - len(numbers))


def folder_version(path) -> tuple[int, ...]:
    """The version a kernel-table folder is named by (``.../vllm/0.14.0/table.parquet`` -> (0, 14, 0): the file's
    parent folder), errors naming that folder; the sort key of a table's versions."""
    return version_key(path.parent.name, str(path.parent))
