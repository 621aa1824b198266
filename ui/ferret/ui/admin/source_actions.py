"""The Sources page's actions: add or replace (after the same access check), sync now, remove — each the same domain
call as ``ferret source`` (``ferret.core.sources.service``), in its own application context so it commits on its
own. "Sync now" starts the sync as a job (``ferret.core.jobs.source_sync``), so a long sync never holds the page's
request.

A definition is the YAML or JSON of ``ferret source add FILE`` pasted or uploaded; secrets stay references
(``{env: NAME}``/``{file: PATH}``) and a plain-text secret is refused by the domain with its one sentence.
"""

from __future__ import annotations

import json
from typing import Any

import yaml

from ferret.core.db.models import SyncRun
from ferret.core.db.source import run_summary
from ferret.core.errors import InvalidInputError
from ferret.core.jobs.source_sync import sync_jobs
from ferret.core.sources.config import SourceSpec, parse_spec
from ferret.core.sources.service import add_source, find_configured, remove_source
from ferret.ui.runtime import open_context


def parse_definition(text: str) -> SourceSpec:
    """A pasted or uploaded definition (JSON is YAML, so one parser reads both) as a validated spec."""
    if not text.strip():
        raise InvalidInputError("Paste or upload a source definition (YAML or JSON) first.")
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as error:
        first = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise InvalidInputError(f"The source definition is not valid YAML or JSON ({first}).") from None
    return parse_spec(raw)


def save_source(text: str, *, replace: bool, check: bool = True) -> str:
    """Add or replace the source after its access check (``check``), as ``ferret source add [--no-check]`` does."""
    spec = parse_definition(text)
    with open_context() as context:
        source = add_source(context.session, spec, context.connectors, replace=replace, check=check)
        schedule = f"every {source.schedule_minutes} min" if source.schedule_minutes else "on demand"
        verb = "replaced" if replace else "added"
        unchecked = "" if check else " (access not checked)"
        return f"Source {source.name} ({source.kind}) of corpus {spec.corpus} {verb}{unchecked}: synced {schedule}."


def definition_text(corpus: str, name: str) -> str:
    """The stored definition as YAML (secret references as stored, never their values), for editing."""
    with open_context() as context:
        source = find_configured(context.session, corpus, name)
        spec: dict[str, Any] = {"corpus": corpus, "name": source.name, "kind": source.kind}
        spec["config"] = json.loads(json.dumps(source.config))
        if source.schedule_minutes:
            spec["schedule_minutes"] = source.schedule_minutes
        spec["enabled"] = source.enabled
        return yaml.safe_dump(spec, sort_keys=False)


def sync_now(corpus: str, name: str, full: bool = False) -> str:
    """Start a sync of one source as a job (a worker, or a thread of this process without a broker), from its
    checkpoint or, ``full``, from the start; the page follows the job and shows the sync's report when it ends."""
    with open_context() as context:
        source = find_configured(context.session, corpus, name)
        job = context.jobs.start_job("source_sync", context.session, source=source, trigger="admin", full=full)
        return f"Job {job.id} started: {'full ' if full else ''}sync of source {name}."


def last_sync_job(corpus: str, name: str) -> tuple[Any, dict[str, Any]] | None:
    """The newest sync job of a source and the report of the sync run it made (empty while none is recorded)."""
    with open_context() as context:
        source = find_configured(context.session, corpus, name)
        jobs = sync_jobs(context.session, source)
        if not jobs:
            return None
        job = jobs[0]
        run_id = (job.result or {}).get("sync_run")
        run = context.session.get(SyncRun, run_id) if run_id is not None else None
        context.session.expunge(job)
        return job, run_summary(run)


def delete_source(corpus: str, name: str) -> str:
    with open_context() as context:
        source = find_configured(context.session, corpus, name)
        removed = remove_source(context.session, context.backend, context.settings, source)
        return f"Source {name} removed with its {removed} documents."


def report_line(summary: dict[str, Any]) -> str:
    """A sync report in one line, as ``ferret source sync`` prints it."""
    if not summary:
        return "never synced"
    counts = summary.get("counts", {})
    duration = summary.get("duration_s") or counts.get("duration_s", 0)
    return (
        f"sync {summary.get('id')} {summary.get('state')}: new {counts.get('new', 0)}, changed "
        f"{counts.get('changed', 0)}, unchanged {counts.get('unchanged', 0)}, deleted {counts.get('deleted', 0)}, "
        f"permission updates {counts.get('permission_updates', 0)}, skipped {counts.get('skipped', 0)}; "
        f"{duration} s"
    )
