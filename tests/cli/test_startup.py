"""The console script's start-up and exit (issue 31), through the real ``cheeto`` script
against an embedded store of its own (started in the background by the first command,
stopped at the end).

What the fast paths must keep: a read-only command imports and binds only the documents
it reads and still answers; the exit that skips the interpreter's teardown still runs
atexit handlers (a ``--log FILE`` gets its lines), flushes output a pipe reads, and
returns the command's exit code.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

CHEETO = Path(sys.executable).parent / "cheeto"


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, dict[str, str]]]:
    """A config naming a fresh embedded store, and an environment that reads nothing else."""
    home = tmp_path_factory.mktemp("startup")
    cfg = home / "config.yaml"
    cfg.write_text(f"mongo:\n  default:\n    embedded:\n      path: {home / 'store'}\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CHEETO_", "XDG_"))}
    env |= {"HOME": str(home), "XDG_CONFIG_HOME": str(home / "c"),
            "XDG_DATA_HOME": str(home / "d"), "XDG_STATE_HOME": str(home / "s"),
            "XDG_RUNTIME_DIR": str(home / "r"), "CHEETO_CONFIG": str(cfg)}
    seeded = _cheeto(env, "ng", "group", "seed-access-status")
    assert seeded.returncode == 0, seeded.stderr
    yield cfg, env
    subprocess.run([str(CHEETO), "db", "stop"], env=env, timeout=120, capture_output=True,
                   check=False)


def _cheeto(env: dict[str, str], *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(CHEETO), *argv], env=env, timeout=180, capture_output=True,
                          text=True, check=False)


def test_the_exit_keeps_logs_output_and_exit_codes(site: tuple[Path, dict[str, str]],
                                                   tmp_path: Path) -> None:
    _, env = site
    log = tmp_path / "cheeto.log"
    made = _cheeto(env, "ng", "user", "new", "generic", "--user", "alice", "--uid", "2001",
                   "--email", "alice@example.org", "--fullname", "Alice Example",
                   "--log", str(log), "--log-level", "INFO")
    assert made.returncode == 0, made.stderr
    # the operation's INFO line reached the file before the process left
    text = log.read_text()
    assert "INFO cheeto_like.operations.base: create_user by " in text, text
    assert "'user': 'alice'" in text, text

    shown = _cheeto(env, "ng", "user", "show", "-u", "alice", "--json")
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["uid"] == 2001  # the whole document, flushed

    missing = _cheeto(env, "ng", "user", "show", "-u", "nobody")
    assert missing.returncode == 2
    assert missing.stderr.strip().splitlines() == ["error: user 'nobody' does not exist"]

    # a long output through a pipe arrives whole (the streams are flushed before the exit)
    listing = _cheeto(env, "help")
    in_process = subprocess.run(
        [sys.executable, "-c", "import sys; from cheeto_like.cli import main; "
         "sys.exit(main(['help']))"], env=env, timeout=120, capture_output=True, text=True,
        check=False)
    assert listing.returncode == in_process.returncode == 0
    assert listing.stdout == in_process.stdout and len(listing.stdout) > 1000


def test_a_read_command_binds_only_the_documents_it_reads(
        site: tuple[Path, dict[str, str]]) -> None:
    """``ng user show`` (``store="read"``) imports the user, group, site and Slurm
    documents and binds those; the other modules are never imported, yet every document
    a full connect binds is still reachable through ``models.ALL_MODELS``."""
    _, env = site
    made = _cheeto(env, "ng", "user", "new", "generic", "--user", "bob", "--uid", "2002",
                   "--email", "bob@example.org", "--fullname", "Bob Example")
    assert made.returncode == 0, made.stderr
    script = "\n".join([
        "import json, sys",
        "from cheeto_like.cli import main",
        "rc = main(['ng', 'user', 'show', '-u', 'bob', '--json'])",
        "from beanie import Document",
        "mods = sorted(m for m in sys.modules if m.startswith('cheeto_like.models.'))",
        "from cheeto_like.models.user import User",
        "from cheeto_like.models.site import Site",
        "bound = [c.__name__ for c in (User, Site) if c.get_settings() is not None]",
        "print(json.dumps({'rc': rc, 'modules': mods, 'bound': bound}))",
    ])
    run = subprocess.run([sys.executable, "-c", script], env=env, timeout=120,
                         capture_output=True, text=True, check=False)
    assert run.returncode == 0, run.stderr
    found = json.loads(run.stdout.strip().splitlines()[-1])
    assert found["rc"] == 0
    assert found["bound"] == ["User", "Site"]
    modules = set(found["modules"])
    assert {"cheeto_like.models.user", "cheeto_like.models.site"} <= modules
    unused = {"cheeto_like.models.usage", "cheeto_like.models.quota",
              "cheeto_like.models.sync", "cheeto_like.models.audit",
              "cheeto_like.models.storage", "cheeto_like.models.history"}
    assert not modules & unused, modules & unused

    from cheeto_like import models

    names = {model.__name__ for model in models.ALL_MODELS}
    assert {"User", "Site", "UsageRecord", "Quota", "SyncRun", "History"} <= names
    assert len(names) == len(models.ALL_MODELS)
