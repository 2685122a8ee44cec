"""``cheeto ng storage …`` and ``cheeto ng site storage set-defaults``."""

from __future__ import annotations

import argparse
from typing import Any

from ...errors import Conflict
from ...models import AutomountMap, StaticMount, StorageVolume
from ...operations import storage as ops
from ...queries.site import get_site
from ...queries.storage import (
    find_home_storage,
    get_automount_map,
    get_storage,
    get_volume,
    list_map_storages,
    list_site_automount_maps,
    list_site_static_mounts,
    list_site_storages,
    list_site_volumes,
)
from .. import args as a
from ..app import command, group_help
from ..output import esc

group_help("ng", "storage", help="storage: volumes, mounts, home/group/share storages")
group_help("ng", "storage", "new", help="create home, group or share storage")
group_help("ng", "storage", "volume", help="volumes on file servers and their allocations")
group_help("ng", "storage", "volume", "alloc", help="a volume's quota allocations")
group_help("ng", "storage", "static-mount", help="fixed mounts of volumes or specs")
group_help("ng", "storage", "automount-map", help="autofs maps")
group_help("ng", "site", "storage", help="the site's storage defaults")


def _mount_flags(parser: a.Parser) -> None:
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--automount-map", metavar="MAP", help="mount it through this automount map")
    group.add_argument("--static-mount", metavar="MOUNT", help="mount it under this static mount")
    group.add_argument("--no-mount", action="store_true", help="do not mount it anywhere")


def _target_flags(parser: a.Parser) -> None:
    parser.add_argument("--parent-volume", metavar="VOLUME",
                        help="create a child volume under this one")
    parser.add_argument("--host", help="create a standalone ZFS volume on this host")
    parser.add_argument("--path", dest="host_path", help="with --host: the volume's path")
    _mount_flags(parser)


def _target_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    return {"parent_volume": args.parent_volume, "host": args.host,
            "host_path": args.host_path, "automount_map": args.automount_map,
            "static_mount": args.static_mount, "no_mount": args.no_mount}


def _volume_data(volume: StorageVolume, children: int | None = None) -> dict[str, Any]:
    options, ranges = (volume.nfs_export.export_options, volume.nfs_export.export_ranges) \
        if volume.nfs_export else ("", [])
    data = {"name": volume.name, "site": volume.site, "backend": volume.backend,
            "host": volume.host, "host_path": volume.host_path, "parent": volume.parent,
            "quota": volume.quota,
            "allocations": [{"index": i, "quota": x.quota, "comment": x.comment}
                            for i, x in enumerate(volume.allocations)],
            "export_options": options, "export_ranges": ranges}
    if children is not None:
        data["children"] = children
    return data


def _map_data(amap: AutomountMap, storages: int | None = None) -> dict[str, Any]:
    data: dict[str, Any] = {"name": amap.name, "site": amap.site, "prefix": amap.prefix,
                            "options": amap.options}
    if storages is not None:
        data["storages"] = storages
    return data


def _static_data(mount: StaticMount) -> dict[str, Any]:
    return {"name": mount.name, "site": mount.site, "fstype": mount.fstype,
            "mount_path": mount.mount_path, "volume": mount.volume, "subpath": mount.subpath,
            "spec": mount.spec, "options": mount.options}


# -- storages ---------------------------------------------------------------------------


@command("ng", "storage", "new", "home", help="create a user's home storage", store=True)
async def storage_new_home(args: argparse.Namespace) -> None:
    ctx = args.ctx
    storage = await ops.CreateHomeStorage.run(ctx.store, ctx.author, site=args.site,
                                              user=args.user, quota=args.quota,
                                              **_target_kwargs(args))
    ctx.out.success(f"created home of [bold]{esc(args.user)}[/] at {esc(args.site)} "
                    f"(volume {esc(storage.volume)})")


