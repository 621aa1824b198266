"""The embedded generator on the real SmolLM2-135M GGUF from the pinned package."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ferret.core.llm.base import LLMError
from ferret.core.llm.kv_cache import PreallocatedLayer, SharedPrefixLayer, share_prefix, shared_prefix_attention
from ferret.core.llm.local_backend import (
    LocalTransformersBackend,
    convert_in_background,
    converted_folder,
    load_generator,
    save_converted,
)
from ferret.core.llm.prefix_cache_sampler import PrefixCacheSampler, common_prefix_length, draw_tokens
from ferret_testing import logged_messages

DOCUMENTS = [
    "Honey never spoils because its low moisture and high acidity stop bacteria from growing.",
    "The Amazon river carries more water than the next seven largest rivers combined.",
    "Octopuses have three hearts and blue blood that carries oxygen with copper.",
]


@pytest.fixture(scope="module")
def backend(smollm2_gguf: Path) -> LocalTransformersBackend:
    """The default backend, model loaded once per process (the cache Ferret itself uses)."""
    backend = LocalTransformersBackend(smollm2_gguf, device="cpu", batch_size=8)
    backend.load()
    return backend


@pytest.fixture(scope="module")
def prompts(few_shot_prompt: Callable[[str], str]) -> list[str]:
    return [few_shot_prompt(document) for document in DOCUMENTS]


def test_common_prefix_length() -> None:
    assert common_prefix_length([[1, 2, 3], [1, 2, 4], [1, 2]]) == 2
    assert common_prefix_length([[5, 6]]) == 2
    assert common_prefix_length([[1], [2]]) == 0
    assert common_prefix_length([]) == 0


def test_missing_model_is_one_clear_error(tmp_path: Path) -> None:
    backend = LocalTransformersBackend(tmp_path / "nothing-here")

    with pytest.raises(LLMError, match="FERRET_GENERATOR_MODEL"):
        backend.complete(["Query:"])


def test_the_cache_goes_under_the_name_the_model_reads_so_transformers_prints_nothing(
    backend: LocalTransformersBackend, prompts: list[str]
) -> None:
    """transformers 5 renamed ``past_key_values`` to ``cache``: passed the old name, it raises a FutureWarning and
    logs a warning (once per process) through its own stderr handler, a line printed between the quickstart's progress
    lines. Its log records and Python warnings are caught here, the log's memo cleared first, so an earlier call in
    this process cannot hide it."""
    import logging
    import warnings

    memo: Any = logging.Logger.__dict__["warning_once"]  # transformers adds it to every logger, memoised
    memo.cache_clear()
    with logged_messages("transformers") as messages, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        results = backend.complete(prompts[:2], n=2, max_tokens=4, seed=0)

    assert [len(row) for row in results] == [2, 2]
    messages += [str(warning.message) for warning in caught]
    assert not [message for message in messages if "past_key_values" in message], messages


@pytest.mark.slow
def test_samples_n_queries_per_prompt_stopped_at_newline(backend: LocalTransformersBackend, prompts: list[str]) -> None:
    results = backend.complete(prompts, n=3, max_tokens=32, stop=["\n"], seed=0)

    assert [len(row) for row in results] == [3, 3, 3]
    completions = [c for row in results for c in row]
    assert all("\n" not in c.text for c in completions)
    assert all(c.finish_reason in ("stop", "length") and c.completion_tokens > 0 for c in completions)
    assert all(c.logprob is not None and c.logprob <= 0 for c in completions)
    assert sum(bool(c.text.strip()) for c in completions) >= 6
    assert sum(c.finish_reason == "stop" for c in completions) >= 6, "a few-shot prompt should end its queries"
    assert backend.usage.prompt_tokens > 0 and backend.usage.completion_tokens > 0


@pytest.mark.slow
def test_same_seed_same_samples(backend: LocalTransformersBackend, prompts: list[str]) -> None:
    first = backend.complete(prompts, n=2, max_tokens=24, seed=42)
    again = backend.complete(prompts, n=2, max_tokens=24, seed=42)
    other = backend.complete(prompts, n=2, max_tokens=24, seed=43)

    assert first == again
    assert first != other


@pytest.mark.slow
def test_prefix_cache_gives_the_tokens_of_the_whole_prompt(
    backend: LocalTransformersBackend, prompts: list[str], smollm2_gguf: Path
) -> None:
    """Greedy answers with the shared prefix cached equal those computed prompt by prompt, unpadded."""
    without_cache = LocalTransformersBackend(smollm2_gguf, device="cpu", reuse_prefix=False)

    cached = backend.complete(prompts, n=1, temperature=0.0, max_tokens=12)
    one_by_one = [without_cache.complete([prompt], n=1, temperature=0.0, max_tokens=12)[0] for prompt in prompts]
    padded = without_cache.complete(prompts, n=1, temperature=0.0, max_tokens=12)

    assert [row[0].text for row in cached] == [row[0].text for row in one_by_one] == [row[0].text for row in padded]
    assert backend._sampler is not None and backend._sampler.prefix_tokens_reused > 0


@pytest.mark.slow
def test_logprob_is_the_mean_of_the_chosen_tokens_under_the_model(
    backend: LocalTransformersBackend, prompts: list[str]
) -> None:
    """The sampler's score equals a teacher-forced pass over prompt + greedy continuation, without any cache."""
    import torch

    [[cached]] = backend.complete(prompts[:1], n=1, temperature=0.0, max_tokens=5, stop=["@@never@@"])
    loaded = backend.load()
    ids = list(backend._tokenize(loaded, prompts[:1], 5)[0])
    logprobs = []
    with torch.inference_mode():
        for _ in range(5):
            logits = loaded.model(input_ids=torch.tensor([ids], device=loaded.device)).logits[0, -1].float()
            token = int(logits.argmax())
            logprobs.append(float(torch.log_softmax(logits, dim=-1)[token]))
            ids.append(token)

    assert cached.logprob is not None and cached.logprob < 0
    assert cached.logprob == pytest.approx(sum(logprobs) / 5, abs=1e-3)


