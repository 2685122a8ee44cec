"""A small typed client for the UC Davis IAM endpoints we use.

Paths are relative to ``ucdiam.base_url`` (``https://iet-ws.ucdavis.edu/api/iam``):

- ``people/prikerbacct/search?userId=NAME`` and ``people/contactinfo/search?email=ADDR``
  resolve a person's ``iamId``;
- ``people/{iamId}`` is the person (``mothraId``, ``userId``, names, ``is*`` flags,
  ``campusEmail``, …);
- ``associations/pps/{iamId}`` lists PPS appointments (``bouOrgOId``, department and
  title fields);
- ``orginfo/pps/divisions/search?orgOId=ID`` names an appointment's division.

Every answer is the envelope ``{"responseData": {"results": [...]}}``. Classification:
200 with results is data; 200 with no results, or 404, is *missing* (definitive); a 5xx,
a timeout, a connection error or a body that is not the documented JSON raises
``IAMTransientError`` (nothing is concluded, nothing is written). 401/403 raise
``HttpAuthError``. The key goes in a header (``api_key_header``), never the URL.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import httpx

from ..config import IAMConfig
from ..errors import ExternalError
from .http import HttpAuthError, HttpError, JsonHttpClient, RetryPolicy

__all__ = ["HttpAuthError", "IAMBundle", "IAMClient", "IAMPerson", "IAMTransientError"]


class IAMTransientError(ExternalError):
    """IAM could not give a definitive answer (timeout, 5xx, bad body): retry later."""

    def __init__(self, message: str) -> None:
        super().__init__(message, transient=True)


@dataclass(frozen=True)
class IAMPerson:
    iam_id: str
    mothra_id: str | None
    user_id: str | None
    full_name: str | None  # dFullName, else oFullName
    campus_email: str | None
    email: str | None
    user_types: tuple[str, ...]
    raw: dict[str, Any] = field(repr=False, default_factory=dict)


@dataclass(frozen=True)
class IAMAppointment:
    org_id: str | None
    dept_name: str | None
    dept_code: str | None
    title: str | None
    title_type: str | None


@dataclass(frozen=True)
class IAMDivision:
    org_id: str
    name: str | None
    code: str | None


@dataclass(frozen=True)
class IAMBundle:
    """Everything one sync needs about a person."""

    person: IAMPerson
    appointments: tuple[IAMAppointment, ...] = ()
    divisions: dict[str, IAMDivision] = field(default_factory=dict)


USER_TYPE_FLAGS = (("isEmployee", "employee"), ("isHSEmployee", "employee"),
                   ("isFaculty", "faculty"), ("isStaff", "staff"), ("isStudent", "student"),
                   ("isExternal", "external"))


def _text(value: Any) -> str | None:
    """IAM codes are strings that keep their leading zeros; numbers become their text."""
    if value is None or isinstance(value, bool):
        return None
    text = str(value).strip()
    return text or None


def parse_person(record: dict[str, Any]) -> IAMPerson:
    iam_id = _text(record.get("iamId"))
    if iam_id is None:
        raise ValueError("person record has no iamId")
    types: list[str] = []
    for flag, kind in USER_TYPE_FLAGS:
        if record.get(flag) is True and kind not in types:
            types.append(kind)
    return IAMPerson(
        iam_id=iam_id, mothra_id=_text(record.get("mothraId")),
        user_id=_text(record.get("userId")),
        full_name=_text(record.get("dFullName")) or _text(record.get("oFullName")),
        campus_email=_text(record.get("campusEmail")), email=_text(record.get("email")),
        user_types=tuple(types), raw=record)


def parse_appointment(record: dict[str, Any]) -> IAMAppointment:
    return IAMAppointment(
        org_id=_text(record.get("bouOrgOId")), dept_name=_text(record.get("apptDeptOfficialName")),
        dept_code=_text(record.get("apptDeptCode")), title=_text(record.get("titleOfficialName")),
        title_type=_text(record.get("emplClassDesc")))


class IAMClient(JsonHttpClient):
    service = "IAM"

    def __init__(self, config: IAMConfig, *,
                 transport: httpx.AsyncBaseTransport | None = None) -> None:
        super().__init__(config.base_url,
                         headers={config.api_key_header: config.api_key.get_secret_value(),
                                  "Accept": "application/json"},
                         timeout=config.request_timeout_seconds,
                         retry=RetryPolicy.from_options(config), transport=transport)
        self.version = config.api_version

    async def _results(self, path: str, **params: str) -> list[dict[str, Any]] | None:
        """The envelope's results; None for 404 or an empty list (missing)."""
        if self.version:
            params = {**params, "v": self.version}
        try:
            response = await self.request("GET", path, params=params, passthrough=(404,))
        except HttpAuthError:
            raise
        except HttpError as exc:
            raise IAMTransientError(exc.message) from None
        if response.status_code == 404:
            return None
        try:
            body = self.json_of(response)
        except HttpError as exc:
            raise IAMTransientError(exc.message) from None
        data = body.get("responseData") if isinstance(body, dict) else None
        results = data.get("results") if isinstance(data, dict) else None
        if results is None and isinstance(data, dict) and "results" in data:
            return None
        if not isinstance(results, list) or not all(isinstance(r, dict) for r in results):
            raise IAMTransientError(f"IAM: GET {path} answered JSON without a "
                                    "responseData.results list")
        return results or None

    async def _iam_id(self, path: str, **params: str) -> str | None:
        results = await self._results(path, **params)
        return _text(results[0].get("iamId")) if results else None

    async def iam_id_by_username(self, username: str) -> str | None:
        return await self._iam_id("people/prikerbacct/search", userId=username)

    async def iam_id_by_email(self, email: str) -> str | None:
        return await self._iam_id("people/contactinfo/search", email=email)

    async def person(self, iam_id: str) -> IAMPerson | None:
        results = await self._results(f"people/{iam_id}")
        if not results:
            return None
        try:
            return parse_person(results[0])
        except ValueError as exc:
            raise IAMTransientError(f"IAM: people/{iam_id}: {exc}") from None

    async def appointments(self, iam_id: str) -> list[IAMAppointment]:
        results = await self._results(f"associations/pps/{iam_id}")
        return [parse_appointment(r) for r in results or []]

    async def division(self, org_id: str) -> IAMDivision | None:
        results = await self._results("orginfo/pps/divisions/search", orgOId=org_id)
        if not results:
            return None
        record = results[0]
        return IAMDivision(org_id=org_id, name=_text(record.get("deptOfficialName")),
                           code=_text(record.get("deptCode")))

    async def bundle(self, iam_id: str) -> IAMBundle | None:
        """Person, appointments, and one division lookup per distinct org (None: the
        person is missing)."""
        person = await self.person(iam_id)
        if person is None:
            return None
        appointments = await self.appointments(iam_id)
        divisions: dict[str, IAMDivision] = {}
        for org_id in dict.fromkeys(a.org_id for a in appointments if a.org_id):
            division = await self.division(org_id)
            if division is not None:
                divisions[org_id] = division
        return IAMBundle(person, tuple(appointments), divisions)
