"""A new head over the base model is what the reranker's trainer builds: transformers' load report about its newly
initialised weights is silenced for that load (it printed a table into the benchmark's and a job's output)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from transformers.utils import logging as hf_logging

from ferret.core.encoder.new_heads import new_head_expected
from ferret.core.encoder.registry import base_model_path
from ferret_testing import logged_messages


@pytest.fixture
def transformers_messages() -> Iterator[list[str]]:
    with logged_messages("transformers") as messages:
        yield messages


def _load_with_a_new_head() -> None:
    from sentence_transformers import CrossEncoder

    CrossEncoder(str(base_model_path()), num_labels=1, device="cpu")


def test_the_new_heads_load_report_is_silenced_and_the_verbosity_restored(transformers_messages: list[str]) -> None:
    before = hf_logging.get_verbosity()
    with new_head_expected():
        _load_with_a_new_head()
    assert not [m for m in transformers_messages if "classifier" in m], transformers_messages
    assert hf_logging.get_verbosity() == before


def test_without_it_the_load_report_names_the_new_weights(transformers_messages: list[str]) -> None:
    before = hf_logging.get_verbosity()
    hf_logging.set_verbosity_warning()
    try:
        _load_with_a_new_head()
    finally:
        hf_logging.set_verbosity(before)
    assert [m for m in transformers_messages if "classifier" in m]  # what the other test's silence is measured against


def test_the_verbosity_is_restored_when_the_load_fails() -> None:
    before = hf_logging.get_verbosity()
    with pytest.raises(OSError), new_head_expected():
        raise OSError("no model here")
    assert hf_logging.get_verbosity() == before
