"""Picks the generator from the settings: an endpoint when one is configured, else the embedded model.

Nothing leaves the machine unless ``FERRET_LLM_BASE_URL`` is set. One line switches to a strong endpoint:

Example:
    >>> # FERRET_LLM_BASE_URL=http://gpu-box:8000/v1 FERRET_LLM_MODEL=Qwen/Qwen2.5-7B ferret synth ...
    >>> backend = build_backend(get_settings())
    >>> backend.name
    'openai-compatible:Qwen/Qwen2.5-7B@http://gpu-box:8000/v1'
"""

from __future__ import annotations

from ferret.core.llm.base import LLMBackend
from ferret.core.settings import FerretSettings


def build_backend(settings: FerretSettings) -> LLMBackend:
    """The configured generator; the embedded one loads its model on first use."""
    # Each backend is imported only when chosen: one pulls in the openai client, the other transformers.
    if settings.llm_base_url:
        from ferret.core.llm.openai_backend import OpenAICompatibleBackend

        return OpenAICompatibleBackend(
            settings.llm_base_url,
            model=settings.llm_model,
            api_key=settings.llm_api_key,
            api=settings.llm_api,
            concurrency=settings.llm_concurrency,
            timeout_s=settings.llm_timeout_s,
            max_retries=settings.llm_max_retries,
            logprobs=settings.llm_logprobs,
        )
    from ferret.core.llm.local_backend import LocalTransformersBackend

    return LocalTransformersBackend(
        settings.generator_model,
        device=settings.device,
        batch_size=settings.generator_batch_size,
        cache_dir=settings.models_path / "generators",
    )


def warm_up_in_background(settings: FerretSettings) -> bool:
    """Start converting the embedded generator's GGUF in a child process, for a caller with other work first (the
    quickstart ingests, indexes and searches meanwhile); the pipeline's first load then waits for it and reads the
    converted copy. False with an endpoint, a model folder or a copy already converted: nothing to do.

    Why: the first read of the default GGUF costs ~25 s on 2 CPU cores (``local_backend``)."""
    if settings.llm_base_url:  # an endpoint: nothing loads here
        return False
    from ferret.core.llm.local_backend import LocalTransformersBackend, convert_in_background

    backend = build_backend(settings)  # the model and cache folder the pipeline's backend will use
    assert isinstance(backend, LocalTransformersBackend)
    return backend.cache_dir is not None and convert_in_background(backend.model_path, backend.cache_dir)