@storage_new_home.args()
def _(parser: a.Parser) -> None:
    a.site(parser)
    a.user(parser)
    parser.add_argument("--quota", help="default: the site's default home quota")
    _target_flags(parser)


@command("ng", "storage", "new", "group", help="create a group's storage", store=True)
async def storage_new_group(args: argparse.Namespace) -> None:
    ctx = args.ctx
    storage = await ops.CreateGroupStorage.run(
        ctx.store, ctx.author, site=args.site, group=args.group, owner=args.owner,
        quota=args.quota, globus=args.globus, **_target_kwargs(args))
    ctx.out.success(f"created group storage [bold]{esc(args.group)}[/] at {esc(args.site)} "
                    f"(volume {esc(storage.volume)}, owner {esc(storage.owner)})")


@storage_new_group.args()
def _(parser: a.Parser) -> None:
    a.site(parser)
    a.group(parser)
    parser.add_argument("--quota", required=True, help="quota, e.g. 1T or 500G")
    parser.add_argument("--owner", metavar="USER", help="default: the group's only sponsor")
    parser.add_argument("--globus", action="store_true", help="share it through Globus")
    _target_flags(parser)


@command("ng", "storage", "new", "share", help="create a shared storage", store=True)
async def storage_new_share(args: argparse.Namespace) -> None:
    ctx = args.ctx
    storage = await ops.CreateShareStorage.run(
        ctx.store, ctx.author, site=args.site, name=args.name, owner=args.owner,
        group=args.group, quota=args.quota, globus=args.globus, **_target_kwargs(args))
    ctx.out.success(f"created share [bold]{esc(args.name)}[/] at {esc(args.site)} "
                    f"(volume {esc(storage.volume)})")


@storage_new_share.args()
def _(parser: a.Parser) -> None:
    a.site(parser)
    parser.add_argument("--name", "-n", required=True, help="the share's name")
    parser.add_argument("--owner", required=True, metavar="USER", help="the user who owns it")
    a.group(parser)
    parser.add_argument("--quota", help="quota, e.g. 1T or 500G")
    parser.add_argument("--globus", action="store_true", help="share it through Globus")
    _target_flags(parser)


@command("ng", "storage", "list", help="list a site's storages", store=True)
async def storage_list(args: argparse.Namespace) -> None:
    await get_site(args.site)
    found = await list_site_storages(args.site, category=args.category, owner=args.user,
                                     group=args.group, host=args.host)
    rows = [r.as_dict() for r in found]
    args.ctx.out.table(rows, title=f"Storages at {args.site} (count={len(rows)})",
                       columns=["name", "category", "owner", "group", "volume", "host",
                                "subpath", "mount_path", "mount", "quota"])


@storage_list.args()
def _(parser: a.Parser) -> None:
    a.site(parser)
    a.user(parser, required=False, help="only storages this user owns")
    a.group(parser, required=False, help="only storages of this group")
    parser.add_argument("--category", choices=["home", "group", "share"],
                        help="only storages of this kind")
    parser.add_argument("--host", help="only storages on this file server")
    a.output_format(parser)


@command("ng", "storage", "show", help="show one storage with its volume and mount",
         store=True)
async def storage_show(args: argparse.Namespace) -> None:
    resolved = await get_storage(args.site, args.name, args.category)
    data = resolved.as_dict()
    data["volume"] = _volume_data(resolved.volume)
    if resolved.automount_map:
        data["automount_map"] = _map_data(resolved.automount_map)
    if resolved.static_mount:
        data["static_mount"] = _static_data(resolved.static_mount)
    args.ctx.out.show(data, title=f"storage {args.name} at {args.site}")


@storage_show.args()
def _(parser: a.Parser) -> None:
    parser.add_argument("name", help="the storage's name (its user, group or share)")
    a.site(parser)
    parser.add_argument("--category", choices=["home", "group", "share"],
                        help="which kind, when the name is ambiguous")
    a.output_format(parser)


