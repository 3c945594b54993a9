"""``specsim show``: a scenario resolved with every default filled in, or a profile, each cost parameter with its kind
(calibrated, prior, datasheet, transferred or rejected). Registered on the simulator's app by ``simulator/cli.py``."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import typer

from simulator.errors import InputError


def show(what: str = typer.Argument(..., metavar="SCENARIO_OR_PROFILE",
                                    help="scenario or profile: a YAML path, a scenario name (specsim list scenarios) or "
                                    "a profile name (specsim list profiles), e.g. cpu-vllm032 or cost_cpu-vllm032"),
         section: Optional[str] = typer.Option(None, "--section",
                                               help="print only this top-level section (e.g. hardware, workload); "
                                               "without it, the whole document and a list of its sections")):
    """Print the resolved scenario with every default filled in, or a profile (YAML), each cost parameter with its
    kind first: calibrated, prior, datasheet, transferred or rejected.

    Example: specsim show reference-a6000-qwq32b --section hardware
    """
    import yaml

    kind, path = _show_target(what)
    if kind == "scenario":
        from simulator.inputs.scenario import load_scenario

        rs = load_scenario(path)
        d = rs.to_dict()
        note = rs.workload_note()
        if note:  # a borrowed workload is said where the scenario is shown
            print(f"# note: {note}")
        if section is None or section == "resolved":
            for h in rs.hardware_names:
                prof = rs.cost_profile(h)
                print("\n".join(_kind_lines(f"cost parameters on {h} (profile {prof.name})",
                                             prof.model_dump(mode="json"))))
    else:
        d = _load_profile_doc(kind, path)
        print("\n".join(_kind_lines(f"{kind} profile {d.get('name', path.stem)} ({path})", d)))
    if section is not None:
        if section not in d:
            raise InputError(None, "--section", f"unknown section {section!r}; choose from {', '.join(d)}")
        d = {section: d[section]}
    print(yaml.safe_dump(d, sort_keys=False, width=120), end="")
    if section is None:
        print(f"# sections: {', '.join(d)} (specsim show {what} --section NAME prints one)", file=sys.stderr)


_PROFILE_KINDS = ("cost", "gpu", "workload", "accuracy")  # paths.profile_dir(KIND)/KIND_NAME.yaml (specsim list profiles)
_KIND_MEANING = ("calibrated: fitted on measured runs; prior: an engineering figure, not fitted; datasheet: from the "
                 "hardware's datasheet;", "transferred: from other profiled hardware; rejected: fitted outside its "
                 "physical range, not a calibration (specsim validate runs refuses it without --allow-implausible)")


def _profile_kind(doc: object) -> str | None:
    """Which profile a parsed YAML document is (None: not a profile, so a scenario)."""
    if not isinstance(doc, dict):
        return None
    if isinstance(doc.get("params"), dict) and "cost_profile" in doc:
        return "gpu"
    if any(_is_param(v) for v in doc.values()):
        return "cost"
    if "entries" in doc:
        return "accuracy"
    if "steps_per_request" in doc or "problems" in doc:
        return "workload"
    return None


def _show_target(ref: str) -> tuple[str, Path]:
    """(``scenario`` or a profile kind, file) for ``specsim show REF``: a path (told apart by its content), else a
    scenario name, else a profile name with or without its ``KIND_`` prefix."""
    from simulator.inputs.loading import read_yaml
    from simulator.paths import SCENARIOS_DIR, profile_dir

    p = Path(ref)
    if p.is_file():
        return _profile_kind(read_yaml(p)) or "scenario", p
    if (SCENARIOS_DIR / (ref if ref.endswith(".yaml") else f"{ref}.yaml")).is_file():
        return "scenario", SCENARIOS_DIR / (ref if ref.endswith(".yaml") else f"{ref}.yaml")
    stem = ref[:-5] if ref.endswith(".yaml") else ref
    found = [(k, profile_dir(k) / f"{stem}.yaml") for k in _PROFILE_KINDS if stem.startswith(f"{k}_")]
    found = [(k, f) for k, f in found if f.is_file()] or \
        [(k, profile_dir(k) / f"{k}_{stem}.yaml") for k in _PROFILE_KINDS if (profile_dir(k) / f"{k}_{stem}.yaml").is_file()]
    if len(found) > 1:
        raise InputError(ref, None, "names more than one profile: say which, "
                         + " or ".join(f.stem for _, f in found))
    if not found:
        if Path(ref).is_dir():
            raise InputError(ref, None, "a folder: give a scenario or profile YAML file, or a name (specsim list "
                             "scenarios, specsim list profiles)")
        raise InputError(ref, None, "no such file, scenario or profile (specsim list scenarios, specsim list profiles)")
    return found[0]


def _load_profile_doc(kind: str, path: Path) -> dict:
    """The profile as the simulator reads it (checked, defaults filled in); a GPU kernel profile as stored (its
    loader is calibrate's)."""
    from simulator.inputs.loading import read_yaml

    if kind == "cost":
        from simulator.cost.cost_profile import load_profile

        return load_profile(path).model_dump(mode="json")
    if kind == "workload":
        from simulator.inputs.workload import load_workload

        return load_workload(path).model_dump(mode="json")
    if kind == "accuracy":
        from simulator.inputs.accuracy import load_accuracy_profile

        return load_accuracy_profile(path).model_dump(mode="json")
    d = read_yaml(path)
    if not isinstance(d, dict):
        raise InputError(str(path), None, "expected a mapping")
    return d


def _is_param(v: object) -> bool:
    return isinstance(v, dict) and "value" in v and "kind" in v


def _kind_lines(title: str, doc: dict) -> list[str]:
    """YAML comment lines: every parameter of ``doc`` (a ``{value, kind, ...}`` mapping at the top level or under
    ``params``) with its value, kind and stderr; a value above its physical maximum is ``rejected`` whatever its kind."""
    params = {n: v for n, v in doc.items() if _is_param(v)}
    if isinstance(doc.get("params"), dict):
        params.update({n: v for n, v in doc["params"].items() if _is_param(v)})
    if isinstance(doc.get("moe_kind_ratios"), dict):  # the fused-MoE kernel kinds of the table the engine runs
        params.update({f"moe_kind_ratios.{n}": v for n, v in doc["moe_kind_ratios"].items() if _is_param(v)})
    if not params:
        prov = doc.get("provenance") if isinstance(doc.get("provenance"), dict) else {}
        return [f"# {title}: no per-parameter kinds recorded; provenance kind {prov.get('kind', '?')} "
                "(provenance.method says which figures are fitted and which are priors)"]
    width = max(len(n) for n in params)
    out = [f"# {title}: each parameter's kind", f"#   {'parameter':<{width}}  {'value':>12}  {'kind':<11}  stderr"]
    from simulator.cost.cost_profile import physical_max

    ceiling = physical_max(doc.get("hardware") if isinstance(doc.get("hardware"), str) else None)
    for n, v in params.items():
        kind, note = str(v["kind"]), ""
        hi = ceiling.get(n)
        val = v["value"]
        if hi is not None and isinstance(val, (int, float)) and val > hi and kind != "rejected":
            kind, note = "rejected", f"  (written as {v['kind']}: {val:.4g} > {hi:.3g}, its physical maximum)"
        elif kind == "rejected":
            note = f"  ({v.get('source', '')})" if v.get("source") else ""
        se = v.get("stderr")
        val_s = f"{val:.6g}" if isinstance(val, (int, float)) else str(val)
        out.append(f"#   {n:<{width}}  {val_s:>12}  {kind:<11}  {'' if se is None else f'{se:.3g}'}{note}".rstrip())
    out += [f"#   {line}" for line in _KIND_MEANING]
    return out
