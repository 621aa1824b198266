"""The Celery task table (``ferret.workers.tasks.table``): each app registers its own tasks, once."""

from __future__ import annotations

import warnings

from ferret.core.settings import FerretSettings
from ferret.workers.apps.base import create_app
from ferret.workers.names import WorkerKind


def test_apps_of_one_process_register_their_tasks_without_a_duplicate_name_warning() -> None:
    """A process that builds a worker app, the client app and another worker app (the test run, a worker that
    sends) must not see Celery's DuplicateTaskNameWarning: a task registered to one app stays out of the others."""
    settings = FerretSettings(broker_url="redis://127.0.0.1:1/0")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cpu = create_app(WorkerKind.CPU, settings)  # holds beat's sync_due besides its stage tasks
        gpu = create_app(WorkerKind.GPU, settings)
        client = create_app(None, settings)
        again = create_app(WorkerKind.GPU, settings)
        llm = create_app(WorkerKind.LLM, settings)
        names = {
            app.main: sorted(name for name in app.tasks if name.startswith("ferret."))
            for app in (cpu, gpu, client, again, llm)
        }
    assert [str(w.message) for w in caught if "Duplicate" in type(w.message).__name__] == []
    assert names["ferret-client"] == []  # the sending app holds no task bodies
    assert "ferret.pipeline.train" in names["ferret-gpu"] and "ferret.pipeline.generate" not in names["ferret-gpu"]
    assert names["ferret-llm"] == ["ferret.pipeline.generate"]
    assert "ferret.sources.sync_due" in names["ferret-cpu"] and "ferret.sources.sync_due" not in names["ferret-gpu"]
