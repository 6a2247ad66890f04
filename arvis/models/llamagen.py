"""LlamaGen's GPT (Sun et al., 2024, arXiv:2406.06525), weight-compatible with the official release.

Architecture and parameter names follow FoundationVision/LlamaGen ``autoregressive/models/gpt.py``
so that official checkpoints load unchanged and give the same logits: pre-RMSNorm Llama blocks with
SwiGLU (``w1``/``w3``/``w2``), fused ``wqkv``, no biases, an untied ``output`` head, 2-D rotary
embeddings over the token grid, and either a class embedding (``c2i``, with a null class for
classifier-free guidance) or a caption embedding (``t2i``: an MLP over flan-t5 features, an
unconditional embedding buffer, left padding with an embedding mask).

Kept on purpose for weight compatibility:
- condition slots get all-zero rotation rows, so the condition's queries and keys are zero vectors
  (the condition reaches the image tokens through the values only);
- in ``t2i`` mode padded condition slots are masked for every query, except that each query always
  attends to itself;
- the FFN width is ``find_multiple(int(2 * 4 * dim / 3), multiple_of)``.

What differs from the official module (none of it changes weights or logits):
- no KV cache or causal mask is stored on the module: the engine owns a :class:`StaticKVCache` and
  passes an explicit attention mask (``forward_tokens``), so any set of absolute positions can be
  evaluated and rolled back;
- the module implements arvis's backbone protocol (``layout``, ``prefill``, ``forward_tokens``);
- weights are initialised from an explicit generator, never by patching torch.
"""

from __future__ import annotations

import math
import weakref
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from diffusers import ConfigMixin, ModelMixin
from diffusers.configuration_utils import register_to_config
from torch import nn

from arvis.models.protocol import Condition, StaticKVCache, TokenLayout
from arvis.utils.config_check import Bound, CheckedFolderMixin, check_config

MODEL_TYPES = ("c2i", "t2i")


def find_multiple(n: int, k: int) -> int:
    return n if n % k == 0 else n + k - (n % k)


@dataclass(frozen=True)
class GPTPreset:
    n_layer: int
    n_head: int
    dim: int
    params: str  # the official figure, as printed in gpt.py


# The official presets (gpt.py ``GPT_models``) and their published parameter counts.
GPT_PRESETS: dict[str, GPTPreset] = {
    "GPT-B": GPTPreset(12, 12, 768, "111M"),
    "GPT-L": GPTPreset(24, 16, 1024, "343M"),
    "GPT-XL": GPTPreset(36, 20, 1280, "775M"),
    "GPT-XXL": GPTPreset(48, 24, 1536, "1.4B"),
    "GPT-XXXL": GPTPreset(48, 40, 2560, "3.9B"),
    "GPT-1B": GPTPreset(22, 32, 2048, "1.2B"),
    "GPT-3B": GPTPreset(24, 32, 3200, "3.1B"),
    "GPT-7B": GPTPreset(32, 32, 4096, "6.6B"),
}


# What each configuration field may hold (arvis.utils.config_check), checked before anything is
# allocated. Generous: the largest official model (GPT-7B) has dim 4096, 32 layers, 32 heads,
# 16384 codes, 576 tokens per image (384 px) and 120 caption tokens.
MAX_GRID = 128  # tokens per side: 2048 px with a VQ-16 tokenizer
_DROPOUT = Bound.number(0.0, 1.0, open_high=True)
LLAMAGEN_CONFIG_BOUNDS: dict[str, Bound] = {
    "dim": Bound.integer(4, 16384),
    "n_layer": Bound.integer(1, 256),
    "n_head": Bound.integer(1, 256),
    "n_kv_head": Bound.integer(1, 256, optional=True),
    "multiple_of": Bound.integer(1, 65536),
    "ffn_dim_multiplier": Bound.number(0.0, 64.0, open_low=True, optional=True),
    "rope_base": Bound.number(1.0, 1e12, open_low=True),
    "norm_eps": Bound.number(0.0, 1.0, open_low=True, open_high=True),
    "initializer_range": Bound.number(0.0, 10.0),
    "token_dropout_p": _DROPOUT,
    "attn_dropout_p": _DROPOUT,
    "resid_dropout_p": _DROPOUT,
    "ffn_dropout_p": _DROPOUT,
    "drop_path_rate": _DROPOUT,
    "num_classes": Bound.integer(1, 1_000_000),
    "caption_dim": Bound.integer(1, 65536),
    "class_dropout_prob": _DROPOUT,
    "model_type": Bound.choice(*MODEL_TYPES),
    "vocab_size": Bound.integer(2, 1 << 20),
    "cls_token_num": Bound.integer(1, 4096, note="condition slots; official t2i models use 120"),
    "block_size": Bound.integer(1, MAX_GRID * MAX_GRID, note=f"tokens per image, a square of at most {MAX_GRID}x{MAX_GRID}"),
    "class_names": Bound.strings(1_000_000, optional=True),
}


