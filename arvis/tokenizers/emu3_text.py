"""A small Emu3-style text tokenizer, built offline with the ``tokenizers`` library.

Emu3's tokenizer is a byte-level BPE (Qwen's) extended with special tokens and one token per VQ code
(``<|visual token 000000|>`` …). arvis's shipped Emu3-architecture model needs the same structure at a
tiny size: a byte-level BPE trained on the training captions, Emu3's special tokens under their
official names (so transformers' ``Emu3Processor`` and arvis's :class:`~arvis.models.emu3.Emu3Vocabulary`
read it unchanged), and the visual tokens as one contiguous block of ids after the text vocabulary.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from arvis.errors import CheckpointError
from arvis.models.emu3 import (
    END_OF_FRAME,
    END_OF_LINE,
    IMAGE_END,
    IMAGE_PLACEHOLDER,
    IMAGE_START,
    IMAGE_WRAPPER,
    VISUAL_TOKEN,
)
from arvis.utils.config_check import Bound, check_config
from arvis.utils.files import read_json_object

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


# What an Emu3 tokenizer_config.json may hold: the special tokens as strings (transformers reads them as such),
# and the bookkeeping fields transformers writes (they size nothing).
_TOKEN = Bound.text(1000, optional=True)
TOKENIZER_CONFIG_BOUNDS: dict[str, Bound] = {
    **{name: _TOKEN for name in ("bos_token", "eos_token", "pad_token", "unk_token", "image_token", "boi_token",
                                 "eoi_token", "image_wrapper_token", "eof_token")},
    "model_specific_special_tokens": Bound.mapping({name: _TOKEN for name in (
        "image_token", "boi_token", "eoi_token", "image_wrapper_token", "eof_token")}, optional=True),
    "extra_special_tokens": Bound("any"),  # a list or an object of names, by transformers version
    "additional_special_tokens": Bound.strings(1 << 20, optional=True),
    "added_tokens_decoder": Bound("any"),  # rebuilt from tokenizer.json, whose own check covers it
    "model_max_length": Bound.number(1.0, 1e40),
    "tokenizer_class": Bound.text(100),
    "processor_class": Bound.text(100, optional=True),
    "backend": Bound.choice("tokenizers"),
    "chat_template": Bound.text(1 << 20, optional=True),
    "clean_up_tokenization_spaces": Bound.boolean(),
    "split_special_tokens": Bound.boolean(),
    "add_prefix_space": Bound.boolean(),
    "errors": Bound.choice("replace", "strict", "ignore"),
    "is_local": Bound.boolean(),
    "local_files_only": Bound.boolean(),
}


def check_tokenizer_folder(folder: str | os.PathLike) -> None:
    """Check an Emu3 tokenizer's files before transformers reads them: ``tokenizer_config.json`` against
    :data:`TOKENIZER_CONFIG_BOUNDS`, and ``tokenizer.json`` built once by the ``tokenizers`` library (its
    errors, whatever their type, become one :class:`~arvis.errors.CheckpointError` naming the file).

    Raises:
        ConfigError: a file that is not a JSON object, or a field out of its bounds.
        CheckpointError: ``tokenizer.json`` is not a tokenizer, or a file cannot be read.
    """
    folder = Path(folder)
    config = folder / "tokenizer_config.json"
    if config.is_file():
        check_config(read_json_object(config), TOKENIZER_CONFIG_BOUNDS, source=str(config))
    spec = folder / "tokenizer.json"
    if not spec.is_file():
        raise CheckpointError(f"tokenizer folder {str(folder)!r} has no tokenizer.json (arvis reads fast tokenizers)")
    read_json_object(spec)  # not JSON, too deep, not an object: named as such
    from tokenizers import Tokenizer

    try:
        Tokenizer.from_file(str(spec))
    except Exception as err:  # noqa: BLE001 - the library raises bare Exception for a malformed tokenizer
        message = str(err).splitlines()[0][:200] if str(err) else type(err).__name__
        raise CheckpointError(f"{str(spec)!r} is not a tokenizer the tokenizers library can build ({message})"
                              ) from None


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


__all__ = ["SPECIAL_TOKENS", "TOKENIZER_CONFIG_BOUNDS", "build_emu3_tokenizer", "check_tokenizer_folder",
           "generation_prompt", "prompt_batch"]
