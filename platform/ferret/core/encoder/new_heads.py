"""Loading a pretrained body under a new head: transformers warns (its load report) that the head's weights are newly
initialised. Where a new head is exactly what the caller builds (a reranker's one-logit head, a span reader, REALM's
masked-LM transform), that warning is noise in a job's log, so it is silenced for the load and nothing else."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def new_head_expected() -> Iterator[None]:
    """transformers' logging at errors only while the model loads; its verbosity is restored after, on errors too.

    >>> with new_head_expected():
    ...     model = CrossEncoder(base_path, num_labels=1)
    """
    from transformers.utils import logging as hf_logging

    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        yield
    finally:
        hf_logging.set_verbosity(verbosity)
