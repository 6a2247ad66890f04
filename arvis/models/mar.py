"""MAR's transformer (Li et al., "Autoregressive Image Generation without Vector Quantization", NeurIPS 2024,
arXiv:2406.11838), weight-compatible with the official release (LTH14/mar ``models/mar.py``).

MAR generates continuous tokens (KL-16 VAE latents, 16 channels on a 16×16 grid for 256 px). The
transformer turns the tokens known so far into one condition vector ``z`` per position; a small
diffusion head (:class:`~arvis.models.diffusion_head.MARDiffusionHead`) samples each token from
``p(x | z)``. Vocabulary (as in the paper and the official code):

- *buffer*: ``buffer_size`` (64) leading positions that all hold the class embedding (the *null
  class* ``fake_latent`` for the unconditional rows of classifier-free guidance);
- *order*: a random permutation of the ``seq_len`` positions per image; generation unmasks positions in
  that order, ``num_iter`` steps, the number still masked following ``cos(π/2 · (k+1)/num_iter)``;
- *encoder*: ``z_proj`` of the tokens, buffer prepended, learned position embedding, then the blocks on
  the buffer and the *unmasked* positions only (MAE-style dropping);
- *decoder*: ``decoder_embed``, masked positions filled with ``mask_token``, position embedding, blocks,
  and ``diffusion_pos_embed_learned`` added to the token positions → ``z``.

Blocks are timm's ViT ``Block`` (pre-norm, fused ``qkv`` with bias, GELU MLP, LayerNorm eps 1e-6), written
here with the same parameter names so that the official state dict loads with identical keys.

**Causal variant** (``causal=True``): the paper's AR baseline (its Table 1, "AR, causal, raster"), with
the same parameters: no masking, a fixed raster order and causal attention over
``[buffer, token_0, …, token_{L-1}]``; the decoder output at the slot before token ``j`` (the last buffer
slot for ``j = 0``) plus ``diffusion_pos_embed_learned[j]`` is ``z_j``. One token per step, with a
key/value cache (:class:`MARKVCache`) so that a step costs one token's forward. ``mask_token`` is unused
there but kept, so both variants share one checkpoint layout. No official checkpoint of this variant is
released.

What differs from the official module (none of it changes weights or outputs): no diffusion head inside
the transformer (an official checkpoint is split by :func:`load_mar_checkpoint` and joined again by
:func:`export_mar_checkpoint`); no global RNG (orders come from a caller's generator); no training loss
(arvis does not train MAR here).
"""

from __future__ import annotations

import argparse
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from diffusers import ConfigMixin, ModelMixin
from diffusers.configuration_utils import register_to_config
from torch import nn

from arvis.errors import CheckpointError, ConfigError
from arvis.models.diffusion_head import MARDiffusionHead, split_sampling_steps
from arvis.models.protocol import StaticKVCache, TokenLayout
from arvis.utils.config_check import Bound, CheckedFolderMixin, check_config

HEAD_PREFIX = "diffloss."  # where the official MAR keeps its diffusion head's weights


@dataclass(frozen=True)
class MARPreset:
    width: int
    depth: int
    heads: int
    head_width: int  # the head recommended in the README's evaluation commands (diffloss_w)
    head_depth: int  # diffloss_d
    params: int  # official MAR (transformer + DiffLoss), built with LTH14/mar's code on the meta device
    published: str  # the README's figure


MAR_PRESETS: dict[str, MARPreset] = {
    "mar_base": MARPreset(768, 12, 12, 1024, 6, 207_924_768, "208M"),
    "mar_large": MARPreset(1024, 16, 16, 1280, 8, 478_326_304, "479M"),
    "mar_huge": MARPreset(1280, 20, 16, 1536, 12, 942_403_104, "943M"),
}


_RATE = Bound.number(0.0, 1.0)
# Every MARTransformer configuration is checked against these before anything is built or loaded.
MAR_CONFIG_BOUNDS: dict[str, Bound] = {
    "img_size": Bound.integer(1, 1 << 14),
    "vae_stride": Bound.integer(1, 1024),
    "patch_size": Bound.integer(1, 64),
    "encoder_embed_dim": Bound.integer(1, 16384),
    "encoder_depth": Bound.integer(0, 256),
    "encoder_num_heads": Bound.integer(1, 1024),
    "decoder_embed_dim": Bound.integer(1, 16384),
    "decoder_depth": Bound.integer(0, 256),
    "decoder_num_heads": Bound.integer(1, 1024),
    "mlp_ratio": Bound.number(0.0, 64.0, open_low=True),
    "vae_embed_dim": Bound.integer(1, 4096),
    "num_classes": Bound.integer(1, 1_000_000),
    "buffer_size": Bound.integer(1, 4096),
    "attn_dropout": _RATE,
    "proj_dropout": _RATE,
    "label_drop_prob": _RATE,
    "mask_ratio_min": _RATE,
    "causal": Bound.boolean(),
    "class_names": Bound.strings(1_000_000, optional=True),
}


