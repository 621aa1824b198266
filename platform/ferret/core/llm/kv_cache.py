"""Key/value cache layers for the embedded generator's sampler, and the decoding attention that reads a shared prefix
once for all rows of a batch.

``PreallocatedLayer`` writes each decoded token in place instead of copying the whole cache (``torch.cat``) at every
step. ``SharedPrefixLayer`` keeps the few-shot prefix that every row of a batch starts with once instead of once per
row and sample, and ``shared_prefix_attention`` computes a one-token query's attention in two parts whose softmax is
joined exactly (cascade attention): one batched product of all rows' queries with the shared prefix, and each row's
own positions (its padding, suffix and generated tokens). A decoding step reads every row's whole cache, so 16 rows
read a copied prefix 16 times: on 2 CPU cores a SmolLM2 step of 16 rows took 176 ms with ~1,000 cached positions a
row and 126 ms with 400 (benchmarks/RESULTS.md, issue 12, twenty-fifth session).

The attention plugs into transformers through its attention interface: ``enable_shared_prefix_attention(model)``
registers it under ``SHARED_PREFIX_ATTENTION`` (with sdpa's masks) and switches an sdpa model to it. Without a
shared-prefix cache in the call's keyword arguments it is exactly sdpa, so the prefill and any other use of the model
are unchanged.

Example:
    >>> enable_shared_prefix_attention(model)
    True
    >>> share_prefix(cache, prefix_length=623, extra_tokens=48)   # after the prefill, before decoding
    >>> model(input_ids=..., cache=cache, **{SHARED_PREFIX_KWARG: cache}, ...)
"""

from __future__ import annotations

import logging
from typing import Any

import torch
from transformers.cache_utils import DynamicCache, DynamicLayer
from transformers.integrations.sdpa_attention import sdpa_attention_forward

logger = logging.getLogger(__name__)

SHARED_PREFIX_ATTENTION = "ferret_shared_prefix"
"""The name the attention function is registered under in transformers' attention and mask interfaces."""
SHARED_PREFIX_KWARG = "ferret_shared_prefix_cache"
"""The keyword argument of the model's forward that carries the cache down to the attention function."""


