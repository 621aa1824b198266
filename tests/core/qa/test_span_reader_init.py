"""A new span reader's start/end head is drawn from its own seed: the same data trains the same reader, whatever
ran before in the process (the full test run once trained a reader that answered "Porto in 1923" for "Porto")."""

from __future__ import annotations

import torch

from ferret.core.encoder.registry import base_model_path
from ferret.core.qa.span_reader import SpanReader


def test_the_new_head_does_not_depend_on_the_global_random_state() -> None:
    torch.manual_seed(1)
    first = SpanReader.build(base_model_path()).model.qa_outputs.weight.detach().clone()
    torch.manual_seed(2)
    torch.rand(100)
    second = SpanReader.build(base_model_path()).model.qa_outputs.weight.detach().clone()
    state = torch.random.get_rng_state()
    third = SpanReader.build(base_model_path(), seed=14).model.qa_outputs.weight.detach().clone()

    assert torch.equal(first, second)
    assert not torch.equal(first, third)  # the seed is what decides
    assert torch.equal(state, torch.random.get_rng_state())  # and the caller's generator is left as it was
