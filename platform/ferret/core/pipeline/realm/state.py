"""What a REALM pre-training job carries from stage to stage (``RealmState``), as JSON.

``run_key`` names the job's run folder (``FERRET_HOME/realm/<run_key>``: checkpoints, the chosen retriever, the
held-out sentences) and its internal index versions; a job started with ``resume_from`` takes the key of a killed
one, so training continues from that job's last checkpoint.

Example:
    >>> state = RealmState.start(corpus, RealmConfig(steps=200), model_name="realm-docs", job_id=7)
    >>> RealmState.from_json(state.to_json()) == state
    True
"""

from __future__ import annotations

import uuid
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

from sqlalchemy.orm import Session

from ferret.core.db.job import get_job
from ferret.core.db.models import Corpus, JobState
from ferret.core.errors import ConflictError, InvalidInputError
from ferret.core.realm.config import RealmConfig

JOB_REALM = "realm_pretrain"


@dataclass(frozen=True)
class RealmState:
    corpus: str
    config: RealmConfig
    model_name: str
    run_key: str
    job_id: int | None = None
    task: str | None = None
    """Judge the result on this task's evidence; None: on REALM's own held-out sentences."""
    summary: dict[str, Any] = field(default_factory=dict)
    """What the stages found: the RU curve, staleness, the guard's verdict."""

    @classmethod
    def start(
        cls,
        corpus: Corpus,
        config: RealmConfig,
        *,
        model_name: str | None = None,
        job_id: int | None = None,
        task: str | None = None,
        run_key: str | None = None,
    ) -> RealmState:
        key = run_key or uuid.uuid4().hex[:12]
        name = model_name or f"realm-{corpus.name}-{key[:6]}"
        return cls(corpus.name, config.validated(), name, key, job_id, task)

    def advance(self, **summary: Any) -> RealmState:
        return replace(self, summary={**self.summary, **summary})

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["config"] = self.config.to_json()
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RealmState:
        values = {name: value for name, value in data.items() if name in {f.name for f in fields(cls)}}
        values["config"] = RealmConfig.from_json(dict(values["config"]))
        values["summary"] = dict(values.get("summary") or {})
        return cls(**values)


def resumed_state(session: Session, job_id: int, corpus: Corpus) -> RealmState:
    """The state of a new job that continues REALM job ``job_id``: its run key, model name and configuration (a
    checkpoint only makes sense with the settings that wrote it)."""
    earlier = get_job(session, job_id)
    if earlier.kind != JOB_REALM:
        raise InvalidInputError(f"Job {job_id} is not a REALM pre-training job.")
    if earlier.state == JobState.SUCCEEDED:
        raise ConflictError(f"Job {job_id} already finished; there is nothing to resume.")
    if earlier.corpus_id != corpus.id:
        raise InvalidInputError(f"Job {job_id} pre-trained another corpus.")
    previous = RealmState.from_json(dict(earlier.params["state"]))
    return replace(previous, job_id=None, summary={})
