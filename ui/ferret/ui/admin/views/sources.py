"""Sources: a corpus's configured sources with their schedule and last sync; add or replace one from a pasted or
uploaded YAML/JSON definition, sync one now (a job, followed here as on the Jobs page) and read its report, read
its history, remove it — through the same domain functions as ``ferret source``."""

from __future__ import annotations

from functools import partial
from typing import Any

import streamlit as st

from ferret.core.db.corpus import get_corpus, list_corpora
from ferret.core.db.source import last_sync_run, list_sources, run_summary, sync_runs
from ferret.core.sources.service import find_configured
from ferret.ui.admin.common import attempt, notify, page_context, run_action, sentence, show_notice
from ferret.ui.admin.job_card import REFRESH, job_card
from ferret.ui.admin.source_actions import (
    definition_text,
    delete_source,
    last_sync_job,
    report_line,
    save_source,
    sync_now,
)

EXAMPLE = """corpus: kb
name: wiki
kind: sql
schedule_minutes: 60
config:
  url: {env: WIKI_DATABASE_URL}
  table: pages
  text_columns: [body]
"""


@st.fragment(run_every=REFRESH)
def sync_progress(corpus: str, name: str) -> None:
    """The source's newest sync job, re-read every two seconds as on the Jobs page, then the sync's report."""
    followed = attempt(lambda: last_sync_job(corpus, name))
    if followed is None:
        return
    job, summary = followed
    job_card(job)
    if summary:
        show_report(summary)


def show_report(summary: dict[str, Any]) -> None:
    (st.error if summary.get("error") else st.success)(report_line(summary))
    if summary.get("error"):
        st.error(str(summary["error"]))
    skipped = summary.get("skipped", [])
    if skipped:
        st.dataframe(
            [{"item": item["external_id"], "reason": item["reason"]} for item in skipped[:200]], hide_index=True
        )


def load_definition(corpus: str, name: str) -> None:
    """Button callback (before the form's widgets exist): the stored definition into the text area, replace on."""
    try:
        st.session_state["source-definition"] = definition_text(corpus, name)
        st.session_state["source-replace"] = True
    except Exception as error:
        notify("error", sentence(error))


def definition_form(corpus: str) -> None:
    st.subheader("Add or replace a source")
    uploaded = st.file_uploader("Definition file (YAML or JSON)", type=["yaml", "yml", "json"], key="source-file")
    text = st.text_area(
        "…or paste the definition (secrets as {env: NAME} or {file: PATH}, never plain text)",
        key="source-definition",
        height=220,
        placeholder=EXAMPLE.replace("corpus: kb", f"corpus: {corpus}"),
    )
    replace = st.checkbox("Replace the definition of an existing source", key="source-replace")
    unchecked = st.checkbox(
        "Store without checking that the source can be read (--no-check: its store is not reachable yet)",
        key="source-no-check",
    )
    if st.button("Save source", key="save-source", type="primary"):
        body = uploaded.getvalue().decode("utf-8", errors="replace") if uploaded is not None else text
        message = attempt(lambda: save_source(body, replace=replace, check=not unchecked))
        if message:
            st.success(message)


def render() -> None:
    st.header("Sources")
    show_notice()
    with page_context() as context:
        corpora = [corpus.name for corpus in list_corpora(context.session)]
    if not corpora:
        st.info("No corpus yet; a source definition names the corpus it fills (it is created on the first add).")
        definition_form("kb")
        return
    corpus_name = str(st.selectbox("Corpus", corpora, key="sources-corpus"))
    with page_context() as context:
        corpus = get_corpus(context.session, corpus_name)
        sources = list_sources(context.session, corpus)
        rows = []
        for source in sources:
            last = run_summary(last_sync_run(context.session, source))
            rows.append(
                {
                    "name": source.name,
                    "kind": source.kind,
                    "enabled": source.enabled,
                    "schedule": f"every {source.schedule_minutes} min" if source.schedule_minutes else "manual",
                    "last sync": report_line(last),
                    "started": (last.get("started_at") or "")[:19],
                    "error": (last.get("error") or "")[:120],
                }
            )
    if not rows:
        st.info(f"Corpus {corpus_name} has no configured source yet.")
    else:
        st.dataframe(rows, hide_index=True)
        chosen = str(st.selectbox("Source", [row["name"] for row in rows], key="source-choice"))
        sync_col, edit_col, remove_col = st.columns(3)
        full = sync_col.checkbox(
            "From the start",
            key="sync-full",
            help="Read every document again, not only what changed since the last checkpoint (after an upgrade that "
            "changes how files are read); documents that read the same are not re-embedded.",
        )
        sync_col.button(
            "Sync now", key="sync-source", on_click=run_action, args=(partial(sync_now, corpus_name, chosen, full),)
        )
        edit_col.button("Edit definition", key="edit-source", on_click=load_definition, args=(corpus_name, chosen))
        remove_col.button(
            "Remove source",
            key="remove-source",
            on_click=run_action,
            args=(partial(delete_source, corpus_name, chosen),),
        )
        sync_progress(corpus_name, chosen)
        with st.expander(f"Sync history of {chosen}", expanded=False):
            with page_context() as context:
                source = find_configured(context.session, corpus_name, chosen)
                history = [run_summary(run) for run in sync_runs(context.session, source, 20)]
            for summary in history:
                st.markdown(f"`{summary['started_at'][:19]}` {report_line(summary)}")
                for item in summary.get("skipped", [])[:20]:
                    st.caption(f"skipped {item['external_id']}: {item['reason']}")
    definition_form(corpus_name)


render()
