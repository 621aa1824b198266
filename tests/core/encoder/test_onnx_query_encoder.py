"""The ONNX query tower (issue 11 item 9, issue 16 item 1) against the torch one it replaces at search time: the same
vectors on the demo's real questions and passages, the same rankings, sentence-transformers' prompt and pooling
settings reproduced from a model folder, and a missing or corrupt export that is written again, never a crash."""

from __future__ import annotations

import json
import logging
import shutil
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from ferret.core.demo import DEMO_DATASET
from ferret.core.encoder import query_encoder as query_encoders
from ferret.core.encoder.dual_encoder import DualEncoder
from ferret.core.encoder.onnx_export import INT8_FILE, length_buckets, quantize_int8
from ferret.core.encoder.onnx_query_encoder import (
    FAILED_FILE,
    MODEL_FILE,
    OnnxQueryEncoder,
    export_onnx,
    onnx_folder,
)
from ferret.core.encoder.query_encoder import prepare_query_encoder, query_encoder
from ferret.core.encoder.registry import base_model_path, load_encoder
from ferret.core.settings import FerretSettings


def demo_rows(name: str, count: int) -> list[str]:
    with (DEMO_DATASET / name).open(encoding="utf-8") as lines:
        return [json.loads(line)["text"] for _, line in zip(range(count), lines, strict=False)]


@pytest.fixture(scope="module")
def questions() -> list[str]:
    return demo_rows("queries.jsonl", 60)


@pytest.fixture(scope="module")
def base_onnx(encoder: DualEncoder) -> OnnxQueryEncoder:
    settings = FerretSettings()  # FERRET_ONNX_CACHE: the run's shared cache (conftest)
    folder = export_onnx(encoder, onnx_folder(settings, encoder.path))
    return OnnxQueryEncoder.open(folder, max_passage_tokens=settings.max_passage_tokens)


@pytest.fixture
def fresh_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FerretSettings]:
    """Settings with a cache of their own and no query tower remembered by this process."""
    monkeypatch.setenv("FERRET_ONNX_CACHE", str(tmp_path / "onnx"))
    query_encoders.forget_query_encoders()
    yield FerretSettings(home=tmp_path / "home")
    query_encoders.forget_query_encoders()


@pytest.mark.slow
def test_onnx_vectors_equal_torch_vectors_on_real_texts(
    encoder: DualEncoder, base_onnx: OnnxQueryEncoder, questions: list[str]
) -> None:
    texts = [*questions, *demo_rows("corpus.jsonl", 6), "  Glaciers, FJORDS & millennia!  ", "é ü ß 漢字 🙂"]

    cosines = np.sum(encoder.encode_queries(texts) * base_onnx.encode_queries(texts), axis=1)

    assert cosines.min() >= 0.9999, (cosines.min(), texts[int(cosines.argmin())])
    assert base_onnx.max_seq_length == encoder.max_seq_length  # long passages are truncated at the same token


@pytest.mark.slow
def test_onnx_queries_rank_a_real_corpus_as_torch_queries_do(
    encoder: DualEncoder, base_onnx: OnnxQueryEncoder, questions: list[str]
) -> None:
    passages = encoder.encode_passages(demo_rows("corpus.jsonl", 80))
    torch_scores = encoder.encode_queries(questions) @ passages.T
    onnx_scores = base_onnx.encode_queries(questions) @ passages.T

    torch_top = np.argsort(-torch_scores, axis=1, kind="stable")[:, :10]
    onnx_top = np.argsort(-onnx_scores, axis=1, kind="stable")[:, :10]
    assert (torch_top == onnx_top).all()


def test_prompt_and_pooling_settings_of_the_model_folder_are_reproduced(tmp_path: Path) -> None:
    """A model folder with a default prompt left out of the pooling, and CLS + max pooling: the exported pipeline
    reads them as sentence-transformers does (weights linked, not copied)."""
    source, model = base_model_path(), tmp_path / "prompted"
    shutil.copytree(source, model, ignore=shutil.ignore_patterns("model.safetensors"))
    (model / "model.safetensors").symlink_to(source / "model.safetensors")
    (model / "config_sentence_transformers.json").write_text(
        json.dumps({"prompts": {"query": "query: ", "document": ""}, "default_prompt_name": "query"})
    )
    (model / "1_Pooling" / "config.json").write_text(
        json.dumps({"embedding_dimension": 384, "pooling_mode": ["cls", "max"], "include_prompt": False})
    )
    settings = FerretSettings(home=tmp_path / "home", onnx_cache=tmp_path / "onnx")
    torch_encoder = DualEncoder.load(model, device="cpu", max_seq_length=settings.max_passage_tokens + 2)
    onnx_encoder = OnnxQueryEncoder.open(
        export_onnx(torch_encoder, onnx_folder(settings, model)), max_passage_tokens=settings.max_passage_tokens
    )
    texts = demo_rows("queries.jsonl", 30)

    expected, got = torch_encoder.encode_queries(texts), onnx_encoder.encode_queries(texts)

    assert got.shape == (30, 768) and onnx_encoder.pipeline.prompt_length > 0
    assert np.sum(expected * got, axis=1).min() >= 0.9999


