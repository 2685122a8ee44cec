"""The IAM client against the fake IAM over real HTTP: response classification, the
bundle, and the key in a header."""

from __future__ import annotations

import re

import pytest

from cheeto_like.adapters.http import HttpAuthError
from cheeto_like.adapters.iam import IAMClient, IAMTransientError
from tests.services.fake_iam import appointment
from tests.services.fixtures_people import iam_config
from tests.services.http_server import Fault


@pytest.fixture
def client(fake_iam_server, iam):
    return IAMClient(iam_config(fake_iam_server))


async def test_resolve_and_fetch_a_person_bundle(client, iam):
    iam.add_person("1000001", "alice", mothra_id="00012345", name="Alice Aggie",
                   types=("staff", "hs", "student"),
                   appointments=[appointment("0100", "CS", "030250"),
                                 appointment("0100", "CS", "030250", title="Lecturer"),
                                 appointment("0200", "Math", "040100")])
    iam.divisions["0100"] = {"orgOId": "0100", "deptOfficialName": "Engineering",
                             "deptCode": "00007"}
    async with client:
        assert await client.iam_id_by_username("alice") == "1000001"
        assert await client.iam_id_by_email("ALICE@ucdavis.edu") == "1000001"
        bundle = await client.bundle("1000001")
    person = bundle.person
    assert (person.mothra_id, person.user_id, person.full_name) == ("00012345", "alice",
                                                                   "Alice Aggie")
    assert person.campus_email == "alice@ucdavis.edu"
    assert person.user_types == ("employee", "staff", "student")  # HS employee -> employee
    assert [a.title for a in bundle.appointments] == ["Programmer", "Lecturer", "Programmer"]
    assert bundle.divisions["0100"].code == "00007"  # codes keep their leading zeros
    assert "0200" not in bundle.divisions  # a division IAM does not know is left out
    assert iam.calls["divisions"] == 2  # one lookup per distinct org, not per appointment


async def test_missing_is_definitive(client, iam):
    async with client:
        assert await client.iam_id_by_username("ghost") is None  # 200 with no results
        assert await client.person("999") is None  # 404
        assert await client.bundle("999") is None
        assert await client.appointments("999") == []  # 404 on associations: none


async def test_the_key_goes_in_a_header_never_the_url(client, iam):
    async with client:
        await client.iam_id_by_username("alice")
    assert iam.calls["kerberos"] == 1 and iam.key_in_query == []


async def test_a_refused_key_is_an_auth_error(fake_iam_server, iam):
    async with IAMClient(iam_config(fake_iam_server, api_key="nope")) as bad:
        with pytest.raises(HttpAuthError, match="401"):
            await bad.iam_id_by_username("alice")


@pytest.mark.parametrize(("fault", "message"), [
    (Fault(status=502), "HTTP 502 (after 3 attempts)"),
    (Fault(delay=1.0), "timed out"),
    (Fault(malformed=True), "not JSON (text/html"),
])
async def test_transient_problems_raise_without_concluding(client, iam, fault, message):
    iam.add_person("1000001", "alice")
    iam.faults.add("person", fault, times=3)
    async with client:
        with pytest.raises(IAMTransientError, match=re.escape(message)) as exc:
            await client.person("1000001")
    assert exc.value.transient


async def test_a_transient_error_heals_within_the_retries(client, iam):
    iam.add_person("1000001", "alice")
    iam.faults.add("person", Fault(status=503))
    async with client:
        assert (await client.person("1000001")).user_id == "alice"
    assert iam.calls["person"] == 2


async def test_json_without_the_envelope_is_transient(client, iam):
    iam.add_person("1000001", "alice")
    # the fake answers a status fault with a JSON error body: at 200 that is JSON of the
    # wrong shape (no responseData.results)
    iam.faults.add("person", Fault(status=200))
    async with client:
        with pytest.raises(IAMTransientError, match=r"responseData\.results"):
            await client.person("1000001")