@pytest.mark.slow
def test_no_stop_within_max_tokens_is_length(backend: LocalTransformersBackend, prompts: list[str]) -> None:
    [row] = backend.complete(prompts[:1], n=2, max_tokens=3, stop=["@@never@@"], seed=1)

    assert all(c.finish_reason == "length" and c.completion_tokens == 3 for c in row)


@pytest.mark.slow
def test_prompt_longer_than_the_context_is_refused(backend: LocalTransformersBackend) -> None:
    with pytest.raises(LLMError, match="exceeds the generator's context"):
        backend.complete(["word " * 9000], max_tokens=8)


@pytest.mark.slow
def test_a_transformers_model_folder_loads_the_normal_way(
    backend: LocalTransformersBackend, prompts: list[str], tmp_path: Path
) -> None:
    from transformers import AutoModelForCausalLM

    loaded = backend.load()
    folder = tmp_path / "smollm2-hf"
    # A GGUF-loaded model refuses save_pretrained; the same weights in a plain model save as safetensors.
    plain = AutoModelForCausalLM.from_config(loaded.model.config)
    plain.load_state_dict(loaded.model.state_dict())
    plain.save_pretrained(folder)
    loaded.tokenizer.save_pretrained(folder)
    from_folder = LocalTransformersBackend(folder, device="cpu")

    expected = backend.complete(prompts[:2], n=1, temperature=0.0, max_tokens=10)
    assert from_folder.complete(prompts[:2], n=1, temperature=0.0, max_tokens=10) == expected
    assert load_generator(folder, "cpu") is from_folder.load()


@pytest.mark.slow
def test_a_gguf_is_read_through_its_converted_copy_when_one_is_kept(
    backend: LocalTransformersBackend, prompts: list[str], tmp_path: Path
) -> None:
    loaded = backend.load()
    assert loaded.source == backend.model_path
    folder = converted_folder(backend.model_path, tmp_path)
    save_converted(loaded, folder)
    assert (folder / "config.json").is_file() and not list(tmp_path.glob("*.partial-*"))

    cached = LocalTransformersBackend(backend.model_path, device="cpu", cache_dir=tmp_path)
    assert cached.load().source == folder
    expected = backend.complete(prompts[:2], n=1, temperature=0.0, max_tokens=10)
    assert cached.complete(prompts[:2], n=1, temperature=0.0, max_tokens=10) == expected
    assert cached.name == backend.name  # runs record the GGUF, not the copy


@pytest.mark.slow
def test_a_gguf_converted_in_a_child_process_is_the_copy_the_next_load_reads(
    backend: LocalTransformersBackend, prompts: list[str], tmp_path: Path
) -> None:
    assert convert_in_background(backend.model_path, tmp_path)
    assert not convert_in_background(backend.model_path, tmp_path)  # one child per copy

    loaded = load_generator(backend.model_path, "cpu", cache_dir=tmp_path)  # waits for the child
    assert loaded.source == converted_folder(backend.model_path, tmp_path)
    assert not convert_in_background(backend.model_path, tmp_path)  # the copy is there
    cached = LocalTransformersBackend(backend.model_path, device="cpu", cache_dir=tmp_path)
    [[expected]] = backend.complete(prompts[:1], n=1, temperature=0.0, max_tokens=10)
    [[got]] = cached.complete(prompts[:1], n=1, temperature=0.0, max_tokens=10)
    assert (got.text, got.completion_tokens) == (expected.text, expected.completion_tokens)
    assert got.logprob == pytest.approx(expected.logprob, abs=1e-4)  # the fixture's kept prefix: rounding apart


