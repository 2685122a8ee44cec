"""Every parser of admin input, under hypothesis (issue 12): whatever the text, it either
parses to a value that holds the type's promises or is refused with the project's
bad-input error, in one line. Any other exception (OverflowError, UnicodeError, a
multi-line pydantic report) fails the test.

Covers names, TRES, sizes, durations (Slurm time limits), dates, SSH keys, e-mails,
paths, CIDRs, hosts and mount/export options, plus the CLI's integer and float flags.
"""

from __future__ import annotations

import argparse
import ipaddress
import re
import string
from collections.abc import Callable
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import bson
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from pydantic import TypeAdapter, ValidationError

from cheeto_like.credentials import parse_ssh_key
from cheeto_like.errors import InvalidInput
from cheeto_like.models import fields as f
from cheeto_like.models.slurm import WALLTIME_MAX_MINUTES, SlurmName, SlurmTRES, walltime_minutes
from cheeto_like.models.storage import MapName, StorageName, SubPath, VolumeName, format_quota
from cheeto_like.text import has_control
from cheeto_like.timeparse import CLEAR, parse_duration, parse_when
from cheeto_like.validation import describe_validation_error

FAST = settings(max_examples=100, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow])

# Text that tends to break parsers: markup, escapes, shell metacharacters, odd Unicode.
NASTY = ["[/]", "[bold]", ":smile:", "\x1b[2J", "\x00", "\n", "\r", "\t", "\u202e",
         "\u2028", "$(reboot)", "`id`", ";", "|", "&", ">", "*", " ", "..", "/", "//",
         "é", "😀", "1" * 30, "-1", "+", "=", ",", "@", ".", "~", "%"]
junk = st.lists(st.one_of(st.sampled_from(NASTY), st.text(max_size=8)), max_size=6).map("".join)
anything = st.one_of(st.text(max_size=60), junk)


def outcome(parse: Callable[[str], Any], text: str, *,
            value_errors: tuple[str, ...] = ()) -> Any:
    """The parsed value, or None when refused the allowed way (InvalidInput, or a pydantic
    ValidationError that converts to one line; ``value_errors``: message prefixes of the
    ValueError a model-level parser documents, which the CLI turns into InvalidInput)."""
    try:
        return parse(text)
    except InvalidInput as exc:
        assert "\n" not in exc.message
        return None
    except ValidationError as exc:
        line = describe_validation_error(exc)
        assert line and "\n" not in line and "pydantic.dev" not in line
        return None
    except ValueError as exc:
        if value_errors and str(exc).startswith(value_errors) and "\n" not in str(exc):
            return None
        raise


def adapter(tp: Any) -> Callable[[str], Any]:
    return TypeAdapter(tp).validate_python


# -- names ---------------------------------------------------------------------------------

NAME_TYPES = {"posix": (f.PosixName, r"[a-z_][a-z0-9_.-]*"),
              "site": (f.SiteName, r"[a-z][a-z0-9-]*"),
              "alias": (f.SiteAlias, r"[a-z0-9][a-z0-9._-]*"),
              "shorthand": (f.Shorthand, r"[a-z][a-z0-9-]*"),
              "slurm": (SlurmName, r"[a-z0-9][a-z0-9_.-]*"),
              "volume": (VolumeName, r"[A-Za-z0-9_][A-Za-z0-9_.+/-]*"),
              "storage": (StorageName, r"[A-Za-z0-9_][A-Za-z0-9_.+-]*"),
              "map": (MapName, r"[A-Za-z0-9_][A-Za-z0-9_.-]*")}


@pytest.mark.parametrize("kind", sorted(NAME_TYPES))
@FAST
@given(data=st.data())
def test_names(kind, data):
    tp, shape = NAME_TYPES[kind]
    text = data.draw(st.one_of(anything, st.from_regex(shape, fullmatch=True),
                               st.from_regex(shape, fullmatch=True).map(lambda v: v + "\n")))
    value = outcome(adapter(tp), text)
    if value is not None:
        assert re.fullmatch(shape, value) and len(value) <= 255
        assert not has_control(value)
        assert adapter(tp)(value) == value


# -- TRES and sizes ------------------------------------------------------------------------

