"""Diffusers-style text-to-image pipeline for Emu3 (BAAI, arXiv:2409.18869) and Emu3-architecture models.

The same conventions as :class:`~arvis.pipelines.LlamaGenPipeline` — ``generator`` (one, or one per image),
``num_images_per_prompt``, ``output_type``, ``return_dict``, ``callback_on_step_end``, a progress bar,
the same statistics object, and ``method=`` with its options — over transformers' Emu3 classes:

- ``transformer``: ``Emu3ForConditionalGeneration`` (language model + ``Emu3VQVAE`` + vocabulary map);
- ``tokenizer``: its text tokenizer (Emu3's special and visual tokens);
- ``draft_transformer`` (optional): a smaller Emu3 language model with the same tokenizer, for
  draft-model speculative decoding.

Loads a diffusers folder written by ``save_pretrained`` or an official-layout folder (``BAAI/Emu3-Gen-hf``
style: ``config.json`` with ``model_type: emu3``, safetensors shards, tokenizer/processor files), from a
local path; nothing is downloaded.

Example:
    >>> from arvis.pipelines import Emu3Pipeline
    >>> pipe = Emu3Pipeline.from_pretrained("arvis/weights/emu3-emoji")  # doctest: +SKIP
    >>> out = pipe("red apple", guidance_scale=3.0, generator=torch.Generator().manual_seed(0), method="sjd")
    >>> out.images[0].save("apple.png"); print(out.stats.format())
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from diffusers import DiffusionPipeline

from arvis.models.emu3 import (
    EMU3_FOLDER,
    EMU3_TEXT_FOLDER,
    VISUAL_TOKEN,
    Emu3Backbone,
    Emu3Vocabulary,
    emu3_layout,
    image_codes,
)
from arvis.models.llamagen import MAX_GRID
from arvis.models.protocol import Condition, TokenLayout
from arvis.pipelines.common import (
    CALLBACK_TENSOR_INPUTS,
    callback_tensor_inputs,
    check_output_type,
)
from arvis.pipelines.interface import BenchInputs
from arvis.pipelines.pipeline_llamagen import LlamaGenPipelineOutput
from arvis.pipelines.prompt_tokens import PromptTokenPipeline
from arvis.tokenizers.emu3_text import check_tokenizer_folder, prompt_batch
from arvis.tokenizers.emu3_vq import Emu3ImageTokenizer
from arvis.utils.config_check import Bound, CheckedPipelineMixin, check_model_folder
from arvis.utils.files import read_json_object
from arvis.utils.random import GeneratorArg

# Emu3-Gen's published sampling recipe uses this negative prompt (BAAI's example code).
EMU3_NEGATIVE_PROMPT = ("lowres, bad anatomy, bad hands, text, error, missing fingers, extra digit, fewer digits, "
                        "cropped, worst quality, low quality, normal quality, jpeg artifacts, signature, watermark, "
                        "username, blurry.")


class Emu3PipelineOutput(LlamaGenPipelineOutput):
    """Output of :class:`Emu3Pipeline`: ``images``, ``tokens`` (VQ code grids ``[B, h, w]``) and ``stats``."""


class Emu3Pipeline(PromptTokenPipeline, CheckedPipelineMixin, DiffusionPipeline):
    """Text-to-image generation with an Emu3 model, through arvis's decoding methods.

    Args:
        transformer: ``transformers.Emu3ForConditionalGeneration``.
        tokenizer: the model's tokenizer.
        draft_transformer: optional smaller Emu3 model (same tokenizer) for ``method="speculative"``.
        default_height, default_width: image size in tokens when a call does not say (Emu3-Gen: 90 × 90).
        default_negative_prompt: the negative prompt of classifier-free guidance when a call does not say.
    """

    model_cpu_offload_seq = "transformer"
    _optional_components = ["draft_transformer"]
    _callback_tensor_inputs = list(CALLBACK_TENSOR_INPUTS)
    # transformers classes: checked by their declared bounds before loading (arvis.utils.config_check).
    component_checks = {"transformer": EMU3_FOLDER, "draft_transformer": (EMU3_TEXT_FOLDER, EMU3_FOLDER),
                        "tokenizer": check_tokenizer_folder}
    config_bounds = {"default_height": Bound.integer(1, MAX_GRID), "default_width": Bound.integer(1, MAX_GRID),
                     "default_negative_prompt": Bound.text(10_000)}

    def __init__(self, transformer: Any, tokenizer: Any, draft_transformer: Any = None, default_height: int = 90,
                 default_width: int = 90, default_negative_prompt: str = EMU3_NEGATIVE_PROMPT):
        super().__init__()
        vocabulary_map = getattr(getattr(transformer, "config", None), "vocabulary_map", None)
        if vocabulary_map is None or not hasattr(transformer, "model") or not hasattr(transformer.model, "vqmodel"):
            raise TypeError(f"transformer: expected an Emu3ForConditionalGeneration, got {type(transformer).__name__}")
        self.register_modules(transformer=transformer, tokenizer=tokenizer, draft_transformer=draft_transformer)
        self.register_to_config(default_height=default_height, default_width=default_width,
                                default_negative_prompt=default_negative_prompt)
        self.vocabulary = Emu3Vocabulary.from_map(vocabulary_map)
        if tokenizer.convert_tokens_to_ids(VISUAL_TOKEN.format(0)) != self.vocabulary.visual_ids[0]:
            raise ValueError("tokenizer: it does not hold the model's visual tokens; use the model's own tokenizer")
        if draft_transformer is not None:
            draft_vocab = getattr(draft_transformer.config, "vocabulary_map", None)
            size = getattr(draft_transformer.config, "text_config", draft_transformer.config).vocab_size
            if (draft_vocab is not None and Emu3Vocabulary.from_map(draft_vocab) != self.vocabulary) or \
                    size < max(self.vocabulary.visual_ids) + 1:
                raise ValueError("draft_transformer: its vocabulary differs from the transformer's")

    # ------------------------------------------------------------------ loading
    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path: str | Path, **kwargs: Any) -> Emu3Pipeline:
        """A diffusers folder (``model_index.json``) or an official Emu3 folder (``config.json``, ``model_type: emu3``)."""
        path = Path(pretrained_model_name_or_path)
        if (path / "model_index.json").is_file() or not (path / "config.json").is_file():
            return super().from_pretrained(pretrained_model_name_or_path, **kwargs)
        config = {k: kwargs[k] for k in ("default_height", "default_width", "default_negative_prompt") if k in kwargs}
        return cls.from_emu3_checkpoint(path, dtype=kwargs.get("dtype", kwargs.get("torch_dtype")), **config)

    @classmethod
    def from_emu3_checkpoint(cls, path: str | Path, dtype: torch.dtype | None = None, **config: Any) -> Emu3Pipeline:
        """Load an official-layout folder (``BAAI/Emu3-Gen-hf`` style) from a local path.

        Args:
            path: folder with ``config.json`` (``model_type: emu3``), the safetensors weights and the tokenizer files.
            dtype: weights dtype (default: as stored).
            **config: ``default_height`` / ``default_width`` / ``default_negative_prompt``.
        """
        from transformers import AutoTokenizer, Emu3ForConditionalGeneration

        path = Path(path)
        model_type = read_json_object(path / "config.json").get("model_type")
        if model_type != "emu3":
            raise ValueError(f"pretrained_model_name_or_path: {path} holds a {model_type!r} model, not an Emu3 one")
        check_model_folder(EMU3_FOLDER, path)
        check_tokenizer_folder(path)
        model = Emu3ForConditionalGeneration.from_pretrained(path, dtype=dtype or "auto").eval()
        return cls(model, AutoTokenizer.from_pretrained(path), **config)

    # ------------------------------------------------------------------ the family seam
    # Emu3-Gen's published recipe, for folders without a sampling_defaults.json (official layouts).
    fallback_sampling_defaults = {"guidance_scale": 3.0, "top_k": 0}
    sampling_fields = ("guidance_scale", "top_k", "top_p", "temperature")

    @property
    def token_layout(self) -> TokenLayout:
        return self.default_layout

    @property
    def default_layout(self) -> TokenLayout:
        """The token layout at the default image size (grid, vocabulary, sequence length with the
        structural tokens). Its ``condition_length`` is a placeholder (1): each call sets the prompts' own."""
        return emu3_layout(self.config.default_height, self.config.default_width, self.vocabulary.num_codes, 1)

    # ------------------------------------------------------------------ pieces
    @property
    def vqvae(self) -> Emu3ImageTokenizer:
        """The VQ tokenizer (the transformer's ``Emu3VQVAE``) as an arvis image tokenizer."""
        return Emu3ImageTokenizer(self.transformer.model.vqmodel)

    def codebook_neighbours(self, k: int) -> torch.Tensor:
        """``[K + 3, k]`` latent neighbourhoods of the VQ codebook (LANTERN); structural ids have none (-1)."""
        from arvis.methods.relaxation import codebook_neighbourhoods

        table = codebook_neighbourhoods(self.vqvae.codebook_embeddings(), k)
        return torch.cat([table, torch.full((3, table.shape[1]), -1, dtype=table.dtype)])

    def prompt_ids(self, prompts: Sequence[str], height: int, width: int, length: int | None = None
                   ) -> tuple[torch.Tensor, torch.Tensor]:
        """Left-padded generation prompts ``[B, C]`` and their mask (``Emu3Processor``'s text, tokenised)."""
        return prompt_batch(self.tokenizer, list(prompts), height, width, length)

    def backbones(self, prompt: Sequence[str], negative_prompt: Sequence[str], height: int, width: int
                  ) -> tuple[Emu3Backbone, Emu3Backbone | None, Condition]:
        """The target (and draft) backbones for one call, and the prompts' condition (left-padded alike)."""
        ids, mask = self.prompt_ids([*prompt, *negative_prompt], height, width)
        B = len(prompt)
        device = self.transformer.device
        cond = Condition(token_ids=ids[:B].to(device), mask=mask[:B].to(device))
        negative = Condition(token_ids=ids[B:].to(device), mask=mask[B:].to(device))
        C = ids.shape[1]
        limit = self.transformer.config.text_config.max_position_embeddings
        needed = C + height * (width + 1) + 2
        if needed > limit:
            raise ValueError(f"height/width: {height}x{width} tokens with this prompt need {needed} positions; "
                             f"the model supports {limit}")
        target = Emu3Backbone(self.transformer, self.vocabulary, height, width, C, negative)
        draft = None
        if self.draft_transformer is not None:
            draft = Emu3Backbone(self.draft_transformer, self.vocabulary, height, width, C, negative)
        return target, draft, cond

    def bench_inputs(self, conditions: Sequence[int | str] | None, samples: int, batch_size: int,
                     height: int | None = None, width: int | None = None) -> BenchInputs:
        """What ``arvis bench`` times: one backbone (every prompt left-padded to one length, the default
        negative prompt), the condition batches (sample ``i`` gets ``conditions[i % len]``, ``batch_size``
        samples per decode call) and methods built with the draft backbone of those prompts.

        Args:
            conditions: at least one prompt.
            samples, batch_size: samples per round and per decode call (>= 1).
            height, width: image size in tokens (default: the config's).
        """
        plan = self.condition_batches(conditions, samples, batch_size)
        height = self.config.default_height if height is None else height
        width = self.config.default_width if width is None else width
        # One negative prompt row, broadcast over every batch (the backbone accepts [1, C]).
        return self.prompt_bench_inputs(plan, [self.config.default_negative_prompt], height, width)

    # ------------------------------------------------------------------ call
    @torch.no_grad()
    def __call__(
        self,
        prompt: str | Sequence[str],
        negative_prompt: str | Sequence[str] | None = None,
        height: int | None = None,
        width: int | None = None,
        guidance_scale: float | None = None,
        top_k: int | None = None,
        top_p: float | None = None,
        temperature: float | None = None,
        num_images_per_prompt: int = 1,
        generator: GeneratorArg = None,
        output_type: str = "pil",
        return_dict: bool = True,
        callback_on_step_end: Callable[[Emu3Pipeline, int, torch.Tensor, dict], Any] | None = None,
        callback_on_step_end_tensor_inputs: Sequence[str] = ("tokens", "known"),
        method: str = "ar",
        **method_options: Any,
    ) -> Emu3PipelineOutput | tuple:
        """Generate images from text.

        Args:
            prompt: text prompt(s).
            negative_prompt: the unconditional prompt(s) of classifier-free guidance (one, or one per prompt);
                default ``config.default_negative_prompt``.
            height, width: image size in tokens (pixels = tokens × the VQ's factor, 8); default from the config.
            guidance_scale: classifier-free guidance (>= 0; 1 disables it). top_k, top_p, temperature: as usual
                (0 = off for top-k; temperature 0 = greedy). Settings left ``None`` come from
                :attr:`sampling_defaults` (the folder's ``sampling_defaults.json``; official folders: CFG 3.0,
                top-k off, Emu3-Gen's recipe), then from :class:`~arvis.engine.SamplingConfig`.
            num_images_per_prompt: images per prompt (>= 1).
            generator: a ``torch.Generator``, or one per image (``B * num_images_per_prompt``).
            output_type: ``"pil"``, ``"np"``, ``"pt"`` or ``"latent"`` (code grids).
            return_dict: return an :class:`Emu3PipelineOutput` (else ``(images, tokens, stats)``).
            callback_on_step_end: ``f(pipe, forward_index, committed_per_sample, callback_kwargs)`` after
                every target forward that committed tokens; ``callback_kwargs`` holds copies of the tensors named
                in ``callback_on_step_end_tensor_inputs`` (``"tokens"``, ``"known"``). diffusers' contract, as
                :class:`~arvis.pipelines.LlamaGenPipeline`: a returned dict may not change committed tokens.
            method: decoding method name (:meth:`methods` lists them); **method_options its options.

        Returns:
            :class:`Emu3PipelineOutput` with images, code grids ``[B, h, w]`` and decode statistics.
        """
        check_output_type(output_type)
        if not isinstance(num_images_per_prompt, int) or num_images_per_prompt < 1:
            raise ValueError(f"num_images_per_prompt must be an integer >= 1, got {num_images_per_prompt!r}")
        tensor_inputs = callback_tensor_inputs(callback_on_step_end, callback_on_step_end_tensor_inputs)
        prompts = [prompt] if isinstance(prompt, str) else list(prompt)
        if not prompts:
            raise ValueError("prompt: empty")
        if negative_prompt is None:
            negative_prompt = self.config.default_negative_prompt
        negatives = [negative_prompt] * len(prompts) if isinstance(negative_prompt, str) else list(negative_prompt)
        if len(negatives) != len(prompts):
            raise ValueError(f"negative_prompt: got {len(negatives)} for {len(prompts)} prompts; pass one, or one per prompt")
        height = self.config.default_height if height is None else height
        width = self.config.default_width if width is None else width
        for name, value in (("height", height), ("width", width)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1 (tokens), got {value!r}")
        sampling = self.sampling_config(temperature=temperature, top_k=top_k, top_p=top_p,
                                        guidance_scale=guidance_scale)
        if isinstance(method, str):
            self.check_method(method, method_options)  # refused before any backbone is built
        n = num_images_per_prompt
        prompts = [p for p in prompts for _ in range(n)]
        negatives = [p for p in negatives for _ in range(n)]
        backbones = self.backbones(prompts, negatives, height, width)
        layout = backbones[0].layout
        images, codes, stats = self.decode_call(backbones, sampling, method, method_options, generator,
                                                callback_on_step_end, tensor_inputs,
                                                lambda tokens: image_codes(tokens, layout), output_type)
        if not return_dict:
            return images, codes, stats
        return Emu3PipelineOutput(images=images, tokens=codes, stats=stats)


__all__ = ["EMU3_NEGATIVE_PROMPT", "Emu3Pipeline", "Emu3PipelineOutput"]
