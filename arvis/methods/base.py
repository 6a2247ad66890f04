"""What a decoding method is: a small object that drives a :class:`~arvis.engine.DecodeEngine`.

``method = schedule × drafter × acceptance rule`` (docs/architecture.md). A method holds only its options
(a frozen dataclass, validated on construction); all decode state lives in the engine, so one
method object can serve any number of requests, concurrently.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, ClassVar

from arvis.engine.engine import DecodeEngine


class MissingResourceError(ValueError):
    """A method needs something only a pipeline has (a draft model, codebook neighbourhoods) and was built
    without it. Spec checks made before a pipeline exists may tolerate exactly this error."""


class DecodingMethod(ABC):
    """Base class of every decoding method.

    Class attributes:
        name: the registry name (``"ar"``, ``"sjd"``…).
        lossless: true when the output distribution is exactly the target model's (proved by the
            statistical test of docs/measurement.md); lossy methods document their bound.
    """

    name: ClassVar[str]
    lossless: ClassVar[bool]

    @abstractmethod
    def run(self, engine: DecodeEngine) -> dict[str, Any] | None:
        """Commit every token of every sample in ``engine``; may return method-specific statistics."""

    def options(self) -> dict[str, Any]:
        """The method's plain options as a dict (for reports; tensors and modules left out)."""
        from dataclasses import fields, is_dataclass

        if not is_dataclass(self):
            return {}
        plain = (int, float, str, bool, tuple, list, type(None))
        return {f.name: getattr(self, f.name) for f in fields(self) if isinstance(getattr(self, f.name), plain)}
