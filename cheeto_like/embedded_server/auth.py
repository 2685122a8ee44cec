"""SCRAM-SHA-256 for TCP connections (the token as password).

Part of the embedded store's server (the package docstring says why it exists).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from dataclasses import dataclass

from ..embedded_common import (
    TOKEN_USER,
)


@dataclass
class ScramConversation:
    client_first_bare: bytes
    server_first: bytes
    nonce: bytes


class Scram:
    """The server side of SCRAM-SHA-256 (RFC 5802/7677) for the one user ``cheeto`` whose
    password is the token. The salted password is derived once per server process."""

    ITERATIONS = 4096  # pymongo refuses fewer

    def __init__(self, token: str) -> None:
        from pymongo.saslprep import saslprep

        self.salt = secrets.token_bytes(16)
        salted = hashlib.pbkdf2_hmac("sha256", saslprep(token).encode(), self.salt,
                                     self.ITERATIONS)
        client_key = hmac.digest(salted, b"Client Key", "sha256")
        self.stored_key = hashlib.sha256(client_key).digest()
        self.server_key = hmac.digest(salted, b"Server Key", "sha256")

    def start(self, payload: bytes) -> ScramConversation | None:
        """``n,,n=cheeto,r=<client nonce>``: answer with our nonce, salt and iterations."""
        if not payload.startswith(b"n,,"):
            return None  # channel binding or an authzid: not offered
        bare = payload[3:]
        fields = dict(item.split(b"=", 1) for item in bare.split(b",") if b"=" in item)
        if fields.get(b"n") != TOKEN_USER.encode() or not fields.get(b"r"):
            return None
        nonce = fields[b"r"] + base64.b64encode(secrets.token_bytes(18))
        server_first = (b"r=" + nonce + b",s=" + base64.b64encode(self.salt)
                        + b",i=" + str(self.ITERATIONS).encode())
        return ScramConversation(bare, server_first, nonce)

    def finish(self, conversation: ScramConversation, payload: bytes) -> bytes | None:
        """``c=biws,r=<nonce>,p=<proof>``: the server signature, or None if the proof is
        wrong."""
        without_proof, sep, proof_field = payload.rpartition(b",p=")
        if not sep or without_proof != b"c=biws,r=" + conversation.nonce:
            return None
        try:
            proof = base64.b64decode(proof_field, validate=True)
        except ValueError:
            return None
        auth_message = b",".join((conversation.client_first_bare, conversation.server_first,
                                  without_proof))
        client_signature = hmac.digest(self.stored_key, auth_message, "sha256")
        if len(proof) != len(client_signature):
            return None
        client_key = bytes(a ^ b for a, b in zip(proof, client_signature, strict=True))
        if not hmac.compare_digest(hashlib.sha256(client_key).digest(), self.stored_key):
            return None
        return base64.b64encode(hmac.digest(self.server_key, auth_message, "sha256"))
