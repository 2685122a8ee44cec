"""``cheeto ng user …``"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from ...constants import DEFAULT_SYSTEM_EMAIL, USER_STATUSES
from ...credentials import generate_password, parse_ssh_key
from ...errors import InvalidInput, NotFound
from ...files import read_small_text
from ...operations import user as ops
from ...operations.user_site import AddSiteUser, RemoveSiteUser
from ...queries.access_policy import grant_warning
from ...queries.user import (
    find_redundant_site_statuses,
    get_user,
    list_user_ssh_keys,
)
from .. import args as a
from ..app import command, group_help
from ..output import esc
from .user_read import ssh_key_data

group_help("ng", "user", help="users: create, change, show, list")
group_help("ng", "user", "new", help="create users")
group_help("ng", "user", "add", help="grant access, keys and sites")
group_help("ng", "user", "remove", help="revoke access, keys and sites")


def _print_password(args: argparse.Namespace, user: str, password: str) -> None:
    """A generated password is shown once: on stdout, so scripts can capture it."""
    args.ctx.out.info(f"generated password for [bold]{esc(user)}[/] (shown once, on stdout):")
    args.ctx.out.write_raw(password + "\n")


def _password_from(args: argparse.Namespace) -> str | None:
    if getattr(args, "password_stdin", False):
        line = args.ctx.stdin.readline().rstrip("\n")
        if not line:
            raise InvalidInput("no password on stdin")
        return line
    if getattr(args, "password", False):
        return generate_password()
    return None


def _password_args(parser: a.Parser) -> None:
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--password", action="store_true",
                       help="generate a random password and print it once")
    group.add_argument("--password-stdin", action="store_true",
                       help="read the password from the first line of stdin")


KEY_FILE_MAX_BYTES = 64 * 1024  # a public key is at most a few KB; a bigger file is a mistake


def _key_from(args: argparse.Namespace) -> str | None:
    if getattr(args, "key_file", None):
        return read_small_text(args.key_file, limit=KEY_FILE_MAX_BYTES, what="an SSH public key")
    return getattr(args, "key", None)


def _key_args(parser: a.Parser, *, required: bool) -> None:
    group = parser.add_mutually_exclusive_group(required=required)
    group.add_argument("--key", "-k", metavar="TEXT", help="the public key line")
    group.add_argument("--key-file", metavar="PATH", help="read the public key from a file")


# -- creation --------------------------------------------------------------------------


@command("ng", "user", "new", "generic", help="create a user with an explicit uid", store=True)
async def user_new_generic(args: argparse.Namespace) -> None:
    ctx = args.ctx
    password = _password_from(args)
    expires = a.future_or_none(args.expires_at, "--expires-at")
    user, _ = await ops.CreateUser.run(
        ctx.store, ctx.author, name=args.user, email=args.email, uid=args.uid, gid=args.gid,
        fullname=args.fullname, surname=args.surname, type=args.type, shell=args.shell,
        status=args.status, access=args.access or [], home_directory=args.home_directory,
        password=password, ssh_key=_key_from(args), expires_at=expires)
    ctx.out.success(f"created user [bold]{esc(user.name)}[/] (uid={esc(user.uid)}, "
                    f"gid={esc(user.gid)})")
    if password and args.password:
        _print_password(args, user.name, password)


@user_new_generic.args()
def _(parser: a.Parser) -> None:
    a.user(parser)
    parser.add_argument("--email", required=True, help="e-mail address")
    parser.add_argument("--fullname", required=True, help="full name (GECOS)")
    parser.add_argument("--uid", type=int, required=True, help="the user's uid (0..4294967295)")
    parser.add_argument("--gid", type=int, help="primary gid (default: the uid)")
    parser.add_argument("--surname", help="LDAP sn (default: last word of the full name)")
    parser.add_argument("--type", default="user", help="user type (user, admin, …)")
    parser.add_argument("--shell", default="/usr/bin/bash",
                        help="login shell (default /usr/bin/bash)")
    parser.add_argument("--status", default="active", choices=USER_STATUSES,
                        help="initial status (default active)")
    parser.add_argument("--access", "-a", nargs="+", metavar="ACCESS",
                        help="global access (login-ssh, slurm, …)")
    parser.add_argument("--home-directory", help="default /home/<user>")
    parser.add_argument("--expires-at", metavar="WHEN",
                        help=a.when_help("when the account expires"))
    _password_args(parser)
    _key_args(parser, required=False)


@command("ng", "user", "new", "system", help="create a service account (system uid band)",
         store=True)
async def user_new_system(args: argparse.Namespace) -> None:
    ctx = args.ctx
    password = _password_from(args)
    user, _ = await ops.CreateSystemUser.run(
        ctx.store, ctx.author, name=args.user, email=args.email or _centre_email(ctx),
        fullname=args.fullname or f"{_centre_name(ctx)} {args.user}", password=password)
    ctx.out.success(f"created system user [bold]{esc(user.name)}[/] (uid={esc(user.uid)})")
    if password and args.password:
        _print_password(args, user.name, password)


def _centre_email(ctx: Any) -> str:
    """The contact address of accounts nobody owns: the centre's helpdesk, if set."""
    mail = ctx.config.mail
    return mail.centre.helpdesk if mail and mail.centre.helpdesk else DEFAULT_SYSTEM_EMAIL