# The official loader's arguments, and the fields of the official pickled training args it reads (the others —
# learning rate, paths… — are not looked at).
MAR_ARGUMENT_BOUNDS: dict[str, Bound] = {
    "num_heads": MAR_CONFIG_BOUNDS["encoder_num_heads"],
    "img_size": MAR_CONFIG_BOUNDS["img_size"],
    "vae_stride": MAR_CONFIG_BOUNDS["vae_stride"],
}
MAR_ARGS_BOUNDS: dict[str, Bound] = {
    **{k: MAR_CONFIG_BOUNDS[k] for k in ("img_size", "vae_stride", "patch_size")},
    "model": Bound.text(64, optional=True),
    "num_sampling_steps": Bound("any"),  # "100" in the official args; read by split_sampling_steps
}


# ----------------------------------------------------------------------------- blocks (timm ViT Block names)
class Attention(nn.Module):
    def __init__(self, dim: int, heads: int, attn_drop: float, proj_drop: float):
        super().__init__()
        if dim % heads:
            raise ValueError(f"width {dim} must be divisible by the head count {heads}")
        self.heads, self.head_dim = heads, dim // heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.attn_drop, self.proj_drop = attn_drop, nn.Dropout(proj_drop)

    def forward(self, x: torch.Tensor, cache: StaticKVCache | None = None, layer: int = 0,
                slots: torch.Tensor | None = None, mask: torch.Tensor | None = None) -> torch.Tensor:
        R, T, C = x.shape
        q, k, v = self.qkv(x).view(R, T, 3, self.heads, self.head_dim).permute(2, 0, 3, 1, 4)
        if cache is not None:
            k, v = cache.write(layer, slots, k, v)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask,
                                             dropout_p=self.attn_drop if self.training else 0.0)
        return self.proj_drop(self.proj(out.transpose(1, 2).reshape(R, T, C)))


class Mlp(nn.Module):
    def __init__(self, dim: int, hidden: int, drop: float):
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)
        self.drop = nn.Dropout(drop)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.drop(self.fc2(self.drop(F.gelu(self.fc1(x)))))


class Block(nn.Module):
    """timm's ViT block: ``x + attn(norm1(x))``, then ``x + mlp(norm2(x))``."""

    def __init__(self, dim: int, heads: int, mlp_ratio: float, attn_drop: float, proj_drop: float):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, eps=1e-6)
        self.attn = Attention(dim, heads, attn_drop, proj_drop)
        self.norm2 = nn.LayerNorm(dim, eps=1e-6)
        self.mlp = Mlp(dim, int(dim * mlp_ratio), proj_drop)

    def forward(self, x: torch.Tensor, cache: StaticKVCache | None = None, layer: int = 0,
                slots: torch.Tensor | None = None, mask: torch.Tensor | None = None) -> torch.Tensor:
        x = x + self.attn(self.norm1(x), cache, layer, slots, mask)
        return x + self.mlp(self.norm2(x))


@dataclass
class MARKVCache:
    """Keys/values of the causal variant: one :class:`StaticKVCache` per stack (encoder, decoder), slots
    ``[0, buffer_size + seq_len)``. Owned by the caller; rolling back is writing again from a slot (a query
    at slot ``p`` attends only slots ``≤ p``, all rewritten in order)."""

    encoder: StaticKVCache
    decoder: StaticKVCache

    @property
    def rows(self) -> int:
        return self.encoder.rows

    def select_rows(self, rows: torch.Tensor) -> None:
        self.encoder.select_rows(rows)
        self.decoder.select_rows(rows)


