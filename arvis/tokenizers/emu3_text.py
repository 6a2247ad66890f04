"""A small Emu3-style text tokenizer, built offline with the ``tokenizers`` library.

Emu3's tokenizer is a byte-level BPE (Qwen's) extended with special tokens and one token per VQ code
(``<|visual token 000000|>`` …). arvis's shipped Emu3-architecture model needs the same structure at a
tiny size: a byte-level BPE trained on the training captions, Emu3's special tokens under their
official names (so transformers' ``Emu3Processor`` and arvis's :class:`~arvis.models.emu3.Emu3Vocabulary`
read it unchanged), and the visual tokens as one contiguous block of ids after the text vocabulary.
"""

from __future__ import annotations

from collections.abc import Iterable

from arvis.models.emu3 import (
    END_OF_FRAME,
    END_OF_LINE,
    IMAGE_END,
    IMAGE_PLACEHOLDER,
    IMAGE_START,
    IMAGE_WRAPPER,
    VISUAL_TOKEN,
)

PAD_TOKEN = "<|endoftext|>"
BOS_TOKEN = "<|extra_203|>"
EOS_TOKEN = "<|extra_204|>"
SPECIAL_TOKENS = (PAD_TOKEN, BOS_TOKEN, EOS_TOKEN, END_OF_LINE, END_OF_FRAME, IMAGE_PLACEHOLDER, IMAGE_START,
                  IMAGE_END, IMAGE_WRAPPER)


def build_emu3_tokenizer(corpus: Iterable[str], num_codes: int, text_vocab_size: int = 1024):
    """Train a byte-level BPE on ``corpus`` and add Emu3's special and visual tokens.

    Args:
        corpus: training texts (captions).
        num_codes: VQ codebook size ``K`` (``K`` visual tokens are added, contiguous).
        text_vocab_size: BPE vocabulary size including the special tokens and the 256 byte symbols.

    Returns:
        a transformers ``PreTrainedTokenizerFast`` with Emu3's attributes (``boi_token``,
        ``image_wrapper_token``, ``eof_token``…); total size ``text_vocab_size + K``.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    if not isinstance(num_codes, int) or num_codes < 1:
        raise ValueError(f"num_codes must be an integer >= 1, got {num_codes!r}")
    minimum = len(SPECIAL_TOKENS) + 256
    if text_vocab_size < minimum:
        raise ValueError(f"text_vocab_size must be >= {minimum} (special tokens + 256 bytes), got {text_vocab_size}")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=text_vocab_size, special_tokens=list(SPECIAL_TOKENS),
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(list(corpus), trainer)
    # Pad the text block to exactly text_vocab_size (a small corpus can stop short of it), so the visual
    # ids start at a fixed offset.
    short = text_vocab_size - tok.get_vocab_size()
    if short > 0:
        tok.add_special_tokens([f"<|extra_{300 + i}|>" for i in range(short)])
    tok.add_special_tokens([VISUAL_TOKEN.format(c) for c in range(num_codes)])
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token=BOS_TOKEN, eos_token=EOS_TOKEN, pad_token=PAD_TOKEN,
        extra_special_tokens={"image_token": IMAGE_PLACEHOLDER, "boi_token": IMAGE_START, "eoi_token": IMAGE_END,
                              "image_wrapper_token": IMAGE_WRAPPER, "eof_token": END_OF_FRAME},
    )


def generation_prompt(tokenizer, prompt: str, height: int, width: int) -> list[int]:
    """Token ids of an image-generation prompt, as ``Emu3Processor(return_for_image_generation=True)`` builds it:
    ``<bos>{prompt}<|image start|>{height}*{width}<|image token|>``."""
    text = f"{tokenizer.bos_token}{prompt}{IMAGE_START}{height}*{width}{IMAGE_WRAPPER}"
    return list(tokenizer(text, add_special_tokens=False).input_ids)


def prompt_batch(tokenizer, prompts: list[str], height: int, width: int, length: int | None = None):
    """Generation prompts left-padded to one length: ``(ids [B, C] int64, mask [B, C] bool)``.

    Args:
        tokenizer: an Emu3 tokenizer. prompts: texts. height, width: image size in tokens.
        length: ``C`` (default: the longest prompt).
    """
    from arvis.tokenizers.padding import left_padded

    seqs = []
    for p in prompts:
        if not isinstance(p, str):
            raise ValueError(f"prompt: expected strings, got {type(p).__name__}")
        seqs.append(generation_prompt(tokenizer, p, height, width))
    return left_padded(seqs, tokenizer.pad_token_id, length)


__all__ = ["SPECIAL_TOKENS", "build_emu3_tokenizer", "generation_prompt", "prompt_batch"]
