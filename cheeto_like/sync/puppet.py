"""The legacy puppet sync: a site's account YAML and users' SSH keys, committed to a clone
of the puppet repository (and pushed).

Desired: ``domains/<fqdn>/merged/all.yaml`` (the puppet-legacy export) and
``keys/<user>.pub`` for every user on the site who has keys (raw keys, one per line).
Actual: the files in the clone. The plan is the list of files to write or delete; the
apply is one ``adapters.git`` roundtrip that stages only those paths (nothing else in the
repository is ever committed), makes no commit when nothing changed, and leaves the base
branch clean with no stray remote branch when anything fails.

``keys/`` is shared by every site the repository serves, so a key file is deleted only
when its user is on no site at all (or has no keys left while on this site); other
sites' users are never touched.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from beanie.operators import In

from ..adapters.git import GitRepo, Roundtrip
from ..models import SshKey, SyncRun, UserSiteInfo
from ..models.fields import utcnow
from ..models.sync import SyncItem
from ..puppet.yamlio import dumps
from ..queries.puppet_legacy import site_to_puppet_legacy
from ..queries.site import get_site
from ..store import Store
from .lease import holder_name, lease
from .run_metrics import logged_run, record_end
from .runs import RunJournal, close_stale_runs

TARGET = "puppet"
KEYS_DIR = "keys"


@dataclass(frozen=True)
class PuppetFiles:
    """What the repository should hold for one site: path -> content, and the key files
    to delete."""

    writes: dict[str, str]
    deletes: frozenset[str]


async def desired_files(site_name: str, repo: Path) -> PuppetFiles:
    site = await get_site(site_name)
    writes = {f"domains/{site.fqdn}/merged/all.yaml":
              dumps(await site_to_puppet_legacy(site.name))}
    on_site = sorted({u.user for u in await UserSiteInfo.find({"site": site.name}).to_list()})
    keys: dict[str, list[str]] = {}
    for key in await SshKey.find(In(SshKey.user, on_site)).sort(+SshKey.created_at).to_list():
        keys.setdefault(key.user, []).append(key.key)
    for user, entries in keys.items():
        writes[f"{KEYS_DIR}/{user}.pub"] = "".join(f"{entry}\n" for entry in entries)
    on_any_site = {u.user for u in await UserSiteInfo.find({}).to_list()}
    deletes = set()
    for existing in sorted((repo / KEYS_DIR).glob("*.pub")):
        user = existing.stem
        if user not in on_any_site or (user in on_site and user not in keys):
            deletes.add(f"{KEYS_DIR}/{existing.name}")
    return PuppetFiles(writes, frozenset(deletes))


def changed_files(files: PuppetFiles, repo: Path) -> list[str]:
    """The files whose content differs from the clone's working tree (the dry run)."""
    changed = []
    for path, text in sorted(files.writes.items()):
        target = repo / path
        if not target.exists() or target.read_text() != text:
            changed.append(path)
    return changed + sorted(p for p in files.deletes if (repo / p).exists())


def _write(files: PuppetFiles) -> object:
    def write(rt: Roundtrip) -> None:
        for path, text in files.writes.items():
            target = rt.path / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text)
        for path in files.deletes:
            (rt.path / path).unlink(missing_ok=True)
    return write


@dataclass
class PuppetReport:
    site: str
    dry_run: bool
    changed: list[str] = field(default_factory=list)
    committed: bool = False
    commit: str | None = None
    pushed: bool = False
    run_id: str | None = None


async def sync_puppet(store: Store, site_name: str, repo_path: str | Path, *,
                      push: bool = False, base: str = "main", dry_run: bool = False,
                      author: str | None = None, git_timeout: float = 60.0) -> PuppetReport:
    """One puppet sync run for a site, recorded as a ``SyncRun``."""
    site = await get_site(site_name)
    repo = GitRepo(repo_path, timeout=git_timeout)
    await repo.ensure_clone()
    with logged_run(site.name) as run_id:
        return await _sync(store, site.name, repo, repo_path, push=push, base=base,
                           dry_run=dry_run, author=author, run_id=run_id)


async def _sync(store: Store, site: str, repo: GitRepo, repo_path: str | Path, *, push: bool,
                base: str, dry_run: bool, author: str | None, run_id: str) -> PuppetReport:
    started = time.monotonic()
    run = SyncRun(id=run_id, target=TARGET, site=site, author=author, apply=not dry_run,
                  holder=holder_name(),  # a run whose process died is closed as crashed
                  extra={"repo": str(repo_path), "push": push, "base": base})
    async with store.exclusive():
        await run.insert()
    report = PuppetReport(site, dry_run, run_id=run.id)
    written: dict[str, str] = {}  # (the metrics: a changed path not written was deleted)
    try:
        files = await desired_files(site, Path(repo_path))
        written = files.writes
        report.changed = changed_files(files, Path(repo_path))
        if not dry_run:
            async with lease(store, TARGET, site):
                await close_stale_runs(store, target=TARGET, site=site)
                result = await repo.commit_files(
                    _write(files), owned=[*files.writes, *files.deletes],
                    message=f"Update merged yaml for {site}", base=base, push=push)
            report.committed, report.commit, report.pushed = (
                result.changed, result.commit, result.pushed)
            report.changed = list(result.files)
        run.status = "ok"
        return report
    except Exception as exc:
        run.status, run.error = "failed", f"{type(exc).__name__}: {exc}"
        raise
    finally:
        run.finished_at = utcnow()
        run.duration_s = round(time.monotonic() - started, 3)
        run.counts = {"files": len(report.changed)}
        await RunJournal(store, run).finish([
            SyncItem(batch="files", command="write or delete", targets=[path],
                     outcome="ok" if report.committed else "planned")
            for path in report.changed])
        run.extra |= {"commit": report.commit, "pushed": report.pushed}
        deleted = sum(path.startswith(f"{KEYS_DIR}/") and path not in written
                      for path in report.changed)
        record_end(run, changes={"modify": len(report.changed) - deleted, "remove": deleted},
                   removed=deleted if report.committed else 0)
        async with store.exclusive():
            await run.save()
