"""``POST /v1/corpora/{corpus}/ask``: open-domain QA with provenance, as ``ferret ask``.

The passages come from the corpus's served search with the caller's groups inside Qdrant's filter, so an answer
and its provenance only ever cite documents the key may read. Search scope. The span reader is loaded once per
process and folder (``FERRET_HOME/readers/<name>``, the newest when no name is given).
"""

from __future__ import annotations

import threading
from pathlib import Path as FilePath
from typing import Annotated, Any

from fastapi import APIRouter, Path
from pydantic import BaseModel, Field, StringConstraints

from ferret.api.auth import SearchCaller
from ferret.api.dependencies import StateDep
from ferret.api.document_schemas import MAX_QUERY_CHARS
from ferret.api.errors import error_responses
from ferret.api.schemas import ApiRequest
from ferret.core.qa.reader_store import MARKER, resolve_reader

router = APIRouter(tags=["ask"])
_readers: dict[tuple[str, float], Any] = {}
_lock = threading.Lock()


class AskIn(ApiRequest):
    question: str = Field(min_length=1, max_length=MAX_QUERY_CHARS)
    k: int = Field(default=5, ge=1, le=50, description="Passages to retrieve and read.")
    reader: Annotated[str, StringConstraints(min_length=1, max_length=64)] | None = Field(
        default=None, description="A trained reader's name; default: the newest."
    )
    answers: int = Field(default=3, ge=1, le=10, description="Alternative answers to return.")


class ProvenanceOut(BaseModel):
    passage_id: int
    document: str
    title: str
    retrieval_probability: float
    answer_probability: float
    start_char: int
    end_char: int
    context: str


class AnswerOut(BaseModel):
    text: str
    probability: float
    provenance: list[ProvenanceOut]


class PassageOut(BaseModel):
    passage_id: int
    document: str
    title: str
    text: str
    score: float
    retrieval_probability: float


class AskOut(BaseModel):
    corpus: str
    question: str
    answers: list[AnswerOut]
    passages: list[PassageOut]


def _reader(folder: FilePath) -> Any:
    """One loaded reader per folder and training (its marker's mtime), shared by the request threads."""
    from ferret.core.qa.span_reader import SpanReader

    key = (str(folder), (folder / MARKER).stat().st_mtime)
    with _lock:
        if key not in _readers:
            _readers.clear()  # a retrained or other reader replaces the old one: one in memory
            _readers[key] = SpanReader.load(folder)
        return _readers[key]


@router.post(
    "/v1/corpora/{corpus}/ask",
    response_model=AskOut,
    responses=error_responses(401, 403, 404, 409, 413, 422),
    summary="Answer a question from a corpus, with the passages that support the answer",
)
def ask(body: AskIn, caller: SearchCaller, state: StateDep, corpus: str = Path(max_length=128)) -> AskOut:
    """The top ``k`` passages the key may read are read by the span reader; the answer is marginalised over them
    (REALM's open-QA model) and returned with each supporting passage and its retrieval probability. 404 when no
    reader is trained or no passage is retrieved."""
    from ferret.core.qa.answering import ask as answer_question

    reader = _reader(resolve_reader(state.settings, body.reader, allow_path=False))
    result = answer_question(
        state.searcher, reader, corpus, body.question, k=body.k, acl_groups=caller.search_groups, answers=body.answers
    )
    return AskOut.model_validate({"corpus": corpus, **result.as_dict()})
