"""The embedded store's files: damage is an error naming the path, never a fresh empty store.

nx-27017 opens (and so creates) ``<data dir>/<db>.db`` whenever a client touches a
database. Left alone, a deleted, truncated or replaced file therefore comes back as an
empty store and every command "works". The marker ``<data dir>/store.json`` (0600)
records each database file we have seen, with its inode, so that:

- at connect, a recorded file that is missing, empty, not SQLite, or (while the server
  runs) replaced by another inode is an ``ExternalError`` naming the path;
- before every session, ``FileGuard`` re-checks the file's inode with one ``stat`` call,
  so a file deleted under a running server refuses writes instead of losing them;
- the first creation of a database is said once (the caller prints the note).

Only the client side and the server's start-up read the marker; nx-27017 itself is not
changed. A real MongoDB has no files and none of this applies.
"""

from __future__ import annotations

import fcntl
import json
import os
import sqlite3
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from .errors import ExternalError

MARKER_NAME = "store.json"
SQLITE_MAGIC = b"SQLite format 3\x00"
# SQLite writes its header as it opens a new file; a 0-byte file can only be seen in that
# instant, so an unrecorded empty file is looked at again once before it counts as damage.
EMPTY_RECHECK_S = 0.2

RESTORE_HINT = "to start over from a backup see `cheeto db restore --help`"


def database_file(data_dir: Path, database: str) -> Path:
    """The SQLite file nx-27017 keeps ``database`` in (its multi-file layout)."""
    return Path(data_dir) / f"{database}.db"


def marker_path(data_dir: Path) -> Path:
    return Path(data_dir) / MARKER_NAME


# -- the marker -------------------------------------------------------------------------


def read_marker(data_dir: Path) -> dict[str, dict[str, Any]]:
    """Recorded databases (name -> {inode, device, created_at}); {} when none yet."""
    path = marker_path(data_dir)
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise ExternalError(f"{path}: unreadable store marker ({exc}); fix or remove it") \
            from None
    databases = data.get("databases") if isinstance(data, dict) else None
    if not isinstance(databases, dict):
        raise ExternalError(f"{path}: not a store marker (no 'databases' table)")
    return databases


