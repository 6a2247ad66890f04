"""Tiny random Janus models for the Janus tests: a real byte-level BPE tokenizer with Janus's special tokens, and a
``JanusForConditionalGeneration`` of a few thousand decoder parameters built from a fixed seed, plus transformers'
own image ``generate()`` as the reference."""

from __future__ import annotations

import torch

from arvis.models.janus import JanusBackbone, JanusPromptTokens, janus_config, janus_generation_config
from arvis.models.protocol import Condition
from arvis.tokenizers.janus_text import build_janus_tokenizer, prompt_batch

CAPTIONS = ["red apple", "grinning face with big eyes", "dog face", "rocket", "green heart", "crescent moon",
            "smiling cat", "yellow star", "blue car", "water wave"]
TINY_VQ = dict(embed_dim=4, latent_channels=8, base_channels=32, channel_multiplier=[1, 2], num_res_blocks=1)


def tiny_tokenizer():
    return build_janus_tokenizer(CAPTIONS * 3, vocab_size=300)


def tiny_janus(num_codes: int = 16, grid: int = 3, seed: int = 0, hidden: int = 32, layers: int = 2, heads: int = 4,
               kv_heads: int = 2, head_std: float = 1.5, tokenizer=None, vq: dict | None = None):
    """``(model, tokenizer)``: a random tiny Janus whose logits depend visibly on the prefix.

    The official initialisation (std 0.02) gives near-uniform logits; the decoder, the generation embeddings,
    aligner and head are redrawn wider so that greedy paths vary and sampled distributions are far from uniform.
    """
    from transformers import JanusForConditionalGeneration

    tok = tokenizer or tiny_tokenizer()
    special = JanusPromptTokens.from_tokenizer(tok)
    cfg = janus_config(len(tok), hidden_size=hidden, num_layers=layers, num_heads=heads, num_kv_heads=kv_heads,
                       intermediate_size=2 * hidden, num_codes=num_codes, grid=grid, vq=vq or TINY_VQ,
                       max_positions=512, pad_token_id=special.pad, bos_token_id=special.bos,
                       eos_token_id=tok.eos_token_id, image_token_id=tok.convert_tokens_to_ids(tok.image_token))
    with torch.random.fork_rng():
        torch.manual_seed(seed)  # transformers initialises from the global stream; keep it local to this build
        model = JanusForConditionalGeneration(cfg).eval()
    model.generation_config = janus_generation_config(special, tok.eos_token_id)
    g = torch.Generator().manual_seed(seed + 1)
    inner = model.model
    with torch.no_grad():
        for part in (inner.language_model, inner.generation_aligner, inner.generation_head):
            for module in part.modules():  # order-one activations: attention that really mixes
                if isinstance(module, torch.nn.Linear):
                    module.weight.normal_(0.0, 1.5 / module.in_features ** 0.5, generator=g)
        inner.language_model.embed_tokens.weight.normal_(0.0, 1.0, generator=g)
        inner.generation_embeddings.weight.normal_(0.0, 1.0, generator=g)
        inner.generation_head.vision_head.weight.mul_(head_std / 1.5)
    return model, tok


def backbone_for(model, tok, prompts: list[str]) -> tuple[JanusBackbone, Condition]:
    """A :class:`JanusBackbone` and the left-padded condition of ``prompts``."""
    ids, mask = prompt_batch(tok, prompts)
    return JanusBackbone(model, JanusPromptTokens.from_tokenizer(tok), ids.shape[1]), Condition(token_ids=ids, mask=mask)


class ConditionalRows:
    """A logits processor that keeps the conditional half of ``generate``'s doubled batch: transformers' Janus
    image ``generate`` always runs the CFG pair and adds its guidance processor only for ``guidance_scale > 1``,
    so this is its guidance-free decode."""

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        return scores[: input_ids.shape[0]]


def transformers_generate(model, condition: Condition, guidance_scale: float | None, **kwargs) -> torch.Tensor:
    """transformers' own ``generate(generation_mode="image")`` on the (left-padded) prompts: ``[B, N]`` codes.
    ``guidance_scale=None``: without guidance (:class:`ConditionalRows`)."""
    import copy

    from transformers import LogitsProcessorList

    config = copy.deepcopy(model.generation_config)
    config.update(guidance_scale=guidance_scale or 1.0, **kwargs)
    processors = LogitsProcessorList([ConditionalRows()]) if guidance_scale is None else None
    return model.generate(condition.token_ids, attention_mask=condition.mask.long(), generation_mode="image",
                          generation_config=config, logits_processor=processors)
