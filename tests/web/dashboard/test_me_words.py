""""Can I submit?" on the Me page, said to the person with a next step (pure)."""

from __future__ import annotations

from typing import Any

from cheeto_like.web.dashboard.pages_me import ago, can_submit_words, code_parts


def why(*, can: bool = False, blocked: list[str] | None = None,
        associations: list[dict[str, Any]] | None = None, default: str | None = None,
        held: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {"can_submit": can, "eligibility": {"blocked_by": blocked or []},
            "wanted": {"associations": associations or [], "default_account": default},
            "slurmctld": {"associations": held or []}}


def test_no_partition_is_the_issue_sentence() -> None:
    ok, text, step, kind = can_submit_words(why(), "farm")
    assert not ok and kind == "access"
    assert f"{text} {step}" == ("You cannot submit at farm yet: none of your groups has a "
                                "partition there. Ask your sponsor, or file an access "
                                "request.")


def test_can_submit_names_the_default_account() -> None:
    assert can_submit_words(why(can=True, default="lab"), "farm") == (
        True, "You can submit jobs at farm (your default account is lab).", "", "")


def test_blocked_reasons_in_the_second_person() -> None:
    ok, text, step, kind = can_submit_words(
        why(blocked=["no slurm access", "status is inactive"]), "farm")
    assert not ok
    assert text == ("You cannot submit at farm: you have no Slurm access at farm; your "
                    "status is inactive.")
    assert "file an access request" in step and kind == "access"


def test_a_zero_limit_points_at_the_quota() -> None:
    ok, text, step, kind = can_submit_words(
        why(associations=[{"account": "lab"}], held=[{"blocking_limits": ["cpu=0"]}]),
        "farm")
    assert not ok and "limit of 0" in text and kind == "quota" and "quota request" in step


def test_waiting_for_the_sync() -> None:
    ok, text, step, kind = can_submit_words(why(associations=[{"account": "lab"}]), "farm")
    assert not ok and "yet" in text and "next Slurm sync" in step and kind == ""


def test_code_parts_and_ago() -> None:
    from datetime import UTC, datetime, timedelta

    assert code_parts("Release it: `scontrol release 7`.") == [
        ("Release it: ", False), ("scontrol release 7", True), (".", False)]
    now = datetime(2026, 12, 5, tzinfo=UTC)
    assert ago(now - timedelta(seconds=30), now) == "30 seconds ago"
    assert ago(now - timedelta(minutes=10), now) == "10 minutes ago"
    assert ago((now - timedelta(hours=5)).replace(tzinfo=None), now) == "5 hours ago"
    assert ago(now - timedelta(days=3), now) == "3 days ago"
