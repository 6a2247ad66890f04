"""A small word-level text encoder: the caption-feature source for arvis's shipped text-conditional GPT.

It plays the role flan-t5 plays for LlamaGen's t2i models: prompts → per-token features
``[B, C, D]`` plus a mask, left-padded to the GPT's condition length ``C``. The vocabulary is a fixed
word list (the caption grammar of :mod:`arvis.data.scenes`); an unknown word is an error naming it.
Trained jointly with the GPT by ``arvis.training.train_gpt``.
"""

from __future__ import annotations

import torch
from diffusers import ConfigMixin, ModelMixin
from diffusers.configuration_utils import register_to_config
from torch import nn

from arvis.utils.config_check import Bound, CheckedFolderMixin, check_config

# What each configuration field may hold (arvis.utils.config_check), checked before anything is allocated.
TEXT_ENCODER_CONFIG_BOUNDS: dict[str, Bound] = {
    "vocabulary": Bound.strings(1_000_000),
    "dim": Bound.integer(1, 16384),
    "num_layers": Bound.integer(1, 256),
    "num_heads": Bound.integer(1, 256),
    "max_length": Bound.integer(1, 65536),
}


class WordTextEncoder(CheckedFolderMixin, ModelMixin, ConfigMixin):
    """Word embeddings + a small Transformer encoder (pre-norm), padding masked out.

    Args:
        vocabulary: the known words (id 0 is reserved for padding).
        dim: feature width (the GPT's ``caption_dim``).
        num_layers, num_heads: encoder depth and heads.
        max_length: longest prompt, in words.
    """

    config_bounds = TEXT_ENCODER_CONFIG_BOUNDS

    @register_to_config
    def __init__(self, vocabulary: list[str], dim: int = 128, num_layers: int = 2, num_heads: int = 4,
                 max_length: int = 32):
        super().__init__()
        check_config(self.config, TEXT_ENCODER_CONFIG_BOUNDS, source=type(self).__name__)
        if dim % num_heads:
            raise ValueError(f"dim ({dim}) must be divisible by num_heads ({num_heads})")
        if len(set(vocabulary)) != len(vocabulary) or not vocabulary:
            raise ValueError("vocabulary must be a non-empty list of distinct words")
        self.word_to_id = {w: i + 1 for i, w in enumerate(vocabulary)}
        self.embed = nn.Embedding(len(vocabulary) + 1, dim, padding_idx=0)
        self.position = nn.Embedding(max_length, dim)
        layer = nn.TransformerEncoderLayer(dim, num_heads, dim_feedforward=4 * dim, dropout=0.0, batch_first=True,
                                           norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, num_layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(dim)

    def tokenize(self, prompts: list[str], length: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Word ids ``[B, length]`` left-padded with 0, and the mask of real words."""
        max_len = min(length, self.config.max_length)
        ids = torch.zeros(len(prompts), length, dtype=torch.long)
        for b, prompt in enumerate(prompts):
            if not isinstance(prompt, str):
                raise ValueError(f"prompt: expected a string, got {type(prompt).__name__}")
            words = prompt.lower().replace(",", " ").split()
            unknown = [w for w in words if w not in self.word_to_id]
            if unknown:
                raise ValueError(f"prompt: unknown word(s) {unknown[:5]}; this text encoder knows "
                                 f"{len(self.word_to_id)} words (arvis.data.scenes.VOCABULARY)")
            if not words:
                raise ValueError("prompt: empty")
            if len(words) > max_len:
                raise ValueError(f"prompt: {len(words)} words, at most {max_len} allowed")
            ids[b, length - len(words):] = torch.tensor([self.word_to_id[w] for w in words])
        return ids, ids > 0

    def forward(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """``ids, mask: [B, L]`` (left-padded) → features ``[B, L, dim]`` (zero at padding)."""
        # Positions count from the first real word, so left padding does not shift them.
        pos = (mask.long().cumsum(1) - 1).clamp(0, self.config.max_length - 1)
        h = self.embed(ids) + self.position(pos)
        # A row without words would attend to nothing: let padding attend to itself in that case.
        key_padding = ~mask
        key_padding[:, -1] &= mask.any(1)
        h = self.encoder(h, src_key_padding_mask=key_padding)
        return self.norm(h) * mask[..., None]

    @torch.no_grad()
    def encode(self, prompts: list[str], length: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Prompts → ``(features [B, length, dim], mask [B, length])`` for ``LlamaGenPipeline``."""
        ids, mask = self.tokenize(prompts, length)
        ids, mask = ids.to(self.device), mask.to(self.device)
        return self(ids, mask), mask
