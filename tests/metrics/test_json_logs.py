"""``--log-format json``: one JSON object per line, carrying ``logs.context``'s run id,
site and task, from real processes (a daemon process's logging, the CLI's option and
``$CHEETO_LOG_FORMAT``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import pytest

from cheeto_like import logs

CHEETO = str(Path(sys.executable).parent / "cheeto")

# a daemon process: setup_process_logging as `daemon worker` calls it, then logs inside
# contexts (nested, across asyncio tasks, in a thread of its own) and an exception
PROGRAM = r"""
import asyncio, logging, sys, threading
from cheeto_like import logs
from cheeto_like.daemon.app import setup_process_logging

setup_process_logging("INFO", None, sys.argv[1] if len(sys.argv) > 1 else None)
log = logging.getLogger("cheeto_like.daemon")
log.info("outside")
with logs.context(task="slurm_sync", site="farm"):
    with logs.context(run_id="r-123"):
        log.info("inside %s", "both")
    log.warning("task and site only")

    async def branch(n):
        await asyncio.sleep(0.01 * n)
        logging.getLogger("celery.worker").info("branch %d", n)

    async def main():
        with logs.context(run_id="r-async"):
            await asyncio.gather(branch(1), branch(2))
    asyncio.run(main())
seen = []
thread = threading.Thread(target=lambda: log.info("another thread"))
thread.start(); thread.join()
try:
    raise RuntimeError("boom\nsecond line")
except RuntimeError:
    log.exception("failed")
"""


def run_program(fmt: str | None, env: dict[str, str] | None = None) -> list[str]:
    argv = [sys.executable, "-c", PROGRAM, *([fmt] if fmt else [])]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=True,
                          env={**os.environ, **(env or {})})
    return done.stderr.splitlines()


def test_json_lines_parse_and_carry_the_context():
    lines = run_program("json")
    entries = [json.loads(line) for line in lines]  # every line is one object
    by_message = {e["message"]: e for e in entries}
    inside = by_message["inside both"]
    assert (inside["task"], inside["site"], inside["run_id"]) == ("slurm_sync", "farm", "r-123")
    assert inside["level"] == "INFO" and inside["logger"] == "cheeto_like.daemon"
    assert isinstance(inside["process"], int)
    assert datetime.fromisoformat(inside["time"]).utcoffset().total_seconds() == 0
    partial = by_message["task and site only"]
    assert partial["task"] == "slurm_sync" and "run_id" not in partial
    for n in (1, 2):  # asyncio copies the context into the tasks gather starts
        branch = by_message[f"branch {n}"]
        assert (branch["run_id"], branch["site"], branch["logger"]) == (
            "r-async", "farm", "celery.worker")
    for plain in ("outside", "another thread"):
        assert not {"task", "site", "run_id"} & set(by_message[plain])
    failed = by_message["failed"]
    assert failed["level"] == "ERROR"
    assert "RuntimeError: boom\nsecond line" in failed["exception"]
    assert "exception" not in inside


def test_text_stays_the_default_and_the_environment_may_choose_json():
    text = run_program(None)
    assert any("cheeto_like.daemon: inside both" in line for line in text)
    with pytest.raises(json.JSONDecodeError):
        json.loads(text[0])
    from_env = run_program(None, {"CHEETO_LOG_FORMAT": "json"})
    assert json.loads(from_env[0])["message"] == "outside"
    # an unknown value is text: a log setting never stops a service
    assert not run_program(None, {"CHEETO_LOG_FORMAT": "xml"})[0].startswith("{")
    # the option wins over the environment
    assert not run_program("text", {"CHEETO_LOG_FORMAT": "json"})[0].startswith("{")


def test_the_cli_option_is_checked():
    """Every command takes ``--log-format text|json``; anything else is a usage error.
    (A real command's JSON lines: ``test_exposition.py``'s worker runs with it.)"""
    bad = subprocess.run([CHEETO, "config", "show", "--log-format", "xml"],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "--log-format" in bad.stderr
    shown = subprocess.run([CHEETO, "daemon", "worker", "--help"], capture_output=True,
                           text=True, timeout=60, check=True)
    assert "--log-format {text,json}" in shown.stdout and "--metrics-port N" in shown.stdout


def test_context_restores_the_outer_fields():
    with logs.context(task="a", site=None):
        assert logs.current() == {"task": "a"}
        with logs.context(site="farm", task="b"):
            assert logs.current() == {"task": "b", "site": "farm"}
        assert logs.current() == {"task": "a"}
    assert logs.current() == {}
