"""Every shipped profile is what the command in its header writes today.

A profile under ``simulator/profiles/`` is fitted, never edited by hand, and its header names the ``specsim`` command
that fitted it. That command is rerun here (its ``--out`` pointed at a scratch folder) and its output compared with
the committed file, dates and provenance prose aside: a fitter, a model or a data change that would move a shipped
profile fails here, naming the profile and the field, until the profile is regenerated with that command (and the
figures that read it rerun). Commands whose inputs are in the shared data skip where it is absent."""

from __future__ import annotations

import contextlib
import io
import math
import re
import shlex
from pathlib import Path

import pytest
import yaml

from simulator.paths import REPO, SHARED_DATA
from specsim_cli.main import main

PROFILES = REPO / "simulator" / "profiles"
HEADER = "Regenerate (do not edit by hand):"
# A rerun on another machine or library build (BLAS, scipy) stops a fit's optimiser a hair away: fitted values move by
# ~1e-4 relative, their standard errors (three significant digits) and the residual diagnostics (log-ratio quantiles,
# dimensionless, near zero) by their last digit. A model, fitter or data change moves them by far more.
REL_TOL = 1e-3  # fitted values
STDERR_REL_TOL = 2e-2  # a parameter's standard error
QUANTILE_ABS_TOL = 1e-4  # log-ratio quantiles of the residuals
NUMBER = re.compile(r"[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?")


def header_command(path: Path) -> list[str]:
    """The regenerate command the profile's header gives, as words."""
    lines = path.read_text().splitlines()
    for i, line in enumerate(lines):
        if line.startswith("#") and line.rstrip().endswith(HEADER):
            return shlex.split(lines[i + 1].lstrip("#").strip())
    raise AssertionError(f"{path.name}: no '{HEADER}' line in its header")


def commands() -> dict[tuple[str, ...], list[Path]]:
    """Each distinct command with the committed profiles it writes."""
    out: dict[tuple[str, ...], list[Path]] = {}
    for p in sorted(PROFILES.glob("*.yaml")):
        out.setdefault(tuple(header_command(p)), []).append(p)
    return out


def retargeted(words: list[str], scratch: Path) -> list[str]:
    """The command without the ``specsim`` word, its ``--out`` in ``scratch`` (a folder stays a folder)."""
    assert words[0].endswith("specsim"), f"not a specsim command: {shlex.join(words)} (the only entry point)"
    argv = list(words[1:])
    i = argv.index("--out")
    target = Path(argv[i + 1])
    argv[i + 1] = str(scratch / target.name) if target.suffix in (".yaml", ".yml") else str(scratch)
    return [w for w in argv if w != "--force"]


def comparable(x, key: str = ""):
    """The profile's data less what a rerun changes by design: dates, the command line it ran with, and the
    ``source`` texts (provenance prose that names the inputs by the path they resolve to on this machine)."""
    if isinstance(x, dict):
        return {k: comparable(v, k) for k, v in x.items() if k not in ("date", "command", "source")}
    if isinstance(x, list):
        return [comparable(v, key) for v in x]
    if isinstance(x, str) and "shared/data/" in x:  # the shared data by whatever path reaches it here
        return x[x.index("shared/data/"):]
    return x


def close(a: float, b: float, where: str) -> bool:
    """Equal within what a rerun elsewhere moves (the tolerances above, by the field's kind)."""
    last = re.sub(r"(\[\d+\])+$", "", where).rsplit(".", 1)[-1]  # the field, less a list index
    if "quantiles" in last:
        return math.isclose(a, b, rel_tol=REL_TOL, abs_tol=QUANTILE_ABS_TOL)
    return math.isclose(a, b, rel_tol=STDERR_REL_TOL if last == "stderr" else REL_TOL, abs_tol=1e-12)


def same_text(a: str, b: str, where: str) -> bool:
    """Equal words; numbers written into the text (a provenance line's fitted sigma) within the tolerance."""
    na, nb = NUMBER.findall(a), NUMBER.findall(b)
    return (NUMBER.sub("#", a) == NUMBER.sub("#", b) and len(na) == len(nb)
            and all(x == y or close(float(x), float(y), where) for x, y in zip(na, nb)))


