"""The reranker on ONNX Runtime (issue 12 item 3) against the torch model it replaces at search time: the same scores
on the demo's real question/passage pairs, the same ranking with int8 weights, and a missing or corrupt export that
is served by torch once and written again, never a crash. The model is the base MiniLM's transformer with a new
(seeded) classification head: an untrained cross-encoder computes exactly what a trained one does."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import pytest
import torch

from ferret.core.demo import DEMO_DATASET
from ferret.core.encoder.onnx_export import INT8_FILE, MODEL_FILE
from ferret.core.encoder.registry import base_model_path
from ferret.core.errors import ConflictError
from ferret.core.rerank.cross_encoder import (
    MAX_PAIR_TOKENS,
    Reranker,
    forget_rerankers,
    load_reranker,
    prepare_reranker,
)
from ferret.core.rerank.onnx_reranker import OnnxReranker, export_reranker, reranker_onnx_folder
from ferret.core.settings import FerretSettings

Pairs = list[tuple[str, list[str]]]


@pytest.fixture(scope="module")
def cross_encoder_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import torch
    from sentence_transformers import CrossEncoder

    folder = tmp_path_factory.mktemp("reranker") / "untrained"
    torch.manual_seed(13)  # the new head's initial weights
    CrossEncoder(str(base_model_path()), num_labels=1, device="cpu").save(str(folder))
    return folder


@pytest.fixture(scope="module")
def demo_pairs() -> Pairs:
    """30 demo questions, each with its answer's passage and the 9 passages around it (the same article: hard
    pairs), and one question with a passage longer than the pair length, so truncation is compared too."""
    corpus = [json.loads(line) for line in (DEMO_DATASET / "corpus.jsonl").open(encoding="utf-8")]
    where = {d["_id"]: i for i, d in enumerate(corpus)}
    queries = {q["_id"]: q["text"] for q in map(json.loads, (DEMO_DATASET / "queries.jsonl").open(encoding="utf-8"))}
    answer: dict[str, str] = {}
    for line in (DEMO_DATASET / "qrels" / "test.tsv").read_text(encoding="utf-8").splitlines()[1:]:
        qid, doc, _ = line.split("\t")
        answer.setdefault(qid, doc)
    pairs = []
    for qid in list(answer)[::7][:30]:
        at = min(max(where[answer[qid]] - 5, 0), len(corpus) - 10)
        pairs.append((queries[qid], [f"{d['title']}: {d['text']}" for d in corpus[at : at + 10]]))
    pairs.append((" ".join(pairs[0][1])[:300], [" ".join(p for _, texts in pairs[:3] for p in texts)]))
    return pairs


@pytest.fixture
def fresh(tmp_path: Path) -> FerretSettings:
    forget_rerankers()
    return FerretSettings(home=tmp_path / "home", onnx_cache=tmp_path / "onnx", reranker_runtime="onnx-int8")


@pytest.fixture(scope="module")
def exported(cross_encoder_folder: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    settings = FerretSettings(home=tmp_path_factory.mktemp("home"), onnx_cache=tmp_path_factory.mktemp("onnx"))
    folder = reranker_onnx_folder(settings, cross_encoder_folder)
    return export_reranker(Reranker(cross_encoder_folder).model, folder, int8=True)


def _spearman(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.corrcoef(np.argsort(np.argsort(-a)), np.argsort(np.argsort(-b)))[0, 1])


@pytest.mark.slow
def test_onnx_scores_equal_torch_scores_on_real_pairs(
    cross_encoder_folder: Path, exported: Path, demo_pairs: Pairs
) -> None:
    torch_reranker = Reranker(cross_encoder_folder)
    onnx = OnnxReranker.open(exported, max_length=MAX_PAIR_TOKENS, threads=1)

    gaps = [np.abs(torch_reranker.score(q, texts) - onnx.score(q, texts)).max() for q, texts in demo_pairs]

    assert max(gaps) < 1e-5, max(gaps)
    assert onnx.pipeline.activation == "sigmoid"  # CrossEncoder.predict's default for one label


@pytest.mark.slow
def test_int8_keeps_the_ranking_of_real_pairs(cross_encoder_folder: Path, exported: Path, demo_pairs: Pairs) -> None:
    torch_reranker = Reranker(cross_encoder_folder)
    int8 = OnnxReranker.open(exported, max_length=MAX_PAIR_TOKENS, int8=True, threads=1)
    ranked = [(torch_reranker.score(q, texts), int8.score(q, texts)) for q, texts in demo_pairs[:30]]

    rho = [_spearman(a, b) for a, b in ranked]
    same_top = [a.argmax() == b.argmax() for a, b in ranked]

    assert np.mean(rho) >= 0.9 and min(rho) >= 0.7, rho  # near-equal scores of an untrained head may swap
    assert np.mean(same_top) >= 0.8, same_top
    assert (exported / INT8_FILE).stat().st_size < 0.7 * (exported / MODEL_FILE).stat().st_size


@pytest.mark.slow
def test_a_missing_export_is_served_by_torch_once_and_written(
    cross_encoder_folder: Path, fresh: FerretSettings, caplog: pytest.LogCaptureFixture, demo_pairs: Pairs
) -> None:
    folder = reranker_onnx_folder(fresh, cross_encoder_folder)
    assert not folder.exists()

    with caplog.at_level(logging.WARNING, logger="ferret"):
        first = load_reranker(cross_encoder_folder, name="rr", settings=fresh)
        again = load_reranker(cross_encoder_folder, name="rr", settings=fresh)

    assert isinstance(first, Reranker) and again is first  # torch for this process, decided once
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and "ONNX" in r.getMessage()]
    assert len(warnings) == 1 and "\n" not in warnings[0] and "rr" in warnings[0], warnings
    assert (folder / MODEL_FILE).is_file() and (folder / INT8_FILE).is_file()  # written, renamed into place
    assert not list(folder.parent.glob(".staging-*"))
    forget_rerankers()  # the next process finds the export
    served = load_reranker(cross_encoder_folder, name="rr", settings=fresh)
    assert isinstance(served, OnnxReranker) and served.runtime == "onnx-int8" and served.name == "rr"
    query, texts = demo_pairs[0]
    assert _spearman(served.score(query, texts), first.score(query, texts)) >= 0.7


@pytest.mark.slow
def test_a_corrupt_export_is_served_by_torch_once_and_written_again(
    cross_encoder_folder: Path, fresh: FerretSettings, caplog: pytest.LogCaptureFixture, demo_pairs: Pairs
) -> None:
    settings = fresh.model_copy(update={"reranker_runtime": "onnx"})
    prepare_reranker(cross_encoder_folder, settings)  # what training does
    folder = reranker_onnx_folder(settings, cross_encoder_folder)
    (folder / MODEL_FILE).write_bytes(b"not an onnx graph")

    with caplog.at_level(logging.WARNING, logger="ferret"):
        first = load_reranker(cross_encoder_folder, settings=settings)
        assert load_reranker(cross_encoder_folder, settings=settings) is first

    assert isinstance(first, Reranker)
    assert len([r for r in caplog.records if r.levelno == logging.WARNING and "ONNX" in r.getMessage()]) == 1
    forget_rerankers()
    rebuilt = load_reranker(cross_encoder_folder, settings=settings)
    assert isinstance(rebuilt, OnnxReranker) and rebuilt.runtime == "onnx"
    query, texts = demo_pairs[1]
    np.testing.assert_allclose(rebuilt.score(query, texts), first.score(query, texts), atol=1e-5)


def test_the_served_reranker_runs_the_configured_threads_without_spinning(
    exported: Path, cross_encoder_folder: Path, tmp_path: Path
) -> None:
    settings = FerretSettings(home=tmp_path, onnx_cache=exported.parent, reranker_runtime="onnx")
    forget_rerankers()
    served = load_reranker(cross_encoder_folder, settings=settings)
    assert isinstance(served, OnnxReranker)
    options = served._session.get_session_options()
    assert options.intra_op_num_threads == settings.reranker_threads
    assert options.get_session_config_entry("session.intra_op.allow_spinning") == "0"
    forget_rerankers()


def test_torch_is_used_when_asked(cross_encoder_folder: Path, tmp_path: Path) -> None:
    forget_rerankers()
    settings = FerretSettings(home=tmp_path, onnx_cache=tmp_path / "onnx", reranker_runtime="torch")
    prepare_reranker(cross_encoder_folder, settings)
    assert not (tmp_path / "onnx").exists()  # nothing exported for a runtime that does not read it
    assert isinstance(load_reranker(cross_encoder_folder, settings=settings), Reranker)
    forget_rerankers()


@pytest.mark.parametrize("runtime", ["onnx-int8", "onnx", "torch"])
def test_missing_reranker_files_are_one_sentence_whatever_the_runtime(tmp_path: Path, runtime: str) -> None:
    settings = FerretSettings(home=tmp_path, onnx_cache=tmp_path / "onnx", reranker_runtime=runtime)
    with pytest.raises(ConflictError, match=r"^The files of reranker 'rr-gone' are missing from .*nowhere\.$"):
        load_reranker(tmp_path / "nowhere", name="rr-gone", settings=settings)
    assert not (tmp_path / "onnx").exists()


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_a_cuda_device_scores_with_torch_in_fp16_on_it(
    cross_encoder_folder: Path, tmp_path: Path, demo_pairs: Pairs
) -> None:
    forget_rerankers()
    settings = FerretSettings(home=tmp_path, onnx_cache=tmp_path / "onnx", device="cuda")
    served = load_reranker(cross_encoder_folder, settings=settings)
    on_cpu = Reranker(cross_encoder_folder)

    assert isinstance(served, Reranker)
    assert next(served.model.model.parameters()).dtype == torch.float16
    query, texts = demo_pairs[0]
    assert np.abs(served.score(query, texts) - on_cpu.score(query, texts)).max() < 1e-2  # fp16 rounding only
    forget_rerankers()


def test_an_explicit_cpu_device_keeps_the_configured_runtime(cross_encoder_folder: Path, fresh: FerretSettings) -> None:
    settings = fresh.model_copy(update={"device": "cpu"})
    prepare_reranker(cross_encoder_folder, settings)
    assert isinstance(load_reranker(cross_encoder_folder, settings=settings), OnnxReranker)
    forget_rerankers()
