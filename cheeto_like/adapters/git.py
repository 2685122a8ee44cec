"""Commit generated files to a git clone and push them, safely, from a daemon.

The puppet sync (issue 4) writes files into an out-of-band clone of the puppet
repository and pushes them. The reference's flow had defects this module fixes
(reference-integrations §3.6 and §10 item 11):

- it staged the whole repository (``git add <root>``): here only the paths the caller
  declares it owns are staged (``git add -A -- <paths>``, so deletions count too);
- ``git clean`` without ``-d`` let untracked directories survive: here the base branch
  is reset hard and cleaned (``-fd``) before every run and after it;
- git had no timeouts: here every call has one, and a call that overruns is killed with
  its whole process group (a push runs ``receive-pack`` and hooks as grandchildren that
  would otherwise keep the pipes open), then reported with its output;
- a work branch was pushed to the remote before merging, so a later failure left it
  there: here nothing but the base branch is ever pushed;
- a failure (a rejected push, because someone else pushed first) left the base branch
  half-updated: here the base is reset to ``origin/<base>`` (or its previous head when
  not pushing), the work branch is deleted, and a typed error says what failed.

Like ``adapters/sacctmgr.py`` it uses asyncio subprocesses rather than ``sh``. Git never
prompts (``GIT_TERMINAL_PROMPT=0``, ssh in batch mode), never pages and never colours,
and commits with an identity passed through the environment, so it works on a host with
no git configuration at all.
"""

from __future__ import annotations

import asyncio
import errno
import fcntl
import inspect
import logging
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath

from ..errors import CheetoError, ExternalError, InvalidInput
from .process import ProcessResult, run_process

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT_S = 60.0
DEFAULT_LOCK_TIMEOUT_S = 30.0
LOCK_FILE = ".cheeto.lock"
BRANCH_PREFIX = "cheeto-puppet-sync"
LOCK_POLL_S = 0.05
# Set when running inside a git hook; they would point every call at another repository.
_REPO_ENV = frozenset({"GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_OBJECT_DIRECTORY",
                       "GIT_ALTERNATE_OBJECT_DIRECTORIES", "GIT_COMMON_DIR", "GIT_PREFIX"})


class GitResult(ProcessResult):
    """What one git call did (``ok``: exit code 0)."""


class GitError(ExternalError):
    """A git command failed (or timed out); ``result`` holds what it said."""

    def __init__(self, message: str, result: GitResult | None = None) -> None:
        super().__init__(message, transient=bool(result and result.timed_out))
        self.result = result


class RepoBusy(ExternalError):
    """Another process held the clone's lock for longer than the lock timeout."""

    def __init__(self, message: str) -> None:
        super().__init__(message, transient=True)


@dataclass(frozen=True)
class Identity:
    """Author and committer of the commits this adapter makes."""

    name: str = "cheeto"
    email: str = "cheeto@localhost"

    def env(self) -> dict[str, str]:
        return {"GIT_AUTHOR_NAME": self.name, "GIT_AUTHOR_EMAIL": self.email,
                "GIT_COMMITTER_NAME": self.name, "GIT_COMMITTER_EMAIL": self.email}


@dataclass(frozen=True)
class RoundtripResult:
    changed: bool
    commit: str | None  # the new commit, None when nothing changed
    head: str  # the base branch's head afterwards
    pushed: bool
    branch: str  # the work branch (deleted by now)
    files: tuple[str, ...] = ()  # paths the commit added, changed or deleted


@dataclass
class Roundtrip:
    """What the body of ``GitRepo.roundtrip`` works with: write files under ``path``,
    and declare any owned paths not known up front with ``own``. ``result`` is set when
    the block exits without an error."""

    path: Path
    branch: str
    base: str
    owned: list[str] = field(default_factory=list)
    result: RoundtripResult | None = None

    def own(self, *paths: str | Path) -> None:
        """Declare more paths (files or directories, relative to the clone) whose
        state — including deletions — the commit should capture."""
        self.owned.extend(_owned_path(p) for p in paths)


