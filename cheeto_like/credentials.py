"""Passwords and SSH public keys: hashing, generation and validation.

Passwords are stored only as yescrypt MCF hashes (``$y$…``), which slapd's ``{CRYPT}``
scheme and PAM both verify through libxcrypt. SSH keys are checked for shape (type,
base64 blob whose embedded type matches) before they are stored.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
import struct
from dataclasses import dataclass
from functools import cache

from .errors import InvalidInput
from .text import has_control

SALT_BYTES = 16  # what crypt_gensalt uses for yescrypt
SSH_KEY_TYPES = (
    "ssh-ed25519", "ssh-rsa", "ssh-dss", "ecdsa-sha2-nistp256", "ecdsa-sha2-nistp384",
    "ecdsa-sha2-nistp521", "sk-ssh-ed25519@openssh.com", "sk-ecdsa-sha2-nistp256@openssh.com",
)


def hash_password(plaintext: str) -> str:
    """yescrypt MCF hash with a fresh random salt (so equal passwords hash differently)."""
    from pyescrypt import Mode, Yescrypt

    if not plaintext:
        raise InvalidInput("password must not be empty")
    hasher = Yescrypt(mode=Mode.MCF)
    return hasher.digest(password=plaintext.encode(), salt=os.urandom(SALT_BYTES)).decode()


def verify_password(plaintext: str, hashed: str) -> bool:
    from pyescrypt import Mode, WrongPassword, Yescrypt

    try:
        Yescrypt(mode=Mode.MCF).compare(plaintext.encode(), hashed.encode())
    except WrongPassword:
        return False
    return True


@cache
def _wordlist() -> list[str]:
    from xkcdpass import xkcd_password as xp

    return xp.generate_wordlist(wordfile=xp.locate_wordfile(), min_length=4, max_length=8)


def generate_password(words: int = 4) -> str:
    """A memorable random passphrase (xkcd style), e.g. ``anvil-gangway-reboot-grudge``."""
    from xkcdpass import xkcd_password as xp

    return xp.generate_xkcdpassword(_wordlist(), numwords=words, delimiter="-")


@dataclass(frozen=True)
class SshPublicKey:
    type: str
    blob: str
    comment: str

    @property
    def text(self) -> str:
        return f"{self.type} {self.blob}" + (f" {self.comment}" if self.comment else "")

    @property
    def fingerprint(self) -> str:
        """``SHA256:…`` as printed by ``ssh-keygen -l``."""
        digest = hashlib.sha256(base64.b64decode(self.blob)).digest()
        return "SHA256:" + base64.b64encode(digest).decode().rstrip("=")


def _key_fields(raw: bytes) -> list[bytes]:
    """Split SSH wire-format key data into its length-prefixed fields; it must be
    consumed exactly, so truncated or padded key material is refused."""
    fields, offset = [], 0
    while offset < len(raw):
        if offset + 4 > len(raw):
            raise ValueError("truncated length")
        (length,) = struct.unpack(">I", raw[offset:offset + 4])
        offset += 4
        if length == 0 or offset + length > len(raw):
            raise ValueError("truncated field")
        fields.append(raw[offset:offset + length])
        offset += length
    return fields


# key type -> (number of fields after the type, a fixed size for the last one or None)
_KEY_SHAPES = {
    "ssh-ed25519": (1, 32), "sk-ssh-ed25519@openssh.com": (2, None),
    "ssh-rsa": (2, None), "ssh-dss": (4, None),
    "ecdsa-sha2-nistp256": (2, None), "ecdsa-sha2-nistp384": (2, None),
    "ecdsa-sha2-nistp521": (2, None), "sk-ecdsa-sha2-nistp256@openssh.com": (3, None),
}


SSH_KEY_MAX_LEN = 16 * 1024  # an RSA-16384 key is about 2.8 KB of base64


def parse_ssh_key(text: str) -> SshPublicKey:
    """Validate one OpenSSH public key line (type, complete key data, optional comment).

    Options such as ``from=…`` are refused: they belong in authorized_keys, not here.
    """
    line = " ".join(text.strip().split())
    if not line:
        raise InvalidInput("SSH key is empty")
    if "\n" in text.strip():
        raise InvalidInput("give one SSH key at a time")
    if len(line) > SSH_KEY_MAX_LEN:
        raise InvalidInput(f"SSH key is longer than {SSH_KEY_MAX_LEN} characters")
    if has_control(line):
        # A comment with terminal escapes would rewrite the screen of whoever lists keys.
        raise InvalidInput("SSH key contains control characters")
    parts = line.split(" ", 2)
    key_type = parts[0]
    if key_type not in SSH_KEY_TYPES:
        if "=" in key_type or "," in key_type or (len(parts) > 1 and parts[1] in SSH_KEY_TYPES):
            raise InvalidInput("SSH key options (from=…, command=…) are not accepted")
        raise InvalidInput(f"unsupported SSH key type {key_type!r}")
    if len(parts) < 2:
        raise InvalidInput("SSH key must look like '<type> <base64> [comment]'")
    blob = parts[1]
    comment = parts[2] if len(parts) == 3 else ""
    try:
        fields = _key_fields(base64.b64decode(blob, validate=True))
        embedded = fields[0].decode()
    except (binascii.Error, ValueError, IndexError, UnicodeDecodeError):
        raise InvalidInput("SSH key data is not valid base64 key material") from None
    if embedded != key_type:
        raise InvalidInput(f"SSH key data is a {embedded!r} key but is labelled {key_type!r}")
    count, last_size = _KEY_SHAPES[key_type]
    if len(fields) != count + 1 or (last_size is not None and len(fields[-1]) != last_size):
        raise InvalidInput(f"SSH key data for {key_type} is incomplete or malformed")
    return SshPublicKey(key_type, blob, comment)
