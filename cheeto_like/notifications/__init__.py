"""E-mail templates: Markdown with Jinja2, rendered to plain text and HTML.

Each kind names a template in ``templates/``, a subject (a Jinja template too) and (for
HiPPO's styled layout) a header. Values are escaped for Markdown before the HTML rendering
(a group called ``lab_x_y`` must not turn italic, and nobody's full name can inject HTML:
raw HTML is off), and used as they are in the plain-text part. Every top-level Markdown
block becomes one HTML paragraph for HiPPO's ``paragraphs`` list.

The reference's template bug is fixed here: the account e-mails list real Slurm
accounts with their partitions and QOS names, the real home quota, and the user's real
group storages (``queries.hippo.account_summary``), never a hard-coded 20GB.

Every template sees ``centre`` and ``centre_short`` (``mail.centre.name`` and
``short_name``), ``support_address`` and ``docs_url`` (``centre.helpdesk`` and
``centre.docs_url``; either may be None). A site replaces any template or subject
through ``mail.templates_dir`` (``Templates.load``).
"""

from __future__ import annotations

import html
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jinja2 import (
    BaseLoader,
    ChoiceLoader,
    Environment,
    FileSystemLoader,
    StrictUndefined,
    Template,
    TemplateSyntaxError,
)
from markdown_it import MarkdownIt

from ..adapters.mail import OutgoingEmail, addresses

TEMPLATES = Path(__file__).parent / "templates"
MD_SPECIAL = re.compile(r"([\\`*_{}\[\]()#+\-.!<>|~])")


class Raw(str):
    """Template output that is already Markdown (not escaped)."""


def _md_escape(value: Any) -> Any:
    if isinstance(value, Raw) or not isinstance(value, str):
        return value
    return MD_SPECIAL.sub(r"\\\1", value)


def _codeblock(value: str) -> Raw:
    """An indented code block (reads well as plain text; no escaping inside)."""
    return Raw("\n".join(f"    {line}" for line in str(value).splitlines()))


def _environment(escape: bool, override: Path | None = None) -> Environment:
    loader: BaseLoader = FileSystemLoader(TEMPLATES)
    if override is not None:
        loader = ChoiceLoader([FileSystemLoader(override), loader])
    env = Environment(loader=loader, undefined=StrictUndefined,
                      trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True,
                      autoescape=False, finalize=_md_escape if escape else None)
    env.filters["codeblock"] = _codeblock
    return env


_MD = MarkdownIt("commonmark", {"html": False})


def _collapse(text: str) -> str:
    """At most one blank line in a row, no leading or trailing blank lines."""
    text = re.sub(r"[ \t]+\n", "\n", text)
    return re.sub(r"\n{3,}", "\n\n", text).strip() + "\n"


_LINK = re.compile(r"\[([^\]]+)\]\(([^)\s]+)\)")
_STRONG = re.compile(r"\*\*([^*]+)\*\*")


def _plain(markdown: str) -> str:
    """The plain-text part: Markdown without emphasis markers and with readable links."""

    def link(m: re.Match[str]) -> str:
        text, url = m.group(1), m.group(2)
        if url.startswith("mailto:") or url == text or url.rstrip("/") == text.rstrip("/"):
            return text
        return f"{text} <{url}>"

    return _LINK.sub(link, _STRONG.sub(r"\1", markdown))


def _blocks(markdown: str) -> list[str]:
    """One HTML string per top-level Markdown block."""
    tokens = _MD.parse(markdown)
    out: list[str] = []
    group: list[Any] = []
    depth = 0
    for token in tokens:
        group.append(token)
        depth += token.nesting
        if depth == 0:
            out.append(_MD.renderer.render(group, _MD.options, {}).strip())
            group = []
    return [b for b in out if b]


@dataclass(frozen=True)
class Kind:
    template: str
    subject: str  # a Jinja template over the same variables (plain text, one line)
    header: Callable[[Mapping[str, Any]], str]


