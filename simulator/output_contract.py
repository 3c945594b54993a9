"""The one output contract of every command that writes (docs/cli.md, "Output files"), checked before any work.

A command declares what each of its output options writes with :func:`writes` (``@writes(out="yaml")`` under
``@app.command()``); the decorator adds ``--force`` where the command has none, and before the command's body runs
it checks every output with :func:`check_out`, takes a lock on each (:func:`output_lock`), checks again under the
lock and only then runs the body. Kinds of output:

- ``table``: a results table, its format from ``--format`` (csv | json) or, with the table format, from the
  extension: ``.json`` JSON, ``.parquet`` parquet (pyarrow, installed with the project), anything else CSV;
- ``yaml``, ``csv``, ``json``: a file of that one format;
- ``folder``: a report folder written afresh;
- ``runs``: a run or campaign folder that the command resumes or adds to (it, or a folder one or two levels down,
  holds :data:`RUN_MARKERS`: ``run.json``, ``provenance.json``, ``runs/`` or ``op_bench.json`` of an earlier run).

The rules (each refusal one line, exit 2, the target untouched): only a regular file or a folder is written -- an
existing device node, FIFO or socket is refused, never replaced; a file git tracks, a non-empty folder (a ``runs``
folder: one that is neither empty nor an earlier run, or that git tracks) and a folder given for a file are refused
unless ``--force``; an extension that names another format (``--out x.parquet`` for CSV, ``--out x.csv`` for a YAML
profile, ``--out out/report.md`` for a folder) is refused; the destination must be writable. Every file is written
atomically (``simulator.inputs.loading.write_atomic``: a temporary sibling renamed over the target), and while a command
runs it holds an exclusive lock on each output path, so a second run into the same file or folder is refused at
once with a message naming the first (it does not wait).
"""

from __future__ import annotations

import functools
import inspect
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Iterator, get_args

import typer

from simulator.errors import InputError

ForceOpt = Annotated[bool, typer.Option("--force", help="overwrite a file git tracks, or write into a non-empty --out "
                                        "folder")]
KINDS = ("table", "yaml", "csv", "json", "folder", "runs")
FORMAT_EXTS = {"csv": (".csv",), "json": (".json",), "parquet": (".parquet",), "yaml": (".yaml", ".yml")}
# extensions that name a file format: given to an output of another format (or to a folder), they are a mistake
KNOWN_EXTS = (".csv", ".tsv", ".json", ".jsonl", ".yaml", ".yml", ".parquet", ".pq", ".feather", ".arrow", ".xlsx",
              ".xls", ".md", ".html", ".png", ".pdf", ".svg", ".txt", ".pkl", ".pickle", ".npy", ".npz")
RUN_MARKERS = ("run.json", "provenance.json", "runs", "op_bench.json")  # an earlier run of a resuming command


def parquet_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("pyarrow") is not None


def file_format(fmt: str, out: Path) -> str:
    """The format of the file --out names: --format's, or with the table format its extension's (.json JSON,
    .parquet parquet, anything else CSV)."""
    if fmt == "table":
        suf = Path(out).suffix.lower()
        return "json" if suf == ".json" else "parquet" if suf in FORMAT_EXTS["parquet"] else "csv"
    return fmt


