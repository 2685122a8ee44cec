"""The puppet sync against a real bare git origin on disk: the first run commits and
pushes, a second run changes nothing, a departed user's key file disappears, a failing
push leaves no local or remote debris, and only our files are ever committed."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from cheeto_like.adapters.git import GitError
from cheeto_like.errors import InvalidInput
from cheeto_like.models import SyncRun
from cheeto_like.operations.user import AddUserSshKey
from cheeto_like.operations.user_site import RemoveSiteUser
from cheeto_like.sync.puppet import sync_puppet
from tests.factories import AUTHOR, ED25519_KEY, ED25519_KEY_2, make_site, make_user


def git(cwd: Path, *args: str) -> str:
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@x", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@x", "HOME": str(cwd), "PATH": "/usr/bin:/bin"}
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True,
                          env=env).stdout.strip()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A clone of a bare origin with one commit on main and a file we do not own."""
    origin = tmp_path / "origin.git"
    git(tmp_path, "init", "--bare", "-b", "main", str(origin))
    clone = tmp_path / "puppet"
    git(tmp_path, "clone", str(origin), str(clone))
    (clone / "README").write_text("puppet repo\n")
    (clone / "keys").mkdir()
    (clone / "keys" / "someone-else.pub").write_text("ssh-ed25519 AAAA other\n")
    git(clone, "add", ".")
    git(clone, "commit", "-m", "init")
    git(clone, "push", "-u", "origin", "main")
    return clone


@pytest.fixture
async def farm(db):
    await make_site(db, "farm", "farm.hpc.example.org")
    await make_user(db, "alice", site="farm")
    await make_user(db, "bob", site="farm")
    await make_user(db, "someone-else")  # on no site: their stale key file goes
    await AddUserSshKey.run(db, AUTHOR, name="alice", key=ED25519_KEY)
    await AddUserSshKey.run(db, AUTHOR, name="bob", key=ED25519_KEY_2)
    return db


def origin_heads(repo: Path) -> list[str]:
    return sorted(line.split()[-1] for line in
                  git(repo, "ls-remote", "--heads", "origin").splitlines())


async def test_first_run_commits_and_pushes_second_changes_nothing(farm, repo):
    report = await sync_puppet(farm, "farm", repo, push=True, author=AUTHOR)
    assert report.committed and report.pushed
    assert set(report.changed) == {"domains/farm.hpc.example.org/merged/all.yaml",
                                   "keys/alice.pub", "keys/bob.pub", "keys/someone-else.pub"}
    assert (repo / "keys" / "alice.pub").read_text() == ED25519_KEY + "\n"
    assert not (repo / "keys" / "someone-else.pub").exists()
    assert "alice:" in (repo / "domains/farm.hpc.example.org/merged/all.yaml").read_text()
    assert git(repo, "rev-parse", "HEAD") == git(repo, "rev-parse", "origin/main")
    assert origin_heads(repo) == ["refs/heads/main"]
    head = git(repo, "rev-parse", "HEAD")

    again = await sync_puppet(farm, "farm", repo, push=True, author=AUTHOR)
    assert not again.committed and again.changed == []
    assert git(repo, "rev-parse", "HEAD") == head
    runs = await SyncRun.find({"target": "puppet"}).sort(+SyncRun.started_at).to_list()
    assert [r.status for r in runs] == ["ok", "ok"]


async def test_departed_users_key_file_disappears(farm, repo):
    await sync_puppet(farm, "farm", repo, push=True)
    await RemoveSiteUser.run(farm, AUTHOR, user="bob", site="farm")
    dry = await sync_puppet(farm, "farm", repo, push=True, dry_run=True)
    assert "keys/bob.pub" in dry.changed and (repo / "keys" / "bob.pub").exists()
    report = await sync_puppet(farm, "farm", repo, push=True)
    assert "keys/bob.pub" in report.changed
    assert not (repo / "keys" / "bob.pub").exists()
    assert "keys/bob.pub" not in git(repo, "ls-tree", "-r", "--name-only", "origin/main")


async def test_only_our_files_are_committed(farm, repo):
    (repo / "notes.txt").write_text("an admin's scratch file\n")
    (repo / "README").write_text("edited by hand\n")
    report = await sync_puppet(farm, "farm", repo, push=True)
    files = git(repo, "show", "--name-only", "--format=", "HEAD").split()
    assert "README" not in files and "notes.txt" not in files
    assert report.committed


async def test_failing_push_leaves_no_debris(farm, repo, tmp_path):
    hook = tmp_path / "origin.git" / "hooks" / "pre-receive"
    hook.write_text("#!/bin/sh\necho rejected by policy >&2\nexit 1\n")
    hook.chmod(0o755)
    before = git(repo, "rev-parse", "origin/main")
    with pytest.raises(GitError):
        await sync_puppet(farm, "farm", repo, push=True)
    assert git(repo, "rev-parse", "HEAD") == before
    assert git(repo, "status", "--porcelain") == ""
    assert git(repo, "branch", "--format=%(refname:short)").split() == ["main"]
    assert origin_heads(repo) == ["refs/heads/main"]
    run = await SyncRun.find({"target": "puppet"}).sort(-SyncRun.started_at).first_or_none()
    assert run.status == "failed" and "rejected" in run.error


async def test_not_a_clone_is_refused(farm, tmp_path):
    with pytest.raises(InvalidInput, match="not a git clone"):
        await sync_puppet(farm, "farm", tmp_path)


async def test_cli(cli, farm, repo):
    r = await cli("ng", "site", "sync-old-puppet", "-s", "farm", str(repo), "--dry-run",
                  "--json")
    assert r.code == 0, r.stderr
    assert r.json()["dry_run"] is True and len(r.json()["changed"]) == 4
    r = await cli("ng", "site", "sync-old-puppet", "-s", "farm", str(repo), "--push")
    assert r.code == 0, r.stderr and "pushed" in r.stderr
    r = await cli("ng", "site", "sync-old-puppet", "-s", "farm", str(repo.parent))
    assert r.code == 2 and "not a git clone" in r.stderr
