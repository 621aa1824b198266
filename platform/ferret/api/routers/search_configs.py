"""Search configurations of a corpus (retriever + fusion + reranker): list them, make one, promote one, roll back."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Path, status

from ferret.api.auth import AdminCaller
from ferret.api.dependencies import SessionDep, StateDep
from ferret.api.errors import error_responses
from ferret.api.routers.index_versions import activation_out
from ferret.api.schemas import SearchConfigCreate, SearchConfigList, SearchConfigOut
from ferret.core.db.activation import CONFIG, activation_history
from ferret.core.db.audit import key_actor
from ferret.core.db.corpus import get_corpus
from ferret.core.db.search_config import get_search_config, list_search_configs
from ferret.core.search.configuration import create_config, describe, promote_config, rollback_config
from ferret.core.search.fusion import Fusion

router = APIRouter(tags=["search configurations"])


def _out(shown: dict[str, Any]) -> SearchConfigOut:
    return SearchConfigOut.model_validate(shown)


@router.get(
    "/v1/corpora/{corpus}/search-configs",
    response_model=SearchConfigList,
    responses=error_responses(401, 403, 404),
    summary="List the search configurations of a corpus",
)
def list_all(_caller: AdminCaller, session: SessionDep, corpus: str = Path(max_length=128)) -> SearchConfigList:
    corpus_row = get_corpus(session, corpus)
    return SearchConfigList(
        corpus=corpus_row.name,
        configs=[_out(describe(c)) for c in list_search_configs(session, corpus_row)],
        activations=[activation_out(row) for row in activation_history(session, corpus_row, CONFIG)],
    )


@router.post(
    "/v1/corpora/{corpus}/search-configs",
    response_model=SearchConfigOut,
    status_code=status.HTTP_201_CREATED,
    responses=error_responses(401, 403, 404, 409, 422),
    summary="Make a search configuration by hand (not active until promoted)",
)
def create(
    body: SearchConfigCreate, caller: AdminCaller, session: SessionDep, corpus: str = Path(max_length=128)
) -> SearchConfigOut:
    """Refused, with nothing stored, when a model is not registered (404), a retriever has no live index of the
    corpus or a reranker's files are gone (409), or a reranker is named as a retriever or the reverse (422)."""
    config = create_config(
        session, get_corpus(session, corpus), retriever=body.retriever,
        fusion=Fusion(body.fusion, body.alpha, body.normalisation), reranker=body.reranker,
        rerank_depth=body.rerank_depth, rerank_weight=body.rerank_weight, note=body.note,
        actor=key_actor(caller.name), index_version=body.index_version,
    )  # fmt: skip
    return _out(describe(config))


@router.post(
    "/v1/corpora/{corpus}/search-configs/{version}/promote",
    response_model=SearchConfigOut,
    responses=error_responses(401, 403, 404, 409),
    summary="Make a search configuration active",
)
def promote(
    caller: AdminCaller,
    session: SessionDep,
    state: StateDep,
    corpus: str = Path(max_length=128),
    version: int = Path(ge=1, le=2**31 - 1),
) -> SearchConfigOut:
    """Refused (409, naming the missing piece) when a model it uses was deleted or a reranker's files are gone."""
    corpus_row = get_corpus(session, corpus)
    config = get_search_config(session, corpus_row, version)
    promoted = promote_config(session, state.settings, state.backend, corpus_row, config, actor=key_actor(caller.name))
    state.searcher.active_plans.forget(corpus)  # this process's searches use it at once
    return _out(describe(promoted))


@router.post(
    "/v1/corpora/{corpus}/search-configs/rollback",
    response_model=SearchConfigOut,
    responses=error_responses(401, 403, 404, 409),
    summary="Re-activate the previously active search configuration",
)
def rollback(
    caller: AdminCaller, session: SessionDep, state: StateDep, corpus: str = Path(max_length=128)
) -> SearchConfigOut:
    corpus_row = get_corpus(session, corpus)
    restored = rollback_config(session, state.settings, state.backend, corpus_row, actor=key_actor(caller.name))
    state.searcher.active_plans.forget(corpus)
    return _out(describe(restored))
