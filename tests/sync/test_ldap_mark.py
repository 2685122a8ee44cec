"""The site mark's rules, pure: a record is covered only by the very token the run read
(no clock, no margin: an edit committed later, or stamped by a clock behind, has another
version), what stays dirty (failed records), how a record's own token and the mark
combine, and how the tokens are split into parts of bounded size."""

from __future__ import annotations

from cheeto_like.models.base import LDAPInfo, first_version
from cheeto_like.sync.ldap.mark import PART_SIZE, SiteMark, _bucket, _split, is_clean

ALICE = ("user", "alice")


def mark(**fields: object) -> SiteMark:
    return SiteMark(site="farm", through_ms=0, **fields)  # type: ignore[arg-type]


def test_only_the_token_the_run_read_is_covered():
    synced = mark(versions={"user:alice": 7, "storage:auto.home/a": "3|10|20"})
    assert synced.covers(ALICE, 7)
    assert not synced.covers(ALICE, 8)   # written after the run read it
    assert not synced.covers(ALICE, 6)   # an older record (a restore): equality only
    assert not synced.covers(("user", "bob"), 1)  # not covered by the run at all
    assert synced.covers(("storage", "auto.home/a"), "3|10|20")
    assert not synced.covers(("storage", "auto.home/a"), "3|11|20")  # its map moved


def test_a_pending_record_is_dirty_whatever_its_tokens_say():
    pending = mark(versions={"user:alice": 7, "user:bob": 2},
                   pending=frozenset({"user:alice"}))
    assert not pending.covers(ALICE, 7)
    assert not is_clean(ALICE, 7, 7, pending)
    assert is_clean(("user", "bob"), 2, None, pending)


def test_own_token_or_mark_either_covers_a_record():
    synced = mark(versions={"user:alice": 7})
    assert not is_clean(ALICE, 7, None, None)       # never synced here
    assert is_clean(ALICE, 7, None, synced)         # the site's mark covers it
    assert is_clean(ALICE, 9, 9, synced)            # its own later stamp does
    assert not is_clean(ALICE, 9, 8, synced)        # changed after both
    assert not is_clean(ALICE, 9, None, None)


def test_needs_sync_is_per_site_and_by_version():
    info = LDAPInfo(version=5, synced_version={"farm": 5, "hive": 4})
    assert not info.needs_sync("farm")
    assert info.needs_sync("hive")
    assert info.needs_sync("never-synced")


def test_first_versions_are_spread_and_small_enough_to_sum():
    firsts = {first_version() for _ in range(200)}
    assert len(firsts) > 190 and all(0 < v < 2**31 for v in firsts)


def test_tokens_split_into_bounded_parts_by_a_stable_hash():
    versions = {f"user:u{i}": i for i in range(2 * PART_SIZE + 5)}
    parts = _split(versions)
    assert len(parts) == 3 and all(len(p) <= PART_SIZE * 1.2 for p in parts)
    assert {k: v for part in parts for k, v in part} == versions
    # one record's edit moves one part only
    edited = _split({**versions, "user:u17": 10**6})
    moved = [i for i in range(3) if parts[i] != edited[i]]
    assert moved == [_bucket("user:u17", 3)]
    assert _split({}) == [[]]
