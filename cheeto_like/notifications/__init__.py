"""E-mail templates: Markdown with Jinja2, rendered to plain text and HTML.

Each kind names a template in ``templates/``, a subject and (for HiPPO's styled layout) a
header. Values are escaped for Markdown before the HTML rendering (a group called
``lab_x_y`` must not turn italic, and nobody's full name can inject HTML: raw HTML is off),
and used as they are in the plain-text part. Every top-level Markdown block becomes one
HTML paragraph for HiPPO's ``paragraphs`` list.

The reference's template bug is fixed here: the account e-mails list real Slurm
accounts with their partitions and QOS names, the real home quota, and the user's real
group storages (``queries.hippo.account_summary``), never a hard-coded 20GB.
"""

from __future__ import annotations

import html
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader, StrictUndefined
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


def _environment(escape: bool) -> Environment:
    env = Environment(loader=FileSystemLoader(TEMPLATES), undefined=StrictUndefined,
                      trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True,
                      autoescape=False, finalize=_md_escape if escape else None)
    env.filters["codeblock"] = _codeblock
    return env


_MARKDOWN_ENV = _environment(escape=True)
_TEXT_ENV = _environment(escape=False)
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
    subject: Callable[[Mapping[str, Any]], str]
    header: Callable[[Mapping[str, Any]], str]


def _site(ctx: Mapping[str, Any]) -> str:
    return str(ctx["sitename"]).capitalize()


KINDS: dict[str, Kind] = {
    "account_ready": Kind(
        "account-ready.md.j2", lambda c: f"UCD HPC: Account Ready on {_site(c)}",
        lambda c: f"Your account on {html.escape(_site(c))} is ready"),
    "new_membership": Kind(
        "new-membership.md.j2", lambda c: f"UCD HPC: New Group Membership on {_site(c)}",
        lambda c: f"New group membership on {html.escape(_site(c))}"),
    "key_updated": Kind(
        "key-updated.md.j2", lambda c: "UCD HPC: SSH Key Updated",
        lambda c: f"SSH key updated on {html.escape(_site(c))}"),
    "removed_from_group": Kind(
        "removed-from-group.md.j2", lambda c: "UCD HPC: Removed from Group",
        lambda c: f"Removed from <strong>{html.escape(str(c['group']))}</strong>"),
    "new_sponsor": Kind(
        "new-sponsor.md.j2", lambda c: f"UCD HPC: New Sponsored Group on {_site(c)}",
        lambda c: f"New sponsored group <strong>{html.escape(str(c['group']))}</strong>"),
    "offboarding_warning": Kind(
        "offboarding-warning.md.j2", lambda c: "UCD HPC: Account Scheduled for Deactivation",
        lambda c: "Your HPC account is scheduled for deactivation"),
    "account_deactivated": Kind(
        "account-deactivated.md.j2", lambda c: "UCD HPC: Account Deactivated",
        lambda c: "Your HPC account has been deactivated"),
    "account_restored": Kind(
        "account-restored.md.j2", lambda c: "UCD HPC: Account Restored",
        lambda c: "Your HPC account has been restored"),
    "quota_threshold": Kind(
        "quota-threshold.md.j2",
        lambda c: f"UCD HPC: {c['subject']} at {c['threshold']}% of its {c['resource']} quota"
                  f" on {_site(c)}",
        lambda c: f"{html.escape(str(c['resource']))} quota at {c['threshold']}%"),
    "request_update": Kind(
        "request-update.md.j2",
        lambda c: f"UCD HPC: request {c['number']} ({c['request_kind']}) {c['event_words']}",
        lambda c: f"Request {c['number']} {html.escape(str(c['event_words']))}"),
    "operator_alert": Kind(
        "operator-alert.md.j2",
        lambda c: f"{c['subject_prefix']} {c['total']} problem(s) need attention".strip(),
        lambda c: "cheeto operator alert"),
    "audit_digest": Kind(
        "audit-digest.md.j2",
        lambda c: f"{c['subject_prefix']} {c['total']} finding(s), {c['new']} new, "
                  f"{c['resolved']} resolved".strip(),
        lambda c: "cheeto access audit"),
}


@dataclass(frozen=True)
class Links:
    """What the templates point people at (from ``mail:``)."""

    support_address: str = "hpc-help@ucdavis.edu"
    docs_url: str = "https://docs.hpc.ucdavis.edu"


def render(kind: str, to: Sequence[str | None], *, cc: Sequence[str | None] = (),
           links: Links | None = None, **context: Any) -> OutgoingEmail:
    """Render ``kind`` for ``to``; ``ValueError`` without a recipient, ``KeyError`` for an
    unknown kind, jinja2's ``UndefinedError`` for a missing variable."""
    spec = KINDS[kind]
    recipients = addresses(to)
    if not recipients:
        raise ValueError(f"a {kind} e-mail needs at least one recipient")
    links = links or Links()
    ctx = {"support_address": links.support_address, "docs_url": links.docs_url, **context}
    markdown = _collapse(_MARKDOWN_ENV.get_template(spec.template).render(ctx))
    text = _collapse(_plain(_TEXT_ENV.get_template(spec.template).render(ctx)))
    paragraphs = tuple(_blocks(markdown))
    return OutgoingEmail(to=recipients, cc=tuple(c for c in addresses(cc)
                                                 if c.lower() not in {r.lower()
                                                                      for r in recipients}),
                         subject=spec.subject(ctx), header=spec.header(ctx), text=text,
                         html="\n".join(paragraphs), paragraphs=paragraphs, kind=kind)