@command("ng", "storage", "set-mount", help="change how a storage is mounted", store=True)
async def storage_set_mount(args: argparse.Namespace) -> None:
    ctx = args.ctx
    storage = await ops.SetStorageMount.run(
        ctx.store, ctx.author, site=args.site, name=args.name, category=args.category,
        mount_name=args.mount_name or "", automount_map=args.automount_map,
        static_mount=args.static_mount, no_mount=args.no_mount)
    mechanism = storage.automount_map or storage.static_mount or "no mount"
    ctx.out.success(f"storage [bold]{esc(args.name)}[/] now uses {esc(mechanism)}")


@storage_set_mount.args()
def _(parser: a.Parser) -> None:
    a.site(parser)
    parser.add_argument("--name", "-n", required=True,
                        help="the storage's name (its user, group or share)")
    parser.add_argument("--category", choices=["home", "group", "share"],
                        help="which kind, when the name is ambiguous")
    parser.add_argument("--mount-name", help="the automount key (default: the name)")
    _mount_flags(parser)


@command("ng", "storage", "rehome", help="move a user's home onto the site defaults",
         store=True)
async def storage_rehome(args: argparse.Namespace) -> None:
    ctx = args.ctx
    site = await get_site(args.site)
    home = await find_home_storage(args.user, site.name)
    target = site.storage.default_home_volume
    if home is not None and target:
        ctx.out.info(f"{esc(args.user)}: home volume {esc(home.volume)} -> a new child of "
                     f"{esc(target)} "
                     "(the old volume record stays; no files are moved)")
    if not ctx.confirm(f"Re-home {args.user} at {site.name}?", force=args.force):
        raise Conflict("not confirmed; pass --force to re-home without asking")
    storage = await ops.RehomeUser.run(ctx.store, ctx.author, site=args.site, user=args.user)
    ctx.out.success(f"re-homed [bold]{esc(args.user)}[/] to volume {esc(storage.volume)}")


@storage_rehome.args()
def _(parser: a.Parser) -> None:
    a.site(parser)
    a.user(parser)
    a.force(parser)


@command("ng", "storage", "edit", help="change a storage's quota, owner, group or Globus flag",
         store=True)
async def storage_edit(args: argparse.Namespace) -> None:
    ctx = args.ctx
    await ops.EditStorage.run(ctx.store, ctx.author, site=args.site, name=args.name,
                              category=args.category, quota=args.quota, owner=args.owner,
                              group=args.group, globus=args.globus)
    ctx.out.success(f"updated storage [bold]{esc(args.name)}[/] at {esc(args.site)}")


@storage_edit.args()
def _(parser: a.Parser) -> None:
    parser.add_argument("name", help="the storage's name (its user, group or share)")
    a.site(parser)
    parser.add_argument("--category", choices=["home", "group", "share"],
                        help="which kind, when the name is ambiguous")
    parser.add_argument("--quota", help="the whole volume's quota (replaces its allocations)")
    parser.add_argument("--owner", metavar="USER", help="the new owner")
    a.group(parser, required=False)
    parser.add_argument("--globus", action=argparse.BooleanOptionalAction, default=None,
                        help="share it through Globus (or stop)")


@command("ng", "storage", "remove", help="remove a storage record", store=True, aliases=["rm"])
async def storage_remove(args: argparse.Namespace) -> None:
    ctx = args.ctx
    storage = await ops.RemoveStorage.run(ctx.store, ctx.author, site=args.site,
                                          name=args.name, category=args.category,
                                          force=args.force)
    ctx.out.success(f"removed storage [bold]{esc(args.name)}[/] ({esc(storage.category)}) at "
                    f"{esc(args.site)}; "
                    f"volume {esc(storage.volume)} is kept")


