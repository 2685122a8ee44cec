"""The site mark's rules, pure: what it covers (before its time, or within the margin
only with the snapshot the run read), what stays dirty (later changes, failed records),
and how a record's own stamp and the mark combine."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from cheeto_like.sync.ldap_mark import MARGIN_MS, SiteMark, is_clean, ms, window_of

T = datetime(2030, 1, 1, 12, tzinfo=UTC)
THROUGH = ms(T)
ALICE = ("user", "alice")


def mark(**fields: object) -> SiteMark:
    return SiteMark(site="farm", through_ms=THROUGH, **fields)  # type: ignore[arg-type]


def test_a_change_long_before_the_mark_is_covered_and_one_after_it_is_not():
    assert mark().covers(ALICE, T - timedelta(minutes=5))
    assert mark().covers(ALICE, T - timedelta(milliseconds=MARGIN_MS))
    assert not mark().covers(ALICE, T + timedelta(milliseconds=1))


def test_within_the_margin_only_the_snapshot_the_run_read_is_covered():
    """A change stamped just before the mark but committed after the run read (a
    transaction in flight, a client clock behind) differs from the snapshot."""
    seen = T - timedelta(seconds=2)
    window = window_of([(ALICE, seen), (("group", "lab"), T - timedelta(hours=1))], THROUGH)
    assert window == {"user:alice": ms(seen)}
    assert mark(window=window).covers(ALICE, seen)
    assert not mark(window=window).covers(ALICE, seen + timedelta(milliseconds=5))
    assert not mark().covers(("user", "bob"), T - timedelta(seconds=1))  # not read at all


def test_a_pending_record_is_dirty_whatever_its_stamps_say():
    pending = mark(pending=frozenset({"user:alice"}))
    old = T - timedelta(hours=1)
    assert not pending.covers(ALICE, old)
    assert not is_clean(ALICE, old, T, pending)
    assert is_clean(("user", "bob"), old, None, pending)


def test_own_stamp_or_mark_either_covers_a_record():
    old, new = T - timedelta(hours=1), T + timedelta(hours=1)
    assert not is_clean(ALICE, old, None, None)          # never synced here
    assert is_clean(ALICE, old, None, mark())            # the site's mark covers it
    assert is_clean(ALICE, new, new, mark())             # its own later stamp does
    assert not is_clean(ALICE, new, old, mark())         # changed after both
    assert not is_clean(ALICE, new, None, None)
