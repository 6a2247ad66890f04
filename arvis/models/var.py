"""VAR's transformer (Tian et al., NeurIPS 2024, arXiv:2404.02905), weight-compatible with the official release.

Architecture and parameter names follow FoundationVision/VAR ``models/var.py`` and ``models/basic_var.py``,
so the official ``var_d{16,20,24,30}.pth`` state dicts load with identical keys and give the same logits:

- input: the class token for scale 0 (``class_emb`` of the label, plus ``pos_start``), and for later
  scales ``word_embed`` of the tokenizer's down-sampled running reconstruction; every position adds a
  learned absolute position (``pos_1LC``) and its scale's embedding (``lvl_embed``);
- ``depth`` AdaLN blocks: LayerNorm without affine, modulated by ``(γ, scale, shift)`` computed from the
  class embedding (per block ``ada_lin``, or one ``shared_ada_lin`` plus a per-block ``ada_gss`` table when
  ``shared_aln``); attention with a fused ``mat_qkv``, ``q``/``v`` biases (no ``k`` bias), optional
  l2-normalised queries/keys with a learned per-head scale (``attn_l2_norm``, on in every release);
  GELU(tanh) MLP;
- block-causal attention across scales (a token sees all tokens of its own and earlier scales);
- ``head_nm`` (AdaLN) and a linear ``head`` over the codebook.

What differs from the official module (none of it changes weights or logits):

- no KV cache on the module: the caller owns a :class:`~arvis.models.next_scale.ScaleKVCache` and any
  contiguous run of scales can be evaluated against it (:meth:`VARTransformer.forward_scales`);
- no reference to the tokenizer inside the model (the official model keeps a ``vae_proxy``): the decode
  loop passes codes between the transformer and :class:`~arvis.tokenizers.var_vq.VARVQModel`;
- the training forward takes the classifier-free-guidance dropout mask from the caller (the official
  one draws it from the global RNG); weights are initialised from an explicit generator;
- the constant buffers of the official module (``lvl_1L``, ``attn_bias_for_masking``,
  ``attn.zero_k_bias``) are not in arvis's own state dict; :func:`official_state_dict` adds them, so a
  ``.pth`` written by :func:`export_var_checkpoint` has exactly the official keys.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import torch
import torch.nn.functional as F
from diffusers import ConfigMixin, ModelMixin
from diffusers.configuration_utils import register_to_config
from torch import nn

from arvis.errors import CheckpointError, ConfigError
from arvis.models.llamagen import MAX_GRID, DropPath  # the same stochastic depth and token-grid bound
from arvis.models.next_scale import ScaleKVCache, ScaleLayout, block_causal_mask
from arvis.models.protocol import TokenLayout
from arvis.utils.config_check import Bound, CheckedFolderMixin, check_config

DEFAULT_PATCH_NUMS = (1, 2, 3, 4, 5, 6, 8, 10, 13, 16)


@dataclass(frozen=True)
class VARPreset:
    depth: int
    shared_aln: bool
    patch_nums: tuple[int, ...]
    params: int  # the official transformer's parameter count (built with FoundationVision/VAR's code)
    published: str  # as printed in the official README

    @property
    def width(self) -> int:
        return 64 * self.depth  # models/__init__.py build_vae_var: width = depth * 64, heads = depth


# The released models (README "VAR zoo"); counts measured by building the official VAR on the meta device.
VAR_PRESETS: dict[str, VARPreset] = {
    "d16": VARPreset(16, False, DEFAULT_PATCH_NUMS, 310_283_520, "310M"),
    "d20": VARPreset(20, False, DEFAULT_PATCH_NUMS, 600_917_136, "600M"),
    "d24": VARPreset(24, False, DEFAULT_PATCH_NUMS, 1_033_399_360, "1.0B"),
    "d30": VARPreset(30, False, DEFAULT_PATCH_NUMS, 2_010_020_356, "2.0B"),
}


# What each configuration field may hold (arvis.utils.config_check), checked before anything is allocated.
# Generous: the largest release (d30) has depth 30, width 1920, 30 heads, 4096 codes, 680 tokens (1,000 classes);
# the pyramid may hold as many tokens as LlamaGen's largest grid (MAX_GRID², checked in the constructor).
_RATE = Bound.number(0.0, 1.0, open_high=True)
VAR_CONFIG_BOUNDS: dict[str, Bound] = {
    "vocab_size": Bound.integer(2, 1 << 20),
    "Cvae": Bound.integer(1, 4096),
    "num_classes": Bound.integer(1, 1_000_000),
    "depth": Bound.integer(1, 256),
    "embed_dim": Bound.integer(1, 16384),
    "num_heads": Bound.integer(1, 1024),
    "mlp_ratio": Bound.number(0.0, 64.0, open_low=True),
    "drop_rate": _RATE,
    "attn_drop_rate": _RATE,
    "drop_path_rate": _RATE,
    "norm_eps": Bound.number(0.0, 1.0, open_low=True, open_high=True),
    "shared_aln": Bound.boolean(),
    "cond_drop_rate": _RATE,
    "attn_l2_norm": Bound.boolean(),
    "patch_nums": Bound.integers(1, MAX_GRID, max_items=64, note=f"token-map sides, at most {MAX_GRID}"),
    "class_names": Bound.strings(1_000_000, optional=True),
}


def check_pyramid(patch_nums: Sequence[int], name: str = "patch_nums") -> None:
    """Refuse a pyramid of more than ``MAX_GRID²`` tokens in all (its position table and attention bias grow
    with the count and its square)."""
    total = sum(int(p) ** 2 for p in patch_nums)
    if total > MAX_GRID * MAX_GRID:
        raise ValueError(f"{name} = {list(patch_nums)} makes {total} tokens in all; at most {MAX_GRID * MAX_GRID} "
                         f"(a {MAX_GRID}x{MAX_GRID} grid)")


class TokenPruning(Protocol):
    """Per-request hooks that let a decoding method evaluate only some tokens of a scale (FastVAR).

    ``select(layer, part, x)`` returns the ``[R, k]`` token indices to evaluate in block ``layer``'s
    ``part`` (``"attn"`` or ``"ffn"``) or ``None`` for all. The block then runs ``part`` on those ``k``
    tokens alone (attention: ``k`` queries, and only their keys/values enter the cache) and takes
    ``fill(layer, part, R)``, a full ``[R, l, C]`` output map, at every other position. ``record`` sees the
    full-scale outputs of unpruned forwards (what ``fill`` is later made from).
    """

    def select(self, layer: int, part: str, x: torch.Tensor) -> torch.Tensor | None: ...

    def fill(self, layer: int, part: str, rows: int) -> torch.Tensor: ...

    def record(self, layer: int, part: str, out: torch.Tensor) -> None: ...


# ----------------------------------------------------------------------------- blocks
class FFN(nn.Module):
    def __init__(self, dim: int, hidden: int, drop: float):
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)
        self.drop = nn.Dropout(drop) if drop > 0 else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.drop(self.fc2(F.gelu(self.fc1(x), approximate="tanh")))


class SelfAttention(nn.Module):
    """VAR's attention: fused ``mat_qkv``, q/v biases, optional l2-normalised q/k with a learned scale."""

    def __init__(self, dim: int, heads: int, attn_drop: float, proj_drop: float, l2_norm: bool):
        super().__init__()
        if dim % heads:
            raise ValueError(f"embed_dim ({dim}) must be divisible by num_heads ({heads})")
        self.heads, self.head_dim, self.l2_norm = heads, dim // heads, l2_norm
        if l2_norm:
            self.scale = 1.0
            self.scale_mul_1H11 = nn.Parameter(torch.full((1, heads, 1, 1), 4.0).log())
            self.max_scale_mul = math.log(100)
        else:
            self.scale = 0.25 / math.sqrt(self.head_dim)
        self.mat_qkv = nn.Linear(dim, 3 * dim, bias=False)
        self.q_bias = nn.Parameter(torch.zeros(dim))
        self.v_bias = nn.Parameter(torch.zeros(dim))
        self.proj = nn.Linear(dim, dim)
        self.proj_drop = nn.Dropout(proj_drop) if proj_drop > 0 else nn.Identity()
        self.attn_drop = attn_drop

    def forward(self, x: torch.Tensor, cache: ScaleKVCache | None, layer: int, mask: torch.Tensor | None
                ) -> torch.Tensor:
        R, T, C = x.shape
        bias = torch.cat([self.q_bias, torch.zeros_like(self.q_bias), self.v_bias])
        q, k, v = F.linear(x, self.mat_qkv.weight, bias).view(R, T, 3, self.heads, self.head_dim).permute(2, 0, 3, 1, 4)
        if self.l2_norm:
            q = F.normalize(q, dim=-1) * self.scale_mul_1H11.clamp_max(self.max_scale_mul).exp()
            k = F.normalize(k, dim=-1)
        if cache is not None:
            k, v = cache.append(layer, k, v)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=self.scale,
                                             dropout_p=self.attn_drop if self.training else 0.0)
        return self.proj_drop(self.proj(out.transpose(1, 2).reshape(R, T, C)))


