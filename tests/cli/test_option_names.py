"""One name and one type per concept across the command tree (issue 30, "Help users read").

Walks every command of ``full_app()`` and checks the conventions of docs/cli.md:

- a concept has one primary option name: ``--gamma`` (never ``--gammas``), ``--threshold``, ``--context``, ...; an
  older name survives only as a secondary name of the same option (``--gamma/--gammas``), so that the commands the
  committed reports recorded still run;
- ``--gamma`` and ``--threshold`` are, in every command that sweeps them, lists parsed by the one parser
  (``simulator.option_values.IntList``: a value, LO-HI or a comma list; repeatable), and in every command that runs
  one configuration a single number (a threshold checked by ``parse_threshold``, the same bounds and wording);
- ``--out`` is a command's output; ``--report`` is a primary name only for a report folder written beside another
  output (``--out`` or ``--priors``).
"""

from __future__ import annotations

from typing import Optional

import pytest
import typer

from simulator.errors import InputError
from simulator.option_values import GAMMA_MAX, THRESHOLD_MAX, IntList, int_list, parse_threshold, rate_list
from specsim_cli.main import command_tree, main

# an older or plural name -> the concept's one primary name; the older name may only be a secondary name of it
SECONDARY_NAMES = {"--gammas": "--gamma", "--thresholds": "--threshold", "--contexts": "--context",
                   "--batches": "--batch", "--models": "--model", "--drafts": "--draft", "--outs": "--out"}
# NAME and NAMEs both primary names, for two different concepts
DISTINCT_PLURALS = {"--prior": "calibrate fit-workload's workload profile vs the GPU priors catalog YAML that "
                               "calibrate gpu fit-engine / fit-moe update"}
OUTPUT_OPTIONS = ("--out", "--priors")


COMMANDS = [(" ".join(path), cmd) for path, cmd in command_tree()]
OPTIONS = [(name, p) for name, cmd in COMMANDS for p in cmd.params if p.param_type_name == "option"]


def _parser(p):
    """The typer ``parser=`` of an option (None without one)."""
    info = getattr(getattr(p, "type_descriptor", None), "parameter_info", None)
    return getattr(info, "parser", None)


def _annotation(p):
    return getattr(getattr(p, "type_descriptor", None), "annotation", None)


def _concept_options(word: str) -> list[tuple[str, object]]:
    """Options that take a value of ``word`` (``gamma``: --gamma, --fit-gammas ...; not --gamma-policy or flags)."""
    return [(n, p) for n, p in OPTIONS if not p.is_flag and any(
        o.lstrip("-") in (word, word + "s") or o.lstrip("-").endswith(("-" + word, "-" + word + "s")) for o in p.opts)]


def test_the_walk_sees_the_tree():
    names = {n for n, _ in COMMANDS}
    assert {"simulate whatif", "simulate capacity", "validate capacity", "measure microbench", "measure study specdecode"} <= names
    assert len(_concept_options("gamma")) >= 15 and len(_concept_options("threshold")) >= 8


def test_no_concept_under_an_older_or_plural_primary_name():
    bad = [f"specsim {n}: {p.opts[0]} (use {SECONDARY_NAMES[p.opts[0]]}, {p.opts[0]} as its secondary name)"
           for n, p in OPTIONS if p.opts[0] in SECONDARY_NAMES]
    assert not bad, bad
    wrong = [f"specsim {n}: {p.opts} ({o} is a secondary name of {SECONDARY_NAMES[o]} only)"
             for n, p in OPTIONS for o in p.opts[1:] if o in SECONDARY_NAMES and p.opts[0] != SECONDARY_NAMES[o]]
    assert not wrong, wrong


def test_no_concept_under_two_primary_names_singular_and_plural():
    primaries: dict[str, set[str]] = {}
    for n, p in OPTIONS:
        primaries.setdefault(p.opts[0], set()).add(n)
    pairs = [f"{name} ({sorted(primaries[name])}) and {name}s ({sorted(primaries[name + 's'])})"
             for name in primaries if name + "s" in primaries and name not in DISTINCT_PLURALS]
    assert not pairs, f"one concept, two primary names: {pairs}"
    assert all(k in primaries and k + "s" in primaries for k in DISTINCT_PLURALS), "a stale DISTINCT_PLURALS entry"


def test_gamma_is_one_list_type_where_swept_and_an_int_where_one_is_run():
    lists, singles, other = [], [], []
    for n, p in _concept_options("gamma"):
        parser = _parser(p)
        if isinstance(parser, IntList):
            lists.append((n, p, parser))
        elif p.opts[0] == "--gamma" and _annotation(p) is int and not p.multiple and parser is None:
            singles.append(n)
        else:
            other.append(f"specsim {n} {p.opts[0]}: {_annotation(p)} parser {parser!r}")
    assert not other, f"gamma options neither the shared list parser nor one int: {other}"
    assert lists and singles
    for n, p, parser in lists:
        assert parser.concept == "gamma" and parser.hi == GAMMA_MAX and parser.field == p.opts[0], (n, parser)
        assert p.multiple and p.callback is not None, f"specsim {n} {p.opts[0]}: not repeatable/merged"
        # 0 (plain decoding) only where a command compares against it (capacity --best-gamma)
        assert parser.lo == 1 or any(q.opts[0] == "--best-gamma" for q in dict(COMMANDS)[n].params), (n, parser)