def _centre_name(ctx: Any) -> str:
    mail = ctx.config.mail
    return mail.centre.short_name if mail else "HPC"


@user_new_system.args()
def _(parser: a.Parser) -> None:
    a.user(parser)
    parser.add_argument("--email",
                        help=f"e-mail address (default mail.centre.helpdesk, else "
                             f"{DEFAULT_SYSTEM_EMAIL})")
    parser.add_argument("--fullname", help="default '<mail.centre.short_name> <user>'")
    _password_args(parser)


@command("ng", "user", "new", "shared", help="create a shared account (shared uid band)",
         store=True)
async def user_new_shared(args: argparse.Namespace) -> None:
    ctx = args.ctx
    password = _password_from(args)
    user, _ = await ops.CreateSharedUser.run(ctx.store, ctx.author, name=args.user,
                                             email=args.email, fullname=args.fullname,
                                             password=password)
    ctx.out.success(f"created shared user [bold]{esc(user.name)}[/] (uid={esc(user.uid)})")
    if password and args.password:
        _print_password(args, user.name, password)


@user_new_shared.args()
def _(parser: a.Parser) -> None:
    a.user(parser)
    parser.add_argument("--email", required=True, help="e-mail address")
    parser.add_argument("--fullname", required=True, help="full name (GECOS)")
    _password_args(parser)


@command("ng", "user", "new", "class",
         help="create a batch of course accounts (all or nothing)", store=True,
         progress="class accounts")
async def user_new_class(args: argparse.Namespace) -> int:
    """Passwords are shown once: in a new 0600 file when --file is given (checked before
    anything is created, written only once the whole batch is), else on stdout. A batch
    that was interrupted is finished by the same command (operations/class_users.py)."""
    from ...operations.class_users import CHUNK, CreateClassUsers

    ctx = args.ctx
    expires = a.future_or_none(args.expires_at, "--expires-at")
    path = Path(args.file).expanduser() if args.file else None
    if path is not None:
        _probe_new_file(path)
    created = await CreateClassUsers.run(
        ctx.store, ctx.author, site=args.site, prefix=args.prefix, count=args.count,
        email=args.email or _centre_email(ctx), expires_at=expires, group=args.group,
        chunk_size=CHUNK if args.chunk_size is None else args.chunk_size,
        **({"access": args.access} if args.access else {}))
    if created.replaced:
        ctx.out.warn(f"finished an interrupted batch: the {esc(created.replaced)} account(s) "
                     "its earlier run created got new passwords (that run's passwords were "
                     "never written out and are void)")
    text = "".join(f"{user.name} {password}\n" for user, password in created)
    if path is not None:
        try:
            _write_new_file(path, text)
        except OSError as exc:
            ctx.out.error(f"created {len(created)} class account(s), but cannot write {path}: "
                          f"{exc.strerror or exc}; passwords (shown once) on stdout instead")
            ctx.out.write_raw(text)
            return 1
        ctx.out.success(f"created {len(created)} class account(s); passwords in {esc(args.file)}")
    else:
        ctx.out.success(f"created {len(created)} class account(s); passwords (shown once) "
                        "on stdout:")
        ctx.out.write_raw(text)
    return 0


