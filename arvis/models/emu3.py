"""Emu3 (Wang et al., 2024, arXiv:2409.18869) behind arvis's backbone protocol, through transformers.

Emu3 is one decoder over text and image tokens. To generate an ``H × W``-token image it reads a prompt
ending in ``<|image start|>H*W<|image token|>`` and writes the image row by row, each row followed by
an end-of-line token, then end-of-frame and end-of-image (then end-of-text, which arvis does not
generate). transformers' ``Emu3ForConditionalGeneration`` holds the language model, the VQ tokenizer
(``Emu3VQVAE``) and the map from VQ codes to the BPE ids of the ``<|visual token NNNNNN|>`` tokens.

arvis drives the language model from the outside, with no patching:

- **Layout ids.** The adapter's token ids are the VQ codes ``0 … K−1`` followed by end-of-line,
  end-of-frame and end-of-image (``K, K+1, K+2``); it maps them to Emu3's BPE ids on input and
  computes the head's logits only for those ``K + 3`` rows (Emu3-Gen's head has 184,622 rows, of which
  32,768 are image tokens). ``TokenLayout.image_token_range = (0, K)`` and the structural tokens make
  the engine reproduce Emu3's prefix-constrained decoding: free positions take image tokens only,
  structural positions their forced token.
- **Cache.** :class:`Emu3SlotCache` is a transformers ``Cache`` subclass (the documented extension
  point the attention layers call ``update`` on) over arvis's static buffers: every forward writes
  its keys/values at the explicit slots the engine chose, with explicit ``position_ids`` and a 4-D
  mask — nothing depends on a cache's internal counter, so rollback is the engine's slot validity.
- **Prompts and CFG.** The condition is prompt token ids (``Condition.token_ids``), left-padded to
  the layout's condition length with a mask. Each row's rotary positions count from its first real
  token (as transformers' ``generate`` does with left padding), so a padded prompt gives exactly the
  logits of the unpadded one. The CFG pair is ``2B`` rows: the prompts, then Emu3's negative prompt.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from transformers.cache_utils import Cache, CacheLayerMixin

from arvis.models.protocol import Condition, StaticKVCache, TokenLayout

END_OF_LINE = "<|extra_200|>"
END_OF_FRAME = "<|extra_201|>"
IMAGE_START = "<|image start|>"
IMAGE_END = "<|image end|>"
IMAGE_WRAPPER = "<|image token|>"
IMAGE_PLACEHOLDER = "<image>"
VISUAL_TOKEN = "<|visual token {:06d}|>"
_VISUAL_PATTERN = re.compile(r"<\|visual token (\d{6})\|>")


# ----------------------------------------------------------------------------- vocabulary and layout
@dataclass(frozen=True)
class Emu3Vocabulary:
    """Where Emu3's image tokens live among its BPE ids.

    Attributes:
        visual_ids: BPE id of VQ code ``c`` at position ``c`` (``K`` entries).
        end_of_line, end_of_frame, end_of_image: BPE ids of the structural tokens.
    """

    visual_ids: tuple[int, ...]
    end_of_line: int
    end_of_frame: int
    end_of_image: int

    @classmethod
    def from_map(cls, vocabulary_map: Mapping[str, int]) -> Emu3Vocabulary:
        """From a token → id map (``Emu3Config.vocabulary_map``, or ``tokenizer.get_vocab()``)."""
        codes = {}
        for name, bpe in vocabulary_map.items():
            match = _VISUAL_PATTERN.fullmatch(name)
            if match:
                codes[int(match.group(1))] = int(bpe)
        if not codes or sorted(codes) != list(range(len(codes))):
            raise ValueError(f"vocabulary_map: the visual tokens {VISUAL_TOKEN.format(0)!r}… must number the codes "
                             f"0..K-1 without gaps; found {len(codes)} visual tokens")
        missing = [t for t in (END_OF_LINE, END_OF_FRAME, IMAGE_END) if t not in vocabulary_map]
        if missing:
            raise ValueError(f"vocabulary_map: missing the structural token(s) {missing}")
        return cls(tuple(codes[c] for c in range(len(codes))), int(vocabulary_map[END_OF_LINE]),
                   int(vocabulary_map[END_OF_FRAME]), int(vocabulary_map[IMAGE_END]))

    @property
    def num_codes(self) -> int:
        return len(self.visual_ids)

    @property
    def end_of_line_id(self) -> int:
        """The layout id of end-of-line (end-of-frame and end-of-image follow it)."""
        return self.num_codes

    def model_ids(self) -> torch.Tensor:
        """``[K + 3]`` int64: the BPE id of every layout id."""
        return torch.tensor([*self.visual_ids, self.end_of_line, self.end_of_frame, self.end_of_image])


def emu3_layout(height: int, width: int, num_codes: int, condition_length: int) -> TokenLayout:
    """The token layout of an ``height × width`` Emu3 image after a ``condition_length``-slot prompt.

    Sequence index ``r·(W+1) + c`` is grid cell ``(r, c)``; ``r·(W+1) + W`` is row ``r``'s end-of-line;
    end-of-frame and end-of-image follow the last row (``N = H·(W+1) + 2``).
    """
    for name, value in (("height", height), ("width", width)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{name} must be an integer >= 1 (tokens), got {value!r}")
    stride = width + 1
    eol = num_codes
    structural = {r * stride + width: eol for r in range(height)}
    structural[height * stride] = eol + 1
    structural[height * stride + 1] = eol + 2
    return TokenLayout(grid=(height, width), vocab_size=num_codes + 3, condition_length=condition_length,
                       image_token_range=(0, num_codes), structural_tokens=structural, row_stride=stride)


def image_codes(tokens: torch.Tensor, layout: TokenLayout) -> torch.Tensor:
    """Generated sequences ``[B, N]`` (layout ids) → VQ code grids ``[B, H, W]`` (structural tokens dropped)."""
    H, W = layout.grid
    return tokens[:, : H * layout.row_stride].reshape(-1, H, layout.row_stride)[..., :W]


def emu3_config(vocabulary_map: Mapping[str, int], hidden_size: int, num_layers: int, num_heads: int,
                num_kv_heads: int, intermediate_size: int, vq: Mapping[str, object], max_positions: int = 1024,
                pad_token_id: int = 0, bos_token_id: int = 1, eos_token_id: int = 2, rope_theta: float = 10000.0,
                dropout: float = 0.0):
    """An ``Emu3Config`` for a small Emu3-architecture model (tests, arvis's shipped model).

    Args:
        vocabulary_map: token → id (the tokenizer's vocabulary; its size is the LM's vocabulary).
        hidden_size, num_layers, num_heads, num_kv_heads, intermediate_size: the language model.
        vq: ``Emu3VQVAEConfig`` fields (``codebook_size``, ``base_channels``, ``channel_multiplier``…);
            its ``hidden_size`` defaults to ``base_channels × channel_multiplier[-1]`` (the attention
            block's width must equal it).
        max_positions: rotary positions the LM supports (prompt + image sequence).
        pad_token_id, bos_token_id, eos_token_id: the tokenizer's ids.
        rope_theta: rotary base.
        dropout: attention dropout (training only).
    """
    from transformers import Emu3Config

    vq = dict(vq)
    mult = list(vq.get("channel_multiplier", (1, 2, 2, 4)))
    vq.setdefault("hidden_size", int(vq.get("base_channels", 256)) * mult[-1])
    if int(vq.get("base_channels", 256)) % 32:
        raise ValueError(f"vq base_channels must be a multiple of 32 (GroupNorm groups), got {vq['base_channels']}")
    text = dict(vocab_size=max(vocabulary_map.values()) + 1, hidden_size=hidden_size, intermediate_size=intermediate_size,
                num_hidden_layers=num_layers, num_attention_heads=num_heads, num_key_value_heads=num_kv_heads,
                max_position_embeddings=max_positions, pad_token_id=pad_token_id, bos_token_id=bos_token_id,
                eos_token_id=eos_token_id, attention_dropout=dropout,
                rope_parameters={"rope_type": "default", "rope_theta": rope_theta})
    return Emu3Config(text_config=text, vq_config=vq, vocabulary_map=dict(vocabulary_map))


def language_model_parts(model: nn.Module) -> tuple[nn.Module, nn.Linear]:
    """``(Emu3TextModel, lm_head)`` of an ``Emu3ForConditionalGeneration`` or ``Emu3ForCausalLM``."""
    inner = getattr(model, "model", None)
    text = getattr(inner, "text_model", inner)
    head = getattr(model, "lm_head", None)
    if text is None or head is None or not hasattr(text, "embed_tokens") or not hasattr(text, "layers"):
        raise TypeError(f"model: expected a transformers Emu3ForConditionalGeneration or Emu3ForCausalLM, "
                        f"got {type(model).__name__}")
    return text, head


# ----------------------------------------------------------------------------- cache
class _SlotLayer(CacheLayerMixin):
    """One layer's view of an :class:`Emu3SlotCache` (what transformers' ``Cache`` helpers inspect)."""

    is_sliding = False
    is_compileable = False

    def __init__(self, cache: Emu3SlotCache, index: int):  # no super().__init__: keys live in the cache
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


class Emu3SlotCache(StaticKVCache, Cache):
    """arvis's static cache as a transformers ``Cache``: ``update`` writes at the slots of the current forward.

    The adapter sets :attr:`write_slots` (``[rows, T]``) before each forward and clears it after;
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
            raise RuntimeError("Emu3SlotCache: no write slots set (forwards go through Emu3Backbone)")
        keys, values = self.write(layer_idx, self.write_slots, key_states, value_states)
        return keys[:, :, : self.read_width], values[:, :, : self.read_width]

    def select_rows(self, rows: torch.Tensor) -> None:
        StaticKVCache.select_rows(self, rows)
        self.position_offset = self.position_offset.index_select(0, rows)


# ----------------------------------------------------------------------------- the adapter
class Emu3Backbone(nn.Module):
    """One request shape (image size, prompt length, negative prompt) of an Emu3 model, as an arvis backbone.

    Cheap to build (it only references the model's modules), so pipelines build one per call.

    Args:
        model: ``Emu3ForConditionalGeneration`` or ``Emu3ForCausalLM`` (transformers).
        vocabulary: where the image tokens live (:meth:`Emu3Vocabulary.from_map`).
        height, width: image size in tokens.
        condition_length: prompt slots (prompts are left-padded to it).
        negative: the unconditional half of the CFG pair: ``Condition(token_ids [B or 1, C], mask)``
            (Emu3's negative prompt), or ``None`` when guidance is not used.
    """

    supports_cfg = True
    narrow_masks = True  # attend masks may be narrower than the cache: only that many slots are read

    def __init__(self, model: nn.Module, vocabulary: Emu3Vocabulary, height: int, width: int,
                 condition_length: int, negative: Condition | None = None):
        super().__init__()
        self.model = model
        self.text_model, self.lm_head = language_model_parts(model)
        self.vocabulary = vocabulary
        self._layout = emu3_layout(height, width, vocabulary.num_codes, condition_length)
        self.negative = negative
        ids = vocabulary.model_ids().to(self.lm_head.weight.device)
        self.register_buffer("_model_ids", ids, persistent=False)
        K = vocabulary.num_codes
        lo = vocabulary.visual_ids[0]
        # Emu3's visual tokens are one contiguous block of BPE ids: slice the head (a view) instead of
        # copying K of its rows at every forward.
        self._visual_block = (lo, lo + K) if vocabulary.visual_ids == tuple(range(lo, lo + K)) else None

    @property
    def layout(self) -> TokenLayout:
        return self._layout

    def null_condition(self, condition: Condition) -> Condition:
        """Emu3's negative prompt for every sample (one shared prompt is broadcast)."""
        if self.negative is None or self.negative.token_ids is None:
            raise ValueError("guidance_scale != 1 needs a negative prompt (Emu3Backbone(negative=...))")
        B = condition.batch_size
        ids, mask = self.negative.token_ids, self.negative.mask
        if mask is None:
            mask = torch.ones_like(ids, dtype=torch.bool)
        if ids.shape[0] == 1:
            ids, mask = ids.expand(B, -1), mask.expand(B, -1)
        if ids.shape != condition.token_ids.shape:
            raise ValueError(f"negative prompt ids {tuple(ids.shape)} do not match the prompts' "
                             f"{tuple(condition.token_ids.shape)} (pad both to the layout's condition length)")
        return Condition(token_ids=ids.to(condition.token_ids.device), mask=mask.to(condition.token_ids.device))

    def allocate_cache(self, rows: int, dtype: torch.dtype | None = None,
                       device: torch.device | str | None = None, extra_slots: int = 0) -> Emu3SlotCache:
        """The layout's slots plus ``extra_slots`` scratch slots (inputs at a position other than their slot)."""
        cfg = self.text_model.config
        head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        p = self.lm_head.weight
        return Emu3SlotCache(cfg.num_hidden_layers, rows, cfg.num_key_value_heads,
                             self.layout.max_slots + extra_slots, head_dim, dtype or p.dtype, device or p.device)

    def prefill(self, condition: Condition, cache: Emu3SlotCache) -> tuple[torch.Tensor, torch.Tensor]:
        """Write the (left-padded) prompts into slots ``[0, C)``.

        Returns:
            logits ``[R, K + 3]`` predicting sequence index 0, and the prompt-slot validity ``[R, C]``.
        """
        ids = condition.token_ids
        C = self.layout.condition_length
        if ids is None or ids.ndim != 2 or ids.shape[1] != C:
            raise ValueError(f"condition: Emu3 needs token_ids of shape [rows, {C}], got "
                             f"{None if ids is None else tuple(ids.shape)}")
        device = self.lm_head.weight.device
        ids = ids.to(device)
        valid = (torch.ones_like(ids, dtype=torch.bool) if condition.mask is None
                 else condition.mask.to(device=device, dtype=torch.bool))
        pads = (~valid).sum(1)
        if not bool((valid == (torch.arange(C, device=device) >= pads[:, None])).all()) or bool((pads >= C).any()):
            raise ValueError("condition: prompts must be left-padded (padding first, then at least one real token)")
        cache.position_offset = pads
        R = ids.shape[0]
        slots = torch.arange(C, device=device).expand(R, C)
        causal = torch.ones(C, C, dtype=torch.bool, device=device).tril()
        mask = (causal & valid[:, None, :]) | torch.eye(C, dtype=torch.bool, device=device)
        mask = F.pad(mask, (0, cache.slots - C))
        h = self.text_model.embed_tokens(ids)
        logits = self._run(h, slots, cache, mask)
        return logits[:, -1], valid

    def forward_tokens(self, tokens: torch.Tensor, slots: torch.Tensor, cache: Emu3SlotCache,
                       attend_mask: torch.Tensor, positions: torch.Tensor | None = None) -> torch.Tensor:
        """Evaluate layout ids ``tokens [R, T]`` at ``slots [R, T]``, attending where ``attend_mask [R, T, S']``;
        ``positions [R, T]``: the slots whose rotary positions the inputs take (default ``slots``).

        ``S'`` may be smaller than ``cache.slots`` (narrow masks): slots at or beyond it are not read, and every
        slot written must lie below it. Returns fp32 logits ``[R, T, K + 3]``.
        """
        h = self.text_model.embed_tokens(self._model_ids[tokens])
        return self._run(h, slots, cache, attend_mask, positions)

    def _run(self, h: torch.Tensor, slots: torch.Tensor, cache: Emu3SlotCache, mask: torch.Tensor,
             positions: torch.Tensor | None = None) -> torch.Tensor:
        at = slots if positions is None else positions
        positions = (at - cache.position_offset[:, None]).clamp_min(0)  # padding slots: masked anyway
        additive = torch.zeros(mask.shape, dtype=h.dtype, device=h.device)
        additive.masked_fill_(~mask, torch.finfo(h.dtype).min)
        cache.write_slots, cache.read_width = slots, mask.shape[-1]
        try:
            out = self.text_model(inputs_embeds=h, attention_mask=additive[:, None], position_ids=positions,
                                  past_key_values=cache, use_cache=True)
        finally:
            cache.write_slots, cache.read_width = None, cache.slots
        return self.head_logits(out.last_hidden_state)

    def head_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """The LM head restricted to the layout ids: ``[..., hidden] → [..., K + 3]`` fp32."""
        weight = self.lm_head.weight
        if self._visual_block is not None:
            lo, hi = self._visual_block
            structural = weight.index_select(0, self._model_ids[-3:])
            return torch.cat([F.linear(hidden, weight[lo:hi]), F.linear(hidden, structural)], dim=-1).float()
        return F.linear(hidden, weight.index_select(0, self._model_ids)).float()


__all__ = ["Emu3Backbone", "Emu3SlotCache", "Emu3Vocabulary", "emu3_config", "emu3_layout", "image_codes",
           "language_model_parts"]
