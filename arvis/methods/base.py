"""What a decoding method is: a small object that drives a :class:`~arvis.engine.DecodeEngine`.

``method = schedule × drafter × acceptance rule`` (docs/architecture.md). A method holds only its options
(a frozen dataclass, validated on construction against its declared :attr:`DecodingMethod.options`);
all decode state lives in the engine and the method's per-request loop, so one method object can serve
any number of requests, concurrently.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import fields, is_dataclass
from typing import Any, ClassVar

from arvis.acceptance.relaxed import AcceptanceRule
from arvis.engine.engine import DecodeEngine
from arvis.methods.options import Option


class MissingResourceError(ValueError):
    """A method needs something only a pipeline has (a draft model, codebook neighbourhoods) and was run
    without it. Raised when the decode starts, before any forward."""


class DecodingMethod(ABC):
    """Base class of every decoding method.

    Class attributes:
        name: the registry name (``"ar"``, ``"sjd"``…).
        options: the user-facing options, declared once (:mod:`arvis.methods.options`).
    """

    name: ClassVar[str]
    options: ClassVar[tuple[Option, ...]] = ()

    @property
    @abstractmethod
    def lossless(self) -> bool:
        """True when the output distribution is exactly the target model's (proved by the statistical
        test of tests/test_lossless.py); lossy methods document their bound."""

    @abstractmethod
    def run(self, engine: DecodeEngine) -> dict[str, Any] | None:
        """Commit every token of every sample in ``engine``; may return method-specific statistics."""

    def _check_declared(self) -> None:
        """Validate (and normalise) the dataclass fields that are declared options. Call from ``__post_init__``."""
        if not is_dataclass(self):
            return
        declared = {o.name: o for o in self.options}
        for f in fields(self):
            option = declared.get(f.name)
            value = getattr(self, f.name)
            if f.name == "acceptance":
                if isinstance(value, str):  # a rule named directly: its default parameters
                    value = AcceptanceRule(kind=declared["acceptance"].check(value))
                if not isinstance(value, AcceptanceRule):
                    raise ValueError(f"acceptance must be an AcceptanceRule or one of the rule names, got {value!r}")
            elif option is not None:
                try:
                    value = option.check(value)
                except ValueError as error:
                    raise ValueError(f"{self.name}: {error}") from None
            object.__setattr__(self, f.name, value)


def require(value: Any, what: str) -> Any:
    """``value``, or :class:`MissingResourceError` saying that ``what`` is missing."""
    if value is None:
        raise MissingResourceError(what)
    return value
