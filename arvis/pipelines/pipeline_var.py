"""Diffusers-style pipeline for VAR (next-scale prediction) class-conditional image generation.

The conventions of :class:`~arvis.pipelines.LlamaGenPipeline`: one ``__call__`` with ``generator`` (one,
or one per image), ``num_images_per_prompt``, ``output_type``, ``return_dict``, ``callback_on_step_end``,
a progress bar and the engine's statistics object, plus ``method`` and its options. VAR's own sampling
conventions are kept: ``guidance_scale`` is VAR's ``cfg`` with its ramp over scales (the ``var`` rule of
:mod:`arvis.engine.guidance`: ``t_s = guidance_scale · s / (S − 1)``, logits ``(1 + t)·c − t·u``; 0 disables
guidance), top-k / top-p
as in ``autoregressive_infer_cfg``. With the same weights and the same random draws the tokens are the
official sampler's (``eval/compare_var_reference.py`` checks it).

Methods: ``ar`` (plain next-scale decoding, lossless), ``code`` (large model drafts the first scales,
``draft_transformer`` refines the rest), ``cfg-cutoff``, ``fastvar`` — all lossy but the first
(:mod:`arvis.methods.next_scale`).

Example:
    >>> from arvis.pipelines import VARPipeline
    >>> pipe = VARPipeline.from_pretrained("var")  # doctest: +SKIP
    >>> out = pipe(class_labels=["coffee", 3], guidance_scale=2.0, generator=torch.Generator().manual_seed(0))
    >>> out.images[0].save("sample.png"); print(out.stats.format())
    >>> fast = pipe(class_labels=["coffee", 3], method="code", draft_scales=4)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from diffusers import DiffusionPipeline

from arvis.engine.next_scale import NextScaleDecoder
from arvis.models.protocol import Condition
from arvis.models.var import VARTransformer
from arvis.pipelines.common import (
    Interrupted,
    callback_tensor_inputs,
    check_output_type,
    images_to_output,
    run_step_callback,
)
from arvis.pipelines.interface import ArvisPipeline, BenchInputs
from arvis.pipelines.pipeline_llamagen import LlamaGenPipelineOutput
from arvis.tokenizers.var_vq import VARVQModel
from arvis.utils.config_check import CheckedPipelineMixin
from arvis.utils.random import GeneratorArg

# Same fields as LlamaGen's output: images, tokens ([B, L], every scale concatenated), stats.
VARPipelineOutput = LlamaGenPipelineOutput


class VARPipeline(ArvisPipeline, CheckedPipelineMixin, DiffusionPipeline):
    """Class-conditional generation with a VAR transformer and its multi-scale VQ tokenizer.

    Components:
        transformer: :class:`~arvis.models.var.VARTransformer` (the target model).
        vqvae: :class:`~arvis.tokenizers.var_vq.VARVQModel` (codes ↔ pixels, next-scale inputs).
        draft_transformer: optional smaller VAR on the same tokenizer (CoDe's refiner).
    """

    model_cpu_offload_seq = "transformer->vqvae"
    _optional_components = ["draft_transformer"]
    guidance = "var"
    partial_previews = False  # a pyramid has no partial image

    def __init__(self, transformer: VARTransformer, vqvae: VARVQModel, draft_transformer: VARTransformer | None = None):
        super().__init__()
        layout = transformer.scale_layout
        if layout.vocab_size != vqvae.codebook_size or layout.patch_nums != vqvae.patch_nums:
            raise ValueError(f"vqvae: its codebook ({vqvae.codebook_size} entries, scales {vqvae.patch_nums}) does not "
                             f"match the transformer's ({layout.vocab_size}, {layout.patch_nums}); use the tokenizer "
                             f"the transformer was trained with")
        if transformer.config.Cvae != vqvae.config.z_channels:
            raise ValueError(f"vqvae: code dimension {vqvae.config.z_channels}, the transformer reads {transformer.config.Cvae}")
        if draft_transformer is not None and (draft_transformer.scale_layout != layout
                                              or draft_transformer.config.num_classes != transformer.config.num_classes):
            raise ValueError("draft_transformer: its scales, vocabulary or classes differ from the transformer's")
        self.register_modules(transformer=transformer, vqvae=vqvae, draft_transformer=draft_transformer)

    @torch.no_grad()
    def decode_tokens(self, tokens: torch.Tensor, output_type: str = "pil"):
        """Token pyramids ``[B, L]`` (or ``[B, 1, L]``, the ``layout.grid`` view) → images in ``output_type``.

        A pyramid whose last scales are not committed (``-1``: an interrupted decode) decodes from the scales it
        has: VAR's coarser reconstruction."""
        if output_type == "latent":
            return tokens
        ids = self.vqvae.split_codes(tokens.reshape(tokens.shape[0], -1).to(self.vqvae.device))
        committed = 0
        while committed < len(ids) and bool((ids[committed] >= 0).all()):
            committed += 1
        if committed == 0:
            raise ValueError("tokens: no scale is committed; nothing to decode")
        f_hat = self.vqvae.quantize.fhat_from_ids(ids[:committed])
        images = self.vqvae.fhat_to_img(f_hat.to(self.vqvae.post_quant_conv.weight.dtype))
        return images_to_output(images, output_type)

    # ------------------------------------------------------------------ the family seam
    def resources(self) -> dict[str, Any]:
        return {"draft_model": self.draft_transformer}

    def decode(self, labels: torch.Tensor, sampling: Any, method: Any, generator: GeneratorArg = None,
               on_scale: Callable[[NextScaleDecoder], None] | None = None) -> tuple[torch.Tensor, Any]:
        """Token pyramids ``[B, L]`` and statistics for class ids ``labels [B]`` with a built next-scale method."""
        decoder = NextScaleDecoder(self.transformer, self.vqvae.quantize, labels, sampling, generator, method.name,
                                   on_scale)
        extra = method.run(decoder)
        return decoder.tokens, decoder.finish(extra)

    def bench_inputs(self, conditions: Sequence[int | str] | None, samples: int, batch_size: int) -> BenchInputs:
        device = self.transformer.device
        batches = [(idx, Condition(class_labels=torch.tensor(self.class_ids(values), device=device)))
                   for idx, values in self.condition_batches(conditions, samples, batch_size)]
        return BenchInputs(batches, lambda cond, sampling, method, gens: self.decode(cond.class_labels, sampling,
                                                                                     method, gens),
                           lambda name, options: self.build_method(name, **options), tuple(self.token_layout.grid),
                           self.transformer.device)

    @torch.no_grad()
    def __call__(
        self,
        class_labels: int | str | Sequence[int | str],
        guidance_scale: float | None = None,
        top_k: int | None = None,
        top_p: float | None = None,
        temperature: float | None = None,
        num_images_per_prompt: int = 1,
        generator: GeneratorArg = None,
        output_type: str = "pil",
        return_dict: bool = True,
        callback_on_step_end: Callable[[VARPipeline, int, torch.Tensor, dict], Any] | None = None,
        callback_on_step_end_tensor_inputs: Sequence[str] = ("tokens", "known"),
        method: str = "ar",
        **method_options: Any,
    ) -> VARPipelineOutput | tuple:
        """Generate images.

        Args:
            class_labels: class ids or names.
            guidance_scale: VAR's CFG strength (>= 0; ramped over scales; 0 disables guidance).
            top_k: keep the k most likely tokens (0 = all). top_p: nucleus mass in (0, 1] (1 = off).
            temperature: >= 0 (0 = greedy).
                Settings left ``None`` come from :attr:`sampling_defaults` (the model folder's
                ``sampling_defaults.json``), then from :class:`~arvis.engine.SamplingConfig`.
            num_images_per_prompt: images per class label (>= 1).
            generator: a ``torch.Generator``, or one per image (``B * num_images_per_prompt``).
            output_type: ``"pil"``, ``"np"``, ``"pt"`` or ``"latent"`` (the token pyramid ``[B, L]``).
            return_dict: return a :class:`VARPipelineOutput` (else ``(images, tokens, stats)``).
            callback_on_step_end: ``f(pipe, scale, committed_per_sample, {"tokens", "known"})`` after every
                committed scale.
            method: ``ar``, ``code``, ``cfg-cutoff`` or ``fastvar`` (see :mod:`arvis.methods.next_scale`;
                :meth:`methods` lists the ones this model can run).
            **method_options: the method's options (e.g. ``draft_scales=4`` for ``code``).

        Returns:
            :class:`VARPipelineOutput` with images, tokens ``[B, L]`` and decode statistics.
        """
        check_output_type(output_type)
        if not isinstance(num_images_per_prompt, int) or num_images_per_prompt < 1:
            raise ValueError(f"num_images_per_prompt must be an integer >= 1, got {num_images_per_prompt!r}")
        sampling = self.sampling_config(temperature=temperature, top_k=top_k, top_p=top_p,
                                        guidance_scale=guidance_scale)
        device = self.transformer.device
        labels = torch.tensor(self.class_ids(class_labels), device=device).repeat_interleave(num_images_per_prompt)
        B, L = labels.shape[0], self.transformer.scale_layout.num_tokens
        if isinstance(generator, list | tuple) and len(generator) != B:
            raise ValueError(f"generator: got {len(generator)} generators for {B} images; pass one, or one per image")
        method_obj = self.build_method(method, **method_options)  # refused before anything runs

        tensor_inputs = callback_tensor_inputs(callback_on_step_end, callback_on_step_end_tensor_inputs)
        progress = self.progress_bar(total=self.transformer.scale_layout.num_scales)
        known = torch.zeros(B, L, dtype=torch.bool, device=device)
        self._interrupt = False

        def on_scale(decoder: NextScaleDecoder) -> None:
            progress.update(1)
            known[:, : decoder.layout.bounds[decoder.committed - 1][1]] = True
            run_step_callback(self, callback_on_step_end, tensor_inputs, decoder.committed - 1, decoder.tokens, known)

        decoder = NextScaleDecoder(self.transformer, self.vqvae.quantize, labels, sampling, generator, method_obj.name,
                                   on_scale)
        try:
            stats = decoder.finish(method_obj.run(decoder))
        except Interrupted:  # the scales committed so far
            stats = decoder.finish(partial=True)
        finally:
            progress.close()
        tokens = decoder.tokens
        images = self.decode_tokens(tokens, output_type)
        self.maybe_free_model_hooks()
        if not return_dict:
            return images, tokens, stats
        return VARPipelineOutput(images=images, tokens=tokens, stats=stats)


__all__ = ["VARPipeline", "VARPipelineOutput"]
