"""Diffusers-style pipeline for LlamaGen-style class- and text-conditional image generation.

One ``__call__`` with diffusers' conventions (``generator``, ``num_images_per_prompt``,
``output_type``, ``return_dict``, ``callback_on_step_end``) plus ``method`` and its options: the
decoding method changes how fast the tokens come, never what they are distributed as (lossless
methods) or by how much (lossy methods, which say so).

Example:
    >>> from arvis.pipelines import LlamaGenPipeline
    >>> pipe = LlamaGenPipeline.from_pretrained("c2i")  # a shipped alias, or any save_pretrained folder  # doctest: +SKIP
    >>> out = pipe(class_labels=["coffee", 7], generator=torch.Generator().manual_seed(0))
    >>> out.images[0].save("sample.png"); print(out.stats.format())

Sampling settings left as ``None`` come from the model folder's ``sampling_defaults.json``
(:attr:`LlamaGenPipeline.sampling_defaults`), then from :class:`~arvis.engine.SamplingConfig`'s defaults.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import PIL.Image
import torch
from diffusers import DiffusionPipeline
from diffusers.callbacks import MultiPipelineCallbacks, PipelineCallback
from diffusers.utils import BaseOutput

from arvis.engine.engine import NO_TOKEN
from arvis.engine.stats import BatchStats
from arvis.methods.registry import decode
from arvis.models.llamagen import LlamaGenTransformer
from arvis.models.protocol import Condition
from arvis.models.text_encoder import WordTextEncoder
from arvis.models.upsampler import TokenUpsampler
from arvis.pipelines.common import (
    CALLBACK_TENSOR_INPUTS,
    callback_tensor_inputs,
    check_output_type,
    decode_with_progress,
    grey_uncommitted,
    images_to_output,
)
from arvis.pipelines.interface import ArvisPipeline, BenchInputs
from arvis.tokenizers.llamagen_vq import LlamaGenVQModel
from arvis.utils.config_check import CheckedPipelineMixin
from arvis.utils.random import GeneratorArg


@dataclass
class LlamaGenPipelineOutput(BaseOutput):
    """Output of :class:`LlamaGenPipeline`.

    Attributes:
        images: PIL images, ``np.ndarray [B, H, W, 3]`` in [0, 1], ``torch.Tensor [B, 3, H, W]`` in
            [0, 1], or the token grids ``[B, h, w]`` for ``output_type="latent"``.
        tokens: ``[B, h, w]`` int64 generated token ids (``-1`` where an interrupted decode committed nothing).
        stats: decode statistics (per sample and for the batch).
    """

    images: list[PIL.Image.Image] | np.ndarray | torch.Tensor
    tokens: torch.Tensor
    stats: BatchStats


class LlamaGenPipeline(ArvisPipeline, CheckedPipelineMixin, DiffusionPipeline):
    """Class- or text-conditional generation with a LlamaGen GPT and its VQ tokenizer.

    Components:
        transformer: :class:`~arvis.models.llamagen.LlamaGenTransformer` (the target model).
        vqvae: :class:`~arvis.tokenizers.llamagen_vq.LlamaGenVQModel` (codes ↔ pixels).
        text_encoder: optional; maps prompts to caption features for ``t2i`` transformers: arvis's
            :class:`~arvis.models.text_encoder.WordTextEncoder`, or a transformers ``T5EncoderModel``
            together with ``tokenizer`` (official LlamaGen t2i checkpoints use flan-t5-xl).
        tokenizer: optional; a transformers tokenizer for a T5 ``text_encoder``.
        draft_transformer: optional smaller GPT for draft-model speculative decoding.
        lowres_transformer, upsampler: optional low-resolution GPT and token up-sampler for multi-scale
            drafting (methods ``mulo`` / ``mulo-local``, :mod:`arvis.drafting.multiscale`).

    Loading: ``LlamaGenPipeline.from_pretrained(name_or_folder)`` takes a shipped alias (``"c2i"``, see
    :mod:`arvis.hub`) or a ``save_pretrained`` folder. diffusers' generic ``DiffusionPipeline.from_pretrained``
    loads out-of-tree pipelines through a ``pipeline.py`` in the folder (which ``save_pretrained`` writes):
    ``DiffusionPipeline.from_pretrained(folder, custom_pipeline="pipeline", trust_remote_code=True)``.
    """

    model_cpu_offload_seq = "text_encoder->transformer->vqvae"
    _optional_components = ["text_encoder", "tokenizer", "draft_transformer", "lowres_transformer", "upsampler"]
    _callback_tensor_inputs = list(CALLBACK_TENSOR_INPUTS)

    # text_encoder: arvis's WordTextEncoder (imported above so that from_pretrained can resolve the library
    # a saved model_index.json names) or a transformers T5 encoder for official LlamaGen t2i checkpoints.
    def __init__(self, transformer: LlamaGenTransformer, vqvae: LlamaGenVQModel,
                 text_encoder: WordTextEncoder | Any = None,
                 draft_transformer: LlamaGenTransformer | None = None,
                 tokenizer: Any = None, lowres_transformer: LlamaGenTransformer | None = None,
                 upsampler: TokenUpsampler | None = None):
        super().__init__()
        if tokenizer is not None and text_encoder is None:
            raise ValueError("tokenizer: given without a text_encoder to feed")
        if text_encoder is not None and tokenizer is None and not hasattr(text_encoder, "encode"):
            raise ValueError(f"text_encoder: a {type(text_encoder).__name__} needs its tokenizer (tokenizer=...)")
        if transformer.config.vocab_size != vqvae.config.codebook_size:
            raise ValueError(
                f"vqvae: its codebook has {vqvae.config.codebook_size} entries but the transformer predicts "
                f"{transformer.config.vocab_size} token ids; use the tokenizer the transformer was trained with"
            )
        if draft_transformer is not None and draft_transformer.config.vocab_size != transformer.config.vocab_size:
            raise ValueError("draft_transformer: its vocabulary differs from the transformer's")
        self.register_modules(transformer=transformer, vqvae=vqvae, text_encoder=text_encoder,
                              draft_transformer=draft_transformer, tokenizer=tokenizer,
                              lowres_transformer=lowres_transformer, upsampler=upsampler)

    # ------------------------------------------------------------------ loading and saving
    def save_pretrained(self, save_directory: str | os.PathLike, **kwargs: Any) -> None:
        """The shared saving (:class:`~arvis.pipelines.common.SamplingDefaultsMixin`) plus the ``pipeline.py`` that
        lets diffusers' generic ``DiffusionPipeline.from_pretrained`` load the folder (class docstring)."""
        super().save_pretrained(save_directory, **kwargs)
        from arvis.utils.files import atomic_path

        with atomic_path(Path(save_directory) / "pipeline.py") as tmp:
            tmp.write_text(CUSTOM_PIPELINE_FILE)

    # ------------------------------------------------------------------ inputs
    def encode_prompt(self, prompt: str | Sequence[str]) -> tuple[torch.Tensor, torch.Tensor]:
        """Caption features ``[B, C, D]`` and mask ``[B, C]`` (left-padded) from the text encoder.

        With a T5 ``text_encoder`` and its ``tokenizer`` (official LlamaGen t2i), prompts are tokenized to
        the transformer's condition length ``C`` (``padding="max_length"``, truncated), encoded, and the
        real tokens moved to the end of the row (LlamaGen's left padding); padding features are zeroed.
        """
        if self.text_encoder is None:
            raise ValueError("prompt: this pipeline has no text_encoder; pass prompt_embeds instead")
        prompts = [prompt] if isinstance(prompt, str) else list(prompt)
        if not prompts or not all(isinstance(p, str) for p in prompts):
            raise ValueError(f"prompt: expected a string or a non-empty list of strings, got {prompt!r}")
        length = self.transformer.config.cls_token_num
        if self.tokenizer is None:
            return self.text_encoder.encode(prompts, length=length)
        device = self.text_encoder.device
        tokens = self.tokenizer(prompts, max_length=length, padding="max_length", truncation=True,
                                return_attention_mask=True, add_special_tokens=True, return_tensors="pt")
        ids, mask = tokens["input_ids"].to(device), tokens["attention_mask"].to(device).bool()
        with torch.no_grad():
            features = self.text_encoder(input_ids=ids, attention_mask=mask.long()).last_hidden_state
        if getattr(self.tokenizer, "padding_side", "right") == "left":
            return features * mask[..., None], mask
        # Right-padded → left-padded: rotate each row so that its real tokens end the row.
        valid = mask.sum(1)  # [B]
        source = (torch.arange(length, device=device)[None, :] + valid[:, None]) % length  # [B, C]
        features = features.gather(1, source[..., None].expand(-1, -1, features.shape[-1]))
        mask = mask.gather(1, source)
        return features * mask[..., None], mask

    def _condition(self, class_labels, prompt, prompt_embeds, prompt_embeds_mask) -> Condition:
        device = self.transformer.device
        if self.transformer.is_class_conditional:
            if prompt is not None or prompt_embeds is not None:
                raise ValueError("prompt / prompt_embeds: this is a class-conditional model; pass class_labels")
            if class_labels is None:
                raise ValueError("class_labels: required for a class-conditional model")
            return Condition(class_labels=torch.tensor(self.class_ids(class_labels), device=device))
        if class_labels is not None:
            raise ValueError("class_labels: this is a text-conditional model; pass prompt or prompt_embeds")
        if (prompt is None) == (prompt_embeds is None):
            raise ValueError("pass exactly one of prompt and prompt_embeds")
        if prompt is not None:
            prompt_embeds, prompt_embeds_mask = self.encode_prompt(prompt)
        if prompt_embeds.ndim != 3:
            raise ValueError(f"prompt_embeds must be [batch, tokens, dim], got shape {tuple(prompt_embeds.shape)}")
        if prompt_embeds_mask is None:
            prompt_embeds_mask = torch.ones(prompt_embeds.shape[:2], dtype=torch.bool)
        emb = prompt_embeds.to(device=device, dtype=self.transformer.dtype)
        mask = prompt_embeds_mask.to(device=device, dtype=torch.bool)
        return Condition(embeddings=emb * mask[..., None], mask=mask)

    def codebook_neighbours(self, k: int) -> torch.Tensor:
        """``[V, k]`` latent neighbourhoods of the tokenizer's codebook (LANTERN), cached on disk."""
        from arvis.methods.relaxation import codebook_neighbourhoods

        return codebook_neighbourhoods(self.vqvae.codebook_embeddings(), k)

    # ------------------------------------------------------------------ the family seam
    def resources(self) -> dict[str, Any]:
        """The draft GPT, the codebook neighbourhoods and the multi-scale drafter, where present."""
        return {"draft_model": self.draft_transformer, "neighbours": self.codebook_neighbours,
                "lowres_model": self.lowres_transformer, "upsampler": self.upsampler}

    def decode_memory_bytes(self, batch_size: int, uses_cfg: bool) -> int | None:
        """The static KV cache: ``2 (K, V) × layers × rows × slots × width × bytes``, two rows per image under CFG."""
        config = self.transformer.config
        slots = int(config.block_size) + int(config.cls_token_num)
        rows = batch_size * (2 if uses_cfg else 1)
        return 2 * int(config.n_layer) * rows * slots * int(config.dim) * self.transformer.dtype.itemsize

    def bench_inputs(self, conditions: Sequence[int | str] | None, samples: int, batch_size: int) -> BenchInputs:
        text = not self.transformer.is_class_conditional
        batches = [(idx, self._condition(None, values, None, None) if text else self._condition(values, None, None, None))
                   for idx, values in self.condition_batches(conditions, samples, batch_size)]
        return BenchInputs(batches, lambda cond, sampling, method, gens: decode(self.transformer, cond, sampling,
                                                                                method, gens),
                           lambda name, options: self.build_method(name, **options), tuple(self.token_layout.grid),
                           self.transformer.device, self.transformer)

    # ------------------------------------------------------------------ outputs
    def decode_tokens(self, tokens: torch.Tensor, output_type: str = "pil", known: torch.Tensor | None = None):
        """Token grids ``[B, h, w]`` → images in ``output_type``.

        ``known`` (``[B, h, w]`` bool, optional) marks committed tokens: the other cells are drawn grey
        (partial images: previews, interrupted decodes).
        """
        if output_type == "latent":
            return tokens
        filled = tokens if known is None else torch.where(known, tokens, torch.zeros_like(tokens))
        with torch.no_grad():
            images = self.vqvae.decode_codes(filled.to(self.vqvae.device)).float().cpu()
        if known is not None:
            images = grey_uncommitted(images, known)
        return images_to_output(images, output_type)

    # ------------------------------------------------------------------ call
    @torch.no_grad()
    def __call__(
        self,
        class_labels: int | str | torch.Tensor | Sequence[int | str] | None = None,
        prompt: str | Sequence[str] | None = None,
        prompt_embeds: torch.Tensor | None = None,
        prompt_embeds_mask: torch.Tensor | None = None,
        guidance_scale: float | None = None,
        top_k: int | None = None,
        top_p: float | None = None,
        temperature: float | None = None,
        cfg_interval: int | None = None,
        num_images_per_prompt: int = 1,
        generator: GeneratorArg = None,
        output_type: str = "pil",
        return_dict: bool = True,
        callback_on_step_end: Callable[[LlamaGenPipeline, int, torch.Tensor, dict], dict | None]
        | PipelineCallback | MultiPipelineCallbacks | None = None,
        callback_on_step_end_tensor_inputs: Sequence[str] = ("tokens", "known"),
        method: str = "ar",
        **method_options: Any,
    ) -> LlamaGenPipelineOutput | tuple:
        """Generate images.

        Args:
            class_labels: class ids or names, or an integer tensor of ids (class-conditional models).
            prompt: text prompt(s) (text-conditional models with a text encoder).
            prompt_embeds: ``[B, C, D]`` caption features, left-padded; ``prompt_embeds_mask``: ``[B, C]``.
            guidance_scale: classifier-free guidance (>= 0; 1 disables it).
            top_k: keep the k most likely tokens (0 = all). top_p: nucleus mass in (0, 1].
            temperature: >= 0 (0 = greedy). cfg_interval: -1, or guide only the first tokens (LlamaGen).
                Sampling settings left ``None`` come from :attr:`sampling_defaults` (the model folder's
                ``sampling_defaults.json``), then from :class:`~arvis.engine.SamplingConfig`.
            num_images_per_prompt: images per class label / prompt (>= 1).
            generator: a ``torch.Generator``, or one per image (``B * num_images_per_prompt``).
            output_type: ``"pil"``, ``"np"``, ``"pt"`` or ``"latent"`` (token grids).
            return_dict: return a :class:`LlamaGenPipelineOutput` (else a tuple ``(images, tokens, stats)``).
            callback_on_step_end: diffusers' contract: ``f(pipe, step, committed, callback_kwargs) -> dict | None``
                after every target forward that committed tokens (``step``: the forward's index;
                ``committed``: ``[B]`` tokens committed per image, in place of a timestep;
                ``callback_kwargs``: copies of the tensors named in ``callback_on_step_end_tensor_inputs``).
                A returned dict is honoured: committed tokens are final, so returning changed ``tokens`` or
                ``known`` is an error; set ``pipe._interrupt = True`` to stop early (the output then holds
                the tokens committed so far, ``-1`` elsewhere, drawn grey). ``PipelineCallback`` and
                ``MultiPipelineCallbacks`` objects work too.
            callback_on_step_end_tensor_inputs: which of ``_callback_tensor_inputs`` (``"tokens"`` ``[B, N]``
                int64, ``-1`` where not committed; ``"known"`` ``[B, N]`` bool) the callback receives.
            method: decoding method name (:meth:`methods` lists the ones this model can run).
            **method_options: the method's options (e.g. ``window=16`` for SJD).

        Returns:
            :class:`LlamaGenPipelineOutput` with images, token grids and decode statistics.
        """
        check_output_type(output_type)
        if not isinstance(num_images_per_prompt, int) or num_images_per_prompt < 1:
            raise ValueError(f"num_images_per_prompt must be an integer >= 1, got {num_images_per_prompt!r}")
        tensor_inputs = callback_tensor_inputs(callback_on_step_end, callback_on_step_end_tensor_inputs)
        sampling = self.sampling_config(guidance_scale=guidance_scale, top_k=top_k, top_p=top_p,
                                        temperature=temperature, cfg_interval=cfg_interval)
        condition = self._condition(class_labels, prompt, prompt_embeds, prompt_embeds_mask)
        condition = condition.repeat_interleave(num_images_per_prompt)
        method_obj = self.build_method(method, **method_options)  # refused before anything runs
        tokens, stats = decode_with_progress(self, self.transformer, condition, sampling, method_obj, generator,
                                             callback_on_step_end, tensor_inputs)
        tokens = tokens.view(condition.batch_size, *self.transformer.layout.grid)
        known = tokens != NO_TOKEN if self._interrupt else None  # an interrupted decode: draw the rest grey
        images = self.decode_tokens(tokens, output_type, known)
        self.maybe_free_model_hooks()
        if not return_dict:
            return images, tokens, stats
        return LlamaGenPipelineOutput(images=images, tokens=tokens, stats=stats)


# Written into every saved folder: diffusers' generic loader imports it (custom_pipeline="pipeline",
# trust_remote_code=True) and finds arvis's own class, so the pipeline is the installed one.
CUSTOM_PIPELINE_FILE = '''"""Lets diffusers' generic loader open this arvis folder:

    DiffusionPipeline.from_pretrained(folder, custom_pipeline="pipeline", trust_remote_code=True)

It only imports the pipeline class of the installed arvis package (pip install arvis).
"""

from arvis.pipelines.pipeline_llamagen import LlamaGenPipeline

__all__ = ["LlamaGenPipeline"]
'''
