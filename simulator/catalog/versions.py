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


def nearest_version(version: str, versions, source: str | None = None, field: str = "version") -> str | None:
    """The one rule for which of ``versions`` (catalog entries, fitted versions) stands for ``version``: itself if
    there, else the nearest release of the same major version by minor number (a tie: the older), else -- no entry of
    that major -- the newest at or below it, else the oldest above it; None when ``versions`` is empty. vLLM 0.10 is
    0.11's V1 engine, not 0.5's: nearness, not "the newest at or below", is what a fitted term transfers by."""
    versions = list(versions)
    if not versions:
        return None
    if version in versions:
        return version
    want = version_key(version, source, field)
    keys = {v: version_key(v, source, field) for v in versions}
    same = [v for v in versions if keys[v][0] == want[0]]
    if same:
        return min(same, key=lambda v: (abs(keys[v][1] - want[1]), keys[v]))
    below = [v for v in versions if keys[v] <= want]
    return max(below, key=keys.get) if below else min(versions, key=keys.get)
