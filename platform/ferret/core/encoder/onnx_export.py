"""What the ONNX query tower and the ONNX reranker share: the export cache, atomic writes, int8, the session.

Both serve a model version's transformer with ONNX Runtime instead of torch (issue 11 item 9: a cold search without
torch; issue 12 item 3: a reranked query within 300 ms on 2 cores). An export lives in ``FERRET_ONNX_CACHE``
(default ``FERRET_HOME/cache/onnx``), in a folder named by a fingerprint of the model folder's files, so a retrained
model gets a new export and a stale one is never read. It is written into a temporary sibling folder that is
renamed into place: a reader never sees half an export, and two processes exporting at once leave one complete
folder. A model that cannot be exported gets a folder holding only ``export-failed.txt`` with the reason, so it is
not tried again.
"""

from __future__ import annotations

import copy
import hashlib
import json
import logging
import os
import shutil
import uuid
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path
from typing import Any

from ferret.core.settings import FerretSettings

MODEL_FILE = "model.onnx"
INT8_FILE = "model.int8.onnx"
TOKENIZER_FILE = "tokenizer.json"
FAILED_FILE = "export-failed.txt"


class OnnxUnavailableError(Exception):
    """An ONNX export cannot be used for this model (missing, corrupt, unsupported or no onnxruntime)."""


def served_max_seq_length(native: int, max_position_embeddings: int, max_passage_tokens: int) -> int:
    """The truncation length Ferret serves a model with: long enough for a whole passage, within its positions.

    ``DualEncoder.load`` and the ONNX encoder both use this, so the two towers truncate a query identically."""
    return min(max(native, max_passage_tokens + 2), max_position_embeddings - 2)


