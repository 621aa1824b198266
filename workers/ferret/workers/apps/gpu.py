"""The gpu worker: training, embedding and index builds, at concurrency 1 and prefetch 1.

Run with ``ferret worker --kind gpu`` or ``celery -A ferret.workers.apps.gpu worker -Q ferret.gpu``.
"""

from __future__ import annotations

from ferret.workers.apps.base import create_app
from ferret.workers.names import WorkerKind

app = create_app(WorkerKind.GPU)