class AdaLNSelfAttn(nn.Module):
    """One AdaLN transformer block (``x + γ₁·attn(LN(x)(1+s₁)+b₁)``, then the same for the MLP)."""

    def __init__(self, dim: int, cond_dim: int, heads: int, mlp_ratio: float, drop: float, attn_drop: float,
                 drop_path: float, norm_eps: float, shared_aln: bool, attn_l2_norm: bool):
        super().__init__()
        self.dim = dim
        self.drop_path = DropPath(drop_path) if drop_path > 0 else nn.Identity()
        self.attn = SelfAttention(dim, heads, attn_drop, drop, attn_l2_norm)
        self.ffn = FFN(dim, round(dim * mlp_ratio), drop)
        self.ln_wo_grad = nn.LayerNorm(dim, eps=norm_eps, elementwise_affine=False)
        self.shared_aln = shared_aln
        if shared_aln:
            self.ada_gss = nn.Parameter(torch.randn(1, 1, 6, dim) / dim ** 0.5)
        else:
            self.ada_lin = nn.Sequential(nn.SiLU(), nn.Linear(cond_dim, 6 * dim))

    def modulation(self, cond: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """``(γ₁, γ₂, scale₁, scale₂, shift₁, shift₂)``, each ``[R, 1, C]`` (``cond``: ``[R, D]`` or the shared
        ``[R, 1, 6, C]``)."""
        if self.shared_aln:
            return (self.ada_gss + cond).unbind(2)
        return self.ada_lin(cond).view(-1, 1, 6, self.dim).unbind(2)

    def forward(self, x: torch.Tensor, cond: torch.Tensor, cache: ScaleKVCache | None, layer: int,
                mask: torch.Tensor | None, pruning: TokenPruning | None = None) -> torch.Tensor:
        g1, g2, s1, s2, b1, b2 = self.modulation(cond)

        def attn(h: torch.Tensor) -> torch.Tensor:
            return self.attn(self.ln_wo_grad(h) * (s1 + 1) + b1, cache, layer, mask) * g1

        def ffn(h: torch.Tensor) -> torch.Tensor:
            return self.ffn(self.ln_wo_grad(h) * (s2 + 1) + b2) * g2

        x = _residual(attn, x, layer, "attn", pruning, self.drop_path)
        return _residual(ffn, x, layer, "ffn", pruning, self.drop_path)


def _residual(fn: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor, layer: int, part: str,
              pruning: TokenPruning | None, drop_path: nn.Module) -> torch.Tensor:
    """``x + fn(x)``; under pruning, ``fn`` runs on the selected tokens only and every other position adds the
    pruning's cached output instead (the work at pruned positions is skipped, not masked)."""
    index = pruning.select(layer, part, x) if pruning is not None else None
    if index is None:
        out = fn(x)
        if pruning is not None:
            pruning.record(layer, part, out)
        return x + drop_path(out)
    R, length, C = x.shape
    # Row-major positions of the kept tokens in the flattened [R·l, C] map: copying whole C-wide rows with
    # index_select / index_copy_ costs less than gather / scatter with a C-times expanded index.
    flat = (index + torch.arange(0, R * length, length, device=x.device)[:, None]).flatten()
    kept = x.reshape(R * length, C).index_select(0, flat)
    out = drop_path(fn(kept.view(R, -1, C))).reshape(-1, C)
    # Every position first adds the cached output, then the kept ones are overwritten with their own result.
    y = x + pruning.fill(layer, part, R)
    y.view(R * length, C).index_copy_(0, flat, kept + out)
    return y


class AdaLNBeforeHead(nn.Module):
    def __init__(self, dim: int, cond_dim: int, norm_eps: float):
        super().__init__()
        self.dim = dim
        self.ln_wo_grad = nn.LayerNorm(dim, eps=norm_eps, elementwise_affine=False)
        self.ada_lin = nn.Sequential(nn.SiLU(), nn.Linear(cond_dim, 2 * dim))

    def forward(self, x: torch.Tensor, cond: torch.Tensor) -> torch.Tensor:
        scale, shift = self.ada_lin(cond).view(-1, 1, 2, self.dim).unbind(2)
        return self.ln_wo_grad(x) * (scale + 1) + shift


class SharedAdaLin(nn.Linear):
    def forward(self, cond: torch.Tensor) -> torch.Tensor:
        return super().forward(cond).view(-1, 1, 6, self.weight.shape[0] // 6)


# ----------------------------------------------------------------------------- the model
class VARTransformer(CheckedFolderMixin, ModelMixin, ConfigMixin):
    """VAR (class-conditional next-scale prediction), implementing :class:`~arvis.models.next_scale.NextScaleBackbone`.

    Configuration: the official ``VAR`` constructor arguments (``vocab_size`` and ``Cvae`` come from the
    tokenizer there), plus ``class_names``. Build a released architecture with :meth:`from_preset`, load
    official ``.pth`` files with :func:`load_var_checkpoint`, arvis folders with ``from_pretrained``.

    Example:
        >>> model = VARTransformer.from_preset("d16")       # the VAR-d16 architecture, 310,283,520 parameters
        >>> model.scale_layout.num_tokens
        680
    """

    config_name = "config.json"
    config_bounds = VAR_CONFIG_BOUNDS

    @register_to_config
    def __init__(
        self,
        vocab_size: int = 4096,
        Cvae: int = 32,  # noqa: N803 - the official name
        num_classes: int = 1000,
        depth: int = 16,
        embed_dim: int = 1024,
        num_heads: int = 16,
        mlp_ratio: float = 4.0,
        drop_rate: float = 0.0,
        attn_drop_rate: float = 0.0,
        drop_path_rate: float = 0.0,
        norm_eps: float = 1e-6,
        shared_aln: bool = False,
        cond_drop_rate: float = 0.1,
        attn_l2_norm: bool = True,
        patch_nums: Sequence[int] = DEFAULT_PATCH_NUMS,
        class_names: list[str] | None = None,
    ):
        super().__init__()
        check_config(self.config, VAR_CONFIG_BOUNDS, source=type(self).__name__)
        check_pyramid(patch_nums)
        if class_names is not None and len(class_names) != num_classes:
            raise ValueError(f"class_names has {len(class_names)} names for num_classes={num_classes}")
        self._layout = ScaleLayout(tuple(int(p) for p in patch_nums), vocab_size)
        C, L, first_l = embed_dim, self._layout.num_tokens, patch_nums[0] ** 2
        init_std = math.sqrt(1 / C / 3)

        self.word_embed = nn.Linear(Cvae, C)
        self.class_emb = nn.Embedding(num_classes + 1, C)  # row num_classes: the null class (CFG)
        self.pos_start = nn.Parameter(torch.empty(1, first_l, C))
        self.pos_1LC = nn.Parameter(torch.empty(1, L, C))
        self.lvl_embed = nn.Embedding(self._layout.num_scales, C)
        self.shared_ada_lin = nn.Sequential(nn.SiLU(), SharedAdaLin(C, 6 * C)) if shared_aln else nn.Identity()
        rates = torch.linspace(0, drop_path_rate, depth, device="cpu").tolist()
        self.blocks = nn.ModuleList(
            AdaLNSelfAttn(C, C, num_heads, mlp_ratio, drop_rate, attn_drop_rate, rates[i], norm_eps, shared_aln,
                          attn_l2_norm)
            for i in range(depth)
        )
        self.head_nm = AdaLNBeforeHead(C, C, norm_eps)
        self.head = nn.Linear(C, vocab_size)
        # Scale index of every position (the official lvl_1L), a constant: not in arvis's state dict.
        self._levels = self._layout.scale_of_positions()
        if not self.pos_1LC.is_meta:
            with torch.no_grad():
                for p in (self.class_emb.weight, self.pos_start, self.pos_1LC, self.lvl_embed.weight):
                    nn.init.trunc_normal_(p, std=init_std)

    # ------------------------------------------------------------------ construction helpers
    @classmethod
    def from_preset(cls, name: str, **overrides: Any) -> VARTransformer:
        """A released architecture (``d16`` … ``d30``): width 64·depth, heads = depth, the official
        drop-path rate 0.1·depth/24; keyword overrides go to the config."""
        if name not in VAR_PRESETS:
            raise ValueError(f"unknown VAR preset {name!r}; known presets: {', '.join(VAR_PRESETS)}")
        p = VAR_PRESETS[name]
        kwargs: dict[str, Any] = dict(depth=p.depth, embed_dim=p.width, num_heads=p.depth, shared_aln=p.shared_aln,
                                      patch_nums=p.patch_nums, drop_path_rate=0.1 * p.depth / 24)
        return cls(**{**kwargs, **overrides})

    @torch.no_grad()
    def init_weights(self, generator: torch.Generator | None = None, init_adaln: float = 0.5,
                     init_adaln_gamma: float = 1e-5, init_head: float = 0.02, init_std: float = -1.0) -> None:
        """The official initialisation (``VAR.init_weights`` with the release's defaults), from ``generator``.

        Truncated normals are drawn as ``normal`` clamped to ±2σ (``trunc_normal_`` has no generator
        argument); the resulting distribution differs from the official one only in that detail.
        """
        C = self.config.embed_dim
        std = (1 / C / 3) ** 0.5 if init_std < 0 else init_std

        def trunc(t: torch.Tensor, s: float) -> None:
            t.normal_(0.0, s, generator=generator).clamp_(-2 * s, 2 * s)

        for m in self.modules():
            if isinstance(m, nn.Linear):
                trunc(m.weight, std)
                if m.bias is not None:
                    m.bias.zero_()
            elif isinstance(m, nn.Embedding):
                trunc(m.weight, std)
        for p in (self.pos_start, self.pos_1LC):
            trunc(p, (1 / C / 3) ** 0.5)
        self.head.weight.mul_(init_head)
        self.head.bias.zero_()
        self.head_nm.ada_lin[-1].weight.mul_(init_adaln)
        self.head_nm.ada_lin[-1].bias.zero_()
        depth = len(self.blocks)
        for block in self.blocks:
            block.attn.proj.weight.div_(math.sqrt(2 * depth))
            block.ffn.fc2.weight.div_(math.sqrt(2 * depth))
            if block.shared_aln:
                block.ada_gss[:, :, 2:].mul_(init_adaln)
                block.ada_gss[:, :, :2].mul_(init_adaln_gamma)
            else:
                block.ada_lin[-1].weight[2 * C:].mul_(init_adaln)
                block.ada_lin[-1].weight[: 2 * C].mul_(init_adaln_gamma)
                block.ada_lin[-1].bias.zero_()

    # ------------------------------------------------------------------ protocol
    @property
    def scale_layout(self) -> ScaleLayout:
        return self._layout

    @property
    def layout(self) -> TokenLayout:
        """The token-by-token view the CLI, bench records and demo read: the pyramid as one row of ``L``
        tokens in scale order (``grid = (1, L)``), one condition slot."""
        return TokenLayout(grid=(1, self._layout.num_tokens), vocab_size=self._layout.vocab_size, condition_length=1)

    @property
    def num_classes(self) -> int:
        return self.config.num_classes

    @property
    def is_class_conditional(self) -> bool:
        return True

    def condition(self, labels: torch.Tensor) -> torch.Tensor:
        """``[R]`` class ids (``num_classes`` = the null class) → ``[R, C]`` condition vectors."""
        return self.class_emb(labels)

    def null_labels(self, labels: torch.Tensor) -> torch.Tensor:
        return torch.full_like(labels, self.config.num_classes)

    def _lvl_pos(self, begin: int, end: int) -> torch.Tensor:
        levels = self._levels[begin:end].to(self.pos_1LC.device)
        return self.lvl_embed(levels)[None] + self.pos_1LC[:, begin:end]

    def first_input(self, cond: torch.Tensor) -> torch.Tensor:
        """Scale 0's input: ``class token + pos_start + level/position`` → ``[R, pn_0², C]``."""
        first_l = self._layout.patch_nums[0] ** 2
        return cond[:, None, :] + self.pos_start + self._lvl_pos(0, first_l)

    def embed_input(self, scale: int, inputs: torch.Tensor) -> torch.Tensor:
        """Scale ``scale`` (≥ 1)'s input from the tokenizer's down-sampled ``f_hat`` ``[R, pn², Cvae]`` → ``[R, pn², C]``."""
        begin, end = self._layout.bounds[scale]
        return self.word_embed(inputs.to(self.word_embed.weight.dtype)) + self._lvl_pos(begin, end)

    def allocate_cache(self, rows: int, dtype: torch.dtype | None = None,
                       device: torch.device | str | None = None) -> ScaleKVCache:
        """A cache for every token of the pyramid, ``rows`` rows."""
        w = self.head.weight
        a = self.blocks[0].attn
        return ScaleKVCache(len(self.blocks), rows, a.heads, self._layout.num_tokens, a.head_dim,
                            dtype or w.dtype, device or w.device)

    def adaln_condition(self, cond: torch.Tensor) -> torch.Tensor:
        """What the blocks are modulated by: ``cond`` itself, or ``shared_ada_lin(cond)`` with shared AdaLN."""
        return self.shared_ada_lin(cond)

    def forward_scales(self, x: torch.Tensor, cond: torch.Tensor, cache: ScaleKVCache | None, first: int, last: int,
                       pruning: TokenPruning | None = None) -> torch.Tensor:
        """Evaluate scales ``first … last`` (contiguous) in one forward.

        Args:
            x: ``[R, T, C]`` their inputs, concatenated (``first_input`` / ``embed_input``).
            cond: ``[R, C]`` condition vectors (``condition``).
            cache: earlier scales' keys/values; this forward's are appended (``None``: no cache, so
                ``first`` must be 0).
            first, last: the scales evaluated.
            pruning: FastVAR-style token pruning hooks (one scale per forward), or ``None``.

        Returns:
            ``[R, T, V]`` fp32 logits of the tokens of those scales.
        """
        if (cache.scales if cache is not None else 0) != first:
            raise RuntimeError(f"the cache holds {cache.scales if cache else 0} scales; this forward starts at scale {first}")
        mask = None if first == last else block_causal_mask(self._layout, first, last, x.device)
        ada = self.adaln_condition(cond)
        h = x
        for i, block in enumerate(self.blocks):
            h = block(h, ada, cache, i, mask, pruning)
        if cache is not None:
            written = getattr(pruning, "written", None)  # a pruned scale appends only the tokens it kept
            cache.advance(h.shape[1] if written is None else int(written), last - first + 1)
        return self.head(self.head_nm(h, cond)).float()

    # ------------------------------------------------------------------ training
    def forward(self, labels: torch.Tensor, inputs: torch.Tensor, drop_condition: torch.Tensor | None = None
                ) -> torch.Tensor:
        """Teacher-forced logits ``[B, L, V]`` (fp32) for training.

        Args:
            labels: ``[B]`` class ids.
            inputs: ``[B, L − pn_0², Cvae]`` the tokenizer's teacher-forcing inputs
                (:meth:`~arvis.tokenizers.var_vq.MultiScaleQuantizer.teacher_inputs`).
            drop_condition: ``[B]`` bool, replace the label by the null class (CFG training); the
                caller draws it from its own generator.
        """
        if drop_condition is not None:
            labels = torch.where(drop_condition, self.null_labels(labels), labels)
        cond = self.condition(labels)
        x = torch.cat([self.first_input(cond), self.embed_input_all(inputs)], 1)
        return self.forward_scales(x, cond, None, 0, self._layout.num_scales - 1)

    def embed_input_all(self, inputs: torch.Tensor) -> torch.Tensor:
        """``word_embed`` + level/position for the inputs of scales 1 … S−1 at once."""
        first_l = self._layout.patch_nums[0] ** 2
        return self.word_embed(inputs.to(self.word_embed.weight.dtype)) + self._lvl_pos(first_l, self._layout.num_tokens)


# ----------------------------------------------------------------------------- official checkpoints
# Constant buffers the official module registers (and so saves) that arvis computes instead.
_BUFFER_KEYS = ("lvl_1L", "attn_bias_for_masking")


def official_state_dict(model: VARTransformer) -> dict[str, torch.Tensor]:
    """``model``'s weights under exactly the official keys (the constant buffers included)."""
    sd = {k: v.detach().clone() for k, v in model.state_dict().items()}
    layout = model.scale_layout
    levels = layout.scale_of_positions()
    dtype = model.head.weight.dtype
    sd["lvl_1L"] = levels[None].clone()
    bias = torch.where(levels[:, None] >= levels[None, :], 0.0, float("-inf")).to(dtype)
    sd["attn_bias_for_masking"] = bias.reshape(1, 1, layout.num_tokens, layout.num_tokens)
    for i in range(len(model.blocks)):
        sd[f"blocks.{i}.attn.zero_k_bias"] = torch.zeros(model.config.embed_dim, dtype=dtype)
    return sd


def infer_var_config(state_dict: Mapping[str, torch.Tensor], preset: str | None = None,
                     patch_nums: Sequence[int] | None = None, num_heads: int | None = None,
                     source: str = "state dict") -> dict[str, Any]:
    """The :class:`VARTransformer` configuration of an official state dict, from tensor shapes.

    Depth, width, classes, vocabulary, ``Cvae``, MLP ratio, shared AdaLN and ``attn_l2_norm`` come from
    shapes; the head count from ``scale_mul_1H11`` (every release has it; a ``num_heads`` argument must
    agree), else ``num_heads``, else the official rule heads = depth when the width is 64·depth;
    ``patch_nums`` from the saved ``lvl_1L`` buffer (or the argument). ``preset`` is checked against the
    shapes, and the result against :data:`VAR_CONFIG_BOUNDS` before the caller builds anything.

    Raises:
        CheckpointError: not a VAR transformer state dict (naming ``source``).
        ConfigError: an argument or a value the shapes imply out of bounds, or contradicting the shapes.
    """
    sd = state_dict
    for key in ("class_emb.weight", "head.weight", "word_embed.weight", "pos_1LC", "lvl_embed.weight"):
        if not isinstance(sd.get(key), torch.Tensor):
            raise CheckpointError(f"{source}: not a VAR transformer state dict: no {key!r}")
    given = {k: v for k, v in (("num_heads", num_heads), ("patch_nums", patch_nums)) if v is not None}
    check_config({k: list(v) if isinstance(v, tuple) else v for k, v in given.items()}, VAR_CONFIG_BOUNDS,
                 source=f"{source} (arguments)")
    depth = len({k.split(".")[1] for k in sd if k.startswith("blocks.")})
    C = int(sd["class_emb.weight"].shape[1])
    if preset is not None:
        if preset not in VAR_PRESETS:
            raise ValueError(f"unknown VAR preset {preset!r}; known presets: {', '.join(VAR_PRESETS)}")
        p = VAR_PRESETS[preset]
        if (p.depth, p.width) != (depth, C):
            raise ConfigError(f"{source}: preset {preset} has {p.depth} blocks of width {p.width}, the checkpoint has "
                              f"{depth} blocks of width {C}: it is not a VAR-{preset} checkpoint")
    shared = "shared_ada_lin.1.weight" in sd
    l2 = "blocks.0.attn.scale_mul_1H11" in sd
    if l2:
        heads = int(sd["blocks.0.attn.scale_mul_1H11"].shape[1])
        if num_heads is not None and num_heads != heads:
            raise ConfigError(f"{source}: num_heads = {num_heads}, but the weights have {heads} heads "
                              f"(blocks.0.attn.scale_mul_1H11)")
    elif num_heads is not None:
        heads = int(num_heads)
    elif C == 64 * depth:
        heads = depth
    else:
        raise ConfigError(f"{source}: cannot infer the head count of a width-{C}, depth-{depth} VAR without "
                          f"l2-normalised attention (no scale_mul_1H11); pass num_heads=…")
    if heads < 1 or C % heads:
        raise ConfigError(f"{source}: num_heads = {heads} does not divide the width {C}")
    levels = sd.get("lvl_1L")
    if patch_nums is None:
        max_scales = VAR_CONFIG_BOUNDS["patch_nums"].max_items
        if not isinstance(levels, torch.Tensor) or levels.is_floating_point() or levels.is_complex() \
                or not 0 < levels.numel() <= MAX_GRID ** 2 or int(levels.min()) < 0 or int(levels.max()) >= max_scales:
            raise ConfigError(f"{source}: patch_nums is not stored in this state dict (no 'lvl_1L' of at most "
                              f"{MAX_GRID ** 2} scale indices in [0, {max_scales})); pass patch_nums=…")
        counts = torch.bincount(levels.flatten().long()).tolist()
        patch_nums = tuple(math.isqrt(c) for c in counts)
        if any(p * p != c for p, c in zip(patch_nums, counts, strict=True)):
            raise ConfigError(f"{source}: lvl_1L describes non-square scales {counts}")
    patch_nums = tuple(int(p) for p in patch_nums)
    L = int(sd["pos_1LC"].shape[1])
    if sum(p * p for p in patch_nums) != L or len(patch_nums) != sd["lvl_embed.weight"].shape[0]:
        raise ConfigError(f"{source}: patch_nums {patch_nums} do not fit the checkpoint ({L} positions, "
                          f"{sd['lvl_embed.weight'].shape[0]} scales)")
    fc1 = sd.get("blocks.0.ffn.fc1.weight")
    if depth and not isinstance(fc1, torch.Tensor):
        raise CheckpointError(f"{source}: not a VAR transformer state dict: no 'blocks.0.ffn.fc1.weight'")
    hidden = int(fc1.shape[0]) if depth else 4 * C
    config = dict(vocab_size=int(sd["head.weight"].shape[0]), Cvae=int(sd["word_embed.weight"].shape[1]),
                  num_classes=int(sd["class_emb.weight"].shape[0]) - 1, depth=depth, embed_dim=C, num_heads=heads,
                  mlp_ratio=hidden / C, shared_aln=shared, attn_l2_norm=l2, patch_nums=list(patch_nums))
    config = check_config(config, VAR_CONFIG_BOUNDS, source=f"{source} (from its tensor shapes)")
    try:
        check_pyramid(patch_nums)
    except ValueError as err:
        raise ConfigError(f"{source}: {err}") from None
    return {**config, "patch_nums": patch_nums}


def load_var_state_dict(state_dict: Mapping[str, torch.Tensor], preset: str | None = None,
                        patch_nums: Sequence[int] | None = None, num_heads: int | None = None,
                        source: str = "state dict") -> VARTransformer:
    """A :class:`VARTransformer` holding an official state dict (keys, shapes and dtypes checked, buffers verified).

    Raises:
        CheckpointError: values that are not floating-point tensors (the integer ``lvl_1L`` buffer aside),
            missing / unexpected / mis-shaped keys, constant buffers that do not describe the pyramid.
        ConfigError: see :func:`infer_var_config`.
    """
    from arvis.utils.serialization import check_state_dict, check_tensor_values, to_common_dtype

    weights = {k: v for k, v in state_dict.items() if k not in _BUFFER_KEYS and not k.endswith(".attn.zero_k_bias")}
    common = check_tensor_values(weights, source)
    for key in set(state_dict) - set(weights):  # the official constants (lvl_1L is an integer tensor)
        if not isinstance(state_dict[key], torch.Tensor):
            raise CheckpointError(f"{source}: {key!r} is a {type(state_dict[key]).__name__}, not a tensor")
    config = infer_var_config(state_dict, preset, patch_nums, num_heads, source=source)
    try:
        with torch.device("meta"):
            model = VARTransformer(**config)
    except (ValueError, TypeError) as err:
        raise ConfigError(f"{source}: {err}") from None
    reference = official_state_dict(model)  # shapes of the weights (meta) and the constant buffers
    check_state_dict(_KeysOnly(reference), state_dict, source=source)
    for key in _BUFFER_KEYS:  # the constants must describe this layout (a pyramid mismatch fails here)
        if key in state_dict and not torch.equal(state_dict[key].to(reference[key].dtype), reference[key]):
            raise CheckpointError(f"{source}: {key} does not describe patch_nums={config['patch_nums']}")
    model.load_state_dict(to_common_dtype({k: v for k, v in weights.items() if k in reference}, common),
                          strict=True, assign=True)
    return model.eval()


class _KeysOnly(nn.Module):
    """A stand-in module whose ``state_dict()`` is a given dict (for :func:`check_state_dict`)."""

    def __init__(self, sd: dict[str, torch.Tensor]):
        super().__init__()
        self._sd = sd

    def state_dict(self, *args: Any, **kwargs: Any) -> dict[str, torch.Tensor]:  # type: ignore[override]
        return self._sd


def load_var_checkpoint(path: str | os.PathLike, preset: str | None = None, patch_nums: Sequence[int] | None = None,
                        num_heads: int | None = None, dtype: torch.dtype | None = None) -> VARTransformer:
    """Load an official VAR checkpoint (``var_d16.pth`` …: a flat state dict read with
    ``torch.load(weights_only=True)``; or the same keys in safetensors).

    Raises:
        CheckpointError: unreadable/unsafe file, another model's weights, weights that are not floating point.
        ConfigError: a preset or ``num_heads`` that does not match, a shape out of :data:`VAR_CONFIG_BOUNDS`.
    """
    from arvis.utils.serialization import extract_state_dict, load_state_dict_file

    sd, _ = extract_state_dict(load_state_dict_file(path), "auto", source=str(path))
    model = load_var_state_dict(sd, preset, patch_nums, num_heads, source=str(path))
    return model.to(dtype) if dtype is not None else model


def export_var_checkpoint(model: VARTransformer, path: str | os.PathLike) -> None:
    """Write ``model`` in the official layout: a flat state dict with the official keys (``.pth`` via
    ``torch.save``, as the release; or ``.safetensors``)."""
    from arvis.utils.serialization import save_pickle_checkpoint, save_safetensors

    path = Path(path)
    sd = official_state_dict(model)
    if path.suffix == ".safetensors":
        save_safetensors(sd, path)
    elif path.suffix in (".pth", ".pt"):
        save_pickle_checkpoint(sd, path)
    else:
        raise ValueError(f"path must end in .pth, .pt or .safetensors, got {path.name!r}")
