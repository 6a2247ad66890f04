"""Emu3 (Wang et al., 2024, arXiv:2409.18869) behind arvis's backbone protocol, through transformers.

Emu3 is one decoder over text and image tokens. To generate an ``H × W``-token image it reads a prompt
ending in ``<|image start|>H*W<|image token|>`` and writes the image row by row, each row followed by
an end-of-line token, then end-of-frame and end-of-image (then end-of-text, which arvis does not
generate). transformers' ``Emu3ForConditionalGeneration`` holds the language model, the VQ tokenizer
(``Emu3VQVAE``) and the map from VQ codes to the BPE ids of the ``<|visual token NNNNNN|>`` tokens.

arvis drives the language model from the outside, with no patching:

- **Layout ids.** The adapter's token ids are the VQ codes ``0 … K−1`` followed by end-of-line,
  end-of-frame and end-of-image (``K, K+1, K+2``); it maps them to Emu3's BPE ids on input and
  computes the head's logits only for those ``K + 3`` rows (Emu3-Gen's head has 184,622 rows, of which
  32,768 are image tokens). ``TokenLayout.image_token_range = (0, K)`` and the structural tokens make
  the engine reproduce Emu3's prefix-constrained decoding: free positions take image tokens only,
  structural positions their forced token.
- **Cache.** :class:`Emu3SlotCache` (:class:`arvis.models.hf_backbone.SlotCache`, shared with every
  transformers-backed family) is a transformers ``Cache`` subclass over arvis's static buffers: every
  forward writes its keys/values at the explicit slots the engine chose, with explicit ``position_ids``
  and a 4-D mask — nothing depends on a cache's internal counter, so rollback is the engine's slot validity.
- **Prompts and CFG.** The condition is prompt token ids (``Condition.token_ids``), left-padded to
  the layout's condition length with a mask. Each row's rotary positions count from its first real
  token (as transformers' ``generate`` does with left padding), so a padded prompt gives exactly the
  logits of the unpadded one. The CFG pair is ``2B`` rows: the prompts, then Emu3's negative prompt.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from arvis.models.hf_backbone import PromptTokenBackbone, SlotCache
from arvis.models.protocol import Condition, TokenLayout
from arvis.utils.config_check import Bound, FolderSpec

# The shared slot cache under the name Emu3 code has always used.
Emu3SlotCache = SlotCache

END_OF_LINE = "<|extra_200|>"
END_OF_FRAME = "<|extra_201|>"
IMAGE_START = "<|image start|>"
IMAGE_END = "<|image end|>"
IMAGE_WRAPPER = "<|image token|>"
IMAGE_PLACEHOLDER = "<image>"
VISUAL_TOKEN = "<|visual token {:06d}|>"
_VISUAL_PATTERN = re.compile(r"<\|visual token (\d{6})\|>")


# ----------------------------------------------------------------------------- vocabulary and layout
@dataclass(frozen=True)
class Emu3Vocabulary:
    """Where Emu3's image tokens live among its BPE ids.

    Attributes:
        visual_ids: BPE id of VQ code ``c`` at position ``c`` (``K`` entries).
        end_of_line, end_of_frame, end_of_image: BPE ids of the structural tokens.
    """

    visual_ids: tuple[int, ...]
    end_of_line: int
    end_of_frame: int
    end_of_image: int

    @classmethod
    def from_map(cls, vocabulary_map: Mapping[str, int]) -> Emu3Vocabulary:
        """From a token → id map (``Emu3Config.vocabulary_map``, or ``tokenizer.get_vocab()``)."""
        codes = {}
        for name, bpe in vocabulary_map.items():
            match = _VISUAL_PATTERN.fullmatch(name)
            if match:
                codes[int(match.group(1))] = int(bpe)
        if not codes or sorted(codes) != list(range(len(codes))):
            raise ValueError(f"vocabulary_map: the visual tokens {VISUAL_TOKEN.format(0)!r}… must number the codes "
                             f"0..K-1 without gaps; found {len(codes)} visual tokens")
        missing = [t for t in (END_OF_LINE, END_OF_FRAME, IMAGE_END) if t not in vocabulary_map]
        if missing:
            raise ValueError(f"vocabulary_map: missing the structural token(s) {missing}")
        return cls(tuple(codes[c] for c in range(len(codes))), int(vocabulary_map[END_OF_LINE]),
                   int(vocabulary_map[END_OF_FRAME]), int(vocabulary_map[IMAGE_END]))

    @property
    def num_codes(self) -> int:
        return len(self.visual_ids)

    @property
    def end_of_line_id(self) -> int:
        """The layout id of end-of-line (end-of-frame and end-of-image follow it)."""
        return self.num_codes

    def model_ids(self) -> torch.Tensor:
        """``[K + 3]`` int64: the BPE id of every layout id."""
        return torch.tensor([*self.visual_ids, self.end_of_line, self.end_of_frame, self.end_of_image])


def emu3_layout(height: int, width: int, num_codes: int, condition_length: int) -> TokenLayout:
    """The token layout of an ``height × width`` Emu3 image after a ``condition_length``-slot prompt.

    Sequence index ``r·(W+1) + c`` is grid cell ``(r, c)``; ``r·(W+1) + W`` is row ``r``'s end-of-line;
    end-of-frame and end-of-image follow the last row (``N = H·(W+1) + 2``).
    """
    for name, value in (("height", height), ("width", width)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{name} must be an integer >= 1 (tokens), got {value!r}")
    stride = width + 1
    eol = num_codes
    structural = {r * stride + width: eol for r in range(height)}
    structural[height * stride] = eol + 1
    structural[height * stride + 1] = eol + 2
    return TokenLayout(grid=(height, width), vocab_size=num_codes + 3, condition_length=condition_length,
                       image_token_range=(0, num_codes), structural_tokens=structural, row_stride=stride)


def image_codes(tokens: torch.Tensor, layout: TokenLayout) -> torch.Tensor:
    """Generated sequences ``[B, N]`` (layout ids) → VQ code grids ``[B, H, W]`` (structural tokens dropped)."""
    H, W = layout.grid
    return tokens[:, : H * layout.row_stride].reshape(-1, H, layout.row_stride)[..., :W]


def emu3_config(vocabulary_map: Mapping[str, int], hidden_size: int, num_layers: int, num_heads: int,
                num_kv_heads: int, intermediate_size: int, vq: Mapping[str, object], max_positions: int = 1024,
                pad_token_id: int = 0, bos_token_id: int = 1, eos_token_id: int = 2, rope_theta: float = 10000.0,
                dropout: float = 0.0):
    """An ``Emu3Config`` for a small Emu3-architecture model (tests, arvis's shipped model).

    Args:
        vocabulary_map: token → id (the tokenizer's vocabulary; its size is the LM's vocabulary).
        hidden_size, num_layers, num_heads, num_kv_heads, intermediate_size: the language model.
        vq: ``Emu3VQVAEConfig`` fields (``codebook_size``, ``base_channels``, ``channel_multiplier``…);
            its ``hidden_size`` defaults to ``base_channels × channel_multiplier[-1]`` (the attention
            block's width must equal it).
        max_positions: rotary positions the LM supports (prompt + image sequence).
        pad_token_id, bos_token_id, eos_token_id: the tokenizer's ids.
        rope_theta: rotary base.
        dropout: attention dropout (training only).
    """
    from transformers import Emu3Config

    vq = dict(vq)
    mult = list(vq.get("channel_multiplier", (1, 2, 2, 4)))
    vq.setdefault("hidden_size", int(vq.get("base_channels", 256)) * mult[-1])
    if int(vq.get("base_channels", 256)) % 32:
        raise ValueError(f"vq base_channels must be a multiple of 32 (GroupNorm groups), got {vq['base_channels']}")
    text = dict(vocab_size=max(vocabulary_map.values()) + 1, hidden_size=hidden_size, intermediate_size=intermediate_size,
                num_hidden_layers=num_layers, num_attention_heads=num_heads, num_key_value_heads=num_kv_heads,
                max_position_embeddings=max_positions, pad_token_id=pad_token_id, bos_token_id=bos_token_id,
                eos_token_id=eos_token_id, attention_dropout=dropout,
                rope_parameters={"rope_type": "default", "rope_theta": rope_theta})
    return Emu3Config(text_config=text, vq_config=vq, vocabulary_map=dict(vocabulary_map))


# ----------------------------------------------------------------------------- configuration bounds
# What an Emu3 folder's config.json may hold (arvis.utils.config_check), checked before transformers builds
# anything. Generous: Emu3-Gen has 32 layers of width 4096 (32 heads, 8 KV heads, MLP 14336), 184,622 BPE ids
# of which 32,768 visual tokens, 9,216 positions; its VQ 256 base channels, multipliers (1, 2, 2, 4).
_ID = Bound.integer(0, 1 << 22)
_DTYPE = Bound.choice("float32", "float16", "bfloat16", optional=True)
_ROPE = {"rope_type": Bound.choice("default"), "rope_theta": Bound.number(1.0, 1e12, open_low=True)}
# The fields every transformers configuration writes (none of them sizes anything).
_PRETRAINED_CONFIG_BOUNDS: dict[str, Bound] = {
    "architectures": Bound.strings(8, optional=True),
    "transformers_version": Bound.text(64, optional=True),
    "dtype": _DTYPE,
    "torch_dtype": _DTYPE,
    "output_attentions": Bound.boolean(),
    "output_hidden_states": Bound.boolean(),
    "return_dict": Bound.boolean(),
    "chunk_size_feed_forward": Bound.choice(0),
    "is_encoder_decoder": Bound.choice(False),
    "problem_type": Bound.null(),
    "id2label": Bound("any"),
    "label2id": Bound("any"),
    "tie_word_embeddings": Bound.boolean(),
}
EMU3_TEXT_CONFIG_BOUNDS: dict[str, Bound] = {
    **_PRETRAINED_CONFIG_BOUNDS,
    "model_type": Bound.choice("emu3_text_model"),
    "vocab_size": Bound.integer(1, 1 << 22),
    "hidden_size": Bound.integer(1, 16384),
    "intermediate_size": Bound.integer(1, 1 << 16),
    "num_hidden_layers": Bound.integer(1, 256),
    "num_attention_heads": Bound.integer(1, 1024),
    "num_key_value_heads": Bound.integer(1, 1024, optional=True),
    "hidden_act": Bound.choice("silu"),
    "max_position_embeddings": Bound.integer(1, 1 << 20),
    "rms_norm_eps": Bound.number(0.0, 1.0, open_low=True, open_high=True),
    "use_cache": Bound.boolean(),
    "pad_token_id": Bound.integer(0, 1 << 22, optional=True),
    "bos_token_id": Bound.integer(0, 1 << 22, optional=True),
    "eos_token_id": Bound.integer(0, 1 << 22, optional=True),
    "rope_parameters": Bound.mapping(_ROPE, optional=True),
    "rope_theta": _ROPE["rope_theta"],  # older files: the rotary base at the top level
    "rope_scaling": Bound.null(note="arvis's shipped and tested Emu3 models use plain rotary positions"),
    "attention_bias": Bound.choice(False),
    "mlp_bias": Bound.choice(False),
    "attention_dropout": Bound.number(0.0, 1.0),
    "initializer_range": Bound.number(0.0, 10.0),
}
EMU3_VQ_CONFIG_BOUNDS: dict[str, Bound] = {
    **_PRETRAINED_CONFIG_BOUNDS,
    "model_type": Bound.choice("emu3_vqgan"),
    "codebook_size": Bound.integer(1, 1 << 20),
    "embed_dim": Bound.integer(1, 4096),
    "latent_channels": Bound.integer(1, 4096),
    "double_latent": Bound.boolean(),
    "in_channels": Bound.choice(3),
    "out_channels": Bound.choice(3),
    "temporal_downsample_factor": Bound.integer(1, 64),
    "base_channels": Bound.integer(1, 4096),
    "channel_multiplier": Bound.integers(1, 64, max_items=16),
    "num_res_blocks": Bound.integer(1, 64),
    "attn_resolutions": Bound.integers(0, 64, max_items=16, min_items=0),
    "hidden_size": Bound.integer(1, 1 << 16),
    "num_attention_heads": Bound.integer(1, 1024),
    "attention_dropout": Bound.number(0.0, 1.0),
}
EMU3_CONFIG_BOUNDS: dict[str, Bound] = {
    **_PRETRAINED_CONFIG_BOUNDS,
    "model_type": Bound.choice("emu3"),
    "text_config": Bound.mapping(EMU3_TEXT_CONFIG_BOUNDS),
    "vq_config": Bound.mapping(EMU3_VQ_CONFIG_BOUNDS),
    "vocabulary_map": Bound.table(0, 1 << 22, max_items=1 << 22),
    "image_token_id": _ID,
}


def _check_heads(text: Mapping[str, object]) -> None:
    """Head counts the attention can use: transformers would build the model and fail in the first forward."""
    hidden, heads = int(text.get("hidden_size", 4096)), int(text.get("num_attention_heads", 32))
    kv = text.get("num_key_value_heads")
    kv = heads if kv is None else int(kv)
    if hidden % heads or heads % kv:
        raise ValueError(f"hidden_size {hidden}, num_attention_heads {heads}, num_key_value_heads {kv}: the heads "
                         f"must divide the width and the key/value heads the heads")


def _build_emu3(**config: object) -> nn.Module:
    from transformers import Emu3Config, Emu3ForConditionalGeneration

    _check_heads(config.get("text_config") or {})  # type: ignore[arg-type]
    return Emu3ForConditionalGeneration(Emu3Config(**config))


def _build_emu3_text(**config: object) -> nn.Module:
    from transformers import Emu3ForCausalLM, Emu3TextConfig

    _check_heads(config)
    return Emu3ForCausalLM(Emu3TextConfig(**config))


def _emu3_parameter_name(key: str) -> str:
    """A tensor name of an Emu3 weights file → the parameter of ``Emu3ForConditionalGeneration`` (transformers
    saves the model under its original layout, ``text_model.model.*``, ``text_model.lm_head.*``, ``vqmodel.*``)."""
    for saved, module in (("text_model.lm_head.", "lm_head."), ("text_model.model.", "model.text_model."),
                          ("vqmodel.", "model.vqmodel.")):
        if key.startswith(saved):
            return module + key[len(saved):]
    return key


# How a pipeline checks the folder of an Emu3 model (the target, and a draft language model) before loading it.
EMU3_FOLDER = FolderSpec("Emu3ForConditionalGeneration", EMU3_CONFIG_BOUNDS, _build_emu3, weights="model",
                         rename=_emu3_parameter_name, integer_tensors=("num_batches_tracked",))
EMU3_TEXT_FOLDER = FolderSpec("Emu3ForCausalLM", EMU3_TEXT_CONFIG_BOUNDS, _build_emu3_text, weights="model")


def language_model_parts(model: nn.Module) -> tuple[nn.Module, nn.Linear]:
    """``(Emu3TextModel, lm_head)`` of an ``Emu3ForConditionalGeneration`` or ``Emu3ForCausalLM``."""
    inner = getattr(model, "model", None)
    text = getattr(inner, "text_model", inner)
    head = getattr(model, "lm_head", None)
    if text is None or head is None or not hasattr(text, "embed_tokens") or not hasattr(text, "layers"):
        raise TypeError(f"model: expected a transformers Emu3ForConditionalGeneration or Emu3ForCausalLM, "
                        f"got {type(model).__name__}")
    return text, head


# ----------------------------------------------------------------------------- the adapter
class Emu3Backbone(PromptTokenBackbone):
    """One request shape (image size, prompt length, negative prompt) of an Emu3 model, as an arvis backbone.

    Cheap to build (it only references the model's modules), so pipelines build one per call. The cache,
    prefill and forwards are :class:`~arvis.models.hf_backbone.PromptTokenBackbone`'s; Emu3 supplies its layout
    (end-of-line tokens), the embedding of its BPE ids, the head restricted to the layout ids and the negative
    prompt.

    Args:
        model: ``Emu3ForConditionalGeneration`` or ``Emu3ForCausalLM`` (transformers).
        vocabulary: where the image tokens live (:meth:`Emu3Vocabulary.from_map`).
        height, width: image size in tokens.
        condition_length: prompt slots (prompts are left-padded to it).
        negative: the unconditional half of the CFG pair: ``Condition(token_ids [B or 1, C], mask)``
            (Emu3's negative prompt), or ``None`` when guidance is not used.
    """

    def __init__(self, model: nn.Module, vocabulary: Emu3Vocabulary, height: int, width: int,
                 condition_length: int, negative: Condition | None = None):
        text_model, lm_head = language_model_parts(model)
        super().__init__(text_model, emu3_layout(height, width, vocabulary.num_codes, condition_length))
        self.model = model
        self.text_model, self.lm_head = text_model, lm_head
        self.vocabulary = vocabulary
        self.negative = negative
        ids = vocabulary.model_ids().to(self.lm_head.weight.device)
        self.register_buffer("_model_ids", ids, persistent=False)
        K = vocabulary.num_codes
        lo = vocabulary.visual_ids[0]
        # Emu3's visual tokens are one contiguous block of BPE ids: slice the head (a view) instead of
        # copying K of its rows at every forward.
        self._visual_block = (lo, lo + K) if vocabulary.visual_ids == tuple(range(lo, lo + K)) else None

    def null_condition(self, condition: Condition) -> Condition:
        """Emu3's negative prompt for every sample (one shared prompt is broadcast)."""
        if self.negative is None or self.negative.token_ids is None:
            raise ValueError("guidance_scale != 1 needs a negative prompt (Emu3Backbone(negative=...))")
        B = condition.batch_size
        ids, mask = self.negative.token_ids, self.negative.mask
        if mask is None:
            mask = torch.ones_like(ids, dtype=torch.bool)
        if ids.shape[0] == 1:
            ids, mask = ids.expand(B, -1), mask.expand(B, -1)
        if ids.shape != condition.token_ids.shape:
            raise ValueError(f"negative prompt ids {tuple(ids.shape)} do not match the prompts' "
                             f"{tuple(condition.token_ids.shape)} (pad both to the layout's condition length)")
        return Condition(token_ids=ids.to(condition.token_ids.device), mask=mask.to(condition.token_ids.device))

    def embed(self, tokens: torch.Tensor) -> torch.Tensor:
        """Layout ids → the text model's embeddings of their BPE ids."""
        return self.text_model.embed_tokens(self._model_ids[tokens])

    def head_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """The LM head restricted to the layout ids: ``[..., hidden] → [..., K + 3]`` fp32."""
        weight = self.lm_head.weight
        if self._visual_block is not None:
            lo, hi = self._visual_block
            structural = weight.index_select(0, self._model_ids[-3:])
            return torch.cat([F.linear(hidden, weight[lo:hi]), F.linear(hidden, structural)], dim=-1).float()
        return F.linear(hidden, weight.index_select(0, self._model_ids)).float()


__all__ = ["EMU3_CONFIG_BOUNDS", "EMU3_FOLDER", "EMU3_TEXT_CONFIG_BOUNDS", "EMU3_TEXT_FOLDER", "EMU3_VQ_CONFIG_BOUNDS",
           "Emu3Backbone", "Emu3SlotCache", "Emu3Vocabulary", "emu3_config", "emu3_layout", "image_codes",
           "language_model_parts"]
