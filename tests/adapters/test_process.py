"""``adapters/process.py``: what every outside program run guarantees.

Real programs (bash, cat, sleep): exit codes and both outputs come back whole; the time
limit holds; an overrun or a cancelled caller kills the whole process group (children
that keep the pipes open included) and keeps what was printed before; a missing program
is one ``ExternalError``; the child gets exactly the given environment and an empty stdin.
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import pytest

from cheeto_like.adapters.process import run_process
from cheeto_like.errors import ExternalError

ENV = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C"}


async def run(script: str, *, time_limit: float = 10, env: dict[str, str] | None = None):
    return await run_process(["bash", "-c", script], time_limit=time_limit,
                             env=ENV if env is None else env, missing="bash is not installed")


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


async def gone(pid: int, within: float = 5.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if not alive(pid):
            return True
        await asyncio.sleep(0.05)
    return False


async def test_exit_code_and_both_outputs():
    code, out, err, seconds = await run("echo out; echo err >&2; printf 'x\\xff'; exit 3")
    assert (code, out, err) == (3, "out\nx\ufffd", "err\n")
    assert 0 <= seconds < 5
    assert (await run("true"))[0] == 0


async def test_the_child_gets_the_given_environment_and_an_empty_stdin():
    code, out, _, _ = await run("echo \"$ONLY_THIS\" \"${HOME:-unset}\"; cat",
                                env={**ENV, "ONLY_THIS": "yes"})
    assert (code, out) == (0, "yes unset\n")  # cat saw EOF at once: no inherited stdin


async def test_an_overrun_kills_the_process_group_and_keeps_the_output(tmp_path: Path):
    pid_file = tmp_path / "child.pid"
    started = time.monotonic()
    code, out, err, seconds = await run(
        f"echo before; echo warn >&2; sleep 60 & echo $! > {pid_file}; wait", time_limit=1)
    assert code is None  # killed at the time limit
    assert (out, err) == ("before\n", "warn\n")
    assert 1 <= seconds < 5 and time.monotonic() - started < 5
    assert await gone(int(pid_file.read_text())), "a child survived the timeout"


async def test_a_cancelled_caller_kills_the_process_group(tmp_path: Path):
    pid_file = tmp_path / "child.pid"
    task = asyncio.create_task(run(f"sleep 60 & echo $! > {pid_file}; wait", time_limit=60))
    for _ in range(100):
        if pid_file.exists() and pid_file.read_text().strip():
            break
        await asyncio.sleep(0.05)
    child = int(pid_file.read_text())
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await gone(child), "a child survived the cancellation"


async def test_nothing_left_behind_outlives_the_call(tmp_path: Path):
    """A child that let go of the pipes and outlived the program is killed with its
    group when the program ends."""
    pid_file = tmp_path / "child.pid"
    code, out, _, _ = await run(
        f"sleep 60 </dev/null >/dev/null 2>&1 & echo $! > {pid_file}; echo done")
    assert (code, out) == (0, "done\n")
    assert await gone(int(pid_file.read_text())), "a left-behind child survived the call"


async def test_a_missing_program_is_one_external_error():
    with pytest.raises(ExternalError) as err:
        await run_process(["no-such-program-h7"], time_limit=5, env=ENV,
                          missing="no-such-program-h7 is not installed here")
    assert err.value.message == "no-such-program-h7 is not installed here"


async def test_the_program_is_found_on_the_given_path(tmp_path: Path):
    tool = tmp_path / "h7tool"
    tool.write_text("#!/bin/sh\necho found-it\n")
    tool.chmod(0o755)
    env = {**ENV, "PATH": f"{tmp_path}:{ENV['PATH']}"}
    code, out, _, _ = await run_process(["h7tool"], time_limit=5, env=env, missing="missing")
    assert (code, out) == (0, "found-it\n")


async def test_a_quick_program_is_never_reported_as_timed_out():
    """sh's own ``await`` polls once a second for the exit after the pipes close; a 0.9 s
    limit on ``true`` used to fail about one run in twenty."""
    results = [await run_process(["true"], time_limit=0.9, env=ENV, missing="no true")
               for _ in range(40)]
    assert [code for code, *_ in results] == [0] * 40


async def test_runs_in_parallel():
    started = time.monotonic()
    results = await asyncio.gather(*(run("sleep 0.5; echo $$") for _ in range(4)))
    assert all(code == 0 for code, *_ in results)
    assert len({out for _, out, _, _ in results}) == 4
    assert time.monotonic() - started < 2.0
