"""The values of options that several ``specsim`` commands share, parsed and checked in one place.

**Lists of integers.** Every option that takes a list of integers (``--gamma`` and ``--threshold`` where a command
sweeps them, ``--tp``, ``--batch``, ``--context``, ``--fit-gammas`` ...) has one syntax, :func:`int_list`: a value
(``4``), a range ``LO-HI`` (``1-8``) or a comma list of either (``2,4`` or ``1-3,8``); repeating the option adds its
values (``--gamma 2 --gamma 4`` is ``--gamma 2,4``). The values come back sorted, without duplicates. Commands
declare such an option with :func:`int_list_option` (typer parses it with :class:`IntList`), so the value a command
receives is already checked, and ``tests/cli/test_option_names.py`` can tell that every list option uses this parser.

**Thresholds.** A SpecReason threshold keeps a small model's step when its score is >= the threshold; scores lie in
0..10 (10: never keep a step). The simulator's score model is on integer scores, so a command that sweeps thresholds
(``whatif``, ``capacity``, ``report``, ``validate-capacity``) takes integers; a real run may score a step by the
mean of the score distribution (``--score-mode mean``), so the commands that run or read one real configuration
(``calibrate run``, ``serve-specreason``, ``serve-systems``, ``import-specreason``) take one number, a fraction
allowed (:func:`threshold_option`). Both go through :func:`check_range`, with the same bounds and wording.
"""

from __future__ import annotations

import math
from typing import Any

from simulator.errors import InputError

GAMMA_MAX = 16  # draft tokens per iteration the simulator models (scenario grid.gamma: 1..16)
THRESHOLD_MAX = 10  # SpecReason scores lie in 0..10; a threshold of 10 never keeps a small step
# SpecReason's first_n (steps the base model writes before the small model proposes), in a scenario's grid.first_n
# and every --first-n: past a request's last step it changes nothing (every step is the base model's), and no
# workload's chain comes near 100,000 steps (a step is >= 1 token; budgets are thousands of tokens)
FIRST_N_MAX = 100_000
INT_LIST_METAVAR = "<ints>"
# Load levels (--requests, --users, --qps): the bounds of every command that simulates serving, checked here.
MAX_USERS = 100_000  # closed-loop users at one level: an engine runs at most a few thousand sequences at once,
#                      the rest only queue (and a user beyond the level's requests never sends one)
QPS_RANGE = (1e-6, 1e6)  # offered requests/s at one level: one request per ~12 days .. a million a second

MAX_REQUESTS = 10_000_000  # simulated requests per grid point or load level: the YAML and every --requests (one bound)



def check_range(value: float, field: str, lo: float, hi: float) -> float:
    """``value`` within [lo, hi], else :class:`InputError` ``FIELD: must lie in LO..HI (got V)``: the one bound check
    (and wording) of every list value and every threshold."""
    if not (isinstance(value, (int, float)) and math.isfinite(value) and lo <= value <= hi):
        raise InputError(None, field, f"must lie in {_num(lo)}..{_num(hi)} (got {_num(value)})")
    return value


def check_requests(requests: int | None, lo: int, why: str = "") -> None:
    """``--requests`` within [lo, MAX_REQUESTS] (the bound a scenario's ``requests`` has too):
    the one check of every command's --requests (``why``: the reason for ``lo``, added to the message)."""
    if requests is not None and not lo <= requests <= MAX_REQUESTS:
        raise InputError(None, "--requests", f"must lie in {lo}..{MAX_REQUESTS:,} (got {requests:,}{why})")


def check_capacity_requests(requests: int | None) -> None:
    """``--requests`` of a capacity search or check (capacity, report, validate-capacity): at least 20."""
    check_requests(requests, 20, "; percentiles need a few requests")


def user_list(text: str | None, field: str = "--users") -> list[int] | None:
    """``--users`` ('4,16' or '1-4'): closed-loop user counts, integers in 1..MAX_USERS (:func:`int_list`)."""
    return None if text is None else int_list(text, field, 1, MAX_USERS)


def rate_list(text: str | None, field: str = "--qps") -> list[float] | None:
    """``--qps`` ('0.5,1,2'): offered request rates, each within QPS_RANGE (:func:`check_range`)."""
    if text is None:
        return None
    items = comma_items(text, field, "positive numbers like 0.5,1,2")
    try:
        vals = [float(x) for x in items]
    except ValueError:
        raise InputError(None, field, f"expected positive numbers like 0.5,1,2 (got {text!r})") from None
    lo, hi = QPS_RANGE
    for v in vals:
        if not (math.isfinite(v) and lo <= v <= hi):
            raise InputError(None, field, f"must lie in {lo:g}..{hi:g} requests/s (got {v:g})")
    return vals


