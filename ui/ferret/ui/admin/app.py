"""Ferret's admin page: corpora and their index versions (promote, roll back), tasks and jobs.

Run: ``streamlit run ui/ferret/ui/admin/app.py --browser.gatherUsageStats false`` with the same ``FERRET_*``
environment as the CLI (compose: the ``admin`` service). The page has no login of its own: publish it on
127.0.0.1 or behind an authenticating proxy. It reads through ``overview`` and acts through ``index_actions``;
every click reloads the state from the database.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from datetime import datetime
from functools import partial
from typing import Any

import streamlit as st
from sqlalchemy.engine import make_url

from ferret.core.errors import FerretError
from ferret.core.settings import FerretSettings
from ferret.runtime.context import app_context
from ferret.ui.admin.index_actions import promote_index_version, roll_back_corpus
from ferret.ui.admin.overview import AdminOverview, CorpusOverview, load_overview

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing is ever downloaded at run time
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

NOTICE_KEY = "ferret_admin_notice"


def _when(value: datetime | None) -> str:
    return value.strftime("%Y-%m-%d %H:%M") if value is not None else ""


def _run_action(action: Callable[[], str]) -> None:
    """Button callback: runs before the page reruns, so the rerun already shows the new state."""
    try:
        st.session_state[NOTICE_KEY] = ("success", action())
    except FerretError as exc:
        st.session_state[NOTICE_KEY] = ("error", str(exc))


def _show_notice() -> None:
    notice: tuple[str, str] | None = st.session_state.pop(NOTICE_KEY, None)
    if notice is None:
        return
    kind, message = notice
    if kind == "success":
        st.success(message)
    else:
        st.error(message)


def _describe_stores(settings: FerretSettings) -> str:
    database = make_url(settings.database_url).render_as_string(hide_password=True)
    index = f"Qdrant server {settings.qdrant_url}" if settings.qdrant_url else f"Qdrant Edge {settings.qdrant_path}"
    return f"Database: {database} · Index: {index}"


def _corpus_section(corpus: CorpusOverview) -> None:
    st.subheader(corpus.name)
    if corpus.description:
        st.caption(corpus.description)
    active = corpus.active
    documents, passages, live = st.columns(3)
    documents.metric("Documents", corpus.documents)
    passages.metric("Passages", corpus.passages)
    live.metric("Active version", f"v{active.version}" if active is not None else "none")
    if not corpus.versions:
        st.info(f"No index versions yet: `ferret index build --corpus {corpus.name} --promote`.")
        return
    rows: list[dict[str, Any]] = [
        {
            "active": row.is_active,
            "version": row.version,
            "state": row.state.value,
            "model": row.model,
            "passages": row.passages,
            "points": row.points,
            "collection": row.collection,
            "created": _when(row.created_at),
            "activated": _when(row.activated_at),
            "error": row.error or "",
        }
        for row in corpus.versions
    ]
    st.dataframe(rows, hide_index=True)
    promotable = [row for row in corpus.versions if row.can_promote]
    buttons = st.columns(len(promotable) + 1)
    for column, row in zip(buttons, promotable, strict=False):
        column.button(
            f"Promote v{row.version}",
            key=f"promote-{corpus.name}-{row.version}",
            help=f"Make version {row.version} the one search reads (one atomic alias swap).",
            on_click=_run_action,
            args=(partial(promote_index_version, corpus.name, row.version),),
        )
    buttons[-1].button(
        "Roll back",
        key=f"rollback-{corpus.name}",
        help="Re-activate the version that was active before the current one.",
        disabled=not corpus.can_roll_back,
        on_click=_run_action,
        args=(partial(roll_back_corpus, corpus.name),),
    )


def _tasks_section(overview: AdminOverview) -> None:
    if not overview.tasks:
        st.info("No tasks yet: `ferret task import my-task.yaml`.")
        return
    rows = [
        {
            "task": task.name,
            "corpus": task.corpus,
            "examples": "zero-shot" if task.zero_shot else str(task.examples),
            "generation runs": task.generation_runs,
            "description": task.description,
            "created": _when(task.created_at),
        }
        for task in overview.tasks
    ]
    st.dataframe(rows, hide_index=True)


def _jobs_section(overview: AdminOverview) -> None:
    if not overview.jobs:
        st.info("No jobs yet.")
        return
    rows = [
        {
            "job": job.id,
            "kind": job.kind,
            "corpus": job.corpus or "",
            "state": job.state,
            "stage": job.stage,
            "progress": round(100 * job.progress),
            "created": _when(job.created_at),
            "finished": _when(job.finished_at),
            "error": job.error or "",
        }
        for job in overview.jobs
    ]
    st.dataframe(
        rows,
        hide_index=True,
        column_config={"progress": st.column_config.ProgressColumn("progress", min_value=0, max_value=100)},
    )


def main() -> None:
    st.set_page_config(page_title="Ferret admin", layout="wide")
    st.title("Ferret admin")
    _show_notice()
    try:
        with app_context() as context:
            overview = load_overview(context.session)
            stores = _describe_stores(context.settings)
    except FerretError as exc:
        st.error(str(exc))
        return
    st.caption(stores)
    st.button("Refresh", key="refresh")
    corpora_tab, tasks_tab, jobs_tab = st.tabs(
        [f"Corpora ({len(overview.corpora)})", f"Tasks ({len(overview.tasks)})", f"Jobs ({len(overview.jobs)})"]
    )
    with corpora_tab:
        if not overview.corpora:
            st.info("No corpora yet: `ferret ingest --corpus NAME --path FOLDER`.")
        for corpus in overview.corpora:
            _corpus_section(corpus)
    with tasks_tab:
        _tasks_section(overview)
    with jobs_tab:
        _jobs_section(overview)


main()
