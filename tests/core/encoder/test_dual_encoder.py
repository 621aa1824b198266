"""The torch tower encodes a CPU batch in groups of about one token length: the vectors are those of each text
encoded alone, in input order."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from ferret.core.encoder.dual_encoder import DualEncoder


def test_a_batch_of_mixed_lengths_gives_each_text_its_own_vector_in_input_order(encoder: DualEncoder) -> None:
    assert encoder.device == "cpu"
    sentence = "Glaciers carve deep valleys into the mountains as they slowly move downhill. "
    texts = [sentence * repeats for repeats in (1, 9, 2, 30, 1, 5, 14, 3, 40, 2)]
    texts[4] = "Volcanoes erupt when magma rises."  # two texts of one length must not swap either

    vectors = encoder.encode(texts, batch_size=4)

    assert vectors.shape == (len(texts), encoder.dimension) and vectors.dtype == np.float32
    alone = np.stack([encoder.encode([text])[0] for text in texts])
    np.testing.assert_allclose(vectors, alone, atol=1e-5)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert (vectors @ vectors.T)[0, 4] < 0.9  # distinct texts, so a swap would show


def test_nothing_to_encode_is_an_empty_matrix(encoder: DualEncoder) -> None:
    assert encoder.encode([]).shape == (0, encoder.dimension)


def test_no_progress_bar_at_info_level(
    encoder: DualEncoder, capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    """sentence-transformers draws a "Batches" bar whenever its logger is at INFO, as in a Celery worker at
    ``--loglevel info``: the workers' logs held one per encode call, as WARNING lines (a QA pass)."""
    caplog.set_level(logging.INFO, logger="sentence_transformers")
    encoder.encode(["one passage about fjords", "a second, longer passage about glaciers and moraines"])
    encoder.encode(["one query"])
    captured = capfd.readouterr()
    assert "Batches" not in captured.err + captured.out