big_ints = st.integers(min_value=-(2**70), max_value=2**70).map(str)
sizes = st.from_regex(r"[0-9]{0,22}(\.[0-9]{0,9})?[MGTPmgtpKkX]?", fullmatch=True)
tres_token = st.tuples(st.sampled_from(["cpus", "gpus", "mem", "CPUS", "bogus", ""]),
                       st.sampled_from(["=", "", "=="]),
                       st.one_of(big_ints, sizes, st.sampled_from(["-1", "inf", "", "x"]),
                                 junk)).map("".join)
tres_text = st.one_of(anything, st.lists(tres_token, max_size=4).map(" ".join))


@FAST
@given(tres_text)
def test_tres(text):
    tres = outcome(SlurmTRES.parse, text,
                   value_errors=("invalid TRES", "TRES ", "empty TRES"))
    if tres is not None:
        for count in (tres.cpus, tres.gpus):
            assert count is None or 0 <= count <= f.INT64_MAX
        assert tres.mem_mb is None or 0 <= tres.mem_mb <= f.QUOTA_MAX_MB
        bson.encode(tres.model_dump())  # the store can hold it


@FAST
@given(st.one_of(anything, sizes))
def test_sizes(text):
    quota = outcome(adapter(f.Quota), text)
    if quota is not None:
        mb = f.parse_quota_mb(quota)
        assert 0 <= mb <= f.QUOTA_MAX_MB
        rendered = format_quota(mb)  # exact: the rendering reads back as the same size
        assert f.parse_quota_mb(rendered) == mb
        assert sum([mb] * 1000, Decimal(0)) == mb * 1000  # sums stay exact


# -- durations and dates -------------------------------------------------------------------

walltimes = st.one_of(
    anything, big_ints,
    st.from_regex(r"([0-9]{1,12}-)?[0-9]{1,12}(:[0-9]{1,12}){0,2}", fullmatch=True),
    st.sampled_from(["UNLIMITED", "-1", "partition_limit", "7-0", "168:00:00"]))


@FAST
@given(walltimes)
def test_durations(text):
    minutes = outcome(walltime_minutes, text,
                      value_errors=("invalid time limit", "time limit"))
    if minutes is not None:
        assert 0 <= minutes <= WALLTIME_MAX_MINUTES


relative = st.from_regex(r"[+-][0-9]{1,25} ?(y|yr|years?|mo|months?|w|weeks?|d|days?|h|hours?"
                         r"|m|min|mins|minutes?)", fullmatch=True)
iso = st.one_of(st.datetimes().map(datetime.isoformat),
                st.datetimes(timezones=st.timezones()).map(datetime.isoformat),
                st.dates().map(lambda d: d.isoformat()))
NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


@FAST
@given(st.one_of(anything, relative, iso, st.sampled_from(["clear", "None", "NULL"])))
def test_dates(text):
    when = outcome(lambda t: parse_when(t, now=NOW), text)
    if when is not None and when is not CLEAR:
        assert isinstance(when, datetime) and when.utcoffset().total_seconds() == 0
        bson.encode({"t": when})


thresholds = st.from_regex(
    r"[0-9]{1,12} ?(s|sec|seconds?|m|min|minutes?|h|hours?|d|days?|w|weeks?)", fullmatch=True)


@FAST
@given(st.one_of(anything, thresholds))
def test_threshold_durations(text):
    """``--pending-over``/``--down-over``: a non-negative timedelta or one clear line."""
    span = outcome(parse_duration, text)
    if span is not None:
        assert 0 <= span.total_seconds() <= 3650 * 86400


# -- keys, e-mails ---------------------------------------------------------------------------

KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGq8qZ0ZEn9m9oP3b8mZr3pM0w3a0c2jY2q8m8n3d7xK"
keys = st.one_of(anything, st.builds(lambda c: f"{KEY} {c}", anything),
                 st.builds(lambda p, c: f"{p} {c}", st.sampled_from(
                     ["ssh-rsa AAAA", "ssh-ed25519 !!!!", "from=x ssh-ed25519", KEY[:40]]),
                     anything))


@FAST
@given(keys)
def test_ssh_keys(text):
    key = outcome(parse_ssh_key, text)
    if key is not None:
        assert not has_control(key.comment) and key.fingerprint.startswith("SHA256:")
        assert parse_ssh_key(f"{key.type} {key.blob} {key.comment}".strip()) == key


emails = st.one_of(anything, st.emails(), st.builds(
    lambda n, d: f"{'a' * n}@{d}", st.integers(0, 300), st.sampled_from(["example.org", "x"])))


