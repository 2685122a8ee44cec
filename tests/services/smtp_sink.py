"""A real SMTP server (aiosmtpd) on loopback that keeps every message it receives.

``SmtpSink()`` is plain SMTP. ``SmtpSink(tls_dir=…)`` makes a self-signed certificate for
127.0.0.1 (openssl, as the slapd harness does), requires STARTTLS and accepts one login
(``USERNAME``/``PASSWORD``) only over TLS.
"""

from __future__ import annotations

import email
import email.policy
import ssl
import subprocess
import threading
from dataclasses import dataclass
from email.message import EmailMessage
from pathlib import Path
from typing import Any

from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult, Envelope, LoginPassword, Session

from .http_server import free_loopback_port

USERNAME = "cheeto"
PASSWORD = "s3cret-smtp"


@dataclass(frozen=True)
class Received:
    mail_from: str
    rcpt_tos: list[str]
    message: EmailMessage

    @property
    def subject(self) -> str:
        return str(self.message["Subject"])

    def text(self) -> str:
        part = self.message.get_body(preferencelist=("plain",))
        return part.get_content() if part is not None else ""

    def html(self) -> str:
        part = self.message.get_body(preferencelist=("html",))
        return part.get_content() if part is not None else ""


class _Handler:
    def __init__(self, sink: SmtpSink) -> None:
        self.sink = sink

    async def handle_DATA(self, server: Any, session: Session, envelope: Envelope) -> str:
        message = email.message_from_bytes(envelope.content, policy=email.policy.default)
        with self.sink.lock:
            self.sink.messages.append(Received(envelope.mail_from, list(envelope.rcpt_tos),
                                               message))  # type: ignore[arg-type]
        return "250 OK"


def _authenticate(server: Any, session: Session, envelope: Envelope, mechanism: str,
                  auth_data: Any) -> AuthResult:
    ok = isinstance(auth_data, LoginPassword) and auth_data.login.decode() == USERNAME \
        and auth_data.password.decode() == PASSWORD
    return AuthResult(success=ok, handled=False)  # a refusal answers 535


class SmtpSink:
    def __init__(self, tls_dir: Path | None = None) -> None:
        self.messages: list[Received] = []
        self.lock = threading.Lock()
        self.port = free_loopback_port()
        self.ca_file: Path | None = None
        kwargs: dict[str, Any] = {}
        if tls_dir is not None:
            self.ca_file = tls_dir / "cert.pem"
            key = tls_dir / "key.pem"
            subprocess.run([
                "openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                "ec_paramgen_curve:prime256v1", "-nodes", "-days", "2", "-subj", "/CN=127.0.0.1",
                "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost",
                "-keyout", str(key), "-out", str(self.ca_file)],
                check=True, capture_output=True)
            context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            context.load_cert_chain(self.ca_file, key)
            kwargs = {"tls_context": context, "require_starttls": True,
                      "authenticator": _authenticate, "auth_require_tls": True,
                      "auth_required": True}
        self.controller = Controller(_Handler(self), hostname="127.0.0.1", port=self.port,
                                     **kwargs)

    def start(self) -> SmtpSink:
        self.controller.start()
        return self

    def stop(self) -> None:
        self.controller.stop()

    def clear(self) -> None:
        with self.lock:
            self.messages.clear()

    def to(self, address: str) -> list[Received]:
        with self.lock:
            return [m for m in self.messages if address in m.rcpt_tos]
