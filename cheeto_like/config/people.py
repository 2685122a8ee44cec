"""The ``hippo`` and ``ucdiam`` sections: the HTTP services people's accounts come from
(HiPPO's requests, IAM's identity facts), and how their clients retry."""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator, Field, SecretStr

from .base import Block


def _http_url(value: str) -> str:
    value = value.strip().rstrip("/")
    if not re.match(r"^https?://[^/\s]+(/\S*)?$", value):
        raise ValueError(f"{value!r} is not an http:// or https:// URL")
    return value


HttpUrl = Annotated[str, AfterValidator(_http_url)]


class HttpClientOptions(Block):
    """How an HTTP client talks to its service: one request's timeout, and how often a
    transient failure (timeout, connection error, 5xx, 429) is retried, with exponential
    backoff starting at ``retry_backoff_seconds``."""

    request_timeout_seconds: float = Field(default=30.0, gt=0)  # seconds one HTTP request may take
    # extra attempts after a transient failure (timeout, connection error, 5xx, 429)
    retries: int = Field(default=2, ge=0, le=10)
    # seconds before the first retry, doubled each time (at most 30)
    retry_backoff_seconds: float = Field(default=1.0, ge=0)


class HippoSiteOptions(Block):
    """Per-site HiPPO behaviour (keyed by the local site name)."""

    grant_slurm: bool = False  # every new account here gets `slurm` access
    replace_ssh_keys: bool = False  # a new key replaces the user's other keys
    create_home: bool = True  # provision a home from the site's storage defaults


def _lower_keys(value: dict[str, str]) -> dict[str, str]:
    lowered: dict[str, str] = {}
    for key, site in value.items():
        low = key.strip().lower()
        if low in lowered and lowered[low] != site.strip().lower():
            raise ValueError(f"site alias {key!r} is given twice (case-insensitively) with "
                             "different sites")
        lowered[low] = site.strip().lower()
    return lowered


class HippoConfig(HttpClientOptions):
    """HiPPO, the account-request portal (``cheeto ng hippo …``, ``cheeto.hippo_process``).

    ``site_aliases`` maps HiPPO cluster names to site names; both it and ``Site.aliases``
    are matched case-insensitively. ``access_types`` maps HiPPO access types to access
    shorthands; an event asks for Slurm when one of its access types maps to ``slurm``
    or its metadata has ``slurm: true``.
    """

    base_url: HttpUrl  # HiPPO's API base URL
    api_key: SecretStr
    site_aliases: Annotated[dict[str, str], AfterValidator(_lower_keys)] = Field(
        default_factory=dict)
    max_tries: int = Field(default=3, ge=1)
    # HiPPO access type -> access shorthand granted
    access_types: dict[str, str] = Field(default_factory=lambda: {
        "OpenOnDemand": "ondemand", "SshKey": "login-ssh"})
    sites: dict[str, HippoSiteOptions] = Field(default_factory=dict)
    notify: bool = True  # e-mail the people an event concerns

    def site_options(self, site: str) -> HippoSiteOptions:
        return self.sites.get(site, HippoSiteOptions())


class IAMRefresh(Block):
    """Which user fields IAM facts overwrite. ``name`` renames the user (and their
    personal group) to the IAM login id, so it is off unless asked for."""

    name: bool = False  # rename the user to their IAM login id
    email: bool = True  # overwrite the e-mail address from IAM
    fullname: bool = True  # overwrite the full name from IAM


class IAMConfig(HttpClientOptions):
    """UC Davis IAM (``cheeto ng iam …``, ``cheeto.iam_sync``). The key travels in the
    ``api_key_header`` header, never in a URL.

    A user missing from IAM for ``grace_days`` (0: at the first miss; the default 1 means
    the next nightly run) is set to offboarding, and deactivated by the reaper
    ``expiry_offset_days`` later unless they reappear first.
    """

    base_url: HttpUrl  # the IAM API's base URL
    api_key: SecretStr  # the IAM API key (sent in api_key_header)
    api_key_header: str = Field(default="X-API-Key", pattern=r"^[A-Za-z0-9-]{1,64}$")
    api_version: str | None = "1.0"  # sent as v=<version>
    grace_days: int = Field(default=1, ge=0, le=36500)  # a century: no date overflow
    expiry_offset_days: int = Field(default=30, ge=0, le=36500)
    refresh: IAMRefresh = Field(default_factory=IAMRefresh)
