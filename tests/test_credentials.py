"""Passwords (yescrypt hashes with a fresh salt, verification, generated passphrases) and
SSH public keys (shape checks that refuse options, mislabelled types and bad base64; the
fingerprint matches ``ssh-keygen -l``). Real keys come from ssh-keygen."""

from __future__ import annotations

import base64
import shutil
import struct
from pathlib import Path

import pytest

from cheeto_like.credentials import (
    generate_password,
    hash_password,
    parse_ssh_key,
    verify_password,
)
from cheeto_like.errors import InvalidInput

from .factories import ED25519_KEY, ssh_keygen

HAVE_SSH_KEYGEN = shutil.which("ssh-keygen") is not None


def _field(data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + data


# Structurally valid key data (field counts and sizes) for each supported type.
_FIELDS = {
    "ssh-ed25519": [b"\x00" * 32],
    "ssh-rsa": [b"\x01\x00\x01", b"\x00" + b"\x7f" * 256],
    "ecdsa-sha2-nistp256": [b"nistp256", b"\x04" + b"\x01" * 64],
    "sk-ssh-ed25519@openssh.com": [b"\x00" * 32, b"ssh:"],
}


def blob_for(key_type: str, payload: bytes | None = None) -> str:
    fields = [payload] if payload is not None else _FIELDS.get(key_type, [b"\x00" * 32])
    raw = _field(key_type.encode()) + b"".join(_field(f) for f in fields)
    return base64.b64encode(raw).decode()


# -- passwords -------------------------------------------------------------------------------


def test_hash_is_yescrypt_and_salted_per_call():
    first, second = hash_password("hunter2"), hash_password("hunter2")
    assert first.startswith("$y$") and second.startswith("$y$")
    assert first != second
    assert "hunter2" not in first


def test_verify_password():
    hashed = hash_password("correct horse")
    assert verify_password("correct horse", hashed)
    assert not verify_password("correct horse ", hashed)
    assert not verify_password("", hashed)


def test_unicode_password_round_trips():
    hashed = hash_password("pässwörd-✓")
    assert verify_password("pässwörd-✓", hashed)


def test_empty_password_is_refused():
    with pytest.raises(InvalidInput, match="must not be empty"):
        hash_password("")


def test_generated_password_shape():
    password = generate_password()
    words = password.split("-")
    assert len(words) == 4
    assert all(4 <= len(w) <= 8 for w in words)
    assert generate_password(words=6).count("-") == 5
    assert len({generate_password() for _ in range(5)}) == 5


# -- SSH keys: valid -------------------------------------------------------------------------


def real_keys(tmp_path: Path) -> list[tuple[str, str]]:
    """(public key line, ssh-keygen fingerprint) for ed25519, rsa and ecdsa keys."""
    if not HAVE_SSH_KEYGEN:
        return [(ED25519_KEY, "")]
    return [ssh_keygen(tmp_path, kind, name=kind) for kind in ("ed25519", "rsa", "ecdsa")]


def test_real_keys_parse_and_fingerprint_like_ssh_keygen(tmp_path):
    for line, fingerprint in real_keys(tmp_path):
        key = parse_ssh_key(line)
        key_type, blob, comment = line.split(" ", 2)
        assert (key.type, key.blob, key.comment) == (key_type, blob, comment)
        assert key.text == line
        assert key.fingerprint.startswith("SHA256:")
        if fingerprint:
            assert key.fingerprint == fingerprint


def test_known_ed25519_key_parses():
    key = parse_ssh_key(ED25519_KEY)
    assert (key.type, key.comment) == ("ssh-ed25519", "alice@laptop")


def test_whitespace_is_normalised_and_comment_optional():
    blob = blob_for("ssh-ed25519")
    key = parse_ssh_key(f"\n  ssh-ed25519\t{blob}   my   laptop \n")
    assert (key.blob, key.comment) == (blob, "my laptop")
    bare = parse_ssh_key(f"ssh-ed25519 {blob}")
    assert bare.comment == "" and bare.text == f"ssh-ed25519 {blob}"


@pytest.mark.parametrize("key_type", ["ssh-rsa", "ecdsa-sha2-nistp256",
                                      "sk-ssh-ed25519@openssh.com"])
def test_other_supported_types(key_type):
    assert parse_ssh_key(f"{key_type} {blob_for(key_type)} c").type == key_type


# -- SSH keys: refused -----------------------------------------------------------------------


@pytest.mark.parametrize(("text", "message"), [
    ("", "empty"),
    ("   \n ", "empty"),
    ("ssh-ed25519", "must look like"),
    (f"ssh-rsa {blob_for('ssh-ed25519')} c", "is a 'ssh-ed25519' key but is labelled 'ssh-rsa'"),
    ("ssh-ed25519 !!!notbase64!!! c", "not valid base64"),
    ("ssh-ed25519 AAAA c", "not valid base64"),
    (f"ssh-foo {blob_for('ssh-foo')} c", "SSH key"),
    (f"ssh-foo {blob_for('ssh-foo')}", "unsupported SSH key type 'ssh-foo'"),
    (f'from="10.0.0.1" ssh-ed25519 {blob_for("ssh-ed25519")} c', "options"),
    (f'command="/bin/true",no-pty ssh-ed25519 {blob_for("ssh-ed25519")} c', "options"),
    (f'environment="A=b c" ssh-ed25519 {blob_for("ssh-ed25519")}', "options"),
    (f"no-pty ssh-ed25519 {blob_for('ssh-ed25519')} c", "options"),
    (f"ssh-ed25519 {blob_for('ssh-ed25519')} a\nssh-ed25519 {blob_for('ssh-ed25519')} b",
     "one SSH key at a time"),
])
def test_bad_keys_are_invalid_input(text, message):
    with pytest.raises(InvalidInput, match=message):
        parse_ssh_key(text)


def test_private_key_is_refused(tmp_path):
    if HAVE_SSH_KEYGEN:
        ssh_keygen(tmp_path, "ed25519", name="k")
        private = (tmp_path / "k").read_text()
    else:
        private = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXk\n-----END OPENSSH"
    with pytest.raises(InvalidInput):
        parse_ssh_key(private)
