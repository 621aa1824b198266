"""The cpu worker: ingestion, chunking and filtering.

Run with ``ferret worker --kind cpu`` or ``celery -A ferret.workers.apps.cpu worker -Q ferret.cpu``.
"""

from __future__ import annotations

from ferret.workers.apps.base import create_app
from ferret.workers.names import WorkerKind

app = create_app(WorkerKind.CPU)