@contextmanager
def _marker_lock(data_dir: Path) -> Iterator[None]:
    fd = os.open(Path(data_dir) / f"{MARKER_NAME}.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _write_marker(data_dir: Path, databases: dict[str, dict[str, Any]]) -> None:
    path = marker_path(data_dir)
    tmp = path.with_name(f".{MARKER_NAME}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        json.dump({"format": 1, "databases": databases}, fh, indent=2, sort_keys=True)
        fh.write("\n")
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def record(data_dir: Path, database: str) -> None:
    """Record (or refresh) ``database``'s file identity in the marker."""
    path = database_file(data_dir, database)
    st = path.stat()
    with _marker_lock(data_dir):
        databases = read_marker(data_dir)
        entry = databases.get(database, {})
        entry.setdefault("created_at", datetime.now(UTC).isoformat(timespec="seconds"))
        entry |= {"inode": st.st_ino, "device": st.st_dev}
        databases[database] = entry
        _write_marker(data_dir, databases)


def forget(data_dir: Path, database: str) -> None:
    """Drop ``database`` from the marker (after a deliberate drop of that database)."""
    with _marker_lock(data_dir):
        databases = read_marker(data_dir)
        if databases.pop(database, None) is not None:
            _write_marker(data_dir, databases)


# -- checks -----------------------------------------------------------------------------


def header_problem(path: Path) -> str | None:
    """Why ``path`` is not a usable SQLite file (None when its header is fine)."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(len(SQLITE_MAGIC))
    except FileNotFoundError:
        return "is missing"
    except OSError as exc:
        return f"cannot be read ({exc.strerror})"
    if not head:
        return "is empty (0 bytes)"
    if head != SQLITE_MAGIC:
        return "is not an SQLite database (bad header)"
    return None


def damage_error(path: Path, problem: str) -> ExternalError:
    return ExternalError(f"store file {path} {problem}; {RESTORE_HINT}")


@dataclass
class Checked:
    """What ``check_before_connect`` found, handed to ``after_connect``."""

    data_dir: Path
    database: str
    existed: bool
    inode: int | None


def check_before_connect(data_dir: Path, database: str, *, server_up: bool) -> Checked:
    """Refuse a damaged, missing or swapped file before any client can touch it.

    A recorded file must exist with a SQLite header. While a server runs it must also be
    the recorded inode: the server may hold the old, deleted one open (writes would go
    nowhere) or have just made a new empty one. With the server down, a valid file under
    another inode was put there deliberately (copied back from a backup) and is adopted.
    """
    path = database_file(data_dir, database)
    recorded = read_marker(data_dir).get(database)
    problem = header_problem(path)
    if problem == "is empty (0 bytes)" and recorded is None:
        time.sleep(EMPTY_RECHECK_S)
        problem = header_problem(path)
    if problem == "is missing":
        if recorded is not None:
            raise damage_error(path, "is missing (the store marker "
                               f"{marker_path(data_dir)} says it existed)")
        return Checked(data_dir, database, existed=False, inode=None)
    if problem is not None:
        raise damage_error(path, problem)
    inode = path.stat().st_ino
    if recorded is not None and recorded.get("inode") != inode:
        if server_up:
            raise damage_error(path, "was replaced or re-created while the embedded store "
                               "ran (its inode changed)")
        record(data_dir, database)
    return Checked(data_dir, database, existed=True, inode=inode)


def after_connect(checked: Checked) -> tuple[FileGuard, str | None]:
    """Record the file once the server has it, and say so the first time.

    Returns the guard for the store's sessions and, for a database created just now,
    the one-line note to print.
    """
    path = database_file(checked.data_dir, checked.database)
    note = None
    if not checked.existed and path.exists():
        problem = header_problem(path)
        if problem is not None:
            raise damage_error(path, problem)
        record(checked.data_dir, checked.database)
        note = f"created a new store database {checked.database!r} in {path}"
        checked.inode = path.stat().st_ino
    elif checked.existed and not read_marker(checked.data_dir).get(checked.database):
        record(checked.data_dir, checked.database)  # a store from before the marker
    return FileGuard(checked.data_dir, checked.database, checked.inode), note


class FileGuard:
    """Called before every session: the database file must still be the one we saw.

    One ``stat`` per session; a file not yet created at connect is adopted (and recorded)
    the first time it is seen.
    """

    def __init__(self, data_dir: Path, database: str, inode: int | None) -> None:
        self.data_dir = data_dir
        self.database = database
        self.path = database_file(data_dir, database)
        self.inode = inode

    def __call__(self) -> None:
        try:
            inode = os.stat(self.path).st_ino
        except FileNotFoundError:
            if self.inode is None:
                return  # not created yet: nothing to lose
            raise damage_error(self.path, "was deleted while the embedded store ran; "
                               "refusing to write (the writes would be lost)") from None
        if self.inode is None:
            self.inode = inode
            if self.database not in read_marker(self.data_dir):
                record(self.data_dir, self.database)
        elif inode != self.inode:
            raise damage_error(self.path, "was replaced while the embedded store ran; "
                               "refusing to write")

    def dropped(self) -> None:
        """The database was dropped on purpose: forget its file; adopt the next one."""
        forget(self.data_dir, self.database)
        self.inode = None


def start_over(data_dir: Path, database: str, *, server_up: bool) -> str | None:
    """Let ``db restore --force`` rebuild a database whose recorded file is gone.

    Refuses while a server runs (it may still hold the deleted file) and while a damaged
    file is in place (a person moves it aside; we never delete it). A leftover WAL and
    shared-memory file are renamed, not deleted: SQLite would replay a WAL into the new
    file. Returns a note for stderr, or None when the file is fine.
    """
    path = database_file(data_dir, database)
    recorded = read_marker(data_dir).get(database)
    problem = header_problem(path)
    if problem is None or (problem == "is missing" and recorded is None):
        return None
    if problem != "is missing":
        raise ExternalError(f"store file {path} {problem}; move it (and its -wal and -shm "
                            "files) aside first")
    if server_up:
        raise ExternalError(f"store file {path} is missing and the embedded store still "
                            "runs; stop it first (`cheeto db stop`)")
    stamp = time.strftime("%Y%m%dT%H%M%S")
    for suffix in ("-wal", "-shm"):
        leftover = Path(f"{path}{suffix}")
        if leftover.exists():
            leftover.rename(f"{leftover}.orphaned-{stamp}")
    forget(data_dir, database)
    return f"store file {path} was missing; starting it afresh for the restore"


def check_recorded(data_dir: Path) -> list[str]:
    """One line per recorded database whose file is missing or damaged (server start-up)."""
    problems = []
    for database in sorted(read_marker(data_dir)):
        path = database_file(data_dir, database)
        if (problem := header_problem(path)) is not None:
            problems.append(str(damage_error(path, problem)))
    return problems


# -- integrity (``cheeto db check``) ----------------------------------------------------


def integrity_check(path: Path, *, max_lines: int = 5, frozen: bool = False) -> list[str]:
    """SQLite's ``PRAGMA integrity_check`` on ``path``, opened read-only; [] when "ok".

    Read-only through a URI so the check can never create, modify or checkpoint the file
    the server has open (the WAL is still read, so committed data is seen). ``frozen``
    (no server can run on it: a full disk) reads the file as it is, as for a directory
    nobody can write.
    """
    if (problem := header_problem(path)) is not None:
        return [f"file {problem}"]
    # a directory nobody can write (a read-only file system) holds no live writer, and
    # SQLite could not make the WAL's index there: read the file as it is (immutable)
    immutable = "&immutable=1" if frozen or not os.access(path.parent, os.W_OK) else ""
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro{immutable}", uri=True, timeout=10)
        try:
            rows = conn.execute("PRAGMA integrity_check").fetchall()
        finally:
            conn.close()
    except sqlite3.Error as exc:
        return [f"sqlite: {exc}"]
    lines = [str(row[0]) for row in rows]
    return [] if lines == ["ok"] else lines[:max_lines]


def refuse_damaged(data_dir: Path) -> None:
    """Server start-up: exit 1, one line per damaged recorded file, rather than serve a
    data directory where nx-27017 would quietly start those databases afresh.

    A sound file under another inode than recorded was put there while no server ran
    (copied back from a backup): it is adopted, as ``check_before_connect`` does with
    the server down. Otherwise ``ServerFileWatch`` would take the recorded inode for the
    file it has open and refuse every write as "replaced while the embedded store ran"."""
    try:
        problems = check_recorded(data_dir)
        if not problems:
            for database, entry in read_marker(data_dir).items():
                if entry.get("inode") != database_file(data_dir, database).stat().st_ino:
                    record(data_dir, database)
    except ExternalError as exc:
        problems = [exc.message]
    if problems:
        for line in problems:
            print(f"error: {line}", file=sys.stderr, flush=True)
        raise SystemExit(1)


# -- server side ------------------------------------------------------------------------

WRITE_COMMANDS = frozenset({
    "insert", "update", "delete", "findAndModify", "findandmodify", "createIndexes",
    "create", "drop", "dropIndexes", "renameCollection", "bulkWrite",
})


class ServerFileWatch:
    """The server's own check before each write: the database file must still be the one
    it has open. Catches what a client's ``FileGuard`` cannot see (writes outside a
    session, other clients): a file deleted or swapped under the running server makes
    every write to that database fail with one message naming the file.

    The inode of each database comes from the marker (checked at start-up) or, for a
    database not recorded yet, from the first look; one ``stat`` per write command.
    """

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = Path(data_dir)
        self.inodes: dict[str, int] = {}

    def problem(self, command: dict[str, Any]) -> str | None:
        """Why ``command`` must be refused (None to run it)."""
        name = next(iter(command), "")
        database = command.get("$db")
        if not isinstance(database, str) or database in ("admin", "config", "local"):
            return None
        if name in ("dropDatabase", "dropdatabase"):
            self.inodes.pop(database, None)  # a deliberate drop: the next file is new
            return None
        if name not in WRITE_COMMANDS:
            return None
        path = database_file(self.data_dir, database)
        try:
            inode = os.stat(path).st_ino
        except FileNotFoundError:
            inode = None
        known = self.inodes.get(database)
        if known is None:
            try:
                recorded = read_marker(self.data_dir).get(database)
            except ExternalError:
                recorded = None
            known = recorded.get("inode") if recorded else None
            if known is None:
                if inode is not None:
                    self.inodes[database] = inode
                return None
            self.inodes[database] = known
        if inode is None:
            return (f"store file {path} was deleted while the embedded store ran; "
                    "refusing to write (the writes would be lost)")
        if inode != known:
            return (f"store file {path} was replaced while the embedded store ran; "
                    "refusing to write")
        return None