class PreallocatedLayer(DynamicLayer):
    """A cache layer whose keys and values are views into buffers with room for the tokens still to come.

    transformers' dynamic layer appends each new token with ``torch.cat``, which copies the whole cache at every
    decoding step: 12% of the generator's CPU time on the quickstart's prompts (benchmarks/RESULTS.md, issue 12).
    Here a step writes its token in place; the numbers are the same, only the copies go."""

    def __init__(self, keys: torch.Tensor, values: torch.Tensor, extra_tokens: int) -> None:
        super().__init__()
        self.dtype, self.device, self.is_initialized = keys.dtype, keys.device, True
        self._length = keys.shape[-2]
        self._key_buffer = _buffer(keys, self._length + max(1, extra_tokens))
        self._value_buffer = _buffer(values, self._length + max(1, extra_tokens))
        self._views()

    def _views(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Points ``keys`` and ``values`` at the filled part of the buffers, and returns them."""
        keys, values = self._key_buffer[..., : self._length, :], self._value_buffer[..., : self._length, :]
        self.keys, self.values = keys, values
        return keys, values

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        end = self._length + key_states.shape[-2]
        if end > self._key_buffer.shape[-2]:  # more tokens than planned: grow, as the dynamic layer would
            self._key_buffer = _buffer(self._key_buffer[..., : self._length, :], 2 * end)
            self._value_buffer = _buffer(self._value_buffer[..., : self._length, :], 2 * end)
        self._key_buffer[..., self._length : end, :] = key_states
        self._value_buffer[..., self._length : end, :] = value_states
        self._length = end
        return self._views()

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        self._key_buffer, self._value_buffer = self._key_buffer[indices, ...], self._value_buffer[indices, ...]
        self._views()

    def batch_repeat_interleave(self, repeats: int) -> None:
        self._key_buffer = self._key_buffer.repeat_interleave(repeats, dim=0)
        self._value_buffer = self._value_buffer.repeat_interleave(repeats, dim=0)
        self._views()


def _buffer(states: torch.Tensor, capacity: int) -> torch.Tensor:
    """``states`` at the start of a new tensor with ``capacity`` positions on the sequence axis (-2)."""
    buffer = states.new_empty((*states.shape[:-2], capacity, states.shape[-1]))
    buffer[..., : states.shape[-2], :] = states
    return buffer


def _plain_filled(layer: Any) -> bool:
    """A layer as the prefill leaves it: a plain dynamic layer holding tokens. Subclasses (sliding windows, the
    layers of this module) keep their own layout and update."""
    if type(layer) is not DynamicLayer or layer.keys is None or layer.values is None:
        return False
    return bool(layer.keys.numel())


def preallocate(cache: DynamicCache, extra_tokens: int) -> None:
    """Gives every plain filled layer of ``cache`` room for ``extra_tokens`` more positions, written in place."""
    layers: list[Any] = cache.layers
    for index, layer in enumerate(layers):
        if _plain_filled(layer):
            layers[index] = PreallocatedLayer(layer.keys, layer.values, extra_tokens)


class SharedPrefixLayer(PreallocatedLayer):
    """A preallocated layer whose first ``prefix_length`` positions, the same in every row and attended by every row
    (the sampler's mask there is all ones), are kept once.

    ``keys``/``values`` (what ``update`` returns) are each row's own positions only; ``prefix_keys``/``prefix_values``
    (batch 1) come before them in every row. Lengths and mask sizes count both, so positions and masks are those of
    the full rows.
    """

    def __init__(
        self,
        prefix_keys: torch.Tensor,
        prefix_values: torch.Tensor,
        keys: torch.Tensor,
        values: torch.Tensor,
        extra_tokens: int,
    ) -> None:
        super().__init__(keys, values, extra_tokens)
        self.prefix_keys, self.prefix_values = prefix_keys.contiguous(), prefix_values.contiguous()
        self.prefix_length = prefix_keys.shape[-2]

    def get_seq_length(self) -> int:
        return self.prefix_length + self._length

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        """(kv length, kv offset) for the mask, counting the prefix; older transformers pass the cache positions."""
        length: Any = query_length
        return self.get_seq_length() + (length.shape[0] if isinstance(length, torch.Tensor) else int(length)), 0


def share_prefix(cache: DynamicCache, prefix_length: int, extra_tokens: int) -> bool:
    """Turns every layer of ``cache``, whose rows all start with the same ``prefix_length`` positions, into a
    ``SharedPrefixLayer`` with room for ``extra_tokens`` more; False (and nothing changed) when a layer is not a
    plain filled one."""
    layers: list[Any] = cache.layers
    if prefix_length < 1 or not all(_plain_filled(layer) and layer.keys.shape[-2] > prefix_length for layer in layers):
        return False
    for index, layer in enumerate(layers):
        keys, values = layer.keys, layer.values
        layers[index] = SharedPrefixLayer(
            keys[:1, :, :prefix_length],
            values[:1, :, :prefix_length],
            keys[:, :, prefix_length:],
            values[:, :, prefix_length:],
            extra_tokens,
        )
    return True


def shared_prefix_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """transformers' attention-function signature; sdpa unless the call carries a ``SharedPrefixLayer``.

    ``query`` is (batch, query heads, 1, dim), ``key``/``value`` the rows' own positions (batch, kv heads, length,
    dim); the mask covers prefix and own positions. Returns (batch, 1, query heads, dim) like sdpa's.
    """
    cache = kwargs.pop(SHARED_PREFIX_KWARG, None)
    layer = cache.layers[module.layer_idx] if cache is not None else None
    if not isinstance(layer, SharedPrefixLayer):
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout, scaling, **kwargs)
    batch, query_heads, query_length, dim = query.shape
    kv_heads = key.shape[1]
    if query_length != 1:  # several new tokens: attend to the prefix copied per row, as sdpa would
        keys = torch.cat([layer.prefix_keys.expand(batch, -1, -1, -1), key], dim=-2)
        values = torch.cat([layer.prefix_values.expand(batch, -1, -1, -1), value], dim=-2)
        return sdpa_attention_forward(module, query, keys, values, attention_mask, dropout, scaling, **kwargs)
    groups = query_heads // kv_heads  # query head h reads kv head h // groups
    query = query.reshape(batch, kv_heads, groups, dim) * (scaling if scaling is not None else dim**-0.5)
    # The prefix: all rows' queries against its one copy, one product per kv head, in that (kv head, row) layout.
    by_head = query.permute(1, 0, 2, 3).reshape(kv_heads, batch * groups, dim)
    prefix_scores = torch.matmul(by_head, layer.prefix_keys[0].transpose(-1, -2)).float()
    own_scores = torch.matmul(query, key.transpose(-1, -2)).float()
    if attention_mask is not None:  # (batch, 1, 1, prefix + own): True where attended, or an additive float mask
        mask = attention_mask[..., -own_scores.shape[-1] :]
        own_scores = own_scores.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else own_scores + mask

    # One softmax over both parts: exponentials against the rows' common maximum, divided by their joint sum.
    def by_row(by_head_values: torch.Tensor) -> torch.Tensor:
        """(kv heads, rows x groups, ...) -> (rows, kv heads, groups, ...)"""
        return by_head_values.reshape(kv_heads, batch, groups, *by_head_values.shape[2:]).transpose(0, 1)

    top = torch.maximum(by_row(prefix_scores.amax(dim=-1)), own_scores.amax(dim=-1))
    prefix_weights = (prefix_scores - top.transpose(0, 1).reshape(kv_heads, batch * groups, 1)).exp_()
    own_weights = (own_scores - top.unsqueeze(-1)).exp_()
    total = by_row(prefix_weights.sum(dim=-1)) + own_weights.sum(dim=-1)
    output = by_row(torch.matmul(prefix_weights.to(value.dtype), layer.prefix_values[0])).float()
    output = ((output + torch.matmul(own_weights.to(value.dtype), value).float()) / total.unsqueeze(-1)).to(value.dtype)
    return output.reshape(batch, 1, query_heads, dim), None


def enable_shared_prefix_attention(model: Any) -> bool:
    """Registers ``shared_prefix_attention`` and switches ``model`` to it; False (model unchanged) where the model
    does not use sdpa or this transformers cannot register attention functions."""
    if getattr(model.config, "_attn_implementation", None) == SHARED_PREFIX_ATTENTION:
        return True
    if getattr(model.config, "_attn_implementation", None) != "sdpa":
        return False
    try:
        from transformers import AttentionInterface
        from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

        AttentionInterface.register(SHARED_PREFIX_ATTENTION, shared_prefix_attention)
        AttentionMaskInterface.register(SHARED_PREFIX_ATTENTION, sdpa_mask)
        model.set_attn_implementation(SHARED_PREFIX_ATTENTION)
    except (ImportError, AttributeError, ValueError) as exc:
        logger.info("shared-prefix attention unavailable (%s); decoding reads a copy of the prefix per row", exc)
        return False
    return getattr(model.config, "_attn_implementation", None) == SHARED_PREFIX_ATTENTION