# ----------------------------------------------------------------------------- the model
class MARTransformer(CheckedFolderMixin, ModelMixin, ConfigMixin):
    """MAR's encoder/decoder transformer (module docstring); ``z`` for the diffusion head.

    Configuration: the official ``MAR`` constructor arguments that shape the weights (``num_classes`` is the
    official ``class_num``), plus ``causal`` (the raster-order AR variant) and ``class_names``. Build a released architecture with
    :meth:`from_preset`; load official ``.pth`` files with :func:`load_mar_checkpoint`.

    Example:
        >>> model = MARTransformer.from_preset("mar_base")
        >>> model.seq_len, model.config.buffer_size
        (256, 64)
    """

    config_name = "config.json"
    config_bounds = MAR_CONFIG_BOUNDS

    @register_to_config
    def __init__(
        self,
        img_size: int = 256,
        vae_stride: int = 16,
        patch_size: int = 1,
        encoder_embed_dim: int = 1024,
        encoder_depth: int = 16,
        encoder_num_heads: int = 16,
        decoder_embed_dim: int = 1024,
        decoder_depth: int = 16,
        decoder_num_heads: int = 16,
        mlp_ratio: float = 4.0,
        vae_embed_dim: int = 16,
        num_classes: int = 1000,
        buffer_size: int = 64,
        attn_dropout: float = 0.1,
        proj_dropout: float = 0.1,
        label_drop_prob: float = 0.1,
        mask_ratio_min: float = 0.7,
        causal: bool = False,
        class_names: list[str] | None = None,
    ):
        super().__init__()
        check_config(self.config, MAR_CONFIG_BOUNDS, source=type(self).__name__)
        for name, value in (("img_size", img_size), ("vae_stride", vae_stride), ("patch_size", patch_size),
                            ("encoder_embed_dim", encoder_embed_dim), ("encoder_num_heads", encoder_num_heads),
                            ("decoder_embed_dim", decoder_embed_dim), ("decoder_num_heads", decoder_num_heads),
                            ("vae_embed_dim", vae_embed_dim), ("num_classes", num_classes), ("buffer_size", buffer_size)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
        for name, value in (("encoder_depth", encoder_depth), ("decoder_depth", decoder_depth)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"{name} must be an integer >= 0, got {value!r}")
        if img_size % (vae_stride * patch_size):
            raise ValueError(f"img_size {img_size} must be a multiple of vae_stride·patch_size = {vae_stride * patch_size}")
        if class_names is not None and len(class_names) != num_classes:
            raise ValueError(f"class_names has {len(class_names)} names for num_classes={num_classes}")
        self.seq_h = self.seq_w = img_size // vae_stride // patch_size
        self.seq_len = self.seq_h * self.seq_w
        self.token_embed_dim = vae_embed_dim * patch_size ** 2
        self.buffer_size = buffer_size
        E, D, P = encoder_embed_dim, decoder_embed_dim, self.seq_len + buffer_size

        self.class_emb = nn.Embedding(num_classes, E)
        self.fake_latent = nn.Parameter(torch.zeros(1, E))  # the null class (CFG's unconditional rows)
        self.z_proj = nn.Linear(self.token_embed_dim, E)
        self.z_proj_ln = nn.LayerNorm(E, eps=1e-6)
        self.encoder_pos_embed_learned = nn.Parameter(torch.zeros(1, P, E))
        self.encoder_blocks = nn.ModuleList(Block(E, encoder_num_heads, mlp_ratio, attn_dropout, proj_dropout)
                                            for _ in range(encoder_depth))
        self.encoder_norm = nn.LayerNorm(E, eps=1e-6)
        self.decoder_embed = nn.Linear(E, D)
        self.mask_token = nn.Parameter(torch.zeros(1, 1, D))
        self.decoder_pos_embed_learned = nn.Parameter(torch.zeros(1, P, D))
        self.decoder_blocks = nn.ModuleList(Block(D, decoder_num_heads, mlp_ratio, attn_dropout, proj_dropout)
                                            for _ in range(decoder_depth))
        self.decoder_norm = nn.LayerNorm(D, eps=1e-6)
        self.diffusion_pos_embed_learned = nn.Parameter(torch.zeros(1, self.seq_len, D))

    # ------------------------------------------------------------------ construction helpers
    @classmethod
    def from_preset(cls, name: str, **overrides: Any) -> MARTransformer:
        """A released architecture (``mar_base``, ``mar_large``, ``mar_huge``); overrides go to the config."""
        if name not in MAR_PRESETS:
            raise ValueError(f"unknown MAR preset {name!r}; known presets: {', '.join(MAR_PRESETS)}")
        p = MAR_PRESETS[name]
        return cls(**{**dict(encoder_embed_dim=p.width, encoder_depth=p.depth, encoder_num_heads=p.heads,
                             decoder_embed_dim=p.width, decoder_depth=p.depth, decoder_num_heads=p.heads),
                      **overrides})

    def default_head(self, **overrides: Any) -> MARDiffusionHead:
        """A diffusion head sized for this transformer (the preset's README head when the width is a preset's)."""
        preset = next((p for p in MAR_PRESETS.values() if p.width == self.config.encoder_embed_dim
                       and p.depth == self.config.encoder_depth), None)
        kwargs = dict(token_dim=self.token_embed_dim, cond_dim=self.config.decoder_embed_dim,
                      width=preset.head_width if preset else 1024, depth=preset.head_depth if preset else 3)
        return MARDiffusionHead(**{**kwargs, **overrides})

    @torch.no_grad()
    def init_weights(self, generator: torch.Generator | None = None) -> None:
        """The official initialisation (normal σ=0.02 for embeddings, Xavier-uniform linears, unit LayerNorms),
        drawn from ``generator``."""
        for p in (self.class_emb.weight, self.fake_latent, self.mask_token, self.encoder_pos_embed_learned,
                  self.decoder_pos_embed_learned, self.diffusion_pos_embed_learned):
            p.normal_(0.0, 0.02, generator=generator)
        for m in self.modules():
            if isinstance(m, nn.Linear):
                bound = math.sqrt(6 / (m.in_features + m.out_features))
                m.weight.uniform_(-bound, bound, generator=generator)
                if m.bias is not None:
                    m.bias.zero_()
            elif isinstance(m, nn.LayerNorm) and m.weight is not None:
                m.weight.fill_(1.0)
                m.bias.zero_()

    # ------------------------------------------------------------------ shapes
    @property
    def layout(self) -> TokenLayout:
        """The token grid (``seq_h × seq_w``), for the CLI and records; ``vocab_size`` is the token's channel
        count (continuous tokens have no vocabulary), the condition length is the buffer."""
        return TokenLayout(grid=(self.seq_h, self.seq_w), vocab_size=self.token_embed_dim,
                           condition_length=self.buffer_size)

    @property
    def num_classes(self) -> int:
        return self.config.num_classes

    @property
    def is_class_conditional(self) -> bool:
        return True

    @property
    def is_causal(self) -> bool:
        return bool(self.config.causal)

    def patchify(self, latents: torch.Tensor) -> torch.Tensor:
        """VAE latents ``[B, C, H, W]`` → tokens ``[B, L, C·p²]`` (raster order)."""
        B, C, H, W = latents.shape
        p = self.config.patch_size
        x = latents.reshape(B, C, H // p, p, W // p, p)
        return torch.einsum("nchpwq->nhwcpq", x).reshape(B, (H // p) * (W // p), C * p * p)

    def unpatchify(self, tokens: torch.Tensor) -> torch.Tensor:
        """Tokens ``[B, L, C·p²]`` → VAE latents ``[B, C, H, W]``."""
        B, p, c = tokens.shape[0], self.config.patch_size, self.config.vae_embed_dim
        x = tokens.reshape(B, self.seq_h, self.seq_w, c, p, p)
        return torch.einsum("nhwcpq->nchpwq", x).reshape(B, c, self.seq_h * p, self.seq_w * p)

    def class_embedding(self, labels: torch.Tensor | None, rows: int | None = None) -> torch.Tensor:
        """``[R, E]``: the class embeddings of ``labels`` (``[R]`` ids), or the null class for ``rows`` rows."""
        if labels is None:
            if rows is None:
                raise ValueError("class_embedding: give labels or a row count")
            return self.fake_latent.expand(rows, -1)
        return self.class_emb(labels)

    def sample_orders(self, batch: int, generator: torch.Generator | Sequence[torch.Generator] | None = None,
                      device: torch.device | str | None = None) -> torch.Tensor:
        """``[B, L]`` random generation orders (one permutation per image; from its generator when one per image)."""
        device = device or self.mask_token.device
        if generator is None or isinstance(generator, torch.Generator):
            keys = torch.rand(batch, self.seq_len, generator=generator,
                              device=generator.device if generator is not None else "cpu")
        else:
            keys = torch.stack([torch.rand(self.seq_len, generator=g, device=g.device).cpu() for g in generator])
        return keys.argsort(dim=-1).to(device)

    # ------------------------------------------------------------------ masked MAR
    def forward_encoder(self, tokens: torch.Tensor, mask: torch.Tensor, class_embedding: torch.Tensor,
                        num_masked: int | None = None) -> torch.Tensor:
        """The MAE encoder over the buffer and the unmasked positions.

        Args:
            tokens: ``[R, L, D]`` tokens (values at masked positions are ignored).
            mask: ``[R, L]`` bool, true where masked (still to generate); every row masks the same count.
            class_embedding: ``[R, E]`` (class or null).
            num_masked: that count, when the caller knows it (saves a host sync).

        Returns:
            ``[R, buffer + L − num_masked, E]`` encoder features (buffer first, then kept positions in order).
        """
        R = tokens.shape[0]
        x = self.z_proj(tokens.to(self.z_proj.weight.dtype))
        buffer = class_embedding.to(x.dtype)[:, None, :].expand(R, self.buffer_size, -1)
        x = torch.cat([buffer, x], dim=1) + self.encoder_pos_embed_learned
        x = self.z_proj_ln(x)
        keep = self._kept_positions(mask, num_masked)
        x = x.gather(1, keep[..., None].expand(-1, -1, x.shape[-1]))
        for block in self.encoder_blocks:
            x = block(x)
        return self.encoder_norm(x)

    def _kept_positions(self, mask: torch.Tensor, num_masked: int | None) -> torch.Tensor:
        """``[R, buffer + L − n]`` indices (into buffer + tokens) of the positions the encoder sees, ascending."""
        if num_masked is None:
            num_masked = int(mask[0].sum())
        full = torch.cat([torch.zeros_like(mask[:, :1]).expand(-1, self.buffer_size), mask.bool()], dim=1)
        order = torch.argsort(full.to(torch.int8), dim=1, stable=True)
        return order[:, : full.shape[1] - num_masked]

    def forward_decoder(self, x: torch.Tensor, mask: torch.Tensor, num_masked: int | None = None) -> torch.Tensor:
        """The MAE decoder: encoder features back in place, ``mask_token`` elsewhere → ``z [R, L, D]``."""
        x = self.decoder_embed(x)
        R, P = x.shape[0], self.buffer_size + self.seq_len
        keep = self._kept_positions(mask, num_masked)
        full = self.mask_token.to(x.dtype).expand(R, P, -1).clone()
        full.scatter_(1, keep[..., None].expand(-1, -1, x.shape[-1]), x)
        h = full + self.decoder_pos_embed_learned
        for block in self.decoder_blocks:
            h = block(h)
        h = self.decoder_norm(h)
        return h[:, self.buffer_size:] + self.diffusion_pos_embed_learned

    def forward(self, tokens: torch.Tensor, mask: torch.Tensor | None, class_embedding: torch.Tensor,
                num_masked: int | None = None) -> torch.Tensor:
        """``z [R, L, D]`` for every position: masked MAR given ``mask``; the causal variant ignores ``mask``
        and runs teacher-forced (``z_j`` sees the buffer and tokens ``< j``)."""
        if self.is_causal:
            return self.forward_causal_full(tokens, class_embedding)
        if mask is None:
            raise ValueError("mask: required by masked MAR (true where a token is still to generate)")
        return self.forward_decoder(self.forward_encoder(tokens, mask, class_embedding, num_masked), mask, num_masked)

    # ------------------------------------------------------------------ causal raster variant
    def allocate_cache(self, rows: int, dtype: torch.dtype | None = None,
                       device: torch.device | str | None = None) -> MARKVCache:
        """A key/value cache for ``rows`` rows over every slot (buffer + tokens)."""
        if not self.is_causal:
            raise ValueError("allocate_cache: only the causal variant (causal=True) decodes with a KV cache")
        w = self.mask_token
        dtype, device = dtype or w.dtype, device or w.device
        slots = self.buffer_size + self.seq_len
        c = self.config

        def stack(depth: int, width: int, heads: int) -> StaticKVCache:
            return StaticKVCache(depth, rows, heads, slots, width // heads, dtype, device)

        return MARKVCache(stack(c.encoder_depth, c.encoder_embed_dim, c.encoder_num_heads),
                          stack(c.decoder_depth, c.decoder_embed_dim, c.decoder_num_heads))

    def _causal_run(self, x: torch.Tensor, slots: torch.Tensor, cache: MARKVCache | None) -> torch.Tensor:
        """Embedded inputs ``[R, T, E]`` at ``slots [R, T]`` through both stacks → decoder features ``[R, T, D]``."""
        width = self.buffer_size + self.seq_len if cache is not None else x.shape[1]
        mask = torch.arange(width, device=x.device)[None, None, :] <= slots[:, :, None]  # [R, T, S] causal
        mask = mask[:, None]
        x = self.z_proj_ln(x + _gather_rows(self.encoder_pos_embed_learned[0], slots))
        for i, block in enumerate(self.encoder_blocks):
            x = block(x, cache.encoder if cache is not None else None, i, slots, mask)
        x = self.decoder_embed(self.encoder_norm(x)) + _gather_rows(self.decoder_pos_embed_learned[0], slots)
        for i, block in enumerate(self.decoder_blocks):
            x = block(x, cache.decoder if cache is not None else None, i, slots, mask)
        return self.decoder_norm(x)

    def _causal_inputs(self, tokens: torch.Tensor | None, class_embedding: torch.Tensor | None) -> torch.Tensor:
        parts = []
        if class_embedding is not None:
            parts.append(class_embedding[:, None, :].expand(-1, self.buffer_size, -1).to(self.z_proj.weight.dtype))
        if tokens is not None:
            parts.append(self.z_proj(tokens.to(self.z_proj.weight.dtype)))
        return torch.cat(parts, dim=1)

    def forward_causal_full(self, tokens: torch.Tensor, class_embedding: torch.Tensor) -> torch.Tensor:
        """Teacher-forced causal pass without a cache: ``z [R, L, D]`` (``z_j`` from tokens ``< j``)."""
        R, L = tokens.shape[0], self.seq_len
        x = self._causal_inputs(tokens[:, : L - 1], class_embedding)
        slots = torch.arange(self.buffer_size + L - 1, device=x.device).expand(R, -1)
        h = self._causal_run(x, slots, None)
        return h[:, self.buffer_size - 1:] + self.diffusion_pos_embed_learned

    def prefill(self, class_embedding: torch.Tensor, cache: MARKVCache) -> torch.Tensor:
        """Write the buffer (``[R, E]`` class or null embeddings) into ``cache``; return ``z_0 [R, D]``."""
        R = class_embedding.shape[0]
        x = self._causal_inputs(None, class_embedding)
        slots = torch.arange(self.buffer_size, device=x.device).expand(R, -1)
        h = self._causal_run(x, slots, cache)
        return h[:, -1] + self.diffusion_pos_embed_learned[0, 0]

    def forward_tokens(self, tokens: torch.Tensor, start: torch.Tensor | int, cache: MARKVCache) -> torch.Tensor:
        """Input tokens of sequence indices ``start … start+T−1`` (``start``: int, or ``[R]`` per row) and
        return ``z`` of indices ``start+1 … start+T`` (``[R, T, D]``; an index ``≥ seq_len`` gets the last
        position's embedding, a value nobody samples from).

        Writes their keys/values at slots ``buffer + index``; slots after them keep stale values that are
        never attended (rolling back a row = calling this again from its accepted length). Indices past the
        last token (a speculative window running over the end) are written at the last slot: only inputs at
        index ``≥ seq_len − 1`` attend it, and their outputs are ``z`` of positions past the end.
        """
        R, T = tokens.shape[:2]
        start_t = torch.as_tensor(start, device=tokens.device).reshape(-1, 1).expand(R, 1)
        index = (start_t + torch.arange(T, device=tokens.device)[None]).clamp_max(self.seq_len - 1)  # [R, T]
        h = self._causal_run(self._causal_inputs(tokens, None), index + self.buffer_size, cache)
        nxt = (index + 1).clamp_max(self.seq_len - 1)
        return h + _gather_rows(self.diffusion_pos_embed_learned[0], nxt)


def _gather_rows(table: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """``table [P, C]`` at ``index [R, T]`` → ``[R, T, C]``."""
    return table[index]


@dataclass(frozen=True)
class MARModel:
    """One continuous-token model: a MAR transformer (``z`` per position) and the diffusion head that samples a
    token from each ``z``. The target of a decode, or the ``draft_model`` a pipeline supplies to speculative
    methods."""

    transformer: MARTransformer
    head: MARDiffusionHead

    @property
    def is_causal(self) -> bool:
        return self.transformer.is_causal

    @property
    def sampling_steps(self) -> int:
        """The head's denoising steps ``S`` (one head call each per token)."""
        return self.head.num_sampling_steps()

    def check(self, head_name: str = "head") -> MARModel:
        """``self``; ``TypeError`` / ``ValueError`` unless the head samples this transformer's tokens from its ``z``."""
        if not isinstance(self.transformer, MARTransformer):
            raise TypeError(f"transformer: expected a MARTransformer, got {type(self.transformer).__name__}")
        if not isinstance(self.head, MARDiffusionHead):
            raise TypeError(f"{head_name}: expected a MARDiffusionHead, got {type(self.head).__name__}")
        t, c = self.transformer, self.head.config
        if c.token_dim != t.token_embed_dim or c.cond_dim != t.config.decoder_embed_dim:
            raise ValueError(f"{head_name}: it samples {c.token_dim}-channel tokens from {c.cond_dim}-channel z; the "
                             f"transformer gives {t.config.decoder_embed_dim}-channel z for {t.token_embed_dim}-channel "
                             f"tokens")
        return self

    def check_draft(self, draft: MARModel) -> None:
        """``ValueError`` unless ``draft`` proposes tokens this model can verify: the same grid and token channels,
        and heads with the same steps (aligned trajectories)."""
        if (draft.transformer.seq_len, draft.transformer.token_embed_dim) != (self.transformer.seq_len,
                                                                                self.transformer.token_embed_dim):
            raise ValueError("draft_transformer: its grid or token channels differ from the transformer's")
        if draft.sampling_steps != self.sampling_steps:
            raise ValueError(f"draft_head: {draft.sampling_steps} sampling steps, the target head "
                             f"{self.sampling_steps}; trajectories must have the same length")


# ----------------------------------------------------------------------------- official checkpoints
# The official MAR constructor arguments that arvis records in an exported checkpoint's args (main_mar.py names).
def _preset_of(config: Mapping[str, Any]) -> str | None:
    return next((n for n, p in MAR_PRESETS.items()
                 if (p.width, p.depth, p.heads) == (config["encoder_embed_dim"], config["encoder_depth"],
                                                    config["encoder_num_heads"])
                 and (p.width, p.depth, p.heads) == (config["decoder_embed_dim"], config["decoder_depth"],
                                                     config["decoder_num_heads"])), None)


def split_official_state_dict(state_dict: Mapping[str, torch.Tensor]
                              ) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """An official MAR state dict → ``(transformer weights, head weights)`` (``diffloss.`` prefix removed)."""
    head = {k[len(HEAD_PREFIX):]: v for k, v in state_dict.items() if k.startswith(HEAD_PREFIX)}
    body = {k: v for k, v in state_dict.items() if not k.startswith(HEAD_PREFIX)}
    return body, head


def official_state_dict(transformer: MARTransformer, head: MARDiffusionHead) -> dict[str, torch.Tensor]:
    """Transformer and head weights under exactly the official MAR keys."""
    sd = {k: v.detach().clone() for k, v in transformer.state_dict().items()}
    sd.update({HEAD_PREFIX + k: v.detach().clone() for k, v in head.state_dict().items()})
    return sd


def _count(sd: Mapping[str, torch.Tensor], prefix: str) -> int:
    return len({k[len(prefix):].split(".")[0] for k in sd if k.startswith(prefix)})


def infer_mar_config(state_dict: Mapping[str, torch.Tensor], args: Any = None, num_heads: int | None = None,
                     img_size: int | None = None, vae_stride: int | None = None, source: str = "checkpoint"
                     ) -> tuple[dict[str, Any], dict[str, Any]]:
    """The :class:`MARTransformer` and :class:`MARDiffusionHead` configurations of an official state dict.

    Widths, depths, classes, buffer size and token channels come from shapes; the head counts from the
    pickled training args (``args.model`` names the preset), else ``num_heads``, else the preset with
    these widths/depths; the grid from ``img_size`` / ``vae_stride`` (args or arguments; default 256 / 16,
    checked against the position table); the head's sampling steps from ``args.num_sampling_steps``
    (default 100).

    Raises:
        CheckpointError: not an official MAR state dict.
        ConfigError: the args contradict the shapes, or a value is out of range.
    """
    from arvis.models.checkpoint import _args_dict

    sd = state_dict
    for key in ("class_emb.weight", "z_proj.weight", "encoder_pos_embed_learned", "diffusion_pos_embed_learned",
                "decoder_embed.weight", HEAD_PREFIX + "net.input_proj.weight", HEAD_PREFIX + "net.cond_embed.weight"):
        if key not in sd or not isinstance(sd[key], torch.Tensor):
            raise CheckpointError(f"{source}: not an official MAR state dict: no {key!r}")
    a = _args_dict(args, source)
    saved = a.get("arvis_config")
    if saved is not None and not isinstance(saved, Mapping):
        raise ConfigError(f"{source}: args.arvis_config must be an object (the configuration), got "
                          f"{type(saved).__name__}")
    arguments = {k: v for k, v in (("num_heads", num_heads), ("img_size", img_size), ("vae_stride", vae_stride))
                 if v is not None}
    check_config(arguments, MAR_ARGUMENT_BOUNDS, source=f"{source} (arguments)")
    a = check_config(a, MAR_ARGS_BOUNDS, source=f"{source} (training args)", prefix="args.", allow_unknown=True)
    E = int(sd["class_emb.weight"].shape[1])
    D = int(sd["decoder_embed.weight"].shape[0])
    enc_depth, dec_depth = _count(sd, "encoder_blocks."), _count(sd, "decoder_blocks.")
    seq_len = int(sd["diffusion_pos_embed_learned"].shape[1])
    buffer = int(sd["encoder_pos_embed_learned"].shape[1]) - seq_len
    token_dim = int(sd["z_proj.weight"].shape[1])
    if saved is not None:
        config = check_config(saved, MAR_CONFIG_BOUNDS, source=f"{source} (args.arvis_config)")
        recorded = {"num_heads": (config.get("encoder_num_heads"), config.get("decoder_num_heads")),
                    "img_size": (config.get("img_size"),), "vae_stride": (config.get("vae_stride"),)}
        for name, value in arguments.items():
            if any(v != value for v in recorded[name]):
                raise ConfigError(f"{source}: {name} = {value}, but the file records "
                                  f"{'/'.join(str(v) for v in recorded[name])} (args.arvis_config); leave it out")
    else:
        preset = a.get("model")
        if preset is not None and preset not in MAR_PRESETS:
            raise ConfigError(f"{source}: args.model = {preset!r} is not an official MAR model "
                              f"({', '.join(MAR_PRESETS)})")
        if preset is None:
            preset = next((n for n, p in MAR_PRESETS.items()
                           if (p.width, p.depth) == (E, enc_depth) and (p.width, p.depth) == (D, dec_depth)), None)
        if num_heads is not None:
            enc_heads = dec_heads = int(num_heads)
        elif preset is not None:
            p = MAR_PRESETS[preset]
            if (p.width, p.depth) != (E, enc_depth) or (p.width, p.depth) != (D, dec_depth):
                raise ConfigError(f"{source}: args.model = {preset} has {p.depth} blocks of width {p.width}; the "
                                  f"weights have {enc_depth}/{dec_depth} blocks of width {E}/{D}")
            enc_heads = dec_heads = p.heads
        else:
            raise ConfigError(f"{source}: cannot infer the head count of a width-{E}, depth-{enc_depth} MAR (no "
                              f"official preset has this shape and the args do not name one); pass num_heads=…")
        size = img_size or a.get("img_size", 256)
        stride = vae_stride or a.get("vae_stride", 16)
        patch = a.get("patch_size", 1)
        if token_dim % (patch * patch):
            raise ConfigError(f"{source}: z_proj reads {token_dim} channels, not a multiple of patch_size² = {patch ** 2}")
        hidden = int(sd["encoder_blocks.0.mlp.fc1.weight"].shape[0]) if enc_depth else 4 * E
        config = dict(img_size=size, vae_stride=stride, patch_size=patch, encoder_embed_dim=E, encoder_depth=enc_depth,
                      encoder_num_heads=enc_heads, decoder_embed_dim=D, decoder_depth=dec_depth,
                      decoder_num_heads=dec_heads, mlp_ratio=hidden / E, vae_embed_dim=token_dim // (patch * patch),
                      num_classes=int(sd["class_emb.weight"].shape[0]), buffer_size=buffer)
    grid = config["img_size"] // config["vae_stride"] // config["patch_size"]
    if grid * grid != seq_len:
        raise ConfigError(f"{source}: img_size {config['img_size']} / vae_stride {config['vae_stride']} gives "
                          f"{grid * grid} tokens; the weights have {seq_len} positions; pass img_size=… / vae_stride=…")
    if config.get("buffer_size") != buffer:
        raise ConfigError(f"{source}: buffer_size {config.get('buffer_size')} does not match the weights' {buffer}")
    head_sd = {k[len(HEAD_PREFIX):]: v for k, v in sd.items() if k.startswith(HEAD_PREFIX)}
    try:
        steps = split_sampling_steps(a.get("num_sampling_steps", "100"))
    except ValueError as err:
        raise ConfigError(f"{source}: args.{err}") from None
    head_config = dict(token_dim=int(head_sd["net.input_proj.weight"].shape[1]),
                       cond_dim=int(head_sd["net.cond_embed.weight"].shape[1]),
                       width=int(head_sd["net.input_proj.weight"].shape[0]),
                       depth=_count(head_sd, "net.res_blocks."), sampling_steps=steps)
    return config, head_config


def load_mar_state_dict(state_dict: Mapping[str, torch.Tensor], args: Any = None, *, num_heads: int | None = None,
                        img_size: int | None = None, vae_stride: int | None = None, causal: bool = False,
                        source: str = "state dict") -> tuple[MARTransformer, MARDiffusionHead]:
    """``(transformer, head)`` holding an official MAR state dict (keys and shapes checked strictly)."""
    from arvis.utils.serialization import check_state_dict, check_tensor_values, to_common_dtype

    common = check_tensor_values(dict(state_dict), source)
    config, head_config = infer_mar_config(state_dict, args, num_heads, img_size, vae_stride, source)
    config["causal"] = bool(causal or config.get("causal", False))
    body, head_sd = split_official_state_dict(state_dict)
    try:
        with torch.device("meta"):
            transformer = MARTransformer(**config)
            head = MARDiffusionHead(**head_config)
    except (TypeError, ValueError) as err:
        raise ConfigError(f"{source}: {err}") from None
    check_state_dict(transformer, body, source=source)
    check_state_dict(head, head_sd, source=f"{source} ({HEAD_PREFIX}*)")
    transformer.load_state_dict(to_common_dtype(body, common), strict=True, assign=True)
    head.load_state_dict(to_common_dtype(head_sd, common), strict=True, assign=True)
    return transformer.eval(), head.eval()


def load_mar_checkpoint(path: str | os.PathLike, key: str = "auto", *, num_heads: int | None = None,
                        img_size: int | None = None, vae_stride: int | None = None, causal: bool = False,
                        dtype: torch.dtype | None = None) -> tuple[MARTransformer, MARDiffusionHead]:
    """Load an official MAR checkpoint (``checkpoint-last.pth``) as ``(transformer, head)``.

    The file is a ``torch.save`` pickle ``{"model": …, "model_ema": …, "args": Namespace, …}`` read with
    ``torch.load(weights_only=True)`` (allowlist: ``argparse.Namespace``); ``key="auto"`` takes the EMA
    weights (what the official demo and evaluation sample with), else ``model``; safetensors files hold
    the flat state dict.

    Raises:
        CheckpointError: unreadable or unsafe file, another model's weights, missing / unexpected keys.
        ConfigError: args that contradict the weights.
    """
    from arvis.utils.serialization import extract_state_dict, load_state_dict_file

    source = str(path)
    obj = load_state_dict_file(path)
    if key in ("auto", "model_ema") and isinstance(obj, Mapping) and isinstance(obj.get("model_ema"), Mapping):
        sd, args = dict(obj["model_ema"]), obj.get("args")
    elif key == "model_ema":
        raise CheckpointError(f"{source}: no 'model_ema' entry")
    else:
        sd, args = extract_state_dict(obj, key, source=source)
    transformer, head = load_mar_state_dict(sd, args, num_heads=num_heads, img_size=img_size, vae_stride=vae_stride,
                                            causal=causal, source=source)
    if dtype is not None:
        transformer.to(dtype)
        head.to(dtype)
    return transformer, head


def export_mar_checkpoint(transformer: MARTransformer, head: MARDiffusionHead, path: str | os.PathLike) -> None:
    """Write ``transformer`` + ``head`` in the official layout: ``{"model": sd, "model_ema": sd, "epoch": 0,
    "args": Namespace(model, img_size, vae_stride, patch_size, vae_embed_dim, buffer_size, diffloss_d,
    diffloss_w, num_sampling_steps, class_num, arvis_config)}`` (``.pth``), or the flat state dict
    (``.safetensors``). Keys are exactly the official ones."""
    from arvis.utils.serialization import save_pickle_checkpoint, save_safetensors

    path = Path(path)
    sd = official_state_dict(transformer, head)
    if path.suffix == ".safetensors":
        save_safetensors(sd, path)
        return
    if path.suffix not in (".pth", ".pt"):
        raise ValueError(f"path must end in .pth, .pt or .safetensors, got {path.name!r}")
    c, h = transformer.config, head.config
    config = {k: v for k, v in c.items() if not k.startswith("_")}
    args = argparse.Namespace(model=_preset_of(c), img_size=c.img_size, vae_stride=c.vae_stride,
                              patch_size=c.patch_size, vae_embed_dim=c.vae_embed_dim, buffer_size=c.buffer_size,
                              diffloss_d=h.depth, diffloss_w=h.width, num_sampling_steps=str(h.sampling_steps),
                              class_num=c.num_classes, arvis_config=config)
    save_pickle_checkpoint({"model": sd, "model_ema": {k: v.clone() for k, v in sd.items()}, "epoch": 0,
                            "args": args}, path)


__all__ = ["MARTransformer", "MARKVCache", "MARModel", "MAR_PRESETS", "MARPreset", "load_mar_checkpoint",
           "load_mar_state_dict", "export_mar_checkpoint", "official_state_dict", "split_official_state_dict",
           "infer_mar_config"]
