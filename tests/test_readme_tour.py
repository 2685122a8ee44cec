"""README.md's CLI tour runs as written.

The block fenced as ```` ```bash tour ```` in README.md is extracted and run command by
command, top to bottom, in a subprocess shell with ``.venv/bin`` first on ``PATH``, a
throwaway ``HOME`` and XDG directories, and ``CHEETO_CONFIG`` pointing at this module's
test database. Every command must exit 0. The only commands skipped are those the README
marks ``# needs: <service>`` (services the tour does not start), by that marker.
"""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
FENCE = "```bash tour"
NEEDS = re.compile(r"#\s*needs:\s*([\w,-]+)")


def tour_block(text: str) -> list[str]:
    """The tour's lines: between the ```` ```bash tour ```` fence and the next fence."""
    lines = text.splitlines()
    starts = [i for i, line in enumerate(lines) if line.strip() == FENCE]
    assert len(starts) == 1, f"README.md must have exactly one {FENCE!r} block"
    body: list[str] = []
    for line in lines[starts[0] + 1:]:
        if line.strip().startswith("```"):
            return body
        body.append(line)
    raise AssertionError("the tour block is not closed")


def tour_commands(text: str) -> list[str]:
    """Whole commands (continuation lines joined), without comment-only lines."""
    commands: list[str] = []
    pending = ""
    for line in tour_block(text):
        if not pending and (not line.strip() or line.lstrip().startswith("#")):
            continue
        # a comment after the backslash is not allowed in shell: the continuation is
        # the last character of the line
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        commands.append((pending + line).strip())
        pending = ""
    assert not pending, f"dangling continuation: {pending!r}"
    return commands


def needs(command: str) -> list[str]:
    match = NEEDS.search(command)
    return match.group(1).split(",") if match else []


def test_tour_parses_and_marks_only_services() -> None:
    commands = tour_commands(README.read_text())
    assert len(commands) > 30
    known = {"slurm", "ldap", "hippo", "iam", "puppet-repo"}
    for command in commands:
        assert set(needs(command)) <= known, command


def test_extraction_joins_continuations() -> None:
    text = "x\n```bash tour\n# c\na \\\n  b  # note\n\nc  # needs: slurm\n```\n"
    assert tour_commands(text) == ["a    b  # note", "c  # needs: slurm"]
    assert needs("c  # needs: slurm,ldap") == ["slurm", "ldap"]


@pytest.fixture
def tour_env(cli_config: Path, tmp_path: Path) -> dict[str, str]:
    """A fresh home for the tour: its own HOME and XDG dirs, the test store's config."""
    home = tmp_path / "home"
    env = {key: value for key, value in os.environ.items()
           if not key.startswith(("CHEETO_", "XDG_"))}
    for var in ("XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME", "XDG_CACHE_HOME"):
        path = home / var.lower()
        path.mkdir(parents=True)
        env[var] = str(path)
    env["HOME"] = str(home)
    env["USER"] = env["LOGNAME"] = "tour"
    env["CHEETO_CONFIG"] = str(cli_config)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    return env


async def test_readme_tour_runs(empty_db, tour_env: dict[str, str], tmp_path: Path) -> None:
    """Every command of the tour succeeds on a fresh store, in order."""
    work = tmp_path / "work"
    work.mkdir()
    ran, skipped = 0, []
    for command in tour_commands(README.read_text()):
        if needs(command):
            skipped.append(command)
            continue
        result = await asyncio.to_thread(
            subprocess.run, ["bash", "-euo", "pipefail", "-c", command], cwd=work,
            env=tour_env, capture_output=True, text=True, timeout=120)
        assert result.returncode == 0, (
            f"tour command failed (exit {result.returncode}):\n  {command}\n"
            f"stdout: {result.stdout[-2000:]}\nstderr: {result.stderr[-2000:]}")
        ran += 1
    assert ran > 30 and len(skipped) < 12, (ran, skipped)
