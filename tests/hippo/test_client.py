"""The HiPPO client against the fake HiPPO over real HTTP: auth, retries, timeouts,
malformed bodies, and the request shapes."""

from __future__ import annotations

import pytest

from cheeto_like.adapters.hippo import HippoClient
from cheeto_like.adapters.http import (
    HttpAuthError,
    HttpBadBody,
    HttpStatusError,
    HttpTransientError,
    RetryPolicy,
)
from tests.services.fake_hippo import account
from tests.services.fixtures_people import hippo_config
from tests.services.http_server import Fault


@pytest.fixture
def client(fake_hippo_server, hippo):
    return HippoClient(hippo_config(fake_hippo_server))


async def test_pending_events_parse_the_documented_shape(client, hippo):
    event_id = hippo.add_event("CreateAccount", cluster="caesfarm", groups=["lab1"],
                               accounts=[account("alice", 1234)])
    async with client:
        events, bad = await client.pending_events()
    assert bad == []
    [event] = events
    assert (event.id, event.action, event.status) == (event_id, "CreateAccount", "Pending")
    assert event.data["accounts"][0]["kerberos"] == "alice"
    assert event.raw["data"]["groups"] == [{"name": "lab1"}]


async def test_the_key_goes_in_a_header_never_the_url(client, hippo):
    event_id = hippo.add_event("CreateGroup", accounts=[account("alice")])
    async with client:
        await client.pending_events()
        await client.update_status(event_id, "Complete")
    assert hippo.requests and all("key" not in query.lower() for _, _, query in hippo.requests)


async def test_a_refused_key_is_an_error_not_an_empty_queue(fake_hippo_server, hippo):
    hippo.add_event("CreateAccount", accounts=[account("alice")])
    bad = HippoClient(hippo_config(fake_hippo_server, api_key="wrong"))
    async with bad:
        with pytest.raises(HttpAuthError, match=r"401.*check the API key"):
            await bad.pending_events()
    assert len(hippo.requests) == 1  # never retried


async def test_403_is_an_auth_error_too(client, hippo):
    hippo.faults.add("pending", Fault(status=403))
    async with client:
        with pytest.raises(HttpAuthError, match="403"):
            await client.pending_events()


async def test_5xx_is_retried_with_backoff_then_succeeds(client, hippo):
    hippo.faults.add("pending", Fault(status=503), times=2)
    async with client:
        events, _ = await client.pending_events()
    assert events == [] and len(hippo.requests) == 3


async def test_5xx_after_every_retry_is_transient(client, hippo):
    hippo.faults.add("pending", Fault(status=500), times=3)
    async with client:
        with pytest.raises(HttpTransientError, match=r"HTTP 500 \(after 3 attempts\)") as exc:
            await client.pending_events()
    assert exc.value.transient


async def test_a_slow_answer_times_out_and_is_retried(client, hippo):
    hippo.faults.add("pending", Fault(delay=1.0))
    async with client:
        events, _ = await client.pending_events()
    assert events == [] and len(hippo.requests) == 2


async def test_a_connection_error_is_transient(fake_hippo_server):
    from tests.services.http_server import free_loopback_port

    dead = HippoClient(hippo_config(fake_hippo_server,
                                    base_url=f"http://127.0.0.1:{free_loopback_port()}"))
    async with dead:
        with pytest.raises(HttpTransientError, match="ConnectError"):
            await dead.pending_events()


async def test_a_body_that_is_not_json_is_a_clear_error(client, hippo):
    hippo.faults.add("pending", Fault(malformed=True))
    async with client:
        with pytest.raises(HttpBadBody, match=r"not JSON \(text/html.*Service Unavailable"):
            await client.pending_events()


async def test_a_4xx_other_than_auth_is_not_retried(client, hippo):
    async with client:
        with pytest.raises(HttpStatusError, match="404"):
            await client.update_status(424242, "Complete")
    assert len(hippo.requests) == 1


async def test_unreadable_entries_are_set_aside(client, hippo):
    good = hippo.add_event("CreateGroup", accounts=[account("alice")])
    hippo.extra_pending.extend(["junk", {"id": "x", "action": "CreateAccount"}, {"action": 1}])
    async with client:
        events, bad = await client.pending_events()
    assert [e.id for e in events] == [good]
    assert [b.position for b in bad] == [1, 2, 3]
    assert "no integer id" in bad[1].problem


async def test_update_status_notify_and_puppet_send_the_documented_bodies(client, hippo):
    event_id = hippo.add_event("CreateGroup", accounts=[account("alice")])
    async with client:
        await client.update_status(event_id, "Complete")
        await client.notify_styled(emails=["a@x.org"], cc_emails=["b@x.org"], subject="S",
                                   paragraphs=["<p>one</p>"], header="H")
        assert await client.sync_puppet_accounts() == 200
    assert hippo.status_updates == [{"id": event_id, "status": "Complete"}]
    assert hippo.events[event_id]["status"] == "Complete"
    assert hippo.notifications == [{"emails": ["a@x.org"], "ccEmails": ["b@x.org"],
                                    "subject": "S", "paragraphs": ["<p>one</p>"],
                                    "header": "H"}]
    assert hippo.puppet_syncs == 1


def test_backoff_doubles_and_is_capped():
    policy = RetryPolicy(retries=5, backoff_seconds=1.0, max_backoff_seconds=3.0)
    assert [policy.delay(n) for n in (1, 2, 3, 4)] == [1.0, 2.0, 3.0, 3.0]
