"""What the embedded store's client (``embedded.py``) and its server process
(``embedded_server/``) agree on: the data directory's file names, the token's
environment variable and user, the identity command, and how its small private files
are written. Both import this module and not each other (issue 32: the server used to
import the client for these)."""

from __future__ import annotations

import os
import secrets
from pathlib import Path

SOCKET_NAME = "store.sock"
IDENTITY_NAME = "instance.id"
TOKEN_NAME = "store.token"
TOKEN_ENV = "CHEETO_STORE_TOKEN"
TOKEN_USER = "cheeto"
IDENTITY_COMMAND = "cheetoIdentity"
# the server's exit status when another server holds the data directory's lock: a start
# that lost a race to another client's start, which waits for the winner to listen
ALREADY_SERVED_EXIT = 3


def write_private(path: Path, text: str) -> None:
    """Write a small file readable by its owner only (0600, whatever the umask)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(text)
    os.chmod(path, 0o600)


def read_instance_id(data_dir: Path) -> str | None:
    try:
        return (data_dir / IDENTITY_NAME).read_text().strip() or None
    except OSError:
        return None


def ensure_instance_id(data_dir: Path) -> str:
    """The data directory's identity, made once (the server calls this at start)."""
    current = read_instance_id(data_dir)
    if current is None:
        current = secrets.token_hex(16)
        write_private(data_dir / IDENTITY_NAME, current + "\n")
    return current