def test_a_corrupt_export_is_served_by_torch_once_and_written_again(
    fresh_cache: FerretSettings, caplog: pytest.LogCaptureFixture, questions: list[str]
) -> None:
    path = base_model_path()
    prepare_query_encoder(path, fresh_cache)
    folder = onnx_folder(fresh_cache, path)
    (folder / MODEL_FILE).write_bytes(b"not an onnx graph")

    with caplog.at_level(logging.WARNING, logger="ferret"):
        first = query_encoder(path, fresh_cache)
        again = query_encoder(path, fresh_cache)

    assert isinstance(first, DualEncoder) and again is first  # torch for this process, decided once
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING and "ONNX" in r.getMessage()]
    assert len(warnings) == 1 and "\n" not in warnings[0].getMessage()
    query_encoders.forget_query_encoders()  # the next process finds the export written again
    rebuilt = query_encoder(path, fresh_cache)
    assert isinstance(rebuilt, OnnxQueryEncoder)
    np.testing.assert_allclose(rebuilt.encode_queries(questions[:5]), first.encode_queries(questions[:5]), atol=1e-4)


def test_a_missing_export_is_written_by_the_first_search(fresh_cache: FerretSettings) -> None:
    path = base_model_path()
    folder = onnx_folder(fresh_cache, path)
    assert not folder.exists()

    assert isinstance(query_encoder(path, fresh_cache), DualEncoder)
    assert (folder / MODEL_FILE).is_file() and not list(folder.parent.glob(".staging-*"))  # renamed into place
    query_encoders.forget_query_encoders()
    assert isinstance(query_encoder(path, fresh_cache), OnnxQueryEncoder)


def test_a_model_that_cannot_be_exported_is_served_by_torch(fresh_cache: FerretSettings, tmp_path: Path) -> None:
    """Weighted-mean pooling is not reproduced: the export says so once, in a marker, and torch serves the model."""
    source, model = base_model_path(), tmp_path / "weighted"
    shutil.copytree(source, model, ignore=shutil.ignore_patterns("model.safetensors"))
    (model / "model.safetensors").symlink_to(source / "model.safetensors")
    pooling = {"embedding_dimension": 384, "pooling_mode": "weightedmean"}
    (model / "1_Pooling" / "config.json").write_text(json.dumps(pooling))

    prepare_query_encoder(model, fresh_cache)  # an index build with it does not fail

    assert (onnx_folder(fresh_cache, model) / FAILED_FILE).is_file()
    assert isinstance(query_encoder(model, fresh_cache), DualEncoder)


def test_int8_vectors_stay_close(encoder: DualEncoder, questions: list[str]) -> None:
    settings = FerretSettings()
    folder = export_onnx(encoder, onnx_folder(settings, encoder.path), int8=True)
    int8 = OnnxQueryEncoder.open(folder, max_passage_tokens=settings.max_passage_tokens, int8=True)

    cosines = np.sum(encoder.encode_queries(questions) * int8.encode_queries(questions), axis=1)

    assert cosines.mean() >= 0.99, cosines.mean()


def test_quantising_leaves_no_advice_in_the_log(
    encoder: DualEncoder, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """ONNX Runtime's quantiser logs "Please consider to run pre-processing" on the root logger at every call."""
    folder = export_onnx(encoder, onnx_folder(FerretSettings(), encoder.path))
    shutil.copy(folder / MODEL_FILE, tmp_path / MODEL_FILE)

    with caplog.at_level(logging.INFO):
        quantized = quantize_int8(tmp_path)

    assert quantized == tmp_path / INT8_FILE and quantized.is_file()
    assert not [r.getMessage() for r in caplog.records if "pre-processing" in r.getMessage()]
    assert not logging.getLogger().filters  # the filter goes with the call


def test_torch_is_used_when_asked_or_on_a_gpu(tmp_path: Path) -> None:
    path = base_model_path()
    for settings in (
        FerretSettings(home=tmp_path, query_encoder="torch"),
        FerretSettings(home=tmp_path, device="cuda:0"),
    ):
        assert query_encoders.uses_onnx(settings) is False
    torch_settings = FerretSettings(home=tmp_path, query_encoder="torch")
    assert query_encoder(path, torch_settings) is load_encoder(path, torch_settings)


def test_the_served_tower_runs_the_configured_threads_without_spinning(fresh_cache: FerretSettings) -> None:
    """One thread that does not spin by default (a loaded server's cores belong to its concurrent requests); 0 gives
    ONNX Runtime's own pool back. Both encode the same vectors."""
    path = base_model_path()
    query_encoder(path, fresh_cache)  # writes the export
    query_encoders.forget_query_encoders()
    served = query_encoder(path, fresh_cache)
    assert isinstance(served, OnnxQueryEncoder)
    options = served._session.get_session_options()
    assert options.intra_op_num_threads == 1
    assert options.get_session_config_entry("session.intra_op.allow_spinning") == "0"

    pooled = query_encoder(path, fresh_cache.model_copy(update={"query_encoder_threads": 0}))
    assert isinstance(pooled, OnnxQueryEncoder) and pooled is not served
    assert pooled._session.get_session_options().intra_op_num_threads == 0  # ONNX Runtime's default: one per core
    questions = demo_rows("queries.jsonl", 8)
    np.testing.assert_allclose(served.encode_queries(questions), pooled.encode_queries(questions), atol=1e-5)


def test_length_buckets_cover_every_row_once_with_little_padding() -> None:
    lengths = [40, 9, 10, 11, 200, 12, 9, 41, 3, 12, 12, 12]

    batches = length_buckets(lengths, max_batch=3)

    assert sorted(i for batch in batches for i in batch) == list(range(len(lengths)))
    assert all(1 <= len(batch) <= 3 for batch in batches)
    for batch in batches:
        shortest, longest = min(lengths[i] for i in batch), max(lengths[i] for i in batch)
        assert longest <= shortest * 1.15 + 1, batch
    assert [lengths[batch[0]] for batch in batches] == sorted(lengths[batch[0]] for batch in batches)
    assert length_buckets([], max_batch=8) == []