@storage_remove.args()
def _(parser: a.Parser) -> None:
    parser.add_argument("name", help="the storage's name (its user, group or share)")
    a.site(parser)
    parser.add_argument("--category", choices=["home", "group", "share"],
                        help="which kind, when the name is ambiguous")
    a.force(parser, help="remove it even while it is mounted")


# -- volumes ------------------------------------------------------------------------------


@command("ng", "storage", "volume", "new", help="create a volume", store=True)
async def volume_new(args: argparse.Namespace) -> None:
    ctx = args.ctx
    volume = await ops.CreateStorageVolume.run(
        ctx.store, ctx.author, site=args.site, name=args.name, backend=args.backend,
        host=args.host, host_path=args.host_path, parent=args.parent, quota=args.quota,
        export_options=args.export_options, export_ranges=args.export_ranges or [])
    ctx.out.success(f"created volume [bold]{esc(volume.name)}[/] at "
                    f"{esc(volume.host)}:{esc(volume.host_path)}")


@volume_new.args()
def _(parser: a.Parser) -> None:
    parser.add_argument("name", help="volume name")
    a.site(parser)
    parser.add_argument("--backend", choices=["zfs", "quobyte"], help="storage backend")
    parser.add_argument("--host", help="the file server that exports it")
    parser.add_argument("--host-path", help="its path on the file server")
    parser.add_argument("--parent", metavar="VOLUME", help="create it as a child of this volume")
    parser.add_argument("--quota", help="quota, e.g. 10T")
    parser.add_argument("--export-options", default="", help="NFS export options (e.g. rw,sync)")
    parser.add_argument("--export-ranges", nargs="+", metavar="CIDR",
                        help="networks it is exported to")


@command("ng", "storage", "volume", "list", help="list a site's volumes", store=True)
async def volume_list(args: argparse.Namespace) -> None:
    await get_site(args.site)
    volumes = await list_site_volumes(args.site)
    rows = [_volume_data(v) for v in volumes]
    args.ctx.out.table(rows, title=f"Volumes at {args.site} (count={len(rows)})",
                       columns=["name", "backend", "host", "host_path", "parent", "quota"])


@volume_list.args()
def _(parser: a.Parser) -> None:
    a.site(parser)
    a.output_format(parser)


@command("ng", "storage", "volume", "show", help="show a volume", store=True)
async def volume_show(args: argparse.Namespace) -> None:
    volume = await get_volume(args.site, args.name)
    children = await StorageVolume.find({"site": args.site, "parent": volume.name}).count()
    args.ctx.out.show(_volume_data(volume, children), title=f"volume {volume.name}")


@volume_show.args()
def _(parser: a.Parser) -> None:
    parser.add_argument("name", help="volume name")
    a.site(parser)
    a.output_format(parser)


@command("ng", "storage", "volume", "set-mounts",
         help="mount every storage on a volume subtree one way", store=True)
async def volume_set_mounts(args: argparse.Namespace) -> int:
    ctx = args.ctx
    result = await ops.SetVolumeStorageMounts.run(
        ctx.store, ctx.author, site=args.site, volume=args.name,
        automount_map=args.automount_map, static_mount=args.static_mount,
        no_mount=args.no_mount)
    ctx.out.success(f"{len(result['updated'])} storage(s) now use {esc(result['mechanism'])}")
    for warning in result["warnings"]:
        ctx.out.warn(esc(warning))
    return 1 if result["warnings"] else 0


@volume_set_mounts.args()
def _(parser: a.Parser) -> None:
    parser.add_argument("name", help="volume name")
    a.site(parser)
    _mount_flags(parser)


@command("ng", "storage", "volume", "alloc", "add", help="add a quota allocation", store=True)
async def volume_alloc_add(args: argparse.Namespace) -> None:
    ctx = args.ctx
    volume = await ops.AddVolumeAllocation.run(ctx.store, ctx.author, site=args.site,
                                               volume=args.name, quota=args.quota,
                                               comment=args.comment)
    ctx.out.success(f"volume [bold]{esc(volume.name)}[/] quota is now {esc(volume.quota)}")


