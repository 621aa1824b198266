"""``POST /v1/corpora/{corpus}/search``: the caller's groups go into Qdrant's filter, never applied afterwards."""

from __future__ import annotations

import time

from fastapi import APIRouter, Path

from ferret.api.auth import SearchCaller
from ferret.api.dependencies import StateDep
from ferret.api.document_schemas import SearchIn, SearchOut, SearchResultOut
from ferret.api.errors import error_responses
from ferret.core.db.corpus import get_corpus
from ferret.core.search.configuration import plan_by_name
from ferret.core.search.searcher import SearchResult
from ferret.core.search.snippets import snippet_and_highlights

router = APIRouter(tags=["search"])


@router.post(
    "/v1/corpora/{corpus}/search",
    response_model=SearchOut,
    responses=error_responses(401, 403, 404, 409, 413, 422),
    summary="Search the active index version of a corpus",
)
def search(
    body: SearchIn,
    caller: SearchCaller,
    state: StateDep,
    corpus: str = Path(max_length=128),
) -> SearchOut:
    """The top ``k`` documents for ``query`` after the first ``offset``, each with its best passage, a snippet of it
    around the query's words and where those words are. Only documents shared with one of the key's groups, or
    public, can be returned; ``filters`` narrow further. 409 when the corpus has no active index."""
    started = time.perf_counter()
    mode = state.searcher.mode(body.mode)
    plan = None
    if body.config:
        with state.searcher.sessions() as session:
            plan = plan_by_name(session, get_corpus(session, corpus), body.config)
    results = state.searcher.search(
        corpus,
        body.query,
        k=body.offset + body.k,
        mode=mode,
        acl_groups=caller.search_groups,
        filters=body.filters.conditions(),
        plan=plan,
    )
    return SearchOut(
        corpus=corpus,
        query=body.query,
        mode=mode,
        results=[_result_out(result, body.query) for result in results[body.offset :]],
        took_ms=(time.perf_counter() - started) * 1000,
    )


def _result_out(result: SearchResult, query: str) -> SearchResultOut:
    snippet, highlights = snippet_and_highlights(result.text, query)
    return SearchResultOut.model_validate(result).model_copy(update={"snippet": snippet, "highlights": highlights})
