"""VAR's multi-scale residual VQ-VAE, weight-compatible with the official release.

VAR (Tian et al., NeurIPS 2024, https://arxiv.org/abs/2404.02905) tokenises an image into a pyramid
of token maps ``r_1 … r_S`` of sides ``patch_nums = (1, 2, 3, 4, 5, 6, 8, 10, 13, 16)`` (680 tokens at
256 px). All scales share one codebook. Quantisation is *residual*: scale ``s`` quantises the
area-down-sampled residual ``f - f̂`` left by the scales before it, and its codes come back to the
full latent size through bicubic up-sampling followed by a small convolution ``φ_s``
(``quant_resi``: ``φ(h) = (1 - r)·h + r·conv3x3(h)``, ``r = 0.5``). ``f̂`` (``f_hat``) is the running sum
of the up-sampled, φ-filtered code maps; the decoder sees ``f̂`` after all scales. ``φ`` is
*partially shared*: ``share_quant_resi = 4`` convolutions serve the S scales, scale ``s`` using the
one whose tick is nearest to ``s / (S - 1)``.

The encoder/decoder are the taming/LDM convolutional networks of ``models/basic_vae.py`` (ResNet
blocks with GroupNorm + swish, one fused-``qkv`` spatial attention at the lowest resolution and in the
middle, asymmetric zero padding before each stride-2 convolution, nearest up-sampling + conv).

This file is an independent implementation. Parameter and buffer names and shapes equal the official
``VQVAE`` (``models/vqvae.py`` / ``models/quant.py`` / ``models/basic_vae.py`` in FoundationVision/VAR),
so the official ``vae_ch160v4096z32.pth`` loads with ``load_state_dict(strict=True)``; the official
values are the defaults. Two things the official code hard-codes are configuration fields here so that
small tokenizers can be trained on a CPU: the channel multipliers ``ch_mult`` and the GroupNorm group
count ``norm_num_groups``.

Terms:
    scale ``s``: index into ``patch_nums``; its token map is ``pn_s x pn_s``.
    codes: the concatenation of every scale's token ids in scale order, ``[B, L]``, ``L = Σ pn_s²``.
    f_hat: the running reconstruction in latent space, ``[B, Cvae, pn_S, pn_S]``.
    next-scale input: ``f_hat`` area-down-sampled to the next scale's side; VAR's transformer reads it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from diffusers.configuration_utils import ConfigMixin, register_to_config
from diffusers.models.modeling_utils import ModelMixin

from arvis.errors import ConfigError
from arvis.models.llamagen import MAX_GRID

# The convolutional building blocks are the same networks (and parameter names) as LlamaGen's VQ.
from arvis.tokenizers.llamagen_vq import _Downsample, _group_norm, _ResBlock, _swish, _Upsample
from arvis.utils.config_check import Bound, CheckedFolderMixin, check_config

__all__ = ["VAR_VQ_DEFAULTS", "MultiScaleQuantizer", "VARVQLosses", "VARVQModel", "load_var_vq_checkpoint", "scale_bounds"]

# The official tokenizer (vae_ch160v4096z32.pth): models/__init__.py build_vae_var + VQVAE defaults.
VAR_VQ_DEFAULTS: dict[str, Any] = dict(vocab_size=4096, z_channels=32, ch=160, ch_mult=(1, 1, 2, 2, 4),
                                       share_quant_resi=4, v_patch_nums=(1, 2, 3, 4, 5, 6, 8, 10, 13, 16))

# What each configuration field may hold (arvis.utils.config_check), checked before anything is allocated.
# Generous: the official tokenizer has ch 160, 5 levels, 4096 codes of dimension 32, 10 scales up to 16.
VAR_VQ_CONFIG_BOUNDS: dict[str, Bound] = {
    "vocab_size": Bound.integer(2, 1 << 20),
    "z_channels": Bound.integer(1, 4096),
    "ch": Bound.integer(1, 4096),
    "dropout": Bound.number(0.0, 1.0, open_high=True),
    "beta": Bound.number(0.0, 100.0),
    "using_znorm": Bound.boolean(),
    "quant_conv_ks": Bound.integer(1, 31),
    "quant_resi": Bound.number(-10.0, 10.0),
    "share_quant_resi": Bound.integer(0, 64),
    "default_qresi_counts": Bound.integer(0, 64),
    "v_patch_nums": Bound.integers(1, MAX_GRID, max_items=64, note=f"token-map sides, at most {MAX_GRID}"),
    "ch_mult": Bound.integers(1, 64, max_items=16),
    "num_res_blocks": Bound.integer(1, 64),
    "norm_num_groups": Bound.integer(1, 4096),
    "using_sa": Bound.boolean(),
    "using_mid_sa": Bound.boolean(),
}


def scale_bounds(patch_nums: Sequence[int]) -> list[tuple[int, int]]:
    """``[(begin, end)]`` of each scale's tokens in the concatenated sequence."""
    out, cur = [], 0
    for pn in patch_nums:
        out.append((cur, cur + pn * pn))
        cur += pn * pn
    return out


