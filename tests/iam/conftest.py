"""The fake HiPPO and IAM servers and the SMTP sinks (started once per session)."""

from tests.services.fixtures_people import (
    fake_hippo_server,
    fake_iam_server,
    hippo,
    iam,
    mailbox,
    people_cli_config,
    smtp_server,
    smtp_tls_server,
)

__all__ = ["fake_hippo_server", "fake_iam_server", "hippo", "iam", "mailbox",
           "people_cli_config", "smtp_server", "smtp_tls_server"]
