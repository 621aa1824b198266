"""A job as the admin shows it, wherever it is followed (the Jobs page, the Sources page's "Sync now"): state,
stages, progress with the counts its stage reports, the last error, cancel and retry. Pages re-read it every
``REFRESH`` in a fragment: progress comes from the jobs table the stages write."""

from __future__ import annotations

from datetime import timedelta
from functools import partial
from typing import Any

import streamlit as st

from ferret.core.db.models import JobState
from ferret.ui.admin.actions import cancel_job, retry_job
from ferret.ui.admin.common import run_action, when

REFRESH = timedelta(seconds=2)
FINISHED = (JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED)
STAGES = ("generate", "filter", "train", "guard", "index")
SYNC_COUNTS = ("new", "changed", "unchanged", "deleted", "permission_updates", "skipped")
"""Counts of a source sync, shown beside its progress bar as the sync reaches its checkpoints."""
INGEST_COUNTS = ("added", "updated", "unchanged", "deleted", "skipped")
"""Counts of an ingest or a push, by their own names (``DocumentReport``); a sync's names read 0 for them."""


def count_line(kind: str, counts: dict[str, Any]) -> str:
    """The counts a job of ``kind`` reports, in the words of its own report; empty when it reports none."""
    labels = SYNC_COUNTS if kind == "source_sync" else INGEST_COUNTS
    return " · ".join(f"{label.replace('_', ' ')} {counts[label]}" for label in labels if label in counts)


def job_card(job: Any, task_of_job: str = "") -> None:
    """A job's title, stages, progress bar with its counts, last error, and cancel/retry buttons."""
    title = f"Job {job.id} · {job.kind}{f' · task {task_of_job}' if task_of_job else ''} · {job.state.value}"
    with st.container(border=True):
        st.markdown(f"**{title}**")
        if job.kind == "pipeline" and job.stage in STAGES:
            done = STAGES.index(job.stage)
            st.caption(
                " → ".join(
                    f"✔ {stage}"
                    if i < done or job.state == JobState.SUCCEEDED
                    else (f"▶ {stage}" if i == done else stage)
                    for i, stage in enumerate(STAGES)
                )
            )
        st.progress(min(1.0, max(0.0, job.progress)), text=f"{job.stage or job.state.value} {100 * job.progress:.0f}%")
        line = count_line(job.kind, job.counts or {})
        if line:
            st.caption(line)
        st.caption(
            f"created {when(job.created_at)} · finished {when(job.finished_at) or '—'} · stage runs {job.attempts}"
        )
        if job.error:
            st.error(f"Last error: {job.error}")
        if job.state == JobState.SUCCEEDED and job.result:
            st.caption(", ".join(f"{k}: {v}" for k, v in job.result.items() if not isinstance(v, dict | list)))
        left, right, _ = st.columns([1, 1, 4])
        left.button(
            "Cancel",
            key=f"cancel-{job.id}",
            disabled=job.state in FINISHED,
            on_click=run_action,
            args=(partial(cancel_job, job.id),),
        )
        right.button(
            "Retry",
            key=f"retry-{job.id}",
            disabled=job.state not in (JobState.FAILED, JobState.CANCELLED) or job.payload is None,
            on_click=run_action,
            args=(partial(retry_job, job.id),),
        )
