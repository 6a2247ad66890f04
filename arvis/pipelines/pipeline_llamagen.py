"""Diffusers-style pipeline for LlamaGen-style class- and text-conditional image generation.

One ``__call__`` with diffusers' conventions (``generator``, ``num_images_per_prompt``,
``output_type``, ``return_dict``, ``callback_on_step_end``) plus ``method`` and its options: the
decoding method changes how fast the tokens come, never what they are distributed as (lossless
methods) or by how much (lossy methods, which say so).

Example:
    >>> from arvis.pipelines import LlamaGenPipeline
    >>> pipe = LlamaGenPipeline.from_pretrained("arvis/weights/llamagen-c2i-photos")  # doctest: +SKIP
    >>> out = pipe(class_labels=[3, 7], guidance_scale=3.0, generator=torch.Generator().manual_seed(0))
    >>> out.images[0].save("sample.png"); print(out.stats.format())
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import PIL.Image
import torch
from diffusers import DiffusionPipeline
from diffusers.utils import BaseOutput

from arvis.engine.engine import DecodeEngine
from arvis.engine.sampling import SamplingConfig
from arvis.engine.stats import BatchStats
from arvis.methods import decode, with_resources
from arvis.models.llamagen import LlamaGenTransformer
from arvis.models.protocol import Condition
from arvis.models.text_encoder import WordTextEncoder
from arvis.tokenizers.llamagen_vq import LlamaGenVQModel
from arvis.utils.config_check import CheckedPipelineMixin
from arvis.utils.random import GeneratorArg

OUTPUT_TYPES = ("pil", "np", "pt", "latent")


@dataclass
class LlamaGenPipelineOutput(BaseOutput):
    """Output of :class:`LlamaGenPipeline`.

    Attributes:
        images: PIL images, ``np.ndarray [B, H, W, 3]`` in [0, 1], ``torch.Tensor [B, 3, H, W]`` in
            [0, 1], or the token grids ``[B, h, w]`` for ``output_type="latent"``.
        tokens: ``[B, h, w]`` int64 generated token ids.
        stats: decode statistics (per sample and for the batch).
    """

    images: list[PIL.Image.Image] | np.ndarray | torch.Tensor
    tokens: torch.Tensor
    stats: BatchStats


class LlamaGenPipeline(CheckedPipelineMixin, DiffusionPipeline):
    """Class- or text-conditional generation with a LlamaGen GPT and its VQ tokenizer.

    Components:
        transformer: :class:`~arvis.models.llamagen.LlamaGenTransformer` (the target model).
        vqvae: :class:`~arvis.tokenizers.llamagen_vq.LlamaGenVQModel` (codes ↔ pixels).
        text_encoder: optional; maps prompts to caption features for ``t2i`` transformers.
        draft_transformer: optional smaller GPT for draft-model speculative decoding.
    """

    model_cpu_offload_seq = "text_encoder->transformer->vqvae"
    _optional_components = ["text_encoder", "draft_transformer"]

    # text_encoder: arvis's WordTextEncoder (imported above so that from_pretrained can resolve the library
    # a saved model_index.json names) or a transformers T5 encoder for official LlamaGen t2i checkpoints.
    def __init__(self, transformer: LlamaGenTransformer, vqvae: LlamaGenVQModel,
                 text_encoder: WordTextEncoder | Any = None,
                 draft_transformer: LlamaGenTransformer | None = None):
        super().__init__()
        if transformer.config.vocab_size != vqvae.config.codebook_size:
            raise ValueError(
                f"vqvae: its codebook has {vqvae.config.codebook_size} entries but the transformer predicts "
                f"{transformer.config.vocab_size} token ids; use the tokenizer the transformer was trained with"
            )
        if draft_transformer is not None and draft_transformer.config.vocab_size != transformer.config.vocab_size:
            raise ValueError("draft_transformer: its vocabulary differs from the transformer's")
        self.register_modules(transformer=transformer, vqvae=vqvae, text_encoder=text_encoder,
                              draft_transformer=draft_transformer)

    # ------------------------------------------------------------------ inputs
    @property
    def class_names(self) -> list[str] | None:
        """Names of the class ids (when the transformer's config carries them)."""
        return getattr(self.transformer.config, "class_names", None)

    def class_ids(self, labels: int | str | Sequence[int | str]) -> list[int]:
        """Class ids from ids or names; ``ValueError`` names the offending label and the valid range."""
        if isinstance(labels, int | str):
            labels = [labels]
        n = self.transformer.config.num_classes
        names = self.class_names or []
        ids = []
        for label in labels:
            if isinstance(label, str):
                if label not in names:
                    raise ValueError(f"class_labels: unknown class name {label!r}; known names: {names or 'none'}")
                ids.append(names.index(label))
            elif isinstance(label, int | np.integer) and not isinstance(label, bool):
                if not 0 <= int(label) < n:
                    raise ValueError(f"class_labels: {label} is not a class id of this model (valid: 0..{n - 1})")
                ids.append(int(label))
            else:
                raise ValueError(f"class_labels: expected ints or class names, got {label!r}")
        if not ids:
            raise ValueError("class_labels: empty")
        return ids

    def encode_prompt(self, prompt: str | Sequence[str]) -> tuple[torch.Tensor, torch.Tensor]:
        """Caption features ``[B, C, D]`` and mask ``[B, C]`` (left-padded) from the text encoder."""
        if self.text_encoder is None:
            raise ValueError("prompt: this pipeline has no text_encoder; pass prompt_embeds instead")
        prompts = [prompt] if isinstance(prompt, str) else list(prompt)
        return self.text_encoder.encode(prompts, length=self.transformer.config.cls_token_num)

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

    # ------------------------------------------------------------------ outputs
    def decode_tokens(self, tokens: torch.Tensor, output_type: str = "pil"):
        """Token grids ``[B, h, w]`` → images in ``output_type``."""
        if output_type == "latent":
            return tokens
        with torch.no_grad():
            images = self.vqvae.decode_codes(tokens.to(self.vqvae.device))
        images = ((images.float() + 1) / 2).clamp(0, 1).cpu()
        if output_type == "pt":
            return images
        array = images.permute(0, 2, 3, 1).numpy()
        if output_type == "np":
            return array
        return [PIL.Image.fromarray((a * 255).round().astype(np.uint8)) for a in array]

    # ------------------------------------------------------------------ call
    @torch.no_grad()
    def __call__(
        self,
        class_labels: int | str | Sequence[int | str] | None = None,
        prompt: str | Sequence[str] | None = None,
        prompt_embeds: torch.Tensor | None = None,
        prompt_embeds_mask: torch.Tensor | None = None,
        guidance_scale: float = 4.0,
        top_k: int = 0,
        top_p: float = 1.0,
        temperature: float = 1.0,
        cfg_interval: int = -1,
        num_images_per_prompt: int = 1,
        generator: GeneratorArg = None,
        output_type: str = "pil",
        return_dict: bool = True,
        callback_on_step_end: Callable[[LlamaGenPipeline, int, torch.Tensor, dict], Any] | None = None,
        method: str = "ar",
        **method_options: Any,
    ) -> LlamaGenPipelineOutput | tuple:
        """Generate images.

        Args:
            class_labels: class ids or names (class-conditional models).
            prompt: text prompt(s) (text-conditional models with a text encoder).
            prompt_embeds: ``[B, C, D]`` caption features, left-padded; ``prompt_embeds_mask``: ``[B, C]``.
            guidance_scale: classifier-free guidance (>= 0; 1 disables it).
            top_k: keep the k most likely tokens (0 = all). top_p: nucleus mass in (0, 1].
            temperature: >= 0 (0 = greedy). cfg_interval: -1, or guide only the first tokens (LlamaGen).
            num_images_per_prompt: images per class label / prompt (>= 1).
            generator: a ``torch.Generator``, or one per image (``B * num_images_per_prompt``).
            output_type: ``"pil"``, ``"np"``, ``"pt"`` or ``"latent"`` (token grids).
            return_dict: return a :class:`LlamaGenPipelineOutput` (else a tuple ``(images, tokens, stats)``).
            callback_on_step_end: ``f(pipe, forward_index, committed_per_sample, {"tokens", "known"})``,
                called after every target forward that committed tokens (streaming previews).
            method: decoding method name (``arvis.methods.available_methods()``).
            **method_options: the method's options (e.g. ``window=16`` for SJD).

        Returns:
            :class:`LlamaGenPipelineOutput` with images, token grids and decode statistics.
        """
        if output_type not in OUTPUT_TYPES:
            raise ValueError(f"output_type must be one of {OUTPUT_TYPES}, got {output_type!r}")
        if not isinstance(num_images_per_prompt, int) or num_images_per_prompt < 1:
            raise ValueError(f"num_images_per_prompt must be an integer >= 1, got {num_images_per_prompt!r}")
        sampling = SamplingConfig(temperature=temperature, top_k=top_k, top_p=top_p,
                                  guidance_scale=guidance_scale, cfg_interval=cfg_interval)
        condition = self._condition(class_labels, prompt, prompt_embeds, prompt_embeds_mask)
        condition = condition.repeat_interleave(num_images_per_prompt)
        B, N = condition.batch_size, self.transformer.layout.num_tokens
        if isinstance(generator, list | tuple) and len(generator) != B:
            raise ValueError(f"generator: got {len(generator)} generators for {B} images; pass one, or one per image")
        method_options = with_resources(method, method_options, self.draft_transformer, self.codebook_neighbours)

        progress = self.progress_bar(total=B * N)
        committed = [0]
        last_update = [0.0]

        def on_commit(engine: DecodeEngine) -> None:
            now = time.monotonic()
            if now - last_update[0] > 0.1:  # a host sync for the display at most 10 times a second
                done = int(engine.known.sum())
                progress.update(done - committed[0])
                committed[0], last_update[0] = done, now
            if callback_on_step_end is not None:
                callback_on_step_end(self, engine.stats.forward_index - 1, engine.known.sum(-1),
                                     {"tokens": engine.tokens, "known": engine.known})

        try:
            tokens, stats = decode(self.transformer, condition, sampling, method, generator, on_commit, **method_options)
            progress.update(B * N - committed[0])
        finally:
            progress.close()
        grid = self.transformer.layout.grid
        tokens = tokens.view(B, *grid)
        images = self.decode_tokens(tokens, output_type)
        self.maybe_free_model_hooks()
        if not return_dict:
            return images, tokens, stats
        return LlamaGenPipelineOutput(images=images, tokens=tokens, stats=stats)