def differences(a, b, where: str = "") -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        return [d for k in sorted(set(a) | set(b), key=str)
                for d in (differences(a.get(k), b.get(k), f"{where}.{k}" if where else str(k)))]
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in differences(x, y, f"{where}[{i}]")]
    numbers = (int, float)
    if isinstance(a, numbers) and isinstance(b, numbers) and not isinstance(a, bool) and not isinstance(b, bool):
        return [] if close(a, b, where) else [f"{where}: {a} committed, {b} today"]
    if isinstance(a, str) and isinstance(b, str):
        return [] if same_text(a, b, where) else [f"{where}: {a[:120]!r} committed, {b[:120]!r} today"]
    return [] if a == b else [f"{where}: {str(a)[:120]!r} committed, {str(b)[:120]!r} today"]


def test_every_profile_names_a_specsim_command():
    found = commands()
    assert found, "no profile under simulator/profiles"
    for words, paths in found.items():
        assert words[0].endswith("specsim"), f"{[p.name for p in paths]}: header command is not specsim's: {words}"
        assert "--out" in words, f"{[p.name for p in paths]}: header command has no --out"


@pytest.mark.parametrize("words", list(commands()), ids=lambda w: " ".join(w[1:3]) + " " + Path(
    w[w.index("--out") + 1]).name if "--out" in w else " ".join(w[:3]))
def test_profile_is_what_its_command_writes(words, tmp_path, monkeypatch):
    missing = [w for w in words if w.startswith("../shared") and not (REPO / w).exists()]
    if missing:
        pytest.skip(f"shared data absent: {missing[0]}")
    monkeypatch.chdir(REPO)
    argv = retargeted(list(words), tmp_path)
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()) as err:
        rc = main(argv)
    if rc != 0 and not SHARED_DATA.is_dir():  # a fitter that reads the shared data by default (fit mixture)
        pytest.skip(f"shared data absent: {shlex.join(words)} exited {rc}")
    assert rc == 0, f"{shlex.join(words)} exited {rc}: {err.getvalue()[-500:]}"
    for committed in commands()[words]:
        fresh = tmp_path / committed.name
        assert fresh.exists(), f"{shlex.join(words)} did not write {committed.name}"
        diff = differences(comparable(yaml.safe_load(committed.read_text())),
                           comparable(yaml.safe_load(fresh.read_text())))
        assert not diff, (f"{committed.relative_to(REPO)} is not what its header's command writes today "
                          f"(regenerate it: {shlex.join([w for w in words if w != '--force'])} --force): " + "; ".join(diff[:6])
                          + (f"; ... {len(diff) - 6} more" if len(diff) > 6 else ""))


@pytest.mark.parametrize("a, b, where, same", [
    (317.638, 317.67, "steps_per_request.base.median", True),  # 1e-4: a fit's optimiser elsewhere
    (317.638, 318.3, "steps_per_request.base.median", False),  # 0.2%: a change
    (3.97e-05, 4.1e-05, "seq_overhead_s.value", False),  # a small parameter is compared relatively, never absolutely
    (2.31e-05, 2.32e-05, "layer_overhead_s.stderr", True),
    (2.31e-05, 2.6e-05, "layer_overhead_s.stderr", False),
    (0.00071, 0.00072, "fit.per_op.spec_generate.log_ratio_quantiles[53]", True),
    (0.00071, 0.0011, "fit.per_op.spec_generate.log_ratio_quantiles[53]", False),
    ("sigma 0.7171 fitted", "sigma 0.7172 fitted", "provenance.method", True),
    ("sigma 0.7171 fitted", "sigma 0.73 fitted", "provenance.method", False),
    ("sigma 0.7171 fitted", "sigma 0.7171 refitted", "provenance.method", False),
])
def test_the_comparison_tolerates_a_rerun_elsewhere_not_a_change(a, b, where, same):
    assert (differences(a, b, where) == []) is same
