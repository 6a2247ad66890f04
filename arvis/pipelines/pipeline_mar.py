"""Diffusers-style pipeline for MAR (continuous-token) class-conditional image generation.

The conventions of :class:`~arvis.pipelines.VARPipeline`: one ``__call__`` with ``generator`` (one, or one
per image), ``num_images_per_prompt``, ``output_type``, ``return_dict``, ``callback_on_step_end``, a progress
bar and the engine's statistics object (``target_forwards`` counts transformer forwards; the diffusion head's
work is in ``stats.samples[i].extra``: ``head_steps``, ``head_forwards``, ``head_s``). MAR's own sampling
conventions are kept: ``num_iter`` masked iterations with the cosine schedule, ``guidance_scale`` is MAR's
``cfg`` with its ``linear`` schedule (or ``constant``), ``temperature`` is the diffusion head's.

A pipeline whose transformer is the causal raster variant (``MARTransformer(causal=True)``) decodes one
token per transformer forward with a KV cache (``num_iter`` does not apply): the AR baseline of continuous
speculative decoding.

Components (a ``save_pretrained`` folder holds one subfolder each): ``transformer``
(:class:`~arvis.models.mar.MARTransformer`), ``head`` (:class:`~arvis.models.diffusion_head.MARDiffusionHead`),
``vae`` (diffusers ``AutoencoderKL``, :mod:`arvis.tokenizers.mar_vae`); optional ``draft_transformer`` /
``draft_head`` (a smaller MAR for speculative decoding).

Example:
    >>> from arvis.pipelines.pipeline_mar import MARPipeline
    >>> pipe = MARPipeline.from_pretrained("path/to/mar-folder")  # doctest: +SKIP
    >>> out = pipe(class_labels=[207, 360], num_iter=64, guidance_scale=3.0, temperature=1.0,
    ...            generator=[torch.Generator().manual_seed(i) for i in range(2)])
    >>> out.images[0].save("sample.png"); print(out.stats.format())
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import PIL.Image
import torch
from diffusers import AutoencoderKL, DiffusionPipeline
from diffusers.utils import BaseOutput

from arvis.engine.continuous import ContinuousDecoder, check_num_iter
from arvis.engine.sampling import SamplingConfig
from arvis.engine.stats import BatchStats
from arvis.models.diffusion_head import MARDiffusionHead
from arvis.models.mar import MARModel, MARTransformer
from arvis.models.protocol import Condition
from arvis.pipelines.common import (
    Interrupted,
    callback_tensor_inputs,
    check_output_type,
    grey_uncommitted,
    images_to_output,
    run_step_callback,
)
from arvis.pipelines.interface import ArvisPipeline, BenchInputs
from arvis.tokenizers.mar_vae import KL_VAE_FOLDER
from arvis.utils.config_check import CheckedPipelineMixin
from arvis.utils.random import GeneratorArg

# Settings a MAR folder's sampling_defaults.json may hold (all but num_iter are SamplingConfig's).
MAR_SAMPLING_FIELDS = ("guidance_scale", "temperature", "num_iter", "cfg_schedule")


@dataclass
class MARPipelineOutput(BaseOutput):
    """Images (in ``output_type``), tokens ``[B, L, D]`` (VAE latents in raster order, MAR's scale), statistics."""

    images: list[PIL.Image.Image] | np.ndarray | torch.Tensor
    tokens: torch.Tensor
    stats: BatchStats


class MARPipeline(ArvisPipeline, CheckedPipelineMixin, DiffusionPipeline):
    """Class-conditional generation with a MAR transformer, its diffusion head and the KL VAE (module docstring)."""

    model_cpu_offload_seq = "transformer->head->vae"
    _optional_components = ["draft_transformer", "draft_head"]
    sampling_fields = MAR_SAMPLING_FIELDS
    guidance = "mar"
    component_checks = {"vae": KL_VAE_FOLDER}  # a diffusers class: checked by its declared bounds before loading

    def __init__(self, transformer: MARTransformer, head: MARDiffusionHead, vae: AutoencoderKL,
                 draft_transformer: MARTransformer | None = None, draft_head: MARDiffusionHead | None = None):
        super().__init__()
        MARModel(transformer, head).check("head")
        if vae.config.latent_channels != transformer.config.vae_embed_dim:
            raise ValueError(f"vae: {vae.config.latent_channels} latent channels; the transformer reads "
                             f"{transformer.config.vae_embed_dim}")
        stride = 2 ** (len(vae.config.block_out_channels) - 1)
        if stride != transformer.config.vae_stride:
            raise ValueError(f"vae: stride {stride}; the transformer expects vae_stride={transformer.config.vae_stride}")
        if (draft_transformer is None) != (draft_head is None):
            raise ValueError("draft_transformer / draft_head: give both or neither")
        if draft_transformer is not None:
            MARModel(draft_transformer, draft_head).check("draft_head")
            if (draft_transformer.seq_len, draft_transformer.token_embed_dim, draft_transformer.num_classes) != (
                    transformer.seq_len, transformer.token_embed_dim, transformer.num_classes):
                raise ValueError("draft_transformer: its grid, token channels or classes differ from the transformer's")
        self.register_modules(transformer=transformer, head=head, vae=vae, draft_transformer=draft_transformer,
                              draft_head=draft_head)

    # ------------------------------------------------------------------ sampling settings
    def sampling_config(self, **settings: Any) -> SamplingConfig:
        """The target distribution's settings of a call (given values, else the defaults): ``guidance_scale``,
        ``temperature`` and ``cfg_schedule`` (MAR's ``linear`` unless the call or the folder says otherwise);
        ``top_k`` / ``top_p`` do not apply to continuous tokens and are refused."""
        for name, neutral in (("top_k", 0), ("top_p", 1.0)):
            if settings.get(name) not in (None, neutral):
                raise ValueError(f"{name}: MAR's tokens are continuous (no vocabulary to filter); leave {name} unset")
        settings = {k: v for k, v in settings.items() if k not in ("top_k", "top_p")}
        if settings.get("cfg_schedule") is None and "cfg_schedule" not in self.sampling_defaults:
            settings["cfg_schedule"] = "linear"
        return super().sampling_config(**settings)

    # ------------------------------------------------------------------ inputs and outputs
    @torch.no_grad()
    def decode_tokens(self, tokens: torch.Tensor, output_type: str = "pil", known: torch.Tensor | None = None):
        """Tokens ``[B, L, D]`` or ``[B, h, w, D]`` (MAR's scale) → images in ``output_type`` (``latent``: the tokens).

        ``known`` (``[B, L]`` or ``[B, h, w]`` bool, optional) marks committed tokens: the others decode as zeros
        and their cells are drawn grey (partial images: the demo's previews).
        """
        check_output_type(output_type)
        if output_type == "latent":
            return tokens
        B = tokens.shape[0]
        tokens = tokens.reshape(B, self.transformer.seq_len, -1).float()
        if known is not None:
            known = known.reshape(B, self.transformer.seq_len).to(tokens.device)
            tokens = torch.where(known[..., None], tokens, torch.zeros_like(tokens))
        latents = self.transformer.unpatchify(tokens) / self.vae.config.scaling_factor
        images = self.vae.decode(latents.to(self.vae.dtype)).sample
        if known is not None:
            images = grey_uncommitted(images, known.view(B, self.transformer.seq_h, self.transformer.seq_w))
        return images_to_output(images, output_type)

    @torch.no_grad()
    def tokenizer_roundtrip(self, images: torch.Tensor) -> torch.Tensor:
        """Images ``[B, 3, H, W]`` in ``[-1, 1]`` through the KL VAE's posterior mean and back."""
        return self.vae.decode(self.vae.encode(images.to(self.vae.dtype)).latent_dist.mean).sample.float()

    # ------------------------------------------------------------------ the family seam
    def resources(self) -> dict[str, Any]:
        draft = None if self.draft_transformer is None else MARModel(self.draft_transformer, self.draft_head)
        return {"draft_model": draft}

    def baseline_options(self, method: str, options: dict[str, Any]) -> dict[str, Any]:
        """``cspd-exact`` is exact for the causal sampler with its ``final_std``: the baseline uses the same."""
        if method == "cspd-exact" and options.get("final_std"):
            return {"final_std": float(options["final_std"])}
        return {}

    def bench_inputs(self, conditions: Sequence[int | str] | None, samples: int, batch_size: int) -> BenchInputs:
        device = self.transformer.device
        batches = [(idx, Condition(class_labels=torch.tensor(self.class_ids(values), device=device)))
                   for idx, values in self.condition_batches(conditions, samples, batch_size)]
        return BenchInputs(batches, lambda cond, sampling, method, gens: self.decode(cond.class_labels, sampling,
                                                                                     method, gens),
                           lambda name, options: self.build_method(name, **options), tuple(self.token_layout.grid),
                           self.transformer.device)

    def decode(self, labels: torch.Tensor, sampling: SamplingConfig, method: Any, generator: GeneratorArg = None,
               on_step: Callable[[ContinuousDecoder], None] | None = None, num_iter: int | None = None
               ) -> tuple[torch.Tensor, BatchStats]:
        """Tokens ``[B, L, D]`` and statistics for class ids ``labels [B]`` with a built continuous method
        (``num_iter``: default the folder's, else 64)."""
        num_iter = check_num_iter(num_iter if num_iter is not None else int(self.sampling_defaults.get("num_iter", 64)))
        decoder = ContinuousDecoder(MARModel(self.transformer, self.head), labels, sampling, generator, method.name,
                                    on_step, num_iter)
        try:
            stats = decoder.finish(method.run(decoder))
        except Interrupted:  # a step callback set pipe._interrupt: the tokens committed so far
            stats = decoder.finish(partial=True)
        return decoder.tokens, stats

    @torch.no_grad()
    def __call__(
        self,
        class_labels: int | str | Sequence[int | str] | torch.Tensor,
        num_iter: int | None = None,
        guidance_scale: float | None = None,
        cfg_schedule: str | None = None,
        temperature: float | None = None,
        num_images_per_prompt: int = 1,
        generator: GeneratorArg = None,
        output_type: str = "pil",
        return_dict: bool = True,
        callback_on_step_end: Callable[[MARPipeline, int, torch.Tensor, dict], Any] | None = None,
        callback_on_step_end_tensor_inputs: Sequence[str] = ("tokens", "known"),
        method: str = "ar",
        top_k: int | None = None,
        top_p: float | None = None,
        **method_options: Any,
    ) -> MARPipelineOutput | tuple:
        """Generate images.

        Args:
            class_labels: class ids or names.
            num_iter: masked iterations (>= 1; default: the folder's, else 64); ignored by the causal variant.
            guidance_scale: MAR's ``cfg`` (>= 0, finite; 1 = no guidance; default: the folder's, else 1).
            cfg_schedule: ``linear`` (MAR's) or ``constant``.
            temperature: the diffusion head's temperature (>= 0; default: the folder's, else 1).
            num_images_per_prompt: images per class label (>= 1).
            generator: a ``torch.Generator``, or one per image (``B · num_images_per_prompt``).
            output_type: ``"pil"``, ``"np"``, ``"pt"`` or ``"latent"`` (the tokens ``[B, L, D]``).
            return_dict: return a :class:`MARPipelineOutput` (else ``(images, tokens, stats)``).
            callback_on_step_end: ``f(pipe, step, committed_per_sample, {"tokens", "known"})`` after every
                transformer forward's tokens are sampled.
            callback_on_step_end_tensor_inputs: which of ``"tokens"`` ``[B, L, D]`` and ``"known"`` ``[B, L]`` the
                callback receives (copies). Set ``pipe._interrupt = True`` in it to stop early: the output then
                holds the tokens committed so far (zeros elsewhere, drawn grey).
            method: ``ar``, ``cspd-exact`` or ``cspd`` (:meth:`methods` lists the ones this model runs);
                ``**method_options`` are the method's (``final_std`` for the causal ``ar``: the step-0 std of the
                sampler ``cspd-exact`` with the same ``final_std`` is exact for; ``window``, ``final_std``,
                ``max_rounds`` for ``cspd-exact``; ``verify_every``, ``prefill_ratio``, ``tau``, ``max_tries``
                for ``cspd``).
            top_k, top_p: not applicable (continuous tokens); refused unless unset.

        Returns:
            :class:`MARPipelineOutput` with images, tokens and decode statistics.
        """
        check_output_type(output_type)
        if not isinstance(num_images_per_prompt, int) or isinstance(num_images_per_prompt, bool) \
                or num_images_per_prompt < 1:
            raise ValueError(f"num_images_per_prompt must be an integer >= 1, got {num_images_per_prompt!r}")
        sampling = self.sampling_config(guidance_scale=guidance_scale, temperature=temperature, top_k=top_k,
                                        top_p=top_p, cfg_schedule=cfg_schedule)
        method_obj = self.build_method(method, **method_options)  # refused before anything runs
        if num_iter is not None:
            check_num_iter(num_iter)
        device = self.transformer.device
        labels = torch.tensor(self.class_ids(class_labels), device=device).repeat_interleave(num_images_per_prompt)
        B = labels.shape[0]
        if isinstance(generator, list | tuple) and len(generator) != B:
            raise ValueError(f"generator: got {len(generator)} generators for {B} images; pass one, or one per image")
        tensor_inputs = callback_tensor_inputs(callback_on_step_end, callback_on_step_end_tensor_inputs)
        total = self.transformer.seq_len
        progress = self.progress_bar(total=total)
        done = [0]
        self._interrupt = False
        known: list[torch.Tensor] = []

        def on_step(decoder: ContinuousDecoder) -> None:
            n = int(decoder.known[0].sum())  # one host sync per step, for the bar
            progress.update(n - done[0])
            done[0] = n
            known[:] = [decoder.known]
            run_step_callback(self, callback_on_step_end, tensor_inputs, decoder.step, decoder.tokens, decoder.known)

        try:
            tokens, stats = self.decode(labels, sampling, method_obj, generator, on_step, num_iter=num_iter)
        finally:
            progress.close()
        partial = known[0] if self._interrupt and known else None  # an interrupted decode: draw the rest grey
        images = self.decode_tokens(tokens, output_type, partial)
        self.maybe_free_model_hooks()
        if not return_dict:
            return images, tokens, stats
        return MARPipelineOutput(images=images, tokens=tokens, stats=stats)


__all__ = ["MARPipeline", "MARPipelineOutput"]
