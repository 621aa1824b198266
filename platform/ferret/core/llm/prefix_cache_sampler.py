"""Batched sampling from a causal LM that computes a shared prompt prefix once.

Promptagator prompts in one batch share a long few-shot prefix (the task's examples) and differ only in the new
document. Run through ``generate`` with left padding, every prompt recomputes that prefix. Here the prefix's
key/value cache is computed once (batch 1), kept across calls while prompts still start with it, and repeated over
the batch; each prompt's own suffix is then computed once and its cache repeated over the ``n`` samples. Rows are
laid out as ``[prefix][padding][suffix]``: the attention mask hides the padding and the position ids continue the
prefix, so every row sees exactly the tokens of its own full prompt (the prompts are tokenized whole and split at
the longest common token prefix, so the split never changes the tokens). While decoding, the rows keep one copy
of the prefix between them (``kv_cache.SharedPrefixLayer`` and its attention). Rows that hit a stop sequence or the
end of text leave the batch.

Example:
    >>> sampler = PrefixCacheSampler(model, tokenizer, eos_token_ids={2})
    >>> rows = sampler.sample([ids_a, ids_b], n=4, temperature=0.7, max_tokens=48, stop=["\\n"], generator=g)
"""

from __future__ import annotations

import copy
import inspect
from collections.abc import Collection, Sequence
from typing import Any

import torch
from transformers.cache_utils import DynamicCache

from ferret.core.llm.base import Completion, cut_at_stop
from ferret.core.llm.kv_cache import SHARED_PREFIX_KWARG, enable_shared_prefix_attention, preallocate, share_prefix

# Below this many shared tokens the copy of the prefix cache costs more than recomputing the prefix saves.
DEFAULT_MIN_PREFIX_TOKENS = 32


def common_prefix_length(sequences: Sequence[Sequence[int]]) -> int:
    """Length of the longest token prefix shared by all ``sequences``."""
    if not sequences:
        return 0
    first = sequences[0]
    length = min(len(sequence) for sequence in sequences)
    for sequence in sequences[1:]:
        index = 0
        while index < length and sequence[index] == first[index]:
            index += 1
        length = index
    return length


