"""Render cloud-init NoCloud seed directories from a site's Jinja2 host templates.

Layout (the reference's, kept so existing template trees work unchanged)::

    <parent>/config.yaml              shared settings
    <parent>/partitions/…             templates shared across sites
    <parent>/<site>/config.yaml       the site's settings (merged over the parent's)
    <parent>/<site>/hosts/<host>.j2   one template per host

Each host becomes ``<out>/<host>/`` with an empty ``meta-data`` and ``vendor-data`` and a
rendered ``user-data``. Template variables are every merged config key plus
``hostname`` and ``ssh_authorized_keys``.

Stricter than the reference, on purpose: an undefined variable is an error naming the
template, line and variable (a typo would otherwise render an empty string into a
machine's first boot), every host is rendered before anything is written (one broken
template leaves the output untouched), and a missing site directory, keys file or
template is one clear line instead of a traceback.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

import jinja2

from .errors import InvalidInput
from .files import output_file_error
from .models.fields import FQDN_RE
from .puppet.merge import deep_merge
from .puppet.yamlio import load_file

DEFAULT_AUTHORIZED_KEYS = Path("/etc/ssh/users/root.pub")
DEFAULT_OUTPUT_DIR = Path("nocloud-net")
DEFAULT_CONFIG_BASENAME = "config.yaml"
RESERVED_KEYS = ("hostname", "ssh_authorized_keys")
FILE_MODE = 0o644


@dataclass(frozen=True)
class RenderedHost:
    hostname: str
    template: str  # relative to the site directory, e.g. hosts/node1.j2
    user_data: str


def read_authorized_keys(path: Path) -> list[str]:
    """The keys in an authorized_keys-style file: every line that is not blank or a
    ``#`` comment, stripped."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise InvalidInput(f"authorized keys file {path} does not exist") from None
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else "not a text file"
        raise InvalidInput(f"cannot read authorized keys file {path}: {reason}") from None
    lines = (line.strip() for line in text.splitlines())
    return [line for line in lines if line and not line.startswith("#")]


def _load_mapping(path: Path) -> dict[str, Any]:
    data = load_file(path)  # a missing config layer is empty
    if not isinstance(data, Mapping):
        raise InvalidInput(f"{path}: the top level must be a mapping")
    return dict(data)


def load_config(site_dir: Path, basename: str = DEFAULT_CONFIG_BASENAME) -> dict[str, Any]:
    """``<parent>/<basename>`` with ``<site>/<basename>`` merged over it (additively:
    the site's lists extend the parent's)."""
    merged = deep_merge(_load_mapping(site_dir.parent / basename),
                        _load_mapping(site_dir / basename))
    for key in RESERVED_KEYS:
        if key in merged:
            raise InvalidInput(f"config key {key!r} is reserved (the renderer sets it per host)")
    return merged


def search_path(site_dir: Path) -> list[Path]:
    """Where templates are looked up: the site, its parent, the parent's ``partitions/``."""
    return [site_dir, site_dir.parent, site_dir.parent / "partitions"]


def environment(site_dir: Path) -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader([str(p) for p in search_path(site_dir)]),
        trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True,
        undefined=jinja2.StrictUndefined,
        autoescape=False,  # YAML, not HTML
    )


def _shown(filename: str, site_dir: Path) -> str:
    """A template file as the admin knows it: relative to the site's parent directory."""
    for base in (site_dir.parent.absolute(), site_dir.parent.resolve()):
        try:
            return str(Path(os.path.abspath(filename)).relative_to(base))
        except ValueError:
            continue
    return filename


def _template_frame(tb: TracebackType | None, site_dir: Path) -> tuple[str, int] | None:
    """The innermost template frame of a render error: jinja2 rewrites tracebacks so
    that template code reports the template's file name and line."""
    roots = {str(p.absolute()) for p in search_path(site_dir)}
    roots |= {str(p.resolve()) for p in search_path(site_dir)}
    found = None
    while tb is not None:
        filename = os.path.abspath(tb.tb_frame.f_code.co_filename)
        if any(filename.startswith(root + os.sep) for root in roots):
            found = (_shown(filename, site_dir), tb.tb_lineno)
        tb = tb.tb_next
    return found


