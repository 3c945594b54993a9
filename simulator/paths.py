"""Where the project's own files and the shared third-party data live: the one place that knows the layout.

``SHARED_DATA`` is the released measurements folder (``../shared/data`` beside the repository, read-only, never
copied in); set ``SPECSIM_SHARED_DATA`` to point elsewhere. Library code names data folders through it, never a
literal ``../shared`` path."""

from __future__ import annotations

import functools
import os
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CATALOG_DIR = REPO / "simulator" / "catalog"
PROFILES_DIR = REPO / "simulator" / "profiles"
SCENARIOS_DIR = REPO / "scenarios"
GPU_PROFILES_DIR = REPO / "calibrate" / "gpu_priors" / "profiles"
SHARED_DATA = Path(os.environ.get("SPECSIM_SHARED_DATA") or REPO.parent / "shared" / "data")


def shared(*parts: str) -> Path:
    """A folder or file under the shared data (it may be absent: callers say so and skip)."""
    return SHARED_DATA.joinpath(*parts)


def profile_dir(kind: str) -> Path:
    """The folder holding profiles of one kind (``KIND_NAME.yaml``): GPU kernel profiles are the GPU-priors
    pipeline's own; cost, workload and accuracy profiles are the simulator's."""
    return GPU_PROFILES_DIR if kind == "gpu" else PROFILES_DIR


@functools.lru_cache(maxsize=1)
def code_version() -> str:
    """Which code computed an output, for its provenance: the package version and the repository's commit
    (``+ local changes`` when tracked files differ from it), or "not a git checkout" (an installed copy)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        v = version("specreason-sim")
    except PackageNotFoundError:
        v = "unknown version"
    try:
        sha = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=REPO, capture_output=True, text=True,
                             timeout=10)
        dirty = subprocess.run(["git", "diff", "--quiet", "HEAD", "--"], cwd=REPO, capture_output=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return f"specreason-sim {v} (not a git checkout)"
    if sha.returncode != 0:
        return f"specreason-sim {v} (not a git checkout)"
    return f"specreason-sim {v}, git {sha.stdout.strip()}" + (" + local changes" if dirty.returncode else "")
