"""What the guard judges a candidate on, gathered from the database: held-out documents and their queries.

The train stage leaves out whole documents (``split_held_out``); the guard (``ferret.core.training.guard``) then
ranks their generated queries, the task's real examples, and the held-out queries labelled by BM25's first
document, among a seeded sample of the corpus (``guard_evidence``).

Example:
    >>> evidence = guard_evidence(session, task, run, held_out_fraction=0.1, seed=13)
    >>> report = run_guard(candidate_encoder, reference_encoder, evidence)
"""

from __future__ import annotations

import hashlib

from sqlalchemy.orm import Session

from ferret.core.corpus.chunking import passage_text
from ferret.core.db.models import GenerationRun, QueryStatus, RetrievalTask
from ferret.core.db.synthetic import document_texts, run_queries
from ferret.core.db.task import example_document
from ferret.core.synth.filters import FilterConfig, length_bounds, length_reason
from ferret.core.synth.query_text import is_near_verbatim_copy, normalize
from ferret.core.synth.retrievers import BM25Retriever
from ferret.core.training.guard import GuardEvidence, LabelledQuery


def is_held_out(document_id: int, fraction: float, seed: int) -> bool:
    """Whether a document is held out for the guard: a seeded hash of its id, not a shuffle of the documents that
    kept queries, so every recipe of a task (whatever its filters dropped) is judged on the same documents, and the
    guard stage finds the very documents the train stage left out."""
    if fraction <= 0:
        return False
    digest = hashlib.blake2b(f"{seed}:{document_id}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64 < fraction


def split_held_out(pairs: list[tuple[str, int]], fraction: float, seed: int) -> tuple[list[tuple[str, int]], ...]:
    """(training pairs, held-out pairs): whole documents are held out (never a document's other queries in
    training), chosen by ``is_held_out``."""
    held = {document_id for _, document_id in pairs if is_held_out(document_id, fraction, seed)}
    return [p for p in pairs if p[1] not in held], [p for p in pairs if p[1] in held]


def passage_texts(documents: dict[int, tuple[str, str]]) -> dict[int, str]:
    """Document id → the text a model reads (title + text), from ``document_texts``."""
    return {doc_id: passage_text(title, body) for doc_id, (title, body) in documents.items()}


def held_out_queries(
    session: Session, run: GenerationRun, task: RetrievalTask, texts: dict[int, str], fraction: float, seed: int
) -> list[LabelledQuery]:
    """The guard's synthetic evidence: every generated query of the held-out documents that passes the basic checks
    (length, copy of an example, near-verbatim copy of its document), whatever the recipe's own filters kept. Every
    recipe of a task is then judged on the same queries, and a recipe that filters hard (round trip) still leaves the
    guard enough of them."""
    lengths = length_bounds(task)
    bounds = FilterConfig(min_words=lengths.get("min_words", 3), max_words=lengths.get("max_words", 40))
    examples = {normalize(example.query) for example in task.examples}
    seen: set[tuple[str, int]] = set()
    evidence = []
    for query in run_queries(session, run, [QueryStatus.OK, QueryStatus.DROPPED]):
        key = (normalize(query.text), query.document_id)
        if (
            key in seen
            or not is_held_out(query.document_id, fraction, seed)
            or query.document_id not in texts
            or length_reason(query.text, bounds) is not None
            or key[0] in examples
            or is_near_verbatim_copy(query.text, texts[query.document_id])
        ):
            continue
        seen.add(key)
        evidence.append(LabelledQuery(query.text, query.document_id))
    return evidence


def guard_evidence(
    session: Session, task: RetrievalTask, run: GenerationRun, *, held_out_fraction: float, seed: int
) -> GuardEvidence:
    """What the guard judges a candidate on: the task's examples and the clean held-out queries of ``run``, ranked
    among a seeded sample of the corpus."""
    raw = document_texts(session, task.corpus)  # read once: the passages to rank and BM25's index
    texts = passage_texts(raw)
    held_out = held_out_queries(session, run, task, texts, held_out_fraction, seed)
    examples = [
        LabelledQuery(example.query, document.id)
        for example in task.examples
        if (document := example_document(session, task, example)) is not None
    ]
    bm25_first = BM25Retriever(raw, depth=1)([q.text for q in held_out])
    bm25_labelled = [
        LabelledQuery(query.text, ranked[0])
        for query, ranked in zip(held_out, bm25_first, strict=True)
        if ranked and ranked[0] in texts
    ]
    return GuardEvidence.sample(examples, held_out, texts, distractors=2_000, seed=seed, bm25_labelled=bm25_labelled)