def _tracked(path: Path, folder: bool) -> bool:
    """Whether git tracks ``path`` (a folder: any file under it); False outside a repository or without git."""
    import subprocess

    args, cwd = (["git", "ls-files", "--", "."], path) if folder else (["git", "ls-files", "--", path.name], path.parent)
    try:
        r = subprocess.run(args, cwd=cwd.resolve(), capture_output=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return False
    return r.returncode == 0 and bool(r.stdout.strip())


def _not_regular(out: Path, flag: str) -> None:
    if out.exists() and not out.is_file() and not out.is_dir():
        raise InputError(None, flag, f"{out} is not a regular file (a device, FIFO or socket): refusing to write "
                         "over it; give a file name")


def _check_extension(out: Path, kind: str, fmt: str, flag: str) -> None:
    suf = out.suffix.lower()
    if kind in ("folder", "runs"):
        if suf in KNOWN_EXTS and not out.is_dir():
            raise InputError(None, flag, f"{out} looks like a file name ({suf}); this command writes a folder")
        return
    if kind == "table":
        if fmt in ("csv", "json") and suf in KNOWN_EXTS and suf not in FORMAT_EXTS[fmt]:
            raise InputError(None, flag, f"{out} ends in {suf} but --format is {fmt}: the names must agree")
        if fmt == "table" and suf in KNOWN_EXTS and suf not in (".csv", ".json", *FORMAT_EXTS["parquet"]):
            raise InputError(None, flag, f"{out} ends in {suf}: this command writes CSV (.csv), JSON (.json) or "
                             "parquet (.parquet)")
        if file_format(fmt, out) == "parquet" and not parquet_available():
            raise InputError(None, flag, f"{out}: writing parquet needs pyarrow, which is not installed; "
                             "use a .csv or .json name")
        return
    if suf in KNOWN_EXTS and suf not in FORMAT_EXTS[kind]:
        raise InputError(None, flag, f"{out} ends in {suf} but this command writes {kind.upper()} "
                         f"({' or '.join(FORMAT_EXTS[kind])})")


def check_rewrite(paths: list[Path], force: bool, flag: str) -> None:
    """Refuse (without ``force``) to overwrite any of ``paths`` that exists and git tracks: a committed file is
    rewritten only on purpose. The rule of every output, and of commands that write beside their inputs."""
    for out in paths:
        if out.exists() and not force and _tracked(out, folder=False):
            raise InputError(None, flag, f"{out} is a file git tracks (committed): refusing to overwrite it; "
                             "pass --force or write elsewhere")


def check_out(out: Path | None, fmt: str = "table", force: bool = False, folder: bool = False,
              kind: str | None = None, flag: str = "--out") -> None:
    """Refuse an output that breaks the contract (module docstring), before any work; ``kind`` is one of
    :data:`KINDS` (``folder=True`` is ``kind="folder"``, the default ``table``)."""
    if out is None:
        return
    kind = kind or ("folder" if folder else "table")
    if kind not in KINDS:
        raise ValueError(f"unknown output kind {kind!r}")
    if str(out).strip() == "":
        raise InputError(None, flag, "empty path")
    out = Path(out)
    _not_regular(out, flag)
    _check_extension(out, kind, fmt, flag)
    if kind in ("folder", "runs"):
        if out.exists() and not out.is_dir():
            raise InputError(None, flag, f"{out} is a file; this command writes a folder")
        if out.is_dir() and any(out.iterdir()) and not force:
            earlier_run = kind == "runs" and any(next(out.glob(f"{deep}{m}"), None) is not None
                                                 for m in RUN_MARKERS for deep in ("", "*/", "*/*/"))
            if not earlier_run:
                raise InputError(None, flag, f"{out} is a folder that is not empty: its files would mix with the new "
                                 "ones; give a new folder or pass --force")
            if _tracked(out, folder=True):
                raise InputError(None, flag, f"{out} holds files git tracks (committed): refusing to write into it; "
                                 "pass --force or write elsewhere")
    else:
        if out.is_dir():
            name = {"table": "results.csv"}.get(kind, f"out.{kind}")
            raise InputError(None, flag, f"{out} is a folder; give a file name, e.g. {out / name}")
        check_rewrite([out], force, flag)
    anc = out if kind in ("folder", "runs") and out.is_dir() else out.parent
    while not anc.exists() and anc != anc.parent:
        anc = anc.parent
    if not anc.is_dir() or not os.access(anc, os.W_OK | os.X_OK):
        raise InputError(None, flag, f"cannot write under {anc}")


def _lock_dir() -> Path:
    import tempfile

    d = Path(tempfile.gettempdir()) / f"specsim-locks-{os.getuid()}"
    d.mkdir(mode=0o700, exist_ok=True)
    return d


@contextmanager
def output_lock(paths: list[tuple[Path, str]]) -> Iterator[None]:
    """Hold an exclusive lock on each (path, flag) while the block runs: a lock file per resolved output path in
    the user's lock folder under the temporary folder (one machine; fcntl.flock, released when the process ends,
    however it ends). A path another run holds is refused at once, naming that run."""
    import fcntl
    import hashlib

    held: list[int] = []
    try:
        for path, flag in sorted({(str(Path(p).resolve()), f) for p, f in paths}):
            name = hashlib.sha256(path.encode()).hexdigest()[:24] + ".lock"
            fd = os.open(_lock_dir() / name, os.O_RDWR | os.O_CREAT, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                who = os.pread(fd, 300, 0).decode(errors="replace").strip() or "another process"
                os.close(fd)
                raise InputError(None, flag, f"{path} is being written by another specsim run ({who}); wait for it "
                                 "to finish or choose another output") from None
            held.append(fd)
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"pid {os.getpid()}: {path}".encode(), 0)
        yield
    finally:
        for fd in held:
            os.close(fd)


def _flag(param: inspect.Parameter) -> str:
    """An option's primary name (``--out``) from its typer declaration (a default or an Annotated one)."""
    infos = [param.default, *get_args(param.annotation)[1:]]
    for info in infos:
        if isinstance(info, typer.models.ArgumentInfo):
            return param.name
        decls = [d for d in getattr(info, "param_decls", None) or () if d.startswith("--")]
        if decls:
            return decls[0]
    return "--" + param.name.replace("_", "-")


def _inputs(kwargs: dict, outputs: dict) -> set[Path]:
    """The existing files a command was given as its other path parameters (one path or a list of them)."""
    out = set()
    for name, v in kwargs.items():
        if name in outputs:
            continue
        for x in (v if isinstance(v, (list, tuple)) else [v]):
            if isinstance(x, Path) and x.is_file():
                out.add(x.resolve())
    return out


def force_option(outputs: dict[str, str]):
    """The ``--force`` option of a command writing ``outputs`` (its flag -> output kind), its help naming them."""
    folders = [f for f, k in outputs.items() if k in ("folder", "runs")]
    files = [f for f, k in outputs.items() if k not in ("folder", "runs")]
    parts = ([f"overwrite a file git tracks ({', '.join(files)})"] if files else []) + \
        ([f"write into a non-empty {' or '.join(folders)} folder"] if folders else [])
    return Annotated[bool, typer.Option("--force", help=", or ".join(parts) or ForceOpt.__metadata__[0].help)]


def writes(**outputs: str):
    """Declare a command's outputs (parameter name -> kind, :data:`KINDS`) and enforce the contract on them before
    the command runs (module docstring). Put it under ``@app.command()``."""
    for kind in outputs.values():
        if kind not in KINDS:
            raise ValueError(f"unknown output kind {kind!r}")

    def deco(fn):
        sig = inspect.signature(fn, eval_str=True)
        missing = set(outputs) - set(sig.parameters)
        if missing:
            raise TypeError(f"{fn.__name__} has no parameter {sorted(missing)}")
        own_force = "force" in sig.parameters
        flags = {name: _flag(sig.parameters[name]) for name in outputs}

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            force = bool(kwargs.get("force") if own_force else kwargs.pop("force", False))
            fmt = kwargs.get("fmt") or "table"
            targets = [(kwargs.get(name), kind, flags[name]) for name, kind in outputs.items()]
            targets = [(Path(p), k, f) for p, k, f in targets if p is not None]
            seen: dict[Path, str] = {}
            for p, _, f in targets:
                if p.resolve() in seen:
                    raise InputError(None, f, f"{p} is also {seen[p.resolve()]}: give each output its own path")
                seen[p.resolve()] = f
            inputs = _inputs(kwargs, outputs)
            for p, _, f in targets:
                if p.resolve() in inputs:
                    raise InputError(None, f, f"{p} is also an input of this command: writing it would destroy what "
                                     "is being read; give the output another path")
            for p, k, f in targets:
                check_out(p, fmt if k == "table" else "table", force, kind=k, flag=f)
            with output_lock([(p, f) for p, _, f in targets]):
                for p, k, f in targets:  # again under the lock: a run that finished meanwhile filled the folder
                    check_out(p, fmt if k == "table" else "table", force, kind=k, flag=f)
                return fn(*args, **kwargs)

        params = list(sig.parameters.values())
        annotations = dict(getattr(fn, "__annotations__", {}))
        if not own_force:
            opt = force_option({flags[n]: k for n, k in outputs.items()})
            params.append(inspect.Parameter("force", inspect.Parameter.KEYWORD_ONLY, default=False, annotation=opt))
            annotations["force"] = opt
        wrapper.__signature__ = sig.replace(parameters=params)
        wrapper.__annotations__ = annotations
        wrapper.__writes__ = dict(outputs)
        return wrapper

    return deco


def declared_outputs(callback) -> dict[str, str]:
    """What :func:`writes` declared on a command's callback (through other wrappers); {} when nothing."""
    while callback is not None:
        if hasattr(callback, "__writes__"):
            return dict(callback.__writes__)
        callback = getattr(callback, "__wrapped__", None)
    return {}
