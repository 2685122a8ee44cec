"""What a CLI user expects from every command: negative durations after a space, an
unknown profile refused, the whole tree on `cheeto help`."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from cheeto_like.models import User


async def test_negative_durations_work_after_a_space(cli, db):
    r = await cli("ng", "site", "new", "-s", "farm", "--fqdn", "farm.example.org")
    assert r.code == 0, r.stderr
    r = await cli("ng", "history", "--since", "-1d", "--json")
    assert r.code == 0, r.stderr
    assert [row["op"] for row in r.json()] == ["create_site"]
    assert (await cli("ng", "history", "--until", "-1d", "--json")).json() == []
    r = await cli("ng", "user", "new", "generic", "-u", "alice", "--email", "a@example.org",
                  "--fullname", "Alice Example", "--uid", "2001", "--expires-at", "-7d")
    assert r.code == 0, r.stderr
    user = await User.find_one(User.name == "alice")
    expected = datetime.now(UTC) - timedelta(days=7)
    assert abs(user.expires_at.astimezone(UTC) - expected) < timedelta(minutes=5)


async def test_a_negative_duration_is_still_checked(cli, db):
    r = await cli("ng", "history", "--since", "-7fortnights")
    assert r.code == 2 and len(r.error_lines) == 1 and "cannot read time" in r.stderr


async def test_an_unknown_profile_is_one_line_and_exit_2(cli, db):
    r = await cli("ng", "site", "list", "-p", "prod")
    assert r.code == 2, r.stderr
    assert len(r.error_lines) == 1
    assert "profile 'prod' is not defined" in r.stderr and "(profiles: default)" in r.stderr
    assert (await cli("ng", "site", "list", "-p", "default")).code == 0


async def test_help_lists_the_tree_on_stdout(cli, db):
    r = await cli("help")
    assert r.code == 0 and r.stderr == ""
    assert "ng user new class" in r.stdout and "completion" in r.stdout


async def test_a_group_without_a_command_shows_its_help(cli, db):
    r = await cli("ng", "user")
    assert r.code == 2 and "users: create, change, show, list" in r.stderr
    assert "redundant-site-statuses" in r.stderr
