"""The connector push API: batch upsert and delete of a corpus's documents by external id, idempotent; and one
document read back by the id search results carry, within the caller's groups.

A batch of at most ``FERRET_PUSH_SYNC_MAX_DOCUMENTS`` documents is applied whole (database and every live index
version) before it answers 200, so the client knows its documents are searchable. A larger one is stored in a job
row and answered 202 with the job's id: embedding and indexing run as that job (gpu queue with workers, a thread
of this process without), and the documents are searchable when ``GET /v1/jobs/{id}`` says ``succeeded``. Either
way, a client that got an error or no answer sends the same request again.
"""

from __future__ import annotations

from fastapi import APIRouter, HTTPException, Path, status
from fastapi.responses import JSONResponse

from ferret.api.auth import IngestCaller, SearchCaller
from ferret.api.dependencies import SessionDep, StateDep
from ferret.api.document_schemas import DeleteIn, DocumentOut, PassageOut, PushAcceptedOut, PushIn, PushOut
from ferret.api.errors import error_responses
from ferret.core.corpus.ingest import IngestReport
from ferret.core.corpus.push import PushedDocument, PushIngestor
from ferret.core.db.corpus import get_corpus
from ferret.core.db.document import readable_document
from ferret.core.jobs.push_jobs import JOB_PUSH_INDEX
from ferret.core.sources.documents import Document as SourceDocument

router = APIRouter(tags=["documents"])
_RESPONSES = error_responses(401, 403, 404, 409, 413, 422)


def _check_batch(count: int, limit: int) -> None:
    if count > limit:
        raise HTTPException(
            status.HTTP_413_CONTENT_TOO_LARGE,
            detail=f"The batch has {count:,} items, more than the limit of {limit:,}; split it into smaller requests.",
        )


def _report(report: IngestReport) -> PushOut:
    return PushOut.model_validate(report)


@router.post(
    "/v1/corpora/{corpus}/documents",
    response_model=PushOut,
    responses={
        **_RESPONSES,
        202: {"model": PushAcceptedOut, "description": "Stored; embedded and indexed by the job it names."},
    },
    summary="Upsert a batch of documents",
)
def upsert_documents(
    body: PushIn, _caller: IngestCaller, session: SessionDep, state: StateDep, corpus: str = Path(max_length=128)
) -> PushOut | JSONResponse:
    """New documents are added, changed ones replaced; a document whose ``version`` (or content) is already stored
    is left alone, so sending the same batch twice changes nothing the second time. Batches larger than the
    server's synchronous line are answered 202 and indexed by a job (searchable when it has succeeded)."""
    _check_batch(len(body.documents), state.settings.api_max_batch_documents)
    corpus_row = get_corpus(session, corpus)
    if len(body.documents) > state.settings.push_sync_max_documents:
        records = [{**d.model_dump(mode="json"), "source": body.source} for d in body.documents]
        job = state.jobs.start_job(JOB_PUSH_INDEX, session, corpus=corpus_row, source=body.source, documents=records)
        accepted = PushAcceptedOut(
            job_id=job.id, state=job.state.value, documents=len(records), job_url=f"/v1/jobs/{job.id}"
        )
        return JSONResponse(accepted.model_dump(), status_code=status.HTTP_202_ACCEPTED)
    pushed = [
        PushedDocument(
            SourceDocument(
                external_id=d.external_id,
                title=d.title,
                text=d.text,
                source=body.source,
                metadata=d.metadata,
                acl_groups=d.acl_groups,
                updated_at=d.updated_at,
            ),
            version=d.version,
        )
        for d in body.documents
    ]
    report = PushIngestor(session, state.settings, state.backend, corpus_row).push(body.source, pushed)
    return _report(report)


@router.post(
    "/v1/corpora/{corpus}/documents/delete",
    response_model=PushOut,
    responses=_RESPONSES,
    summary="Delete documents by external id",
)
def delete_documents(
    body: DeleteIn, _caller: IngestCaller, session: SessionDep, state: StateDep, corpus: str = Path(max_length=128)
) -> PushOut:
    """Removes the documents from the database and from every live index version; ids that are not stored are
    ignored, so a retried delete is harmless."""
    _check_batch(len(body.external_ids), state.settings.api_max_batch_documents)
    corpus_row = get_corpus(session, corpus)
    report = PushIngestor(session, state.settings, state.backend, corpus_row).push(
        body.source, [], delete_external_ids=body.external_ids
    )
    return _report(report)


@router.get(
    "/v1/corpora/{corpus}/documents/{document_id}",
    response_model=DocumentOut,
    responses=error_responses(401, 403, 404, 422),
    summary="One document: its passages in order and its metadata",
)
def get_document(
    caller: SearchCaller,
    session: SessionDep,
    corpus: str = Path(max_length=128),
    document_id: int = Path(ge=1, le=2**63 - 1, description="The `document_id` of a search result."),
) -> DocumentOut:
    """What a search result's document holds, for a client's document view (the passage in context). Access is
    the search's: a document shared with none of the key's groups, or public, answers 404 exactly as a missing one
    does, for every key (admin keys included)."""
    corpus_row = get_corpus(session, corpus)
    document = readable_document(session, corpus_row, document_id, caller.search_groups)
    return DocumentOut(
        corpus=corpus_row.name,
        document_id=document.id,
        external_id=document.external_id,
        source=document.source,
        title=document.title,
        metadata=dict(document.meta),
        acl_groups=sorted(set(caller.search_groups).intersection(document.acl_groups)),
        updated_at=document.updated_at,
        passages=[PassageOut.model_validate(passage) for passage in document.passages],
    )
