"""``cheeto config import-reference FILE``: a cheeto v2 config, in this project's format.

The translated YAML goes to stdout (or ``-o FILE``, mode 0600: it holds the passwords
and API keys of the original); what was left out or changed is listed on stderr and as
comments at the top of the output, so nothing disappears unnoticed.
"""

from __future__ import annotations

import argparse
import io
from pathlib import Path

from ruamel.yaml import YAML, YAMLError

from ..errors import AlreadyExists, InvalidInput
from ..files import read_small_text, write_atomically
from . import args as a
from .app import command
from .output import esc

MAX_BYTES = 1 << 20


@command("config", "import-reference", help="translate a cheeto v2 (reference) config file "
                                              "into this project's format")
def config_import_reference(args: argparse.Namespace) -> int:
    from ..config import load_config
    from ..migrate.reference_config import translate

    ctx = args.ctx
    text = read_small_text(args.file, limit=MAX_BYTES, what="reference config")
    try:
        reference = YAML(typ="safe").load(text)
    except YAMLError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else "invalid YAML"
        raise InvalidInput(f"{args.file}: not YAML ({first})") from None
    if not isinstance(reference, dict):
        raise InvalidInput(f"{args.file}: expected a mapping of sections at the top")
    result = translate(reference)
    buffer = io.StringIO()
    yaml = YAML(typ="safe")
    yaml.default_flow_style = False
    yaml.dump(result.data, buffer)
    header = ["# translated from a cheeto v2 config by `cheeto config import-reference`"]
    header += [f"# left out: {line}" for line in result.dropped]
    header += [f"# changed: {line}" for line in result.notes]
    output = "\n".join(header) + "\n" + buffer.getvalue()
    for line in result.dropped:
        ctx.out.warn(f"left out {esc(line)}")
    for line in result.notes:
        ctx.out.info(f"changed: {esc(line)}")
    if args.output:
        target = Path(args.output).expanduser()
        if target.exists() and not args.force:
            raise AlreadyExists(f"{target} already exists (use --force to overwrite)")
        write_atomically(target, output, mode=0o600)
        load_config(target)  # the result loads (a failure here is a bug worth one line)
        ctx.out.success(f"wrote {esc(target)} ({len(result.dropped)} key(s) left out)")
    else:
        args._cheeto_stdout.write(output)
    return 0


@config_import_reference.args()
def _(parser: a.Parser) -> None:
    parser.add_argument("file", metavar="FILE", help="the reference's config.yaml")
    parser.add_argument("-o", "--output", metavar="FILE",
                        help="write here (mode 0600) instead of standard output")
    a.force(parser, help="overwrite an existing output file")
