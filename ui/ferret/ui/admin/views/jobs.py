"""Jobs: launch a Promptagator pipeline with its settings, follow each job's stage and progress live, read its last
error, cancel it, retry it. Launch, cancel and retry call the same dispatch functions as ``ferret pipeline run
--async``, ``ferret jobs cancel`` and ``POST /v1/jobs``."""

from __future__ import annotations

from typing import Literal, cast

import streamlit as st

from ferret.core.db.job import list_jobs
from ferret.core.db.task import list_tasks
from ferret.core.pipeline.promptagator.state import PipelineConfig
from ferret.ui.admin.actions import launch_pipeline
from ferret.ui.admin.common import attempt, notify, page_context, show_notice
from ferret.ui.admin.job_card import REFRESH, job_card

DEFAULTS = PipelineConfig()


def _launch_form(task_names: list[str]) -> None:
    with st.form("launch-pipeline"):
        st.markdown("**Launch a pipeline** (Promptagator: generate → filter → train → guard → index)")
        task = st.selectbox("Task", task_names, key="launch-task")
        left, middle, right = st.columns(3)
        max_documents = left.number_input("Max documents (0: all)", min_value=0, value=0, key="launch-max-docs")
        queries_per_doc = middle.number_input("Queries per document", 1, 8, 2, key="launch-qpd")
        max_steps = right.number_input("Training steps (0: scaled to the data)", 0, value=0, key="launch-steps")
        left, middle, right = st.columns(3)
        round_trip = left.selectbox("Round-trip filter", ["base", "bm25", "none"], key="launch-round-trip")
        round_trip_k = middle.number_input("Round-trip K (0: from the examples)", 0, 100, 0, key="launch-k")
        promote = right.selectbox("Promote", ["auto", "force", "never"], key="launch-promote")
        model_name = st.text_input("Model version name (empty: <task>-job<id>)", key="launch-model-name")
        left, right = st.columns(2)
        reranker = left.checkbox(
            "Train a reranker (kept only if it beats the first stage; 10-20 min or more on 2 CPU cores)",
            key="launch-reranker",
        )
        distill = right.checkbox("Distil a kept reranker into the retriever", key="launch-distill")
        expand = left.checkbox(
            "Expand documents with their kept queries in BM25 (a second index build)", key="launch-expand"
        )
        if st.form_submit_button("Launch", type="primary"):

            def start() -> str:
                config = PipelineConfig(
                    max_documents=int(max_documents) or None,
                    queries_per_doc=int(queries_per_doc),
                    max_steps=int(max_steps) or None,
                    round_trip=round_trip,
                    round_trip_k=int(round_trip_k) or None,
                    promote=cast(Literal["auto", "force", "never"], promote),
                    model_name=model_name.strip() or None,
                    reranker=bool(reranker),
                    distill=bool(distill),
                    expand=bool(expand),
                ).validated()
                return launch_pipeline(str(task), config)

            message = attempt(start)
            if message:
                notify("success", message)
                st.rerun()


@st.fragment(run_every=REFRESH)
def _jobs_list() -> None:
    """Re-read every two seconds: progress, stage and errors come from the jobs table the stages write."""
    with page_context() as context:
        jobs = list_jobs(context.session, limit=20)
        if not jobs:
            st.info("No jobs yet.")
        for job in jobs:
            job_card(job, str(job.params.get("task", "")))


def render() -> None:
    st.header("Jobs")
    show_notice()
    with page_context() as context:
        task_names = [task.name for task in list_tasks(context.session)]
        mode = "Celery workers" if context.settings.broker_url else "this admin's process (embedded mode)"
    st.caption(f"Jobs run on {mode}.")
    if task_names:
        _launch_form(task_names)
    else:
        st.info("Create a task first (Tasks page).")
    _jobs_list()


render()
