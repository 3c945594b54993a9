"""User-facing input errors.

Every problem with user input (scenario YAML, profiles, traces, model folders) is raised
as :class:`InputError`, which names the file and the field. The CLI turns it into one
line on stderr and exit code 2, never a traceback.
"""

from __future__ import annotations


class InputError(Exception):
    """Bad user input: ``file: field: what was expected``."""

    def __init__(self, file: str | None, field: str | None, message: str):
        self.file = str(file) if file is not None else None
        self.field = field
        self.message = message
        super().__init__(self.one_line())

    def one_line(self) -> str:
        parts = [p for p in (self.file, self.field) if p]
        return ": ".join([*parts, self.message])


BUILTIN_TAGS = frozenset({"float", "int", "str", "bool", "list", "dict", "tuple", "none"})


def _union_tag(part) -> bool:
    """A location part pydantic adds for a union's member (``constrained-int``, ``literal['auto']``, ``float``, a
    model's class name such as ``MemoryFraction``), not a field (fields are lower-case snake names)."""
    return isinstance(part, str) and (not part.isidentifier() or part in BUILTIN_TAGS or part[:1].isupper())


def pydantic_error_to_input_error(file: str | None, err) -> InputError:
    """Convert the first error of a pydantic ``ValidationError`` into an :class:`InputError`; a value no member of a
    union takes gets one line naming every member's requirement (``a valid integer or 'auto'``)."""
    errors = err.errors()
    first = errors[0]
    loc = tuple(first.get("loc", ()))
    msg = first.get("msg", "invalid value")
    members = [e for e in errors if len(e.get("loc", ())) == len(loc) and tuple(e["loc"])[:-1] == loc[:-1]
               and _union_tag(e["loc"][-1])] if loc and _union_tag(loc[-1]) else []
    if len(members) >= 2 or (members and not loc[-1].isidentifier()):
        wants = [m.get("msg", "").removeprefix("Input should be ") for m in members]
        msg = "Input should be " + " or ".join(dict.fromkeys(w for w in wants if w))
        loc = loc[:-1]
    loc_text = ".".join(str(x) for x in loc if x != "__root__")
    if "input" in first and first.get("type") not in ("missing",):
        inp = first["input"]
        if isinstance(inp, (str, int, float, bool)) or inp is None:
            msg = f"{msg} (got {inp!r})"
    return InputError(file, loc_text or None, msg)
