"""The backbone protocol: what the decode engine needs from a discrete-token AR model.

Vocabulary used across arvis:

- *sequence index* ``j``: the j-th generated token (0 ≤ j < ``layout.num_tokens``), in the model's
  training order (raster for LlamaGen; rows + end-of-line tokens for Emu3; frames × rows for video).
- *slot* (absolute position): where a token's key/value lives in the cache. The condition occupies
  slots ``[0, condition_length)``; the token with sequence index ``j`` is *input* at slot
  ``condition_length + j`` and is *predicted* by the query at the slot before it. A slot is also the
  position the backbone's positional encoding sees.
- *rows*: the batch dimension of a forward. With classifier-free guidance (CFG) a batch of ``B``
  samples runs as ``2B`` rows: rows ``[0, B)`` conditional, rows ``[B, 2B)`` unconditional, sharing
  tokens, slots and masks.

A backbone offers three verbs, all stateless with respect to the module (decode state lives in the
caller's :class:`StaticKVCache` and masks):

- ``allocate_cache(rows, dtype, device)`` → a preallocated cache for ``layout.max_slots`` slots;
- ``prefill(condition, cache)`` → writes the condition's keys/values and returns the logits that
  predict sequence index 0 (``[rows, V]``) plus the validity of the condition slots;
- ``forward(tokens, slots, cache, attend_mask)`` → writes the tokens' keys/values at ``slots`` and
  returns ``[rows, T, V]`` logits; query ``t`` of row ``r`` attends exactly to the slots where
  ``attend_mask[r, t]`` is true (the caller guarantees the slot itself is among them).

Rollback is a property of the caller's masks: a slot written by a rejected draft is simply never
attended again until it is rewritten. Caches that must be cropped (a transformers ``DynamicCache``)
implement :meth:`KVCacheProtocol.rollback`; the static cache's is a no-op. When samples of a ragged
batch finish, the engine keeps only the remaining rows with :meth:`KVCacheProtocol.select_rows`.

Optional, additive (a backbone without them works unchanged):

- ``narrow_masks = True`` (class attribute): the backbone accepts an ``attend_mask`` narrower than
  ``cache.slots`` — slots at and beyond the mask's width are never attended. The engine then passes
  masks only as wide as the slots that can hold valid keys (rounded up to a multiple of
  :data:`MASK_WIDTH_STEP`, so that a decode sees a handful of shapes), which keeps attention cost
  proportional to the prefix instead of the whole cache.
- *scratch slots*: ``allocate_cache(rows, dtype, device, extra_slots=E)`` adds ``E`` slots after the
  layout's, and ``forward_tokens(tokens, slots, cache, attend_mask, positions=...)`` takes the positions apart
  from the slots written (``positions [rows, T]``: the slot whose position each input takes; default
  ``slots``); the cache's ``copy_slots(source, target)`` moves an input that became final from its scratch
  slot to its own (:meth:`StaticKVCache.copy_slots`). Only methods that feed several tokens at one sequence
  index in one forward need it (SJD-PAC's tree of candidates: :class:`arvis.engine.DecodeEngine`'s
  ``scratch_slots``); arvis's LlamaGen, video and Emu3 backbones offer it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Protocol, runtime_checkable

import torch

MASK_WIDTH_STEP = 32  # narrow masks grow in steps of this many slots (few distinct shapes per decode)


@dataclass(frozen=True)
class TokenLayout:
    """How a backbone lays generated tokens out.

    Attributes:
        grid: spatial (``(H, W)``) or spatio-temporal (``(T, H, W)``) token grid of the image/video.
        vocab_size: width of the logits.
        condition_length: number of cache slots taken by the condition prefix.
        image_token_range: ``[lo, hi)`` ids that are image tokens (relaxed acceptance only ever
            relaxes these); ``None`` = the whole vocabulary.
        structural_tokens: sequence index → forced token id (e.g. Emu3's end-of-line). Positions not
            listed are free image tokens; the engine gives them no mass outside ``image_token_range``.
        row_stride: sequence indices between vertically adjacent grid cells: the grid width, plus one
            when every row ends with an end-of-line token (Emu3: ``W + 1``). ``0`` (default) means the
            grid width; the attribute always reads as the resolved stride.
    """

    grid: tuple[int, ...]
    vocab_size: int
    condition_length: int
    image_token_range: tuple[int, int] | None = None
    structural_tokens: Mapping[int, int] = field(default_factory=dict)
    row_stride: int = 0

    def __post_init__(self) -> None:
        if not self.grid or any(int(g) <= 0 for g in self.grid):
            raise ValueError(f"grid must be positive sizes, got {self.grid}")
        if self.vocab_size <= 0:
            raise ValueError(f"vocab_size must be > 0, got {self.vocab_size}")
        if self.condition_length <= 0:
            raise ValueError(f"condition_length must be > 0, got {self.condition_length}")
        if self.row_stride == 0:
            object.__setattr__(self, "row_stride", int(self.grid[-1]))
        if self.row_stride < self.grid[-1]:
            raise ValueError(f"row_stride must be >= the grid width {self.grid[-1]}, got {self.row_stride}")
        if self.image_token_range is not None:
            lo, hi = self.image_token_range
            if not 0 <= lo < hi <= self.vocab_size:
                raise ValueError(f"image_token_range must satisfy 0 <= lo < hi <= vocab_size={self.vocab_size}, "
                                 f"got {self.image_token_range}")

    @property
    def num_image_tokens(self) -> int:
        n = 1
        for g in self.grid:
            n *= int(g)
        return n

    @property
    def num_tokens(self) -> int:
        """Generated sequence length, structural tokens included."""
        return self.num_image_tokens + len(self.structural_tokens)

    @property
    def max_slots(self) -> int:
        """Cache slots needed: condition + every generated token but the last (never input)."""
        return self.condition_length + self.num_tokens


@dataclass
class Condition:
    """What a sample is conditioned on (one of the three forms), batch-first.

    Attributes:
        class_labels: ``[B]`` int64 class ids (class-conditional models).
        embeddings: ``[B, C, D]`` caption features (text-conditional models), left-padded.
        token_ids: ``[B, C]`` int64 prompt token ids in the model's own vocabulary (models that read
            their prompt as tokens, e.g. Emu3), left-padded.
        mask: ``[B, C]`` bool, true where ``embeddings`` / ``token_ids`` hold a real token.
    """

    class_labels: torch.Tensor | None = None
    embeddings: torch.Tensor | None = None
    mask: torch.Tensor | None = None
    token_ids: torch.Tensor | None = None

    @property
    def batch_size(self) -> int:
        for t in (self.class_labels, self.embeddings, self.token_ids):
            if t is not None:
                return int(t.shape[0])
        raise ValueError("condition: empty (no class_labels, embeddings or token_ids)")

    def _map(self, fn) -> Condition:
        return Condition(**{f.name: None if getattr(self, f.name) is None else fn(f.name, getattr(self, f.name))
                            for f in fields(self)})

    def repeat_interleave(self, n: int) -> Condition:
        """Each sample repeated ``n`` times in place (``num_images_per_prompt``)."""
        return self._map(lambda name, t: t.repeat_interleave(n, 0))

    def concat(self, other: Condition) -> Condition:
        """This batch followed by ``other``'s (the CFG pair: conditional rows, then unconditional rows)."""
        return self._map(lambda name, t: torch.cat([t, getattr(other, name)]))