@dataclass(frozen=True)
class VARVQLosses:
    """Quantiser losses of one training pass (scalars), averaged over scales as in the official code.

    Attributes:
        vq_loss: ``mean_s ‖f̂_s − sg(f)‖²``: trains the codebook and the φ convolutions.
        commit_loss: ``beta · mean_s ‖sg(f̂_s) − f‖²``: keeps the encoder close to its codes.
    """

    vq_loss: torch.Tensor
    commit_loss: torch.Tensor

    @property
    def total(self) -> torch.Tensor:
        return self.vq_loss + self.commit_loss


# ----------------------------------------------------------------------------- encoder / decoder
class _FusedSelfAttention(nn.Module):
    """Single-head spatial self-attention with one fused 1x1 ``qkv`` convolution (VAR's ``AttnBlock``)."""

    def __init__(self, channels: int, groups: int) -> None:
        super().__init__()
        self.norm = _group_norm(channels, groups)
        self.qkv = nn.Conv2d(channels, 3 * channels, 1)
        self.proj_out = nn.Conv2d(channels, channels, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, c, h, w = x.shape
        q, k, v = self.qkv(self.norm(x)).reshape(b, 3, c, h * w).transpose(2, 3).unsqueeze(2).unbind(1)
        out = F.scaled_dot_product_attention(q, k, v)  # [B, 1, HW, C]; softmax(q k^T / sqrt(C)) v
        return x + self.proj_out(out.squeeze(1).transpose(1, 2).reshape(b, c, h, w))


class _Level(nn.Module):
    """One resolution level; ``block`` / ``attn`` / ``downsample`` / ``upsample`` are checkpoint names."""

    def __init__(self, cin: int, cout: int, n_blocks: int, with_attn: bool, groups: int, dropout: float) -> None:
        super().__init__()
        self.block = nn.ModuleList(_ResBlock(cin if i == 0 else cout, cout, groups, dropout) for i in range(n_blocks))
        self.attn = nn.ModuleList(_FusedSelfAttention(cout, groups) for _ in range(n_blocks if with_attn else 0))

    def run(self, h: torch.Tensor) -> torch.Tensor:
        for i, block in enumerate(self.block):
            h = block(h)
            if len(self.attn):
                h = self.attn[i](h)
        return h


class _Middle(nn.Module):
    def __init__(self, channels: int, groups: int, dropout: float, attention: bool) -> None:
        super().__init__()
        self.block_1 = _ResBlock(channels, channels, groups, dropout)
        self.attn_1 = _FusedSelfAttention(channels, groups) if attention else nn.Identity()
        self.block_2 = _ResBlock(channels, channels, groups, dropout)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return self.block_2(self.attn_1(self.block_1(h)))


class _Encoder(nn.Module):
    def __init__(self, ch: int, ch_mult: Sequence[int], num_res_blocks: int, z_channels: int, groups: int,
                 dropout: float, using_sa: bool, using_mid_sa: bool) -> None:
        super().__init__()
        n = len(ch_mult)
        self.conv_in = nn.Conv2d(3, ch, 3, padding=1)
        self.down = nn.ModuleList()
        cin = ch
        for i, mult in enumerate(ch_mult):
            level = _Level(cin, ch * mult, num_res_blocks, using_sa and i == n - 1, groups, dropout)
            cin = ch * mult
            if i != n - 1:
                level.downsample = _Downsample(cin)
            self.down.append(level)
        self.mid = _Middle(cin, groups, dropout, using_mid_sa)
        self.norm_out = _group_norm(cin, groups)
        self.conv_out = nn.Conv2d(cin, z_channels, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.conv_in(x)
        for level in self.down:
            h = level.run(h)
            if hasattr(level, "downsample"):
                h = level.downsample(h)
        return self.conv_out(_swish(self.norm_out(self.mid(h))))


class _Decoder(nn.Module):
    def __init__(self, ch: int, ch_mult: Sequence[int], num_res_blocks: int, z_channels: int, groups: int,
                 dropout: float, using_sa: bool, using_mid_sa: bool) -> None:
        super().__init__()
        n = len(ch_mult)
        cin = ch * ch_mult[-1]
        self.conv_in = nn.Conv2d(z_channels, cin, 3, padding=1)
        self.mid = _Middle(cin, groups, dropout, using_mid_sa)
        levels: list[_Level] = []
        for i in reversed(range(n)):  # built from the lowest resolution up, stored highest first (official order)
            level = _Level(cin, ch * ch_mult[i], num_res_blocks + 1, using_sa and i == n - 1, groups, dropout)
            cin = ch * ch_mult[i]
            if i != 0:
                level.upsample = _Upsample(cin)
            levels.insert(0, level)
        self.up = nn.ModuleList(levels)
        self.norm_out = _group_norm(cin, groups)
        self.conv_out = nn.Conv2d(cin, 3, 3, padding=1)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        h = self.mid(self.conv_in(z))
        for level in reversed(self.up):
            h = level.run(h)
            if hasattr(level, "upsample"):
                h = level.upsample(h)
        return self.conv_out(_swish(self.norm_out(h)))


# ----------------------------------------------------------------------------- the quantiser
class _Phi(nn.Conv2d):
    """``φ(h) = (1 − r)·h + r·conv3x3(h)``."""

    def __init__(self, channels: int, ratio: float) -> None:
        super().__init__(channels, channels, 3, padding=1)
        self.ratio = abs(ratio)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return h * (1 - self.ratio) + super().forward(h) * self.ratio


def _phi_ticks(k: int) -> np.ndarray:
    # The official tick positions (quant.py PhiPartiallyShared / PhiNonShared).
    return np.linspace(1 / 3 / k, 1 - 1 / 3 / k, k) if k == 4 else np.linspace(1 / 2 / k, 1 - 1 / 2 / k, k)


class _PhiShared(nn.Module):
    """One φ for every scale (``share_quant_resi = 1``); key ``quant_resi.qresi``."""

    def __init__(self, phi: nn.Module) -> None:
        super().__init__()
        self.qresi = phi

    def at(self, position: float) -> nn.Module:
        return self.qresi


class _PhiPartiallyShared(nn.Module):
    """``K`` φ's for the S scales (``share_quant_resi = K > 1``); keys ``quant_resi.qresi_ls.k``."""

    def __init__(self, phis: list[nn.Module]) -> None:
        super().__init__()
        self.qresi_ls = nn.ModuleList(phis)
        self.ticks = _phi_ticks(len(phis))

    def at(self, position: float) -> nn.Module:
        return self.qresi_ls[int(np.argmin(np.abs(self.ticks - position)))]


class _PhiNonShared(nn.ModuleList):
    """One φ per scale (``share_quant_resi = 0``); keys ``quant_resi.k``."""

    def __init__(self, phis: list[nn.Module]) -> None:
        super().__init__(phis)
        self.ticks = _phi_ticks(len(phis))

    def at(self, position: float) -> nn.Module:
        return self[int(np.argmin(np.abs(self.ticks - position)))]


class MultiScaleQuantizer(nn.Module):
    """VAR's residual multi-scale quantiser (``VectorQuantizer2``): one codebook, φ after up-sampling.

    Args:
        vocab_size: codebook entries ``V``. channels: code dimension ``Cvae``.
        patch_nums: token-map sides, small to large; the last equals the latent side.
        beta: commitment weight. using_znorm: cosine instead of euclidean nearest neighbour.
        quant_resi: φ's ratio ``r`` (``|r| <= 1e-6``: φ is the identity).
        share_quant_resi: 0 (one φ per scale), 1 (one shared φ) or K > 1 (K partially shared φ's).
        default_qresi_counts: with ``share_quant_resi = 0``, the number of φ's (0: one per scale).
    """

    def __init__(self, vocab_size: int, channels: int, patch_nums: Sequence[int], beta: float = 0.25,
                 using_znorm: bool = False, quant_resi: float = 0.5, share_quant_resi: int = 4,
                 default_qresi_counts: int = 0) -> None:
        super().__init__()
        self.vocab_size, self.channels = vocab_size, channels
        self.patch_nums = tuple(int(p) for p in patch_nums)
        self.beta, self.using_znorm = beta, using_znorm

        def phi() -> nn.Module:
            return _Phi(channels, quant_resi) if abs(quant_resi) > 1e-6 else nn.Identity()

        if share_quant_resi == 0:
            self.quant_resi: nn.Module = _PhiNonShared([phi() for _ in range(default_qresi_counts or len(patch_nums))])
        elif share_quant_resi == 1:
            self.quant_resi = _PhiShared(phi())
        else:
            self.quant_resi = _PhiPartiallyShared([phi() for _ in range(share_quant_resi)])
        # Official bookkeeping (per-scale EMA of code hits); carried so state dicts match, updated in training.
        self.register_buffer("ema_vocab_hit_SV", torch.zeros(len(self.patch_nums), vocab_size))
        self.embedding = nn.Embedding(vocab_size, channels)

    @property
    def num_scales(self) -> int:
        return len(self.patch_nums)

    def phi(self, scale: int) -> nn.Module:
        """The φ of ``scale`` (the one whose tick is nearest ``scale / (S - 1)``)."""
        return self.quant_resi.at(scale / (self.num_scales - 1))

    def nearest(self, z: torch.Tensor) -> torch.Tensor:
        """Nearest codebook ids of ``z: [N, C]`` → ``[N]`` (euclidean, or cosine with ``using_znorm``)."""
        w = self.embedding.weight
        if self.using_znorm:
            return (F.normalize(z, dim=-1) @ F.normalize(w, dim=-1).T).argmax(1)
        # |z|² + |e|² − 2 z·e, the expansion the official code uses (ties resolve the same way).
        d = torch.sum(z.square(), 1, keepdim=True) + torch.sum(w.square(), 1)
        return torch.addmm(d, z, w.T, alpha=-2, beta=1).argmin(1)

    def upsampled(self, scale: int, h: torch.Tensor, side: int) -> torch.Tensor:
        """``φ_s(bicubic_up(h))``: scale ``s``'s code map ``[B, C, pn, pn]`` brought to ``side``."""
        if h.shape[-1] != side:
            h = F.interpolate(h, size=(side, side), mode="bicubic")
        return self.phi(scale)(h)

    def code_map(self, ids: torch.Tensor, side: int) -> torch.Tensor:
        """``[B, side²]`` ids → ``[B, C, side, side]`` codebook vectors."""
        return self.embedding(ids).transpose(1, 2).reshape(ids.shape[0], self.channels, side, side)

    def quantize(self, f: torch.Tensor, patch_nums: Sequence[int] | None = None
                 ) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """Residual quantisation of the latent ``f: [B, C, H, W]`` (no gradients).

        Returns:
            ``(ids, f_hats)``: per scale, ids ``[B, pn²]`` and the running ``f_hat`` after that scale.
        """
        patch_nums = tuple(patch_nums or self.patch_nums)
        B, C, H, W = f.shape
        if patch_nums[-1] != H or H != W:
            raise ValueError(f"the latent is {H}x{W}; the last scale must equal its side (patch_nums={patch_nums})")
        rest = f.detach().clone()
        f_hat = torch.zeros_like(rest)
        ids_out, f_hats = [], []
        for s, pn in enumerate(patch_nums):
            z = rest if pn == H else F.interpolate(rest, size=(pn, pn), mode="area")
            ids = self.nearest(z.permute(0, 2, 3, 1).reshape(-1, C)).view(B, pn * pn)
            h = self.upsampled(s, self.code_map(ids, pn), H)
            f_hat = f_hat + h
            rest = rest - h
            ids_out.append(ids)
            f_hats.append(f_hat)
        return ids_out, f_hats

    def forward(self, f: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor], VARVQLosses]:
        """Training pass (the official ``VectorQuantizer2.forward``): straight-through ``f_hat``, ids, losses."""
        f = f.float()
        B, C, H, _ = f.shape
        f_no_grad = f.detach()
        rest = f_no_grad.clone()
        f_hat = torch.zeros_like(rest)
        vq_loss = commit = f.new_zeros(())
        all_ids = []
        for s, pn in enumerate(self.patch_nums):
            z = rest if pn == H else F.interpolate(rest, size=(pn, pn), mode="area")
            with torch.no_grad():
                ids = self.nearest(z.permute(0, 2, 3, 1).reshape(-1, C)).view(B, pn * pn)
            h = self.upsampled(s, self.code_map(ids, pn), H)
            f_hat = f_hat + h
            rest = rest - h.detach()
            if self.training:
                with torch.no_grad():
                    hits = torch.bincount(ids.flatten(), minlength=self.vocab_size).float()
                    self.ema_vocab_hit_SV[s].mul_(0.99).add_(hits, alpha=0.01)
            commit = commit + self.beta * F.mse_loss(f_hat.detach(), f)
            vq_loss = vq_loss + F.mse_loss(f_hat, f_no_grad)
            all_ids.append(ids)
        S = self.num_scales
        f_hat = (f_hat.detach() - f_no_grad) + f  # straight-through to the encoder
        return f_hat, all_ids, VARVQLosses(vq_loss / S, commit / S)

    def fhat_from_ids(self, ids: Sequence[torch.Tensor]) -> torch.Tensor:
        """``f_hat`` after the scales of per-scale ids (each ``[B, pn²]``: every scale, or the first ones — a
        coarser reconstruction) → ``[B, C, H, H]``."""
        if not 1 <= len(ids) <= len(self.patch_nums):
            raise ValueError(f"ids: {len(ids)} scales given, the tokenizer has {len(self.patch_nums)}")
        side = self.patch_nums[-1]
        f_hat = None
        for s, (pn, x) in enumerate(zip(self.patch_nums[: len(ids)], ids, strict=True)):
            h = self.upsampled(s, self.code_map(x, pn), side)
            f_hat = h if f_hat is None else f_hat + h
        return f_hat

    def teacher_inputs(self, ids: Sequence[torch.Tensor]) -> torch.Tensor:
        """The transformer's teacher-forcing inputs (``idxBl_to_var_input``): for scales 1 … S−1, ``f_hat``
        after the scales before it, area-down-sampled to its side; ``[B, L − pn_0², C]`` fp32."""
        side = self.patch_nums[-1]
        B = ids[0].shape[0]
        f_hat = torch.zeros(B, self.channels, side, side, device=ids[0].device)
        out = []
        for s in range(self.num_scales - 1):
            f_hat = f_hat + self.upsampled(s, self.code_map(ids[s], self.patch_nums[s]), side).float()
            nxt = self.patch_nums[s + 1]
            out.append(F.interpolate(f_hat, size=(nxt, nxt), mode="area").flatten(2).transpose(1, 2))
        return torch.cat(out, 1)

    def next_scale_input(self, scale: int, f_hat: torch.Tensor, code_map: torch.Tensor
                         ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Add scale ``scale``'s codes (``[B, C, pn, pn]``) to ``f_hat``; return ``(f_hat, next input)``.

        The next input is ``f_hat`` area-down-sampled to the next scale's side, ``[B, pn_next², C]``
        (``None`` after the last scale). ``f_hat`` is updated out of place.
        """
        side = self.patch_nums[-1]
        f_hat = f_hat + self.upsampled(scale, code_map, side)
        if scale == self.num_scales - 1:
            return f_hat, None
        nxt = self.patch_nums[scale + 1]
        return f_hat, F.interpolate(f_hat, size=(nxt, nxt), mode="area").flatten(2).transpose(1, 2)


# ----------------------------------------------------------------------------- the model
class VARVQModel(CheckedFolderMixin, ModelMixin, ConfigMixin):
    """VAR's multi-scale VQ-VAE (``VQVAE``), loadable from official state dicts.

    Images are ``[B, 3, H, W]`` in ``[-1, 1]``, ``H = W = patch_nums[-1] * downsample_factor``. Codes are
    ``[B, L]`` int64: every scale's ids concatenated in scale order (:func:`scale_bounds`).

    Args (official names, official defaults):
        vocab_size, z_channels (= ``Cvae``, the code dimension), ch (base width), dropout, beta,
        using_znorm, quant_conv_ks, quant_resi, share_quant_resi, default_qresi_counts, v_patch_nums.
        ch_mult, num_res_blocks, norm_num_groups, using_sa, using_mid_sa: fixed in the official code
        (``(1, 1, 2, 2, 4)``, 2, 32, True, True); configurable here for small tokenizers.

    Example:
        >>> vq = VARVQModel()                        # the official architecture (randomly initialised)
        >>> codes = vq.encode(torch.zeros(1, 3, 256, 256))        # [1, 680]
        >>> images = vq.decode_codes(codes)                        # [1, 3, 256, 256]
    """

    config_bounds = VAR_VQ_CONFIG_BOUNDS

    @register_to_config
    def __init__(
        self,
        vocab_size: int = 4096,
        z_channels: int = 32,
        ch: int = 160,
        dropout: float = 0.0,
        beta: float = 0.25,
        using_znorm: bool = False,
        quant_conv_ks: int = 3,
        quant_resi: float = 0.5,
        share_quant_resi: int = 4,
        default_qresi_counts: int = 0,
        v_patch_nums: Sequence[int] = (1, 2, 3, 4, 5, 6, 8, 10, 13, 16),
        ch_mult: Sequence[int] = (1, 1, 2, 2, 4),
        num_res_blocks: int = 2,
        norm_num_groups: int = 32,
        using_sa: bool = True,
        using_mid_sa: bool = True,
    ) -> None:
        super().__init__()
        check_config(self.config, VAR_VQ_CONFIG_BOUNDS, source=type(self).__name__)
        patch_nums = tuple(int(p) for p in v_patch_nums)
        mult = tuple(int(m) for m in ch_mult)
        if quant_conv_ks % 2 == 0:
            raise ValueError(f"quant_conv_ks must be odd (same padding), got {quant_conv_ks}")
        if len(patch_nums) < 2 or any(p < 1 for p in patch_nums) or list(patch_nums) != sorted(set(patch_nums)):
            raise ValueError(f"v_patch_nums must be >= 2 strictly increasing positive sides, got {v_patch_nums}")
        if not mult or any(m < 1 for m in mult):
            raise ValueError(f"ch_mult must be a non-empty sequence of positive ints, got {ch_mult}")
        bad = sorted({ch * m for m in mult if (ch * m) % norm_num_groups})
        if bad:
            raise ValueError(f"norm_num_groups={norm_num_groups} must divide every level width ch*mult; {bad} do not")
        self.encoder = _Encoder(ch, mult, num_res_blocks, z_channels, norm_num_groups, dropout, using_sa, using_mid_sa)
        self.decoder = _Decoder(ch, mult, num_res_blocks, z_channels, norm_num_groups, dropout, using_sa, using_mid_sa)
        self.quantize = MultiScaleQuantizer(vocab_size, z_channels, patch_nums, beta, using_znorm, quant_resi,
                                            share_quant_resi, default_qresi_counts)
        self.quant_conv = nn.Conv2d(z_channels, z_channels, quant_conv_ks, padding=quant_conv_ks // 2)
        self.post_quant_conv = nn.Conv2d(z_channels, z_channels, quant_conv_ks, padding=quant_conv_ks // 2)

    # ------------------------------------------------------------------ properties
    @property
    def patch_nums(self) -> tuple[int, ...]:
        return self.quantize.patch_nums

    @property
    def downsample_factor(self) -> int:
        return 2 ** (len(self.config.ch_mult) - 1)

    @property
    def codebook_size(self) -> int:
        return int(self.config.vocab_size)

    @property
    def num_tokens(self) -> int:
        return sum(p * p for p in self.patch_nums)

    @property
    def image_size(self) -> int:
        return self.patch_nums[-1] * self.downsample_factor

    def codebook_embeddings(self) -> torch.Tensor:
        """The shared codebook ``[V, Cvae]``."""
        return self.quantize.embedding.weight

    @torch.no_grad()
    def init_weights(self, generator: torch.Generator) -> VARVQModel:
        """Reproducible initialisation from ``generator``: convolutions U(±1/√fan_in) (PyTorch's scheme),
        GroupNorm ones/zeros, codebook U(±1/V) (the taming default). Returns ``self``."""
        for module in self.modules():
            if isinstance(module, nn.Conv2d):
                bound = 1.0 / math.sqrt(module.weight[0].numel())
                module.weight.uniform_(-bound, bound, generator=generator)
                if module.bias is not None:
                    module.bias.uniform_(-bound, bound, generator=generator)
            elif isinstance(module, nn.GroupNorm):
                module.weight.fill_(1.0)
                module.bias.zero_()
        V = self.codebook_size
        self.quantize.embedding.weight.uniform_(-1.0 / V, 1.0 / V, generator=generator)
        return self

    # ------------------------------------------------------------------ checks
    def _check_images(self, images: torch.Tensor) -> None:
        if not isinstance(images, torch.Tensor) or images.dim() != 4 or images.shape[1] != 3:
            shape = tuple(images.shape) if isinstance(images, torch.Tensor) else type(images).__name__
            raise ValueError(f"images must be a float tensor [B, 3, H, W], got shape {shape}")
        side = self.image_size
        if tuple(images.shape[-2:]) != (side, side):
            raise ValueError(f"images must be {side}x{side} (last scale {self.patch_nums[-1]} x "
                             f"down-sampling {self.downsample_factor}), got {tuple(images.shape[-2:])}")

    def split_codes(self, codes: torch.Tensor) -> list[torch.Tensor]:
        """``[B, L]`` codes → per-scale ids ``[B, pn²]`` (validated)."""
        if not isinstance(codes, torch.Tensor) or codes.dtype.is_floating_point or codes.dtype == torch.bool:
            raise ValueError("codes must be an integer tensor [B, L]")
        if codes.dim() != 2 or codes.shape[1] != self.num_tokens:
            raise ValueError(f"codes must have shape [B, {self.num_tokens}] (all scales {self.patch_nums} "
                             f"concatenated), got {tuple(codes.shape)}")
        if codes.numel() and (int(codes.min()) < 0 or int(codes.max()) >= self.codebook_size):
            raise ValueError(f"codes must be in [0, {self.codebook_size}), got [{int(codes.min())}, {int(codes.max())}]")
        return [codes[:, b:e].long() for b, e in scale_bounds(self.patch_nums)]

    # ------------------------------------------------------------------ public API
    def latent(self, images: torch.Tensor) -> torch.Tensor:
        """``quant_conv(encoder(images))``: the continuous latent ``f`` ``[B, Cvae, h, w]``."""
        self._check_images(images)
        return self.quant_conv(self.encoder(images))

    def encode_scales(self, images: torch.Tensor) -> list[torch.Tensor]:
        """Images → per-scale ids (``img_to_idxBl``), each ``[B, pn²]`` int64."""
        return self.quantize.quantize(self.latent(images))[0]

    def encode(self, images: torch.Tensor) -> torch.Tensor:
        """Images ``[B, 3, H, W]`` in ``[-1, 1]`` → codes ``[B, L]`` (all scales concatenated)."""
        return torch.cat(self.encode_scales(images), 1)

    def decode(self, f_hat: torch.Tensor) -> torch.Tensor:
        """``f_hat [B, Cvae, h, w]`` → images ``[B, 3, H, W]`` (not clamped)."""
        return self.decoder(self.post_quant_conv(f_hat))

    def fhat_to_img(self, f_hat: torch.Tensor) -> torch.Tensor:
        """``f_hat`` → images clamped to ``[-1, 1]`` (the official ``fhat_to_img``)."""
        return self.decode(f_hat).clamp(-1.0, 1.0)

    def decode_codes(self, codes: torch.Tensor) -> torch.Tensor:
        """Codes ``[B, L]`` → images ``[B, 3, H, W]`` clamped to ``[-1, 1]``."""
        f_hat = self.quantize.fhat_from_ids(self.split_codes(codes))
        return self.fhat_to_img(f_hat.to(self.post_quant_conv.weight.dtype))

    def reconstruct_scales(self, images: torch.Tensor) -> list[torch.Tensor]:
        """Reconstructions after each scale (``img_to_reconstructed_img``), each ``[B, 3, H, W]`` in ``[-1, 1]``."""
        return [self.fhat_to_img(f) for f in self.quantize.quantize(self.latent(images))[1]]

    def forward(self, images: torch.Tensor) -> tuple[torch.Tensor, VARVQLosses, list[torch.Tensor]]:
        """Training pass: ``(reconstruction [B, 3, H, W] unclamped, losses, per-scale ids)``."""
        f_hat, ids, losses = self.quantize(self.latent(images))
        return self.decode(f_hat), losses, ids


def load_var_vq_checkpoint(path: str, **config: Any) -> VARVQModel:
    """Load an official tokenizer file (``vae_ch160v4096z32.pth``: a flat state dict, read with
    ``torch.load(weights_only=True)``; or the same keys in safetensors) into ``VARVQModel(**config)``
    (default: the official architecture).

    As the official ``VQVAE.load_state_dict`` does, a usage buffer (``quantize.ema_vocab_hit_SV``) saved for
    another number of scales is replaced by this model's (it is bookkeeping, not a weight).

    Raises:
        CheckpointError: unreadable/unsafe file, values that are not floating-point tensors, or keys / shapes
            that do not fit the configuration.
        ConfigError: a configuration out of :data:`VAR_VQ_CONFIG_BOUNDS`.
    """
    from arvis.utils.serialization import (
        check_state_dict,
        check_tensor_values,
        extract_state_dict,
        load_state_dict_file,
        to_common_dtype,
    )

    sd, _ = extract_state_dict(load_state_dict_file(path), "auto", source=str(path))
    common = check_tensor_values(sd, str(path))
    try:
        with torch.device("meta"):
            model = VARVQModel(**config)
    except (ValueError, TypeError) as err:
        raise ConfigError(f"{path}: {err}") from None
    hits = "quantize.ema_vocab_hit_SV"
    if hits in sd and tuple(sd[hits].shape) != tuple(model.state_dict()[hits].shape):
        sd = {**sd, hits: torch.zeros(model.state_dict()[hits].shape, dtype=common)}
    check_state_dict(model, sd, source=str(path))
    model.load_state_dict(to_common_dtype(sd, common), strict=True, assign=True)
    return model.eval()