def _site(ctx: Mapping[str, Any]) -> str:
    return str(ctx["sitename"]).capitalize()


_ON_SITE = " on {{ sitename | capitalize }}"
KINDS: dict[str, Kind] = {
    "account_ready": Kind(
        "account-ready.md.j2", "{{ centre_short }}: Account Ready" + _ON_SITE,
        lambda c: f"Your account on {html.escape(_site(c))} is ready"),
    "new_membership": Kind(
        "new-membership.md.j2", "{{ centre_short }}: New Group Membership" + _ON_SITE,
        lambda c: f"New group membership on {html.escape(_site(c))}"),
    "key_updated": Kind(
        "key-updated.md.j2", "{{ centre_short }}: SSH Key Updated",
        lambda c: f"SSH key updated on {html.escape(_site(c))}"),
    "removed_from_group": Kind(
        "removed-from-group.md.j2", "{{ centre_short }}: Removed from Group",
        lambda c: f"Removed from <strong>{html.escape(str(c['group']))}</strong>"),
    "new_sponsor": Kind(
        "new-sponsor.md.j2", "{{ centre_short }}: New Sponsored Group" + _ON_SITE,
        lambda c: f"New sponsored group <strong>{html.escape(str(c['group']))}</strong>"),
    "offboarding_warning": Kind(
        "offboarding-warning.md.j2", "{{ centre_short }}: Account Scheduled for Deactivation",
        lambda c: f"Your {html.escape(str(c['centre']))} account is scheduled for "
                  "deactivation"),
    "account_deactivated": Kind(
        "account-deactivated.md.j2", "{{ centre_short }}: Account Deactivated",
        lambda c: f"Your {html.escape(str(c['centre']))} account has been deactivated"),
    "account_restored": Kind(
        "account-restored.md.j2", "{{ centre_short }}: Account Restored",
        lambda c: f"Your {html.escape(str(c['centre']))} account has been restored"),
    "quota_threshold": Kind(
        "quota-threshold.md.j2",
        "{{ centre_short }}: {{ subject }} at {{ threshold }}% of its {{ resource }} quota"
        + _ON_SITE,
        lambda c: f"{html.escape(str(c['resource']))} quota at {c['threshold']}%"),
    "request_update": Kind(
        "request-update.md.j2",
        "{{ centre_short }}: request {{ number }} ({{ request_kind }}) {{ event_words }}",
        lambda c: f"Request {c['number']} {html.escape(str(c['event_words']))}"),
    "operator_alert": Kind(
        "operator-alert.md.j2",
        "{{ subject_prefix }} {{ total }} problem(s) need attention",
        lambda c: "cheeto operator alert"),
    "audit_digest": Kind(
        "audit-digest.md.j2",
        "{{ subject_prefix }} {{ total }} finding(s), {{ new }} new, {{ resolved }} resolved",
        lambda c: "cheeto access audit"),
}
SUBJECTS_FILE = "subjects.yaml"


@dataclass(frozen=True)
class Links:
    """Who the notices speak for and what they point people at (``mail.centre``)."""

    support_address: str | None = None
    docs_url: str | None = None
    centre: str = "HPC"
    centre_short: str = "HPC"


