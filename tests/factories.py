"""Small helpers that build state through the real operations (or, for records that have
no operation yet, by inserting documents directly), so tests read as a story."""

from __future__ import annotations

import contextlib
import itertools
import subprocess
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

from cheeto_like.models import Group, History, Site, User, UserSiteInfo
from cheeto_like.operations.group import CreateGroup
from cheeto_like.operations.site import CreateSite
from cheeto_like.operations.user import CreateUser
from cheeto_like.operations.user_site import AddSiteUser
from cheeto_like.store import Store

AUTHOR = "tester"

# Syntactically valid ed25519 public keys (any 32 bytes make a well-formed key line).
ED25519_KEY = ("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIAcUIS47SFVib3yJlqOwvcrX5PH+CxglMj9MWWZzgI2a"
               " alice@laptop")
ED25519_KEY_2 = ("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIA4bKDVCT1xpdoOQnaq3xNHe6/gFEh8sOUZTYG16h5Sh"
                 " bob@desk")

_uids = itertools.count(10_000)


def next_uid() -> int:
    return next(_uids)


async def make_site(store: Store, name: str = "farm", fqdn: str | None = None) -> Site:
    return await CreateSite.run(store, AUTHOR, name=name, fqdn=fqdn or f"{name}.example.org")


async def make_user(store: Store, name: str = "alice", *, uid: int | None = None,
                    site: str | None = None, **kwargs: Any) -> User:
    """A user (with personal group) via CreateUser; optionally put on ``site``."""
    kwargs.setdefault("email", f"{name}@example.org")
    kwargs.setdefault("fullname", f"{name.capitalize()} Tester")
    user, _ = await CreateUser.run(store, AUTHOR, name=name, uid=uid or next_uid(), **kwargs)
    if site is not None:
        await AddSiteUser.run(store, AUTHOR, user=name, site=site)
    return user


async def make_group(store: Store, name: str, gid: int | None = None, **kwargs: Any) -> Group:
    return await CreateGroup.run(store, AUTHOR, name=name, gid=gid or next_uid(), **kwargs)


async def put_on_site(store: Store, user: str, site: str) -> UserSiteInfo:
    return await AddSiteUser.run(store, AUTHOR, user=user, site=site)


async def reload_user(name: str) -> User:
    user = await User.find_one(User.name == name)
    assert user is not None, f"user {name} vanished"
    return user


async def site_info(user: str, site: str) -> UserSiteInfo:
    usi = await UserSiteInfo.find_one(UserSiteInfo.user == user, UserSiteInfo.site == site)
    assert usi is not None, f"{user} is not on {site}"
    return usi


async def history(op: str | None = None) -> list[History]:
    """History rows (oldest first), optionally only those of one operation."""
    query = {} if op is None else {"op": op}
    return await History.find(query).sort(+History.timestamp).to_list()


async def snapshot() -> dict[str, list[str]]:
    """The ids in every collection that operations write to (cheap on small data)."""
    from cheeto_like.models import ALL_MODELS

    return {m.get_settings().name: sorted(
        [d["_id"] async for d in m.get_pymongo_collection().find({}, {"_id": 1})])
        for m in ALL_MODELS}


def ssh_keygen(directory: Path, key_type: str = "ed25519", name: str = "id") -> tuple[str, str]:
    """A real key pair from ssh-keygen: (public key line, ``ssh-keygen -lf`` fingerprint)."""
    path = directory / name
    args = ["ssh-keygen", "-q", "-t", key_type, "-N", "", "-C", "t@example.org", "-f", str(path)]
    if key_type == "rsa":
        args[4:4] = ["-b", "2048"]
    subprocess.run(args, check=True, capture_output=True)
    public = (directory / f"{name}.pub").read_text().strip()
    listed = subprocess.run(["ssh-keygen", "-lf", str(path) + ".pub"], check=True,
                            capture_output=True, text=True).stdout.split()
    return public, listed[1]


# -- storage -------------------------------------------------------------------------------


