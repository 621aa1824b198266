"""The reranker stage of a task: mine negatives for the kept pairs, train the cross-encoder, register its version.

The training groups are built here (they need the index and the database), the training itself runs in
``ferret.core.rerank.training`` (torch only), so the gpu queue or a GPU machine can run it on a groups file. The
held-out documents of the pipeline (``is_held_out``) are left out, as for the dual encoder: the configuration
guard judges on their queries.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from sqlalchemy.orm import Session

from ferret.core.corpus.chunking import passage_text
from ferret.core.db.model_version import create_model_version, find_model_version
from ferret.core.db.models import Corpus, GenerationRun, ModelVersion
from ferret.core.db.synthetic import document_texts, training_pairs
from ferret.core.encoder.registry import BASE_MODEL_NAME, base_model_path
from ferret.core.errors import ConflictError, InvalidInputError
from ferret.core.rerank.cross_encoder import CROSS_ENCODER_KIND, prepare_reranker
from ferret.core.rerank.training import (
    MIN_PAIRS,
    RerankerTrainingConfig,
    TrainingGroup,
    check_pair_count,
    mine_negatives,
    train_cross_encoder,
)
from ferret.core.search.configuration import SearchPlan
from ferret.core.search.searcher import Searcher
from ferret.core.settings import FerretSettings
from ferret.core.training.distillation import DistillationConfig, teacher_scores, train_margin_mse


def reranker_groups(
    session: Session,
    searcher: Searcher,
    corpus: Corpus,
    run: GenerationRun,
    first_stage: SearchPlan,
    *,
    held_out: Callable[[int], bool],
    config: RerankerTrainingConfig = RerankerTrainingConfig(),
) -> list[TrainingGroup]:
    """One group per kept pair of a training document: (query, its document, mined negatives). Fewer than
    ``MIN_PAIRS`` kept pairs are refused with their count."""
    pairs = [(q, d) for q, d in training_pairs(session, run) if not held_out(d)]
    check_pair_count(len(pairs))
    return mine_groups(session, searcher, corpus, pairs, first_stage, config)


def mine_groups(
    session: Session,
    searcher: Searcher,
    corpus: Corpus,
    pairs: Sequence[tuple[str, int]],
    first_stage: SearchPlan,
    config: RerankerTrainingConfig = RerankerTrainingConfig(),
) -> list[TrainingGroup]:
    """(query, document text, negatives mined from the first stage's ranks ``skip_top``..``mine_depth``) for
    each (query, document id) pair; the distillation stage mines its groups the same way."""
    texts = {d: passage_text(title, body) for d, (title, body) in document_texts(session, corpus).items()}
    ranked: list[list[int]] = []
    for start in range(0, len(pairs), 64):
        part = pairs[start : start + 64]
        found = searcher.search_many(
            corpus.name, [q for q, _ in part], k=config.mine_depth, mode="hybrid", plan=first_stage
        )
        ranked.extend([r.document_id for r in results] for results in found)
    negatives = mine_negatives(ranked, [d for _, d in pairs], config)
    return [
        TrainingGroup(query, texts[document], [texts[n] for n in mined if n in texts])
        for (query, document), mined in zip(pairs, negatives, strict=True)
        if document in texts
    ]


def register_reranker(
    session: Session, name: str, path: Path, *, training: dict[str, Any], metrics: dict[str, Any] | None = None
) -> ModelVersion:
    if not (path / "config.json").is_file():
        raise ConflictError(f"The reranker folder {path} holds no model (config.json is missing).")
    parent = find_model_version(session, BASE_MODEL_NAME)
    model = create_model_version(
        session, name, str(path), 1, parent=parent, training_config=training, metrics=dict(metrics or {})
    )
    model.kind = CROSS_ENCODER_KIND
    session.flush()
    return model


def train_reranker(
    session: Session,
    settings: FerretSettings,
    groups: list[TrainingGroup],
    name: str,
    config: RerankerTrainingConfig = RerankerTrainingConfig(),
    *,
    progress: Callable[[float], None] = lambda fraction: None,
) -> ModelVersion:
    """Train here (CUDA when present, else CPU), export for ONNX Runtime and register; an existing version of that
    name is reused."""
    if (found := find_model_version(session, name)) is not None:
        return found
    output = settings.models_path / name
    report = train_cross_encoder(groups, base_model_path(settings), output, config, progress=progress)
    prepare_reranker(output, settings)  # the ONNX export, so that no search pays it
    return register_reranker(session, name, output, training=report)


def distill_encoder(
    session: Session,
    settings: FerretSettings,
    groups: list[TrainingGroup],
    teacher: ModelVersion,
    name: str,
    config: DistillationConfig = DistillationConfig(),
    *,
    student: ModelVersion | None = None,
    minimum_pairs: int = MIN_PAIRS,
    progress: Callable[[float], None] = lambda fraction: None,
) -> ModelVersion:
    """GPL: the reranker ``teacher`` labels the groups, the dual encoder ``student`` (the base model unless given)
    learns its margins (``ferret.core.training.distillation``), and the result is registered as a dual-encoder
    version whose parent is the student, indexed, guarded and promoted like any other. Trained here (CUDA when
    present); an existing version of that name is reused.

    Groups come from ``mine_groups`` (GPL labels every generated query, the round-trip filter's drops included:
    the teacher's margin replaces the filter's yes/no)."""
    if (found := find_model_version(session, name)) is not None:
        return found
    if teacher.kind != CROSS_ENCODER_KIND:
        raise InvalidInputError(f"Model version {teacher.name!r} is not a cross-encoder reranker; it cannot teach.")
    if not (Path(teacher.path) / "config.json").is_file():
        raise ConflictError(f"The files of reranker {teacher.name!r} are missing from {teacher.path}.")
    check_pair_count(len(groups), minimum_pairs, what="distillation")
    parent = student or find_model_version(session, BASE_MODEL_NAME)
    student_path = student.path if student is not None else str(base_model_path(settings))
    output = settings.models_path / name
    scores = teacher_scores(groups, teacher.path)
    report = train_margin_mse(
        groups, scores, student_path, output, config, minimum_pairs=minimum_pairs, progress=progress
    )
    return create_model_version(
        session, name, str(output), parent.dimension if parent is not None else 384, parent=parent,
        training_config={**report, "teacher": teacher.name},
    )  # fmt: skip
