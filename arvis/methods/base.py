"""What a decoding method is: a small object that drives its decoder kind's decoder.

``method = schedule × drafter × acceptance rule`` (docs/architecture.md). A method holds only its options (a
frozen dataclass, validated on construction against its declaration in :mod:`arvis.methods.catalog`) and the
resources its pipeline supplied (a draft model, codebook neighbourhoods); all decode state lives in the decoder
and the method's per-request loop, so one method object can serve any number of requests, concurrently.

The decoder of each kind (:class:`~arvis.methods.catalog.DecoderKind`): :class:`arvis.engine.DecodeEngine`
(token by token), :class:`arvis.engine.next_scale.NextScaleDecoder` (VAR),
:class:`arvis.engine.continuous.ContinuousDecoder` (MAR).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import fields, is_dataclass
from typing import Any, ClassVar

from arvis.acceptance.relaxed import AcceptanceRule
from arvis.methods.catalog import RESOURCES, DecoderKind, MethodInfo, Option
from arvis.methods.catalog import register as register_info
from arvis.methods.options import RULE_OPTION_NAMES, rule_options


class MissingResourceError(ValueError):
    """A method needs something only a pipeline has (a draft model, codebook neighbourhoods) and was run
    without it. Raised when the decode starts, before any forward."""


class DecodingMethod(ABC):
    """Base class of every decoding method.

    Class attributes (set from :attr:`info`, the method's declaration):
        info: the :class:`~arvis.methods.catalog.MethodInfo`.
        name: the registry name (``"ar"``, ``"sjd"``…).
        kind: the decoder kind it runs on.
        options: the user-facing options.
    """

    info: ClassVar[MethodInfo]
    name: ClassVar[str]
    kind: ClassVar[DecoderKind]
    options: ClassVar[tuple[Option, ...]] = ()
    #: positions one target forward evaluates, when fixed (the bench's forward-cost curve reads it); else None
    positions_per_forward: ClassVar[int | None] = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        info = cls.__dict__.get("info")
        if info is not None:
            cls.name, cls.kind, cls.options = info.name, info.kind, info.options

    def scratch_slots(self, layout: Any) -> int:
        """Cache slots the method's forwards need after the sequence's own on ``layout`` (inputs at a position
        another input of the same forward holds: :class:`arvis.engine.DecodeEngine`'s ``scratch_slots``)."""
        return 0

    @property
    def lossless(self) -> bool:
        """True when the output distribution is exactly the model's (proved by the statistical tests of
        tests/methods); lossy methods document their bound."""
        rule = getattr(self, "acceptance", None)
        if isinstance(rule, AcceptanceRule):
            return rule.lossless
        return self.info.is_lossless()

    @abstractmethod
    def run(self, decoder: Any) -> dict[str, Any] | None:
        """Commit every token of every sample in ``decoder`` (the decoder of :attr:`kind`); may return
        method-specific statistics."""

    def option_values(self) -> dict[str, Any]:
        """The method's options as given to :func:`arvis.methods.build_method` (for records)."""
        values = {o.name: getattr(self, o.name) for o in self.options
                  if o.name != "acceptance" and o.name not in RULE_OPTION_NAMES}
        rule = getattr(self, "acceptance", None)
        return {**values, **(rule_options(rule) if isinstance(rule, AcceptanceRule) else {})}

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
        if self.info.constraint is not None:
            self.info.constraint(self.option_values())


def require(value: Any, what: str) -> Any:
    """``value``, or :class:`MissingResourceError` saying that ``what`` is missing."""
    if value is None:
        raise MissingResourceError(what)
    return value


# Implementations by decoder kind and name (filled by ``@register_method`` as the method modules load; the
# built-ins load with :mod:`arvis.methods.registry`). Here, in the leaf module, so that importing one method's
# module first never cycles through the registry.
METHODS: dict[DecoderKind, dict[str, type[DecodingMethod]]] = {kind: {} for kind in DecoderKind}


def register_method(cls: type[DecodingMethod]) -> type[DecodingMethod]:
    """Class decorator: register an implementation under its declaration ``cls.info`` (declared in the catalog
    too, so that ``arvis methods`` and the pipelines' checks see it)."""
    register_info(cls.info)
    METHODS[cls.kind][cls.name] = cls
    return cls


__all__ = ["METHODS", "RESOURCES", "DecodingMethod", "MissingResourceError", "register_method", "require"]
