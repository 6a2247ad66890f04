"""What the transformers-backed text-to-image token pipelines (Emu3, Janus) share: a backbone built per call (its
prompt length is the call's), the draft backbone of the same prompts handed to the methods, the VQ decode of code
grids, and the bench's condition batches.

A family's pipeline subclasses :class:`PromptTokenPipeline` (before ``DiffusionPipeline``) and supplies
:meth:`~PromptTokenPipeline.backbones`, ``vqvae`` (an image tokenizer with ``decode_codes``) and
``codebook_neighbours``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from arvis.engine.engine import NO_TOKEN
from arvis.engine.stats import BatchStats
from arvis.methods.catalog import DecoderKind
from arvis.methods.registry import build_method, decode
from arvis.models.protocol import Condition
from arvis.pipelines.common import decode_with_progress, grey_uncommitted, images_to_output
from arvis.pipelines.interface import ArvisPipeline, BenchInputs


class PromptTokenPipeline(ArvisPipeline):
    """An :class:`~arvis.pipelines.interface.ArvisPipeline` whose backbones are built per call from its prompts."""

    def backbones(self, prompts: Sequence[str], *args: Any) -> tuple[Any, Any, Condition]:
        """``(target backbone, draft backbone or None, condition)`` for one call's prompts (every prompt
        left-padded to one length)."""
        raise NotImplementedError

    def resources(self, draft: Any = None) -> dict[str, Any]:
        """The codebook neighbourhoods and, for a call, its draft backbone (built for the call's prompts)."""
        return {"draft_model": draft, "neighbours": self.codebook_neighbours}

    def build_method(self, method: Any, draft: Any = None, **options: Any) -> Any:
        """:meth:`ArvisPipeline.build_method` with a call's draft backbone (the backbones depend on the prompts)."""
        if isinstance(method, str):
            self.check_method(method, options)
        return build_method(method, DecoderKind.TOKEN, self.resources(draft), **options)

    def prompt_bench_inputs(self, plan: list[tuple[list[int], list[int | str]]], *args: Any) -> BenchInputs:
        """:meth:`bench_inputs` from a :meth:`condition_batches` plan: one backbone for every prompt of the plan
        (``backbones(texts, *args)``), each batch its rows of the condition, methods built with the draft."""
        texts = [str(text) for _, values in plan for text in values]
        target, draft, condition = self.backbones(texts, *args)
        batches = []
        for idx, _ in plan:
            rows = slice(idx[0], idx[-1] + 1)
            batches.append((idx, Condition(token_ids=condition.token_ids[rows], mask=condition.mask[rows])))
        return BenchInputs(batches, lambda cond, sampling, method, gens: decode(target, cond, sampling, method, gens),
                           lambda name, options: self.build_method(name, draft, **options), tuple(target.layout.grid),
                           self.transformer.device, target)

    def decode_call(self, backbones: tuple[Any, Any, Condition], sampling: Any, method: Any, options: dict[str, Any],
                    generator: Any, callback_on_step_end: Callable | None, tensor_inputs: Sequence[str],
                    codes_of: Callable[[torch.Tensor], torch.Tensor], output_type: str
                    ) -> tuple[Any, torch.Tensor, BatchStats]:
        """The decode of one call: the method built with the call's draft, the decode with progress and step
        callbacks, the code grids (``codes_of(tokens)``) and their pictures (grey where an interrupted decode
        committed nothing). Returns ``(images, codes, stats)``."""
        target, draft, condition = backbones
        built = self.build_method(method, draft, **options)
        tokens, stats = decode_with_progress(self, target, condition, sampling, built, generator,
                                             callback_on_step_end, tensor_inputs)
        codes = codes_of(tokens)
        known = codes != NO_TOKEN if self._interrupt else None  # an interrupted decode: draw the rest grey
        images = self.decode_tokens(codes, output_type, known)
        self.maybe_free_model_hooks()
        return images, codes, stats

    def decode_tokens(self, codes: torch.Tensor, output_type: str = "pil", known: torch.Tensor | None = None):
        """Code grids ``[B, h, w]`` → images in ``output_type`` (``"latent"`` returns the codes). ``known``
        (``[B, h, w]`` bool, optional) marks committed codes: the other cells are drawn grey (partial images)."""
        if output_type == "latent":
            return codes
        if known is None:
            return images_to_output(self.vqvae.decode_codes(codes), output_type)
        images = self.vqvae.decode_codes(torch.where(known, codes, torch.zeros_like(codes)))
        return images_to_output(grey_uncommitted(images.float().cpu(), known), output_type)


__all__ = ["PromptTokenPipeline"]
