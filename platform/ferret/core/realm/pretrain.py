"""REALM pre-training of a corpus around the trainer: masked data, WiSE-FT and registration, the guard.

The retriever that comes out is an ordinary Ferret dual encoder: it is registered as a model version (its
configuration, retrieval-utility curve and index staleness stored beside it), and judged by the same promotion
guard as a Promptagator candidate (``training.guard.run_guard``) against the corpus's active model. It is never
promoted here: REALM is the unsupervised starting point, which ``ferret index build --promote`` or a Promptagator
pipeline (``ferret pipeline run --init realm:<model>``) takes further.

Guard evidence: a task's examples and held-out synthetic queries when ``task`` is given (exactly what a Promptagator
candidate meets); otherwise the held-out sentences of REALM's own split as queries, each labelled with its
document, and the documents shown *without* those sentences (the Inverse Cloze Task's view: the retriever must
find where a sentence came from without the sentence itself).

The pipeline's stages (``ferret.core.pipeline.realm.stages``) call these in order.

Example:
    >>> data = masked_data(corpus_passages(session, corpus), RealmConfig(), k=4)
"""

from __future__ import annotations

import logging

from sqlalchemy.orm import Session

from ferret.core.corpus.chunking import passage_text
from ferret.core.db.document import iter_passages
from ferret.core.db.index_version import active_index_version
from ferret.core.db.model_version import find_model_version
from ferret.core.db.models import Corpus, ModelVersion
from ferret.core.db.synthetic import latest_run
from ferret.core.db.task import get_task
from ferret.core.encoder.registry import ModelRegistry
from ferret.core.errors import ConflictError
from ferret.core.pipeline.promptagator.state import PipelineConfig
from ferret.core.realm.config import RealmConfig
from ferret.core.realm.masking import CorpusPassage, MaskedSentence, SpanMasker, check_enough_passages, split_held_out
from ferret.core.realm.trainer import RealmData, RealmResult
from ferret.core.settings import FerretSettings
from ferret.core.training.dual_encoder_trainer import average_with_base
from ferret.core.training.guard import GuardEvidence, GuardReport, LabelledQuery, run_guard
from ferret.core.training.guard_evidence import guard_evidence

logger = logging.getLogger(__name__)


def corpus_passages(session: Session, corpus: Corpus) -> list[CorpusPassage]:
    """Every passage as it is embedded (title + body)."""
    return [
        CorpusPassage(passage.id, document.id, passage_text(document.title, passage.text))
        for rows in iter_passages(session, corpus)
        for passage, document in rows
    ]


def masked_data(passages: list[CorpusPassage], config: RealmConfig, k: int) -> RealmData:
    """Masked training and held-out sentences; one sentence for each way the corpus cannot be used."""
    check_enough_passages(passages, k)
    examples = SpanMasker(config.masking).mask(passages, seed=config.seed)
    if config.max_sentences is not None:
        examples = examples[: config.max_sentences]
    train, held_out = split_held_out(examples, config.held_out_fraction, config.seed)
    return RealmData(passages, train, held_out)


def sentence_evidence(session: Session, corpus: Corpus, held_out: list[MaskedSentence]) -> GuardEvidence:
    """Held-out sentences → their document, documents shown without those sentences (see the module docstring)."""
    texts: dict[int, str] = {}
    for rows in iter_passages(session, corpus):
        for passage, document in rows:
            texts.setdefault(document.id, passage_text(document.title, passage.text))
    for sentence in held_out:
        if sentence.document_id in texts:
            texts[sentence.document_id] = texts[sentence.document_id].replace(sentence.sentence, " ")
    queries = [LabelledQuery(s.sentence, s.document_id) for s in held_out if s.document_id in texts]
    return GuardEvidence.sample([], queries, texts)


def _task_evidence(session: Session, task_name: str) -> GuardEvidence:
    task = get_task(session, task_name)
    run = latest_run(session, task)
    if run is None:
        raise ConflictError(
            f"Task {task_name!r} has no generation run yet; run `ferret pipeline run` first.",
            over_http=f"Task {task_name!r} has no generation run yet; start its pipeline with POST /v1/jobs first.",
        )
    defaults = PipelineConfig()
    return guard_evidence(session, task, run, held_out_fraction=defaults.held_out_fraction, seed=defaults.seed)


def register_realm_model(
    session: Session,
    settings: FerretSettings,
    result: RealmResult,
    config: RealmConfig,
    *,
    model_name: str,
    run_key: str,
    corpus: Corpus,
) -> ModelVersion:
    """WiSE-FT the best retriever (by RU) with the base model and register it; a redelivery finds its own row."""
    from sentence_transformers import SentenceTransformer

    existing = find_model_version(session, model_name)
    if existing is not None:
        if (existing.training_config or {}).get("realm_key") != run_key:
            raise ConflictError(f"Model version {model_name!r} already exists; choose another model name.")
        return existing
    registry = ModelRegistry(session, settings)
    base = registry.ensure_base()
    model = SentenceTransformer(result.best_dir, device="cpu", local_files_only=True)
    if config.base_weight > 0:
        average_with_base(model, base.path, config.base_weight)
    output = registry.model_dir(model_name)
    output.mkdir(parents=True, exist_ok=True)
    model.save(str(output))
    version = registry.register(model_name, output, parent=base)
    version.training_config = {"realm": config.to_json(), "realm_key": run_key, "corpus": corpus.name}
    summary = result.as_dict()
    summary.pop("losses", None)
    version.metrics = {"realm": summary}
    session.commit()
    return version


def guard_realm_model(
    session: Session,
    settings: FerretSettings,
    model: ModelVersion,
    corpus: Corpus,
    held_out: list[MaskedSentence],
    *,
    task: str | None = None,
) -> GuardReport:
    """The promotion guard against the corpus's active model (the base one when none is active)."""
    registry = ModelRegistry(session, settings)
    active = active_index_version(session, corpus)
    reference = active.model_version if active is not None else registry.ensure_base()
    evidence = _task_evidence(session, task) if task else sentence_evidence(session, corpus, held_out)
    report = run_guard(registry.encoder(model), registry.encoder(reference), evidence)
    model.metrics = {**model.metrics, "guard": report.as_dict(), "reference_model": reference.name}
    session.commit()
    return report