# ----------------------------------------------------------------------------- rotary embeddings
def rope_table_2d(grid_size: int, head_dim: int, base: float, condition_length: int) -> torch.Tensor:
    """Rotation table ``[condition_length + grid_size**2, head_dim // 2, 2]`` (cos, sin).

    The first half of each head's pairs rotates with the row index, the second half with the column
    index; condition slots get all-zero rows (LlamaGen's quirk, kept for weight compatibility).
    """
    half = head_dim // 2
    cpu = torch.device("cpu")  # a constant: built on the CPU even under a meta-device context
    freqs = 1.0 / (base ** (torch.arange(0, half, 2, device=cpu)[: half // 2].float() / half))
    t = torch.arange(grid_size, dtype=torch.float32, device=cpu)
    freqs = torch.outer(t, freqs)  # [grid, half // 2]
    grid = torch.cat(
        [freqs[:, None, :].expand(-1, grid_size, -1), freqs[None, :, :].expand(grid_size, -1, -1)], dim=-1
    )  # [grid, grid, half]
    table = torch.stack([torch.cos(grid), torch.sin(grid)], dim=-1).flatten(0, 1)
    return torch.cat([torch.zeros(condition_length, half, 2, device=cpu), table])


def apply_rope(x: torch.Tensor, rotation: torch.Tensor) -> torch.Tensor:
    """Rotate ``x: [R, T, H, D]`` by ``rotation: [R, T, 1, D // 2]`` complex64 (computed in fp32).

    The pairs ``(x[2i], x[2i+1])`` are complex numbers multiplied by ``cos + i·sin``: the official
    ``(x0·cos − x1·sin, x1·cos + x0·sin)`` in one kernel instead of a dozen.
    """
    pairs = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
    return torch.view_as_real(pairs * rotation).flatten(3).type_as(x)


def rope_rotation(table: torch.Tensor) -> torch.Tensor:
    """``[slots, D // 2, 2]`` (cos, sin) table → ``[slots, D // 2]`` complex64 rotations."""
    return torch.view_as_complex(table.contiguous())


# ----------------------------------------------------------------------------- inference matmuls
# On the CPU, ``x @ Wᵀ`` runs faster with ``Wᵀ`` stored contiguously than with ``F.linear``'s transposed
# view (measured on the shipped model: -10 % per single-token forward, -20 % at 17 positions). Inference
# forwards therefore keep a transposed copy of each Linear weight, rebuilt when the weight changes
# (``_version`` / storage), up to ``TRANSPOSED_BUDGET_BYTES`` per process (larger models fall back to
# ``F.linear``). Never used while training or under autograd, never on accelerators.
TRANSPOSED_BUDGET_BYTES = 1 << 30
_TRANSPOSED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # nn.Linear -> (key, Wᵀ)
_transposed_bytes = [0]


def linear(layer: nn.Linear, x: torch.Tensor) -> torch.Tensor:
    """``layer(x)`` (no bias), through the transposed-weight copy for CPU inference (see above)."""
    w = layer.weight
    if w.device.type != "cpu" or layer.training or torch.is_grad_enabled() or torch.compiler.is_compiling():
        return layer(x)  # (under torch.compile: inductor chooses its own matmul layout)
    key = (w.data_ptr(), w._version, w.dtype)
    entry = _TRANSPOSED.get(layer)
    if entry is None or entry[0] != key:
        size = w.numel() * w.element_size()
        if entry is None and _transposed_bytes[0] + size > TRANSPOSED_BUDGET_BYTES:
            return layer(x)
        _transposed_bytes[0] += 0 if entry is not None else size
        entry = (key, w.detach().t().contiguous())
        _TRANSPOSED[layer] = entry
    return x @ entry[1]


# ----------------------------------------------------------------------------- building blocks
class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype == torch.float32:  # one fused kernel; same math as below
            return F.rms_norm(x, (x.shape[-1],), self.weight, self.eps)
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)).type_as(x) * self.weight


class DropPath(nn.Module):
    """Stochastic depth (training only)."""

    def __init__(self, p: float):
        super().__init__()
        self.p = p

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.p == 0.0:
            return x
        keep = x.new_empty((x.shape[0],) + (1,) * (x.ndim - 1)).bernoulli_(1.0 - self.p)
        return x * keep / (1.0 - self.p)


class LabelEmbedder(nn.Module):
    """Class id → one condition vector; row ``num_classes`` is the null class used for CFG."""

    def __init__(self, num_classes: int, dim: int, dropout_prob: float):
        super().__init__()
        self.num_classes = num_classes
        self.has_null = dropout_prob > 0
        self.embedding_table = nn.Embedding(num_classes + int(self.has_null), dim)

    def forward(self, labels: torch.Tensor) -> torch.Tensor:
        return self.embedding_table(labels).unsqueeze(1)  # [B, 1, dim]


class CaptionMLP(nn.Module):
    def __init__(self, in_features: int, hidden: int, out_features: int):
        super().__init__()
        self.fc1 = nn.Linear(in_features, hidden, bias=False)
        self.fc2 = nn.Linear(hidden, out_features, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.gelu(self.fc1(x), approximate="tanh"))


class CaptionEmbedder(nn.Module):
    """Caption features ``[B, C, caption_dim]`` → condition vectors; ``uncond_embedding`` is the null caption."""

    def __init__(self, caption_dim: int, dim: int, token_num: int):
        super().__init__()
        self.cap_proj = CaptionMLP(caption_dim, dim, dim)
        # A persistent buffer (not a parameter) in the official model; it is in the state dict.
        self.register_buffer("uncond_embedding", torch.zeros(token_num, caption_dim))

    def forward(self, captions: torch.Tensor) -> torch.Tensor:
        return self.cap_proj(captions)


class FeedForward(nn.Module):
    def __init__(self, dim: int, multiple_of: int, ffn_dim_multiplier: float | None, dropout: float):
        super().__init__()
        hidden = int(2 * (4 * dim) / 3)
        if ffn_dim_multiplier is not None:
            hidden = int(ffn_dim_multiplier * hidden)
        hidden = find_multiple(hidden, multiple_of)
        self.w1 = nn.Linear(dim, hidden, bias=False)
        self.w3 = nn.Linear(dim, hidden, bias=False)
        self.w2 = nn.Linear(hidden, dim, bias=False)
        self.ffn_dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = linear(self.w2, F.silu(linear(self.w1, x)) * linear(self.w3, x))
        return self.ffn_dropout(out) if self.training else out


class Attention(nn.Module):
    def __init__(self, dim: int, n_head: int, n_kv_head: int, attn_dropout: float, resid_dropout: float):
        super().__init__()
        if dim % n_head:
            raise ValueError(f"dim ({dim}) must be divisible by n_head ({n_head})")
        if n_head % n_kv_head:
            raise ValueError(f"n_head ({n_head}) must be divisible by n_kv_head ({n_kv_head})")
        self.dim, self.n_head, self.n_kv_head = dim, n_head, n_kv_head
        self.head_dim = dim // n_head
        self.wqkv = nn.Linear(dim, (n_head + 2 * n_kv_head) * self.head_dim, bias=False)
        self.wo = nn.Linear(dim, dim, bias=False)
        self.attn_dropout_p = attn_dropout
        self.resid_dropout = nn.Dropout(resid_dropout)

    def forward(self, x: torch.Tensor, rotation: torch.Tensor, mask: torch.Tensor | None,
                cache: StaticKVCache | None, layer: int, slots: torch.Tensor | None) -> torch.Tensor:
        """``x: [R, T, dim]``; ``rotation: [R, T, 1, head_dim/2]`` complex; ``mask``: ``[R, 1, T, W]``
        additive (0 / −inf, ``W <= cache.slots``: only the first ``W`` slots are attended) or bool, or
        ``None`` (causal over ``x`` itself)."""
        R, T, _ = x.shape
        H, Hkv, D = self.n_head, self.n_kv_head, self.head_dim
        qkv = linear(self.wqkv, x)
        # Queries and keys rotate together (one kernel), then split; values stay a view of qkv.
        qk = apply_rope(qkv[..., : (H + Hkv) * D].view(R, T, H + Hkv, D), rotation)
        q = qk[:, :, :H].transpose(1, 2)
        k = qk[:, :, H:].transpose(1, 2)
        v = qkv[..., (H + Hkv) * D:].view(R, T, Hkv, D).transpose(1, 2)
        if cache is not None:
            k, v = cache.write(layer, slots, k, v)  # full buffers [R, Hkv, S, D]
            if mask is not None and mask.shape[-1] < k.shape[2]:  # a narrow mask: attend to its width only
                k, v = k[:, :, : mask.shape[-1]], v[:, :, : mask.shape[-1]]
        if Hkv != H:
            k = k.repeat_interleave(H // Hkv, dim=1)
            v = v.repeat_interleave(H // Hkv, dim=1)
        out = F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, is_causal=mask is None,
            dropout_p=self.attn_dropout_p if self.training else 0.0,
        )
        out = linear(self.wo, out.transpose(1, 2).reshape(R, T, self.dim))
        return self.resid_dropout(out) if self.training else out


class TransformerBlock(nn.Module):
    def __init__(self, cfg: dict, drop_path: float):
        super().__init__()
        self.attention = Attention(cfg["dim"], cfg["n_head"], cfg["n_kv_head"] or cfg["n_head"],
                                   cfg["attn_dropout_p"], cfg["resid_dropout_p"])
        self.feed_forward = FeedForward(cfg["dim"], cfg["multiple_of"], cfg["ffn_dim_multiplier"],
                                        cfg["ffn_dropout_p"])
        self.attention_norm = RMSNorm(cfg["dim"], eps=cfg["norm_eps"])
        self.ffn_norm = RMSNorm(cfg["dim"], eps=cfg["norm_eps"])
        self.drop_path = DropPath(drop_path) if drop_path > 0 else nn.Identity()

    def forward(self, x, rotation, mask, cache, layer, slots):
        if self.training:
            h = x + self.drop_path(self.attention(self.attention_norm(x), rotation, mask, cache, layer, slots))
            return h + self.drop_path(self.feed_forward(self.ffn_norm(h)))
        h = x + self.attention(self.attention_norm(x), rotation, mask, cache, layer, slots)
        return h + self.feed_forward(self.ffn_norm(h))


# ----------------------------------------------------------------------------- the model
class RotaryDecoderStack:
    """The decode core of arvis's rotary transformer backbones (LlamaGen's GPT, the video model): the static
    cache they decode into and the blocks run at explicit slots with an explicit mask.

    A host class provides ``layers`` (:class:`TransformerBlock`), ``tok_embeddings``, ``tok_dropout``,
    ``norm``, ``output``, ``layout``, its rotary table ``_rope`` and a ``_rotation_on`` dict (per-device cache).
    """

    def allocate_cache(self, rows: int, dtype: torch.dtype | None = None,
                       device: torch.device | str | None = None, extra_slots: int = 0) -> StaticKVCache:
        """A static cache for ``rows`` rows and every slot of the layout (rounded up to 8 like LlamaGen), plus
        ``extra_slots`` scratch slots after them (inputs at a position other than their slot: trees)."""
        p = next(self.parameters())
        a = self.layers[0].attention if len(self.layers) else None
        heads = a.n_kv_head if a else 1
        head_dim = a.head_dim if a else 1
        slots = find_multiple(self.layout.max_slots, 8) + extra_slots
        return StaticKVCache(len(self.layers), rows, heads, slots, head_dim,
                             dtype or p.dtype, device or p.device)

    def forward_tokens(self, tokens: torch.Tensor, slots: torch.Tensor, cache: StaticKVCache,
                       attend_mask: torch.Tensor, positions: torch.Tensor | None = None) -> torch.Tensor:
        """Evaluate ``tokens: [R, T]`` at absolute ``slots: [R, T]``, attending where ``attend_mask: [R, T, S]``;
        ``positions [R, T]``: the slots whose rotary positions the inputs take (default ``slots``).

        Returns fp32 logits ``[R, T, V]``; query ``t`` predicts the token after ``tokens[:, t]``.
        """
        return self._run(self.tok_embeddings(tokens), slots, cache, attend_mask, positions)

    def _run(self, h: torch.Tensor, slots: torch.Tensor, cache: StaticKVCache | None,
             mask: torch.Tensor | None, positions: torch.Tensor | None = None) -> torch.Tensor:
        """Blocks, norm and head over ``h: [R, T, dim]`` at ``slots: [R, T]`` (rotary positions ``positions``,
        default ``slots``); ``mask: [R, T, W]`` bool (``W <= cache.slots``) or ``None`` (causal). Returns fp32
        logits ``[R, T, V]``."""
        if self.training:
            h = self.tok_dropout(h)
        rotation = self._rotation_on.get(h.device)
        if rotation is None:  # [slots, head_dim / 2] complex64, built on first use
            rotation = self._rotation_on[h.device] = rope_rotation(self._rope).to(h.device)
        rotation = rotation[slots if positions is None else positions].unsqueeze(2)  # [R, T, 1, hd/2]
        if mask is not None:  # additive form once for all layers (SDPA converts a bool mask in every call)
            mask = torch.where(mask, 0.0, float("-inf")).to(h.dtype).unsqueeze(1)  # [R, 1, T, W]
        for i, layer in enumerate(self.layers):
            h = layer(h, rotation, mask, cache, i, slots)
        return linear(self.output, self.norm(h)).float()


class LlamaGenTransformer(RotaryDecoderStack, CheckedFolderMixin, ModelMixin, ConfigMixin):
    """LlamaGen GPT (class- or caption-conditional), implementing arvis's backbone protocol.

    The configuration mirrors the official ``ModelArgs`` (KV-cache sizes are gone: caches belong to
    the caller), plus ``class_names`` (display names of the class ids; config only, no weights).
    Build a preset with :meth:`from_preset`, load official checkpoints with
    :func:`arvis.models.checkpoint.load_llamagen_checkpoint`, diffusers-style folders with
    ``from_pretrained``. Every configuration is checked against :data:`LLAMAGEN_CONFIG_BOUNDS` first
    (a folder's also against its weights' shapes), so no value can make construction reserve more
    memory than a real model needs.

    Example:
        >>> model = LlamaGenTransformer.from_preset("GPT-B", vocab_size=16384, block_size=256)
        >>> model.layout.grid
        (16, 16)
    """

    config_name = "config.json"
    config_bounds = LLAMAGEN_CONFIG_BOUNDS

    @register_to_config
    def __init__(
        self,
        dim: int = 4096,
        n_layer: int = 32,
        n_head: int = 32,
        n_kv_head: int | None = None,
        multiple_of: int = 256,
        ffn_dim_multiplier: float | None = None,
        rope_base: float = 10000.0,
        norm_eps: float = 1e-5,
        initializer_range: float = 0.02,
        token_dropout_p: float = 0.1,
        attn_dropout_p: float = 0.0,
        resid_dropout_p: float = 0.1,
        ffn_dropout_p: float = 0.1,
        drop_path_rate: float = 0.0,
        num_classes: int = 1000,
        caption_dim: int = 2048,
        class_dropout_prob: float = 0.1,
        model_type: str = "c2i",
        vocab_size: int = 16384,
        cls_token_num: int = 1,
        block_size: int = 256,
        class_names: list[str] | None = None,
    ):
        super().__init__()
        check_config(self.config, LLAMAGEN_CONFIG_BOUNDS, source=type(self).__name__)
        if class_names is not None and len(class_names) != num_classes:
            raise ValueError(f"class_names has {len(class_names)} names for num_classes={num_classes}")
        if model_type not in MODEL_TYPES:
            raise ValueError(f"model_type must be one of {MODEL_TYPES}, got {model_type!r}")
        grid = math.isqrt(block_size)
        if grid * grid != block_size:
            raise ValueError(f"block_size must be a square number of tokens (16*16=256…), got {block_size}")
        if cls_token_num < 1:
            raise ValueError(f"cls_token_num must be >= 1, got {cls_token_num}")
        if model_type == "c2i" and cls_token_num != 1:
            # The official c2i embedder makes one vector per label; extra slots would be empty.
            raise ValueError(f"c2i models take cls_token_num=1, got {cls_token_num}")
        if dim % n_head or (dim // n_head) % 4:
            raise ValueError(f"dim / n_head must be a multiple of 4 for 2-D RoPE (dim={dim}, n_head={n_head})")
        cfg = dict(dim=dim, n_head=n_head, n_kv_head=n_kv_head, multiple_of=multiple_of,
                   ffn_dim_multiplier=ffn_dim_multiplier, norm_eps=norm_eps, attn_dropout_p=attn_dropout_p,
                   resid_dropout_p=resid_dropout_p, ffn_dropout_p=ffn_dropout_p)

        if model_type == "c2i":
            self.cls_embedding = LabelEmbedder(num_classes, dim, class_dropout_prob)
        else:
            self.cls_embedding = CaptionEmbedder(caption_dim, dim, cls_token_num)
        self.tok_embeddings = nn.Embedding(vocab_size, dim)
        self.tok_dropout = nn.Dropout(token_dropout_p)
        rates = [drop_path_rate * i / max(n_layer - 1, 1) for i in range(n_layer)]  # = torch.linspace
        self.layers = nn.ModuleList([TransformerBlock(cfg, r) for r in rates])
        self.norm = RMSNorm(dim, eps=norm_eps)
        self.output = nn.Linear(dim, vocab_size, bias=False)

        # The rotary table is a constant, not a buffer (not in the state dict, as in the official
        # model), built on first use: never for a meta-device construction (shape checks, diffusers'
        # empty-weight loading), and only after the configuration was checked.
        self._rope_table: torch.Tensor | None = None
        self._rotation_on: dict[torch.device, torch.Tensor] = {}  # complex rotation constant, per device
        self._layout = TokenLayout(grid=(grid, grid), vocab_size=vocab_size, condition_length=cls_token_num)
        self.init_weights()

    # ------------------------------------------------------------------ construction helpers
    @classmethod
    def from_preset(cls, name: str, **overrides) -> LlamaGenTransformer:
        """Build an official preset (``GPT-B`` … ``GPT-7B``); keyword overrides go to the config."""
        if name not in GPT_PRESETS:
            raise ValueError(f"unknown LlamaGen preset {name!r}; known presets: {', '.join(GPT_PRESETS)}")
        p = GPT_PRESETS[name]
        return cls(n_layer=p.n_layer, n_head=p.n_head, dim=p.dim, **overrides)

    def init_weights(self, generator: torch.Generator | None = None) -> None:
        """LlamaGen's initialisation (normal(0, initializer_range), zero output head) from ``generator``.

        Meta tensors (diffusers' empty-weight construction) are left alone.
        """
        std = self.config.initializer_range
        for module in self.modules():
            if isinstance(module, nn.Linear | nn.Embedding) and not module.weight.is_meta:
                with torch.no_grad():
                    module.weight.normal_(0.0, std, generator=generator)
        if not self.output.weight.is_meta:
            nn.init.zeros_(self.output.weight)
        if isinstance(self.cls_embedding, CaptionEmbedder) and not self.cls_embedding.uncond_embedding.is_meta:
            d = self.config.caption_dim
            with torch.no_grad():
                self.cls_embedding.uncond_embedding.normal_(0.0, d ** -0.5, generator=generator)

    @property
    def _rope(self) -> torch.Tensor:
        """``[cls_token_num + block_size, head_dim // 2, 2]`` rotary table (cos, sin), built once on first use."""
        if self._rope_table is None:
            c = self.config
            self._rope_table = rope_table_2d(self._layout.grid[0], c.dim // c.n_head, c.rope_base, c.cls_token_num)
        return self._rope_table

    # ------------------------------------------------------------------ protocol
    @property
    def layout(self) -> TokenLayout:
        return self._layout

    @property
    def num_classes(self) -> int:
        return self.config.num_classes

    @property
    def is_class_conditional(self) -> bool:
        return self.config.model_type == "c2i"

    @property
    def supports_cfg(self) -> bool:
        return not self.is_class_conditional or self.cls_embedding.has_null

    def null_condition(self, condition: Condition) -> Condition:
        """The unconditional half of a CFG pair: the null class, or the unconditional caption.

        LlamaGen keeps the conditional embedding mask for the unconditional rows; so do we.
        """
        if self.is_class_conditional:
            if not self.cls_embedding.has_null:
                raise ValueError("this model was trained without a null class (class_dropout_prob=0); "
                                 "guidance_scale must be 1.0")
            return Condition(class_labels=torch.full_like(condition.class_labels, self.config.num_classes))
        unc = self.cls_embedding.uncond_embedding.to(condition.embeddings.dtype)
        return Condition(embeddings=unc.expand_as(condition.embeddings).clone(), mask=condition.mask)

    def embed_condition(self, condition: Condition) -> torch.Tensor:
        """``[B, C, dim]`` condition vectors for the condition slots."""
        if self.is_class_conditional:
            labels = condition.class_labels
            if labels is None:
                raise ValueError("class-conditional model: pass class_labels")
            return self.cls_embedding(labels)[:, : self.config.cls_token_num]
        if condition.embeddings is None:
            raise ValueError("text-conditional model: pass caption embeddings (prompt_embeds)")
        emb = condition.embeddings
        C, D = self.config.cls_token_num, self.config.caption_dim
        if emb.shape[1:] != (C, D):
            raise ValueError(f"prompt_embeds must have shape [batch, {C}, {D}], got {tuple(emb.shape)}")
        return self.cls_embedding(emb.to(self.output.weight.dtype))

    def condition_mask(self, condition: Condition) -> torch.Tensor:
        """``[B, C]`` bool: which condition slots hold a real token."""
        B, C = condition.batch_size, self.config.cls_token_num
        device = self.output.weight.device
        if self.is_class_conditional or condition.mask is None:
            return torch.ones(B, C, dtype=torch.bool, device=device)
        return condition.mask.to(device=device, dtype=torch.bool)

    # The engine may pass masks narrower than the cache (arvis.models.protocol: narrow_masks).
    narrow_masks = True

    def prefill(self, condition: Condition, cache: StaticKVCache) -> tuple[torch.Tensor, torch.Tensor]:
        """Write the condition into slots ``[0, C)``.

        Returns:
            logits ``[R, V]`` predicting sequence index 0, and the condition-slot validity ``[R, C]``.
        """
        h = self.embed_condition(condition)
        R, C = h.shape[:2]
        valid = self.condition_mask(condition)  # [R, C]
        slots = torch.arange(C, device=h.device).expand(R, C)
        # Causal over the condition, padded keys masked, every query sees itself (LlamaGen's eye trick).
        causal = torch.ones(C, C, dtype=torch.bool, device=h.device).tril()
        mask = causal & valid[:, None, :]
        mask = mask | torch.eye(C, dtype=torch.bool, device=h.device)
        logits = self._run(h, slots, cache, mask)
        return logits[:, -1], valid

    # ------------------------------------------------------------------ training
    def forward(self, tokens: torch.Tensor, condition: Condition,
                drop_condition: torch.Tensor | None = None) -> torch.Tensor:
        """Teacher-forced logits for training: ``tokens: [B, N]`` → ``[B, N, V]`` (fp32).

        Args:
            tokens: the full token sequence; position ``j`` of the output predicts ``tokens[:, j]``.
            condition: labels or caption embeddings.
            drop_condition: ``[B]`` bool, replace the condition by the null one (CFG training);
                the caller draws it from its own generator.
        """
        if drop_condition is not None and drop_condition.any():
            null = self.null_condition(condition)
            if self.is_class_conditional:
                labels = torch.where(drop_condition, null.class_labels, condition.class_labels)
                condition = Condition(class_labels=labels)
            else:
                emb = torch.where(drop_condition[:, None, None], null.embeddings, condition.embeddings)
                condition = Condition(embeddings=emb, mask=condition.mask)
        cond = self.embed_condition(condition)
        B, C = cond.shape[:2]
        h = torch.cat([cond, self.tok_embeddings(tokens[:, :-1])], dim=1)
        L = h.shape[1]
        slots = torch.arange(L, device=h.device).expand(B, L)
        mask = None
        if not self.is_class_conditional and condition.mask is not None:
            valid = torch.cat([self.condition_mask(condition),
                               torch.ones(B, L - C, dtype=torch.bool, device=h.device)], dim=1)
            mask = torch.ones(L, L, dtype=torch.bool, device=h.device).tril() & valid[:, None, :]
            mask = mask | torch.eye(L, dtype=torch.bool, device=h.device)
        logits = self._run(h, slots, None, mask)
        return logits[:, C - 1:]
