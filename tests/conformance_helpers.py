"""Helpers shared by the store conformance modules (``test_store_conformance*.py``)."""

from __future__ import annotations

from cheeto_like.models import User


def user_doc(name: str, uid: int, **extra: object) -> User:
    return User(name=name, email=f"{name}@example.org", uid=uid, gid=uid,
                fullname=f"{name} Tester", home_directory=f"/home/{name}", **extra)


class Boom(Exception):
    """Raised on purpose inside a transaction."""
