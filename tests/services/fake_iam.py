"""A small fake of the UC Davis IAM API, implementing exactly the documented shapes.

Under ``/api/iam`` (the client's base URL is ``<server>/api/iam``):

- ``GET people/prikerbacct/search?userId=U`` -> results ``[{iamId, userId}]`` or ``[]``;
- ``GET people/contactinfo/search?email=E`` -> results ``[{iamId, email}]`` or ``[]``;
- ``GET people/{iamId}`` -> results ``[person]``; an unknown id is **404**;
- ``GET associations/pps/{iamId}`` -> results ``[appointment…]``; none is 404;
- ``GET orginfo/pps/divisions/search?orgOId=O`` -> results ``[{orgOId, deptOfficialName,
  deptCode}]`` or ``[]``.

Every answer is ``{"responseStatus": 0, "responseDetails": "", "responseData":
{"results": [...]}}``. The key must come in the ``X-API-Key`` header (401 otherwise); a
``key`` query parameter is recorded in ``state.key_in_query`` so tests can prove it never
happens. Fault routes: ``kerberos``, ``email``, ``person``, ``associations``,
``divisions``.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from .http_server import FaultPlan, ServerThread

API_KEY = "iam-test-key"
PREFIX = "/api/iam"


def envelope(results: list[dict[str, Any]]) -> dict[str, Any]:
    return {"responseStatus": 0, "responseDetails": "",
            "responseData": {"results": results}}


@dataclass
class FakeIAMState:
    api_key: str = API_KEY
    people: dict[str, dict[str, Any]] = field(default_factory=dict)  # iamId -> person
    appointments: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    divisions: dict[str, dict[str, Any]] = field(default_factory=dict)
    calls: Counter[str] = field(default_factory=Counter)
    key_in_query: list[str] = field(default_factory=list)
    faults: FaultPlan = field(default_factory=FaultPlan)

    def reset(self) -> None:
        self.people.clear()
        self.appointments.clear()
        self.divisions.clear()
        self.calls.clear()
        self.key_in_query.clear()
        self.faults.clear()

    def add_person(self, iam_id: str, user_id: str, *, mothra_id: str = "00123456",
                   name: str | None = None, email: str | None = None,
                   types: tuple[str, ...] = ("staff",),
                   appointments: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        flags = {"isEmployee": "employee" in types, "isHSEmployee": "hs" in types,
                 "isFaculty": "faculty" in types, "isStaff": "staff" in types,
                 "isStudent": "student" in types, "isExternal": "external" in types}
        full = name or f"{user_id.title()} Aggie"
        person = {"iamId": iam_id, "mothraId": mothra_id, "userId": user_id,
                  "oFirstName": full.split()[0], "oLastName": full.split()[-1],
                  "oFullName": full.upper(), "dFullName": full,
                  "campusEmail": email if email is not None else f"{user_id}@ucdavis.edu",
                  **flags}
        self.people[iam_id] = person
        if appointments:
            self.appointments[iam_id] = appointments
        return person

    def remove_person(self, iam_id: str) -> None:
        self.people.pop(iam_id, None)
        self.appointments.pop(iam_id, None)


def appointment(org: str = "01234", dept: str = "Computer Science", dept_code: str = "030250",
                title: str = "Programmer", kind: str = "Staff: Career") -> dict[str, Any]:
    return {"bouOrgOId": org, "apptDeptOfficialName": dept, "apptDeptCode": dept_code,
            "titleOfficialName": title, "emplClassDesc": kind}


def build_app(state: FakeIAMState) -> Starlette:
    async def guard(request: Request, route: str) -> Response | None:
        state.calls[route] += 1
        if "key" in request.query_params:
            state.key_in_query.append(str(request.url))
        if request.headers.get("x-api-key") != state.api_key:
            return JSONResponse({"error": "unauthorized"}, status_code=401)
        return await state.faults.apply(route)

    async def by_kerberos(request: Request) -> Response:
        if (fault := await guard(request, "kerberos")) is not None:
            return fault
        user_id = request.query_params.get("userId", "")
        found = [{"iamId": p["iamId"], "userId": p["userId"]} for p in state.people.values()
                 if p["userId"] == user_id]
        return JSONResponse(envelope(found))

    async def by_email(request: Request) -> Response:
        if (fault := await guard(request, "email")) is not None:
            return fault
        email = request.query_params.get("email", "").lower()
        found = [{"iamId": p["iamId"], "email": p["campusEmail"]}
                 for p in state.people.values() if (p["campusEmail"] or "").lower() == email]
        return JSONResponse(envelope(found))

    async def person(request: Request) -> Response:
        if (fault := await guard(request, "person")) is not None:
            return fault
        found = state.people.get(request.path_params["iam_id"])
        if found is None:
            return JSONResponse({"responseStatus": 1, "responseDetails": "not found"},
                                status_code=404)
        return JSONResponse(envelope([found]))

    async def associations(request: Request) -> Response:
        if (fault := await guard(request, "associations")) is not None:
            return fault
        found = state.appointments.get(request.path_params["iam_id"])
        if not found:
            return JSONResponse({"responseStatus": 1, "responseDetails": "none"},
                                status_code=404)
        return JSONResponse(envelope(found))

    async def divisions(request: Request) -> Response:
        if (fault := await guard(request, "divisions")) is not None:
            return fault
        found = state.divisions.get(request.query_params.get("orgOId", ""))
        return JSONResponse(envelope([found] if found else []))

    return Starlette(routes=[
        Route(f"{PREFIX}/people/prikerbacct/search", by_kerberos, methods=["GET"]),
        Route(f"{PREFIX}/people/contactinfo/search", by_email, methods=["GET"]),
        Route(f"{PREFIX}/people/{{iam_id}}", person, methods=["GET"]),
        Route(f"{PREFIX}/associations/pps/{{iam_id}}", associations, methods=["GET"]),
        Route(f"{PREFIX}/orginfo/pps/divisions/search", divisions, methods=["GET"]),
    ])


class FakeIAM:
    def __init__(self) -> None:
        self.state = FakeIAMState()
        self.server = ServerThread(build_app(self.state), "fake-iam")

    @property
    def url(self) -> str:
        return self.server.url + PREFIX

    def start(self) -> FakeIAM:
        self.server.start()
        return self

    def stop(self) -> None:
        self.server.stop()
