"""Reading a running cluster for adoption, with the reconcilers' own readers: slurmdbd
through ``slurm_actual.actual_state`` and the directory through ``ldap_actual.
actual_state`` asked to read every user, group and automount key of the site."""

from __future__ import annotations

from ..adapters.ldap import Directory, normalize_dn
from ..adapters.sacctmgr import SAcctMgr
from ..config import LDAPConfig
from ..models import Group, User
from ..sync.ldap import actual as ldap_actual
from ..sync.ldap.desired import DesiredState
from ..sync.ldap.plan import Focus, Scope
from ..sync.ldap.state import Layout
from ..sync.slurm import actual as slurm_actual
from ..sync.slurm.state import SlurmState
from .adopt import DirectoryView, Known

READ_KINDS = frozenset({"users", "groups", "automounts"})


async def read_slurm(runner: SAcctMgr, cluster: str,
                     policy: slurm_actual.Policy) -> SlurmState:
    return await slurm_actual.actual_state(slurm_actual.SAcctMgrReader(runner), cluster,
                                           policy)


async def read_directory(config: LDAPConfig, site: str) -> DirectoryView:
    layout = Layout.for_site(config, site)
    async with Directory(config) as directory:
        actual = await ldap_actual.actual_state(
            directory, DesiredState(site=site, layout=layout),
            Scope(kinds=READ_KINDS, prune=frozenset()),
            Focus(read_all_users=True, read_all_groups=True))
    maps = dict(actual.maps)
    normalised = {name: normalize_dn(dn) for name, dn in maps.items()}
    return DirectoryView(users=actual.users, groups=actual.groups, maps=normalised,
                         automounts=actual.automounts, master_map=config.master_map,
                         host_suffix=config.host_suffix,
                         ssh_user_prefix=config.ssh_user_prefix)


async def known_records() -> Known:
    users = {u.name: u for u in await User.find({}).to_list()}
    groups = {g.name: g for g in await Group.find({}).to_list()}
    return Known(users=users, groups=groups)
