"""A writer killed mid-transaction leaves all of its operation or none of it, and the
embedded store keeps working: the server, not the client, owns transactions.

A real class-batch chunk of 40 accounts (one transaction, ~800 commands) runs in a subprocess
that prints each command it sends; the test kills it (SIGKILL, then SIGTERM) after the
k-th command for 20 values of k spread over the whole transaction. After every kill the
store holds the whole batch (users, groups, homes, History row) or none of it, and at the
end a plain write survives a server restart.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from pymongo import MongoClient

from cheeto_like.config import EmbeddedStoreConfig
from cheeto_like.credentials import hash_password
from cheeto_like.embedded import EmbeddedServer

from .writer import DATABASE

ROOT = Path(__file__).resolve().parents[2]
BATCH = 40
POINTS = 20


def writer(data_dir: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "tests.embedded.writer", str(data_dir),
                             *args], cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedServer]:
    embedded = EmbeddedServer(EmbeddedStoreConfig(path=tmp_path_factory.mktemp("kill") / "s"),
                              exit_with=os.getpid())
    embedded.start_background()
    try:
        setup = writer(embedded.data_dir, "setup")
        _, err = setup.communicate(timeout=60)
        assert setup.returncode == 0, err
        yield embedded
    finally:
        embedded.stop()


def outcome(server: EmbeddedServer, prefix: str) -> str:
    """'all', 'none', or a description of the partial state (a failure)."""
    names = [f"{prefix}-{i:0{len(str(BATCH))}d}" for i in range(1, BATCH + 1)]
    with MongoClient(server.uri, serverSelectionTimeoutMS=5000) as client:
        db = client[DATABASE]
        users = db.users.count_documents({"name": {"$in": names}})
        groups = db.groups.count_documents({"name": {"$in": names}})
        homes = db.storages.count_documents({"owner": {"$in": names}})
        history = sum(1 for row in db.history.find({"op": "create_class_users_chunk"})
                      if row["changes"]["users"][0] == names[0])
    counts = (users, groups, homes, history)
    if counts == (BATCH, BATCH, BATCH, 1):
        return "all"
    if counts == (0, 0, 0, 0):
        return "none"
    return f"partial: users={users} groups={groups} homes={homes} history={history}"


def batch_writer(server: EmbeddedServer, prefix: str, hashed: str) -> subprocess.Popen[str]:
    return writer(server.data_dir, "batch", prefix, str(BATCH), hashed)


def kill_after(proc: subprocess.Popen[str], commands: int | None, signum: int) -> int:
    """Let a started batch writer go and send ``signum`` once it has sent ``commands``
    commands (never when None); returns the number of the command that committed, or
    the last one seen."""
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write("go\n")
    proc.stdin.flush()
    seen = 0
    return_at = 0
    started = False
    for line in proc.stdout:
        if line.startswith("go"):
            started = True
        elif started and line.startswith("cmd "):
            seen += 1
            if line.strip() == "cmd commitTransaction":
                return_at = seen
            if commands is not None and seen >= commands:
                os.kill(proc.pid, signum)
                break
        elif line.startswith("done"):
            break
    proc.communicate(timeout=30)
    return return_at or seen


def test_killed_writers_leave_all_or_nothing(server: EmbeddedServer) -> None:
    hashed = hash_password("class-password")
    # one undisturbed batch says how many commands the transaction takes, up to its commit
    commit_at = kill_after(batch_writer(server, "calibrate", hashed), None, signal.SIGKILL)
    assert outcome(server, "calibrate") == "all" and commit_at > 200
    # POINTS kills spread over the transaction, and one as the commit is sent
    points = [1 + i * (commit_at - 2) // POINTS for i in range(POINTS)] + [commit_at]
    runs = [(signum, n, commands) for signum in (signal.SIGKILL, signal.SIGTERM)
            for n, commands in enumerate(points)]
    results: dict[str, list[str]] = {}
    # each writer starts (imports, connects) while the previous one runs
    upcoming = batch_writer(server, f"k{runs[0][0]}x{runs[0][1]:02d}", hashed)
    for index, (signum, n, commands) in enumerate(runs):
        proc = upcoming
        if index + 1 < len(runs):
            nxt = runs[index + 1]
            upcoming = batch_writer(server, f"k{nxt[0]}x{nxt[1]:02d}", hashed)
        kill_after(proc, commands, signum)
        result = outcome(server, f"k{signum}x{n:02d}")
        assert result in ("all", "none"), (signal.Signals(signum).name, commands, result)
        results.setdefault(signal.Signals(signum).name, []).append(result)
    for name, seen in results.items():
        # the kills really land inside the transaction, not only before or after it
        assert seen.count("none") >= POINTS // 2, (name, seen)

    # the store still takes writes, and they survive a restart
    proc = writer(server.data_dir, "user", "postkill", "4242")
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0 and "done" in out, err
    assert server.stop()
    server.start_background()
    with MongoClient(server.uri, serverSelectionTimeoutMS=5000) as client:
        db = client[DATABASE]
        assert db.users.count_documents({"name": "postkill"}) == 1
        assert db.history.count_documents({"op": "create_user"}) == 1
    assert outcome(server, "postkill-never") == "none"


def test_a_store_started_for_a_process_stops_when_that_process_is_killed(
        tmp_path: Path) -> None:
    """``exit_with``: the test session's (or a bench's) throwaway store does not outlive
    a SIGKILLed pytest; a store started without it stays up (the CLI's autostart)."""
    import time

    owner = subprocess.Popen(["sleep", "300"])
    followed = EmbeddedServer(EmbeddedStoreConfig(path=tmp_path / "followed"),
                              exit_with=owner.pid)
    free = EmbeddedServer(EmbeddedStoreConfig(path=tmp_path / "free"))
    pid = followed.start_background()
    free.start_background()
    try:
        assert followed.is_up() and "--exit-with" in followed.command()
        owner.kill()
        owner.wait()
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and EmbeddedServer._alive(pid):
            time.sleep(0.1)
        assert not EmbeddedServer._alive(pid) and not followed.is_up()
        assert free.is_up()
    finally:
        owner.kill()
        followed.stop()
        free.stop()
