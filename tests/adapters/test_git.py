"""The git roundtrip adapter against real repositories on disk: a bare ``origin.git``, a
clone of it seeded with one commit on ``main``, and real ``git`` everywhere (no global
or system git configuration, so the adapter's own identity is what commits)."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from cheeto_like.adapters.git import (
    LOCK_FILE,
    GitError,
    GitRepo,
    Identity,
    RepoBusy,
    branch_name,
)
from cheeto_like.errors import InvalidInput

SEED_ENV = {"GIT_AUTHOR_NAME": "seed", "GIT_AUTHOR_EMAIL": "seed@example.org",
            "GIT_COMMITTER_NAME": "seed", "GIT_COMMITTER_EMAIL": "seed@example.org"}
OWNED = "domains/farm.example.org/merged/all.yaml"


def git(cwd: Path, *args: str) -> str:
    result = subprocess.run(["git", "-C", str(cwd), *args], capture_output=True, text=True,
                            env={**os.environ, **SEED_ENV}, check=False)
    assert result.returncode == 0, f"git {' '.join(args)}: {result.stderr}"
    return result.stdout.strip()


def branches(repo: Path) -> list[str]:
    return git(repo, "for-each-ref", "--format=%(refname:short)", "refs/heads").split()


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


@pytest.fixture(autouse=True)
def no_git_config(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """As on a fresh daemon host: no ~/.gitconfig, no /etc/gitconfig."""
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", os.devnull)
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    monkeypatch.setenv("HOME", str(tmp_path))


@pytest.fixture
def origin(tmp_path: Path) -> Path:
    bare = tmp_path / "origin.git"
    subprocess.run(["git", "init", "--quiet", "--bare", str(bare)], check=True)
    git(bare, "symbolic-ref", "HEAD", "refs/heads/main")
    return bare


@pytest.fixture
def clone(tmp_path: Path, origin: Path) -> Path:
    work = tmp_path / "work"
    subprocess.run(["git", "clone", "--quiet", str(origin), str(work)], check=True,
                   capture_output=True)
    git(work, "symbolic-ref", "HEAD", "refs/heads/main")
    write(work / "README.md", "puppet accounts\n")
    write(work / "keys" / "admin.pub", "ssh-ed25519 AAAA admin\n")
    git(work, "add", "-A")
    git(work, "commit", "--quiet", "-m", "seed")
    git(work, "push", "--quiet", "--set-upstream", "origin", "main")
    return work


def other_clone(tmp_path: Path, origin: Path, name: str = "other") -> Path:
    path = tmp_path / name
    subprocess.run(["git", "clone", "--quiet", str(origin), str(path)], check=True,
                   capture_output=True)
    return path


def hook(origin: Path, body: str) -> None:
    path = origin / "hooks" / "pre-receive"
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)


def assert_clean_main(clone: Path, origin: Path) -> None:
    """The state every run must end in: on main, nothing modified or untracked, main ==
    origin/main == the bare repository's main, and only main anywhere."""
    assert git(clone, "symbolic-ref", "--short", "HEAD") == "main"
    assert git(clone, "status", "--porcelain", "--untracked-files=all") == ""
    assert git(clone, "rev-parse", "main") == git(clone, "rev-parse", "origin/main") \
        == git(origin, "rev-parse", "main")
    assert branches(clone) == ["main"]
    assert branches(origin) == ["main"]


def repo(clone: Path, **kwargs) -> GitRepo:  # type: ignore[no-untyped-def]
    return GitRepo(clone, identity=Identity("cheeto-bot", "cheeto@example.org"), **kwargs)


# -- the happy paths ----------------------------------------------------------------------