def draw_tokens(probabilities: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """One token per row of ``probabilities`` (rows of a distribution over the vocabulary), drawn by inverting the
    row's cumulative distribution at one uniform number.

    ``torch.multinomial`` draws an exponential variate per vocabulary entry: 24 ms a decoding step for 16 rows of
    SmolLM2's 49,152 tokens on 2 CPU cores, against about 1 ms here (benchmarks/RESULTS.md, issue 12, twenty-fifth
    session)."""
    cumulative = probabilities.cumsum(dim=-1)
    uniform = torch.rand(
        (cumulative.shape[0], 1), generator=generator, device=cumulative.device, dtype=cumulative.dtype
    )
    # right=True: the first token whose cumulative mass exceeds the draw, so a token of probability 0 is never it.
    chosen = torch.searchsorted(cumulative, uniform * cumulative[:, -1:], right=True)
    return chosen.clamp_(max=cumulative.shape[1] - 1).squeeze(1)


def _full_attention_only(config: Any) -> bool:
    """Sliding-window layers index their window by cache slot, which the padding after the prefix would shift."""
    text_config = config.get_text_config() if hasattr(config, "get_text_config") else config
    layer_types = getattr(text_config, "layer_types", None) or []
    return not getattr(text_config, "use_sliding_window", False) and all(t == "full_attention" for t in layer_types)


class PrefixCacheSampler:
    """Samples ``n`` completions per tokenized prompt, reusing the key/value cache of their common prefix.

    Not thread-safe: the owner serialises calls (``LocalTransformersBackend`` holds the model's lock).

    Args:
        model: a transformers causal LM in eval mode.
        tokenizer: its tokenizer (used to decode, and for the pad id).
        eos_token_ids: ids that end a generation.
        reuse_prefix: ``False`` computes every prompt whole (left padding only), for comparison and fallback;
            also off for models with sliding-window attention.
        min_prefix_tokens: shorter common prefixes are not worth a separate pass.
        share_prefix_in_decoding: keep the prefix's cache once for all rows while decoding and attend to it with
            ``shared_prefix_attention`` (switches an sdpa model to it); ``False`` copies it per row.
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        eos_token_ids: Collection[int],
        reuse_prefix: bool = True,
        min_prefix_tokens: int = DEFAULT_MIN_PREFIX_TOKENS,
        share_prefix_in_decoding: bool = True,
    ) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.eos_token_ids = frozenset(eos_token_ids)
        self.reuse_prefix = reuse_prefix and _full_attention_only(model.config)
        self.min_prefix_tokens = max(1, min_prefix_tokens)
        self.shared_decoding = self.reuse_prefix and share_prefix_in_decoding and enable_shared_prefix_attention(model)
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        self.pad_token_id = int(pad if pad is not None else 0)
        self.device = next(model.parameters()).device
        self._prefix_ids: tuple[int, ...] = ()
        self._prefix_cache: Any = None
        # Only the last position's logits are needed; older transformers compute all of them.
        parameters = inspect.signature(model.forward).parameters
        self._keep_kwarg = next((k for k in ("logits_to_keep", "num_logits_to_keep") if k in parameters), None)
        # transformers 5 names the key/value cache ``cache`` and warns on the older ``past_key_values`` (a line printed
        # between the quickstart's progress lines); older releases know only ``past_key_values``.
        self._cache_kwarg = "cache" if "cache" in parameters else "past_key_values"
        self.prefix_tokens_reused = 0
        """Prompt tokens served from the kept prefix cache, over the sampler's life (for reports)."""

    def clear(self) -> None:
        """Drop the kept prefix cache (e.g. when the few-shot prompt changes for good)."""
        self._prefix_ids, self._prefix_cache = (), None

    # -- the batch -----------------------------------------------------------------------------------------------

    @torch.inference_mode()
    def sample(
        self,
        prompts: Sequence[Sequence[int]],
        *,
        n: int,
        temperature: float,
        max_tokens: int,
        stop: Sequence[str],
        generator: torch.Generator,
    ) -> list[list[Completion]]:
        """``result[i]`` holds ``n`` completions of the token ids ``prompts[i]`` (each non-empty)."""
        if not prompts or n < 1:
            return [[] for _ in prompts]
        if max_tokens < 1:
            return [[Completion("", "length", 0) for _ in range(n)] for _ in prompts]
        prefix_length, cache = self._prefix_for(prompts)
        logits, cache, attention_mask, positions = self._prefill(prompts, prefix_length, cache)
        # From here on the rows read one copy of the prefix (before the repeat below, so it is never copied n times).
        shared = self.shared_decoding and share_prefix(cache, prefix_length, max_tokens)
        # Each prompt's cache, computed once, serves its n samples.
        if n > 1:
            cache.batch_repeat_interleave(n)
            logits = logits.repeat_interleave(n, dim=0)
            attention_mask = attention_mask.repeat_interleave(n, dim=0)
            positions = positions.repeat_interleave(n, dim=0)
        preallocate(cache, max_tokens)
        return self._decode(
            logits, cache, attention_mask, positions, len(prompts), n, temperature, max_tokens, stop, generator, shared
        )

    @torch.inference_mode()
    def prepare(self, prompts: Sequence[Sequence[int]]) -> None:
        """Computes and keeps the cache of the prompts' common prefix, unless the kept one already serves them.

        Called with all the prompts of a request before they are split into batches, so that batches of one
        prompt also reuse the prefix; ``sample`` calls it with its own batch too.
        """
        if not self.reuse_prefix or len(prompts) < 2 or self._kept_prefix_fits(prompts):
            return  # one prompt alone says nothing about what later prompts share
        # Every prompt keeps at least one token of its own: its last position gives the first logits.
        length = min(common_prefix_length(prompts), min(len(p) for p in prompts) - 1)
        if length < self.min_prefix_tokens:
            return
        prefix = torch.tensor([list(prompts[0][:length])], device=self.device)
        cache = DynamicCache()
        self.model(input_ids=prefix, use_cache=True, **self._with_cache(cache), **self._keep_last())
        self._prefix_ids, self._prefix_cache = tuple(prompts[0][:length]), cache

    def _kept_prefix_fits(self, prompts: Sequence[Sequence[int]]) -> bool:
        kept = self._prefix_ids
        return bool(kept) and all(len(p) > len(kept) and tuple(p[: len(kept)]) == kept for p in prompts)

    def _prefix_for(self, prompts: Sequence[Sequence[int]]) -> tuple[int, Any]:
        """The number of leading tokens served from a cache, and that cache repeated over the prompts (or None)."""
        if not self.reuse_prefix:
            return 0, None
        self.prepare(prompts)
        if not self._kept_prefix_fits(prompts):
            return 0, None
        self.prefix_tokens_reused += len(self._prefix_ids) * len(prompts)
        cache = copy.deepcopy(self._prefix_cache)
        cache.batch_repeat_interleave(len(prompts))
        return len(self._prefix_ids), cache

    def _keep_last(self) -> dict[str, int]:
        return {self._keep_kwarg: 1} if self._keep_kwarg else {}

    def _with_cache(self, cache: Any) -> dict[str, Any]:
        return {self._cache_kwarg: cache}

    def _cache_of(self, output: Any) -> Any:
        return getattr(output, self._cache_kwarg)

    def _prefill(
        self, prompts: Sequence[Sequence[int]], prefix_length: int, cache: Any
    ) -> tuple[torch.Tensor, Any, torch.Tensor, torch.Tensor]:
        """Runs each prompt's suffix, left-padded, after the prefix; returns the last logits and the state."""
        suffixes = [list(p[prefix_length:]) for p in prompts]
        width = max(len(s) for s in suffixes)
        input_ids = torch.full((len(suffixes), width), self.pad_token_id, dtype=torch.long)
        suffix_mask = torch.zeros((len(suffixes), width), dtype=torch.long)
        for row, suffix in enumerate(suffixes):
            input_ids[row, width - len(suffix) :] = torch.tensor(suffix, dtype=torch.long)
            suffix_mask[row, width - len(suffix) :] = 1
        input_ids, suffix_mask = input_ids.to(self.device), suffix_mask.to(self.device)
        # Positions continue the prefix and skip the padding (padding gets a harmless dummy position).
        position_ids = (prefix_length + suffix_mask.cumsum(-1) - 1).masked_fill(suffix_mask == 0, max(prefix_length, 1))
        prefix_mask = torch.ones((len(suffixes), prefix_length), dtype=torch.long, device=self.device)
        attention_mask = torch.cat([prefix_mask, suffix_mask], dim=1)
        output = self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            use_cache=True,
            **self._with_cache(cache if cache is not None else DynamicCache()),
            **self._keep_last(),
        )
        return output.logits[:, -1, :], self._cache_of(output), attention_mask, position_ids[:, -1]

    def _decode(
        self,
        logits: torch.Tensor,
        cache: Any,
        attention_mask: torch.Tensor,
        positions: torch.Tensor,
        prompt_count: int,
        n: int,
        temperature: float,
        max_tokens: int,
        stop: Sequence[str],
        generator: torch.Generator,
        shared_prefix: bool = False,
    ) -> list[list[Completion]]:
        rows = prompt_count * n
        generated: list[list[int]] = [[] for _ in range(rows)]
        results: list[Completion | None] = [None] * rows
        logprob_sums = [0.0] * rows
        active = list(range(rows))  # batch position -> row
        for step in range(max_tokens):
            chosen = self._next_tokens(logits, temperature, generator)
            # The token's log-probability under the model itself (temperature 1): what the generator "believes".
            token_logprobs = torch.log_softmax(logits.float(), dim=-1).gather(1, chosen.unsqueeze(1)).squeeze(1)
            tokens = chosen.tolist()
            finished_positions = []
            for position, (row, token) in enumerate(zip(active, tokens, strict=True)):
                logprob_sums[row] += float(token_logprobs[position])
                done = self._advance(
                    row, int(token), generated, results, stop, logprob_sums[row], last_step=step == max_tokens - 1
                )
                if done:
                    finished_positions.append(position)
            if len(finished_positions) == len(active):
                break
            if finished_positions:
                finished = set(finished_positions)
                keep = [position for position in range(len(active)) if position not in finished]
                index = torch.tensor(keep, device=self.device)
                cache.batch_select_indices(index)
                attention_mask, positions = attention_mask[index], positions[index]
                tokens = [tokens[position] for position in keep]
                active = [active[position] for position in keep]
            attention_mask = torch.cat([attention_mask, attention_mask.new_ones((len(active), 1))], dim=1)
            positions = positions + 1
            output = self.model(
                input_ids=torch.tensor(tokens, device=self.device).unsqueeze(1),
                attention_mask=attention_mask,
                position_ids=positions.unsqueeze(1),
                use_cache=True,
                **self._with_cache(cache),
                **self._keep_last(),
                # The attention function finds the shared prefix through this keyword; it does not see the cache.
                **({SHARED_PREFIX_KWARG: cache} if shared_prefix else {}),
            )
            logits, cache = output.logits[:, -1, :], self._cache_of(output)
        completions = [result if result is not None else Completion("", "length", 0) for result in results]
        return [completions[index * n : (index + 1) * n] for index in range(prompt_count)]

    def _next_tokens(self, logits: torch.Tensor, temperature: float, generator: torch.Generator) -> torch.Tensor:
        if temperature <= 0:
            return logits.argmax(dim=-1)
        # top_p = 1.0: plain sampling from the tempered distribution (Promptagator samples at 0.7).
        return draw_tokens(torch.softmax(logits.float() / temperature, dim=-1), generator)

    def _advance(
        self,
        row: int,
        token: int,
        generated: list[list[int]],
        results: list[Completion | None],
        stop: Sequence[str],
        logprob_sum: float,
        *,
        last_step: bool,
    ) -> bool:
        """Appends ``token`` to ``row``; stores the row's completion and returns True when the row is done.

        ``logprob_sum`` is the row's summed token log-probability, ``token`` included; the completion keeps its mean.
        """
        if token in self.eos_token_ids:
            text = self.tokenizer.decode(generated[row], skip_special_tokens=True)
            count = len(generated[row]) + 1
            results[row] = Completion(cut_at_stop(text, stop)[0], "stop", count, logprob_sum / count)
            return True
        generated[row].append(token)
        text = self.tokenizer.decode(generated[row], skip_special_tokens=True)
        text, stopped = cut_at_stop(text, stop)
        if stopped or last_step:
            count = len(generated[row])
            results[row] = Completion(text, "stop" if stopped else "length", count, logprob_sum / count)
            return True
        return False
