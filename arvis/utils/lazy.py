"""Lazy public names for a package facade (PEP 562): ``import arvis`` and its sub-packages stay cheap, and a name
is imported from its module on first use."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(package: str, exports: Mapping[str, str]) -> tuple[Callable[[str], Any], Callable[[], list[str]],
                                                                      list[str]]:
    """``(__getattr__, __dir__, __all__)`` for ``package``, whose names live in the modules ``exports`` maps
    them to."""
    names = sorted(exports)

    def __getattr__(name: str) -> Any:
        if name in exports:
            return getattr(importlib.import_module(exports[name]), name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def __dir__() -> list[str]:
        return names

    return __getattr__, __dir__, names
