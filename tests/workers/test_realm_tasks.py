"""The REALM pipeline's stages become gpu-worker tasks through the derived Celery task table (nothing written)."""

from __future__ import annotations

from celery import Celery

from ferret.core.pipeline.declaration import WorkerQueue
from ferret.workers.names import QUEUE_OF_TASK, Queue
from ferret.workers.tasks.table import register_tasks


def test_gpu_workers_run_realm_and_no_other_worker_does() -> None:
    gpu = register_tasks(Celery("gpu-test"), WorkerQueue.GPU)
    assert {"ferret.realm.pretrain", "ferret.realm.guard"} <= set(gpu)
    for queue in (WorkerQueue.LLM, WorkerQueue.CPU):
        assert not {name for name in register_tasks(Celery("other"), queue) if name.startswith("ferret.realm.")}
    assert QUEUE_OF_TASK["ferret.realm.pretrain"] == Queue.GPU
