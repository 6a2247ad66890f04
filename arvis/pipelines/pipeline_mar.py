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

from arvis.engine.sampling import SamplingConfig
from arvis.engine.stats import BatchStats
from arvis.methods.cspd import decode_causal_speculative, decode_masked_cspd, method_settings
from arvis.methods.mar import MARStep, check_cfg_schedule, check_num_iter, decode_causal, decode_masked
from arvis.models.diffusion_head import MARDiffusionHead
from arvis.models.mar import MARTransformer
from arvis.models.protocol import Condition
from arvis.pipelines.common import PREVIEW_GREY, SamplingDefaultsMixin, check_output_type, images_to_output
from arvis.pipelines.pipeline_llamagen import LlamaGenPipeline
from arvis.tokenizers.mar_vae import KL_VAE_FOLDER
from arvis.utils.config_check import CheckedPipelineMixin
from arvis.utils.random import GeneratorArg

# Settings a MAR folder's sampling_defaults.json may hold (the first two are also SamplingConfig's).
MAR_SAMPLING_FIELDS = ("guidance_scale", "temperature", "num_iter", "cfg_schedule")
# "ar": MAR's own sampler (masked) or raster AR (causal); "cspd-exact": exact speculative, causal target + causal
# draft; "cspd": the published (lossy) CSpD, masked target + masked draft.
METHODS = ("ar", "cspd-exact", "cspd")


@dataclass
class MARPipelineOutput(BaseOutput):
    """Images (in ``output_type``), tokens ``[B, L, D]`` (VAE latents in raster order, MAR's scale), statistics."""

    images: list[PIL.Image.Image] | np.ndarray | torch.Tensor
    tokens: torch.Tensor
    stats: BatchStats


