"""The job catalogue: every kind's stages resolve to their functions (those named by ``StageBody`` are imported only
when a stage runs, so a wrong module or name would otherwise surface in a worker, hours into a job)."""

from __future__ import annotations

import inspect

import pytest

from ferret.core.errors import InvalidInputError
from ferret.core.jobs.catalog import JOB_KINDS, pipeline_of
from ferret.core.pipeline.declaration import StageBody


def test_every_stage_body_resolves_to_a_function_of_context_and_state() -> None:
    named = 0
    for pipeline in JOB_KINDS.values():
        for stage in pipeline.stages:
            body = stage.run
            if isinstance(body, StageBody):
                named += 1
                body = body.resolve()
            assert callable(body), (pipeline.kind, stage.name)
            assert len(inspect.signature(body).parameters) == 2, (pipeline.kind, stage.name)

    assert named >= 8  # Promptagator's six stages and REALM's two are imported on first run


def test_a_body_that_names_nothing_fails_when_resolved() -> None:
    with pytest.raises(AttributeError):
        StageBody("ferret.core.pipeline.promptagator.stages", "no_such_stage").resolve()
    with pytest.raises(TypeError, match="is not a function"):
        StageBody("ferret.core.pipeline.promptagator.declaration", "JOB_PIPELINE").resolve()


def test_an_unknown_kind_is_one_sentence() -> None:
    with pytest.raises(InvalidInputError, match="Unknown job kind 'nope'; the kinds are"):
        pipeline_of("nope")
