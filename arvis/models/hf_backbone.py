"""Token backbones over a transformers decoder that reads its prompt as token ids (Emu3, Janus), without patching.

A family built on transformers' classes gives arvis two things, its image-token embedding and its image-token
head; everything else is shared here:

- :class:`SlotCache` is a transformers ``Cache`` subclass (the documented extension point the attention layers
  call ``update`` on) over arvis's static buffers: every forward writes its keys/values at the explicit slots
  the engine chose, with explicit ``position_ids`` and a 4-D mask — nothing depends on a cache's internal
  counter, so rollback is the engine's slot validity.
- :class:`PromptTokenBackbone` drives the decoder from the outside: the prompt (``Condition.token_ids``,
  left-padded with a mask) is prefilled into slots ``[0, C)``; each row's rotary positions count from its
  first real token (as transformers' ``generate`` does with left padding), so a padded prompt gives exactly
  the logits of the unpadded one; generated tokens go through the subclass's :meth:`~PromptTokenBackbone.embed`
  and come out of its :meth:`~PromptTokenBackbone.head_logits`. The CFG pair is ``2B`` rows: the prompts, then
  the subclass's :meth:`~PromptTokenBackbone.null_condition`.

A new transformers-backed token family subclasses :class:`PromptTokenBackbone` with its layout, embedding,
head and unconditional prompt (``arvis/models/emu3.py``, ``arvis/models/janus.py``).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from transformers.cache_utils import Cache, CacheLayerMixin

from arvis.models.protocol import Condition, StaticKVCache, TokenLayout


class _SlotLayer(CacheLayerMixin):
    """One layer's view of a :class:`SlotCache` (what transformers' ``Cache`` helpers inspect)."""

    is_sliding = False
    is_compileable = False

    def __init__(self, cache: SlotCache, index: int):  # no super().__init__: keys live in the cache
        self.cache, self.index = cache, index
        self.is_initialized = True

    @property
    def keys(self) -> torch.Tensor:  # type: ignore[override]
        return self.cache.keys[self.index]

    @property
    def values(self) -> torch.Tensor:  # type: ignore[override]
        return self.cache.values[self.index]

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        """Nothing to do: the buffers are preallocated."""

    def update(self, key_states, value_states, *args, **kwargs):
        return self.cache.update(key_states, value_states, self.index)

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self.cache.slots, 0

    def get_seq_length(self) -> int:
        return self.cache.slots

    def get_max_length(self) -> int:
        return self.cache.slots


class SlotCache(StaticKVCache, Cache):
    """arvis's static cache as a transformers ``Cache``: ``update`` writes at the slots of the current forward.

    The backbone sets :attr:`write_slots` (``[rows, T]``) before each forward and clears it after;
    :attr:`position_offset` (``[rows]``, left padding of each row's prompt) turns slots into rotary
    positions. Per request, owned by the engine, never stored on the model.
    """

    def __init__(self, num_layers: int, rows: int, heads: int, slots: int, head_dim: int,
                 dtype: torch.dtype, device: torch.device | str):
        StaticKVCache.__init__(self, num_layers, rows, heads, slots, head_dim, dtype, device)
        Cache.__init__(self, layers=[_SlotLayer(self, i) for i in range(num_layers)])
        self.write_slots: torch.Tensor | None = None
        self.read_width = slots  # keys returned to the attention: slots [0, read_width) (narrow masks)
        self.position_offset = torch.zeros(rows, dtype=torch.long, device=device)

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int, *args, **kwargs
               ) -> tuple[torch.Tensor, torch.Tensor]:
        """Write ``[rows, heads, T, head_dim]`` keys/values at :attr:`write_slots`; return the buffers' first
        :attr:`read_width` slots (views, no copy)."""
        if self.write_slots is None:
            raise RuntimeError(f"{type(self).__name__}: no write slots set (forwards go through the backbone)")
        keys, values = self.write(layer_idx, self.write_slots, key_states, value_states)
        return keys[:, :, : self.read_width], values[:, :, : self.read_width]

    def select_rows(self, rows: torch.Tensor) -> None:
        StaticKVCache.select_rows(self, rows)
        self.position_offset = self.position_offset.index_select(0, rows)


def left_padded_validity(condition: Condition, length: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """``(token_ids [R, C], valid [R, C] bool)`` of a left-padded prompt condition on ``device``; ``ValueError``
    unless every row is ``C = length`` slots of padding then at least one real token."""
    ids = condition.token_ids
    if ids is None or ids.ndim != 2 or ids.shape[1] != length:
        raise ValueError(f"condition: this backbone needs token_ids of shape [rows, {length}], got "
                         f"{None if ids is None else tuple(ids.shape)}")
    ids = ids.to(device)
    valid = (torch.ones_like(ids, dtype=torch.bool) if condition.mask is None
             else condition.mask.to(device=device, dtype=torch.bool))
    pads = (~valid).sum(1)
    if not bool((valid == (torch.arange(length, device=device) >= pads[:, None])).all()) or bool((pads >= length).any()):
        raise ValueError("condition: prompts must be left-padded (padding first, then at least one real token)")
    return ids, valid


class PromptTokenBackbone(nn.Module):
    """A transformers decoder reading a left-padded prompt, then generated image tokens (module docstring).

    Subclasses implement :meth:`embed`, :meth:`head_logits` and :meth:`null_condition`. Cheap to build (it only
    references the model's modules), so pipelines build one per call.

    Args:
        language_model: the decoder (a transformers ``…Model`` with ``embed_tokens``, called with
            ``inputs_embeds``, a 4-D additive mask, ``position_ids`` and a ``Cache``).
        layout: the token layout of one request shape (its ``condition_length`` is the prompt slots).
    """

    supports_cfg = True
    narrow_masks = True  # attend masks may be narrower than the cache: only that many slots are read

    def __init__(self, language_model: nn.Module, layout: TokenLayout):
        super().__init__()
        self.language_model = language_model
        self._layout = layout

    @property
    def layout(self) -> TokenLayout:
        return self._layout

    @property
    def anchor(self) -> torch.Tensor:
        """A weight of the decoder (its device and dtype)."""
        return self.language_model.embed_tokens.weight

    # ------------------------------------------------------------------ what a family supplies
    def embed(self, tokens: torch.Tensor) -> torch.Tensor:
        """Layout ids ``[R, T]`` → decoder inputs ``[R, T, hidden]``."""
        raise NotImplementedError

    def head_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Decoder outputs ``[..., hidden]`` → fp32 logits over the layout ids ``[..., V]``."""
        raise NotImplementedError

    def null_condition(self, condition: Condition) -> Condition:
        """The unconditional half of the CFG pair for ``condition``'s rows (same length, left-padded)."""
        raise NotImplementedError

    # ------------------------------------------------------------------ the backbone protocol
    def allocate_cache(self, rows: int, dtype: torch.dtype | None = None,
                       device: torch.device | str | None = None, extra_slots: int = 0) -> SlotCache:
        """The layout's slots plus ``extra_slots`` scratch slots (inputs at a position other than their slot)."""
        cfg = self.language_model.config
        head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        return SlotCache(cfg.num_hidden_layers, rows, cfg.num_key_value_heads, self.layout.max_slots + extra_slots,
                         head_dim, dtype or self.anchor.dtype, device or self.anchor.device)

    def cache_bytes_per_row(self, dtype: torch.dtype | None = None) -> int:
        """Bytes of one cache row (keys and values of every layer over ``layout.max_slots`` slots)."""
        cfg = self.language_model.config
        head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        size = torch.empty((), dtype=dtype or self.anchor.dtype).element_size()
        return 2 * cfg.num_hidden_layers * cfg.num_key_value_heads * self.layout.max_slots * head_dim * size

    def prefill(self, condition: Condition, cache: SlotCache) -> tuple[torch.Tensor, torch.Tensor]:
        """Write the (left-padded) prompts into slots ``[0, C)``.

        Returns:
            logits ``[R, V]`` predicting sequence index 0, and the prompt-slot validity ``[R, C]``.
        """
        C = self.layout.condition_length
        device = self.anchor.device
        ids, valid = left_padded_validity(condition, C, device)
        cache.position_offset = (~valid).sum(1)
        R = ids.shape[0]
        slots = torch.arange(C, device=device).expand(R, C)
        causal = torch.ones(C, C, dtype=torch.bool, device=device).tril()
        mask = (causal & valid[:, None, :]) | torch.eye(C, dtype=torch.bool, device=device)
        mask = F.pad(mask, (0, cache.slots - C))
        logits = self._run(self.language_model.embed_tokens(ids), slots, cache, mask)
        return logits[:, -1], valid

    def forward_tokens(self, tokens: torch.Tensor, slots: torch.Tensor, cache: SlotCache,
                       attend_mask: torch.Tensor, positions: torch.Tensor | None = None) -> torch.Tensor:
        """Evaluate layout ids ``tokens [R, T]`` at ``slots [R, T]``, attending where ``attend_mask [R, T, S']``;
        ``positions [R, T]``: the slots whose rotary positions the inputs take (default ``slots``).

        ``S'`` may be smaller than ``cache.slots`` (narrow masks): slots at or beyond it are not read, and every
        slot written must lie below it. Returns fp32 logits ``[R, T, V]``.
        """
        return self._run(self.embed(tokens), slots, cache, attend_mask, positions)

    def _run(self, h: torch.Tensor, slots: torch.Tensor, cache: SlotCache, mask: torch.Tensor,
             positions: torch.Tensor | None = None) -> torch.Tensor:
        at = slots if positions is None else positions
        positions = (at - cache.position_offset[:, None]).clamp_min(0)  # padding slots: masked anyway
        additive = torch.zeros(mask.shape, dtype=h.dtype, device=h.device)
        additive.masked_fill_(~mask, torch.finfo(h.dtype).min)
        cache.write_slots, cache.read_width = slots, mask.shape[-1]
        try:
            out = self.language_model(inputs_embeds=h, attention_mask=additive[:, None], position_ids=positions,
                                      cache=cache, use_cache=True)
        finally:
            cache.write_slots, cache.read_width = None, cache.slots
        return self.head_logits(out.last_hidden_state)


__all__ = ["PromptTokenBackbone", "SlotCache", "left_padded_validity"]
