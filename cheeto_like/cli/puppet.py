"""``cheeto puppet validate``: check (and normalise) legacy puppet.hpc account YAML.

Pure file work, no store: the files are loaded, grouped into forests (``--merge``),
validated, optionally cross-checked (``--postload-validate``), and the normalised YAML
is written to stdout or ``--dump FILE``. Invalid input never produces a dump, so
``cheeto puppet validate a.yaml b.yaml --merge ALL --dump merged.yaml`` can sit in a
pipeline or a pre-commit hook.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

from ..files import output_file_error
from ..puppet.merge import Forest, MergeStrategy, build_forests
from ..puppet.schema import (
    PuppetAccountMap,
    PuppetValidationError,
    postload_problems,
    validate_accounts,
)
from ..puppet.yamlio import load_file
from . import args as a
from .app import Context, command, group_help
from .output import esc

group_help("puppet", help="the legacy puppet.hpc account YAML")


def _plural(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"


def _fail(ctx: Context, lines: list[str]) -> PuppetValidationError:
    """List every problem (they are errors, so even ``--quiet`` shows them) and return
    the one-line error the runtime prints last."""
    if len(lines) > 1:
        ctx.out.console.print(f"{len(lines)} problems:")
        for line in lines:
            ctx.out.console.print(f"  {esc(line)}")
    return PuppetValidationError(lines)


def _render(results: list[tuple[Forest, PuppetAccountMap]]) -> str:
    """One forest: its YAML. Several: a YAML stream, one document per forest, each
    introduced by ``--- # <forest name>``."""
    if len(results) == 1:
        return results[0][1].dump()
    return "".join(f"--- # {forest.name}\n{accounts.dump()}" for forest, accounts in results)


def _write(path: Path, text: str) -> None:
    """Replace ``path`` atomically, so a reader never sees half a file."""
    tmp: str | None = None
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except OSError as exc:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
        raise output_file_error(path, exc) from None


@command("puppet", "validate", help="validate (and merge) puppet.hpc account YAML files")
def puppet_validate(args: argparse.Namespace) -> None:
    ctx = args.ctx
    loaded = [(name, load_file(name, missing_ok=False)) for name in args.files]
    forests = build_forests(loaded, MergeStrategy(args.merge))

    results: list[tuple[Forest, PuppetAccountMap]] = []
    errors: list[str] = []
    for forest in forests:
        accounts, problems = validate_accounts(forest.data, partial=args.partial)
        errors.extend(p.describe(forest) for p in problems)
        if accounts is not None:
            results.append((forest, accounts))
    if errors:
        raise _fail(ctx, errors)

    if args.postload_validate or args.strict:
        findings = [p.describe(forest) for forest, accounts in results
                    for p in postload_problems(accounts)]
        if findings and args.strict:
            raise _fail(ctx, findings)
        for finding in findings:
            ctx.out.warn(esc(finding))

    text = _render(results)
    if args.dump in (None, "-"):
        ctx.out.write_raw(text)
    else:
        _write(Path(args.dump), text)
        if args.echo and not ctx.out.quiet:
            ctx.out.text(text, end="")
    for forest, accounts in results:
        label = forest.name if forest.files == [forest.name] else \
            f"{forest.name} ({', '.join(forest.files)})"
        ctx.out.success(f"{esc(label)}: valid ({esc(_plural(len(accounts.user), 'user'))}, "
                        f"{esc(_plural(len(accounts.group), 'group'))}, "
                        f"{esc(_plural(len(accounts.share), 'share'))})")


@puppet_validate.args()
def _(parser: a.Parser) -> None:
    parser.add_argument("files", nargs="+", metavar="FILE", help="account YAML files")
    parser.add_argument("--merge", type=str.upper, default=MergeStrategy.NONE.value,
                        choices=[s.value for s in MergeStrategy],
                        help="ALL: merge every file into one; PREFIX: merge files sharing "
                             "the name before the first '.' (farm.yaml + farm.site.yaml); "
                             "NONE: each file alone (default)")
    parser.add_argument("--dump", metavar="FILE", default=None,
                        help="write the validated YAML to FILE instead of stdout "
                             "('-' is stdout)")
    parser.add_argument("--echo", action="store_true",
                        help="with --dump FILE, also show the YAML on stderr")
    parser.add_argument("--partial", action="store_true",
                        help="allow records with required fields missing (a site layer "
                             "checked on its own)")
    parser.add_argument("--postload-validate", action="store_true",
                        help="also check that sponsors are known users and that users' "
                             "groups exist (warnings unless --strict)")
    parser.add_argument("--strict", action="store_true",
                        help="post-load problems are errors: exit 2 and write nothing "
                             "(implies --postload-validate)")
