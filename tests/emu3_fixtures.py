"""Tiny random Emu3 models for the Emu3 tests: a real byte-level BPE tokenizer with Emu3's special tokens,
and an ``Emu3ForConditionalGeneration`` of a few thousand parameters built from a fixed seed."""

from __future__ import annotations

import torch

from arvis.models.emu3 import Emu3Backbone, Emu3Vocabulary, emu3_config
from arvis.models.protocol import Condition
from arvis.tokenizers.emu3_text import build_emu3_tokenizer, prompt_batch

CAPTIONS = ["red apple", "grinning face with big eyes", "dog face", "rocket", "green heart", "crescent moon",
            "smiling cat", "yellow star", "blue car", "water wave"]
NEGATIVE = "low quality"


def tiny_tokenizer(num_codes: int = 16):
    return build_emu3_tokenizer(CAPTIONS * 3, num_codes, text_vocab_size=300)


def tiny_emu3(num_codes: int = 16, seed: int = 0, hidden: int = 32, layers: int = 2, heads: int = 4,
              kv_heads: int = 2, head_std: float = 0.3, tokenizer=None):
    """``(model, tokenizer)``: a random tiny Emu3 whose logits depend visibly on the prefix.

    The official initialisation (std 0.02) gives near-uniform logits; the embeddings and the head are
    redrawn wider so that greedy paths vary and sampled distributions are far from uniform.
    """
    from transformers import Emu3ForConditionalGeneration

    tok = tokenizer or tiny_tokenizer(num_codes)
    cfg = emu3_config(tok.get_vocab(), hidden_size=hidden, num_layers=layers, num_heads=heads, num_kv_heads=kv_heads,
                      intermediate_size=2 * hidden,
                      vq=dict(codebook_size=num_codes, embed_dim=4, latent_channels=4, base_channels=32,
                              channel_multiplier=[1, 2], num_res_blocks=1, attn_resolutions=[],
                              temporal_downsample_factor=1),
                      max_positions=512, pad_token_id=tok.pad_token_id, bos_token_id=tok.bos_token_id,
                      eos_token_id=tok.eos_token_id)
    with torch.random.fork_rng():
        torch.manual_seed(seed)  # transformers initialises from the global stream; keep it local to this build
        model = Emu3ForConditionalGeneration(cfg).eval()
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for module in model.model.text_model.modules():  # order-one activations: attention that really mixes
            if isinstance(module, torch.nn.Linear):
                module.weight.normal_(0.0, 1.5 / module.in_features ** 0.5, generator=g)
        model.get_input_embeddings().weight.normal_(0.0, 1.0, generator=g)
        model.lm_head.weight.normal_(0.0, head_std, generator=g)
    return model, tok


def prompt_ids(tok, prompts: list[str], height: int, width: int, length: int | None = None
               ) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-padded generation prompts ``[B, C]`` and their mask."""
    return prompt_batch(tok, prompts, height, width, length)


def backbone_for(model, tok, prompts: list[str], height: int, width: int, negative: str | None = None
                 ) -> tuple[Emu3Backbone, Condition]:
    """An :class:`Emu3Backbone` and the condition of ``prompts`` (and the negative prompt, padded alike)."""
    texts = prompts + ([negative] if negative is not None else [])
    ids, mask = prompt_ids(tok, texts, height, width)
    neg = None
    if negative is not None:
        neg = Condition(token_ids=ids[-1:], mask=mask[-1:])
        ids, mask = ids[:-1], mask[:-1]
    vocab = Emu3Vocabulary.from_map(tok.get_vocab())
    return Emu3Backbone(model, vocab, height, width, ids.shape[1], negative=neg), Condition(token_ids=ids, mask=mask)


def prefix_allowed_tokens_fn(tok, height: int, width: int):
    """Emu3's documented image-generation constraint for transformers' ``generate``."""
    vocab = tok.get_vocab()
    voc = Emu3Vocabulary.from_map(vocab)
    visual = list(voc.visual_ids)
    wrapper = vocab["<|image token|>"]

    def allowed(batch_id: int, input_ids: torch.Tensor) -> list[int]:
        position = torch.nonzero(input_ids == wrapper, as_tuple=True)[0][0]
        offset = input_ids.shape[0] - position
        if offset % (width + 1) == 0:
            return [voc.end_of_line]
        if offset == (width + 1) * height + 1:
            return [voc.end_of_frame]
        if offset == (width + 1) * height + 2:
            return [voc.end_of_image]
        if offset == (width + 1) * height + 3:
            return [tok.eos_token_id]
        if offset > (width + 1) * height + 3:
            return [tok.pad_token_id]
        return visual

    return allowed