@runtime_checkable
class KVCacheProtocol(Protocol):
    rows: int

    def rollback(self, lengths: torch.Tensor) -> None:
        """Forget every slot at or after ``lengths[r]`` in row ``r`` (``[rows]`` int64)."""
        ...

    def select_rows(self, rows: torch.Tensor) -> None:
        """Keep only rows ``rows`` (``[R']`` int64, in that order); later calls see ``R'`` rows."""
        ...


class StaticKVCache:
    """Preallocated per-layer key/value buffers ``[rows, heads, slots, head_dim]``, written at explicit slots.

    Owned by the caller (one per request), never stored on the model. Rolling back rejected drafts
    needs no copy: the caller's attention mask stops reading those slots and the next write
    overwrites them.
    """

    def __init__(self, num_layers: int, rows: int, heads: int, slots: int, head_dim: int,
                 dtype: torch.dtype, device: torch.device | str):
        shape = (rows, heads, slots, head_dim)
        self.keys = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(num_layers)]
        self.values = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(num_layers)]
        self.rows, self.heads, self.slots, self.head_dim = rows, heads, slots, head_dim

    def write(self, layer: int, slots: torch.Tensor, k: torch.Tensor, v: torch.Tensor
              ) -> tuple[torch.Tensor, torch.Tensor]:
        """Write ``k, v: [rows, heads, T, head_dim]`` at ``slots: [rows, T]``; return the full buffers."""
        index = slots[:, None, :, None].expand(-1, self.heads, -1, self.head_dim)
        self.keys[layer].scatter_(2, index, k.to(self.keys[layer].dtype))
        self.values[layer].scatter_(2, index, v.to(self.values[layer].dtype))
        return self.keys[layer], self.values[layer]

    def rollback(self, lengths: torch.Tensor) -> None:
        """No-op: positional caches roll back through the attention mask (see module docstring)."""

    def select_rows(self, rows: torch.Tensor) -> None:
        """Keep only rows ``rows`` (``[R']`` int64): one copy of every buffer (samples left the batch)."""
        self.keys = [k.index_select(0, rows) for k in self.keys]
        self.values = [v.index_select(0, rows) for v in self.values]
        self.rows = int(rows.shape[0])

    def copy_slots(self, source: torch.Tensor, target: torch.Tensor) -> None:
        """Copy every layer's keys and values from slots ``source [rows, M]`` to ``target [rows, M]`` (an input
        evaluated in a scratch slot that became final moves to its own slot; targets must be distinct)."""
        src = source[:, None, :, None].expand(-1, self.heads, -1, self.head_dim)
        dst = target[:, None, :, None].expand(-1, self.heads, -1, self.head_dim)
        for buffer in self.keys + self.values:
            buffer.scatter_(2, dst, buffer.gather(2, src))  # the gather copies first: in place is safe

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.keys + self.values)