def comma_items(text, field: str, expected: str) -> list[str]:
    """A comma list's items, stripped; an empty item (``1,,2``, a trailing comma) is a typo, not a shorter list."""
    items = [x.strip() for x in str(text).split(",")]
    if any(not x for x in items):
        raise InputError(None, field, f"an empty item in {text!r}: expected {expected}")
    return items


def _num(x) -> str:
    """10 -> '10', 10.0 -> '10', 6.5 -> '6.5', 10000000 -> '10000000' (never 1e+07); anything else as repr."""
    if isinstance(x, (int, float)) and math.isfinite(x):
        return str(int(x)) if float(x).is_integer() else repr(float(x))
    return str(x) if isinstance(x, float) else repr(x)


def int_list(text: str, field: str, lo: int, hi: int) -> list[int]:
    """``'4'``, ``'1-8'``, ``'2,4'`` or ``'1-3,8'`` -> the sorted distinct integers, each within [lo, hi]; errors
    name the option (``field``) and say what was expected."""
    out: set[int] = set()
    parts = comma_items(text, field, "an integer, a range like 1-8 or a list like 3,5,7")
    try:
        for part in parts:
            if "-" in part[1:]:  # a range LO-HI (a leading '-' is a negative number's sign)
                cut = part.index("-", 1)
                a, b = int(part[:cut]), int(part[cut + 1:])
                if a > b:
                    raise InputError(None, field, f"empty range {part!r}: write it low-high, e.g. {b}-{a}")
                out.update(range(check_range(a, field, lo, hi), check_range(b, field, lo, hi) + 1))
            else:
                out.add(check_range(int(part), field, lo, hi))
    except ValueError:
        raise InputError(None, field, f"expected an integer, a range like 1-8 or a list like 3,5,7 (got {text!r})") \
            from None
    return sorted(out)


def int_list_text(values) -> str:
    """[1, 2, 3, 5] -> ``'1-3,5'``: a list as :func:`int_list` reads it back (the command line a report records)."""
    vals = sorted(set(int(v) for v in values))
    runs: list[list[int]] = []
    for v in vals:
        if runs and v == runs[-1][1] + 1:
            runs[-1][1] = v
        else:
            runs.append([v, v])
    return ",".join(f"{a}" if a == b else f"{a},{b}" if b == a + 1 else f"{a}-{b}" for a, b in runs)


class IntValues(list):
    """The parsed value of a list option (a list of ints) that knows its option is one: ``command_line`` writes it
    back once, as ``--gamma 1-8``, not once per value."""

    def text(self) -> str:
        return int_list_text(self)


class IntList:
    """typer ``parser`` of a list option: the text of one occurrence -> its integers (:func:`int_list`).

    ``concept``: what the values are (``gamma``, ``threshold``, ``tp`` ...), for the option-name test; ``field``:
    the option's name in errors; ``lo``/``hi``: the bounds."""

    def __init__(self, concept: str, field: str, lo: int, hi: int):
        self.concept, self.field, self.lo, self.hi = concept, field, lo, hi

    def __call__(self, value: Any) -> list[int]:
        if isinstance(value, (list, tuple)):  # already parsed (a default given as a list)
            return [check_range(int(v), self.field, self.lo, self.hi) for v in value]
        return int_list(value, self.field, self.lo, self.hi)

    def __repr__(self) -> str:
        return f"IntList({self.concept!r}, {self.field!r}, {self.lo}, {self.hi})"


def _merge(value: list[list[int]] | None) -> IntValues | None:
    """The occurrences of a repeatable list option, merged: sorted distinct values (None when not given)."""
    if value is None:
        return None
    merged = IntValues(sorted({v for occurrence in value for v in occurrence}))
    return merged if merged else None


