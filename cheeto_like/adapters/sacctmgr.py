"""Run ``sacctmgr``: every call has a timeout, ``sudo -n`` when asked, and a result that
says exactly what happened (exit code, output, duration, timeout) instead of raising
halfway through an apply.

Every call passes ``-i``: without it writes (and some reads) prompt, and with stdin
closed sacctmgr loops forever. A call only counts as successful with exit code 0 *and* an
empty stderr, because sacctmgr reports several refusals with exit code 0
(docs/sacctmgr-notes.md §0).

This uses asyncio subprocesses rather than ``sh`` (DESIGN §1 names ``sh``): a timeout
here kills the process and still returns its output, and there is one less dependency.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from ..errors import ExternalError

DEFAULT_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class Result:
    argv: tuple[str, ...]
    returncode: int | None  # None: killed at the timeout
    stdout: str
    stderr: str
    seconds: float

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.stderr.strip()

    @property
    def timed_out(self) -> bool:
        return self.returncode is None

    def summary(self) -> str:
        if self.timed_out:
            return f"timed out after {self.seconds:.0f}s"
        text = (self.stderr.strip() or self.stdout.strip()).splitlines()
        detail = " / ".join(line.strip() for line in text[:3] if line.strip())
        return f"exit {self.returncode}" + (f": {detail}" if detail else "")


@dataclass
class SAcctMgr:
    """How to invoke sacctmgr on this host."""

    binary: str = "sacctmgr"
    sudo: bool = False
    timeout: float = DEFAULT_TIMEOUT_S
    env: Mapping[str, str] = field(default_factory=dict)

    def resolve(self) -> str:
        path = shutil.which(self.binary, path=self._env().get("PATH"))
        if path is None:
            raise ExternalError(f"{self.binary} not found on PATH; is slurm-client installed "
                                "on this host?")
        return path

    def _env(self) -> dict[str, str]:
        return {**os.environ, **self.env}

    def argv(self, args: Sequence[str], *, write: bool) -> list[str]:
        """``-i`` always; reads add ``-P -n`` (parsable, no header) and name their columns
        in ``args``. sudo resets the environment, so ``SLURM_CONF`` is passed through it
        explicitly (``sudo -n SLURM_CONF=… sacctmgr …``)."""
        base = [self.resolve()]
        if self.sudo:
            conf = self._env().get("SLURM_CONF")
            base = ["sudo", "-n", *([f"SLURM_CONF={conf}"] if conf else []), *base]
        flags = ["-i"] if write else ["-i", "-P", "-n"]
        return [*base, *flags, *args]

    async def run(self, args: Sequence[str], *, write: bool) -> Result:
        argv = self.argv(args, write=write)
        started = time.monotonic()
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE, env=self._env())
        except FileNotFoundError:
            raise ExternalError(f"{argv[0]} not found (needed for "
                                f"{'--sudo' if self.sudo else 'sacctmgr'})") from None
        except OSError as exc:
            raise ExternalError(f"cannot run {argv[0]}: {exc.strerror}") from None
        try:
            out, err = await asyncio.wait_for(proc.communicate(), self.timeout)
            code: int | None = proc.returncode
        except TimeoutError:
            proc.kill()
            out, err = await proc.communicate()
            code = None
        return Result(tuple(argv), code, out.decode(errors="replace"),
                      err.decode(errors="replace"), time.monotonic() - started)

    async def read(self, args: Sequence[str]) -> str:
        """A read must succeed: a failed read means we do not know the actual state."""
        result = await self.run(args, write=False)
        if not result.ok:
            raise ExternalError(f"sacctmgr {' '.join(args)} failed ({result.summary()})",
                                transient=result.timed_out)
        return result.stdout
