"""Decoding methods and the one entry point that runs them: :func:`decode`.

Every method is registered by name; :func:`build_method` turns ``(name, options)`` into a validated
method object and raises ``ValueError`` naming the unknown method or option.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import torch

from arvis.engine.engine import DecodeEngine
from arvis.engine.sampling import SamplingConfig
from arvis.engine.stats import BatchStats
from arvis.methods.ar import Autoregressive
from arvis.methods.base import DecodingMethod, MissingResourceError
from arvis.models.protocol import Backbone, Condition
from arvis.utils.random import GeneratorArg

METHODS: dict[str, type[DecodingMethod]] = {
    Autoregressive.name: Autoregressive,
}


def register_method(cls: type[DecodingMethod]) -> type[DecodingMethod]:
    """Class decorator adding a method to the registry under ``cls.name``."""
    METHODS[cls.name] = cls
    return cls


def available_methods() -> list[str]:
    return sorted(METHODS)


def build_method(name: str | DecodingMethod, **options: Any) -> DecodingMethod:
    """A method object from its registry name and options (or a method object, returned as is)."""
    if isinstance(name, DecodingMethod):
        if options:
            raise ValueError(f"method options {sorted(options)} given together with a method object; "
                             f"set them on the object instead")
        return name
    return _method_class(name, options)(**options)


def validate_method(name: str, options: dict[str, Any]) -> None:
    """Check a method and its option values before a pipeline exists: everything :func:`build_method`
    checks except the resources only a pipeline provides (draft model, codebook neighbourhoods)."""
    try:
        build_method(name, **options)
    except MissingResourceError:
        pass


def is_lossless(name: str, options: dict[str, Any] | None = None) -> bool:
    """Whether method ``name`` with ``options`` samples exactly the target distribution: the method is
    lossless and its acceptance rule (if it has one) is ``"exact"`` — a relaxed rule makes any method lossy."""
    return bool(getattr(METHODS[name], "lossless", False)) and (options or {}).get("acceptance", "exact") == "exact"


def _method_class(name: str, options: dict[str, Any]) -> type:
    """The method class of ``name`` after checking that it exists and has every option named in ``options``."""
    if name not in METHODS:
        raise ValueError(f"method: unknown method {name!r}; available methods: {', '.join(available_methods())}")
    cls = METHODS[name]
    fields = {f.name for f in dataclasses.fields(cls)} if dataclasses.is_dataclass(cls) else set()
    unknown = sorted(set(options) - fields)
    if unknown:
        raise ValueError(f"method {name!r} has no option(s) {unknown}; its options are {sorted(fields) or 'none'}")
    return cls


def with_resources(method: str | DecodingMethod, options: dict[str, Any], draft_model: Any = None,
                   neighbours: Callable[[int], torch.Tensor] | None = None) -> dict[str, Any]:
    """``options`` completed with what a method needs from its pipeline, when not given explicitly.

    A method with a ``draft_model`` field gets ``draft_model``; one with a relaxed ``acceptance`` gets
    ``neighbours(k)``, the tokenizer's codebook neighbourhoods. Returns a new dict.
    """
    options = dict(options)
    if not isinstance(method, str) or method not in METHODS or not dataclasses.is_dataclass(METHODS[method]):
        return options
    fields = {f.name for f in dataclasses.fields(METHODS[method])}
    if "draft_model" in fields and options.get("draft_model") is None and draft_model is not None:
        options["draft_model"] = draft_model
    if ("neighbours" in fields and options.get("acceptance", "exact") != "exact"
            and options.get("neighbours") is None and neighbours is not None):
        options["neighbours"] = neighbours(int(options.get("k", 10)))
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
    """
    method_obj = build_method(method, **options)
    engine = DecodeEngine(backbone, condition, sampling, generator, method=method_obj.name, on_commit=on_commit)
    extra = method_obj.run(engine)
    stats = engine.finish(extra)
    return engine.tokens, stats


__all__ = ["METHODS", "DecodingMethod", "MissingResourceError", "available_methods", "build_method", "decode",
           "is_lossless", "register_method", "validate_method", "with_resources"]

from arvis.methods.sjd import CoupledJacobi, SpeculativeJacobi  # noqa: E402  (registers after the registry exists)

register_method(SpeculativeJacobi)
register_method(CoupledJacobi)

from arvis.methods.zipar import ZipAR  # noqa: E402

register_method(ZipAR)

from arvis.methods.speculative import SpeculativeDecoding  # noqa: E402

register_method(SpeculativeDecoding)

from arvis.methods.next_scale import NEXT_SCALE_METHODS  # noqa: E402  (next-scale / VAR methods)

for _next_scale_method in NEXT_SCALE_METHODS:
    register_method(_next_scale_method)