def _probe_new_file(path: Path) -> None:
    """Refuse, before any work, a passwords file that exists or cannot be created; the
    probe is removed at once (the file is written only when the batch is done, so a
    batch killed mid-way leaves none behind)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        raise InvalidInput(f"{path} already exists; choose a new file") from None
    except OSError as exc:
        raise InvalidInput(f"cannot create {path}: {exc.strerror}") from None
    except ValueError:  # a NUL in the path
        raise InvalidInput(f"cannot create {path}: a path cannot hold a NUL character") \
            from None
    os.close(fd)
    path.unlink(missing_ok=True)


def _write_new_file(path: Path, text: str) -> None:
    """Write a 0600 file next to ``path`` and link it into place only if ``path`` does
    not exist: readers never see half a file, and nothing is ever overwritten."""
    import tempfile

    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
        os.chmod(tmp, 0o600)
        os.link(tmp, path)
    finally:
        Path(tmp).unlink(missing_ok=True)


@user_new_class.args()
def _(parser: a.Parser) -> None:
    a.site(parser)
    parser.add_argument("--prefix", required=True,
                        help="names become <prefix>-N, N zero-padded to the width of --count "
                             "(-n 9: <prefix>-1 … <prefix>-9; -n 30: <prefix>-01 … "
                             "<prefix>-30)")
    parser.add_argument("--count", "-n", type=int, required=True,
                        help="how many accounts to create (at most 2000)")
    parser.add_argument("--expires-at", required=True, metavar="WHEN",
                        help=a.when_help("when the accounts expire"))
    parser.add_argument("--file", "-f", metavar="PATH",
                        help="write 'user password' lines to this new 0600 file")
    a.group(parser, required=False, help="also make them members of this group")
    parser.add_argument("--access", "-a", nargs="+", metavar="ACCESS",
                        help="default: login-ssh slurm")
    parser.add_argument("--email",
                        help="contact address recorded for every account (default "
                             f"mail.centre.helpdesk, else {DEFAULT_SYSTEM_EMAIL})")
    parser.add_argument("--chunk-size", type=int, metavar="N",
                        help="accounts per transaction (default 25)")


# -- attributes ------------------------------------------------------------------------


@command("ng", "user", "status", help="set a user's status, globally or at one site",
         store=True)
async def user_status(args: argparse.Namespace) -> None:
    ctx = args.ctx
    await ops.SetUserStatus.run(ctx.store, ctx.author, name=args.user, status=args.status,
                                reason=args.reason, site=args.site, reset=args.reset)
    scope = f"at {args.site}" if args.site else "globally"
    what = "reset to the global status" if args.reset else f"set to {args.status}"
    ctx.out.success(f"status of [bold]{esc(args.user)}[/] {esc(what)} {esc(scope)}")


@user_status.args()
def _(parser: a.Parser) -> None:
    a.user(parser)
    a.site(parser, required=False, help="only at this site")
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--status", choices=USER_STATUSES, help="the new status")
    group.add_argument("--reset", action="store_true", help="drop the site's override")
    parser.add_argument("--reason", required=True, help="recorded in the user's comments")


def _field_command(field: str, flag: str, help: str) -> None:
    @command("ng", "user", field, help=help, store=True)
    async def handler(args: argparse.Namespace) -> None:
        ctx = args.ctx
        op = {"type": ops.SetUserType, "shell": ops.SetUserShell, "email": ops.SetUserEmail}
        await op[field].run(ctx.store, ctx.author, name=args.user,
                            **{field: getattr(args, field)})
        ctx.out.success(f"{esc(field)} of [bold]{esc(args.user)}[/] set to "
                        f"{esc(getattr(args, field))}")

    @handler.args()
    def _(parser: a.Parser) -> None:
        a.user(parser)
        parser.add_argument(flag, required=True, dest=field, help=f"the new {field}")


_field_command("type", "--type", "set a user's type")
_field_command("shell", "--shell", "set a user's login shell")
_field_command("email", "--email", "set a user's e-mail address")


@command("ng", "user", "password", help="set a new password (generated unless --stdin)",
         store=True)
async def user_password(args: argparse.Namespace) -> None:
    ctx = args.ctx
    if args.stdin:
        password = ctx.stdin.readline().rstrip("\n")
        if not password:
            raise InvalidInput("no password on stdin")
    else:
        password = generate_password()
    await ops.SetUserPassword.run(ctx.store, ctx.author, name=args.user, password=password)
    ctx.out.success(f"password of [bold]{esc(args.user)}[/] changed")
    if not args.stdin:
        _print_password(args, args.user, password)


@user_password.args()
def _(parser: a.Parser) -> None:
    a.user(parser)
    parser.add_argument("--stdin", action="store_true",
                        help="read the new password from the first line of stdin")


@command("ng", "user", "comment", help="append a comment to a user", store=True)
async def user_comment(args: argparse.Namespace) -> None:
    ctx = args.ctx
    await ops.AddUserComment.run(ctx.store, ctx.author, name=args.user, comment=args.comment)
    ctx.out.success(f"comment added to [bold]{esc(args.user)}[/]")


@user_comment.args()
def _(parser: a.Parser) -> None:
    a.user(parser)
    parser.add_argument("--comment", "-c", required=True, help="the text to append")


@command("ng", "user", "rename", help="rename a user (and their personal group) everywhere",
         store=True)
async def user_rename(args: argparse.Namespace) -> None:
    ctx = args.ctx
    await ops.RenameUser.run(ctx.store, ctx.author, name=args.user, new_name=args.new_name)
    ctx.out.success(f"renamed user [bold]{esc(args.user)}[/] to [bold]{esc(args.new_name)}[/]")


@user_rename.args()
def _(parser: a.Parser) -> None:
    a.user(parser, help="current name")
    parser.add_argument("--new-name", "--to", required=True, dest="new_name",
                        help="the user's new name")


# -- access, keys, sites ---------------------------------------------------------------


@command("ng", "user", "add", "access", help="grant access, globally or at one site",
         store=True)
async def user_add_access(args: argparse.Namespace) -> None:
    ctx = args.ctx
    await ops.AddUserAccess.run(ctx.store, ctx.author, name=args.user, access=args.access,
                                site=args.site)
    scope = f" at {args.site}" if args.site else ""
    ctx.out.success(f"[bold]{esc(args.user)}[/] has {esc(', '.join(args.access))}{esc(scope)}")
    # recorded either way (it comes back on reactivation); exports follow the status
    if warning := await grant_warning(args.user, args.access, args.site):
        ctx.out.warn(esc(warning))


@command("ng", "user", "remove", "access", help="revoke access, globally or at one site",
         store=True)
async def user_remove_access(args: argparse.Namespace) -> None:
    ctx = args.ctx
    await ops.RemoveUserAccess.run(ctx.store, ctx.author, name=args.user, access=args.access,
                                   site=args.site)
    scope = f" at {args.site}" if args.site else ""
    ctx.out.success(f"[bold]{esc(args.user)}[/] no longer has "
                    f"{esc(', '.join(args.access))}{esc(scope)}")


for _handler in (user_add_access, user_remove_access):
    @_handler.args()
    def _(parser: a.Parser) -> None:
        a.user(parser)
        a.site(parser, required=False, help="only at this site (a per-site override)")
        parser.add_argument("--access", "-a", nargs="+", required=True, metavar="ACCESS",
                            help="access kinds (login-ssh, slurm, sudo, …)")


@command("ng", "user", "add", "ssh-key", help="add an SSH public key", store=True)
async def user_add_ssh_key(args: argparse.Namespace) -> None:
    ctx = args.ctx
    key = await ops.AddUserSshKey.run(ctx.store, ctx.author, name=args.user,
                                      key=_key_from(args) or "", replace=args.replace)
    ctx.out.success(f"added key {esc(parse_ssh_key(key.key).fingerprint)} to "
                    f"[bold]{esc(args.user)}[/]")


@user_add_ssh_key.args()
def _(parser: a.Parser) -> None:
    a.user(parser)
    _key_args(parser, required=True)
    parser.add_argument("--replace", action="store_true", help="remove the user's other keys")


@command("ng", "user", "remove", "ssh-key", help="remove one of a user's SSH keys", store=True)
async def user_remove_ssh_key(args: argparse.Namespace) -> None:
    ctx = args.ctx
    keys = await list_user_ssh_keys((await get_user(args.user)).name)
    key_id = args.key_id
    if key_id is None:
        if not keys:
            raise NotFound(f"user {args.user!r} has no SSH keys")
        listing = [ssh_key_data(k) for k in keys]
        ctx.out.table(listing, title=f"SSH keys of {args.user}")
        if len(keys) == 1 and ctx.confirm("Remove this key?", force=args.force):
            key_id = keys[0].id
        elif len(keys) > 1 and ctx.stdin.isatty():
            ctx.out.console.print("Number of the key to remove: ", end="")
            choice = ctx.stdin.readline().strip()
            if not choice.isdigit() or not 1 <= int(choice) <= len(keys):
                raise InvalidInput(f"choose a number between 1 and {len(keys)}")
            key_id = keys[int(choice) - 1].id
        else:
            raise InvalidInput("pass --key-id (see the ids above)"
                               + (" or --force" if len(keys) == 1 else ""))
    removed = await ops.RemoveUserSshKey.run(ctx.store, ctx.author, name=args.user,
                                             key_id=key_id)
    ctx.out.success(f"removed key {esc(ssh_key_data(removed)['fingerprint'])} from "
                    f"[bold]{esc(args.user)}[/]")


@user_remove_ssh_key.args()
def _(parser: a.Parser) -> None:
    a.user(parser)
    parser.add_argument("--key-id", help="id of the key (see `ng user show`)")
    a.force(parser, help="remove the only key without asking")


@command("ng", "user", "add", "site", help="put a user on a site", store=True)
async def user_add_site(args: argparse.Namespace) -> None:
    ctx = args.ctx
    await AddSiteUser.run(ctx.store, ctx.author, user=args.user, site=args.site)
    ctx.out.success(f"[bold]{esc(args.user)}[/] is on site {esc(args.site)}")


@command("ng", "user", "remove", "site", help="take a user off a site", store=True)
async def user_remove_site(args: argparse.Namespace) -> None:
    ctx = args.ctx
    await RemoveSiteUser.run(ctx.store, ctx.author, user=args.user, site=args.site)
    ctx.out.success(f"[bold]{esc(args.user)}[/] is no longer on site {esc(args.site)}")


for _handler in (user_add_site, user_remove_site):
    @_handler.args()
    def _(parser: a.Parser) -> None:
        a.user(parser)
        a.site(parser)


@command("ng", "user", "redundant-site-statuses",
         help="list (or --clear) per-site statuses equal to the global one", store=True)
async def user_redundant_site_statuses(args: argparse.Namespace) -> None:
    ctx = args.ctx
    if args.clear:
        cleared = await ops.ClearRedundantSiteStatuses.run(ctx.store, ctx.author)
        rows = [{"user": u, "site": s, "status": st} for u, s, st in cleared]
        ctx.out.table(rows, title=f"Cleared redundant site statuses (count={len(rows)})",
                      columns=["user", "site", "status"])
        return
    found = await find_redundant_site_statuses()
    rows = [{"user": u.name, "site": usi.site, "status": usi.status} for u, usi in found]
    ctx.out.table(rows, title=f"Redundant site statuses (count={len(rows)})",
                  columns=["user", "site", "status"])


@user_redundant_site_statuses.args()
def _(parser: a.Parser) -> None:
    parser.add_argument("--clear", action="store_true", help="drop them")
    a.output_format(parser)


@command("ng", "user", "clear-offboarding-site-statuses",
         help="drop per-site statuses of users who are offboarding globally", store=True)
async def user_clear_offboarding(args: argparse.Namespace) -> None:
    ctx = args.ctx
    cleared = await ops.ClearOffboardingSiteStatuses.run(ctx.store, ctx.author)
    ctx.out.success(f"cleared {esc(cleared)} per-site status override(s)")

