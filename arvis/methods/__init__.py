"""Decoding methods: declarations (:mod:`~arvis.methods.catalog`, importable without torch), implementations
by decoder kind (:mod:`~arvis.methods.registry`) and :func:`decode`, the entry point of token-by-token decoding.

The public names are imported lazily, so ``arvis.methods.catalog`` and ``arvis.methods.spec`` load in
milliseconds (the command line checks a method against a model folder before torch is imported).
"""

from __future__ import annotations

from arvis.utils.lazy import lazy_exports

_EXPORTS = {
    "DecoderKind": "arvis.methods.catalog",
    "MethodInfo": "arvis.methods.catalog",
    "Option": "arvis.methods.catalog",
    "CATALOG": "arvis.methods.catalog",
    "method_info": "arvis.methods.catalog",
    "DecodingMethod": "arvis.methods.base",
    "MissingResourceError": "arvis.methods.base",
    "METHODS": "arvis.methods.registry",
    "available_methods": "arvis.methods.registry",
    "build_method": "arvis.methods.registry",
    "decode": "arvis.methods.registry",
    "decode_continuous": "arvis.methods.continuous",
    "decode_scales": "arvis.methods.next_scale",
    "is_lossless": "arvis.methods.registry",
    "method_class": "arvis.methods.registry",
    "register_method": "arvis.methods.registry",
    "validate_method": "arvis.methods.registry",
}

__getattr__, __dir__, __all__ = lazy_exports("arvis.methods", _EXPORTS)