@FAST
@given(emails)
def test_emails(text):
    email = outcome(adapter(f.Email), text)
    if email is not None:
        assert len(email) <= f.EMAIL_MAX_LEN and "@" in email and not has_control(email)


# -- paths, hosts, CIDRs, options ------------------------------------------------------------

paths = st.one_of(anything, st.from_regex(r"(/[A-Za-z0-9._~ $;-]{0,6}){0,5}/?", fullmatch=True),
                  st.lists(st.sampled_from(["", ".", "..", "a", "b c", "x\n"]), max_size=5)
                  .map(lambda parts: "/" + "/".join(parts)))


@FAST
@given(paths)
@example("/\n/")  # found by hypothesis: "$" matched before the newline
@example("//0")  # found by hypothesis: normpath keeps a leading "//"
def test_absolute_paths(text):
    path = outcome(adapter(f.AbsolutePath), text)
    if path is not None:
        assert path.startswith("/") and f.SAFE_PATH_RE.match(path)
        assert "//" not in path and ".." not in path.split("/") and "." not in path.split("/")
        assert adapter(f.AbsolutePath)(path) == path


@FAST
@given(paths)
def test_sub_paths(text):
    sub = outcome(adapter(SubPath), text.lstrip("/"))
    if sub is not None:
        assert ".." not in sub.split("/")


hosts = st.one_of(anything, st.ip_addresses().map(str),
                  st.from_regex(r"[a-zA-Z0-9-]{1,10}(\.[a-zA-Z0-9-]{1,10}){0,3}", fullmatch=True))


@FAST
@given(hosts)
@example("fe80::1%$(reboot)")  # a scoped IPv6 address carries free text
def test_hosts(text):
    host = outcome(adapter(f.HostName), text)
    if host is not None:
        assert all(ch in string.ascii_lowercase + string.digits + ".-:" for ch in host)
        assert adapter(f.HostName)(host) == host


cidrs = st.one_of(anything, st.builds(lambda ip, n: f"{ip}/{n}", st.ip_addresses(),
                                      st.integers(-1, 130)))


@FAST
@given(cidrs)
@example("fe80::%a b/64")  # a scoped IPv6 network carries free text
def test_cidrs(text):
    cidr = outcome(adapter(f.Cidr), text)
    if cidr is not None:
        assert str(ipaddress.ip_network(cidr)) == cidr
        assert f.OPTION_RE.fullmatch(cidr)  # safe for /etc/exports


options = st.one_of(anything, st.from_regex(r"[a-z_]{1,8}(=[a-z0-9/:.,]{0,8})?(,[a-z_=]{1,6})*",
                                            fullmatch=True))


@FAST
@given(options)
def test_mount_and_export_options(text):
    for tp in (f.MountOption, f.OptionString):
        value = outcome(adapter(tp), text)
        if value:
            assert f.OPTION_RE.match(value) and not has_control(value)


# -- the CLI's numeric flags -----------------------------------------------------------------


@FAST
@given(st.one_of(anything, big_ints, st.sampled_from(["nan", "inf", "-inf", "1e999", "1_0"]),
                 st.floats().map(str)))
def test_numeric_flags(text):
    from cheeto_like.cli.app import CheetoArgumentParser

    parser = CheetoArgumentParser(prog="t")
    parser.add_argument("--n", type=int)
    parser.add_argument("--x", type=float)
    for flag, check in (("--n", lambda v: -(2**63) <= v < 2**63),
                        ("--x", lambda v: v == v and abs(v) != float("inf"))):
        action = next(a for a in parser._actions if flag in a.option_strings)
        try:
            value = parser._get_value(action, text)
        except argparse.ArgumentError:
            continue
        assert check(value)


# -- request SLA targets (issue 16) ---------------------------------------------------------

sla_targets = st.one_of(anything, st.from_regex(
    r"\A\s*[0-9]{1,6}(\.[0-9]{1,4})?\s*(d|bd|h|bh|D|H)\s*\Z"))


@FAST
@given(sla_targets)
@example("1e309d")
@example("0.0000001h")
def test_sla_targets(text):
    from cheeto_like.sla import MAX_TARGET_DAYS, parse_target

    days = outcome(parse_target, text, value_errors=("cannot read SLA target", "SLA target"))
    if days is not None:
        assert 0 < days <= MAX_TARGET_DAYS
