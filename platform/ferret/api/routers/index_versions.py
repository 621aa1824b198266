"""Index versions of a corpus: build one (a job), list them, promote a ready one (one atomic alias swap), roll back."""

from __future__ import annotations

from fastapi import APIRouter, Path, status

from ferret.api.auth import AdminCaller
from ferret.api.dependencies import SessionDep, StateDep
from ferret.api.errors import error_responses
from ferret.api.routers.jobs import job_out
from ferret.api.schemas import ActivationOut, IndexBuildIn, IndexVersionList, IndexVersionOut, JobOut
from ferret.core.db.activation import INDEX, activation_history, last_activations
from ferret.core.db.audit import key_actor
from ferret.core.db.corpus import get_corpus
from ferret.core.db.index_version import get_index_version, list_index_versions
from ferret.core.db.models import Activation, IndexVersion
from ferret.core.index.versioned_collection import VersionedCollection
from ferret.core.search.configuration import index_activation_note

router = APIRouter(tags=["index versions"])


def index_version_out(index_version: IndexVersion, last: Activation | None = None) -> IndexVersionOut:
    """``last``: the version's latest activation (who made it active, by promotion or rollback)."""
    return IndexVersionOut(
        version=index_version.version,
        collection=index_version.collection,
        model=index_version.model_version.name,
        expansion=index_version.expansion,
        state=index_version.state,
        passage_count=index_version.passage_count,
        point_count=index_version.point_count,
        error=index_version.error,
        created_at=index_version.created_at,
        ready_at=index_version.ready_at,
        activated_at=last.activated_at if last is not None else index_version.activated_at,
        activated_by=last.actor if last is not None else None,
        activated_via=last.via if last is not None else None,
    )


def activation_out(activation: Activation) -> ActivationOut:
    return ActivationOut(
        version=activation.version,
        activated_at=activation.activated_at,
        actor=activation.actor,
        via=activation.via,
        withdrawn=activation.withdrawn,
    )


@router.get(
    "/v1/corpora/{corpus}/index-versions",
    response_model=IndexVersionList,
    responses=error_responses(401, 403, 404),
    summary="List the index versions of a corpus",
)
def list_all(_caller: AdminCaller, session: SessionDep, corpus: str = Path(max_length=128)) -> IndexVersionList:
    corpus_row = get_corpus(session, corpus)
    history = activation_history(session, corpus_row, INDEX)
    last = {activation.version: activation for activation in history}
    return IndexVersionList(
        corpus=corpus_row.name,
        versions=[index_version_out(v, last.get(v.version)) for v in list_index_versions(session, corpus_row)],
        activations=[activation_out(activation) for activation in history],
    )


@router.post(
    "/v1/corpora/{corpus}/index-versions",
    response_model=JobOut,
    status_code=status.HTTP_202_ACCEPTED,
    responses=error_responses(401, 403, 404, 409, 422, 503),
    summary="Build a new index version (a job)",
)
def build(
    body: IndexBuildIn, caller: AdminCaller, session: SessionDep, state: StateDep, corpus: str = Path(max_length=128)
) -> JobOut:
    """Embeds every passage of the corpus with ``model`` into a new collection version; the active version keeps
    serving until the new one is complete and promoted (``promote``: at once when the build ends). Poll the job
    (``GET /v1/jobs/{id}?wait=60``); its ``result.version`` is the version built."""
    job = state.jobs.start_job(
        "index_build",
        session,
        corpus=get_corpus(session, corpus),
        model=body.model,
        promote=body.promote,
        actor=key_actor(caller.name),
    )
    return job_out(job)


@router.post(
    "/v1/corpora/{corpus}/index-versions/{version}/promote",
    response_model=IndexVersionOut,
    responses=error_responses(401, 403, 404, 409, 422),
    summary="Make a ready index version active",
)
def promote(
    caller: AdminCaller,
    session: SessionDep,
    state: StateDep,
    corpus: str = Path(max_length=128),
    version: int = Path(ge=1, le=2**31 - 1),
) -> IndexVersionOut:
    """Search reads the new version from the next query on, unless an active search configuration reads another
    model's index (``note`` says so); the previous one stays ready for rollback."""
    corpus_row = get_corpus(session, corpus)
    versions = VersionedCollection(session, state.settings, state.backend, corpus_row)
    promoted = versions.promote(get_index_version(session, corpus_row, version), actor=key_actor(caller.name))
    answer = index_version_out(promoted, last_activations(session, corpus_row, INDEX).get(promoted.version))
    return answer.model_copy(update={"note": index_activation_note(session, corpus_row, promoted, over_http=True)})


@router.post(
    "/v1/corpora/{corpus}/index-versions/rollback",
    response_model=IndexVersionOut,
    responses=error_responses(401, 403, 404, 409),
    summary="Re-activate the previously active index version",
)
def rollback(
    caller: AdminCaller, session: SessionDep, state: StateDep, corpus: str = Path(max_length=128)
) -> IndexVersionOut:
    corpus_row = get_corpus(session, corpus)
    versions = VersionedCollection(session, state.settings, state.backend, corpus_row)
    restored = versions.rollback(actor=key_actor(caller.name))
    answer = index_version_out(restored, last_activations(session, corpus_row, INDEX).get(restored.version))
    return answer.model_copy(update={"note": index_activation_note(session, corpus_row, restored, over_http=True)})