def test_threshold_is_one_list_type_where_swept_and_one_checked_number_where_one_is_run():
    lists, singles, other = [], [], []
    for n, p in _concept_options("threshold"):
        parser = _parser(p)
        if isinstance(parser, IntList):
            lists.append((n, p, parser))
        elif parser is parse_threshold and not p.multiple and p.opts == ["--threshold"]:
            singles.append(n)
        else:
            other.append(f"specsim {n} {p.opts}: {_annotation(p)} parser {parser!r}")
    assert not other, f"threshold options neither the shared list parser nor the shared single check: {other}"
    assert {n for n, _, _ in lists} >= {"simulate whatif", "simulate capacity", "simulate report", "validate capacity"}
    assert {"measure run", "measure serve-specreason", "measure serve-systems"} <= set(singles)
    for n, p, parser in lists:
        assert (parser.concept, parser.field, parser.lo, parser.hi) == ("threshold", "--threshold", 0, THRESHOLD_MAX), n
        assert p.multiple and p.callback is not None, n


def test_every_int_list_option_uses_the_one_parser_and_shows_it():
    for n, p in OPTIONS:
        parser = _parser(p)
        if isinstance(parser, IntList):
            assert parser.field == p.opts[0] and p.metavar == "<ints>", (n, p.opts)
            assert "LO-HI" in (p.help or ""), f"specsim {n} {p.opts[0]}: help does not give the syntax"


def test_report_is_a_primary_name_only_beside_another_output():
    bad = []
    for n, cmd in COMMANDS:
        names = [p.opts[0] for p in cmd.params if p.param_type_name == "option"]
        if "--report" in names and not any(o in names for o in OUTPUT_OPTIONS):
            bad.append(n)
    assert not bad, f"--report as a command's only output (name it --out, --report as a secondary name): {bad}"


@pytest.mark.parametrize("args", [
    ["simulate", "whatif", "cpu-smollm2", "--system", "specdecode", "--gamma", "2-3", "--gamma", "5", "--format", "json"],
    ["simulate", "whatif", "cpu-smollm2", "--system", "specdecode", "--gamma", "2,3,5", "--format", "json"],
])
def test_repeated_and_listed_values_are_the_same_grid(args, capsys):
    import json

    assert main(args) == 0
    rows = json.loads(capsys.readouterr().out)
    rows = rows["results"]
    assert sorted({r["gamma"] for r in rows}) == [2, 3, 5]


def test_older_names_still_run_the_commands_the_committed_reports_recorded(tmp_path, capsys):
    """``--report`` (validate, validate-serving, spec-sweep) and ``--gammas`` (microbench, static-bench, study) are
    secondary names of ``--out`` / ``--gamma``: a recorded command line reruns as it was written."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    data, profile = root / "tests/data/bench_serve", root / "simulator/profiles/cost_cpu-epyc-vllm032.yaml"
    assert main(["validate", "serving", str(data / "closed-1.json"), str(data / "closed-2.json"), "--profile",
                 str(profile), "--report", str(tmp_path / "rep")]) == 0
    assert (tmp_path / "rep" / "report.md").is_file()
    capsys.readouterr()
    # the old name reaches the same parser: the same error as --gamma's, naming the option's primary name
    assert main(["measure", "study", "specdecode", "--out", str(tmp_path / "s"), "--gammas", "0-3"]) == 2
    assert capsys.readouterr().err == "error: --gamma: must lie in 1..16 (got 0)\n"


def test_a_recorded_command_writes_a_list_back_once_in_the_same_syntax():
    """``simulator.command_line`` (the command a report records) writes a list option once, as it parses back."""
    from simulator.command_line import command_line
    from simulator.option_values import gamma_list_option, int_list, threshold_list_option
    from specsim_cli.main import run_app

    seen = []
    app = typer.Typer()

    @app.command()
    def grid(ctx: typer.Context, gamma: Optional[list[int]] = gamma_list_option(),
             threshold: Optional[list[int]] = threshold_list_option()):
        seen.append(command_line(ctx))

    @app.command()
    def other():
        pass

    assert run_app(app, ["grid", "--gamma", "1-3", "--gamma", "8,2", "--threshold", "6"], "specsim") == 0
    assert seen == ["specsim grid --gamma 1-3,8 --threshold 6"]
    assert int_list("1-3,8", "--gamma", 1, 16) == [1, 2, 3, 8]


@pytest.mark.parametrize("parse, text", [
    (lambda t: int_list(t, "--gamma", 1, 16), "2,,4"), (lambda t: int_list(t, "--gamma", 1, 16), "2,"),
    (lambda t: rate_list(t), "1,,2"), (lambda t: rate_list(t), ",0.5"),
])
def test_a_list_with_an_empty_item_is_a_typo_not_a_shorter_list(parse, text):
    with pytest.raises(InputError, match="an empty item"):
        parse(text)


@pytest.mark.parametrize("text", ["p99_latency<=40s,", "p99_latency<=40s and", ",mean_ttft<=2s"])
def test_an_slo_with_an_empty_term_is_refused(text):
    from simulator.engines.serving.slo import parse_slo

    with pytest.raises(InputError, match="an empty term"):
        parse_slo(text)
