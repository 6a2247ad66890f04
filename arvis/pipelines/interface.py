"""The one interface every arvis pipeline implements, and the only way apps talk to a pipeline.

The command line, the demo, the bench, the FID and sampling jobs never probe a pipeline with ``hasattr`` or
``getattr``: they ask this interface (tests/project/test_layers.py enforces it).

- **What it is**: :attr:`ArvisPipeline.capabilities` (family, decoder kind, conditioning, what it offers to
  methods — the same object :func:`arvis.families.folder_capabilities` reads from its folder),
  :attr:`~ArvisPipeline.is_video`, the class vocabulary (:attr:`~ArvisPipeline.id2label`,
  :meth:`~ArvisPipeline.get_label_ids`, :meth:`~ArvisPipeline.class_ids`, like diffusers' DiT).
- **Its methods**: :meth:`~ArvisPipeline.methods`, :meth:`~ArvisPipeline.check_method` (refuses an
  inapplicable method or option), :meth:`~ArvisPipeline.build_method` (the resources it holds supplied by
  itself, never by the user), :meth:`~ArvisPipeline.baseline_options` (the plain call a method is exact for).
- **Its sampling**: :attr:`sampling_defaults` / :meth:`sampling_config` (with the family's guidance rule).
- **Decoding without pictures** (bench, token statistics): :meth:`~ArvisPipeline.bench_inputs` — batches of
  conditions and the function that decodes one batch with a method, plus the backbone whose forward cost
  the bench measures (token families).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import torch

from arvis.engine.stats import BatchStats
from arvis.families import FAMILIES, Capabilities, Components, Family
from arvis.methods.catalog import DecoderKind, method_info
from arvis.methods.registry import build_method
from arvis.models.protocol import Condition
from arvis.pipelines.common import SamplingDefaultsMixin
from arvis.utils.random import GeneratorArg

DecodeBatch = Callable[[Condition, Any, Any, GeneratorArg], tuple[torch.Tensor, BatchStats]]


@dataclass
class BenchInputs:
    """What ``arvis bench`` times for a pipeline.

    Attributes:
        batches: ``(sample indices, Condition)`` per decode call.
        decode: ``decode(condition, sampling, method, generators) -> (tokens, statistics)``.
        build: ``build(name, options) -> method`` for these inputs (with the resources they decode with).
        grid: the token grid the records name (a next-scale model's: its layout's).
        device: where the conditions and generators live.
        backbone: the token backbone whose forward-cost curve explains latency (``None``: not a token model).
    """

    batches: list[tuple[list[int], Condition]]
    decode: DecodeBatch
    build: Callable[[str, dict[str, Any]], Any]
    grid: tuple[int, ...]
    device: torch.device
    backbone: Any = None


class ArvisPipeline(SamplingDefaultsMixin):
    """Mixed into every arvis pipeline (before ``DiffusionPipeline``); see the module docstring.

    A family implements :meth:`resources` (what it supplies to methods), :meth:`bench_inputs` and, when its
    classes are not the transformer config's ``class_names`` / ``num_classes``, :attr:`capabilities`.
    """

    guidance: ClassVar[str] = "llamagen"  # the family's guidance rule (arvis.engine.guidance)
    partial_previews: ClassVar[bool] = True  # decode_tokens(tokens, known=...) draws uncommitted cells grey
    _interrupt: bool = False

    @property
    def interrupt(self) -> bool:
        """Set ``pipe._interrupt = True`` from ``callback_on_step_end`` to stop decoding (diffusers' convention):
        the output then holds what was committed so far (``-1`` / grey elsewhere) and its statistics."""
        return self._interrupt

    # ------------------------------------------------------------------ what it is
    @classmethod
    def family(cls) -> Family:
        """The family this pipeline class implements (:data:`arvis.families.FAMILIES`)."""
        return FAMILIES[cls.__name__]

    @property
    def decoder_kind(self) -> DecoderKind:
        return self.family().kind

    @property
    def capabilities(self) -> Capabilities:
        """What this model offers, read from its loaded components as from a folder."""
        return self.family().read(Components.from_pipeline(self))

    @property
    def is_video(self) -> bool:
        return self.capabilities.num_frames is not None

    @property
    def token_layout(self) -> Any:
        """The token layout (grid, vocabulary, sequence length) at the model's default size."""
        return self.transformer.layout

    # ------------------------------------------------------------------ conditioning
    @property
    def class_names(self) -> list[str] | None:
        """Names of the class ids (``None`` when the model has none, or is text-conditional)."""
        return list(self.capabilities.class_names) or None

    @property
    def id2label(self) -> dict[int, str]:
        """Class id → name (like diffusers' ``DiTPipeline.id2label``); empty when the model has no names."""
        return dict(enumerate(self.capabilities.class_names))

    @property
    def labels(self) -> dict[str, int]:
        """Class name → id, sorted by name (like ``DiTPipeline.labels``)."""
        return dict(sorted((name, i) for i, name in self.id2label.items()))

    def get_label_ids(self, label: str | Sequence[str]) -> list[int]:
        """Class ids of class names (like ``DiTPipeline.get_label_ids``); ``ValueError`` naming a name that is
        not a class, with the closest ones."""
        names = [label] if isinstance(label, str) else list(label)
        caps = self.capabilities
        for name in names:
            if not isinstance(name, str) or name not in caps.class_names:
                raise ValueError(f"label: {caps.name_error(str(name))}")
        return [caps.class_names.index(name) for name in names]

    def class_ids(self, labels: int | str | torch.Tensor | Sequence[int | str]) -> list[int]:
        """Class ids from ids, names, or an integer tensor; ``ValueError`` names the offending label and the
        valid range (and the closest class names)."""
        caps = self.capabilities
        if caps.conditioning != "class":
            raise ValueError("class_labels: this is a text-conditional model; pass prompt")
        if isinstance(labels, torch.Tensor):
            if labels.dtype.is_floating_point or labels.dtype.is_complex or labels.dtype == torch.bool:
                raise ValueError(f"class_labels: a tensor of class ids must be of an integer dtype, got {labels.dtype}")
            if labels.ndim > 1:
                raise ValueError(f"class_labels: a tensor of class ids must be 0-d or 1-d, got shape {tuple(labels.shape)}")
            labels = labels.reshape(-1).tolist()
        if isinstance(labels, int | str | np.integer):
            labels = [labels]
        ids = []
        for label in labels:
            if isinstance(label, np.integer):
                label = int(label)
            try:
                ids.append(caps.class_id(label))
            except ValueError as err:
                raise ValueError(f"class_labels: {err}") from None
        if not ids:
            raise ValueError("class_labels: empty")
        return ids

    # ------------------------------------------------------------------ methods
    def methods(self) -> list[str]:
        """The methods that run on this model."""
        return self.capabilities.methods()

    def check_method(self, name: str, options: dict[str, Any] | None = None) -> dict[str, Any]:
        """``ValueError`` unless method ``name`` with ``options`` applies to this model; the validated options."""
        return self.capabilities.check(name, options)

    def is_lossless(self, name: str, options: dict[str, Any] | None = None) -> bool:
        """Whether method ``name`` with ``options`` samples exactly this model's distribution."""
        return method_info(name, self.decoder_kind).is_lossless(options)

    def resources(self) -> dict[str, Any]:
        """What this pipeline supplies to methods (:data:`arvis.methods.catalog.RESOURCES`), by name."""
        return {}

    def build_method(self, method: Any, **options: Any) -> Any:
        """A method object for this model from its name and user options (checked by :meth:`check_method`),
        with the resources this pipeline holds; a method object is checked and returned as is."""
        if isinstance(method, str):
            self.check_method(method, options)
        return build_method(method, self.decoder_kind, self.resources(), **options)

    def baseline_options(self, method: str, options: dict[str, Any]) -> dict[str, Any]:
        """The options of the plain ``ar`` call that ``method`` with ``options`` is exact for (what a side-by-side
        comparison runs as its baseline): none, except where a family's method changes the sampler."""
        return {}

    @torch.no_grad()
    def tokenizer_roundtrip(self, images: torch.Tensor) -> torch.Tensor:
        """Images ``[B, 3, H, W]`` in ``[-1, 1]`` encoded and decoded by this model's tokenizer (what its samples
        can at best look like). Token families: through the codes of their ``vqvae``."""
        vq = self.vqvae
        return vq.decode_codes(vq.encode(images.to(next(vq.parameters()).dtype))).float()

    def decode_memory_bytes(self, batch_size: int, uses_cfg: bool) -> int | None:
        """About how many bytes the decode state of a ``batch_size`` call takes (``None``: not estimated)."""
        return None

    # ------------------------------------------------------------------ decoding without pictures
    def bench_inputs(self, conditions: Sequence[int | str] | None, samples: int, batch_size: int) -> BenchInputs:
        """Batches of ``samples`` conditions (sample ``i`` gets ``conditions[i % len]``; class-conditional
        models: every class in turn when ``None``) and how to decode one with a method."""
        raise NotImplementedError(f"{type(self).__name__} does not implement bench_inputs")

    def condition_batches(self, conditions: Sequence[int | str] | None, samples: int, batch_size: int
                          ) -> list[tuple[list[int], list[int | str]]]:
        """``(sample indices, their conditions)`` per batch: sample ``i`` gets ``conditions[i % len]`` (class ids
        for class-conditional models, checked; every class in turn when ``None``)."""
        if samples < 1 or batch_size < 1:
            raise ValueError(f"samples and batch_size must be >= 1, got {samples} and {batch_size}")
        caps = self.capabilities
        if caps.conditioning == "class":
            values: list[int | str] = self.class_ids(list(conditions)) if conditions else list(range(caps.num_classes))
        else:
            if not conditions:
                raise ValueError("prompt: this model is text-conditional; give at least one prompt")
            values = list(conditions)
        out = []
        for start in range(0, samples, batch_size):
            idx = list(range(start, min(start + batch_size, samples)))
            out.append((idx, [values[i % len(values)] for i in idx]))
        return out


__all__ = ["ArvisPipeline", "BenchInputs"]
