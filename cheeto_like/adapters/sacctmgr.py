"""Run ``sacctmgr``: every call has a timeout, ``sudo -n`` when asked, and a result that
says exactly what happened (exit code, output, duration, timeout) instead of raising
halfway through an apply.

Every call passes ``-i``: without it writes (and some reads) prompt, and with stdin
closed sacctmgr loops forever. A call only counts as successful with exit code 0 *and* an
empty stderr, because sacctmgr reports several refusals with exit code 0
(docs/sacctmgr-notes.md §0).

This uses asyncio subprocesses rather than ``sh`` (DESIGN §1 names ``sh``): a timeout
here kills the process group (sudo and its sacctmgr) and still returns its output, and
there is one less dependency (`adapters/process.py`, shared with git).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from ..errors import ExternalError
from .process import ProcessResult, run_process

DEFAULT_TIMEOUT_S = 60.0
JOBS_ACTIVE = "job(s) active"  # slurmdbd's refusal to remove what running jobs use


@dataclass(frozen=True)
class Result(ProcessResult):
    """sacctmgr reports several refusals with exit code 0 and a message on stderr."""

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.stderr.strip()

    @property
    def jobs_active(self) -> bool:
        """slurmdbd refused a removal because the association still has running jobs
        (docs/sacctmgr-notes.md): not a failure, it succeeds on a later run."""
        return not self.ok and JOBS_ACTIVE in f"{self.stdout}\n{self.stderr}".lower()


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
        missing = f"{argv[0]} not found (needed for {'--sudo' if self.sudo else 'sacctmgr'})"
        outcome = await run_process(argv, time_limit=self.timeout, env=self._env(),
                                    missing=missing)
        return Result(tuple(argv), *outcome)

    async def read(self, args: Sequence[str]) -> str:
        """A read must succeed: a failed read means we do not know the actual state."""
        result = await self.run(args, write=False)
        if not result.ok:
            raise ExternalError(f"sacctmgr {' '.join(args)} failed ({result.summary()})",
                                transient=result.timed_out)
        return result.stdout
