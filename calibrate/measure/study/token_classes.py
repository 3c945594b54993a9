"""Token classes for the rejection breakdown.

Order matters: a token is put in the first class whose test it passes.
``whitespace`` (only spaces/newlines) < ``digit/arith`` (a digit or an arithmetic symbol) <
``opener/reflection`` (a step opener or reflection word: "Wait", "So", "First", ...) <
``format/punct`` (no letter or digit) < ``word`` (everything else).
"""

from __future__ import annotations

import re

CLASSES = ["whitespace", "digit/arith", "opener/reflection", "format/punct", "word"]
OPENERS = frozenset({
    "wait", "hmm", "so", "first", "next", "then", "now", "therefore", "thus", "alternatively", "but",
    "okay", "ok", "alright", "let", "step", "finally", "second", "third", "hence", "since", "answer",
})
_ARITH = re.compile(r"[0-9+\-*/=×÷^%$<>]")


def token_class(text: str) -> str:
    """Class of one decoded token (``tokenizer.decode([id])``)."""
    if text.strip() == "":
        return "whitespace"
    if set(text.strip()) <= {"*", "#", "-"} and len(text.strip()) >= 2:  # markdown bold / heading / rule
        return "format/punct"
    if _ARITH.search(text):
        return "digit/arith"
    word = text.strip().strip(".,:;!?*#").lower()
    if word in OPENERS:
        return "opener/reflection"
    if not any(ch.isalnum() for ch in text):
        return "format/punct"
    return "word"


def step_offsets(texts: list[str]) -> list[int]:
    """Tokens since the last blank line ("\\n\\n", the step separator) for each token, 0 = step start."""
    out, since, tail = [], 0, ""
    for t in texts:
        out.append(since)
        tail = (tail + t)[-2:]
        since = 0 if "\n\n" in tail or t.count("\n") >= 2 else since + 1
    return out
