"""E-mail transports: SMTP (host, port, implicit TLS or STARTTLS, login) and HiPPO's
styled-notify endpoint, chosen by ``mail.transport``.

A transport sends one ``OutgoingEmail`` and raises ``MailError`` when it could not; the
caller (``operations.notify``) records the outcome and never lets a failed send abort
anything. smtplib runs in a worker thread so the event loop stays free.
"""

from __future__ import annotations

import asyncio
import smtplib
import ssl
from collections.abc import Sequence
from dataclasses import dataclass, field
from email.message import EmailMessage
from email.utils import formatdate, make_msgid
from typing import Protocol

from ..config import Config, HippoConfig, MailConfig, SMTPConfig
from ..errors import ConfigError, ExternalError


class MailError(ExternalError):
    """The transport could not hand the message over."""


@dataclass(frozen=True)
class OutgoingEmail:
    """A rendered message: plain text and HTML bodies, plus the HTML paragraphs HiPPO's
    styled notify wants."""

    to: tuple[str, ...]
    subject: str
    text: str
    html: str
    paragraphs: tuple[str, ...] = ()
    header: str | None = None
    cc: tuple[str, ...] = ()
    kind: str = "email"

    def __post_init__(self) -> None:
        if not self.to:
            raise ValueError("an e-mail needs at least one recipient")


class Transport(Protocol):
    name: str

    async def send(self, email: OutgoingEmail) -> None: ...


@dataclass
class SMTPTransport:
    config: SMTPConfig
    from_address: str
    reply_to: str | None = None
    name: str = field(default="smtp", init=False)

    def message(self, email: OutgoingEmail) -> EmailMessage:
        msg = EmailMessage()
        msg["From"] = self.from_address
        msg["To"] = ", ".join(email.to)
        if email.cc:
            msg["Cc"] = ", ".join(email.cc)
        if self.reply_to:
            msg["Reply-To"] = self.reply_to
        msg["Subject"] = email.subject
        msg["Date"] = formatdate(localtime=False)
        msg["Message-ID"] = make_msgid(domain=self.from_address.rsplit("@", 1)[-1])
        msg.set_content(email.text)
        msg.add_alternative(email.html, subtype="html")
        return msg

    def _tls_context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(
            cafile=str(self.config.ca_file) if self.config.ca_file else None)
        return context

    def _send_blocking(self, email: OutgoingEmail) -> None:
        cfg = self.config
        msg = self.message(email)
        recipients = [*email.to, *email.cc]
        try:
            if cfg.ssl:
                client: smtplib.SMTP = smtplib.SMTP_SSL(cfg.host, cfg.port,
                                                        timeout=cfg.timeout_seconds,
                                                        context=self._tls_context())
            else:
                client = smtplib.SMTP(cfg.host, cfg.port, timeout=cfg.timeout_seconds)
            with client:
                if cfg.starttls:
                    client.starttls(context=self._tls_context())
                if cfg.username and cfg.password is not None:
                    client.login(cfg.username, cfg.password.get_secret_value())
                refused = client.send_message(msg, from_addr=self.from_address,
                                              to_addrs=recipients)
        except (smtplib.SMTPException, OSError) as exc:
            raise MailError(f"SMTP {cfg.host}:{cfg.port}: {type(exc).__name__}: {exc}") from None
        if refused:
            raise MailError(f"SMTP {cfg.host}:{cfg.port} refused "
                            + ", ".join(f"{rcpt} ({code})" for rcpt, (code, _) in refused.items()))

    async def send(self, email: OutgoingEmail) -> None:
        await asyncio.to_thread(self._send_blocking, email)


@dataclass
class HippoNotifyTransport:
    """``POST /api/Notify/Styled``: HiPPO wraps the paragraphs in its own layout."""

    config: HippoConfig
    name: str = field(default="hippo", init=False)

    async def send(self, email: OutgoingEmail) -> None:
        from .hippo import HippoClient

        try:
            async with HippoClient(self.config) as client:
                await client.notify_styled(emails=email.to, cc_emails=email.cc,
                                           subject=email.subject, paragraphs=email.paragraphs,
                                           header=email.header)
        except ExternalError as exc:
            raise MailError(exc.message) from None


@dataclass
class DisabledTransport:
    """``mail.enabled: false``: nothing leaves; every e-mail is recorded as not sent."""

    name: str = field(default="disabled", init=False)

    async def send(self, email: OutgoingEmail) -> None:
        raise MailError("e-mail is disabled (mail.enabled: false)")


def transport_from_config(config: Config) -> Transport | None:
    """The configured transport; None when there is no ``mail`` section."""
    mail: MailConfig | None = config.mail
    if mail is None:
        return None
    if not mail.enabled:
        return DisabledTransport()
    if mail.transport == "hippo":
        if config.hippo is None:
            raise ConfigError("mail.transport is hippo but the config has no hippo section")
        return HippoNotifyTransport(config.hippo)
    if mail.from_address is None:
        raise ConfigError("mail: set from_address (or centre.helpdesk) to send over SMTP")
    return SMTPTransport(mail.smtp, mail.from_address, mail.reply_to)


def addresses(values: Sequence[str | None]) -> tuple[str, ...]:
    """Non-empty, de-duplicated (case-insensitively), in order."""
    seen: dict[str, str] = {}
    for value in values:
        if value and value.strip():
            seen.setdefault(value.strip().lower(), value.strip())
    return tuple(seen.values())
