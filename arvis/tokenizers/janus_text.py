"""Janus's text side: a small Janus-style tokenizer built offline, and image-generation prompts as Janus reads them.

The official Janus-Pro tokenizers are a Llama-style BPE with special tokens under fixed names (BOS, PAD, and the
image markers ``<begin_of_image>`` / ``<end_of_image>`` / ``<image_placeholder>``, which ``JanusProcessor`` reads
as the tokenizer's ``boi_token`` / ``eoi_token`` / ``image_token``). ``JanusProcessor(generation_mode="image")``
appends ``<begin_of_image>`` to each prompt and tokenises it with the tokenizer's BOS; when the checkpoint has a
chat template the official recipe first wraps the prompt in it (``apply_chat_template`` with a generation
prompt). :func:`generation_text` / :func:`prompt_batch` build exactly that; :func:`build_janus_tokenizer` builds
a tokenizer with the same structure at a tiny size (arvis's shipped model, tests).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from arvis.models.janus import BOS_TOKEN, EOS_TOKEN, IMAGE_END, IMAGE_PLACEHOLDER, IMAGE_START, PAD_TOKEN

SPECIAL_TOKENS = (PAD_TOKEN, BOS_TOKEN, EOS_TOKEN, IMAGE_PLACEHOLDER, IMAGE_START, IMAGE_END)


def build_janus_tokenizer(corpus: Iterable[str], vocab_size: int = 512):
    """Train a byte-level BPE on ``corpus`` with Janus's special tokens; it prepends BOS like Janus's tokenizer.

    Args:
        corpus: training texts (captions).
        vocab_size: total size, special tokens and the 256 byte symbols included.

    Returns:
        a transformers ``PreTrainedTokenizerFast`` with ``boi_token``, ``eoi_token`` and ``image_token``, so that
        ``JanusProcessor`` reads it.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    minimum = len(SPECIAL_TOKENS) + 256
    if not isinstance(vocab_size, int) or vocab_size < minimum:
        raise ValueError(f"vocab_size must be an integer >= {minimum} (special tokens + 256 bytes), got {vocab_size!r}")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=list(SPECIAL_TOKENS),
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(list(corpus), trainer)
    bos = tok.token_to_id(BOS_TOKEN)
    tok.post_processor = processors.TemplateProcessing(single=f"{BOS_TOKEN} $A", pair=f"{BOS_TOKEN} $A $B",
                                                       special_tokens=[(BOS_TOKEN, bos)])
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token=BOS_TOKEN, eos_token=EOS_TOKEN, pad_token=PAD_TOKEN, padding_side="left",
        extra_special_tokens={"image_token": IMAGE_PLACEHOLDER, "boi_token": IMAGE_START, "eoi_token": IMAGE_END},
    )


def generation_text(tokenizer: Any, prompt: str) -> str:
    """The text ``JanusProcessor(generation_mode="image")`` tokenises for ``prompt``: the prompt in the tokenizer's
    chat template (a user turn and the assistant's generation prompt) when it has one, then ``<begin_of_image>``."""
    if not isinstance(prompt, str):
        raise ValueError(f"prompt: expected strings, got {type(prompt).__name__}")
    if getattr(tokenizer, "chat_template", None):
        messages = [{"role": "user", "content": [{"type": "text", "text": prompt}]}]
        prompt = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    return f"{prompt}{tokenizer.boi_token}"


def prompt_batch(tokenizer: Any, prompts: Sequence[str], length: int | None = None):
    """Image-generation prompts left-padded to one length: ``(ids [B, C] int64, mask [B, C] bool)``.

    Args:
        tokenizer: a Janus tokenizer. prompts: texts.
        length: ``C`` (default: the longest prompt).
    """
    from arvis.tokenizers.padding import left_padded

    return left_padded([list(tokenizer(generation_text(tokenizer, p)).input_ids) for p in prompts],
                       tokenizer.pad_token_id, length)


__all__ = ["SPECIAL_TOKENS", "build_janus_tokenizer", "generation_text", "prompt_batch"]
