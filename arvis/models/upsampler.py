"""A token up-sampler: per-position distributions over a codebook at a finer grid, from a coarse token map.

Multi-scale local drafting (MuLo-SD; Peruzzo et al., CVPR 2026) drafts an image at low resolution and
turns the low-resolution tokens into candidate high-resolution tokens *with probabilities* for every
position at once. :class:`TokenUpsampler` is that learned map for arvis's VQ models: an ``h x w`` map
of codebook ids (plus the class, for class-conditional drafting) goes in; logits over the same
codebook at every position of the ``(s·h) x (s·w)`` grid come out, in raster order — the order of the
high-resolution model's sequence indices.

Architecture (small and convolutional: a high-resolution token depends mostly on the coarse token it
lies in and its neighbours): token embedding + class embedding + a learned position embedding at the
coarse grid, residual 3x3 conv blocks, a sub-pixel (pixel-shuffle) up-sampling by ``scale``, residual
blocks at the fine grid, a 1x1 head over the codebook. Trained by
:mod:`arvis.training.train_upsampler` with cross-entropy against the VQ codes of the same crops at the
high resolution.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from diffusers import ConfigMixin, ModelMixin
from diffusers.configuration_utils import register_to_config
from torch import nn

from arvis.models.llamagen import MAX_GRID
from arvis.utils.config_check import Bound, CheckedFolderMixin, check_config

# What each configuration field may hold (arvis.utils.config_check), checked before anything is allocated.
# Generous: the shipped up-sampler has width 96 and 3 blocks on an 8x8 grid; the fine grid is at most LlamaGen's.
UPSAMPLER_CONFIG_BOUNDS: dict[str, Bound] = {
    "vocab_size": Bound.integer(2, 1 << 20),
    "low_grid": Bound.integer(1, MAX_GRID),
    "scale": Bound.integer(1, MAX_GRID),
    "dim": Bound.integer(1, 16384),
    "low_blocks": Bound.integer(0, 256),
    "high_blocks": Bound.integer(0, 256),
    "num_classes": Bound.integer(0, 1_000_000),
    "groups": Bound.integer(1, 16384),
    "dropout": Bound.number(0.0, 1.0, open_high=True),
}


class _ResBlock(nn.Module):
    """GroupNorm → SiLU → 3x3 conv, twice, plus the input."""

    def __init__(self, dim: int, groups: int, dropout: float):
        super().__init__()
        self.norm1 = nn.GroupNorm(groups, dim)
        self.conv1 = nn.Conv2d(dim, dim, 3, padding=1)
        self.norm2 = nn.GroupNorm(groups, dim)
        self.dropout = nn.Dropout(dropout)
        self.conv2 = nn.Conv2d(dim, dim, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.conv1(F.silu(self.norm1(x)))
        return x + self.conv2(self.dropout(F.silu(self.norm2(h))))


class TokenUpsampler(CheckedFolderMixin, ModelMixin, ConfigMixin):
    """Coarse token map (+ class) → logits over the codebook on a grid ``scale`` times finer.

    Args:
        vocab_size: codebook entries (input ids and output classes: both grids use the same VQ).
        low_grid: side of the coarse token map.
        scale: up-sampling factor (the fine grid has side ``scale * low_grid``).
        dim: channels.
        low_blocks / high_blocks: residual blocks before / after the up-sampling.
        num_classes: classes of the class-conditional drafter (0: no class input).
        groups: GroupNorm groups (divides ``dim``).
        dropout: dropout inside the residual blocks (training only).

    Example:
        >>> up = TokenUpsampler(vocab_size=64, low_grid=4, scale=2, dim=16, num_classes=3, groups=4)
        >>> up(torch.zeros(2, 4, 4, dtype=torch.long), torch.tensor([0, 2])).shape
        torch.Size([2, 64, 64])
    """

    config_name = "config.json"
    config_bounds = UPSAMPLER_CONFIG_BOUNDS

    @register_to_config
    def __init__(self, vocab_size: int = 1024, low_grid: int = 8, scale: int = 2, dim: int = 128,
                 low_blocks: int = 2, high_blocks: int = 2, num_classes: int = 0, groups: int = 8,
                 dropout: float = 0.0):
        super().__init__()
        check_config(self.config, UPSAMPLER_CONFIG_BOUNDS, source=type(self).__name__)
        if low_grid * scale > MAX_GRID:
            raise ValueError(f"low_grid * scale must be <= {MAX_GRID} (the fine grid's side), got {low_grid} x {scale}")
        if dim % groups:
            raise ValueError(f"groups must divide dim, got dim={dim}, groups={groups}")
        self.token_embedding = nn.Embedding(vocab_size, dim)
        self.class_embedding = nn.Embedding(num_classes, dim) if num_classes else None
        self.position_embedding = nn.Parameter(torch.zeros(1, dim, low_grid, low_grid))
        self.low = nn.Sequential(*[_ResBlock(dim, groups, dropout) for _ in range(low_blocks)])
        self.up = nn.Conv2d(dim, dim * scale * scale, 1)
        self.high = nn.Sequential(*[_ResBlock(dim, groups, dropout) for _ in range(high_blocks)])
        self.norm = nn.GroupNorm(groups, dim)
        self.head = nn.Conv2d(dim, vocab_size, 1)

    @property
    def high_grid(self) -> int:
        return self.config.low_grid * self.config.scale

    def forward(self, low_tokens: torch.Tensor, class_labels: torch.Tensor | None = None) -> torch.Tensor:
        """Logits at every fine-grid position.

        Args:
            low_tokens: ``[B, h, w]`` or ``[B, h*w]`` int64 codebook ids (``h = w = low_grid``).
            class_labels: ``[B]`` int64 class ids (required iff ``num_classes > 0``).

        Returns:
            ``[B, H*W, vocab_size]`` logits in raster order (``H = W = scale * low_grid``).
        """
        g, V = self.config.low_grid, self.config.vocab_size
        if low_tokens.dim() == 2:
            low_tokens = low_tokens.view(low_tokens.shape[0], g, g)
        if low_tokens.shape[1:] != (g, g):
            raise ValueError(f"low_tokens must be [batch, {g}, {g}] (or [batch, {g * g}]), got {tuple(low_tokens.shape)}")
        if bool((low_tokens < 0).any()) or bool((low_tokens >= V).any()):
            raise ValueError(f"low_tokens must be codebook ids in [0, {V})")
        x = self.token_embedding(low_tokens).permute(0, 3, 1, 2) + self.position_embedding  # [B, dim, g, g]
        if self.class_embedding is not None:
            if class_labels is None:
                raise ValueError("class_labels: required by this class-conditional up-sampler")
            if bool((class_labels < 0).any()) or bool((class_labels >= self.config.num_classes).any()):
                raise ValueError(f"class_labels must be in [0, {self.config.num_classes})")
            x = x + self.class_embedding(class_labels)[:, :, None, None]
        h = F.pixel_shuffle(self.up(self.low(x)), self.config.scale)  # [B, dim, H, W]
        logits = self.head(F.silu(self.norm(self.high(h))))  # [B, V, H, W]
        return logits.flatten(2).transpose(1, 2)

    @torch.no_grad()
    def distributions(self, low_tokens: torch.Tensor, class_labels: torch.Tensor | None = None,
                      temperature: float = 1.0) -> torch.Tensor:
        """``softmax(logits / temperature)`` in fp32: ``[B, H*W, vocab_size]`` (the drafts' ``q``)."""
        if not temperature > 0:
            raise ValueError(f"temperature must be > 0, got {temperature!r}")
        return torch.softmax(self.forward(low_tokens, class_labels).float() / temperature, dim=-1)


__all__ = ["TokenUpsampler"]
