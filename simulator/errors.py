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


def pydantic_error_to_input_error(file: str | None, err) -> InputError:
    """Convert the first error of a pydantic ``ValidationError`` into an :class:`InputError`."""
    first = err.errors()[0]
    loc = ".".join(str(x) for x in first.get("loc", ()) if x != "__root__")
    msg = first.get("msg", "invalid value")
    if "input" in first and first.get("type") not in ("missing",):
        inp = first["input"]
        if isinstance(inp, (str, int, float, bool)) or inp is None:
            msg = f"{msg} (got {inp!r})"
    return InputError(file, loc or None, msg)
