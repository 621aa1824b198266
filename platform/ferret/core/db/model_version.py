"""Queries on the model registry."""

from __future__ import annotations

import re
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from ferret.core.db.models import ModelVersion
from ferret.core.errors import ConflictError, InvalidInputError, NotFoundError

MODEL_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
"""A model version's name: it names its folder under FERRET_HOME/models, so no path ("../x", "/srv/x")."""


def validate_model_name(name: str) -> str:
    """``name`` if it can name a new model version (and its folder), else one sentence saying what can."""
    if not MODEL_NAME.match(name):
        raise InvalidInputError(
            f"Model name {name!r} must be 1-128 letters, digits, dots, dashes or underscores, starting with a letter "
            "or digit."
        )
    return name


def get_model_version(session: Session, name: str) -> ModelVersion:
    model = session.scalar(select(ModelVersion).where(ModelVersion.name == name))
    if model is None:
        known = ", ".join(m.name for m in list_model_versions(session)) or "none yet"
        raise NotFoundError(f"Model version {name!r} does not exist (known: {known}).")
    return model


def find_model_version(session: Session, name: str) -> ModelVersion | None:
    return session.scalar(select(ModelVersion).where(ModelVersion.name == name))


def list_model_versions(session: Session) -> list[ModelVersion]:
    return list(session.scalars(select(ModelVersion).order_by(ModelVersion.id)))


def create_model_version(
    session: Session,
    name: str,
    path: str,
    dimension: int,
    *,
    parent: ModelVersion | None = None,
    training_config: dict[str, Any] | None = None,
    metrics: dict[str, Any] | None = None,
) -> ModelVersion:
    if find_model_version(session, name) is not None:
        raise ConflictError(f"Model version {name!r} already exists.")
    model = ModelVersion(
        name=name,
        path=path,
        dimension=dimension,
        parent_id=parent.id if parent else None,
        training_config=training_config,
        metrics=metrics or {},
    )
    session.add(model)
    session.flush()
    return model