@volume_alloc_add.args()
def _(parser: a.Parser) -> None:
    parser.add_argument("name", help="volume name")
    a.site(parser)
    parser.add_argument("--quota", required=True, help="quota added, e.g. 1T")
    parser.add_argument("--comment", default="", help="why it was granted")


@command("ng", "storage", "volume", "alloc", "remove", help="remove a quota allocation",
         store=True, aliases=["rm"])
async def volume_alloc_remove(args: argparse.Namespace) -> None:
    ctx = args.ctx
    volume = await ops.RemoveVolumeAllocation.run(ctx.store, ctx.author, site=args.site,
                                                  volume=args.name, index=args.index)
    ctx.out.success(f"volume [bold]{esc(volume.name)}[/] quota is now "
                    f"{esc(volume.quota or 'none')}")


@volume_alloc_remove.args()
def _(parser: a.Parser) -> None:
    parser.add_argument("name", help="volume name")
    a.site(parser)
    parser.add_argument("--index", type=int, required=True, help="0-based (see volume show)")


@command("ng", "storage", "volume", "alloc", "edit", help="change a quota allocation",
         store=True)
async def volume_alloc_edit(args: argparse.Namespace) -> None:
    ctx = args.ctx
    volume = await ops.EditVolumeAllocation.run(ctx.store, ctx.author, site=args.site,
                                                volume=args.name, index=args.index,
                                                quota=args.quota, comment=args.comment)
    ctx.out.success(f"volume [bold]{esc(volume.name)}[/] quota is now {esc(volume.quota)}")


@volume_alloc_edit.args()
def _(parser: a.Parser) -> None:
    parser.add_argument("name", help="volume name")
    a.site(parser)
    parser.add_argument("--index", type=int, required=True,
                        help="which allocation (see `volume show`)")
    parser.add_argument("--quota", required=True, help="its new quota, e.g. 1T")
    parser.add_argument("--comment", help="replace the comment")


# -- mounts -------------------------------------------------------------------------------


@command("ng", "storage", "static-mount", "new", help="create a static mount", store=True)
async def static_mount_new(args: argparse.Namespace) -> None:
    ctx = args.ctx
    mount = await ops.CreateStaticMount.run(
        ctx.store, ctx.author, site=args.site, name=args.name, fstype=args.fstype,
        mount_path=args.mount_path, volume=args.volume, subpath=args.subpath or "",
        spec=args.spec or "", options=args.options or [])
    ctx.out.success(f"created static mount [bold]{esc(mount.name)}[/] at {esc(mount.mount_path)}")


@static_mount_new.args()
def _(parser: a.Parser) -> None:
    parser.add_argument("name", help="mount name")
    a.site(parser)
    parser.add_argument("--fstype", required=True, choices=["nfs", "nfs4", "cvmfs"],
                        help="filesystem type")
    parser.add_argument("--mount-path", required=True, help="where clients mount it")
    parser.add_argument("--volume", help="the volume it mounts")
    parser.add_argument("--subpath", help="a path inside the volume")
    parser.add_argument("--spec", help="a raw device spec (e.g. a cvmfs repository)")
    parser.add_argument("--options", nargs="+", metavar="OPT", help="mount options (e.g. rw hard)")


@command("ng", "storage", "static-mount", "list", help="list static mounts", store=True)
async def static_mount_list(args: argparse.Namespace) -> None:
    await get_site(args.site)
    rows = [_static_data(m) for m in await list_site_static_mounts(args.site)]
    args.ctx.out.table(rows, title=f"Static mounts at {args.site} (count={len(rows)})",
                       columns=["name", "fstype", "mount_path", "volume", "subpath", "spec",
                                "options"])


@static_mount_list.args()
def _(parser: a.Parser) -> None:
    a.site(parser)
    a.output_format(parser)


