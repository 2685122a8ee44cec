"""Small helpers that build state through the real operations (or, for records that have
no operation yet, by inserting documents directly), so tests read as a story."""

from __future__ import annotations

import itertools
import subprocess
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