def model_fingerprint(model_path: str | Path, header: str) -> str:
    """A key of the model folder's content, from each file's relative path, size and modification time.

    Reading the files' bytes (a 90 MB safetensors) would cost a cold search a few hundred milliseconds; any
    rewrite of a file changes its size or mtime, so a retrained model in the same folder gets a new export.
    ``header`` names what is exported and its format, so different exports of one folder never share a key."""
    root = Path(model_path)
    digest = hashlib.sha256(header.encode())
    for file in sorted(p for p in root.rglob("*") if p.is_file() and not p.name.startswith(".")):
        stat = file.stat()
        digest.update(f"{file.relative_to(root).as_posix()}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()[:32]


def onnx_cache_root(settings: FerretSettings) -> Path:
    return settings.onnx_cache or settings.home / "cache" / "onnx"


def read_failure(folder: Path) -> None:
    """Raise ``OnnxUnavailableError`` with the recorded reason when the model was found not exportable."""
    if (folder / FAILED_FILE).is_file():
        raise OnnxUnavailableError((folder / FAILED_FILE).read_text(encoding="utf-8").strip())


@contextmanager
def staging_folder(folder: Path) -> Iterator[Path]:
    """A temporary sibling of ``folder`` to write an export into; renamed into place when the block ends normally,
    removed in every case."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = folder.parent / f".staging-{folder.name}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    staging.mkdir()
    try:
        yield staging
        move_into_place(staging, folder)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def record_failure(staging: Path, folder: Path, reason: Exception) -> None:
    """Keep why a model cannot be exported (``export-failed.txt``), renamed into place like an export."""
    (staging / FAILED_FILE).write_text(f"{reason}\n", encoding="utf-8")
    move_into_place(staging, folder)


def move_into_place(staging: Path, folder: Path) -> None:
    try:
        staging.rename(folder)
    except OSError:  # another process finished first: its folder is as good as ours
        if not folder.is_dir():
            raise


def export_graph(module: Any, arguments: tuple[Any, ...], target: Path, inputs: list[str], output: str) -> None:
    """``module(*arguments)`` traced to ONNX (opset 17) with dynamic batch and token axes."""
    import torch

    axes = {name: {0: "batch", 1: "tokens"} for name in [*inputs, output]}
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")  # the TorchScript exporter's deprecation and tracer notices
        torch.onnx.export(
            module,
            arguments,
            str(target),
            input_names=inputs,
            output_names=[output],
            dynamic_axes=axes,
            opset_version=17,
            dynamo=False,  # the TorchScript exporter needs no onnxscript and handles BERT-like encoders
        )


def write_export(
    folder: Path,
    *,
    describe: Callable[[], Any],
    network: Any,
    tokenizer: Any,
    example: Any,
    output: str,
    pipeline_file: str,
    int8: bool,
) -> Path:
    """Export ``network`` (an fp32 copy on CPU) into ``folder`` with its tokenizer and the pipeline ``describe``
    returns (a dataclass with ``inputs``; it raises ``OnnxUnavailableError`` for a model that cannot be served,
    which is recorded in the folder), atomically; an existing export is kept. ``example``: the tokenizer's output for
    a short batch, traced through the graph; ``output``: the attribute of the network's output that is exported
    (``last_hidden_state``, ``logits``). With ``int8`` its int8 variant is written too."""
    import torch

    if not (folder / MODEL_FILE).is_file():
        read_failure(folder)
        with staging_folder(folder) as staging:
            try:
                pipeline = describe()
            except OnnxUnavailableError as unsupported:
                record_failure(staging, folder, unsupported)
                raise
            module = _named_output(copy.deepcopy(network).float().cpu().eval(), pipeline.inputs, output)
            arguments = tuple(torch.tensor(example[name], dtype=torch.int64) for name in pipeline.inputs)
            export_graph(module, arguments, staging / MODEL_FILE, pipeline.inputs, output)
            (staging / TOKENIZER_FILE).write_text(tokenizer.backend_tokenizer.to_str(), encoding="utf-8")
            (staging / pipeline_file).write_text(json.dumps(asdict(pipeline), indent=2), encoding="utf-8")
    if int8:
        quantize_int8(folder)
    return folder


def _named_output(network: Any, inputs: list[str], output: str) -> Any:
    """The exported module: one named output of ``network`` from the tokenizer's inputs, in their order."""
    import torch

    class NamedOutput(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.network = network

        def forward(self, *tensors: torch.Tensor) -> torch.Tensor:
            return getattr(self.network(**dict(zip(inputs, tensors, strict=True))), output)

    return NamedOutput()


def read_export(
    folder: Path, *, pipeline_type: Any, pipeline_file: str, export_format: int, int8: bool, threads: int | None
) -> tuple[Any, Any, Any]:
    """(pipeline, tokenizer, ONNX Runtime session) of the export in ``folder``; ``OnnxUnavailableError`` if it is
    missing, failed, unreadable or of another format, or if onnxruntime or tokenizers is not installed."""
    read_failure(folder)
    if not (folder / MODEL_FILE).is_file():
        raise OnnxUnavailableError(f"no export in {folder}")
    try:
        import onnxruntime  # noqa: F401  (open_session needs it: a missing package is said here)
        from tokenizers import Tokenizer
    except ImportError as missing:
        raise OnnxUnavailableError(f"{missing.name} is not installed") from missing
    try:
        pipeline = pipeline_type(**json.loads((folder / pipeline_file).read_text(encoding="utf-8")))
        if pipeline.format != export_format:
            raise ValueError(f"export format {pipeline.format}")
        tokenizer = Tokenizer.from_file(str(folder / TOKENIZER_FILE))
        session = open_session(folder, int8=int8, threads=threads)
    except Exception as corrupt:  # a truncated file, a bad JSON, a graph ONNX Runtime refuses
        raise OnnxUnavailableError(f"the export in {folder} cannot be read ({corrupt})") from corrupt
    return pipeline, tokenizer, session


def set_tokenizer_lengths(tokenizer: Any, pipeline: Any, max_length: int) -> None:
    """Truncate at ``max_length`` wordpieces (longest input first, from the right) and pad on the right with the
    pipeline's pad token, as the exported model's Hugging Face tokenizer did."""
    tokenizer.no_padding()
    tokenizer.enable_truncation(max_length=max_length, strategy="longest_first", direction="right")
    tokenizer.enable_padding(pad_id=pipeline.pad_id, pad_token=pipeline.pad_token, pad_type_id=pipeline.pad_type_id)


def length_buckets(lengths: Sequence[int], max_batch: int, *, slack: float = 0.15) -> list[list[int]]:
    """The indices of ``lengths`` (token counts) in batches of at most ``max_batch`` whose longest is within
    ``slack`` (plus one token) of their shortest, shortest first: padding a batch to its longest row is wasted work,
    and on a CPU one forward pass over a few rows costs little more per row than over many."""
    batches: list[list[int]] = []
    current: list[int] = []
    for index in sorted(range(len(lengths)), key=lengths.__getitem__):
        if current and (len(current) >= max_batch or lengths[index] > lengths[current[0]] * (1 + slack) + 1):
            batches.append(current)
            current = []
        current.append(index)
    if current:
        batches.append(current)
    return batches


def padded_batches(tokenizer: Any, inputs: Sequence[Any], max_batch: int) -> Iterator[tuple[list[int], dict[str, Any]]]:
    """``(rows, features)`` for each batch of ``inputs`` (texts or text pairs) tokenized by a right-padding
    ``tokenizers.Tokenizer``: ``input_ids``, ``attention_mask`` and ``token_type_ids`` of the rows, padded to the
    longest of their batch only (``length_buckets``). A batch of 32 SciFact queries padded to its longest cost 11.2 ms
    a query on one core, in batches of about one length 6.2 ms (benchmarks/RESULTS.md, issue 16)."""
    import numpy as np

    encodings = tokenizer.encode_batch(list(inputs))
    if not encodings:
        return
    features = {
        "input_ids": np.array([e.ids for e in encodings], dtype=np.int64),
        "attention_mask": np.array([e.attention_mask for e in encodings], dtype=np.int64),
        "token_type_ids": np.array([e.type_ids for e in encodings], dtype=np.int64),
    }
    lengths = features["attention_mask"].sum(axis=1)
    for rows in length_buckets(lengths.tolist(), max_batch):
        width = int(lengths[rows].max())  # right padding: the columns past it are padding in every row
        yield rows, {name: array[rows, :width] for name, array in features.items()}


PREPROCESSING_ADVICE = "Please consider to run pre-processing before quantization"


class _WithoutPreprocessingAdvice(logging.Filter):
    """ONNX Runtime's quantiser advises shape pre-processing on the root logger at every call, a line in a job's log.
    Ferret quantises only the MatMul weights and measured what that keeps (the docstring below), so the advice is
    dropped, and nothing else."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith(PREPROCESSING_ADVICE)


def quantize_int8(folder: Path) -> Path:
    """The int8 variant, written atomically: ONNX Runtime's dynamic quantisation (int8 weights, activations quantised
    per batch) of the MatMul weights, per output channel. Per-tensor scales moved MiniLM's query vectors to a cosine
    of 0.95-0.97 with the fp32 ones on short queries; per channel keeps them above 0.99."""
    target = folder / INT8_FILE
    if target.is_file():
        return target
    from onnxruntime.quantization import QuantType, quantize_dynamic

    staging = folder / f".{INT8_FILE}.{os.getpid()}-{uuid.uuid4().hex[:8]}"
    root, advice = logging.getLogger(), _WithoutPreprocessingAdvice()
    root.addFilter(advice)
    try:
        quantize_dynamic(
            str(folder / MODEL_FILE),
            str(staging),
            weight_type=QuantType.QInt8,
            op_types_to_quantize=["MatMul"],
            per_channel=True,
        )
        os.replace(staging, target)
    finally:
        root.removeFilter(advice)
        staging.unlink(missing_ok=True)
    return target


def open_session(folder: Path, *, int8: bool, threads: int | None) -> Any:
    """An ONNX Runtime CPU session of the export in ``folder`` (its int8 variant, made now if missing, for ``int8``).

    ``threads``: ONNX Runtime's intra-op pool; ``None`` keeps its default (one per physical core, spin-waiting
    between calls). A fixed number of threads does not spin, which on a loaded server only burns the cores that the
    concurrent requests need. Errors are the caller's to turn into ``OnnxUnavailableError``."""
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.log_severity_level = 3  # errors only: its notices would print into search results
    if threads is not None:
        options.intra_op_num_threads = threads
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    model_file = quantize_int8(folder) if int8 else folder / MODEL_FILE
    return onnxruntime.InferenceSession(str(model_file), options, providers=["CPUExecutionProvider"])
