"""``build_backend``: the embedded generator by default, an endpoint only when one is configured."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from ferret.core.llm.base import LLMError
from ferret.core.llm.factory import build_backend, warm_up_in_background
from ferret.core.llm.local_backend import (
    CPU_BATCH_SIZE,
    GPU_BATCH_SIZE,
    LocalTransformersBackend,
    convert_in_background,
)
from ferret.core.llm.openai_backend import OpenAICompatibleBackend
from ferret.core.settings import FerretSettings


def test_embedded_generator_by_default(settings: FerretSettings, smollm2_gguf: Path) -> None:
    backend = build_backend(settings)

    assert isinstance(backend, LocalTransformersBackend)
    assert backend.model_path == smollm2_gguf
    assert settings.generator_batch_size is None
    expected = GPU_BATCH_SIZE if torch.cuda.is_available() else CPU_BATCH_SIZE
    assert backend.prompts_per_call == expected  # prompts per pass, and documents per generate() call
    assert backend.cache_dir == settings.models_path / "generators"  # the GGUF is converted once per home


def test_generator_model_override(monkeypatch: pytest.MonkeyPatch, ferret_home: Path, tmp_path: Path) -> None:
    monkeypatch.setenv("FERRET_GENERATOR_MODEL", str(tmp_path / "my.gguf"))
    monkeypatch.setenv("FERRET_GENERATOR_BATCH_SIZE", "4")

    backend = build_backend(FerretSettings())

    assert isinstance(backend, LocalTransformersBackend)
    assert backend.model_path == tmp_path / "my.gguf" and backend.prompts_per_call == 4


def test_the_warm_up_converts_the_gguf_the_backend_will_load(
    monkeypatch: pytest.MonkeyPatch, ferret_home: Path, tmp_path: Path
) -> None:
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(b"GGUF, cut short")
    monkeypatch.setenv("FERRET_GENERATOR_MODEL", str(broken))
    settings = FerretSettings()
    backend = build_backend(settings)
    assert isinstance(backend, LocalTransformersBackend) and backend.cache_dir is not None

    assert warm_up_in_background(settings)
    assert not convert_in_background(backend.model_path, backend.cache_dir)  # the same copy is already on its way
    with pytest.raises(LLMError, match=r"broken\.gguf"):  # the load waits for the child, then reports the file
        backend.load()

    monkeypatch.setenv("FERRET_LLM_BASE_URL", "http://gpu-box:8000/v1")
    assert not warm_up_in_background(FerretSettings())  # an endpoint: nothing to load


def test_endpoint_from_the_environment(monkeypatch: pytest.MonkeyPatch, ferret_home: Path) -> None:
    monkeypatch.setenv("FERRET_LLM_BASE_URL", "http://gpu-box:8000/v1/")
    monkeypatch.setenv("FERRET_LLM_MODEL", "Qwen/Qwen2.5-7B")
    monkeypatch.setenv("FERRET_LLM_API_KEY", "sk-hidden")
    monkeypatch.setenv("FERRET_LLM_API", "chat")
    monkeypatch.setenv("FERRET_LLM_CONCURRENCY", "16")
    monkeypatch.setenv("FERRET_LLM_TIMEOUT_S", "12.5")
    monkeypatch.setenv("FERRET_LLM_MAX_RETRIES", "7")
    settings = FerretSettings()

    backend = build_backend(settings)

    assert isinstance(backend, OpenAICompatibleBackend)
    assert (backend.base_url, backend.model, backend.api) == ("http://gpu-box:8000/v1", "Qwen/Qwen2.5-7B", "chat")
    assert (backend.concurrency, backend.timeout_s, backend.max_retries) == (16, 12.5, 7)
    assert backend.api_key is not None and backend.api_key.get_secret_value() == "sk-hidden"
    assert "sk-hidden" not in repr(backend) and "sk-hidden" not in repr(settings)
    assert backend.name == "openai-compatible:Qwen/Qwen2.5-7B@http://gpu-box:8000/v1"
    backend.close()


def test_bad_api_setting_is_refused(monkeypatch: pytest.MonkeyPatch, ferret_home: Path) -> None:
    monkeypatch.setenv("FERRET_LLM_API", "responses")

    with pytest.raises(ValueError, match="llm_api"):
        FerretSettings()