class MARPipeline(SamplingDefaultsMixin, CheckedPipelineMixin, DiffusionPipeline):
    """Class-conditional generation with a MAR transformer, its diffusion head and the KL VAE (module docstring)."""

    model_cpu_offload_seq = "transformer->head->vae"
    _optional_components = ["draft_transformer", "draft_head"]
    sampling_fields = MAR_SAMPLING_FIELDS
    component_checks = {"vae": KL_VAE_FOLDER}  # a diffusers class: checked by its declared bounds before loading

    def __init__(self, transformer: MARTransformer, head: MARDiffusionHead, vae: AutoencoderKL,
                 draft_transformer: MARTransformer | None = None, draft_head: MARDiffusionHead | None = None):
        super().__init__()
        _check_pair(transformer, head, "head")
        if vae.config.latent_channels != transformer.config.vae_embed_dim:
            raise ValueError(f"vae: {vae.config.latent_channels} latent channels; the transformer reads "
                             f"{transformer.config.vae_embed_dim}")
        stride = 2 ** (len(vae.config.block_out_channels) - 1)
        if stride != transformer.config.vae_stride:
            raise ValueError(f"vae: stride {stride}; the transformer expects vae_stride={transformer.config.vae_stride}")
        if (draft_transformer is None) != (draft_head is None):
            raise ValueError("draft_transformer / draft_head: give both or neither")
        if draft_transformer is not None:
            _check_pair(draft_transformer, draft_head, "draft_head")
            if (draft_transformer.seq_len, draft_transformer.token_embed_dim, draft_transformer.num_classes) != (
                    transformer.seq_len, transformer.token_embed_dim, transformer.num_classes):
                raise ValueError("draft_transformer: its grid, token channels or classes differ from the transformer's")
        self.register_modules(transformer=transformer, head=head, vae=vae, draft_transformer=draft_transformer,
                              draft_head=draft_head)

    # ------------------------------------------------------------------ sampling settings
    def sampling_config(self, **settings: Any) -> SamplingConfig:
        """The target distribution's settings of a call (given values, else the defaults): ``guidance_scale``
        and ``temperature``; ``top_k`` / ``top_p`` do not apply to continuous tokens and are refused."""
        for name, neutral in (("top_k", 0), ("top_p", 1.0)):
            if settings.get(name) not in (None, neutral):
                raise ValueError(f"{name}: MAR's tokens are continuous (no vocabulary to filter); leave {name} unset")
        unknown = sorted(set(settings) - {"guidance_scale", "temperature", "top_k", "top_p"})
        if unknown:
            raise ValueError(f"unknown sampling setting(s) {unknown}; known: guidance_scale, temperature")
        merged = {k: v for k, v in self.sampling_defaults.items() if k in ("guidance_scale", "temperature")}
        merged.update({k: v for k, v in settings.items() if v is not None and k in ("guidance_scale", "temperature")})
        return SamplingConfig(**merged)

    # ------------------------------------------------------------------ inputs and outputs
    class_names = LlamaGenPipeline.class_names
    class_ids = LlamaGenPipeline.class_ids

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
            grid = known.view(B, 1, self.transformer.seq_h, self.transformer.seq_w).float()
            cells = torch.nn.functional.interpolate(grid, size=images.shape[-2:], mode="nearest").to(images)
            images = images * cells + (2 * PREVIEW_GREY - 1) * (1 - cells)  # images are in [-1, 1]
        return images_to_output(images, output_type)

    def check_method(self, name: str) -> None:
        """``ValueError`` unless this pipeline can decode with method ``name`` (callers such as the demo ask
        before decoding)."""
        if name not in METHODS:
            raise ValueError(f"method: a MAR pipeline decodes with {', '.join(METHODS)} (MAR's own sampler, or one "
                             f"token per forward for the causal variant; speculative with a causal draft), "
                             f"got {name!r}")
        draft = self.draft_transformer
        if name == "cspd-exact" and (not self.transformer.is_causal or draft is None or not draft.is_causal):
            raise ValueError("method cspd-exact: needs a causal transformer and a causal draft_transformer / "
                             "draft_head in the pipeline")
        if name == "cspd" and (self.transformer.is_causal or draft is None or draft.is_causal):
            raise ValueError("method cspd: needs a masked transformer and a masked draft_transformer / draft_head "
                             "in the pipeline (cspd-exact is the causal variant's)")

    def baseline_call_kwargs(self, method: str, options: dict[str, Any]) -> dict[str, Any]:
        """The settings of the plain ``ar`` call that ``method`` with ``options`` is exact for (what a side-by-side
        comparison runs as its baseline): ``cspd-exact``'s ``final_std``; nothing for the other methods."""
        if method == "cspd-exact" and options.get("final_std"):
            return {"final_std": float(options["final_std"])}
        return {}

    def decode_condition(self, backbone: MARTransformer, condition: Condition, sampling: SamplingConfig,
                         method: Any, generator: GeneratorArg = None, **options: Any) -> tuple[torch.Tensor, BatchStats]:
        """Tokens for ``condition.class_labels`` with :func:`arvis.methods.decode`'s signature (what
        :func:`arvis.eval.bench.run_bench` times); ``backbone`` is ``self.transformer``."""
        if backbone is not self.transformer:
            raise ValueError("backbone: a MAR pipeline decodes with its own transformer")
        return self._decode(condition.class_labels, sampling, method, generator, None, **options)

    def _decode(self, labels: torch.Tensor, sampling: SamplingConfig, method: Any, generator: GeneratorArg,
                on_step: Callable[[MARStep], None] | None, num_iter: int | None = None, cfg_schedule: str | None = None,
                final_std: float = 0.0, **options: Any) -> tuple[torch.Tensor, BatchStats]:
        from arvis.methods import build_method

        name = getattr(method, "name", method)
        self.check_method(name)
        if name == "cspd-exact" and final_std:  # the pipeline's final_std is the method's when it is not given
            if isinstance(method, str):
                options.setdefault("final_std", final_std)
            elif method.final_std != final_std:
                raise ValueError(f"final_std: {final_std} given, the method object has {method.final_std}")
        if name == "ar" and final_std and not self.transformer.is_causal:
            raise ValueError("final_std: only the causal variant's AR baseline takes it (masked MAR samples as MAR)")
        method = build_method(method, **options)  # validates the options (ValueError naming them)
        defaults = self.sampling_defaults
        cfg_schedule = cfg_schedule if cfg_schedule is not None else defaults.get("cfg_schedule", "linear")
        check_cfg_schedule(cfg_schedule)
        kw = dict(guidance_scale=float(sampling.guidance_scale), cfg_schedule=cfg_schedule,
                  temperature=float(sampling.temperature), generator=generator, on_step=on_step)
        if name == "cspd-exact":
            if sampling.guidance_scale != 1.0 and cfg_schedule != "constant":
                raise ValueError("cfg_schedule: speculative windows span positions, so guidance must be constant "
                                 "(cfg_schedule='constant'; use the same for the AR baseline)")
            kw.pop("cfg_schedule")
            return decode_causal_speculative(self.transformer, self.head, self.draft_transformer, self.draft_head,
                                             labels, **method_settings(method), **kw)
        num_iter = num_iter if num_iter is not None else int(defaults.get("num_iter", 64))
        check_num_iter(num_iter)
        if name == "cspd":
            return decode_masked_cspd(self.transformer, self.head, self.draft_transformer, self.draft_head, labels,
                                      num_iter=num_iter, **method_settings(method), **kw)
        if self.transformer.is_causal:
            return decode_causal(self.transformer, self.head, labels, final_std=final_std, **kw)
        return decode_masked(self.transformer, self.head, labels, num_iter=num_iter, **kw)

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
        final_std: float = 0.0,
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
            callback_on_step_end_tensor_inputs: accepted for diffusers compatibility (always those two).
            method: ``ar``, ``cspd-exact`` or ``cspd`` (see :data:`METHODS`); ``**method_options`` are the
                method's (``gamma``, ``final_std``, ``max_rounds`` for ``cspd-exact``; ``window``,
                ``prefill_ratio``, ``tau``, ``max_tries`` for ``cspd``).
            top_k, top_p: not applicable (continuous tokens); refused unless unset.
            final_std: the causal AR baseline's step-0 std (the sampler ``cspd-exact`` with the same
                ``final_std`` is exact for; 0 = MAR's).

        Returns:
            :class:`MARPipelineOutput` with images, tokens and decode statistics.
        """
        check_output_type(output_type)
        if not isinstance(num_images_per_prompt, int) or isinstance(num_images_per_prompt, bool) \
                or num_images_per_prompt < 1:
            raise ValueError(f"num_images_per_prompt must be an integer >= 1, got {num_images_per_prompt!r}")
        sampling = self.sampling_config(guidance_scale=guidance_scale, temperature=temperature, top_k=top_k,
                                        top_p=top_p)
        if num_iter is not None:
            check_num_iter(num_iter)
        device = self.transformer.device
        labels = torch.tensor(self.class_ids(class_labels), device=device).repeat_interleave(num_images_per_prompt)
        B = labels.shape[0]
        if isinstance(generator, list | tuple) and len(generator) != B:
            raise ValueError(f"generator: got {len(generator)} generators for {B} images; pass one, or one per image")
        total = self.transformer.seq_len
        progress = self.progress_bar(total=total)
        done = [0]

        def on_step(step: MARStep) -> None:
            committed = step.known[0].sum()
            n = int(committed)  # one host sync per forward, for the bar
            progress.update(n - done[0])
            done[0] = n
            if callback_on_step_end is not None:
                callback_on_step_end(self, step.step, step.known.sum(-1), {"tokens": step.tokens, "known": step.known})

        try:
            tokens, stats = self._decode(labels, sampling, method, generator, on_step, num_iter=num_iter,
                                         cfg_schedule=cfg_schedule, final_std=final_std, **method_options)
        finally:
            progress.close()
        images = self.decode_tokens(tokens, output_type)
        self.maybe_free_model_hooks()
        if not return_dict:
            return images, tokens, stats
        return MARPipelineOutput(images=images, tokens=tokens, stats=stats)


def _check_pair(transformer: MARTransformer, head: MARDiffusionHead, name: str) -> None:
    if not isinstance(transformer, MARTransformer):
        raise TypeError(f"transformer: expected a MARTransformer, got {type(transformer).__name__}")
    if not isinstance(head, MARDiffusionHead):
        raise TypeError(f"{name}: expected a MARDiffusionHead, got {type(head).__name__}")
    if head.config.token_dim != transformer.token_embed_dim or head.config.cond_dim != transformer.config.decoder_embed_dim:
        raise ValueError(f"{name}: it samples {head.config.token_dim}-channel tokens from {head.config.cond_dim}-channel "
                         f"z; the transformer gives {transformer.config.decoder_embed_dim}-channel z for "
                         f"{transformer.token_embed_dim}-channel tokens")


__all__ = ["MARPipeline", "MARPipelineOutput"]
