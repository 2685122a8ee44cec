"""cheeto-like: source of truth for HPC accounts and resources.

The version has one home, ``[project] version`` in ``pyproject.toml``. ``__version__`` reads
it on first use (so ``cheeto --help`` and completion pay nothing for it): from the
``pyproject.toml`` beside the package when there is one (a checkout, the editable install
of ``scripts/setup.sh``, the container image, which copies it to /app), else from the
installed package's metadata (a wheel).
"""

from __future__ import annotations

import re
from pathlib import Path

_PYPROJECT = Path(__file__).resolve().parent.parent / "pyproject.toml"
_cached: str | None = None


def _from_pyproject(text: str) -> str | None:
    """The ``version`` of the ``[project]`` table, if this is cheeto-like's pyproject."""
    project = re.search(r"^\[project\]\s*$(.*?)(?=^\[|\Z)", text, re.M | re.S)
    if project is None or not re.search(r'^name\s*=\s*"cheeto-like"\s*$', project.group(1),
                                        re.M):
        return None
    found = re.search(r'^version\s*=\s*"([^"]+)"\s*$', project.group(1), re.M)
    return found.group(1) if found else None


def version() -> str:
    """cheeto-like's version (``pyproject.toml``, else the installed metadata)."""
    global _cached
    if _cached is None:
        try:
            found = _from_pyproject(_PYPROJECT.read_text(encoding="utf-8"))
        except OSError:
            found = None
        if found is None:
            from importlib.metadata import PackageNotFoundError
            from importlib.metadata import version as dist_version
            try:
                found = dist_version("cheeto-like")
            except PackageNotFoundError:
                found = "0+unknown"
        _cached = found
    return _cached


def __getattr__(name: str) -> str:
    if name == "__version__":
        return version()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