async def test_first_run_commits_and_pushes(clone: Path, origin: Path):
    git(clone, "branch", "cheeto-puppet-sync.2020-01-01.00-00-00.000000")  # a crashed run's
    async with repo(clone).roundtrip(owned=[OWNED], message="Update farm", push=True) as rt:
        assert git(clone, "symbolic-ref", "--short", "HEAD") == rt.branch
        write(clone / OWNED, "user: {}\n")
    result = rt.result
    assert result is not None and result.changed and result.pushed
    assert result.files == (OWNED,)
    assert result.commit == result.head == git(origin, "rev-parse", "main")
    assert re.fullmatch(r"cheeto-puppet-sync\.\d{4}-\d\d-\d\d\.\d\d-\d\d-\d\d\.\d{6}",
                        result.branch)
    assert git(origin, "log", "-1", "--format=%an <%ae>|%cn|%s", "main") == \
        "cheeto-bot <cheeto@example.org>|cheeto-bot|Update farm"
    assert git(origin, "show", "main:" + OWNED) == "user: {}"
    assert_clean_main(clone, origin)


async def test_second_run_with_the_same_content_changes_nothing(clone: Path, origin: Path):
    def body(rt):  # type: ignore[no-untyped-def]
        write(rt.path / OWNED, "user: {}\n")

    first = await repo(clone).commit_files(body, owned=[OWNED], message="m", push=True)
    second = await repo(clone).commit_files(body, owned=[OWNED], message="m", push=True)
    assert first.changed and not second.changed
    assert second.commit is None and not second.pushed and second.files == ()
    assert second.head == first.commit == git(origin, "rev-parse", "main")
    assert git(origin, "rev-list", "--count", "main") == "2"
    assert_clean_main(clone, origin)


async def test_async_body_and_paths_declared_inside_the_block(clone: Path, origin: Path):
    async def body(rt):  # type: ignore[no-untyped-def]
        write(rt.path / "keys" / "alice.pub", "ssh-ed25519 AAAA alice\n")
        rt.own("keys")

    result = await repo(clone).commit_files(body, message="keys", push=True)
    assert result.files == ("keys/alice.pub",)
    assert_clean_main(clone, origin)


async def test_a_removed_owned_file_disappears_in_the_commit(clone: Path, origin: Path):
    gr = repo(clone)
    await gr.commit_files(lambda rt: write(rt.path / "keys/bob.pub", "ssh-rsa B bob\n"),
                          owned=["keys"], message="add bob", push=True)
    # The next sync no longer has bob (nor the seeded admin key): it rewrites keys/.
    def rewrite_keys(rt):  # type: ignore[no-untyped-def]
        for stale in (rt.path / "keys").iterdir():
            stale.unlink()
        write(rt.path / "keys/alice.pub", "ssh-ed25519 A alice\n")

    result = await gr.commit_files(rewrite_keys, owned=["keys"], message="keys", push=True)
    assert set(result.files) == {"keys/alice.pub", "keys/bob.pub", "keys/admin.pub"}
    status = git(origin, "show", "--name-status", "--format=", "main")
    assert set(status.splitlines()) == {"A\tkeys/alice.pub", "D\tkeys/bob.pub",
                                        "D\tkeys/admin.pub"}
    assert git(origin, "ls-tree", "-r", "--name-only", "main", "keys") == "keys/alice.pub"
    assert_clean_main(clone, origin)


async def test_an_owned_path_that_never_existed_stages_nothing(clone: Path, origin: Path):
    result = await repo(clone).commit_files(lambda rt: None, owned=["keys/nobody.pub"],
                                            message="m", push=True)
    assert not result.changed
    assert_clean_main(clone, origin)


async def test_unowned_files_are_never_committed(clone: Path, origin: Path):
    write(clone / "stray.txt", "left by an admin\n")  # untracked before the run
    write(clone / "junk" / "deep" / "file", "x\n")  # an untracked directory
    seed = git(origin, "rev-parse", "main")

    def body(rt):  # type: ignore[no-untyped-def]
        assert not (rt.path / "stray.txt").exists() and not (rt.path / "junk").exists()
        write(rt.path / OWNED, "group: {}\n")
        write(rt.path / "notes.txt", "scratch\n")  # unowned, new
        write(rt.path / "README.md", "edited by the body\n")  # unowned, tracked

    result = await repo(clone).commit_files(body, owned=[OWNED], message="m", push=True)
    assert result.files == (OWNED,)
    changed = git(origin, "diff", "--name-only", seed, "main")
    assert changed.splitlines() == [OWNED]
    assert git(origin, "show", "main:README.md") == "puppet accounts"
    assert not (clone / "notes.txt").exists()
    assert_clean_main(clone, origin)


