"""Janus / Janus-Pro (DeepSeek, arXiv:2410.13848, 2501.17811) behind arvis's backbone protocol, through transformers.

Janus is one Llama decoder that reads text and writes images. transformers' ``JanusForConditionalGeneration``
holds the decoder (``model.language_model``), the understanding encoder (SigLIP, unused here), and three
generation-only parts: ``generation_embeddings`` + ``generation_aligner`` (a VQ code → the decoder's input),
``generation_head`` (the decoder's output → logits over the ``K`` codes; Janus-Pro: 16,384) and the VQ decoder
(``vqmodel``). Its image ``generate(generation_mode="image")`` reads ``prompt<begin_of_image>`` and writes
``num_image_tokens`` codes (Janus-Pro: 576 = 24 × 24 at 384 px) in raster order, one per forward; classifier-free
guidance doubles the batch: the unconditional rows are the prompt with every token but BOS and BOI replaced by
the pad token (same length, same attention mask), and the logits combine as ``u + s·(c − u)``.

arvis drives the decoder from the outside (:class:`~arvis.models.hf_backbone.PromptTokenBackbone`: arvis's own
slot cache through transformers' public ``Cache`` API, explicit positions and 4-D masks, no patching). The
layout ids are the VQ codes themselves (no structural tokens), the CFG pair's unconditional rows are built from
the prompts exactly as ``generate`` builds them (:meth:`JanusBackbone.null_condition`), so greedy decoding gives
``generate``'s tokens.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from arvis.models.hf_backbone import PromptTokenBackbone
from arvis.models.protocol import Condition, TokenLayout

# Janus's special tokens under their official names (deepseek-community/Janus-Pro-*-hf tokenizers).
BOS_TOKEN = "<｜begin▁of▁sentence｜>"
EOS_TOKEN = "<｜end▁of▁sentence｜>"
PAD_TOKEN = "<｜▁pad▁｜>"
IMAGE_START = "<begin_of_image>"
IMAGE_END = "<end_of_image>"
IMAGE_PLACEHOLDER = "<image_placeholder>"


@dataclass(frozen=True)
class JanusPromptTokens:
    """The token ids image generation needs: BOS and BOI stay in the unconditional prompt, the rest becomes PAD."""

    bos: int
    boi: int
    pad: int

    @classmethod
    def from_tokenizer(cls, tokenizer: Any) -> JanusPromptTokens:
        """From a Janus tokenizer (its ``bos_token``, ``boi_token`` and ``pad_token``)."""
        boi = getattr(tokenizer, "boi_token", None)
        if boi is None or tokenizer.bos_token_id is None or tokenizer.pad_token_id is None:
            raise ValueError("tokenizer: a Janus tokenizer needs bos_token, pad_token and boi_token "
                             f"({IMAGE_START!r})")
        return cls(int(tokenizer.bos_token_id), int(tokenizer.convert_tokens_to_ids(boi)), int(tokenizer.pad_token_id))


def janus_grid(model_or_config: Any) -> int:
    """The side of a Janus model's square token grid (``vq_config.num_patches``; ``generate`` writes its square).

    ``ValueError`` when the vision config's ``num_image_tokens`` (what ``generate`` counts) is not that square.
    """
    config = getattr(model_or_config, "config", model_or_config)
    side = int(config.vq_config.num_patches)
    tokens = int(config.vision_config.num_image_tokens)
    if tokens != side * side:
        raise ValueError(f"config: vision_config.num_image_tokens={tokens} is not the VQ grid {side}x{side} "
                         f"(vision image_size // patch_size); transformers' generate would write {tokens} tokens")
    return side


def janus_layout(side: int, num_codes: int, condition_length: int) -> TokenLayout:
    """The token layout of a ``side × side`` Janus image after a ``condition_length``-slot prompt: raster order,
    the VQ codes as ids, no structural tokens."""
    return TokenLayout(grid=(side, side), vocab_size=num_codes, condition_length=condition_length)


def generation_parts(model: nn.Module) -> tuple[nn.Module, nn.Module, nn.Module, nn.Module]:
    """``(language_model, generation_embeddings, generation_aligner, generation_head)`` of a
    ``JanusForConditionalGeneration`` (or its inner ``JanusModel``)."""
    inner = getattr(model, "model", model)
    names = ("language_model", "generation_embeddings", "generation_aligner", "generation_head")
    parts = [getattr(inner, n, None) for n in names]
    if any(p is None for p in parts) or not hasattr(parts[0], "embed_tokens"):
        raise TypeError(f"model: expected a transformers JanusForConditionalGeneration, got {type(model).__name__}")
    return parts[0], parts[1], parts[2], parts[3]


def janus_config(text_vocab_size: int, hidden_size: int, num_layers: int, num_heads: int, num_kv_heads: int,
                 intermediate_size: int, num_codes: int, grid: int, vq: Mapping[str, Any] | None = None,
                 vision: Mapping[str, Any] | None = None, max_positions: int = 1024, pad_token_id: int = 0,
                 bos_token_id: int = 1, eos_token_id: int = 2, image_token_id: int = 3, rope_theta: float = 10000.0,
                 dropout: float = 0.0):
    """A ``JanusConfig`` for a small Janus-architecture model (tests, arvis's shipped model).

    Args:
        text_vocab_size: the tokenizer's size (the decoder's text vocabulary).
        hidden_size, num_layers, num_heads, num_kv_heads, intermediate_size: the Llama decoder; the generation
            aligner and head are sized to it (``projection_dim = image_token_embed_dim = hidden_size``).
        num_codes: the VQ codebook size ``K`` (the generation head's width).
        grid: the side of the square token grid (``vq_config.num_patches``, ``num_image_tokens = grid²``).
        vq: more ``JanusVQVAEConfig`` fields (``embed_dim``, ``base_channels``, ``channel_multiplier``…); the
            base channels and every level's width must be multiples of 32 (the VQ's GroupNorm has 32 groups).
        vision: more ``JanusVisionConfig`` fields. The understanding encoder is unused by image generation: by
            default it is the smallest that builds (width 8, one layer, patch side 1).
        max_positions: rotary positions the decoder supports (prompt + image tokens).
        pad_token_id, bos_token_id, eos_token_id, image_token_id: the tokenizer's ids.
        rope_theta: rotary base. dropout: attention dropout (training only).
    """
    from transformers import JanusConfig

    vq = dict(vq or {})
    base = int(vq.get("base_channels", 128))
    mult = list(vq.get("channel_multiplier", (1, 1, 2, 2, 4)))
    if any((base * m) % 32 for m in mult):
        raise ValueError(f"vq: every level's width (base_channels x channel_multiplier = {[base * m for m in mult]}) "
                         f"must be a multiple of 32 (the Janus VQ's GroupNorm has 32 groups)")
    vq.update(num_embeddings=num_codes, projection_dim=hidden_size, image_token_embed_dim=hidden_size)
    vision = {"hidden_size": 8, "num_hidden_layers": 1, "num_attention_heads": 1, "patch_size": 1, "mlp_ratio": 1.0,
              "depth": 1, **dict(vision or {})}
    vision.update(image_size=grid * int(vision["patch_size"]), num_image_tokens=grid * grid,
                  projection_dim=hidden_size)
    text = dict(model_type="llama", vocab_size=text_vocab_size, hidden_size=hidden_size,
                intermediate_size=intermediate_size, num_hidden_layers=num_layers, num_attention_heads=num_heads,
                num_key_value_heads=num_kv_heads, max_position_embeddings=max_positions, pad_token_id=pad_token_id,
                bos_token_id=bos_token_id, eos_token_id=eos_token_id, attention_dropout=dropout,
                rope_parameters={"rope_type": "default", "rope_theta": rope_theta})
    return JanusConfig(text_config=text, vision_config=vision, vq_config=vq, image_token_id=image_token_id)


def janus_generation_config(tokens: JanusPromptTokens, eos_token_id: int | None = None, guidance_scale: float = 5.0):
    """The ``GenerationConfig`` transformers' image ``generate`` reads (BOS, PAD and ``boi_token_id``), as the
    official checkpoints ship it."""
    from transformers import GenerationConfig

    return GenerationConfig(bos_token_id=tokens.bos, pad_token_id=tokens.pad, eos_token_id=eos_token_id,
                            guidance_scale=guidance_scale, generation_kwargs={"boi_token_id": tokens.boi})


class JanusBackbone(PromptTokenBackbone):
    """One prompt length of a Janus model, as an arvis backbone (cheap to build: pipelines build one per call).

    The cache, prefill and forwards are :class:`~arvis.models.hf_backbone.PromptTokenBackbone`'s; Janus supplies
    its layout (the ``side × side`` grid, ids = VQ codes), the generation embedding and head, and the
    unconditional prompt of its CFG.

    Args:
        model: ``JanusForConditionalGeneration`` (transformers).
        tokens: the BOS / BOI / PAD ids (:meth:`JanusPromptTokens.from_tokenizer`).
        condition_length: prompt slots (prompts are left-padded to it).
    """

    def __init__(self, model: nn.Module, tokens: JanusPromptTokens, condition_length: int):
        language_model, embeddings, aligner, head = generation_parts(model)
        num_codes = int(embeddings.num_embeddings)
        super().__init__(language_model, janus_layout(janus_grid(model), num_codes, condition_length))
        self.model = model
        self.generation_embeddings, self.generation_aligner, self.generation_head = embeddings, aligner, head
        self.tokens = tokens

    def embed(self, tokens: torch.Tensor) -> torch.Tensor:
        """VQ codes → the decoder's inputs (``prepare_embeddings_for_image_generation``)."""
        return self.generation_aligner(self.generation_embeddings(tokens))

    def head_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """The generation head: ``[..., hidden] → [..., K]`` fp32."""
        return self.generation_head(hidden).float()

    def null_condition(self, condition: Condition) -> Condition:
        """``generate``'s unconditional rows: every prompt token but BOS and BOI replaced by PAD, same mask."""
        ids = condition.token_ids
        keep = (ids == self.tokens.bos) | (ids == self.tokens.boi)
        return Condition(token_ids=torch.where(keep, ids, torch.full_like(ids, self.tokens.pad)), mask=condition.mask)


__all__ = ["BOS_TOKEN", "EOS_TOKEN", "IMAGE_END", "IMAGE_PLACEHOLDER", "IMAGE_START", "PAD_TOKEN", "JanusBackbone",
           "JanusPromptTokens", "generation_parts", "janus_config", "janus_generation_config", "janus_grid",
           "janus_layout"]