@runtime_checkable
class Backbone(Protocol):
    """A discrete-token AR model the engine can drive (see module docstring)."""

    @property
    def layout(self) -> TokenLayout: ...

    def null_condition(self, condition: Condition) -> Condition: ...

    def allocate_cache(self, rows: int, dtype: torch.dtype, device: torch.device | str) -> StaticKVCache: ...

    def prefill(self, condition: Condition, cache: StaticKVCache) -> tuple[torch.Tensor, torch.Tensor]: ...

    def forward_tokens(self, tokens: torch.Tensor, slots: torch.Tensor, cache: StaticKVCache,
                       attend_mask: torch.Tensor) -> torch.Tensor: ...


@runtime_checkable
class DiffusionHead(Protocol):
    """A per-token denoiser p(x | z) sampled by Gaussian transitions x_T -> ... -> x_0 (DDPM)."""
    token_dim: int
    def num_sampling_steps(self) -> int: ...
    def transition(self, x_t: torch.Tensor, step: int, z: torch.Tensor, *, temperature: float = 1.0,
                   guidance_scale: float = 1.0, z_uncond: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Mean and std of p(x_{t-1} | x_t, z) at sampling step `step` (counting down num_sampling_steps()-1 .. 0),
        x_t [N, D], z [N, C]; std broadcastable to [N, D]; at step 0 the std is 0 (x_0 = mean). With z_uncond and
        guidance_scale != 1 the noise prediction is combined as MAR does (uncond + s * (cond - uncond))."""
