"""Decoding methods and the one entry point that runs them: :func:`decode`.

Every method is registered by name; :func:`build_method` turns ``(name, options)`` into a validated
method object and raises ``ValueError`` naming the unknown method or option. Each method declares its
options once (``METHODS[name].options``, :mod:`arvis.methods.options`); :func:`method_options` lists
them for the CLI, the demo and the bench.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from arvis.engine.engine import DecodeEngine
from arvis.engine.sampling import SamplingConfig
from arvis.engine.stats import BatchStats
from arvis.methods.ar import Autoregressive
from arvis.methods.base import DecodingMethod, MissingResourceError
from arvis.methods.mulo import MultiScaleJacobi, MultiScaleLocal
from arvis.methods.options import Option, method_arguments
from arvis.methods.sjd import CoupledJacobi, SpeculativeJacobi
from arvis.methods.speculative import SpeculativeDecoding
from arvis.methods.zipar import ZipAR
from arvis.models.protocol import Backbone, Condition
from arvis.utils.random import GeneratorArg

METHODS: dict[str, type[DecodingMethod]] = {
    cls.name: cls for cls in (Autoregressive, SpeculativeJacobi, CoupledJacobi, ZipAR, SpeculativeDecoding,
                              MultiScaleJacobi, MultiScaleLocal)
}


def register_method(cls: type[DecodingMethod]) -> type[DecodingMethod]:
    """Class decorator adding a method to the registry under ``cls.name`` (for methods defined elsewhere)."""
    METHODS[cls.name] = cls
    return cls


def available_methods() -> list[str]:
    return sorted(METHODS)


def method_options(name: str) -> tuple[Option, ...]:
    """The declared options of method ``name`` (kind, default, choices or range, help)."""
    return _method_class(name).options


def describe_methods() -> str:
    """Every method, whether it is lossless with its defaults, and its declared options (``arvis methods``)."""
    lines = []
    for name in available_methods():
        default = METHODS[name]()
        kind = "lossless" if default.lossless else "lossy"
        if any(o.name == "acceptance" for o in default.options):
            kind += " (lossy with a relaxed acceptance rule)"
        lines.append(f"{name}: {kind}")
        lines += [f"    {o.describe()}" for o in default.options]
    return "\n".join(lines)


def build_method(name: str | DecodingMethod, **options: Any) -> DecodingMethod:
    """A method object from its registry name and options (or a method object, returned as is)."""
    if isinstance(name, DecodingMethod):
        if options:
            raise ValueError(f"method options {sorted(options)} given together with a method object; "
                             f"set them on the object instead")
        return name
    cls = _method_class(name)
    return cls(**method_arguments(name, cls.options, options))


def validate_method(name: str, options: dict[str, Any]) -> None:
    """Check a method and its option values before a pipeline exists (resources such as a draft model or
    codebook neighbourhoods are only required when the decode starts)."""
    build_method(name, **options)


def is_lossless(name: str, options: dict[str, Any] | None = None) -> bool:
    """Whether method ``name`` with ``options`` samples exactly the target distribution (a relaxed
    acceptance rule makes any method lossy)."""
    return build_method(name, **(options or {})).lossless


def _method_class(name: str) -> type[DecodingMethod]:
    if name not in METHODS:
        raise ValueError(f"method: unknown method {name!r}; available methods: {', '.join(available_methods())}")
    return METHODS[name]


def with_resources(method: str | DecodingMethod, options: dict[str, Any], draft_model: Any = None,
                   neighbours: Callable[[int], torch.Tensor] | None = None, lowres_model: Any = None,
                   upsampler: Any = None) -> dict[str, Any]:
    """``options`` completed with what a method needs from its pipeline, when not given explicitly.

    A method declaring a ``draft_model`` option gets ``draft_model``; one with a relaxed ``acceptance``
    gets ``neighbours(k)``, the tokenizer's codebook neighbourhoods; one declaring ``lowres_model`` /
    ``upsampler`` (multi-scale drafting) gets those. Returns a new dict.
    """
    options = dict(options)
    if not isinstance(method, str) or method not in METHODS:
        return options
    declared = {o.name: o for o in METHODS[method].options}
    for name, resource in (("draft_model", draft_model), ("lowres_model", lowres_model), ("upsampler", upsampler)):
        if name in declared and options.get(name) is None and resource is not None:
            options[name] = resource
    acceptance = options.get("acceptance", "exact")
    kind = getattr(acceptance, "kind", acceptance)
    if "neighbours" in declared and kind != "exact" and options.get("neighbours") is None and neighbours is not None:
        k = getattr(acceptance, "k", options.get("k", declared["k"].default))
        options["neighbours"] = neighbours(int(k))
    return options


def decode(backbone: Backbone, condition: Condition, sampling: SamplingConfig,
           method: str | DecodingMethod = "ar", generator: GeneratorArg = None,
           on_commit: Callable[[DecodeEngine], None] | None = None, **options: Any
           ) -> tuple[torch.Tensor, BatchStats]:
    """Generate token sequences for a batch of conditions.

    Args:
        backbone: the target model (backbone protocol).
        condition: ``B`` conditions.
        sampling: target-distribution settings (CFG, temperature, top-k, top-p).
        method: a registry name or a :class:`DecodingMethod`.
        generator: one generator, one per sample, or ``None``.
        on_commit: callback after every commit (progress, streaming).
        **options: the method's options when ``method`` is a name.

    Returns:
        ``(tokens [B, N] int64, statistics)``.

    Raises:
        arvis.engine.engine.NonFiniteError: a sample's logits or target distribution held NaN or inf
            (the whole request fails; the error names the samples and the probable cause).
    """
    method_obj = build_method(method, **options)
    engine = DecodeEngine(backbone, condition, sampling, generator, method=method_obj.name, on_commit=on_commit)
    extra = method_obj.run(engine)
    stats = engine.finish(extra)
    return engine.tokens, stats


__all__ = ["METHODS", "DecodingMethod", "MissingResourceError", "Option", "available_methods", "build_method",
           "decode", "describe_methods", "is_lossless", "method_options", "register_method", "validate_method", "with_resources"]

from arvis.methods.next_scale import NEXT_SCALE_METHODS  # noqa: E402  (next-scale / VAR methods)

for _next_scale_method in NEXT_SCALE_METHODS:
    register_method(_next_scale_method)

from arvis.methods.cspd import CONTINUOUS_METHODS  # noqa: E402  (continuous-token / MAR methods)

for _continuous_method in CONTINUOUS_METHODS:
    register_method(_continuous_method)