@command("ng", "storage", "automount-map", "new", help="create an automount map", store=True)
async def automount_map_new(args: argparse.Namespace) -> None:
    ctx = args.ctx
    amap = await ops.CreateAutomountMap.run(ctx.store, ctx.author, site=args.site,
                                            name=args.name, prefix=args.prefix,
                                            options=args.options or [])
    ctx.out.success(f"created automount map [bold]{esc(amap.name)}[/] for {esc(amap.prefix)}")


@automount_map_new.args()
def _(parser: a.Parser) -> None:
    parser.add_argument("name", help="map name (e.g. home)")
    a.site(parser)
    parser.add_argument("--prefix", required=True, help="where its keys appear, e.g. /home")
    parser.add_argument("--options", nargs="+", metavar="OPT",
                        help="default mount options of its entries")


@command("ng", "storage", "automount-map", "list", help="list automount maps", store=True)
async def automount_map_list(args: argparse.Namespace) -> None:
    await get_site(args.site)
    storages = await list_site_storages(args.site)
    counts: dict[str, int] = {}
    for r in storages:
        if r.automount_map:
            counts[r.automount_map.name] = counts.get(r.automount_map.name, 0) + 1
    rows = [_map_data(m, counts.get(m.name, 0)) for m in await list_site_automount_maps(args.site)]
    args.ctx.out.table(rows, title=f"Automount maps at {args.site} (count={len(rows)})",
                       columns=["name", "prefix", "options", "storages"])


@automount_map_list.args()
def _(parser: a.Parser) -> None:
    a.site(parser)
    a.output_format(parser)


@command("ng", "storage", "automount-map", "show", help="show a map and its entries",
         store=True)
async def automount_map_show(args: argparse.Namespace) -> None:
    amap = await get_automount_map(args.site, args.name)
    entries = await list_map_storages(args.site, amap.name)
    data = _map_data(amap, len(entries)) | {"entries": [
        {"key": r.storage.mount_name or r.storage.name, "storage": r.storage.name,
         "host": r.host, "path": r.host_path, "options": r.mount_options} for r in entries]}
    args.ctx.out.show(data, title=f"automount map {amap.name}")


@automount_map_show.args()
def _(parser: a.Parser) -> None:
    parser.add_argument("name", help="map name")
    a.site(parser)
    a.output_format(parser)


# -- site defaults ------------------------------------------------------------------------


@command("ng", "site", "storage", "set-defaults", help="set where new homes go", store=True)
async def site_storage_set_defaults(args: argparse.Namespace) -> None:
    ctx = args.ctx
    site = await ops.SetSiteStorageDefaults.run(
        ctx.store, ctx.author, site=args.site, home_volume=args.home_volume,
        home_quota=args.home_quota, home_automount_map=args.home_automount_map,
        home_static_mount=args.home_static_mount, clear=args.clear or [])
    settings = site.storage
    ctx.out.success(f"{esc(site.name)} homes: volume "
                    f"{esc(settings.default_home_volume or '-')}, quota "
                    f"{esc(settings.default_home_quota or '-')}, mount "
                    f"{esc(settings.home_automount_map or settings.home_static_mount or '-')}")


@site_storage_set_defaults.args()
def _(parser: a.Parser) -> None:
    a.site(parser)
    parser.add_argument("--home-volume", metavar="VOLUME", help="parent volume of new homes")
    parser.add_argument("--home-quota", help="quota of new homes, e.g. 20G")
    mount = parser.add_mutually_exclusive_group()
    mount.add_argument("--home-automount-map", metavar="MAP",
                       help="mount new homes through this map")
    mount.add_argument("--home-static-mount", metavar="MOUNT",
                       help="mount new homes under this mount")
    parser.add_argument("--clear", nargs="+", choices=["home_volume", "home_quota",
                                                       "home_mount"], help="unset these defaults")