def _owned_path(path: str | Path) -> str:
    """A clean relative path inside the clone; the root itself, absolute paths, ``..``
    and the lock file are refused (owning everything is what this module exists to
    prevent)."""
    text = str(path)
    pure = PurePosixPath(text)
    if pure.is_absolute() or ".." in pure.parts:
        raise InvalidInput(f"owned path {text!r} must be relative and inside the clone")
    clean = str(pure)
    if clean in ("", ".") or text.startswith(":"):
        raise InvalidInput(f"owned path {text!r} would stage the whole clone; name the "
                           "files or directories the sync writes")
    if clean == LOCK_FILE:
        raise InvalidInput(f"{LOCK_FILE} is the sync lock, not a file to commit")
    return clean


def branch_name(prefix: str = BRANCH_PREFIX, now: datetime | None = None) -> str:
    """``<prefix>.<YYYY-MM-DD.HH-MM-SS>.<microseconds>`` (UTC), unique per call."""
    now = now or datetime.now(UTC)
    return f"{prefix}.{now:%Y-%m-%d.%H-%M-%S}.{now.microsecond:06d}"


class GitRepo:
    """A clone of a repository that this process commits generated files to.

    ``await repo.commit_files(write, owned=[…], message=…, push=True)`` is the whole
    safe roundtrip; ``async with repo.roundtrip(…) as rt:`` is the same with the body
    inline. Every git call has ``timeout`` seconds; the clone's lock is waited for at
    most ``lock_timeout`` seconds.
    """

    def __init__(self, path: str | Path, *, timeout: float = DEFAULT_TIMEOUT_S,
                 lock_timeout: float = DEFAULT_LOCK_TIMEOUT_S, remote: str = "origin",
                 identity: Identity | None = None, binary: str = "git",
                 branch_prefix: str = BRANCH_PREFIX,
                 env: Mapping[str, str] | None = None) -> None:
        self.path = Path(path)
        self.timeout = timeout
        self.lock_timeout = lock_timeout
        self.remote = remote
        self.identity = identity or Identity()
        self.binary = binary
        self.branch_prefix = branch_prefix
        self.extra_env = dict(env or {})

    # -- running git ------------------------------------------------------------------

    def _env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in _REPO_ENV}
        env.update(self.identity.env())
        env.update(self.extra_env)
        env.update(GIT_TERMINAL_PROMPT="0", GIT_PAGER="cat", PAGER="cat", GIT_EDITOR="true",
                   LC_ALL="C", GIT_OPTIONAL_LOCKS="0")
        env.setdefault("GIT_SSH_COMMAND", "ssh -o BatchMode=yes")
        return env

    async def run(self, *args: str) -> GitResult:
        """Run ``git -C <path> <args>``; never raises for a git failure (see ``check``).
        A timeout kills git's whole process group and still returns its output."""
        argv = (self.binary, "--no-pager", "-c", "color.ui=false", "-c",
                "commit.gpgSign=false", "-C", str(self.path), *args)
        outcome = await run_process(argv, time_limit=self.timeout, env=self._env(),
                                    missing=f"{self.binary} not found; is git installed on "
                                            "this host?")
        return GitResult(argv, *outcome)

    async def check(self, *args: str, what: str | None = None) -> str:
        """Run git and return its stdout; any failure is a ``GitError`` naming the
        command and quoting git's own message."""
        result = await self.run(*args)
        if not result.ok:
            name = what or f"git {' '.join(args)}"
            raise GitError(f"{name} failed in {self.path} ({result.summary()})", result)
        return result.stdout

    # -- facts about the clone -------------------------------------------------------

    async def ensure_clone(self) -> None:
        """Refuse anything but the top of a git work tree."""
        if not self.path.is_dir():
            raise InvalidInput(f"{self.path} is not a git clone (no such directory)")
        result = await self.run("rev-parse", "--is-inside-work-tree", "--show-toplevel")
        lines = result.stdout.split()
        if not result.ok or not lines or lines[0] != "true":
            raise InvalidInput(f"{self.path} is not a git clone")
        if Path(lines[-1]).resolve() != self.path.resolve():
            raise InvalidInput(f"{self.path} is not a git clone (it is inside the clone at "
                               f"{lines[-1]}; use that path)")

    async def _exclude_lock_file(self) -> None:
        """List the lock in ``.git/info/exclude`` so ``git status`` stays clean."""
        exclude = Path((await self.check("rev-parse", "--git-path", "info/exclude")).strip())
        exclude = exclude if exclude.is_absolute() else self.path / exclude
        try:
            current = exclude.read_text() if exclude.exists() else ""
            if f"/{LOCK_FILE}" not in current.splitlines():
                exclude.parent.mkdir(parents=True, exist_ok=True)
                sep = "" if not current or current.endswith("\n") else "\n"
                exclude.write_text(f"{current}{sep}/{LOCK_FILE}\n")
        except OSError as exc:
            log.warning("cannot add %s to %s: %s", LOCK_FILE, exclude, exc.strerror)

    async def has_remote(self) -> bool:
        return (await self.run("remote", "get-url", self.remote)).ok

    async def rev(self, ref: str) -> str | None:
        result = await self.run("rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")
        return result.stdout.strip() if result.ok else None

    async def _branch_exists(self, name: str) -> bool:
        return await self.rev(f"refs/heads/{name}") is not None

    # -- the lock ---------------------------------------------------------------------

    @asynccontextmanager
    async def lock(self) -> AsyncIterator[None]:
        """``<clone>/.cheeto.lock`` (flock), held across processes for one roundtrip.
        Polled without blocking the event loop; gives up after ``lock_timeout``."""
        lock_path = self.path / LOCK_FILE
        try:
            fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            raise ExternalError(f"cannot open the lock {lock_path}: {exc.strerror}") from None
        try:
            deadline = time.monotonic() + self.lock_timeout
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except OSError as exc:
                    if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                        raise ExternalError(f"cannot lock {lock_path}: {exc.strerror}"
                                            ) from None
                if time.monotonic() >= deadline:
                    raise RepoBusy(f"{lock_path} is held by another process (another sync "
                                   f"running?); gave up after {self.lock_timeout:g}s")
                await asyncio.sleep(LOCK_POLL_S)
            yield
        finally:
            os.close(fd)  # closing releases the lock; the file stays (no unlink race)

    # -- the roundtrip ----------------------------------------------------------------

    async def _clean_base(self, base: str) -> None:
        """Put the work tree on ``base`` with no local changes or untracked files (the
        lock excepted), and drop work branches a crashed run may have left behind (we
        hold the lock, so no other run is using them)."""
        await self.check("checkout", "--force", "--quiet", base)
        await self.check("reset", "--hard", "--quiet", "HEAD")
        await self.check("clean", "-f", "-d", "--quiet", "--exclude", LOCK_FILE)
        stale = await self.check("for-each-ref", "--format=%(refname:short)",
                                 f"refs/heads/{self.branch_prefix}.*")
        for name in stale.split():
            await self.check("branch", "-D", "--quiet", name)

    async def _stage(self, owned: Sequence[str]) -> list[str]:
        """Stage the owned paths only (additions, changes, deletions) and return the
        staged file list. A path that neither exists nor is tracked has nothing to
        stage (``git add`` would call it an error)."""
        paths = []
        for path in dict.fromkeys(owned):
            if os.path.lexists(self.path / path) or \
                    (await self.check("ls-files", "-z", "--", path)).strip("\0"):
                paths.append(path)
        if paths:
            await self.check("add", "-A", "--", *paths)
        staged = await self.check("diff", "--cached", "--name-only", "--no-renames", "-z")
        return [name for name in staged.split("\0") if name]

    async def _recover(self, base: str, branch: str, restore_to: str) -> str:
        """After a failure: base back at ``restore_to``, clean, the work branch gone.
        Best effort (each step is tried); returns what the base was reset to."""
        steps = (("checkout", "--force", "--quiet", base),
                 ("reset", "--hard", "--quiet", restore_to),
                 ("clean", "-f", "-d", "--quiet", "--exclude", LOCK_FILE))
        for step in steps:
            result = await self.run(*step)
            if not result.ok:
                log.warning("recovery step git %s failed in %s (%s)", " ".join(step),
                            self.path, result.summary())
        if await self._branch_exists(branch):
            result = await self.run("branch", "-D", "--quiet", branch)
            if not result.ok:
                log.warning("could not delete work branch %s in %s (%s)", branch, self.path,
                            result.summary())
        return restore_to

    async def _restore_target(self, base: str, fallback: str, *, push: bool) -> tuple[str, str]:
        """Where a failed run puts the base back: the remote's base (fetched afresh, so
        a concurrent pusher's commit is not mistaken for ours) when pushing, else the
        head before the run. Returns (commit, description)."""
        if push:
            fetched = await self.run("fetch", "--quiet", self.remote, base)
            if not fetched.ok:
                log.warning("fetch during recovery failed in %s (%s)", self.path,
                            fetched.summary())
            remote_head = await self.rev(f"refs/remotes/{self.remote}/{base}")
            if remote_head is None and fetched.ok:
                remote_head = await self.rev("FETCH_HEAD")
            if remote_head is not None:
                return remote_head, f"{self.remote}/{base}"
        return fallback, "its previous head"

    @asynccontextmanager
    async def roundtrip(self, *, owned: Sequence[str | Path] = (), message: str,
                        base: str = "main", push: bool = False) -> AsyncIterator[Roundtrip]:
        """Lock the clone, start a work branch from a clean, up-to-date ``base``, let the
        body write files, then commit the owned paths and (``push``) publish ``base``.

        Nothing staged: no commit, ``result.changed`` is false. On any failure the base
        is reset (to ``<remote>/<base>`` when pushing, else its previous head), the work
        branch is deleted and the error re-raised: a ``GitError`` names the git step;
        an error from the body is re-raised as it was.
        """
        handle_owned = [_owned_path(p) for p in owned]
        await self.ensure_clone()
        if base.startswith("-") or not (await self.run("check-ref-format", "--branch",
                                                       base)).ok:
            raise InvalidInput(f"{base!r} is not a valid branch name")
        async with self.lock():
            await self._exclude_lock_file()
            if push and not await self.has_remote():
                raise InvalidInput(f"{self.path} has no remote {self.remote!r} to push to")
            await self._clean_base(base)
            if push:
                await self.check("pull", "--ff-only", "--quiet", self.remote, base,
                                 what=f"git pull --ff-only {self.remote} {base}")
            before = (await self.check("rev-parse", "HEAD")).strip()
            name = branch_name(self.branch_prefix)
            await self.check("checkout", "--quiet", "-b", name)
            rt = Roundtrip(path=self.path, branch=name, base=base, owned=handle_owned)
            try:
                yield rt
                rt.result = await self._finish(rt, message=message, push=push)
            except GeneratorExit:  # closed, not given an error: nothing may be awaited
                raise
            except BaseException as exc:  # incl. cancellation: never leave a half-done base
                target, described = await self._restore_target(base, before, push=push)
                await self._recover(base, name, target)
                if isinstance(exc, GitError):
                    raise GitError(f"{exc.message}; {base} was reset to {described} and "
                                   f"branch {name} deleted", exc.result) from exc
                raise

    async def _finish(self, rt: Roundtrip, *, message: str, push: bool) -> RoundtripResult:
        files = await self._stage(rt.owned)
        if not files:
            await self._clean_base(rt.base)  # deletes the work branch too
            head = (await self.check("rev-parse", "HEAD")).strip()
            return RoundtripResult(changed=False, commit=None, head=head, pushed=False,
                                   branch=rt.branch)
        # --no-verify: hooks installed for people editing the clone are not a gate for
        # generated files (and may need tools the daemon's host lacks).
        await self.check("commit", "--quiet", "--no-verify", "-m", message)
        commit = (await self.check("rev-parse", "HEAD")).strip()
        await self.check("checkout", "--force", "--quiet", rt.base)
        await self.check("merge", "--ff-only", "--quiet", rt.branch)
        if push:
            await self.check("push", self.remote,
                             f"refs/heads/{rt.base}:refs/heads/{rt.base}",
                             what=f"git push {self.remote} {rt.base}")
        # Published (or committed locally): tidying up can no longer lose the change.
        try:
            await self._clean_base(rt.base)  # deletes the work branch too
        except CheetoError as exc:
            log.warning("tidying %s after the commit failed: %s", self.path, exc)
        return RoundtripResult(changed=True, commit=commit, head=commit, pushed=push,
                               branch=rt.branch, files=tuple(files))

    async def commit_files(self, write: Callable[[Roundtrip], Awaitable[object] | object], *,
                           owned: Sequence[str | Path] = (), message: str,
                           base: str = "main", push: bool = False) -> RoundtripResult:
        """The roundtrip with a callback as its body: ``write(rt)`` writes under
        ``rt.path`` (and may call ``rt.own(…)``)."""
        async with self.roundtrip(owned=owned, message=message, base=base, push=push) as rt:
            outcome = write(rt)
            if inspect.isawaitable(outcome):
                await outcome
        assert rt.result is not None
        return rt.result
