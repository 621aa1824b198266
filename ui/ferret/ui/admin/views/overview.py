"""Overview: corpora with their counts and live version, running jobs, sources and their last sync, warnings."""

from __future__ import annotations

import streamlit as st
from sqlalchemy.engine import make_url

from ferret.core.db.models import utcnow
from ferret.core.settings import FerretSettings
from ferret.ui.admin.common import page_context, show_notice, when
from ferret.ui.admin.overview import load_overview


def describe_stores(settings: FerretSettings) -> str:
    database = make_url(settings.database_url).render_as_string(hide_password=True)
    index = f"Qdrant server {settings.qdrant_url}" if settings.qdrant_url else f"Qdrant Edge {settings.qdrant_path}"
    jobs = "Celery workers" if settings.broker_url else "in-process jobs"
    return f"Database: {database} · Index: {index} · Jobs: {jobs}"


def render() -> None:
    st.header("Overview")
    show_notice()
    with page_context() as context:
        overview = load_overview(context.session)
        stores = describe_stores(context.settings)
    st.caption(stores)
    for warning in overview.warnings(now=utcnow()):
        st.warning(warning)
    running = [job for job in overview.jobs if job.state in ("queued", "running")]
    corpora, active_jobs, tasks = st.columns(3)
    corpora.metric("Corpora", len(overview.corpora))
    active_jobs.metric("Running jobs", len(running))
    tasks.metric("Tasks", len(overview.tasks))

    st.subheader("Corpora")
    if not overview.corpora:
        st.info("No corpora yet: `ferret ingest --corpus NAME --path FOLDER`.")
    else:
        st.dataframe(
            [
                {
                    "corpus": corpus.name,
                    "documents": corpus.documents,
                    "passages": corpus.passages,
                    "live version": f"v{corpus.active.version}" if corpus.active else "none",
                    "live model": corpus.active.model if corpus.active else "",
                    "configuration": context.settings.search_mode,
                    "versions": len(corpus.versions),
                }
                for corpus in overview.corpora
            ],
            hide_index=True,
        )
    st.subheader("Running jobs")
    if not running:
        st.caption("No job is running.")
    for job in running:
        st.progress(job.progress, text=f"Job {job.id} · {job.kind} · {job.stage or job.state} · {job.corpus or ''}")
    st.subheader("Sources")
    if not overview.sources:
        st.caption("No sources yet.")
    else:
        st.dataframe(
            [
                {"corpus": s.corpus, "source": s.name, "kind": s.kind, "last sync": when(s.last_run_at)}
                for s in overview.sources
            ],
            hide_index=True,
        )


render()
