"""Side-by-side evaluation of a BEIR-layout dataset: bm25s, then every search mode of each model version.

The corpus enters through the ``beir`` connector that ``connectors`` builds (the runtime passes the registry).

The dataset is ingested into a corpus of its own (incremental, so a second run skips unchanged documents), each
model gets an index version (an existing live one is reused), and all systems are scored in the same run.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from sqlalchemy.orm import Session

from ferret.core.corpus.ingest import Ingestor
from ferret.core.db.corpus import find_corpus, get_or_create_corpus
from ferret.core.db.document import documents_by_external_id
from ferret.core.db.index_version import active_index_version
from ferret.core.db.models import Corpus, IndexVersion, ModelVersion
from ferret.core.db.source import list_sources
from ferret.core.encoder.registry import ModelRegistry
from ferret.core.errors import InvalidInputError
from ferret.core.eval.beir import has_documents, iter_corpus, load_qrels, load_queries
from ferret.core.eval.metrics import evaluate_run
from ferret.core.index.backend import IndexBackend
from ferret.core.index.types import SEARCH_MODES, SearchMode
from ferret.core.index.versioned_collection import VersionedCollection
from ferret.core.search.bm25_ranker import BM25Ranker
from ferret.core.search.searcher import Searcher
from ferret.core.settings import FerretSettings
from ferret.core.sources.capabilities import ConnectorFactory, LoadConnector

Status = Callable[[str], None]


@dataclass(frozen=True)
class EvalRow:
    system: str
    model: str | None
    mode: str | None
    metrics: dict[str, float]
    seconds: float
    queries: int

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def corpus_name_for(dataset: Path) -> str:
    slug = re.sub(r"[^a-z0-9]+", "-", dataset.resolve().name.lower()).strip("-") or "dataset"
    return f"beir-{slug}"[:64]


def ensure_index(
    session: Session,
    settings: FerretSettings,
    backend: IndexBackend,
    corpus: Corpus,
    model: ModelVersion,
    status: Status,
) -> IndexVersion:
    """A live index version of ``corpus`` for ``model``; built (and promoted if none is active) when missing."""
    versions = VersionedCollection(session, settings, backend, corpus)
    live = versions.live_version(model)
    if live is not None:
        return live
    status(f"indexing {corpus.name} with model {model.name}")
    index_version = versions.build(model)
    if active_index_version(session, corpus) is None:
        versions.promote(index_version)
    return index_version


def dataset_source_name(session: Session, corpus: Corpus, dataset: Path) -> str:
    """The name of the corpus's source that already reads the folder ``dataset`` (the quickstart's ``demo``), else
    ``beir``: the same files under a second source name would be ingested a second time, and every search of the
    corpus would show each document twice."""
    for source in list_sources(session, corpus):
        path = (source.config or {}).get("path")
        if source.kind == "beir" and path is not None and Path(path).resolve() == dataset.resolve():
            return source.name
    return "beir"


def held_corpus_judged(session: Session, dataset: Path, corpus_name: str | None) -> Corpus | None:
    """None when the labelled set brings its documents (corpus.jsonl); else the corpus Ferret holds that its queries
    and qrels judge. Raises when it has neither."""
    if has_documents(dataset):
        return None
    corpus = find_corpus(session, corpus_name) if corpus_name else None
    if corpus is None:
        named = f"corpus {corpus_name!r} does not exist" if corpus_name else "no corpus is named"
        raise InvalidInputError(
            f"{dataset} has no documents (corpus.jsonl is missing or empty) and {named}; to judge a corpus Ferret "
            "already holds with these queries and qrels, name it (ferret eval --corpus NAME)."
        )
    return corpus


def judged_documents(
    session: Session, dataset: Path, corpus_name: str | None, qrels: dict[str, dict[str, int]], split: str
) -> tuple[dict[str, tuple[str, str]], Corpus | None]:
    """(id -> (title, text) of the documents the qrels judge, the held corpus they are in or None for the set's own).

    A BEIR folder brings its documents in corpus.jsonl. A set of only queries and qrels judges the existing corpus
    ``corpus_name`` (its qrels name documents by their external id: for a folder, the file's path). Either way a
    qrels file that names none of the documents is refused: every score would read 0.
    """
    held = held_corpus_judged(session, dataset, corpus_name)
    if held is None:
        documents = {doc.doc_id: (doc.title, doc.text) for doc in iter_corpus(dataset)}
    else:
        documents = documents_by_external_id(session, held)
    judged = {doc_id for judgements in qrels.values() for doc_id in judgements}
    if not judged & documents.keys():
        example = f", such as {next(iter(documents))!r}" if documents else ""
        raise InvalidInputError(
            f"None of the {len(judged)} documents judged in qrels/{split}.tsv is in the corpus; qrels name documents "
            f"by their id there{example}."
        )
    return documents, held


def evaluate_dataset(
    session: Session,
    settings: FerretSettings,
    backend: IndexBackend,
    dataset: Path,
    *,
    connectors: ConnectorFactory,
    split: str = "test",
    models: Sequence[str] = ("base",),
    modes: Sequence[SearchMode] = SEARCH_MODES,
    corpus_name: str | None = None,
    exclude_queries: Collection[str] = (),
    status: Status = lambda message: None,
    notes: list[str] | None = None,
) -> list[EvalRow]:
    """BM25 (bm25s, outside Ferret) and each model in each mode over ``split``'s queries, less ``exclude_queries``
    (a benchmark's few-shot examples when they come from the evaluated split). What a reader of the scores must know
    (labels naming documents the corpus lacks) is appended to ``notes``."""
    queries = load_queries(dataset)
    qrels = load_qrels(dataset, split)
    query_ids = [qid for qid in qrels if qid in queries and qid not in exclude_queries]
    qrels = {qid: judged for qid, judged in qrels.items() if qid not in exclude_queries}
    texts = [queries[qid] for qid in query_ids]
    rows: list[EvalRow] = []

    started = time.perf_counter()
    documents, held = judged_documents(session, dataset, corpus_name, qrels, split)
    missing = sorted({doc_id for judged in qrels.values() for doc_id in judged} - documents.keys())
    if missing and notes is not None:
        notes.append(
            f"{len(missing)} document{'s' * (len(missing) != 1)} judged in qrels/{split}.tsv "
            f"{'are' if len(missing) != 1 else 'is'} not in the corpus (such as {missing[0]!r}): no system can "
            f"find {'them' if len(missing) != 1 else 'it'}, so every score is lower than the search deserves"
        )
    bm25 = BM25Ranker(documents)
    run = dict(zip(query_ids, bm25.search(texts, k=100), strict=True))
    rows.append(EvalRow("bm25s", None, None, evaluate_run(run, qrels), time.perf_counter() - started, len(query_ids)))

    if held is None:
        corpus = get_or_create_corpus(
            session,
            corpus_name or corpus_name_for(dataset),
            description=f"BEIR dataset {dataset.name}",
            max_passage_tokens=settings.max_passage_tokens,
            passage_overlap_tokens=settings.passage_overlap_tokens,
        )
        status(f"ingesting {dataset} into corpus {corpus.name}")
        source = connectors("beir", path=str(dataset), name=dataset_source_name(session, corpus, dataset))
        if not isinstance(source, LoadConnector):
            raise TypeError("the beir connector must be a LoadConnector")
        Ingestor(session, settings, backend, corpus).run(source)
    else:
        corpus = held
    registry = ModelRegistry(session, settings)
    searcher = Searcher.over(session, settings, backend)
    for model_name in models:
        model = registry.get(model_name)
        index_version = ensure_index(session, settings, backend, corpus, model, status)
        for mode in modes:
            status(f"searching {len(texts)} queries, model {model.name}, {mode}")
            started = time.perf_counter()
            results = searcher.search_many(corpus.name, texts, k=100, mode=mode, index_version=index_version)
            # Scores from rank, not from Qdrant: fused RRF scores tie often, and the system's own order must stand.
            run = {
                qid: {r.external_id: float(len(hits) - rank) for rank, r in enumerate(hits)}
                for qid, hits in zip(query_ids, results, strict=True)
            }
            rows.append(
                EvalRow(
                    "ferret",
                    model.name,
                    mode,
                    evaluate_run(run, qrels),
                    time.perf_counter() - started,
                    len(query_ids),
                )
            )
    return rows