class Templates:
    """The notice templates: the built-in ones, each replaced by a file of the same name
    in ``override`` (a site's ``mail.templates_dir``), and subjects replaced by the
    override's ``subjects.yaml`` (kind: Jinja template). ``load`` compiles every override
    up front: a missing directory, an unknown file or kind, bad YAML or a template that
    does not compile is one ``ConfigError`` naming it."""

    def __init__(self, override: Path | None = None) -> None:
        self.override = override
        self.markdown = _environment(escape=True, override=override)
        self.text = _environment(escape=False, override=override)
        self.subjects: dict[str, Template] = {
            kind: self.text.from_string(spec.subject) for kind, spec in KINDS.items()}

    @classmethod
    def load(cls, override: Path | None) -> Templates:
        if override is None:
            return DEFAULT_TEMPLATES
        from ..errors import ConfigError

        where = f"mail.templates_dir {override}"
        if not override.is_dir():
            raise ConfigError(f"{where}: not a directory")
        self = cls(override)
        known = {p.name for p in TEMPLATES.iterdir()}
        for path in sorted(override.iterdir()):
            if path.name == SUBJECTS_FILE or path.name.startswith("."):
                continue
            if path.name not in known:
                raise ConfigError(f"{where}: {path.name} replaces no built-in template "
                                  f"(known: {', '.join(sorted(known))}, {SUBJECTS_FILE})")
            try:
                self.markdown.get_template(path.name)
            except TemplateSyntaxError as exc:
                raise ConfigError(f"{where}: {path.name} line {exc.lineno}: "
                                  f"{exc.message}") from None
            except (OSError, UnicodeDecodeError) as exc:
                raise ConfigError(f"{where}: {path.name}: {exc}") from None
        subjects = override / SUBJECTS_FILE
        if subjects.exists():
            self.subjects.update(self._load_subjects(subjects, where))
        return self

    def _load_subjects(self, path: Path, where: str) -> dict[str, Template]:
        import yaml

        from ..errors import ConfigError

        try:
            data = yaml.safe_load(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
            raise ConfigError(f"{where}: {SUBJECTS_FILE}: {exc}".replace("\n", " ")) \
                from None
        if data is None:
            return {}
        if not isinstance(data, dict):
            raise ConfigError(f"{where}: {SUBJECTS_FILE} must map kinds to subjects")
        out: dict[str, Template] = {}
        for kind, text in data.items():
            if kind not in KINDS:
                raise ConfigError(f"{where}: {SUBJECTS_FILE}: unknown kind {kind!r} "
                                  f"(known: {', '.join(sorted(KINDS))})")
            if not isinstance(text, str) or not text.strip():
                raise ConfigError(f"{where}: {SUBJECTS_FILE}: {kind}: a subject is text")
            try:
                out[kind] = self.text.from_string(text)
            except TemplateSyntaxError as exc:
                raise ConfigError(f"{where}: {SUBJECTS_FILE}: {kind}: {exc.message}") \
                    from None
        return out

    def subject(self, kind: str, ctx: Mapping[str, Any]) -> str:
        return " ".join(self.subjects[kind].render(ctx).split())


DEFAULT_TEMPLATES = Templates()


def render(kind: str, to: Sequence[str | None], *, cc: Sequence[str | None] = (),
           links: Links | None = None, templates: Templates | None = None,
           **context: Any) -> OutgoingEmail:
    """Render ``kind`` for ``to``; ``ValueError`` without a recipient, ``KeyError`` for an
    unknown kind, jinja2's ``UndefinedError`` for a missing variable."""
    spec = KINDS[kind]
    templates = templates or DEFAULT_TEMPLATES
    recipients = addresses(to)
    if not recipients:
        raise ValueError(f"a {kind} e-mail needs at least one recipient")
    links = links or Links()
    ctx = {"support_address": links.support_address, "docs_url": links.docs_url,
           "centre": links.centre, "centre_short": links.centre_short, **context}
    markdown = _collapse(templates.markdown.get_template(spec.template).render(ctx))
    text = _collapse(_plain(templates.text.get_template(spec.template).render(ctx)))
    paragraphs = tuple(_blocks(markdown))
    return OutgoingEmail(to=recipients, cc=tuple(c for c in addresses(cc)
                                                 if c.lower() not in {r.lower()
                                                                      for r in recipients}),
                         subject=templates.subject(kind, ctx), header=spec.header(ctx),
                         text=text, html="\n".join(paragraphs), paragraphs=paragraphs,
                         kind=kind)
