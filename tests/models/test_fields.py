"""Field validators shared by documents and operation arguments: POSIX names, unix ids,
shells, e-mail addresses, quotas and site names. Pure pydantic, no store."""

from __future__ import annotations

from decimal import Decimal

import pytest
from pydantic import TypeAdapter, ValidationError

from cheeto_like.constants import DISABLED_SHELLS, ENABLED_SHELLS, ID_MAX
from cheeto_like.models.fields import (
    Email,
    Fqdn,
    PosixName,
    Quota,
    Shell,
    SiteAlias,
    SiteName,
    UnixId,
    UserType,
    parse_quota_mb,
)


def valid(kind: object, value: object) -> object:
    return TypeAdapter(kind).validate_python(value)


def refused(kind: object, value: object) -> str:
    with pytest.raises(ValidationError) as info:
        TypeAdapter(kind).validate_python(value)
    return str(info.value)


@pytest.mark.parametrize("name", ["a", "alice", "_svc", "a.b-c_d9", "x" * 32])
def test_posix_name_accepts(name):
    assert valid(PosixName, name) == name


def test_posix_name_strips_surrounding_space():
    assert valid(PosixName, "  alice ") == "alice"


def test_posix_name_refuses_33_characters():
    assert "longer than 32" in refused(PosixName, "x" * 33)


@pytest.mark.parametrize("name", ["", "Alice", "1abc", "-x", ".x", "a b", "a/b", "ab:c", "é"])
def test_posix_name_refuses_bad_names(name):
    refused(PosixName, name)


@pytest.mark.parametrize("value", [0, 1, 65534, ID_MAX])
def test_unix_id_accepts_0_to_2_pow_32_minus_1(value):
    assert valid(UnixId, value) == value


def test_id_max_is_the_largest_32_bit_id():
    assert ID_MAX == 4_294_967_295


@pytest.mark.parametrize("value", [-1, ID_MAX + 1, 2**40])
def test_unix_id_refuses_out_of_range(value):
    assert "outside 0..4294967295" in refused(UnixId, value)


@pytest.mark.parametrize("shell", ENABLED_SHELLS + DISABLED_SHELLS)
def test_shell_accepts_the_allow_list(shell):
    assert valid(Shell, shell) == shell


@pytest.mark.parametrize("shell", ["/bin/fish", "bash", "", "/usr/bin/bash "])
def test_shell_refuses_anything_else(shell):
    assert "not allowed" in refused(Shell, shell)


@pytest.mark.parametrize("email", ["a@example.org", "first.last+hpc@cs.ucdavis.edu",
                                   "o'neil@example.co.uk"])
def test_email_accepts(email):
    assert valid(Email, email) == email


@pytest.mark.parametrize("email", ["nope", "a@b", "a@@b.org", "a b@c.org", "@example.org",
                                   "a@example.", "a@.org"])
def test_email_refuses(email):
    assert "not a valid e-mail" in refused(Email, email)


@pytest.mark.parametrize(("text", "stored"), [("1.5T", "1.5T"), ("500g", "500G"),
                                               ("10M", "10M"), (" 2P ", "2P"), (".5T", ".5T")])
def test_quota_accepts_and_uppercases_the_unit(text, stored):
    assert valid(Quota, text) == stored


@pytest.mark.parametrize("text", ["10X", "-5G", "+5G", "10", "G", "1.T", "1,5T", "10GB", "1e3G",
                                  ""])
def test_quota_refuses_junk(text):
    assert "invalid quota" in refused(Quota, text)


def test_quota_parses_to_exact_binary_megabytes():
    assert parse_quota_mb("1.5T") == Decimal(1.5 * 1024 * 1024)
    assert parse_quota_mb("500g") == Decimal(500 * 1024)
    assert parse_quota_mb("0.1T") == Decimal("104857.6")


@pytest.mark.parametrize("name", ["farm", "hive-2", "f" * 63])
def test_site_name_accepts(name):
    assert valid(SiteName, name) == name


@pytest.mark.parametrize("name", ["Farm", "2farm", "farm_1", "farm.example", "f" * 64, ""])
def test_site_name_refuses(name):
    refused(SiteName, name)


def test_site_alias_and_fqdn_are_lowercased():
    assert valid(SiteAlias, "CaesFarm") == "caesfarm"
    assert valid(Fqdn, "Farm.Example.ORG") == "farm.example.org"


@pytest.mark.parametrize("fqdn", ["-farm.org", "farm..org", "farm org", "a" * 64 + ".org"])
def test_fqdn_refuses(fqdn):
    refused(Fqdn, fqdn)


def test_user_type_is_a_closed_set():
    assert valid(UserType, "admin") == "admin"
    assert "user type 'root'" in refused(UserType, "root")