def test_a_gguf_the_child_cannot_convert_is_one_clear_error_at_the_load(tmp_path: Path) -> None:
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(b"GGUF, cut short")
    assert not convert_in_background(tmp_path, tmp_path / "cache")  # a folder: nothing to convert
    assert convert_in_background(broken, tmp_path / "cache")

    with pytest.raises(LLMError, match=r"Could not load the generator model at .*broken\.gguf \(\w+: "):
        load_generator(broken, "cpu", cache_dir=tmp_path / "cache")
    assert not (converted_folder(broken, tmp_path / "cache") / "config.json").exists()


def test_a_replaced_gguf_gets_a_new_converted_copy(tmp_path: Path) -> None:
    gguf = tmp_path / "model.gguf"
    gguf.write_bytes(b"GGUF one")
    first = converted_folder(gguf, tmp_path / "cache")
    gguf.write_bytes(b"GGUF two, longer")
    assert converted_folder(gguf, tmp_path / "cache") != first


def test_a_preallocated_cache_layer_holds_what_the_dynamic_one_holds() -> None:
    """Tokens written in place (past the planned room too), rows selected and repeated: the same keys and values."""
    import torch
    from transformers.cache_utils import DynamicLayer

    torch.manual_seed(0)
    keys, values = torch.randn(3, 2, 5, 4), torch.randn(3, 2, 5, 4)
    dynamic = DynamicLayer()
    dynamic.update(keys, values)
    preallocated = PreallocatedLayer(keys, values, extra_tokens=2)

    for step in range(4):  # the third and fourth tokens grow the buffers
        key, value = torch.randn(3, 2, 1, 4), torch.randn(3, 2, 1, 4)
        expected = dynamic.update(key, value)
        got = preallocated.update(key, value)
        assert all(torch.equal(a, b) for a, b in zip(got, expected, strict=True)), step
    for layer in (dynamic, preallocated):
        layer.batch_select_indices(torch.tensor([0, 2]))
        layer.batch_repeat_interleave(2)
    key, value = torch.randn(4, 2, 1, 4), torch.randn(4, 2, 1, 4)
    expected, got = dynamic.update(key, value), preallocated.update(key, value)
    assert got[0].shape == (4, 2, 10, 4)
    assert all(torch.equal(a, b) for a, b in zip(got, expected, strict=True))
    assert preallocated.get_seq_length() == dynamic.get_seq_length() == 10


