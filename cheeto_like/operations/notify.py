"""E-mail sends, each recorded in History, and the operator-alert digest.

``SendUserEmail`` is the single choke point: it sends (in ``prepare``, before any store
session opens) and records ``{email_type, subject, header, to, cc, body, transport,
sent, error, context}``. A send that fails is recorded with ``sent: false`` and the
reason; it never raises. ``Notifier.send`` adds the last guarantee: whatever goes wrong
(rendering, the transport, even recording), the operation that triggered the e-mail
carries on.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from pydantic import ConfigDict, Field
from pymongo.asynchronous.client_session import AsyncClientSession

from ..adapters.mail import OutgoingEmail, Transport, transport_from_config
from ..config import AlertsConfig, Config
from ..models import SyncRun
from ..models.fields import utcnow
from ..notifications import DEFAULT_TEMPLATES, Links, Templates, render
from ..queries.alerts import AlertDigest, build_digest, last_digest_run
from ..store import Store
from .base import OpArgs, Operation

log = logging.getLogger(__name__)

ALERT_TARGET = "alerts"


class SendUserEmail(Operation):
    """Send one rendered e-mail and record the outcome (never raises for a failed send)."""

    op_name = "send_user_email"
    transactional = False

    class Args(OpArgs):
        model_config = ConfigDict(extra="forbid", frozen=True, arbitrary_types_allowed=True)

        email: OutgoingEmail
        transport: Any = None  # a Transport; None records the e-mail as not sent
        context: dict[str, str] = Field(default_factory=dict)
        missing_transport: str = "no mail transport is configured (mail: section)"

    @classmethod
    async def prepare(cls, args: OpArgs) -> tuple[bool, str | None, str]:
        assert isinstance(args, SendUserEmail.Args)
        transport: Transport | None = args.transport
        if transport is None:
            return False, args.missing_transport, "none"
        try:
            await transport.send(args.email)
        except Exception as exc:  # any transport failure is recorded, never raised
            log.warning("e-mail %r to %s not sent: %s", args.email.subject,
                        ", ".join(args.email.to), exc)
            return False, f"{type(exc).__name__}: {exc}", transport.name
        return True, None, transport.name

    async def execute(self, session: AsyncClientSession) -> bool:
        sent, _, _ = self.prepared
        return sent

    def describe(self) -> dict[str, Any]:
        email: OutgoingEmail = self.args.email  # type: ignore[attr-defined]
        sent, error, transport = self.prepared
        return {"email_type": email.kind, "subject": email.subject, "header": email.header,
                "to": list(email.to), "cc": list(email.cc), "body": email.text,
                "transport": transport, "sent": sent, "error": error,
                "context": self.args.context}  # type: ignore[attr-defined]


@dataclass
class Notifier:
    """Renders and sends e-mails for one run; ``send`` returns whether it went out."""

    store: Store
    author: str | None
    transport: Transport | None
    links: Links = field(default_factory=Links)
    templates: Templates = DEFAULT_TEMPLATES
    sent: int = 0
    failed: int = 0

    async def send(self, kind: str, to: Sequence[str | None], *,
                   cc: Sequence[str | None] = (), context: dict[str, str] | None = None,
                   **variables: Any) -> bool:
        try:
            email = render(kind, to, cc=cc, links=self.links, templates=self.templates,
                           **variables)
        except Exception as exc:  # a template or recipient problem: log, never abort
            log.error("could not render the %s e-mail (%s): %s: %s", kind,
                      ", ".join(str(t) for t in to), type(exc).__name__, exc)
            self.failed += 1
            return False
        try:
            ok = bool(await SendUserEmail.run(self.store, self.author, email=email,
                                              transport=self.transport,
                                              context=context or {}))
        except Exception as exc:  # recording failed (store down): the send stands
            log.error("could not record the %s e-mail to %s: %s", kind, ", ".join(email.to),
                      exc)
            ok = False
        if ok:
            self.sent += 1
        else:
            self.failed += 1
        return ok


def notifier_from_config(store: Store, author: str | None, config: Config) -> Notifier:
    """A notifier using ``mail.transport``, the centre's words (``mail.centre``) and the
    site's templates (``mail.templates_dir``: a broken one is a ``ConfigError`` here);
    without a ``mail`` section every e-mail is recorded as not sent (so the History still
    shows who should have been told)."""
    mail = config.mail
    if mail is None:
        return Notifier(store, author, None)
    centre = mail.centre
    links = Links(support_address=centre.helpdesk, docs_url=centre.docs_url,
                  centre=centre.name, centre_short=centre.short_name)
    templates = Templates.load(mail.templates_dir)
    return Notifier(store, author, transport_from_config(config), links, templates)


# -- operator alerts -----------------------------------------------------------------------


@dataclass
class AlertResult:
    digest: AlertDigest
    sent: bool
    recorded: bool
    error: str | None = None


async def send_alert_digest(store: Store, author: str | None, config: Config, *,
                            now: datetime | None = None, dry_run: bool = False,
                            notifier: Notifier | None = None) -> AlertResult:
    """Mail the operators what went wrong since the last digest: failed and refused
    (guard-tripped) sync runs, failed daemon tasks, and runs or leases held longer than
    ``alerts.stuck_after_minutes``. Nothing new: nothing sent, nothing recorded.

    Each digest sent is recorded as a ``SyncRun`` (target ``alerts``); the next digest
    starts where the last *sent* one ended, so a digest that could not be sent is
    repeated, and a stuck run is reported once, not every time.
    """
    alerts: AlertsConfig | None = config.alerts
    if alerts is None:
        from ..errors import ConfigError

        raise ConfigError("operator alerts need the alerts section (alerts.to)")
    now = now or utcnow()
    last = await last_digest_run(ALERT_TARGET)
    since = now - timedelta(hours=alerts.lookback_hours)
    reported_stuck: set[str] = set()
    escalated: set[str] = set()
    if last is not None:
        since = max(since, last.extra.get("until", last.started_at))
        reported_stuck = set(last.extra.get("stuck_keys", []))
        escalated = set(last.extra.get("escalation_keys", []))
    digest = await build_digest(store, since=since, now=now,
                                stuck_after=timedelta(minutes=alerts.stuck_after_minutes),
                                already_stuck=reported_stuck, already_escalated=escalated)
    if dry_run or not digest.total:
        return AlertResult(digest, sent=False, recorded=False)
    notifier = notifier or notifier_from_config(store, author, config)
    sent = await notifier.send("operator_alert", alerts.to, context={"alert": "digest"},
                               subject_prefix=alerts.subject_prefix,
                               stuck_after_minutes=alerts.stuck_after_minutes,
                               **digest.template_vars())
    if sent:
        run = SyncRun(target=ALERT_TARGET, site="all", author=author, apply=True,
                      started_at=now, finished_at=utcnow(), status="ok",
                      counts=digest.counts(),
                      extra={"until": now, "to": list(alerts.to),
                             "stuck_keys": sorted(digest.stuck_keys),
                             "escalation_keys": sorted(digest.escalation_keys)})
        async with store.exclusive():
            await run.insert()
    return AlertResult(digest, sent=sent, recorded=sent,
                       error=None if sent else "the digest could not be sent (see History)")
