"""LlamaGen's VQ image tokenizer, weight-compatible with the official checkpoints.

LlamaGen (Sun et al., 2024, https://arxiv.org/abs/2406.06525) tokenises an image with a convolutional
VQ auto-encoder in the taming-transformers family: a ResNet encoder with self-attention at the lowest
resolution, a ``1x1`` projection to a small code dimension (8), a nearest-neighbour lookup in an
l2-normalised codebook (16384 entries), and a mirrored decoder. ``VQ-16`` down-samples by 16 (256 px ->
16x16 codes), ``VQ-8`` by 8.

This file is an independent implementation of that architecture. Parameter and buffer names and shapes
equal the official ``VQModel`` (``tokenizer/tokenizer_image/vq_model.py`` in FoundationVision/LlamaGen),
so an official state dict loads with ``load_state_dict(strict=True)``. The numerics follow the official
forward pass: GroupNorm (eps 1e-6) + swish, asymmetric zero padding before each stride-2 down-sampling
convolution, nearest up-sampling followed by a 3x3 convolution, cosine (l2-normalised) codebook lookup,
the straight-through estimator, and the ``vq`` / ``commit`` / ``entropy`` losses.

Terms used below:
    codes: integer token ids in ``[0, codebook_size)``, one per latent cell, shape ``[B, h, w]``.
    quant: the (straight-through) codebook vectors, shape ``[B, codebook_embed_dim, h, w]``.
    grid: ``(h, w)`` = image size divided by :attr:`LlamaGenVQModel.downsample_factor`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F
from diffusers.configuration_utils import ConfigMixin, register_to_config
from diffusers.models.modeling_utils import ModelMixin

from arvis.utils.config_check import Bound, CheckedFolderMixin, check_config

__all__ = ["VQ_CONFIG_BOUNDS", "VQ_PRESETS", "LlamaGenVQModel", "VQLosses"]

# Length of the rolling window of recent code ids kept in ``quantize.codebook_used`` (official value).
_USAGE_WINDOW = 65536

VQ_PRESETS: dict[str, dict[str, Any]] = {
    # Official LlamaGen tokenizers (tokenizer/tokenizer_image/vq_model.py: VQ_8 / VQ_16).
    "VQ-8": {"encoder_ch_mult": (1, 2, 2, 4), "decoder_ch_mult": (1, 2, 2, 4)},
    "VQ-16": {"encoder_ch_mult": (1, 1, 2, 2, 4), "decoder_ch_mult": (1, 1, 2, 2, 4)},
}


# What each configuration field may hold (arvis.utils.config_check), checked before anything is
# allocated; generous next to the official VQ-16 (128 base channels, z 256, 16384 codes of width 8).
_CH_MULT = Bound.integers(1, 64, max_items=8, note="one multiplier per resolution level")
VQ_CONFIG_BOUNDS: dict[str, Bound] = {
    "codebook_size": Bound.integer(2, 1 << 20),
    "codebook_embed_dim": Bound.integer(1, 4096),
    "codebook_l2_norm": Bound.boolean(),
    "codebook_show_usage": Bound.boolean(),
    "commit_loss_beta": Bound.number(0.0, 100.0),
    "entropy_loss_ratio": Bound.number(0.0, 100.0),
    "encoder_ch_mult": _CH_MULT,
    "decoder_ch_mult": _CH_MULT,
    "z_channels": Bound.integer(1, 4096),
    "dropout_p": Bound.number(0.0, 1.0, open_high=True),
    "base_channels": Bound.integer(1, 4096),
    "encoder_num_res_blocks": Bound.integer(1, 64),
    "decoder_num_res_blocks": Bound.integer(0, 64),
    "norm_num_groups": Bound.integer(1, 4096),
}


@dataclass(frozen=True)
class VQLosses:
    """Quantiser losses of one forward pass (all scalars).

    Attributes:
        vq_loss: ``mean((quant - sg(z))^2)``, pulls codebook entries towards encoder outputs.
        commit_loss: ``beta * mean((sg(quant) - z)^2)``, keeps the encoder close to its codes.
        entropy_loss: ``entropy_loss_ratio * (per-sample entropy - batch entropy)`` of the soft
            assignment (zero when the ratio is 0).
        codebook_usage: fraction of codebook entries seen in the rolling usage window (training
            mode with ``codebook_show_usage`` only, else 0.0).
    """

    vq_loss: torch.Tensor
    commit_loss: torch.Tensor
    entropy_loss: torch.Tensor
    codebook_usage: float

    @property
    def total(self) -> torch.Tensor:
        """Sum of the three quantiser losses (what the official trainer adds to the reconstruction loss)."""
        return self.vq_loss + self.commit_loss + self.entropy_loss


def _swish(x: torch.Tensor) -> torch.Tensor:
    return x * torch.sigmoid(x)


def _group_norm(channels: int, groups: int) -> nn.GroupNorm:
    return nn.GroupNorm(num_groups=groups, num_channels=channels, eps=1e-6, affine=True)


class _ResBlock(nn.Module):
    """Pre-activation residual block: (GN, swish, conv3x3) x 2, 1x1 shortcut when channels change."""

    def __init__(self, cin: int, cout: int, groups: int, dropout: float) -> None:
        super().__init__()
        self.norm1 = _group_norm(cin, groups)
        self.conv1 = nn.Conv2d(cin, cout, 3, padding=1)
        self.norm2 = _group_norm(cout, groups)
        self.dropout = nn.Dropout(dropout)
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1)
        self.nin_shortcut = nn.Conv2d(cin, cout, 1) if cin != cout else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.conv1(_swish(self.norm1(x)))
        h = self.conv2(self.dropout(_swish(self.norm2(h))))
        skip = x if self.nin_shortcut is None else self.nin_shortcut(x)
        return skip + h


class _SelfAttention(nn.Module):
    """Single-head spatial self-attention with 1x1 q/k/v/out projections and a residual."""

    def __init__(self, channels: int, groups: int) -> None:
        super().__init__()
        self.norm = _group_norm(channels, groups)
        self.q = nn.Conv2d(channels, channels, 1)
        self.k = nn.Conv2d(channels, channels, 1)
        self.v = nn.Conv2d(channels, channels, 1)
        self.proj_out = nn.Conv2d(channels, channels, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, c, hh, ww = x.shape
        y = self.norm(x)
        # [B, C, H, W] -> [B, 1, HW, C]: one head of width C, softmax(q k^T / sqrt(C)) v.
        q, k, v = (proj(y).flatten(2).transpose(1, 2).unsqueeze(1) for proj in (self.q, self.k, self.v))
        out = F.scaled_dot_product_attention(q, k, v)  # [B, 1, HW, C]
        out = out.squeeze(1).transpose(1, 2).reshape(b, c, hh, ww)
        return x + self.proj_out(out)


class _Downsample(nn.Module):
    """Stride-2 3x3 convolution after zero padding one pixel on the right and bottom only."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, 3, stride=2, padding=0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(F.pad(x, (0, 1, 0, 1)))


