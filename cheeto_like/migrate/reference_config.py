"""Translate a cheeto v2 (reference) config file into this project's format.

Most keys mean the same thing in both; the differences are handled here and every key
that does not survive is *reported* (with the reason), never silently dropped:
- ``mongo``: the reference gives a host in ``uri`` (or ``host``) and the port apart;
  here the URI carries both. ``old_database`` (the v1 migration's source) has no use.
- ``ldap``: only simple binds exist here (no GSSAPI), and no client debug switches;
  a bare server name becomes an ``ldap://`` URL (``ldaps://`` on port 636).
- every other key is kept when this project has it (nested blocks field by field) and
  checked by this project's own config models, so the output loads as it is.
"""

from __future__ import annotations

import types
import typing
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ValidationError

from ..config import (
    PROFILED_SECTIONS,
    ApiConfig,
    Block,
    DaemonConfig,
    HippoConfig,
    IAMConfig,
    LDAPConfig,
    MongoConfig,
)
from ..validation import describe_validation_error

SECTIONS: dict[str, type[Block]] = {
    "mongo": MongoConfig, "ldap": LDAPConfig, "daemon": DaemonConfig, "api": ApiConfig,
    "hippo": HippoConfig, "ucdiam": IAMConfig,
}
LDAP_UNSUPPORTED = {
    "gssapi_keytab": "GSSAPI binds are not supported (simple binds only)",
    "gssapi_realm": "GSSAPI binds are not supported (simple binds only)",
    "debug": "no LDAP client debug switch here (use --log --log-level DEBUG)",
    "debug_level": "no LDAP client debug switch here (use --log --log-level DEBUG)",
}


@dataclass
class Translation:
    data: dict[str, Any] = field(default_factory=dict)
    dropped: list[str] = field(default_factory=list)  # "path: reason"
    notes: list[str] = field(default_factory=list)  # kept, but changed

    def drop(self, path: str, reason: str) -> None:
        self.dropped.append(f"{path}: {reason}")


def _block_type(annotation: Any) -> type[BaseModel] | None:
    """The Block model a field holds (directly or as ``X | None``), else None."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        for arg in typing.get_args(annotation):
            if isinstance(arg, type) and issubclass(arg, BaseModel):
                return arg
    return None


def fit(model: type[BaseModel], data: dict[str, Any], path: str, out: Translation) -> dict:
    """Keep the keys ``model`` has (recursing into nested blocks), report the rest, then
    drop (and report) values the model refuses, until what is left validates."""
    kept: dict[str, Any] = {}
    for key, value in data.items():
        where = f"{path}.{key}"
        info = model.model_fields.get(key)
        if info is None:
            out.drop(where, "not a setting here")
            continue
        nested = _block_type(info.annotation)
        if nested is not None and isinstance(value, dict):
            kept[key] = fit(nested, value, where, out)
        elif isinstance(value, dict) and typing.get_origin(info.annotation) is dict:
            inner = typing.get_args(info.annotation)
            inner_model = _block_type(inner[1]) if len(inner) == 2 else None
            kept[key] = ({k: fit(inner_model, v, f"{where}.{k}", out) if isinstance(v, dict)
                          else v for k, v in value.items()} if inner_model else value)
        else:
            kept[key] = value
    for _ in range(len(kept) + 1):
        try:
            model.model_validate(kept)
            return kept
        except ValidationError as exc:
            reasons: dict[str, list[str]] = {}
            for err in exc.errors():  # messages only: a refused value may be a secret
                if err["loc"] and str(err["loc"][0]) in kept:
                    reasons.setdefault(str(err["loc"][0]), []).append(err["msg"])
            if not reasons:  # a missing required key: the block cannot stand
                out.drop(path, f"left out: {describe_validation_error(exc)}")
                return {}
            for key, messages in sorted(reasons.items()):
                out.drop(f"{path}.{key}", f"refused ({'; '.join(dict.fromkeys(messages))})")
                kept.pop(key)
    return kept


def _mongo(block: dict[str, Any], path: str, out: Translation) -> dict[str, Any]:
    block = dict(block)
    host = block.pop("host", None) or block.get("uri")
    port = block.pop("port", None)
    if "old_database" in block:
        block.pop("old_database")
        out.drop(f"{path}.old_database", "only the v1 migration used it")
    if host and not str(host).startswith(("mongodb://", "mongodb+srv://")):
        netloc = f"{host}:{port}" if port else str(host)
        block["uri"] = f"mongodb://{netloc}/"
        out.notes.append(f"{path}: host {host} and port {port} became uri {block['uri']}")
    elif host and port:
        block["uri"] = host
        out.drop(f"{path}.port", "the URI names its own port")
    return block


def _ldap(block: dict[str, Any], path: str, out: Translation) -> dict[str, Any]:
    block = dict(block)
    for key, reason in LDAP_UNSUPPORTED.items():
        if key in block:
            block.pop(key)
            out.drop(f"{path}.{key}", reason)
    mechanism = block.pop("auth_mechanism", None)
    if mechanism is not None and str(mechanism).upper() != "SIMPLE":
        out.drop(f"{path}.auth_mechanism", f"{mechanism} is not supported (simple binds only)")
    elif mechanism is not None:
        out.notes.append(f"{path}.auth_mechanism: SIMPLE is the only kind here (left out)")
    servers = block.get("servers")
    if isinstance(servers, str):
        servers = [servers]
    if isinstance(servers, list):
        urls = []
        for server in servers:
            text = str(server)
            if "://" not in text:
                scheme = "ldaps" if text.endswith(":636") else "ldap"
                out.notes.append(f"{path}.servers: {text} became {scheme}://{text}")
                text = f"{scheme}://{text}"
            urls.append(text)
        block["servers"] = urls
    return block


SPECIAL = {"mongo": _mongo, "ldap": _ldap}


def translate(reference: dict[str, Any]) -> Translation:
    """The whole file: profiled sections profile by profile, global ones once."""
    out = Translation()
    for section, value in reference.items():
        model = SECTIONS.get(section)
        if model is None:
            out.drop(section, "not a section here")
            continue
        if not isinstance(value, dict):
            out.drop(section, "not a mapping")
            continue
        if section in PROFILED_SECTIONS:
            profiles: dict[str, Any] = {}
            for profile, block in value.items():
                path = f"{section}.{profile}"
                if not isinstance(block, dict):
                    out.drop(path, "not a mapping")
                    continue
                block = SPECIAL.get(section, lambda b, p, o: b)(block, path, out)
                fitted = fit(model, block, path, out)
                if fitted or not block:
                    profiles[profile] = fitted
            if profiles:
                out.data[section] = profiles
        else:
            fitted = fit(model, value, section, out)
            if fitted:
                out.data[section] = fitted
    return out
