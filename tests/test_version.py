"""The version has one home (pyproject.toml) and shows in every place that reports it:
the package (``cheeto_like.__version__``, its installed metadata), ``cheeto --version``
(``/healthz`` and the OpenAPI document: tests/daemon/test_api.py)."""

from __future__ import annotations

import importlib.metadata
import io
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import cheeto_like
from cheeto_like.cli.app import main

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def test_the_package_reads_pyproject() -> None:
    assert re.fullmatch(r"\d+\.\d+\.\d+([ab]|rc|\.dev)?\d*", PYPROJECT["version"])
    assert cheeto_like.__version__ == PYPROJECT["version"] == cheeto_like.version()


def test_installed_metadata_agrees() -> None:
    """The metadata `poetry install` wrote (pip show, wheels) carries the same version,
    the licence and the front page."""
    meta = importlib.metadata.metadata("cheeto-like")
    assert meta["Version"] == PYPROJECT["version"]


def test_pyproject_declares_the_licence() -> None:
    assert PYPROJECT["license"] == "MIT"
    assert (ROOT / "LICENSE").read_text().startswith("MIT License")
    assert PYPROJECT["readme"] == "README.md"


def test_version_parsing_reads_only_the_project_table() -> None:
    text = ('[tool.other]\nversion = "9.9.9"\n\n[project]\nname = "cheeto-like"\n'
            'version = "1.2.3"\n\n[build-system]\nversion = "0"\n')
    assert cheeto_like._from_pyproject(text) == "1.2.3"
    assert cheeto_like._from_pyproject(text.replace("cheeto-like", "other")) is None
    assert cheeto_like._from_pyproject("[tool.x]\nname = 1\n") is None


def test_without_pyproject_the_metadata_answers(monkeypatch: pytest.MonkeyPatch,
                                                tmp_path: Path) -> None:
    """A wheel install has no pyproject.toml beside the package."""
    monkeypatch.setattr(cheeto_like, "_PYPROJECT", tmp_path / "absent.toml")
    monkeypatch.setattr(cheeto_like, "_cached", None)
    assert cheeto_like.version() == importlib.metadata.version("cheeto-like")


def test_unknown_attribute_is_still_an_error() -> None:
    with pytest.raises(AttributeError):
        _ = cheeto_like.no_such_thing  # type: ignore[attr-defined]


def test_cheeto_version_in_process() -> None:
    out, err = io.StringIO(), io.StringIO()
    assert main(["--version"], stdout=out, stderr=err) == 0
    assert out.getvalue() == f"cheeto-like {PYPROJECT['version']}\n"


def test_cheeto_version_console_script() -> None:
    """The installed console script, as a user runs it: one line on stdout, exit 0."""
    cheeto = Path(sys.executable).parent / "cheeto"
    done = subprocess.run([str(cheeto), "--version"], capture_output=True, text=True,
                          timeout=60, check=False)
    assert (done.returncode, done.stdout, done.stderr) == (
        0, f"cheeto-like {PYPROJECT['version']}\n", "")
