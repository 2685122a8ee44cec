"""``cheeto ipython`` on a real terminal: the installed-IPython branch.

The command is started as its own process on a pseudo-terminal (the standard library's
``pty``), so its standard input is a tty and IPython (a dependency) takes over from the
plain console; the keystrokes are written to the terminal's master side, as a person
would type them. ``PROMPT_TOOLKIT_NO_CPR`` stops prompt_toolkit from asking the terminal
for its cursor position (nothing here would answer), and ``IPYTHONDIR`` keeps IPython's
history database in the test's own directory.
"""

from __future__ import annotations

import os
import pty
import re
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.factories import make_site, make_user

CHEETO = str(Path(sys.executable).parent / "cheeto")
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07|\x1b[=>]|\r")


class Terminal:
    """A child process on a pty, with a small ``expect``: read until a pattern shows up
    (a generous limit only guards against a hang; nothing here measures time)."""

    def __init__(self, argv: list[str], env: dict[str, str]) -> None:
        self.master, slave = pty.openpty()
        self.proc = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, env=env,
                                     start_new_session=True, close_fds=True)
        os.close(slave)
        self.seen = ""

    def expect(self, pattern: str, limit: float = 90.0) -> re.Match[str]:
        deadline = time.monotonic() + limit
        while True:
            if match := re.search(pattern, ANSI.sub("", self.seen)):
                return match
            left = deadline - time.monotonic()
            assert left > 0, f"never saw {pattern!r}; the terminal showed:\n{self.clean}"
            ready, _, _ = select.select([self.master], [], [], min(left, 1.0))
            if ready:
                try:
                    chunk = os.read(self.master, 65536)
                except OSError:  # the child closed the terminal
                    chunk = b""
                if not chunk:
                    raise AssertionError(f"the shell ended before {pattern!r}:\n"
                                         f"{self.clean}")
                self.seen += chunk.decode(errors="replace")

    def send(self, line: str) -> None:
        os.write(self.master, line.encode() + b"\r")

    @property
    def clean(self) -> str:
        return ANSI.sub("", self.seen)

    def close(self) -> int:
        try:
            return self.proc.wait(timeout=60)
        finally:
            if self.proc.poll() is None:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
            os.close(self.master)


async def test_ipython_on_a_terminal_reads_the_store_and_exits(db, cli_config, tmp_path):
    await make_site(db, "farm")
    for name in ("ada", "bob", "cyd"):
        await make_user(db, name)
    env = {**os.environ, "TERM": "xterm", "PROMPT_TOOLKIT_NO_CPR": "1",
           "IPYTHONDIR": str(tmp_path / "ipython"), "COLUMNS": "200", "LINES": "50"}
    term = Terminal([CHEETO, "ipython", "--config", str(cli_config)], env)
    try:
        term.expect(r"cheeto shell: store \(database t_cli_test_ipython_pty\)")
        term.expect(r"In \[1\]")
        # Proof that IPython, not the plain console, is answering.
        term.send("print('shell=' + type(get_ipython()).__name__)")
        term.expect(r"shell=TerminalInteractiveShell")
        # A top-level await on the command's event loop, where the store's client lives.
        term.send("print('users=' + str(await User.find().count()))")
        term.expect(r"users=3\b")
        term.send("print('site=' + (await Site.find_one({'name': 'farm'})).fqdn)")
        term.expect(r"site=farm\.example\.org")
        term.send("exit")
        code = term.close()
    except BaseException:
        if term.proc.poll() is None:
            os.killpg(term.proc.pid, signal.SIGKILL)
        raise
    assert code == 0, term.clean
    assert "Traceback" not in term.clean, term.clean
