"""Tripwires for framework pitfalls in the data model.

- Ids are strings and no field is a beanie ``Link``/``BackLink``, ObjectId or DBRef (the
  embedded store mishandles them; DESIGN §5).
- Every field that names a user or a group is listed in ``models/references.py``, so a
  rename cannot miss one, and every listed reference points at a real field.
- Documents re-validate on save (a subclass ``Settings`` must not drop the base's).
- Collection names and indexes stay inside the portable subset.
"""

from __future__ import annotations

import types
import typing
from typing import Any, get_args, get_origin

import pytest
from beanie import BackLink, Link, PydanticObjectId
from bson import DBRef, ObjectId
from pydantic import BaseModel

from cheeto_like.models import (
    ALL_MODELS,
    AuditFinding,
    JobSnapshot,
    SnapshotJob,
    SyncLease,
    SyncRunItem,
    SyncStep,
)
from cheeto_like.models.base import BaseDoc
from cheeto_like.models.references import GROUP_REFERENCES, USER_REFERENCES

USER_REF_NAMES = {"user", "owner", "coordinators", "target_user", "author"}
GROUP_REF_NAMES = {"group", "account", "sticky", "default_account", "target_groups"}
FORBIDDEN = (Link, BackLink, PydanticObjectId, ObjectId, DBRef)
# ``_id`` given by the caller: ``<target>:<site>``, ``<run id>:<item index>``,
# ``<audit run id>:<f|r>:<index>``, the site, ``<site>:<snapshot>:<job id>``
NATURAL_KEY_IDS = {SyncLease, SyncStep, SyncRunItem, AuditFinding, JobSnapshot, SnapshotJob}


def leaf_types(annotation: Any) -> list[Any]:
    """Every type named inside an annotation (unions, lists, dicts, Annotated)."""
    origin = get_origin(annotation)
    if origin is typing.Annotated:
        return leaf_types(get_args(annotation)[0])
    if origin is None:
        return [annotation]
    found = [origin] if origin not in (typing.Union, types.UnionType) else []
    for arg in get_args(annotation):
        found.extend(leaf_types(arg))
    return found


def embedded_model(annotation: Any) -> type[BaseModel] | None:
    for leaf in leaf_types(annotation):
        if isinstance(leaf, type) and issubclass(leaf, BaseModel):
            return leaf
    return None


def walk_fields(model: type[BaseModel], prefix: str = "") -> list[tuple[str, Any]]:
    """(dotted path, annotation) of every field, descending into embedded models."""
    out: list[tuple[str, Any]] = []
    for name, info in model.model_fields.items():
        path = f"{prefix}{name}"
        out.append((path, info.annotation))
        inner = embedded_model(info.annotation)
        if inner is not None:
            out.extend(walk_fields(inner, f"{path}."))
    return out


def is_list_of_str(annotation: Any) -> bool:
    return list in leaf_types(annotation)


@pytest.mark.parametrize("model", ALL_MODELS, ids=lambda m: m.__name__)
def test_document_id_is_a_string(model):
    field = model.model_fields["id"]
    assert field.annotation is str, f"{model.__name__}.id is {field.annotation}"
    if model in NATURAL_KEY_IDS:
        assert field.is_required()
        return
    assert field.default_factory is not None, f"{model.__name__}.id has no default"
    value = field.default_factory()
    assert isinstance(value, str) and len(value) == 32 and int(value, 16) >= 0
    assert value != field.default_factory()


@pytest.mark.parametrize("model", ALL_MODELS, ids=lambda m: m.__name__)
def test_no_link_backlink_objectid_or_dbref_field(model):
    for path, annotation in walk_fields(model):
        for leaf in leaf_types(annotation):
            assert not (isinstance(leaf, type) and issubclass(leaf, FORBIDDEN)), (
                f"{model.__name__}.{path} uses {leaf}")


def _reference_fields(names: set[str]) -> set[tuple[str, str]]:
    found = set()
    for model in ALL_MODELS:
        for path, annotation in walk_fields(model):
            if path.rsplit(".", 1)[-1] in names and embedded_model(annotation) is None:
                found.add((model.__name__, path))
    return found


def test_every_user_reference_field_is_listed_for_renames():
    listed = {(ref.model.__name__, ref.field) for ref in USER_REFERENCES}
    missing = _reference_fields(USER_REF_NAMES) - listed
    assert not missing, f"add to USER_REFERENCES: {sorted(missing)}"


def test_every_group_reference_field_is_listed_for_renames():
    listed = {(ref.model.__name__, ref.field) for ref in GROUP_REFERENCES}
    missing = _reference_fields(GROUP_REF_NAMES) - listed
    assert not missing, f"add to GROUP_REFERENCES: {sorted(missing)}"


@pytest.mark.parametrize("ref", USER_REFERENCES + GROUP_REFERENCES,
                         ids=lambda r: f"{r.model.__name__}.{r.field}")
def test_listed_reference_is_a_real_field_with_the_right_shape(ref):
    fields = dict(walk_fields(ref.model))
    assert ref.field in fields, f"{ref} is not a field"
    assert is_list_of_str(fields[ref.field]) == ref.is_list, ref
    assert embedded_model(fields[ref.field]) is None


@pytest.mark.parametrize("model", [m for m in ALL_MODELS if issubclass(m, BaseDoc)],
                         ids=lambda m: m.__name__)
def test_documents_revalidate_on_save(model, store):
    assert issubclass(model.Settings, BaseDoc.Settings), (
        f"{model.__name__}.Settings must subclass BaseDoc.Settings")
    assert model.get_settings().validate_on_save


@pytest.mark.parametrize("model", ALL_MODELS, ids=lambda m: m.__name__)
def test_collection_names_and_indexes_stay_portable(model):
    name = model.Settings.name
    assert name and "." not in name
    for index in getattr(model.Settings, "indexes", []):
        keys = list(index.document["key"])
        assert "_id" not in keys, f"{name} index {keys} contains _id"
        assert "collation" not in index.document


def test_collection_names_are_unique():
    names = [m.Settings.name for m in ALL_MODELS]
    assert len(names) == len(set(names))