def test_attention_to_a_shared_prefix_equals_attention_to_a_copy_per_row() -> None:
    """One query token per row, grouped query heads (3 per kv head), padding between prefix and suffix: the two-part
    softmax gives sdpa's output over each row's full keys; selected and repeated rows keep one prefix."""
    import torch
    from transformers.cache_utils import DynamicCache
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    torch.manual_seed(0)
    rows, kv_heads, groups, dim, prefix, own = 4, 2, 3, 8, 7, 5
    module: Any = torch.nn.Module()
    module.layer_idx, module.num_key_value_groups, module.is_causal = 0, groups, True
    keys, values = torch.randn(1, kv_heads, prefix, dim), torch.randn(1, kv_heads, prefix, dim)
    full_keys = torch.cat([keys.expand(rows, -1, -1, -1), torch.randn(rows, kv_heads, own, dim)], dim=-2)
    full_values = torch.cat([values.expand(rows, -1, -1, -1), torch.randn(rows, kv_heads, own, dim)], dim=-2)
    cache = DynamicCache()
    cache.update(full_keys, full_values, 0)
    assert share_prefix(cache, prefix, extra_tokens=2)
    layer = cache.layers[0]
    assert isinstance(layer, SharedPrefixLayer) and layer.prefix_keys.shape[0] == 1
    new_key, new_value = torch.randn(rows, kv_heads, 1, dim), torch.randn(rows, kv_heads, 1, dim)
    own_keys, own_values = layer.update(new_key, new_value)
    assert layer.get_seq_length() == prefix + own + 1 and own_keys.shape[-2] == own + 1
    mask = torch.ones(rows, 1, 1, prefix + own + 1, dtype=torch.bool)
    mask[0, ..., prefix : prefix + 2] = False  # row 0's suffix is two tokens shorter: left padding after the prefix
    mask[2, ..., prefix : prefix + 1] = False
    query = torch.randn(rows, kv_heads * groups, 1, dim)

    full = (torch.cat([full_keys, new_key], dim=-2), torch.cat([full_values, new_value], dim=-2))

    got, _ = shared_prefix_attention(module, query, own_keys, own_values, mask, ferret_shared_prefix_cache=cache)
    expected, _ = sdpa_attention_forward(module, query, *full, mask)
    assert got.shape == expected.shape == (rows, 1, kv_heads * groups, dim)
    assert torch.allclose(got, expected, atol=1e-5)
    # Without the cache keyword it is plain sdpa.
    plain, _ = shared_prefix_attention(module, query, full_keys, full_values, None)
    assert torch.allclose(plain, sdpa_attention_forward(module, query, full_keys, full_values, None)[0])
    # Two query tokens at once (not the sampler's decoding) attend to the prefix copied per row, the same numbers.
    two = torch.randn(rows, kv_heads * groups, 2, dim)
    causal = mask.expand(rows, 1, 2, prefix + own + 1).clone()
    causal[:, :, 0, -1] = False
    got, _ = shared_prefix_attention(module, two, own_keys, own_values, causal, ferret_shared_prefix_cache=cache)
    assert torch.allclose(got, sdpa_attention_forward(module, two, *full, causal)[0], atol=1e-5)

    cache.batch_select_indices(torch.tensor([1, 3]))
    cache.batch_repeat_interleave(2)
    assert layer.keys is not None and layer.keys.shape[0] == 4 and layer.prefix_keys.shape[0] == 1
    assert layer.get_seq_length() == prefix + own + 1


def test_decoding_with_one_shared_prefix_gives_the_tokens_of_a_copy_per_row(
    backend: LocalTransformersBackend, prompts: list[str]
) -> None:
    """The same greedy completions and log-probabilities from the real SmolLM2 whether decoding reads the few-shot
    prefix once (shared-prefix attention) or a copy per row; the prompts differ in length (padding) and rows stop at
    different steps (rows leave the batch)."""
    import torch

    loaded = backend.load()
    ids = backend._tokenize(loaded, prompts, 16)
    shared = PrefixCacheSampler(loaded.model, loaded.tokenizer, eos_token_ids=loaded.eos_token_ids)
    copied = PrefixCacheSampler(
        loaded.model, loaded.tokenizer, eos_token_ids=loaded.eos_token_ids, share_prefix_in_decoding=False
    )
    assert shared.shared_decoding and not copied.shared_decoding
    assert len({len(row) for row in ids}) > 1

    def run(sampler: PrefixCacheSampler) -> list[list[Any]]:
        rows = sampler.sample(ids, n=2, temperature=0.0, max_tokens=16, stop=["\n"], generator=torch.Generator())
        return [[(item.text, item.completion_tokens, item.logprob) for item in row] for row in rows]

    with loaded.lock:
        got, expected = run(shared), run(copied)

    assert [[item[:2] for item in row] for row in got] == [[item[:2] for item in row] for row in expected]
    assert len({completion[1] for row in got for completion in row}) > 1  # rows left the batch at different steps
    for row_got, row_expected in zip(got, expected, strict=True):
        for (_, _, logprob), (_, _, reference) in zip(row_got, row_expected, strict=True):
            assert logprob == pytest.approx(reference, abs=1e-4)


def test_tokens_are_drawn_in_proportion_to_their_probability_and_never_at_zero() -> None:
    import torch

    probabilities = torch.tensor([[0.0, 0.1, 0.0, 0.2, 0.7, 0.0]]).repeat(20_000, 1)
    first = draw_tokens(probabilities, torch.Generator().manual_seed(3))
    again = draw_tokens(probabilities, torch.Generator().manual_seed(3))

    assert torch.equal(first, again)  # a seeded generator gives the same tokens
    counts = torch.bincount(first, minlength=6).tolist()
    assert counts[0] == counts[2] == counts[5] == 0
    assert [count / 20_000 for count in counts[1:5]] == pytest.approx([0.1, 0.0, 0.2, 0.7], abs=0.015)
    # Unnormalised rows (float sums off by rounding) are read as their own total.
    assert draw_tokens(torch.tensor([[0.0, 3.0]]), torch.Generator().manual_seed(0)).tolist() == [1]
