"""The llm worker: query generation against the LLM endpoint (or the embedded generator).

Run with ``ferret worker --kind llm`` or ``celery -A ferret.workers.apps.llm worker -Q ferret.llm``.
"""

from __future__ import annotations

from ferret.workers.apps.base import create_app
from ferret.workers.names import WorkerKind

app = create_app(WorkerKind.LLM)
