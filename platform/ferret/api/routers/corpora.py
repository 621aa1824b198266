"""Corpora: list, create, and one corpus with its counts and active index version.

Counts are of the documents the caller may read (its groups and public) unless it holds the admin scope: an admin
already sees each index version's point count, and runs the platform."""

from __future__ import annotations

from fastapi import APIRouter, Path, status
from sqlalchemy.orm import Session

from ferret.api.auth import AdminCaller, Caller, SearchCaller
from ferret.api.dependencies import SessionDep, StateDep
from ferret.api.errors import error_responses
from ferret.api.schemas import CorpusIn, CorpusList, CorpusOut
from ferret.core.db.api_key import scopes_grant
from ferret.core.db.corpus import corpus_counts, create_corpus, get_corpus, list_corpora
from ferret.core.db.index_version import active_index_version
from ferret.core.db.models import ApiKeyScope, Corpus

router = APIRouter(tags=["corpora"])


def corpus_out(session: Session, corpus: Corpus, caller: Caller) -> CorpusOut:
    groups = None if scopes_grant(caller.scopes, ApiKeyScope.ADMIN) else caller.search_groups
    documents, passages = corpus_counts(session, corpus, groups)
    active = active_index_version(session, corpus)
    return CorpusOut(
        name=corpus.name,
        description=corpus.description,
        max_passage_tokens=corpus.max_passage_tokens,
        passage_overlap_tokens=corpus.passage_overlap_tokens,
        documents=documents,
        passages=passages,
        active_index_version=active.version if active is not None else None,
        created_at=corpus.created_at,
    )


@router.get("/v1/corpora", response_model=CorpusList, responses=error_responses(401, 403), summary="List corpora")
def list_all(caller: SearchCaller, session: SessionDep) -> CorpusList:
    return CorpusList(corpora=[corpus_out(session, corpus, caller) for corpus in list_corpora(session)])


@router.post(
    "/v1/corpora",
    response_model=CorpusOut,
    status_code=status.HTTP_201_CREATED,
    responses=error_responses(401, 403, 409, 413, 422),
    summary="Create a corpus",
)
def create(body: CorpusIn, caller: AdminCaller, session: SessionDep, state: StateDep) -> CorpusOut:
    """An empty corpus; documents arrive through the push API or `ferret ingest`. Chunking settings are fixed
    here for the corpus's life, so every index version embeds the same passages."""
    corpus = create_corpus(
        session,
        body.name,
        description=body.description,
        max_passage_tokens=body.max_passage_tokens or state.settings.max_passage_tokens,
        passage_overlap_tokens=(
            body.passage_overlap_tokens
            if body.passage_overlap_tokens is not None
            else state.settings.passage_overlap_tokens
        ),
    )
    session.commit()
    return corpus_out(session, corpus, caller)


@router.get(
    "/v1/corpora/{corpus}", response_model=CorpusOut, responses=error_responses(401, 403, 404), summary="One corpus"
)
def get_one(caller: SearchCaller, session: SessionDep, corpus: str = Path(max_length=128)) -> CorpusOut:
    return corpus_out(session, get_corpus(session, corpus), caller)