async def make_volume(store: Store, name: str, *, site: str = "farm", backend: str = "zfs",
                      host: str | None = "nas1", host_path: str | None = None,
                      parent: str | None = None, quota: str | None = None,
                      **kwargs: Any):
    """A volume via CreateStorageVolume (a child of ``parent`` inherits host and backend)."""
    from cheeto_like.operations.storage import CreateStorageVolume

    if parent is not None:
        host = None
        backend_arg: str | None = None
    else:
        backend_arg = backend
        host_path = host_path or f"/export/{name}"
    return await CreateStorageVolume.run(store, AUTHOR, site=site, name=name,
                                         backend=backend_arg, host=host, host_path=host_path,
                                         parent=parent, quota=quota, **kwargs)


async def make_map(store: Store, name: str, prefix: str | None = None, *, site: str = "farm",
                   options: list[str] | None = None):
    from cheeto_like.operations.storage import CreateAutomountMap

    return await CreateAutomountMap.run(store, AUTHOR, site=site, name=name,
                                        prefix=prefix or f"/{name}", options=options or [])


async def make_static_mount(store: Store, name: str, mount_path: str, *, site: str = "farm",
                            volume: str | None = None, subpath: str = "", spec: str = "",
                            fstype: str = "nfs", options: list[str] | None = None):
    from cheeto_like.operations.storage import CreateStaticMount

    return await CreateStaticMount.run(store, AUTHOR, site=site, name=name, fstype=fstype,
                                       mount_path=mount_path, volume=volume, subpath=subpath,
                                       spec=spec, options=options or [])


async def home_defaults(store: Store, site: str = "farm", *, volume: str = "home",
                        quota: str | None = "20G", automount_map: str | None = "home",
                        host: str = "nas1") -> None:
    """A site whose new homes go under volume ``volume`` (``/export/home`` on ``host``),
    with ``quota`` and mounted through the map ``automount_map`` (``/home``)."""
    from cheeto_like.operations.storage import SetSiteStorageDefaults

    await make_volume(store, volume, site=site, host=host, host_path=f"/export/{volume}")
    settings: dict[str, Any] = {"home_volume": volume}
    if quota:
        settings["home_quota"] = quota
    if automount_map:
        await make_map(store, automount_map, "/home", site=site, options=["rw", "nosuid"])
        settings["home_automount_map"] = automount_map
    await SetSiteStorageDefaults.run(store, AUTHOR, site=site, **settings)


async def insert_sync_run(run: Any, items: Sequence[Any] = ()) -> Any:
    """Insert a ``SyncRun`` and its items as ``SyncRunItem`` documents (a run keeps no
    ``items`` list: they are documents of their own)."""
    from cheeto_like.models import SyncRunItem

    await run.insert()
    for n, item in enumerate(items):
        await SyncRunItem(id=f"{run.id}:{n}", run=run.id, index=n, started_at=run.started_at,
                          **item.model_dump()).insert()
    return run


async def insert_audit_run(run: Any, findings: Sequence[dict[str, Any]] = (),
                           resolved: Sequence[dict[str, Any]] = ()) -> Any:
    """Insert an ``AuditRun`` and its findings as ``AuditFinding`` documents."""
    from cheeto_like.models import AuditFinding

    await run.insert()
    for name, tag, found in (("findings", "f", findings), ("resolved", "r", resolved)):
        for n, data in enumerate(found):
            await AuditFinding(id=f"{run.id}:{tag}:{n}", run=run.id, list=name, index=n,
                               started_at=run.started_at, data=data).insert()
    return run


@contextlib.asynccontextmanager
async def transaction_lifetime(store: Store, seconds: int) -> AsyncIterator[None]:
    """``transactionLifetimeLimitSeconds`` set to ``seconds`` on the store (mongod's
    ``setParameter``, which the test session's embedded store also answers), checked
    with ``getParameter``, and 60 (the default) again afterwards, whatever happened."""
    admin = store.client.admin
    await admin.command("setParameter", 1, transactionLifetimeLimitSeconds=seconds)
    try:
        reply = await admin.command("getParameter", 1, transactionLifetimeLimitSeconds=1)
        assert reply["transactionLifetimeLimitSeconds"] == seconds
        yield
    finally:
        await admin.command("setParameter", 1, transactionLifetimeLimitSeconds=60)
