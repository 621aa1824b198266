"""Queries on the model registry."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from ferret.core.db.models import ModelVersion
from ferret.core.errors import ConflictError, NotFoundError


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
