"""Retrieval tasks (Promptagator): a description and 2-8 examples, the same shape as `ferret task import` YAML."""

from __future__ import annotations

from fastapi import APIRouter, Path, Response, status
from sqlalchemy.orm import Session

from ferret.api.auth import AdminCaller
from ferret.api.dependencies import SessionDep
from ferret.api.errors import error_responses
from ferret.api.schemas import TaskIn, TaskList, TaskOut
from ferret.core.db.models import RetrievalTask
from ferret.core.db.task import delete_task, get_task, list_tasks, task_run_counts
from ferret.core.synth.task_spec import create_task, task_to_spec

router = APIRouter(tags=["tasks"])
TaskName = Path(min_length=1, max_length=128)


def task_out(task: RetrievalTask, runs: int) -> TaskOut:
    spec = task_to_spec(task)
    return TaskOut(
        name=spec.name,
        corpus=spec.corpus,
        description=spec.description,
        e_doc=spec.e_doc,
        e_query=spec.e_query,
        zero_shot=spec.zero_shot,
        generation=spec.generation,
        examples=spec.examples,
        runs=runs,
        created_at=task.created_at,
    )


def _one(session: Session, task: RetrievalTask) -> TaskOut:
    return task_out(task, task_run_counts(session, [task]).get(task.id, 0))


@router.get("/v1/tasks", response_model=TaskList, responses=error_responses(401, 403), summary="List tasks")
def list_all(_caller: AdminCaller, session: SessionDep) -> TaskList:
    tasks = list_tasks(session)
    runs = task_run_counts(session, tasks)
    return TaskList(tasks=[task_out(task, runs.get(task.id, 0)) for task in tasks])


@router.post(
    "/v1/tasks",
    response_model=TaskOut,
    status_code=status.HTTP_201_CREATED,
    responses=error_responses(401, 403, 404, 409, 413, 422),
    summary="Create a task",
)
def create(body: TaskIn, caller: AdminCaller, session: SessionDep) -> TaskOut:
    """Validated completely against the corpus (each example's document must exist and be readable by the key: one
    shared with none of its groups answers as a missing one) before anything is written."""
    task = create_task(session, body, readable_by=caller.search_groups)
    session.commit()
    return _one(session, task)


@router.get("/v1/tasks/{name}", response_model=TaskOut, responses=error_responses(401, 403, 404), summary="One task")
def get_one(_caller: AdminCaller, session: SessionDep, name: str = TaskName) -> TaskOut:
    return _one(session, get_task(session, name))


@router.delete(
    "/v1/tasks/{name}",
    status_code=status.HTTP_204_NO_CONTENT,
    response_class=Response,
    responses=error_responses(401, 403, 404),
    summary="Delete a task with its generation runs and synthetic queries",
)
def delete(_caller: AdminCaller, session: SessionDep, name: str = TaskName) -> Response:
    delete_task(session, get_task(session, name))
    session.commit()
    return Response(status_code=status.HTTP_204_NO_CONTENT)
