"""A LlamaGen-style video GPT over a ``T x H x W`` token layout, with 3-D rotary positions.

The backbone of arvis's shipped video model: LlamaGen's Llama blocks (pre-RMSNorm, SwiGLU, fused
``wqkv``, no biases, untied head; :mod:`arvis.models.llamagen`'s modules, reused as they are) over the
tokens of a clip in raster order — frame by frame, each frame row by row — conditioned on one class
slot. What differs from the image model:

- *3-D RoPE*: each head's rotary pairs are split in three groups that rotate with the token's frame,
  row and column index (:func:`rope_table_3d`); the condition slot gets the identity rotation (unlike
  LlamaGen's all-zero condition rows, which need not be kept here: no official weights exist);
- the layout is ``TokenLayout(grid=(T, H, W))``: sequence index ``j`` is frame ``j // (H W)``, row
  ``(j // W) % H``, column ``j % W``. Every engine method works on it unchanged; the temporal drafters
  read the same cell one frame back (``j - H W``).

Image-to-video (a given first frame) needs no second model: :class:`FramePrefix` is a view of a
backbone whose condition is the class slot *plus* the first frame's tokens, written at their own slots
by the prefill; the engine then decodes the remaining frames (``grid = (T - 1, H, W)``) with any method.

Example:
    >>> model = VideoTransformer(dim=64, n_layer=2, n_head=4, num_frames=4, frame_size=4, vocab_size=32)
    >>> model.layout.grid
    (4, 4, 4)
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from diffusers import ConfigMixin, ModelMixin
from diffusers.configuration_utils import register_to_config
from torch import nn

from arvis.models.llamagen import (
    LabelEmbedder,
    RMSNorm,
    RotaryDecoderStack,
    TransformerBlock,
)
from arvis.models.protocol import Condition, StaticKVCache, TokenLayout
from arvis.utils.config_check import Bound, CheckedFolderMixin, check_config

__all__ = ["VIDEO_CONFIG_BOUNDS", "FramePrefix", "VideoTransformer", "rope_table_3d"]

_DROPOUT = Bound.number(0.0, 1.0, open_high=True)
#: What each configuration field may hold (:mod:`arvis.utils.config_check`), checked before allocation.
VIDEO_CONFIG_BOUNDS: dict[str, Bound] = {
    "dim": Bound.integer(8, 16384),
    "n_layer": Bound.integer(1, 256),
    "n_head": Bound.integer(1, 256),
    "multiple_of": Bound.integer(1, 65536),
    "rope_base": Bound.number(1.0, 1e12, open_low=True),
    "norm_eps": Bound.number(0.0, 1.0, open_low=True, open_high=True),
    "initializer_range": Bound.number(0.0, 10.0),
    "token_dropout_p": _DROPOUT,
    "resid_dropout_p": _DROPOUT,
    "ffn_dropout_p": _DROPOUT,
    "num_classes": Bound.integer(1, 1_000_000),
    "class_dropout_prob": _DROPOUT,
    "vocab_size": Bound.integer(2, 1 << 20),
    "num_frames": Bound.integer(1, 1024),
    "frame_size": Bound.integer(1, 256, note="tokens per frame side"),
    "class_names": Bound.strings(1_000_000, optional=True),
}
_MAX_TOKENS = 1 << 16  # T * H * W: far beyond what this model family is meant for, still a bounded cache


# ----------------------------------------------------------------------------- rotary positions
def rope_table_3d(frames: int, height: int, width: int, head_dim: int, base: float,
                  condition_length: int) -> torch.Tensor:
    """Rotation table ``[condition_length + T*H*W, head_dim // 2, 2]`` (cos, sin) for raster-ordered clips.

    The ``head_dim // 2`` rotary pairs are split into a temporal group (a quarter, at least one pair)
    and two equal spatial groups (rows, columns); each group uses RoPE's geometric frequencies over its
    own pairs. Condition slots get the identity rotation (cos 1, sin 0).
    """
    half = head_dim // 2
    n_t = max(1, half // 4)
    n_s = (half - n_t) // 2
    n_t = half - 2 * n_s  # the odd pair, if any, goes to time
    cpu = torch.device("cpu")  # a constant, built on the CPU even under a meta-device context

    def angles(n_positions: int, n_pairs: int) -> torch.Tensor:
        freqs = 1.0 / (base ** (torch.arange(n_pairs, device=cpu, dtype=torch.float32) / max(n_pairs, 1)))
        return torch.outer(torch.arange(n_positions, device=cpu, dtype=torch.float32), freqs)

    t, h, w = angles(frames, n_t), angles(height, n_s), angles(width, n_s)
    grid = torch.cat([
        t[:, None, None, :].expand(frames, height, width, n_t),
        h[None, :, None, :].expand(frames, height, width, n_s),
        w[None, None, :, :].expand(frames, height, width, n_s),
    ], dim=-1).reshape(frames * height * width, half)
    table = torch.stack([torch.cos(grid), torch.sin(grid)], dim=-1)
    identity = torch.stack([torch.ones(condition_length, half), torch.zeros(condition_length, half)], dim=-1)
    return torch.cat([identity, table])


# ----------------------------------------------------------------------------- the model
class VideoTransformer(RotaryDecoderStack, CheckedFolderMixin, ModelMixin, ConfigMixin):
    """Class-conditional video GPT (LlamaGen blocks, 3-D RoPE) implementing arvis's backbone protocol.

    Args:
        dim, n_layer, n_head, multiple_of, rope_base, norm_eps, initializer_range: as LlamaGen's GPT
            (``dim / n_head`` must be a multiple of 4).
        token_dropout_p, resid_dropout_p, ffn_dropout_p: training dropouts.
        num_classes: condition classes; with ``class_dropout_prob > 0`` one more row is the null class (CFG).
        vocab_size: tokenizer codebook size.
        num_frames: ``T`` token frames per clip; ``frame_size``: ``H = W`` tokens per frame side.
        class_names: optional display names of the classes.
    """

    config_name = "config.json"
    config_bounds = VIDEO_CONFIG_BOUNDS
    narrow_masks = False  # attention masks always span the whole cache

    @register_to_config
    def __init__(
        self,
        dim: int = 256,
        n_layer: int = 6,
        n_head: int = 4,
        multiple_of: int = 64,
        rope_base: float = 10000.0,
        norm_eps: float = 1e-5,
        initializer_range: float = 0.02,
        token_dropout_p: float = 0.1,
        resid_dropout_p: float = 0.1,
        ffn_dropout_p: float = 0.1,
        num_classes: int = 24,
        class_dropout_prob: float = 0.1,
        vocab_size: int = 1024,
        num_frames: int = 8,
        frame_size: int = 8,
        class_names: list[str] | None = None,
    ):
        super().__init__()
        check_config(self.config, VIDEO_CONFIG_BOUNDS, source=type(self).__name__)
        if class_names is not None and len(class_names) != num_classes:
            raise ValueError(f"class_names has {len(class_names)} names for num_classes={num_classes}")
        if dim % n_head or (dim // n_head) % 4 or dim // n_head < 8:
            raise ValueError(f"dim / n_head must be a multiple of 4 and >= 8 for 3-D RoPE (dim={dim}, n_head={n_head})")
        if num_frames * frame_size * frame_size > _MAX_TOKENS:
            raise ValueError(f"num_frames * frame_size**2 must be <= {_MAX_TOKENS}, got "
                             f"{num_frames} x {frame_size}^2")
        cfg = dict(dim=dim, n_head=n_head, n_kv_head=None, multiple_of=multiple_of, ffn_dim_multiplier=None,
                   norm_eps=norm_eps, attn_dropout_p=0.0, resid_dropout_p=resid_dropout_p,
                   ffn_dropout_p=ffn_dropout_p)
        self.cls_embedding = LabelEmbedder(num_classes, dim, class_dropout_prob)
        self.tok_embeddings = nn.Embedding(vocab_size, dim)
        self.tok_dropout = nn.Dropout(token_dropout_p)
        self.layers = nn.ModuleList([TransformerBlock(cfg, 0.0) for _ in range(n_layer)])
        self.norm = RMSNorm(dim, eps=norm_eps)
        self.output = nn.Linear(dim, vocab_size, bias=False)
        self._layout = TokenLayout(grid=(num_frames, frame_size, frame_size), vocab_size=vocab_size,
                                   condition_length=1)
        # A constant, not a buffer (not in the state dict), built on first use (never on the meta device).
        self._rope_table: torch.Tensor | None = None
        self._rotation_on: dict[torch.device, torch.Tensor] = {}  # complex rotation constant, per device
        self.init_weights()

    def init_weights(self, generator: torch.Generator | None = None) -> None:
        """LlamaGen's initialisation (normal(0, initializer_range), zero output head) from ``generator``."""
        std = self.config.initializer_range
        for module in self.modules():
            if isinstance(module, nn.Linear | nn.Embedding) and not module.weight.is_meta:
                with torch.no_grad():
                    module.weight.normal_(0.0, std, generator=generator)
        if not self.output.weight.is_meta:
            nn.init.zeros_(self.output.weight)

    @property
    def _rope(self) -> torch.Tensor:
        if self._rope_table is None:
            T, H, W = self._layout.grid
            self._rope_table = rope_table_3d(T, H, W, self.config.dim // self.config.n_head, self.config.rope_base, 1)
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
        return True

    @property
    def supports_cfg(self) -> bool:
        return self.cls_embedding.has_null

    def null_condition(self, condition: Condition) -> Condition:
        """The unconditional half of a CFG pair: the null class."""
        if not self.supports_cfg:
            raise ValueError("this model was trained without a null class (class_dropout_prob=0); "
                             "guidance_scale must be 1.0")
        return Condition(class_labels=torch.full_like(condition.class_labels, self.config.num_classes))

    def embed_condition(self, condition: Condition) -> torch.Tensor:
        """``[B, 1, dim]`` class vectors."""
        if condition.class_labels is None:
            raise ValueError("class_labels: the video model is class-conditional")
        return self.cls_embedding(condition.class_labels)

    def prefill(self, condition: Condition, cache: StaticKVCache) -> tuple[torch.Tensor, torch.Tensor]:
        """Write the class slot; returns logits ``[R, V]`` predicting sequence index 0 and validity ``[R, 1]``."""
        h = self.embed_condition(condition)
        R = h.shape[0]
        slots = torch.zeros(R, 1, dtype=torch.long, device=h.device)
        mask = F.pad(torch.ones(R, 1, 1, dtype=torch.bool, device=h.device), (0, cache.slots - 1))
        logits = self._run(h, slots, cache, mask)
        return logits[:, -1], torch.ones(R, 1, dtype=torch.bool, device=h.device)

    # ------------------------------------------------------------------ training
    def forward(self, tokens: torch.Tensor, condition: Condition,
                drop_condition: torch.Tensor | None = None) -> torch.Tensor:
        """Teacher-forced logits: ``tokens: [B, N]`` → ``[B, N, V]`` fp32 (output ``j`` predicts ``tokens[:, j]``).

        Args:
            tokens: whole clips in raster order.
            condition: class labels ``[B]``.
            drop_condition: ``[B]`` bool, use the null class instead (CFG training; the caller draws it).
        """
        labels = condition.class_labels
        if drop_condition is not None:
            labels = torch.where(drop_condition, self.config.num_classes, labels)
        h = torch.cat([self.cls_embedding(labels), self.tok_embeddings(tokens[:, :-1])], dim=1)
        B, L = h.shape[:2]
        slots = torch.arange(L, device=h.device).expand(B, L)
        return self._run(h, slots, None, None)


# ----------------------------------------------------------------------------- image-to-video
class FramePrefix(nn.Module):
    """A backbone view that conditions on given leading frames (image-to-video) by writing them in the prefill.

    The view's condition is the backbone's condition plus ``prefix`` tokens (the first ``k`` frames,
    raster order); its layout generates the remaining ``T - k`` frames. Slots are the backbone's own, so
    positions, masks and caches need no translation: view sequence index ``j`` is backbone index
    ``k H W + j``. Both halves of a CFG pair see the given frames (only the class is dropped).

    Args:
        backbone: a :class:`VideoTransformer` (or any backbone with a ``(T, H, W)`` layout and a
            ``forward_tokens`` that writes any slots).
        prefix: ``[B, k * H * W]`` int64 token ids of the given frames, one row per sample.
    """

    def __init__(self, backbone: VideoTransformer, prefix: torch.Tensor):
        super().__init__()
        T, H, W = backbone.layout.grid
        if prefix.ndim != 2 or prefix.shape[1] % (H * W) or not 0 < prefix.shape[1] < T * H * W:
            raise ValueError(f"prefix: expected [batch, k*{H * W}] tokens of 1..{T - 1} whole frames, got shape "
                             f"{tuple(prefix.shape)}")
        if int(prefix.min()) < 0 or int(prefix.max()) >= backbone.layout.vocab_size:
            raise ValueError(f"prefix: token ids must be in [0, {backbone.layout.vocab_size})")
        self.backbone = backbone
        self.prefix = prefix
        k = prefix.shape[1] // (H * W)
        inner = backbone.layout
        self._layout = TokenLayout(grid=(T - k, H, W), vocab_size=inner.vocab_size,
                                   condition_length=inner.condition_length + prefix.shape[1],
                                   image_token_range=inner.image_token_range)

    @property
    def layout(self) -> TokenLayout:
        return self._layout

    @property
    def supports_cfg(self) -> bool:
        return self.backbone.supports_cfg

    narrow_masks = False

    def null_condition(self, condition: Condition) -> Condition:
        return self.backbone.null_condition(condition)

    def allocate_cache(self, rows: int, dtype: torch.dtype | None = None,
                       device: torch.device | str | None = None, extra_slots: int = 0) -> StaticKVCache:
        return self.backbone.allocate_cache(rows, dtype, device, extra_slots=extra_slots)

    def prefill(self, condition: Condition, cache: StaticKVCache) -> tuple[torch.Tensor, torch.Tensor]:
        """The backbone's prefill, then one forward over the given frames (causal among themselves)."""
        _, valid = self.backbone.prefill(condition, cache)
        R, C = valid.shape
        B, P = self.prefix.shape
        if R % B:
            raise ValueError(f"prefix: {B} rows of frames for {R} condition rows")
        tokens = self.prefix.to(valid.device).repeat(R // B, 1)  # both CFG halves see the frames
        slots = (C + torch.arange(P, device=valid.device)).expand(R, P)
        ids = torch.arange(cache.slots, device=valid.device)
        mask = (ids >= C) & (ids <= slots[..., None])  # [R, P, S]: causal among the given frames
        mask[..., :C] = valid[:, None, :]  # and the valid condition slots
        logits = self.backbone.forward_tokens(tokens, slots, cache, mask)
        return logits[:, -1], torch.cat([valid, torch.ones(R, P, dtype=torch.bool, device=valid.device)], dim=1)

    def forward_tokens(self, tokens: torch.Tensor, slots: torch.Tensor, cache: StaticKVCache,
                       attend_mask: torch.Tensor, positions: torch.Tensor | None = None) -> torch.Tensor:
        return self.backbone.forward_tokens(tokens, slots, cache, attend_mask, positions)
