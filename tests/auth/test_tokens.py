"""Signed tokens and their key file: made 0600 on first use, refused when others can
read it; expiry, audience, issuer, tampering and missing claims are all refused. A
token names a user id and token version (``Subject``), never a login."""

from __future__ import annotations

import os
import stat
import time

import jwt
import pytest

from cheeto_like.auth.tokens import BadToken, Subject, TokenIssuer, load_or_create_key
from cheeto_like.errors import ConfigError, InvalidInput

ALICE = Subject(id="0f" * 16, version=3)


def issuer(key: bytes = b"k" * 64, **kw: object) -> TokenIssuer:
    fields: dict[str, object] = {"issuer": "cheeto", "audience": "cheeto-api",
                                 "ttl_seconds": 3600.0}
    fields.update(kw)
    return TokenIssuer(key, **fields)  # type: ignore[arg-type]


def test_key_file_is_made_once_private(tmp_path):
    path = tmp_path / "state" / "jwt.key"
    key = load_or_create_key(path)
    assert len(key) == 64
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert load_or_create_key(path) == key  # the same key next time


def test_a_readable_key_file_is_refused(tmp_path):
    path = tmp_path / "jwt.key"
    load_or_create_key(path)
    os.chmod(path, 0o644)
    with pytest.raises(ConfigError, match="readable by others"):
        load_or_create_key(path)


def test_round_trip_and_claims():
    token, claims = issuer().issue(ALICE)
    back = issuer().verify(token)
    assert back == claims and back.sub == ALICE.id and back.ver == 3
    assert back.exp - back.iat == 3600
    data = jwt.decode(token, options={"verify_signature": False})
    assert {"iss", "aud", "sub", "ver", "iat", "exp", "jti"} <= set(data)
    assert data["iss"] == "cheeto" and data["aud"] == "cheeto-api"
    assert issuer().issue(ALICE)[1].jti != claims.jti


@pytest.mark.parametrize("other", [
    {"key": b"x" * 64}, {"audience": "someone-else"}, {"issuer": "elsewhere"}])
def test_foreign_tokens_are_refused(other):
    token, _ = issuer(**other).issue(ALICE)
    with pytest.raises(BadToken, match="invalid token"):
        issuer().verify(token)


def test_expired_tokens_are_refused():
    token, _ = issuer().issue(ALICE, ttl_seconds=60, now=time.time() - 600)
    with pytest.raises(BadToken, match="expired"):
        issuer().verify(token)


def test_missing_claims_and_other_algorithms_are_refused():
    key = b"k" * 64
    no_jti = jwt.encode({"iss": "cheeto", "aud": "cheeto-api", "sub": "a", "iat": 1,
                         "exp": int(time.time()) + 60}, key, algorithm="HS256")
    with pytest.raises(BadToken):
        issuer(key).verify(no_jti)
    unsigned = jwt.encode({"sub": "a"}, None, algorithm="none")
    with pytest.raises(BadToken):
        issuer(key).verify(unsigned)
    token, _ = issuer(key).issue(ALICE)
    head, body, sig = token.split(".")
    with pytest.raises(BadToken):
        issuer(key).verify(f"{head}.{body}.{sig[:-2]}AA")


def test_lifetimes_are_bounded():
    with pytest.raises(InvalidInput):
        issuer().issue(ALICE, ttl_seconds=0)
    with pytest.raises(InvalidInput):
        issuer().issue(ALICE, ttl_seconds=365 * 86400)


def test_tokens_name_a_subject_never_a_login():
    with pytest.raises(TypeError):
        issuer().issue("alice")  # type: ignore[arg-type]


def test_tokens_from_before_versions_are_refused():
    """A token of the release before (``sub`` a login, no ``ver``): sign in again."""
    key = b"k" * 64
    old = jwt.encode({"iss": "cheeto", "aud": "cheeto-api", "sub": "alice", "iat": 1,
                      "jti": "abcdefghij", "exp": int(time.time()) + 60}, key,
                     algorithm="HS256")
    with pytest.raises(BadToken, match="older release: sign in again"):
        issuer(key).verify(old)


@pytest.mark.parametrize("ver", ["1", True, -1, 1.5, [1]])
def test_a_malformed_version_is_refused(ver):
    key = b"k" * 64
    token = jwt.encode({"iss": "cheeto", "aud": "cheeto-api", "sub": ALICE.id, "ver": ver,
                        "iat": 1, "jti": "abcdefghij", "exp": int(time.time()) + 60}, key,
                       algorithm="HS256")
    with pytest.raises(BadToken, match="invalid token"):
        issuer(key).verify(token)
