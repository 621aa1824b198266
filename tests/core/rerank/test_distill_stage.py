"""Distillation as a pipeline piece: a reranker version teaches, a dual-encoder version comes out (real SQLite)."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy.orm import Session

from ferret.core.db.model_version import create_model_version, find_model_version
from ferret.core.encoder.registry import ModelRegistry, base_model_path
from ferret.core.errors import ConflictError, InvalidInputError
from ferret.core.rerank.cross_encoder import CROSS_ENCODER_KIND
from ferret.core.rerank.stage import distill_encoder, register_reranker
from ferret.core.rerank.training import TrainingGroup
from ferret.core.settings import FerretSettings
from ferret.core.training.distillation import DistillationConfig

GROUPS = [
    TrainingGroup("aspirin and platelets", "Aspirin blocks platelet aggregation.", ["Paris hosted the 1889 fair."]),
    TrainingGroup("tower built in paris", "The Eiffel Tower opened in 1889.", ["Chloroplasts capture light."]),
]


@pytest.fixture
def home(settings: FerretSettings, session: Session) -> tuple[FerretSettings, Session]:
    ModelRegistry(session, settings).ensure_base()
    return settings, session


@pytest.mark.slow
def test_a_reranker_teaches_a_new_dual_encoder_version(home: tuple[FerretSettings, Session], tmp_path: Path) -> None:
    from sentence_transformers import CrossEncoder

    settings, session = home
    CrossEncoder(str(base_model_path()), num_labels=1, device="cpu").save(str(tmp_path / "teacher"))
    teacher = register_reranker(session, "rr", tmp_path / "teacher", training={})
    config = DistillationConfig(epochs=1, cpu_min_steps=2, batch_size=2)
    student = distill_encoder(session, settings, GROUPS, teacher, "distilled", config, minimum_pairs=1)
    base = find_model_version(session, "base")
    assert student.kind == "dual_encoder" and base is not None and student.parent_id == base.id
    assert student.training_config is not None and student.training_config["objective"] == "margin-mse"
    assert student.training_config["teacher"] == "rr" and student.training_config["steps"] == 2
    assert (Path(student.path) / "config.json").is_file() and student.dimension == 384
    assert distill_encoder(session, settings, GROUPS, teacher, "distilled", config, minimum_pairs=1) == student


def test_bad_teachers_and_too_few_groups_are_refused_without_a_version(
    home: tuple[FerretSettings, Session], tmp_path: Path
) -> None:
    settings, session = home
    base = find_model_version(session, "base")
    assert base is not None
    with pytest.raises(InvalidInputError, match="'base' is not a cross-encoder reranker"):
        distill_encoder(session, settings, GROUPS, base, "d1")
    gone = create_model_version(session, "rr-gone", str(tmp_path / "nowhere"), 1)
    gone.kind = CROSS_ENCODER_KIND
    with pytest.raises(ConflictError, match="reranker 'rr-gone' are missing"):
        distill_encoder(session, settings, GROUPS, gone, "d2")
    (tmp_path / "teacher").mkdir()
    (tmp_path / "teacher" / "config.json").write_text("{}")
    teacher = register_reranker(session, "rr", tmp_path / "teacher", training={})
    with pytest.raises(InvalidInputError, match="Only 2 kept synthetic pairs; distillation needs at least 200"):
        distill_encoder(session, settings, GROUPS, teacher, "d3")
    assert all(find_model_version(session, n) is None for n in ("d1", "d2", "d3"))
    assert not (settings.models_path / "d3").exists()