async def test_without_push_the_commit_stays_local(clone: Path, origin: Path):
    seed = git(origin, "rev-parse", "main")
    owned = clone / OWNED
    # The callback may return anything (here a tuple): only awaitables are awaited.
    result = await repo(clone).commit_files(
        lambda rt: (owned.parent.mkdir(parents=True), owned.write_text("a: 1\n")),
        owned=[OWNED], message="local only")
    assert result.changed and not result.pushed
    assert git(origin, "rev-parse", "main") == seed
    assert git(clone, "rev-parse", "main") == result.commit
    assert git(clone, "rev-parse", "main~1") == seed
    assert branches(clone) == ["main"] and branches(origin) == ["main"]
    assert git(clone, "status", "--porcelain", "--untracked-files=all") == ""


# -- failures leave main clean and nothing on the remote ------------------------------------


async def test_a_rejected_push_resets_main_and_deletes_the_branch(clone: Path, origin: Path):
    seed = git(origin, "rev-parse", "main")
    hook(origin, "echo 'pushes are frozen' >&2; exit 1")
    with pytest.raises(GitError) as err:
        async with repo(clone).roundtrip(owned=[OWNED], message="m", push=True):
            write(clone / OWNED, "user: {}\n")
    message = err.value.message
    assert "git push origin main failed" in message
    assert "pre-receive hook declined" in message
    assert "main was reset to origin/main" in message
    assert err.value.exit_code == 1 and not err.value.transient
    assert git(origin, "rev-parse", "main") == seed
    assert_clean_main(clone, origin)


async def test_a_concurrent_push_is_not_clobbered_and_a_retry_succeeds(tmp_path: Path,
                                                                        clone: Path,
                                                                        origin: Path):
    other = other_clone(tmp_path, origin)

    def body(rt):  # type: ignore[no-untyped-def]
        write(rt.path / OWNED, "user: {}\n")
        write(other / "README.md", "someone else was faster\n")  # pushes after our pull
        git(other, "commit", "--quiet", "-am", "concurrent")
        git(other, "push", "--quiet", "origin", "main")

    with pytest.raises(GitError, match="git push origin main failed"):
        await repo(clone).commit_files(body, owned=[OWNED], message="m", push=True)
    concurrent = git(other, "rev-parse", "HEAD")
    assert git(origin, "rev-parse", "main") == concurrent
    assert_clean_main(clone, origin)  # main now equals the fetched origin/main

    retry = await repo(clone).commit_files(lambda rt: write(rt.path / OWNED, "user: {}\n"),
                                           owned=[OWNED], message="m", push=True)
    assert retry.changed and git(origin, "rev-parse", "main~1") == concurrent
    assert_clean_main(clone, origin)


async def test_an_error_in_the_body_is_reraised_and_rolled_back(clone: Path, origin: Path):
    with pytest.raises(ValueError, match="template broke"):
        async with repo(clone).roundtrip(owned=[OWNED], message="m", push=True):
            write(clone / OWNED, "half written")
            raise ValueError("template broke")
    assert not (clone / OWNED).exists()
    assert_clean_main(clone, origin)


async def test_a_failure_without_push_restores_the_previous_head(clone: Path, origin: Path):
    gr = repo(clone)
    first = await gr.commit_files(lambda rt: write(rt.path / OWNED, "a: 1\n"),
                                  owned=[OWNED], message="local")
    with pytest.raises(RuntimeError):
        async with gr.roundtrip(owned=[OWNED], message="m"):
            write(clone / OWNED, "a: 2\n")
            raise RuntimeError("boom")
    assert git(clone, "rev-parse", "main") == first.commit
    assert (clone / OWNED).read_text() == "a: 1\n"
    assert branches(clone) == ["main"]
    assert git(clone, "status", "--porcelain", "--untracked-files=all") == ""