def int_list_option(default: str | None, *names: str, concept: str, lo: int, hi: int, help: str, example: str) -> Any:
    """A typer option taking a list of integers in the one syntax (module docstring); the command receives the
    sorted distinct values (an :class:`IntValues`), or None when neither given nor defaulted. ``names``: the
    primary name first, then secondary names kept for old command lines (``"--gamma", "--gammas"``). Declare the
    parameter as ``Optional[list[int]]``. ``help``: what the values are; ``example``: a value in the syntax."""
    import typer

    parser = IntList(concept, names[0], lo, hi)
    return typer.Option(None if default is None else [default], *names, parser=parser, callback=_merge,
                        metavar=INT_LIST_METAVAR,
                        help=f"{help}: a value, LO-HI or a comma list, e.g. {example} (repeatable)")


def _systems(value: list[str] | None) -> list[str] | None:
    """The occurrences of ``--system``, each a name or a comma list, in order (None when not given)."""
    if value is None:
        return None
    return [name for occurrence in value
            for name in comma_items(occurrence, "--system", "system names, e.g. vanilla-base,specdecode")] or None


def system_list_option(default: list[str] | None = None, help: str = "restrict to these systems") -> Any:
    """``--system``: names, each occurrence one name or a comma list (as the integer lists take commas)."""
    import typer

    return typer.Option(default, "--system", callback=_systems,
                        help=f"{help}: a name or a comma list, e.g. vanilla-base,specdecode (repeatable)")


def gamma_list_option(default: str | None = None, *names: str, lo: int = 1,
                      help: str = f"draft tokens per iteration, 1..{GAMMA_MAX}", example: str = "1-8 or 2,4") -> Any:
    """``--gamma`` (or a role's name: ``--fit-gammas`` ...) where a command sweeps gamma: values in lo..16."""
    return int_list_option(default, *(names or ("--gamma",)), concept="gamma", lo=lo, hi=GAMMA_MAX, help=help,
                           example=example)


def threshold_list_option(default: str | None = None, *names: str,
                          help: str = f"SpecReason thresholds, integers 0..{THRESHOLD_MAX} (a small step is kept at "
                                      "score >= it; 10: never)", example: str = "5,7 or 3-7") -> Any:
    """``--threshold`` where a command sweeps thresholds: integers 0..10 (the simulator's scores are integers)."""
    return int_list_option(default, *(names or ("--threshold",)), concept="threshold", lo=0, hi=THRESHOLD_MAX,
                           help=help, example=example)


def check_threshold(value: float, field: str = "--threshold") -> float:
    """One threshold (a real run's: a fraction allowed) within 0..10, by :func:`check_range`'s rule and wording."""
    return float(check_range(value, field, 0, THRESHOLD_MAX))


def parse_threshold(value: Any) -> float:
    """typer ``parser`` of a single ``--threshold``: a number in 0..10 (a fraction allowed)."""
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            raise InputError(None, "--threshold", f"expected a number in 0..{THRESHOLD_MAX} (got {value!r})") from None
    return check_threshold(value)


def threshold_option(default: float = 7.0,
                     help: str = "SpecReason acceptance threshold 0..10 (a step is kept at score >= it; "
                                 "10: never keep a small step)") -> Any:
    """``--threshold`` of a command that runs or reads one real configuration: one number in 0..10."""
    import typer

    return typer.Option(default, "--threshold", parser=parse_threshold, metavar="<float>", help=help)


def parse_currency(value: Any) -> str:
    """typer ``parser`` of ``--currency``: a code (``USD``, ``EUR``) or a currency sign (``€``), letters or signs
    only, at most 8 characters: it is printed beside every cost."""
    import unicodedata

    text = str(value).strip()
    if not 1 <= len(text) <= 8 or not all(ch.isalpha() or unicodedata.category(ch) == "Sc" for ch in text):
        raise InputError(None, "--currency", f"expected a currency code such as USD or EUR, or a sign such as € "
                         f"(letters or currency signs, at most 8; got {str(value)!r})")
    return text


def gpu_hour_cost_option() -> Any:
    """``--gpu-hour-cost`` of the commands that price capacity (``capacity``, ``report``): one definition."""
    import typer

    return typer.Option(None, "--gpu-hour-cost", help="price of one GPU-hour (CPU host-hour for a CPU scenario), "
                        "in --currency")


def currency_option() -> Any:
    """``--currency`` beside ``--gpu-hour-cost``: the currency printed with every cost (:func:`parse_currency`)."""
    import typer

    return typer.Option("USD", "--currency", parser=parse_currency, metavar="<code>",
                        help="currency of --gpu-hour-cost, printed with every cost, e.g. USD, EUR or €")
