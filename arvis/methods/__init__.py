"""Decoding methods: declarations (:mod:`~arvis.methods.catalog`, importable without torch), implementations
by decoder kind (:mod:`~arvis.methods.registry`) and :func:`decode`, the entry point of token-by-token decoding.

The public names are imported lazily, so ``arvis.methods.catalog`` and ``arvis.methods.spec`` load in
milliseconds (the command line checks a method against a model folder before torch is imported).
"""

from __future__ import annotations

import importlib
from typing import Any

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
    "is_lossless": "arvis.methods.registry",
    "method_class": "arvis.methods.registry",
    "register_method": "arvis.methods.registry",
    "validate_method": "arvis.methods.registry",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'arvis.methods' has no attribute {name!r}")


def __dir__() -> list[str]:
    return __all__
