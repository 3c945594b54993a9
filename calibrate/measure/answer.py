"""Answer detection (ends a request), extraction and grading."""

from __future__ import annotations

import re

ANSWER_MARKERS = ("boxed", "Answer:")
_NUM = re.compile(r"-?\d[\d,]*(?:\.\d+)?")


def has_answer(step_text: str) -> bool:
    """The reference's rule: a step containing "boxed" or "Answer:" ends the request."""
    return any(m in step_text for m in ANSWER_MARKERS)


def _boxed_contents(text: str) -> list[str]:
    out = []
    for m in re.finditer(r"\\boxed\{", text):
        depth, i = 1, m.end()
        while i < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            i += 1
        out.append(text[m.end():i - 1] if depth == 0 else text[m.end():])
    return out


def extract_answer(text: str) -> str:
    """Last \\boxed{...}, else the text after the last "Answer:", else the last "#### x"; '' if none."""
    boxed = _boxed_contents(text)
    if boxed:
        return boxed[-1].strip()
    for marker in ("Answer:", "####"):
        idx = text.rfind(marker)
        if idx >= 0:
            return text[idx + len(marker):].strip().splitlines()[0].strip() if text[idx + len(marker):].strip() else ""
    return ""


def _as_number(s: str) -> float | None:
    m = _NUM.search(s)
    if not m:
        return None
    try:
        return float(m.group(0).replace(",", ""))
    except ValueError:
        return None


def is_correct(answer: str, reference: str) -> bool | None:
    """Numeric compare when both parse, else exact string match; None if there is no reference."""
    if not reference:
        return None
    if not answer:
        return False
    a, r = _as_number(answer), _as_number(reference)
    if a is not None and r is not None:
        return abs(a - r) <= 1e-6 * max(1.0, abs(r))
    return answer.strip() == reference.strip()
