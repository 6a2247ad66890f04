"""The method implementations, by decoder kind, and the one entry point of token-by-token decoding: :func:`decode`.

Every implementation is registered under its declaration (:mod:`arvis.methods.catalog`):
:func:`build_method` turns ``(name, options)`` into a validated method object of a decoder kind, with the
resources a pipeline supplies (a draft model, codebook neighbourhoods…) passed apart from the user's options.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch

from arvis.engine.engine import DecodeEngine
from arvis.engine.sampling import SamplingConfig
from arvis.engine.stats import BatchStats
from arvis.methods.base import METHODS, DecodingMethod, register_method  # noqa: F401 (register_method: public)
from arvis.methods.catalog import CAPABILITIES, RESOURCES, DecoderKind, method_info
from arvis.models.protocol import Backbone, Condition
from arvis.utils.random import GeneratorArg


def method_class(name: str, kind: DecoderKind | str = DecoderKind.TOKEN) -> type[DecodingMethod]:
    """The implementation of ``name`` for ``kind`` (``ValueError`` listing the kind's methods)."""
    kind = DecoderKind(kind)
    cls = METHODS[kind].get(name) if isinstance(name, str) else None
    if cls is None:
        method_info(name, kind)  # raises, naming the kind's methods
        raise ValueError(f"method {name!r} is declared for {kind} models but has no implementation")
    return cls


def available_methods(kind: DecoderKind | str | None = None) -> list[str]:
    """Registered method names of ``kind`` (every kind: each name once), sorted."""
    if kind is None:
        return sorted({name for methods in METHODS.values() for name in methods})
    return sorted(METHODS[DecoderKind(kind)])


def build_method(name: str | DecodingMethod, kind: DecoderKind | str = DecoderKind.TOKEN,
                 resources: Mapping[str, Any] | None = None, **options: Any) -> DecodingMethod:
    """A method object of ``kind`` from its name and user options, with the pipeline's ``resources``.

    Args:
        name: a registry name, or a method object (returned as is; then no options may be given).
        kind: the decoder kind of the model it will run on.
        resources: what the pipeline supplies (:data:`~arvis.methods.catalog.RESOURCES`): only the ones the
            method has a field for are used; ``neighbours`` may be a function of ``k`` (computed only for a
            relaxed rule, with its ``k``).
        **options: the method's user options (unknown, renamed or resource names are refused).
    """
    from arvis.methods.options import method_arguments

    if isinstance(name, DecodingMethod):
        if options:
            raise ValueError(f"method options {sorted(options)} given together with a method object; "
                             f"set them on the object instead")
        if name.kind != DecoderKind(kind):
            raise ValueError(f"method {name.name!r} decodes {name.kind} models; this is a {DecoderKind(kind)} model")
        return name
    cls = method_class(name, kind)
    arguments = method_arguments(cls.info, options)
    fields = getattr(cls, "__dataclass_fields__", {})
    for resource, value in (resources or {}).items():
        if resource not in RESOURCES:
            raise ValueError(f"resources: unknown resource {resource!r}; known: {', '.join(RESOURCES)}")
        if resource not in fields or value is None:
            continue
        if resource == "neighbours" and callable(value):  # computed for the rule's k, and only when it relaxes
            rule = arguments.get("acceptance")
            if rule is None or rule.lossless:
                continue
            value = value(rule.k)
        arguments[resource] = value
    return cls(**arguments)


def validate_method(name: str, options: Mapping[str, Any], kind: DecoderKind | str = DecoderKind.TOKEN) -> None:
    """Check a method and its option values for ``kind`` without building it (no torch needed)."""
    method_info(name, kind).check_options(options)


def is_lossless(name: str, options: Mapping[str, Any] | None = None,
                kind: DecoderKind | str = DecoderKind.TOKEN) -> bool:
    """Whether method ``name`` with ``options`` samples exactly the model's distribution."""
    return method_info(name, kind).is_lossless(options)


def split_resources(options: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(options, resources)``: resource names (:data:`~arvis.methods.catalog.RESOURCES`) taken out of
    ``options`` — for the low-level :func:`decode`, where the caller holds the models a pipeline would supply."""
    resources = {k: v for k, v in options.items() if k in RESOURCES}
    return {k: v for k, v in options.items() if k not in RESOURCES}, resources


def decode(backbone: Backbone, condition: Condition, sampling: SamplingConfig,
           method: str | DecodingMethod = "ar", generator: GeneratorArg = None,
           on_commit: Callable[[DecodeEngine], None] | None = None, **options: Any
           ) -> tuple[torch.Tensor, BatchStats]:
    """Generate token sequences for a batch of conditions with a token-by-token method.

    Args:
        backbone: the target model (backbone protocol).
        condition: ``B`` conditions.
        sampling: target-distribution settings (CFG, temperature, top-k, top-p).
        method: a token method's registry name or a :class:`DecodingMethod`.
        generator: one generator, one per sample, or ``None``.
        on_commit: callback after every commit (progress, streaming).
        **options: the method's options when ``method`` is a name; here (no pipeline) the caller also passes
            the resources it needs by name (``draft_model=``, ``neighbours=``, ``lowres_model=``, ``upsampler=``).

    Returns:
        ``(tokens [B, N] int64, statistics)``.

    Raises:
        arvis.engine.engine.NonFiniteError: a sample's logits or target distribution held NaN or inf
            (the whole request fails; the error names the samples and the probable cause).
    """
    user_options, resources = split_resources(options)
    method_obj = build_method(method, DecoderKind.TOKEN, resources, **user_options)
    engine = DecodeEngine(backbone, condition, sampling, generator, method=method_obj.name, on_commit=on_commit,
                          scratch_slots=method_obj.scratch_slots(backbone.layout))
    extra = method_obj.run(engine)
    stats = engine.finish(extra)
    return engine.tokens, stats


def missing_capabilities(name: str, options: Mapping[str, Any], have: set[str] | frozenset[str],
                         kind: DecoderKind | str) -> list[str]:
    """What method ``name`` with ``options`` needs that a model offering ``have`` lacks (in words)."""
    needs = method_info(name, kind).requirements(options)
    return [CAPABILITIES[n] for n in needs if n not in have]


# The built-in methods register themselves (``@register_method``) when their modules load.
from arvis.methods import ar, continuous, mulo, next_scale, pjd, sjd, sjd_pac, speculative, zipar  # noqa: E402, F401
