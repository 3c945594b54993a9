"""Issue 19: the README's walkthrough runs top to bottom as written.

The shell blocks marked ``<!-- walkthrough -->`` are extracted (so the docs cannot drift from this test) and
run in order, each with ``bash -e``, in a copy of the repository's tracked files with the project's venv and
model cache linked in. Each block must exit 0 and write only under ``out/``. The blocks are read from
README.md first (one per use: what-if, capacity, calibrate, validate), then from any docs/*.md page that
carries the marker, in file-name order (issue 29: a block moved out of the README is still run).
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MARK = "<!-- walkthrough -->"


def walkthrough_blocks(text: str) -> list[str]:
    """The ```bash blocks that directly follow a walkthrough marker, in file order."""
    pat = re.compile(re.escape(MARK) + r"\s*\n```bash\n(.*?)\n```", re.S)
    return [m.group(1) for m in pat.finditer(text)]


def walkthrough_files() -> list[Path]:
    """README.md, then every docs page that carries a walkthrough marker (file-name order)."""
    docs = sorted(p for p in (ROOT / "docs").glob("*.md") if MARK in p.read_text(encoding="utf-8"))
    return [ROOT / "README.md", *docs]


def all_walkthrough_blocks() -> list[str]:
    return [b for f in walkthrough_files() for b in walkthrough_blocks(f.read_text(encoding="utf-8"))]


def test_walkthrough_blocks_are_found_and_write_under_out():
    readme = walkthrough_blocks((ROOT / "README.md").read_text(encoding="utf-8"))
    assert len(readme) >= 4, "README lost its walkthrough markers"
    for use in ("specsim simulate whatif", "specsim simulate capacity", "specsim measure run", "specsim validate runs"):
        assert any(use in b for b in readme), f"the README has no walkthrough block running `{use}`"
    for f in walkthrough_files():
        text = f.read_text(encoding="utf-8")
        assert text.count(MARK) == len(walkthrough_blocks(text)), \
            f"{f.relative_to(ROOT)}: a walkthrough marker is not followed by a ```bash block"
    for b in all_walkthrough_blocks():
        for m in re.finditer(r"--(?:out|report)\s+(\S+)", b):
            path = m.group(1)
            assert path.startswith(("out/", "$W/", "$W")), f"walkthrough writes outside out/: {path}"
        assert "runs/*" not in b.replace("$W/runs/*", ""), "a bare runs/* glob picks up other folders"
        assert "reports/" not in b, "walkthrough writes into the committed reports/"


def _copy_repo(dst: Path) -> None:
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout.split(b"\0")
    for f in (x.decode() for x in files if x):
        src = ROOT / f
        if src.is_file():
            (dst / f).parent.mkdir(parents=True, exist_ok=True)
            (dst / f).write_bytes(src.read_bytes())
    (dst / ".venv").symlink_to(ROOT / ".venv")
    (dst / ".cache").mkdir()
    models = ROOT / ".cache" / "models"
    if models.is_dir():  # prepare-models then finds the converted models and skips the ~25 s conversion
        (dst / ".cache" / "models").symlink_to(models)


@pytest.mark.real_engine
def test_readme_walkthrough_runs_in_order(tmp_path):
    if not (ROOT / ".venv" / "bin" / "specsim").exists():
        pytest.skip("no .venv (make engines)")
    pytest.importorskip("vllm")
    pytest.importorskip("torch")
    blocks = all_walkthrough_blocks()
    repo = tmp_path / "repo"
    repo.mkdir()
    _copy_repo(repo)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST", "SPECSIM_"))}
    times = []
    for i, block in enumerate(blocks):
        t0 = time.perf_counter()
        r = subprocess.run(["bash", "-e", "-c", block], cwd=repo, env=env, capture_output=True, text=True,
                           timeout=600)
        times.append(time.perf_counter() - t0)
        assert r.returncode == 0, f"walkthrough block {i + 1} failed ({r.returncode}):\n{block}\n--- stderr:\n{r.stderr[-3000:]}"
        assert "Traceback" not in r.stderr
        assert " INFO " not in r.stderr + r.stdout, "engine INFO logs are not quiet by default"
    print("walkthrough block times (s):", ", ".join(f"{t:.0f}" for t in times))
    tracked_top = {f.split("/")[0] for f in subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True,
                                                            text=True, check=True).stdout.split()}
    written = set(os.listdir(repo)) - tracked_top - {".venv", ".cache"}
    assert written <= {"out"}, f"walkthrough wrote outside out/: {sorted(written)}"
    assert (repo / "out/fit-demo/validation/report.md").is_file()
    assert (repo / "out/whatif/grid.csv").is_file() and (repo / "out/capacity/cpu-smollm2.csv").is_file()