class _Upsample(nn.Module):
    """Nearest-neighbour 2x up-sampling followed by a 3x3 convolution."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(F.interpolate(x, scale_factor=2.0, mode="nearest"))


class _Level(nn.Module):
    """One resolution level: residual blocks, optional attention after each, optional resampler.

    The attribute names ``res`` / ``attn`` / ``downsample`` / ``upsample`` are part of the checkpoint
    key layout.
    """

    def __init__(
        self, cin: int, cout: int, n_blocks: int, with_attn: bool, groups: int, dropout: float
    ) -> None:
        super().__init__()
        self.res = nn.ModuleList()
        self.attn = nn.ModuleList()
        for i in range(n_blocks):
            self.res.append(_ResBlock(cin if i == 0 else cout, cout, groups, dropout))
            if with_attn:
                self.attn.append(_SelfAttention(cout, groups))

    def blocks(self, h: torch.Tensor) -> torch.Tensor:
        for i, block in enumerate(self.res):
            h = block(h)
            if len(self.attn) > 0:
                h = self.attn[i](h)
        return h


def _mid_blocks(channels: int, groups: int, dropout: float) -> nn.ModuleList:
    return nn.ModuleList(
        [
            _ResBlock(channels, channels, groups, dropout),
            _SelfAttention(channels, groups),
            _ResBlock(channels, channels, groups, dropout),
        ]
    )


class _Encoder(nn.Module):
    def __init__(
        self, ch: int, ch_mult: Sequence[int], num_res_blocks: int, z_channels: int, groups: int, dropout: float
    ) -> None:
        super().__init__()
        self.conv_in = nn.Conv2d(3, ch, 3, padding=1)
        n = len(ch_mult)
        self.conv_blocks = nn.ModuleList()
        cin = ch
        for i, mult in enumerate(ch_mult):
            level = _Level(cin, ch * mult, num_res_blocks, i == n - 1, groups, dropout)
            cin = ch * mult
            if i != n - 1:
                level.downsample = _Downsample(cin)
            self.conv_blocks.append(level)
        self.mid = _mid_blocks(cin, groups, dropout)
        self.norm_out = _group_norm(cin, groups)
        self.conv_out = nn.Conv2d(cin, z_channels, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.conv_in(x)
        for level in self.conv_blocks:
            h = level.blocks(h)
            if hasattr(level, "downsample"):
                h = level.downsample(h)
        for block in self.mid:
            h = block(h)
        return self.conv_out(_swish(self.norm_out(h)))


class _Decoder(nn.Module):
    def __init__(
        self, ch: int, ch_mult: Sequence[int], num_res_blocks: int, z_channels: int, groups: int, dropout: float
    ) -> None:
        super().__init__()
        n = len(ch_mult)
        cin = ch * ch_mult[-1]
        self.conv_in = nn.Conv2d(z_channels, cin, 3, padding=1)
        self.mid = _mid_blocks(cin, groups, dropout)
        # Levels are stored from the lowest resolution up; the official decoder uses one more residual
        # block per level than ``num_res_blocks``.
        self.conv_blocks = nn.ModuleList()
        for i in reversed(range(n)):
            level = _Level(cin, ch * ch_mult[i], num_res_blocks + 1, i == n - 1, groups, dropout)
            cin = ch * ch_mult[i]
            if i != 0:
                level.upsample = _Upsample(cin)
            self.conv_blocks.append(level)
        self.norm_out = _group_norm(cin, groups)
        self.conv_out = nn.Conv2d(cin, 3, 3, padding=1)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        h = self.conv_in(z)
        for block in self.mid:
            h = block(h)
        for level in self.conv_blocks:
            h = level.blocks(h)
            if hasattr(level, "upsample"):
                h = level.upsample(h)
        return self.conv_out(_swish(self.norm_out(h)))


class _Quantizer(nn.Module):
    """Nearest-codebook-entry quantiser (cosine distance when ``l2_norm``) with a usage window buffer."""

    def __init__(
        self,
        n_codes: int,
        dim: int,
        beta: float,
        entropy_ratio: float,
        l2_norm: bool,
        show_usage: bool,
    ) -> None:
        super().__init__()
        self.n_codes = n_codes
        self.dim = dim
        self.beta = beta
        self.entropy_ratio = entropy_ratio
        self.l2_norm = l2_norm
        self.show_usage = show_usage
        self.embedding = nn.Embedding(n_codes, dim)
        self._init_codebook(None)
        if show_usage:
            # Persistent: the official checkpoints carry it, so strict loading needs it.
            self.register_buffer("codebook_used", torch.zeros(_USAGE_WINDOW))

    def _init_codebook(self, generator: torch.Generator | None) -> None:
        with torch.no_grad():
            w = self.embedding.weight
            w.uniform_(-1.0 / self.n_codes, 1.0 / self.n_codes, generator=generator)
            if self.l2_norm:
                w.copy_(F.normalize(w, p=2, dim=-1))

    def codebook(self) -> torch.Tensor:
        """Codebook ``[V, D]`` as used for lookup (l2-normalised rows when ``l2_norm``)."""
        w = self.embedding.weight
        return F.normalize(w, p=2, dim=-1) if self.l2_norm else w

    def forward(self, z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, VQLosses]:
        """Quantise ``z [B, D, h, w]``; returns ``(quant [B, D, h, w], codes [B, h, w], losses)``."""
        b, d, hh, ww = z.shape
        z = z.permute(0, 2, 3, 1)  # [B, h, w, D]
        if self.l2_norm:
            z = F.normalize(z, p=2, dim=-1)
        flat = z.reshape(-1, d)  # [N, D]
        emb = self.codebook()  # [V, D]
        # Squared euclidean distances, expanded as in the official code (|z|^2 + |e|^2 - 2 z.e).
        dist = flat.pow(2).sum(1, keepdim=True) + emb.pow(2).sum(1) - 2.0 * flat @ emb.t()  # [N, V]
        idx = dist.argmin(dim=1)  # [N]
        zq = emb[idx].view_as(z)  # [B, h, w, D]

        usage = 0.0
        if self.show_usage and self.training:
            with torch.no_grad():
                recent = idx[-_USAGE_WINDOW:].to(self.codebook_used.dtype)
                n = recent.numel()
                self.codebook_used.copy_(torch.cat([self.codebook_used[n:], recent]))
                usage = torch.unique(self.codebook_used).numel() / self.n_codes

        vq_loss = torch.mean((zq - z.detach()) ** 2)
        commit_loss = self.beta * torch.mean((zq.detach() - z) ** 2)
        if self.entropy_ratio > 0:
            entropy_loss = self.entropy_ratio * _entropy_loss(-dist)
        else:
            entropy_loss = torch.zeros((), device=z.device, dtype=z.dtype)

        zq = z + (zq - z).detach()  # straight-through estimator
        quant = zq.permute(0, 3, 1, 2).contiguous()
        return quant, idx.view(b, hh, ww), VQLosses(vq_loss, commit_loss, entropy_loss, usage)


def _entropy_loss(affinity: torch.Tensor, temperature: float = 0.01) -> torch.Tensor:
    """Mean per-sample entropy minus entropy of the mean of ``softmax(affinity / T)`` (MaskGIT style)."""
    logits = affinity.reshape(-1, affinity.shape[-1]) / temperature
    probs = F.softmax(logits, dim=-1)
    log_probs = F.log_softmax(logits + 1e-5, dim=-1)
    mean_probs = probs.mean(dim=0)
    batch_entropy = -(mean_probs * torch.log(mean_probs + 1e-5)).sum()
    sample_entropy = -(probs * log_probs).sum(dim=-1).mean()
    return sample_entropy - batch_entropy


class LlamaGenVQModel(CheckedFolderMixin, ModelMixin, ConfigMixin):
    """LlamaGen VQ tokenizer (``VQ-8`` / ``VQ-16``), loadable from official state dicts.

    Images are ``[B, 3, H, W]`` floats in ``[-1, 1]`` with ``H`` and ``W`` divisible by
    :attr:`downsample_factor`; codes are ``[B, H / f, W / f]`` int64 in ``[0, codebook_size)``.

    Example:
        >>> vq = LlamaGenVQModel.from_preset("VQ-16")
        >>> codes = vq.encode(torch.zeros(1, 3, 256, 256))  # [1, 16, 16]
        >>> images = vq.decode_codes(codes)  # [1, 3, 256, 256] in [-1, 1]
    """

    config_bounds = VQ_CONFIG_BOUNDS

    @register_to_config
    def __init__(
        self,
        codebook_size: int = 16384,
        codebook_embed_dim: int = 8,
        codebook_l2_norm: bool = True,
        codebook_show_usage: bool = True,
        commit_loss_beta: float = 0.25,
        entropy_loss_ratio: float = 0.0,
        encoder_ch_mult: Sequence[int] = (1, 1, 2, 2, 4),
        decoder_ch_mult: Sequence[int] = (1, 1, 2, 2, 4),
        z_channels: int = 256,
        dropout_p: float = 0.0,
        base_channels: int = 128,
        encoder_num_res_blocks: int = 2,
        decoder_num_res_blocks: int = 2,
        norm_num_groups: int = 32,
    ) -> None:
        super().__init__()
        check_config(self.config, VQ_CONFIG_BOUNDS, source=type(self).__name__)
        enc_mult, dec_mult = tuple(encoder_ch_mult), tuple(decoder_ch_mult)
        if len(enc_mult) != len(dec_mult):
            raise ValueError(
                f"encoder_ch_mult and decoder_ch_mult must have the same length (same down-sampling), "
                f"got {enc_mult} and {dec_mult}"
            )
        for c in {base_channels * m for m in enc_mult + dec_mult}:
            if c % norm_num_groups:
                raise ValueError(
                    f"norm_num_groups={norm_num_groups} must divide every level width base_channels*mult, "
                    f"but {c} is not divisible"
                )

        self.encoder = _Encoder(base_channels, enc_mult, encoder_num_res_blocks, z_channels, norm_num_groups, dropout_p)
        self.decoder = _Decoder(base_channels, dec_mult, decoder_num_res_blocks, z_channels, norm_num_groups, dropout_p)
        self.quantize = _Quantizer(
            codebook_size, codebook_embed_dim, commit_loss_beta, entropy_loss_ratio, codebook_l2_norm, codebook_show_usage
        )
        self.quant_conv = nn.Conv2d(z_channels, codebook_embed_dim, 1)
        self.post_quant_conv = nn.Conv2d(codebook_embed_dim, z_channels, 1)

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_preset(cls, name: str, **overrides: Any) -> LlamaGenVQModel:
        """Build an official architecture by name (``"VQ-8"`` or ``"VQ-16"``), randomly initialised.

        Args:
            name: a key of :data:`VQ_PRESETS`.
            **overrides: any ``__init__`` argument, e.g. ``codebook_size=1024``.
        """
        if name not in VQ_PRESETS:
            raise ValueError(f"name must be one of {sorted(VQ_PRESETS)}, got {name!r}")
        return cls(**{**VQ_PRESETS[name], **overrides})

    @torch.no_grad()
    def init_weights(self, generator: torch.Generator) -> LlamaGenVQModel:
        """Re-initialise every parameter reproducibly from ``generator`` (PyTorch default schemes).

        Convolutions get ``U(-1/sqrt(fan_in), 1/sqrt(fan_in))`` weights and biases (what
        ``nn.Conv2d.reset_parameters`` draws), GroupNorm gets ones / zeros, the codebook gets the
        official ``U(-1/V, 1/V)`` followed by l2 normalisation. Returns ``self``.
        """
        for module in self.modules():
            if isinstance(module, nn.Conv2d):
                bound = 1.0 / math.sqrt(module.weight[0].numel())
                module.weight.uniform_(-bound, bound, generator=generator)
                if module.bias is not None:
                    module.bias.uniform_(-bound, bound, generator=generator)
            elif isinstance(module, nn.GroupNorm):
                module.weight.fill_(1.0)
                module.bias.zero_()
        self.quantize._init_codebook(generator)
        return self

    # ------------------------------------------------------------------ properties
    @property
    def downsample_factor(self) -> int:
        """Spatial reduction from pixels to codes (8 for VQ-8, 16 for VQ-16)."""
        return 2 ** (len(self.config.encoder_ch_mult) - 1)

    @property
    def codebook_size(self) -> int:
        """Number of codebook entries ``V``."""
        return int(self.config.codebook_size)

    def codebook_embeddings(self) -> torch.Tensor:
        """The codebook ``[V, D]`` as used for lookup (rows l2-normalised when ``codebook_l2_norm``)."""
        return self.quantize.codebook()

    # ------------------------------------------------------------------ validation helpers
    def _check_images(self, images: torch.Tensor) -> None:
        if not isinstance(images, torch.Tensor) or images.dim() != 4 or images.shape[1] != 3:
            shape = tuple(images.shape) if isinstance(images, torch.Tensor) else type(images).__name__
            raise ValueError(f"images must be a float tensor [B, 3, H, W], got shape {shape}")
        f = self.downsample_factor
        h, w = images.shape[-2:]
        if h % f or w % f or h == 0 or w == 0:
            raise ValueError(f"images height and width must be positive multiples of {f}, got {h}x{w}")

    def _codes_to_grid(self, codes: torch.Tensor, grid: tuple[int, int] | None) -> torch.Tensor:
        if not isinstance(codes, torch.Tensor) or codes.dtype.is_floating_point or codes.dtype == torch.bool:
            raise ValueError("codes must be an integer tensor [B, h, w] or [B, h*w]")
        if codes.dim() == 2:
            if grid is None:
                side = math.isqrt(codes.shape[1])
                if side * side != codes.shape[1]:
                    raise ValueError(
                        f"grid must be given for flat codes of non-square length {codes.shape[1]}"
                    )
                grid = (side, side)
            if len(grid) != 2 or grid[0] * grid[1] != codes.shape[1] or min(grid) < 1:
                raise ValueError(f"grid {grid} does not match flat codes of length {codes.shape[1]}")
            codes = codes.reshape(codes.shape[0], grid[0], grid[1])
        elif codes.dim() != 3:
            raise ValueError(f"codes must have shape [B, h, w] or [B, h*w], got {tuple(codes.shape)}")
        if codes.numel() and (int(codes.min()) < 0 or int(codes.max()) >= self.codebook_size):
            raise ValueError(
                f"codes must be in [0, {self.codebook_size}), got range [{int(codes.min())}, {int(codes.max())}]"
            )
        return codes.long()

    # ------------------------------------------------------------------ public API
    def encode_with_quant(self, images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, VQLosses]:
        """Encode and quantise.

        Args:
            images: ``[B, 3, H, W]`` in ``[-1, 1]``.

        Returns:
            ``quant [B, D, h, w]`` (straight-through, differentiable w.r.t. the encoder),
            ``codes [B, h, w]`` int64, and the quantiser :class:`VQLosses`.
        """
        self._check_images(images)
        z = self.quant_conv(self.encoder(images))
        return self.quantize(z)

    def encode(self, images: torch.Tensor) -> torch.Tensor:
        """Images ``[B, 3, H, W]`` in ``[-1, 1]`` -> codes ``[B, H/f, W/f]`` (int64)."""
        return self.encode_with_quant(images)[1]

    def decode(self, quant: torch.Tensor) -> torch.Tensor:
        """Latent vectors ``[B, D, h, w]`` -> images ``[B, 3, h*f, w*f]`` (not clamped)."""
        return self.decoder(self.post_quant_conv(quant))

    def quant_from_codes(self, codes: torch.Tensor, grid: tuple[int, int] | None = None) -> torch.Tensor:
        """Codes ``[B, h, w]`` (or ``[B, h*w]`` with ``grid=(h, w)``) -> codebook vectors ``[B, D, h, w]``."""
        codes = self._codes_to_grid(codes, grid)
        return self.codebook_embeddings()[codes].permute(0, 3, 1, 2).contiguous()

    def decode_codes(self, codes: torch.Tensor, grid: tuple[int, int] | None = None) -> torch.Tensor:
        """Codes ``[B, h, w]`` (or ``[B, h*w]``; ``grid=(h, w)`` needed unless square) -> images.

        Returns:
            ``[B, 3, h*f, w*f]`` clamped to ``[-1, 1]``, in the dtype of the model.
        """
        return self.decode(self.quant_from_codes(codes, grid)).clamp(-1.0, 1.0)

    def forward(self, images: torch.Tensor) -> tuple[torch.Tensor, VQLosses]:
        """Training pass: ``images [B, 3, H, W]`` -> ``(reconstruction [B, 3, H, W] unclamped, losses)``."""
        quant, _, losses = self.encode_with_quant(images)
        return self.decode(quant), losses