async def test_a_hung_push_is_killed_at_the_timeout(tmp_path: Path, clone: Path, origin: Path):
    pid_file = tmp_path / "hook.pid"
    hook(origin, f"echo $$ > {pid_file}\nexec sleep 60")
    started = time.monotonic()
    with pytest.raises(GitError) as err:
        await repo(clone, timeout=2).commit_files(
            lambda rt: write(rt.path / OWNED, "x: 1\n"), owned=[OWNED], message="m",
            push=True)
    assert time.monotonic() - started < 20
    assert "git push origin main failed" in err.value.message
    assert "timed out after" in err.value.message and "killed" in err.value.message
    assert err.value.transient
    pid = int(pid_file.read_text())
    for _ in range(100):  # the hook (a grandchild of git push) must be gone too
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        await asyncio.sleep(0.05)
    else:
        pytest.fail(f"the pre-receive hook (pid {pid}) survived the timeout")
    (origin / "hooks" / "pre-receive").unlink()
    assert_clean_main(clone, origin)


@pytest.fixture
def lock_holder(clone: Path) -> Iterator[subprocess.Popen[str]]:
    """Another process holding the clone's lock until it is killed."""
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import fcntl, time\n"
         f"f = open({str(clone / LOCK_FILE)!r}, 'a')\n"
         "fcntl.flock(f, fcntl.LOCK_EX)\n"
         "print('locked', flush=True)\n"
         "time.sleep(60)\n"],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        yield holder
    finally:
        holder.kill()
        holder.wait()


async def test_lock_timeout_when_another_process_holds_the_lock(
        clone: Path, origin: Path, lock_holder: subprocess.Popen[str]):
    started = time.monotonic()
    with pytest.raises(RepoBusy, match=r"\.cheeto\.lock is held by another process"):
        await repo(clone, lock_timeout=0.3).commit_files(
            lambda rt: write(rt.path / OWNED, "x\n"), owned=[OWNED], message="m")
    assert 0.3 <= time.monotonic() - started < 5
    assert branches(clone) == ["main"]
    lock_holder.kill()
    lock_holder.wait()
    # Released: the next run gets the lock.
    result = await repo(clone, lock_timeout=5).commit_files(
        lambda rt: write(rt.path / OWNED, "x\n"), owned=[OWNED], message="m", push=True)
    assert result.changed
    assert_clean_main(clone, origin)


# -- refused before anything happens --------------------------------------------------------


async def test_not_a_clone(tmp_path: Path, clone: Path, origin: Path):
    plain = tmp_path / "plain"
    plain.mkdir()
    for path, detail in ((plain, ""), (origin, ""), (tmp_path / "missing", "no such directory"),
                         (clone / "keys", "inside the clone")):
        with pytest.raises(InvalidInput, match="is not a git clone") as err:
            await GitRepo(path).commit_files(lambda rt: None, owned=["x"], message="m")
        assert detail in err.value.message
        assert err.value.exit_code == 2
    assert not (plain / LOCK_FILE).exists()


@pytest.mark.parametrize("owned", [".", "", "./", "../elsewhere", "/etc/passwd", LOCK_FILE,
                                   ":(glob)**"])
async def test_owned_paths_must_name_part_of_the_clone(clone: Path, owned: str):
    with pytest.raises(InvalidInput):
        await repo(clone).commit_files(lambda rt: None, owned=[owned], message="m")


async def test_push_needs_a_remote_and_a_valid_base(tmp_path: Path, clone: Path):
    with pytest.raises(InvalidInput, match="not a valid branch name"):
        await repo(clone).commit_files(lambda rt: None, owned=["x"], message="m",
                                       base="--force")
    lonely = tmp_path / "lonely"
    lonely.mkdir()
    git(lonely, "init", "--quiet")
    with pytest.raises(InvalidInput, match="has no remote 'origin'"):
        await GitRepo(lonely).commit_files(lambda rt: None, owned=["x"], message="m",
                                           push=True)


def test_branch_names_are_unique_and_sortable():
    a = branch_name(now=datetime(2025, 3, 4, 5, 6, 7, 89, tzinfo=UTC))
    assert a == "cheeto-puppet-sync.2025-03-04.05-06-07.000089"
    assert len({branch_name() for _ in range(50)}) > 1
