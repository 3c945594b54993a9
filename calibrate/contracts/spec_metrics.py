"""Per-position acceptance from what a vLLM server already reports: ``/metrics`` text and ``SpecDecoding metrics`` logs.

What vLLM counts (V1, ``vllm/v1/spec_decode/metrics.py``, ``SpecDecodingStats.observe_draft``): for every verify
step of a request that drafted at least one token,

    num_drafts += 1;  num_draft_tokens += drafted;  num_accepted_tokens += accepted;
    num_accepted_tokens_per_pos[i] += 1  for i < accepted        (position label "0" .. "k-1")

Acceptance stops at the first rejected token, so ``per_pos[i]`` counts the drafts whose first i+1 tokens were all
accepted and

    a_i = P(first i drafts accepted) = accepted_per_pos[position = i-1] / num_drafts,   i = 1..k,

the cumulative (non-increasing) acceptance ``calibrate.fit.fit_acceptance`` fits; it is vLLM's own "Per-position
acceptance rate" (``np.sum(pos_matrix, axis=0) / num_drafts``) and the PromQL in ``SpecDecodingProm``'s docstring.
gamma = k = the number of ``position`` labels (``num_speculative_tokens``). A draft shorter than k (n-gram lookup
can propose fewer) counts as rejected beyond its end, as vLLM counts it.

Inputs:

- **Prometheus text** of ``GET /metrics``: counters ``vllm:spec_decode_num_drafts``, ``..._num_draft_tokens``,
  ``..._num_accepted_tokens``, ``..._num_accepted_tokens_per_pos`` (label ``position``), with or without the
  ``_total`` suffix the exposition adds; any other labels (``model_name``, ``engine``...). Each label set is one
  series (one engine); series of one gamma are pooled (data-parallel engines). Optionally an earlier scrape of
  the same server, subtracted (counters are totals since start).
- **Log lines** ``SpecDecoding metrics: ...`` (one per engine per 10 s log interval), formats:

  - vLLM >= 0.9: ``Mean acceptance length: 2.10, Accepted throughput: X tokens/s, Drafted throughput: X
    tokens/s, Accepted: 123 tokens, Drafted: 400 tokens, Per-position acceptance rate: 0.690, 0.420, ..., Avg
    Draft acceptance rate: 36.9%`` (forks append fields: ignored);
  - vLLM 0.8.3-0.8.5: ``Draft acceptance rate: 30.8%, Mean acceptance length: 2.10, Accepted: 123 tokens,
    Drafted: 400 tokens, Per-position acceptance rate: 0.690, 0.420, ...``;
  - vLLM 0.8.0-0.8.2 (``Draft acceptance rate, Accepted, Drafted`` only) and V0's ``Speculative metrics:`` carry
    no per-position rates: rejected with a pointer to ``/metrics``.

  A line gives a_i (rounded to 3 decimals by vLLM) and its drafts: Drafted / k when every draft had k tokens
  (draft models, EAGLE, MTP; checked against the logged mean acceptance length 1 + Accepted / drafts), else
  Accepted / (mean acceptance length - 1) (short n-gram drafts; the length is logged to 2 decimals).

Every measurement then passes ``check_measurement`` (below) (rates in [0, 1], non-increasing,
k entries, drafts >= 1, finite): one rule set for every input.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from numbers import Real
from pathlib import Path

import numpy as np

from simulator.errors import InputError

Data = dict[int, tuple[np.ndarray, int]]  # {gamma: (a_1..a_gamma, drafts)}


@dataclass(frozen=True)
class Measurement:
    """One acceptance measurement as an input states it, not yet checked: a_1..a_gamma over ``n`` drafts.

    ``*_field`` name where each number came from, for the error line ``FILE: FIELD: expected (got ...)``."""

    file: str
    gamma: object
    a: object
    n: object
    gamma_field: str
    a_field: str
    n_field: str


def is_number(x) -> bool:
    """A real number, not a bool."""
    return isinstance(x, Real) and not isinstance(x, bool)


def check_measurement(m: Measurement) -> tuple[int, np.ndarray, int]:
    """(gamma, a, drafts) of a measurement that keeps every rule; else the first broken rule as an InputError.

    The one place the acceptance rules live, for every input path (study, run directories, /metrics, logs)."""
    if not (is_number(m.gamma) and float(m.gamma).is_integer() and m.gamma >= 1):
        raise InputError(m.file, m.gamma_field, f"gamma must be a whole number >= 1 (got {m.gamma!r})")
    gamma = int(m.gamma)
    if not (is_number(m.n) and math.isfinite(m.n) and float(m.n).is_integer() and m.n >= 1):
        raise InputError(m.file, m.n_field, f"drafts (verify iterations) must be a whole number >= 1 (got {m.n!r})")
    if not (isinstance(m.a, (list, tuple, np.ndarray)) and all(is_number(x) for x in m.a)):
        raise InputError(m.file, m.a_field, f"expected a list of numbers a_1..a_{gamma} (got {m.a!r})")
    a = [float(x) for x in m.a]
    if len(a) != gamma:
        raise InputError(m.file, m.a_field, f"expected gamma = {gamma} entries a_1..a_{gamma} (got {len(a)})")
    for i, x in enumerate(a, start=1):
        if not math.isfinite(x):
            raise InputError(m.file, m.a_field, f"a_{i} must be a finite number (got {x})")
        if not 0.0 <= x <= 1.0:
            raise InputError(m.file, m.a_field, f"a_{i} = P(first {i} drafts accepted) must lie in [0, 1] (got {x:g})")
    for i in range(1, gamma):
        if a[i] > a[i - 1] + 1e-12:
            raise InputError(m.file, m.a_field, "cumulative acceptance must not increase with position, "
                             f"a_{i} >= a_{i + 1} (got a_{i} = {a[i - 1]:g} < a_{i + 1} = {a[i]:g})")
    return gamma, np.asarray(a), int(m.n)


def pool(measurements) -> Data:
    """{gamma: (a, drafts)}: every measurement checked, those of one gamma pooled (a weighted by drafts)."""
    sums: dict[int, list] = {}
    for m in measurements:
        g, a, n = check_measurement(m)
        cur = sums.setdefault(g, [np.zeros(g), 0])
        cur[0] += n * a
        cur[1] += n
    return {g: (s / n, n) for g, (s, n) in sorted(sums.items())}


PREFIX = "vllm:spec_decode_"
DRAFTS, DRAFT_TOKENS, ACCEPTED, PER_POS = (f"{PREFIX}num_{n}" for n in
                                           ("drafts", "draft_tokens", "accepted_tokens", "accepted_tokens_per_pos"))
COUNTERS = (DRAFTS, DRAFT_TOKENS, ACCEPTED, PER_POS)

# NAME{LABELS} VALUE [TIMESTAMP] [# {EXEMPLAR LABELS} VALUE [TIMESTAMP]] (Prometheus text 0.0.4 and OpenMetrics)
_SAMPLE = re.compile(r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?P<labels>[^#]*)\})?\s+(?P<value>\S+)"
                     r"(?:\s+-?[0-9.eE+]+)?(?:\s+#\s+\{.*\}\s+\S+(?:\s+\S+)?)?\s*$")
_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*(?:,|$)')


# ---- Prometheus text ------------------------------------------------------------------------------------------
def _labels(text: str | None, where: str) -> tuple[tuple[str, str], ...]:
    if not text:
        return ()
    out, pos = [], 0
    while pos < len(text):
        m = _LABEL.match(text, pos)
        if m is None:
            raise InputError(where, None, f"malformed Prometheus labels (expected name=\"value\", ...; got {{{text}}})")
        out.append((m.group(1), re.sub(r"\\(.)", lambda e: "\n" if e.group(1) == "n" else e.group(1), m.group(2))))
        pos = m.end()
    return tuple(sorted(out))


def read_prometheus(path: str | Path) -> dict[tuple, dict[str, float]]:
    """{series labels (without ``position``): {counter or ``PER_POS@i``: value}} of the spec-decode counters.

    A malformed spec-decode line is an error naming its line; other metrics' lines are skipped unread."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise InputError(str(path), None, f"cannot read vLLM /metrics text ({e.__class__.__name__})") from None
    series: dict[tuple, dict[str, float]] = {}
    for no, line in enumerate(text.splitlines(), start=1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if not line.startswith(PREFIX):
            continue
        m = _SAMPLE.match(line)
        if m is None:
            raise InputError(f"{path}:{no}", None, f"not a Prometheus sample line (expected NAME{{LABELS}} VALUE; got {line[:80]!r})")
        name = m.group("name").removesuffix("_total")
        if name not in COUNTERS:
            continue
        labels = dict(_labels(m.group("labels"), f"{path}:{no}"))
        try:
            value = float(m.group("value"))
        except ValueError:
            raise InputError(f"{path}:{no}", name, f"expected a number (got {m.group('value')!r})") from None
        key = name
        if name == PER_POS:
            pos = labels.pop("position", None)
            if pos is None or not pos.isdigit():
                raise InputError(f"{path}:{no}", name, f"expected a position label 0, 1, ... (got {pos!r})")
            key = f"{PER_POS}@{int(pos)}"
        cur = series.setdefault(tuple(sorted(labels.items())), {})
        if key in cur:
            raise InputError(f"{path}:{no}", name, "the same series appears twice (two scrapes in one file?)")
        cur[key] = value
    if not series:
        raise InputError(str(path), DRAFTS, "no spec-decode counters: not vLLM /metrics text, or a server without "
                         "speculative decoding (--speculative-config)")
    return series


def _show(labels: tuple) -> str:
    return "{" + ",".join(f'{k}="{v}"' for k, v in labels) + "}"


def _select(series: dict, labels: dict[str, str] | None, file: str) -> dict:
    chosen = {k: v for k, v in series.items() if all(dict(k).get(n) == val for n, val in (labels or {}).items())}
    if not chosen:
        raise InputError(file, "--metrics-label", f"no series with {labels} (have {', '.join(map(_show, series))})")
    models = sorted({dict(k).get("model_name", "") for k in chosen})
    if len(models) > 1:
        raise InputError(file, "model_name", f"several models ({', '.join(models)}): choose one with "
                         f"--metrics-label model_name=NAME")
    return chosen


def _counters(values: dict[str, float], file: str, labels: tuple) -> tuple[float, list[float], float | None, float | None]:
    """(drafts, per-position counts, accepted tokens, draft tokens) of one series; positions must be 0..k-1."""
    if DRAFTS not in values:
        raise InputError(file, f"{DRAFTS}{_show(labels)}", "missing (needed as the denominator of every a_i)")
    pos = sorted(int(k.split("@")[1]) for k in values if k.startswith(PER_POS + "@"))
    if pos != list(range(len(pos))) or not pos:
        raise InputError(file, f"{PER_POS}{_show(labels)}", f"expected positions 0..k-1 (got {pos or 'none'})")
    return values[DRAFTS], [values[f"{PER_POS}@{i}"] for i in pos], values.get(ACCEPTED), values.get(DRAFT_TOKENS)


def from_prometheus(paths, before_paths=None, labels: dict[str, str] | None = None) -> Data:
    """{gamma: (a_1..a_gamma, drafts)} from /metrics scrapes (each minus its earlier scrape, paired in order)."""
    paths = [Path(p) for p in paths]
    befores = [Path(p) for p in before_paths or []]
    if befores and len(befores) != len(paths):
        raise InputError(None, "--metrics-before", f"give one earlier scrape per --metrics file, in the same order "
                         f"(got {len(befores)} for {len(paths)})")
    out = []
    for i, path in enumerate(paths):
        file = str(path) if not befores else f"{path} - {befores[i]}"
        after = _select(read_prometheus(path), labels, str(path))
        before = read_prometheus(befores[i]) if befores else {}
        for key, values in after.items():
            n, per_pos, acc, dtok = _counters(values, str(path), key)
            if befores:
                if key not in before:
                    raise InputError(str(befores[i]), _show(key), "series missing from the earlier scrape "
                                     "(a different server?)")
                n0, p0, a0, d0 = _counters(before[key], str(befores[i]), key)
                if len(p0) != len(per_pos):
                    raise InputError(file, f"{PER_POS}{_show(key)}", f"k = {len(p0)} before, {len(per_pos)} after "
                                     "(a different server?)")
                for name, x1, x0 in ((DRAFTS, n, n0), *((f"{PER_POS}@{j}", x, y) for j, (x, y) in enumerate(zip(per_pos, p0)))):
                    if x1 < x0:
                        raise InputError(file, f"{name}{_show(key)}", f"a counter cannot go down between scrapes "
                                         f"(got {x0:g} -> {x1:g}: server restarted?)")
                n, per_pos = n - n0, [x - y for x, y in zip(per_pos, p0)]
                acc = None if acc is None or a0 is None else acc - a0
                dtok = None if dtok is None or d0 is None else dtok - d0
            out.append(_measurement(file, key, n, per_pos, acc, dtok))
    return pool(out)


def _measurement(file: str, key: tuple, n: float, per_pos: list[float], acc, dtok) -> Measurement:
    """One series as a measurement: a_i = per_pos[i-1] / drafts; the token totals must agree with the counts."""
    k = len(per_pos)
    scale = n if math.isfinite(n) and n > 0 else 1.0
    m = Measurement(file, k, [x / scale for x in per_pos], n, f"{PER_POS}{_show(key)}",
                    f"{PER_POS}{_show(key)} / {DRAFTS}", f"{DRAFTS}{_show(key)}")
    check_measurement(m)  # the acceptance rules first: their message says more than a total's
    if acc is not None and not abs(acc - sum(per_pos)) <= 1e-6:
        raise InputError(file, f"{ACCEPTED}{_show(key)}", f"must equal the sum of the per-position counts "
                         f"(got {acc:g} vs {sum(per_pos):g}: scrapes of different servers?)")
    if dtok is not None and not n <= dtok <= k * n:
        raise InputError(file, f"{DRAFT_TOKENS}{_show(key)}", f"must lie between drafts and k * drafts = "
                         f"{n:g}..{k * n:g} (got {dtok:g})")
    return m


# ---- log lines ------------------------------------------------------------------------------------------------
LOG_TAG = "SpecDecoding metrics:"
_FIELD = re.compile(r"^([A-Za-z][A-Za-z0-9 /()_-]*?):\s*(.*)$")
_COUNT = re.compile(r"^(-?[0-9.eE+]+|nan|inf)\s*tokens$", re.IGNORECASE)


def _fields(tail: str) -> dict[str, list[str]]:
    """``Key: v, Key: v1, v2, ...`` -> {key: [values]}; a bare value continues the previous key's list."""
    out: dict[str, list[str]] = {}
    last = None
    for token in (t.strip() for t in tail.split(",")):
        m = _FIELD.match(token)
        if m:
            last = m.group(1).strip()
            out[last] = [m.group(2).strip()]
        elif last is not None:
            out[last].append(token)
    return out


def _float(text: str, where: str, field: str, expected: str) -> float:
    try:
        return float(text.rstrip("%"))
    except ValueError:
        raise InputError(where, field, f"expected {expected} (got {text!r})") from None


def parse_log_line(tail: str, where: str) -> Measurement:
    """One ``SpecDecoding metrics:`` line (the text after the tag) as a measurement."""
    f = _fields(tail)
    if "Per-position acceptance rate" not in f:
        raise InputError(where, "Per-position acceptance rate", "missing: this vLLM log format (before 0.8.3) has no "
                         "per-position rates; scrape /metrics (vllm:spec_decode_num_accepted_tokens_per_pos) instead")
    counts = {}
    for key in ("Accepted", "Drafted"):
        m = _COUNT.match(f.get(key, [""])[0])
        if m is None:
            raise InputError(where, key, f"expected '{key}: N tokens' (got {f.get(key, ['nothing'])[0]!r})")
        counts[key] = _float(m.group(1), where, key, "a number of tokens")
    rates = [_float(x, where, "Per-position acceptance rate", "comma-separated rates") for x in f["Per-position acceptance rate"]]
    mal = (_float(f["Mean acceptance length"][0], where, "Mean acceptance length", "a number")
           if "Mean acceptance length" in f else None)
    k, acc, drafted = len(rates), counts["Accepted"], counts["Drafted"]
    n = drafted / k if k else 0.0
    if mal is not None and k and n > 0 and abs(1 + acc / n - mal) > 0.0051 and acc > 0 and mal > 1:
        n = acc / (mal - 1)  # some drafts were shorter than k (n-gram): the logged length fixes the count
    n = float(round(n)) if math.isfinite(n) else n
    return Measurement(where, k, rates, n, "Per-position acceptance rate", "Per-position acceptance rate",
                       "Drafted / Mean acceptance length")


def from_logs(paths) -> Data:
    """{gamma: (a_1..a_gamma, drafts)} pooled over every ``SpecDecoding metrics:`` line of vLLM server logs."""
    out = []
    for path in map(Path, paths):
        try:
            lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError as e:
            raise InputError(str(path), None, f"cannot read the log ({e.__class__.__name__})") from None
        found = [(no, line) for no, line in enumerate(lines, start=1) if LOG_TAG in line]
        if not found:
            old = any("Speculative metrics:" in line for line in lines)
            raise InputError(str(path), f"'{LOG_TAG}' lines", "none found" + (
                ": this is vLLM V0's 'Speculative metrics:' format, which has no per-position rates" if old else
                " (vLLM logs one per 10 s while speculative decoding runs, unless --disable-log-stats)"))
        out += [parse_log_line(line.split(LOG_TAG, 1)[1], f"{path}:{no}") for no, line in found]
    return pool(out)


# ---- output ---------------------------------------------------------------------------------------------------
def summary(data: Data) -> str:
    """One line per gamma: drafts, a_1..a_gamma and the acceptance length E[M] = 1 + sum a_i."""
    return "\n".join(f"gamma {g}: {n} drafts, a = " + ", ".join(f"{x:.4f}" for x in a)
                     + f", acceptance length E[M] = {1 + a.sum():.3f}" for g, (a, n) in data.items())
