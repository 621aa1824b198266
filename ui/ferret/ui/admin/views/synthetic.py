"""Synthetic data: per generation run, how many queries were kept, dropped (by each filter's reason) or failed, the
queries of sample documents, and the shape of the queries (first words, lengths) beside the task's own examples —
the quickest way to see whether the generator imitated the examples or drifted."""

from __future__ import annotations

from collections import Counter
from typing import Any

import streamlit as st

from ferret.core.db.models import QueryStatus
from ferret.core.db.synthetic import get_run, list_runs, reason_counts, run_queries, status_counts
from ferret.core.db.task import get_task, list_tasks
from ferret.ui.admin.common import page_context, show_notice, when

SAMPLE_DOCUMENTS = 5


def _first_word(text: str) -> str:
    words = text.split()
    return words[0].lower().strip("?,.:;!\"'") if words else ""


def query_shape(queries: list[str]) -> tuple[dict[str, list[Any]], dict[str, list[Any]]]:
    """(the 10 most common first words with their share of the queries, the number of queries per length in words)."""
    total = max(1, len(queries))
    first = Counter(_first_word(q) for q in queries if q.strip()).most_common(10)
    lengths = Counter(len(q.split()) for q in queries)
    return (
        {"first word": [w for w, _ in first], "share": [c / total for _, c in first]},
        {"words": sorted(lengths), "queries": [lengths[n] for n in sorted(lengths)]},
    )


def _run_section(context: Any, task_name: str, run_id: int) -> None:
    task = get_task(context.session, task_name)
    run = get_run(context.session, run_id)
    statuses = status_counts(context.session, run)
    kept, dropped, failed = st.columns(3)
    kept.metric("Kept", statuses.get("ok", 0))
    dropped.metric("Dropped", statuses.get("dropped", 0))
    failed.metric("Failed generations", statuses.get("failed", 0))
    reasons = [
        {"status": status.value, "reason": reason, "queries": count}
        for status in (QueryStatus.DROPPED, QueryStatus.FAILED)
        for reason, count in sorted(reason_counts(context.session, run, status).items())
    ]
    st.markdown("**Dropped and failed, by reason**")
    if reasons:
        st.dataframe(reasons, hide_index=True)
    else:
        st.caption("Nothing was dropped or failed.")

    queries = run_queries(context.session, run)
    kept_texts = [q.text for q in queries if q.status == QueryStatus.OK]
    example_texts = [example.query for example in task.examples]
    st.markdown("**Query shape: generated (kept) beside the task's examples**")
    generated_first, generated_lengths = query_shape(kept_texts)
    example_first, example_lengths = query_shape(example_texts)
    left, right = st.columns(2)
    with left:
        st.caption(f"Generated, {len(kept_texts)} kept queries: first words")
        st.bar_chart(generated_first, x="first word", y="share", horizontal=True)
        st.caption("Generated: length in words")
        st.bar_chart(generated_lengths, x="words", y="queries")
    with right:
        st.caption(f"Examples, {len(example_texts)} queries: first words")
        st.bar_chart(example_first, x="first word", y="share", horizontal=True)
        st.caption("Examples: length in words")
        st.bar_chart(example_lengths, x="words", y="queries")
        st.markdown("**The examples**")
        st.dataframe([{"query": q} for q in example_texts], hide_index=True)

    st.markdown("**Sample queries per document**")
    by_document: dict[int, list[Any]] = {}
    for query in queries:
        by_document.setdefault(query.document_id, []).append(query)
    for document_id in list(by_document)[:SAMPLE_DOCUMENTS]:
        rows = by_document[document_id]
        with st.expander(f"Document {document_id}: {len(rows)} queries", expanded=False):
            st.dataframe(
                [{"query": q.text, "status": q.status.value, "reason": q.reason or ""} for q in rows],
                hide_index=True,
            )


def render() -> None:
    st.header("Synthetic data")
    show_notice()
    with page_context() as context:
        tasks = list_tasks(context.session)
        if not tasks:
            st.info("No tasks yet (Tasks page).")
            return
        task_name = st.selectbox("Task", [task.name for task in tasks], key="synthetic-task")
        runs = list_runs(context.session, get_task(context.session, task_name))
        if not runs:
            st.info(f"Task {task_name} has no generation run yet; launch a pipeline on the Jobs page.")
            return
        labels = {
            f"run {run.id} · {run.state.value} · {when(run.started_at)}": run.id
            for run in sorted(runs, key=lambda r: -r.id)
        }
        run_id = labels[st.selectbox("Generation run", list(labels), key="synthetic-run")]
        _run_section(context, task_name, run_id)


render()