def _describe(exc: jinja2.TemplateError, template: Path, site_dir: Path) -> str:
    """One line: which template, which line, what (and which host was being rendered
    when the problem is in an included template)."""
    host = _shown(str(template.absolute()), site_dir)
    if isinstance(exc, jinja2.TemplateSyntaxError):
        name = _shown(exc.filename, site_dir) if exc.filename else exc.name or host
        via = "" if name == host else f" (rendering {host})"
        return f"template {name} line {exc.lineno}{via}: {exc.message}"
    if isinstance(exc, jinja2.TemplateNotFound):
        names = ", ".join(map(str, exc.templates)) \
            if isinstance(exc, jinja2.TemplatesNotFound) else str(exc.name)
        where = ", ".join(str(p) for p in search_path(site_dir))
        return f"template {host}: {names} not found (searched {where})"
    frame = _template_frame(exc.__traceback__, site_dir)
    if frame is None:
        return f"template {host}: {exc}"
    via = "" if frame[0] == host else f" (rendering {host})"
    return f"template {frame[0]} line {frame[1]}{via}: {exc}"


def render_site(site_dir: Path, *, authorized_keys: Path = DEFAULT_AUTHORIZED_KEYS,
                config_basename: str = DEFAULT_CONFIG_BASENAME) -> list[RenderedHost]:
    """Render every ``hosts/*.j2`` of ``site_dir`` in memory (nothing is written)."""
    site_dir = Path(site_dir)
    if not site_dir.is_dir():
        raise InvalidInput(f"site directory {site_dir} does not exist")
    templates = sorted((site_dir / "hosts").glob("*.j2"))
    if not templates:
        raise InvalidInput(f"no host templates in {site_dir / 'hosts'} (expected *.j2 files)")
    keys = read_authorized_keys(Path(authorized_keys))
    config = load_config(site_dir, config_basename)
    env = environment(site_dir)

    rendered = []
    for path in templates:
        hostname = path.name.removesuffix(".j2")
        name = f"hosts/{path.name}"
        if not FQDN_RE.fullmatch(hostname):
            raise InvalidInput(f"{site_dir / name}: {hostname!r} is not a valid host name")
        try:
            text = env.get_template(name).render(
                {**config, "hostname": hostname, "ssh_authorized_keys": keys})
        except jinja2.TemplateError as exc:
            raise InvalidInput(_describe(exc, path, site_dir)) from None
        rendered.append(RenderedHost(hostname=hostname, template=name, user_data=text))
    return rendered


def _write(path: Path, text: str) -> None:
    path.write_text(text)
    path.chmod(FILE_MODE)


def write_hosts(hosts: Sequence[RenderedHost], output_dir: Path) -> list[Path]:
    """Write each host's seed directory under ``output_dir`` (created if missing),
    replacing the three files of a host rendered before."""
    output_dir = Path(output_dir)
    written = []
    try:
        output_dir.mkdir(parents=True, exist_ok=True)
        for host in hosts:
            target = output_dir / host.hostname
            target.mkdir(exist_ok=True)
            _write(target / "meta-data", "")
            _write(target / "vendor-data", "")
            _write(target / "user-data", host.user_data)
            written.append(target)
    except OSError as exc:
        raise output_file_error(exc.filename or output_dir, exc) from None
    return written


def render(site_dir: Path, *, authorized_keys: Path = DEFAULT_AUTHORIZED_KEYS,
           output_dir: Path = DEFAULT_OUTPUT_DIR,
           config_basename: str = DEFAULT_CONFIG_BASENAME) -> list[RenderedHost]:
    """Render every host of the site, then write them all to ``output_dir``."""
    hosts = render_site(site_dir, authorized_keys=authorized_keys,
                        config_basename=config_basename)
    write_hosts(hosts, output_dir)
    return hosts
