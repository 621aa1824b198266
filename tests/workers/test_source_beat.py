"""Celery beat's entry for scheduled source syncs is part of the CPU worker's configuration, and the task it names
is registered by the CPU worker's task modules."""

from __future__ import annotations

from ferret.core.settings import FerretSettings
from ferret.workers.apps.base import celery_config, create_app
from ferret.workers.names import SYNC_DUE_TASK, WorkerKind


def test_the_cpu_worker_runs_beats_source_schedule() -> None:
    settings = FerretSettings(broker_url="redis://127.0.0.1:6379/0")
    beat = celery_config(settings, WorkerKind.CPU)["beat_schedule"]["sync-due-sources"]
    assert (beat["task"], beat["schedule"], beat["options"]["queue"]) == (SYNC_DUE_TASK, 60.0, "ferret.cpu")
    assert "beat_schedule" not in celery_config(settings, WorkerKind.GPU)
    app = create_app(WorkerKind.CPU, settings)
    app.loader.import_default_modules()
    assert SYNC_DUE_TASK in app.tasks
