"""The next-scale protocol: what a decode loop needs from a VAR-style (scale-by-scale) model.

Next-scale (VAR) and continuous (MAR) models have their own small protocols beside the token-by-token
one (docs/architecture.md): their units of decoding are scales and continuous vectors. A next-scale model generates a pyramid of
token maps ``r_0 … r_{S-1}`` (sides ``patch_nums``); all tokens of a scale are sampled at once, each
independently given the earlier scales (VAR, https://arxiv.org/abs/2404.02905).

Vocabulary:

- *scale* ``s``: index into ``patch_nums``; it holds ``pn_s²`` tokens at sequence positions
  ``[begin_s, end_s)`` of the concatenated pyramid (:attr:`ScaleLayout.bounds`).
- *block-causal attention*: a token of scale ``s`` attends to every token of scales ``≤ s`` (its own
  scale included), never to later scales.
- *scale input*: what the transformer reads to predict scale ``s``: for ``s = 0`` the class token
  (``first_input``), for ``s > 0`` the tokenizer's running reconstruction ``f_hat`` down-sampled to
  ``pn_s`` (``embed_input``). The tokenizer side (:class:`ScaleQuantizer`) turns sampled ids into the
  next scale input.
- *rows*: the batch dimension of a forward; with classifier-free guidance ``B`` samples run as ``2B``
  rows (conditional rows first, then unconditional), as for token-by-token models.

The KV cache (:class:`ScaleKVCache`) belongs to the caller, one per request and per model: it is a
static buffer of ``L`` key/value slots with a fill pointer, appended to one forward at a time. Nothing
is stored on the model during decoding.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import torch

from arvis.models.protocol import StaticKVCache


@dataclass(frozen=True)
class ScaleLayout:
    """The token pyramid of a next-scale model.

    Attributes:
        patch_nums: side of each scale's token map, strictly increasing.
        vocab_size: width of the logits.
    """

    patch_nums: tuple[int, ...]
    vocab_size: int

    def __post_init__(self) -> None:
        p = tuple(self.patch_nums)
        if len(p) < 2 or any(int(x) < 1 for x in p) or list(p) != sorted(set(p)):
            raise ValueError(f"patch_nums must be >= 2 strictly increasing positive sides, got {self.patch_nums}")
        if self.vocab_size < 1:
            raise ValueError(f"vocab_size must be >= 1, got {self.vocab_size}")

    @property
    def num_scales(self) -> int:
        return len(self.patch_nums)

    @property
    def num_tokens(self) -> int:
        return sum(p * p for p in self.patch_nums)

    @property
    def bounds(self) -> tuple[tuple[int, int], ...]:
        """``(begin, end)`` of every scale in the concatenated sequence."""
        out, cur = [], 0
        for p in self.patch_nums:
            out.append((cur, cur + p * p))
            cur += p * p
        return tuple(out)

    def scale_of_positions(self) -> torch.Tensor:
        """``[L]`` int64: the scale of every sequence position (VAR's ``lvl_1L``)."""
        # Built on the CPU even under a meta-device context (a constant, not a weight).
        return torch.cat([torch.full((p * p,), s, dtype=torch.long, device="cpu") for s, p in enumerate(self.patch_nums)])

    def check_scale(self, name: str, value: int, allow_end: bool = False) -> int:
        """``value`` as a scale index (``ValueError`` naming ``name`` and the range otherwise)."""
        hi = self.num_scales if allow_end else self.num_scales - 1
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= hi:
            raise ValueError(f"{name} must be an integer scale index in [0, {hi}] (this model has "
                             f"{self.num_scales} scales, patch_nums={self.patch_nums}), got {value!r}")
        return value


def block_causal_mask(layout: ScaleLayout, first: int, last: int, device: torch.device | str = "cpu"
                      ) -> torch.Tensor:
    """Boolean ``[T, begin_first + T]`` mask for evaluating scales ``first … last`` in one forward.

    Query ``i`` (a token of scale ``s_i``) may attend to every cached token before ``begin_first`` and
    to every new token of a scale ``≤ s_i``. ``T = end_last − begin_first``.
    """
    scale = layout.scale_of_positions().to(device)
    begin, end = layout.bounds[first][0], layout.bounds[last][1]
    q = scale[begin:end]
    k = scale[:end]
    return k[None, :] <= q[:, None]


class ScaleKVCache(StaticKVCache):
    """Static per-layer key/value buffers ``[rows, heads, L, head_dim]`` with a fill pointer.

    The buffers are a :class:`~arvis.models.protocol.StaticKVCache`'s. A forward over ``T`` new tokens
    appends their keys/values at ``[length, length + T)`` of its first ``R <= rows`` rows (``append``), attends to ``[0, length + T)`` and then moves the pointer
    (``advance``). Dropping the unconditional rows from some scale on just means later forwards use
    ``R = B`` rows; the slots those rows leave stale are never read again.
    """

    def __init__(self, num_layers: int, rows: int, heads: int, slots: int, head_dim: int,
                 dtype: torch.dtype, device: torch.device | str):
        super().__init__(num_layers, rows, heads, slots, head_dim, dtype, device)
        self.length = 0  # valid slots
        self.scales = 0  # scales appended (a pruned scale appends fewer slots than it has tokens)

    def append(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Store ``k, v: [R, heads, T, head_dim]`` after the valid slots; return the keys/values to attend to."""
        R, _, T, _ = k.shape
        end = self.length + T
        if end > self.slots or R > self.rows:
            raise RuntimeError(f"KV cache overflow: {R} rows x {end} slots in a {self.rows} x {self.slots} cache")
        self.keys[layer][:R, :, self.length:end] = k
        self.values[layer][:R, :, self.length:end] = v
        return self.keys[layer][:R, :, :end], self.values[layer][:R, :, :end]

    def advance(self, count: int, scales: int) -> None:
        """Mark ``count`` more slots valid, holding ``scales`` more scales (after every layer wrote them)."""
        self.length += count
        self.scales += scales


@runtime_checkable
class NextScaleBackbone(Protocol):
    """A class-conditional next-scale transformer (VAR) as the decode loop drives it.

    ``condition(labels) -> cond`` embeds ``[R]`` class ids (the null class for unconditional rows);
    ``first_input(cond)`` and ``embed_input(scale, inputs)`` build the transformer inputs of a scale;
    ``forward_scales(x, cond, cache, first, last)`` evaluates scales ``first … last`` (inputs
    concatenated, ``[R, T, C]``) against the cache and returns ``[R, T, V]`` fp32 logits.
    """

    @property
    def scale_layout(self) -> ScaleLayout: ...

    @property
    def num_classes(self) -> int: ...

    def condition(self, labels: torch.Tensor) -> torch.Tensor: ...

    def first_input(self, cond: torch.Tensor) -> torch.Tensor: ...

    def embed_input(self, scale: int, inputs: torch.Tensor) -> torch.Tensor: ...

    def allocate_cache(self, rows: int, dtype: torch.dtype | None = None,
                       device: torch.device | str | None = None) -> ScaleKVCache: ...

    def forward_scales(self, x: torch.Tensor, cond: torch.Tensor, cache: ScaleKVCache, first: int, last: int,
                       pruning: object | None = None) -> torch.Tensor: ...


@runtime_checkable
class ScaleQuantizer(Protocol):
    """The tokenizer side of next-scale decoding (VAR's multi-scale residual quantiser)."""

    patch_nums: tuple[int, ...]
    channels: int  # code dimension (Cvae)

    def code_map(self, ids: torch.Tensor, side: int) -> torch.Tensor: ...

    def next_scale_input(self, scale: int, f_hat: torch.Tensor, code_map: torch.Tensor
                         ) -> tuple[torch.Tensor, torch.Tensor | None]: ...
