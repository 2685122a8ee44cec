"""The ``mail``, ``alerts`` and ``audit`` sections: how e-mail leaves, and who gets the
operator and audit digests."""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import AfterValidator, Field, SecretStr, model_validator

from .base import Block, UserPath


def _address(value: str) -> str:
    value = value.strip()
    if not re.fullmatch(r"[^@\s<>]+@[^@\s<>]+\.[^@\s<>]+", value):
        raise ValueError(f"{value!r} is not an e-mail address")
    return value


class SMTPConfig(Block):
    """An SMTP relay. ``ssl`` is implicit TLS (port 465); ``starttls`` upgrades a plain
    connection. ``username``/``password`` log in (only over TLS unless ``allow_plain_auth``)."""

    host: str = "localhost"  # SMTP relay host
    # SMTP relay port (465 with ssl, 587 with starttls)
    port: int = Field(default=25, ge=1, le=65535)
    starttls: bool = False  # upgrade the plain connection with STARTTLS
    ssl: bool = False  # implicit TLS from the start (port 465)
    username: str | None = None  # SMTP login user (null: no login)
    password: SecretStr | None = None  # SMTP login password
    allow_plain_auth: bool = False  # allow logging in over a connection without TLS
    timeout_seconds: float = Field(default=30.0, gt=0)  # seconds to wait for the relay
    ca_file: UserPath | None = None  # CA bundle (PEM) to verify the relay's certificate

    @model_validator(mode="after")
    def _consistent(self) -> SMTPConfig:
        if self.ssl and self.starttls:
            raise ValueError("choose ssl (implicit TLS) or starttls, not both")
        if (self.username is None) != (self.password is None):
            raise ValueError("username and password go together")
        if self.username and not (self.ssl or self.starttls or self.allow_plain_auth):
            raise ValueError("SMTP login without ssl or starttls would send the password in "
                             "clear; enable one (or allow_plain_auth for a local relay)")
        return self


class CentreConfig(Block):
    """Who the notices speak for: ``name`` in bodies, ``short_name`` before every subject
    (``HPC: Account Ready on Farm``), the ``helpdesk`` address people are told to write
    to, and the ``docs_url`` they are pointed at. Unset: neutral words, no links."""

    name: str = Field(default="HPC", min_length=1)
    short_name: str = Field(default="HPC", min_length=1)
    helpdesk: Annotated[str, AfterValidator(_address)] | None = None
    docs_url: str | None = None  # documentation URL notices point people at


class MailConfig(Block):
    """Where e-mail goes: ``transport: smtp`` (the ``smtp`` block) or ``hippo`` (HiPPO's
    notify endpoint, using the ``hippo`` section). ``enabled: false`` records every
    e-mail in History as not sent, without sending. ``from_address`` defaults to
    ``centre.helpdesk``. ``templates_dir`` holds the site's own notice templates (a file
    named like a built-in one replaces it; ``subjects.yaml`` replaces subjects)."""

    enabled: bool = True
    # smtp: the smtp block's relay; hippo: HiPPO sends it
    transport: Literal["smtp", "hippo"] = "smtp"
    from_address: Annotated[str, AfterValidator(_address)] | None = None
    # Reply-To address of every notice
    reply_to: Annotated[str, AfterValidator(_address)] | None = None
    smtp: SMTPConfig = Field(default_factory=SMTPConfig)  # the SMTP relay (transport: smtp)
    centre: CentreConfig = Field(default_factory=CentreConfig)
    templates_dir: UserPath | None = None
    # before ``centre``: the same as centre.helpdesk and centre.docs_url
    support_address: Annotated[str, AfterValidator(_address)] | None = None
    docs_url: str | None = None  # same as centre.docs_url (the older spelling)

    @model_validator(mode="after")
    def _centre(self) -> MailConfig:
        centre = self.centre
        updates = {k: v for k, v in (("helpdesk", self.support_address),
                                     ("docs_url", self.docs_url))
                   if v is not None and getattr(centre, k) is None}
        if updates:
            object.__setattr__(self, "centre", centre.model_copy(update=updates))
        if self.from_address is None and self.centre.helpdesk is not None:
            object.__setattr__(self, "from_address", self.centre.helpdesk)
        return self


class AlertsConfig(Block):
    """Operator alerts: a digest of failed or refused sync runs and failed or stuck daemon
    tasks, e-mailed to ``to`` (through the ``mail`` transport)."""

    # addresses the operator digest is mailed to
    to: list[Annotated[str, AfterValidator(_address)]] = Field(min_length=1)
    subject_prefix: str = "[cheeto]"  # text before every digest subject
    stuck_after_minutes: int = Field(default=120, ge=1)  # a task running longer is stuck
    lookback_hours: int = Field(default=24, ge=1)  # how far the first digest looks back


class AuditConfig(Block):
    """The weekly access audit's digest: e-mailed to ``to`` (through the ``mail``
    transport) and, when ``webhook_url`` is set, posted to a Slack-compatible chat
    incoming webhook (``{"text": ...}``). The webhook URL is a credential: it comes from
    here (a file only admins read) or ``$CHEETO_AUDIT_WEBHOOK_URL``, never the command
    line. API keys older than ``api.key_rotation_days`` or unused for
    ``key_unused_days`` are findings."""

    # addresses the audit digest is mailed to
    to: list[Annotated[str, AfterValidator(_address)]] = Field(default_factory=list)
    subject_prefix: str = "[cheeto audit]"  # text before the audit digest's subject
    webhook_url: SecretStr | None = None  # URL the audit digest is also POSTed to (null: none)
    # seconds the webhook POST may take
    webhook_timeout_seconds: float = Field(default=10.0, gt=0, le=120)
    # an API key unused this many days is a finding
    key_unused_days: int = Field(default=90, ge=1, le=3650)
