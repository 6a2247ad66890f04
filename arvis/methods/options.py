"""Method options, declared once: name, kind, default, allowed values, help.

Every method lists its user-facing options as :class:`Option` s (``DecodingMethod.options``). The one
validation of option values lives here (:meth:`Option.check`), and everything that offers or reports
options reads the same declarations: :func:`arvis.methods.build_method` (the pipelines, ``decode``,
bench specs such as ``sjd:window=16``), ``arvis methods`` and the demo's widgets.

The acceptance options (``acceptance``, ``k``, ``delta``, ``lam``) are declared once
(:data:`ACCEPTANCE_OPTIONS`) and folded into one :class:`~arvis.acceptance.relaxed.AcceptanceRule`.
Kinds: ``int``, ``float``, ``choice`` (one of ``choices``), ``text`` (any string), ``interval`` (a pair of ints),
``fractions`` (a list of numbers in ``[low, high)``: per-scale ratios of next-scale methods),
``resource`` (an object a pipeline passes: a draft model, codebook neighbourhoods — not user input).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from arvis.acceptance.relaxed import RULES, AcceptanceRule

KINDS = ("int", "float", "choice", "text", "interval", "fractions", "resource")


@dataclass(frozen=True)
class Option:
    """One method option.

    Attributes:
        name: the keyword (``window``, ``init``…).
        kind: one of :data:`KINDS`.
        default: the value when not given.
        help: one line for ``arvis methods`` and the demo.
        choices: allowed values of a ``choice``.
        low, high: inclusive bounds of an ``int`` / ``float`` (``None``: unbounded).
    """

    name: str
    kind: str
    default: Any
    help: str
    choices: tuple[str, ...] = ()
    low: float | None = None
    high: float | None = None

    def allowed(self) -> str:
        """The allowed values, in words (for errors and listings)."""
        if self.kind == "choice":
            return "one of " + ", ".join(repr(c) for c in self.choices)
        if self.kind in ("int", "float"):
            lo = "-inf" if self.low is None else f"{self.low:g}"
            hi = "inf" if self.high is None else f"{self.high:g}"
            return f"{'an integer' if self.kind == 'int' else 'a number'} in [{lo}, {hi}]"
        if self.kind == "interval":
            return "a pair (l, r) of integers with 0 <= l <= r"
        if self.kind == "text":
            return "a string"
        if self.kind == "fractions":
            return f"a list of numbers in [{self.low:g}, {self.high:g})"
        return "an object passed by the pipeline"

    def check(self, value: Any) -> Any:
        """``value`` validated and normalised; ``ValueError`` naming the option, the value and the allowed range."""
        if self.kind == "resource":
            return value
        if self.kind == "interval":
            if value is None:
                return None
            pair = tuple(value) if isinstance(value, list | tuple) else None
            if (pair is None or len(pair) != 2 or not all(isinstance(v, int) and not isinstance(v, bool) for v in pair)
                    or not 0 <= pair[0] <= pair[1]):
                raise ValueError(f"{self.name} must be {self.allowed()}, got {value!r}")
            return pair
        if self.kind == "fractions":
            if not isinstance(value, list | tuple) or not all(
                    isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
                    and self.low <= v < self.high for v in value):
                raise ValueError(f"{self.name} must be {self.allowed()}, got {value!r}")
            return tuple(float(v) for v in value)
        if self.kind == "text":
            if not isinstance(value, str):
                raise ValueError(f"{self.name} must be {self.allowed()}, got {value!r}")
            return value
        if self.kind == "choice":
            if value not in self.choices:
                raise ValueError(f"{self.name} must be {self.allowed()}, got {value!r}")
            return value
        integer = self.kind == "int"
        ok_type = isinstance(value, int) if integer else isinstance(value, int | float)
        if isinstance(value, bool) or not ok_type or not math.isfinite(value) \
                or (self.low is not None and value < self.low) or (self.high is not None and value > self.high):
            raise ValueError(f"{self.name} must be {self.allowed()}, got {value!r}")
        return int(value) if integer else float(value)

    def describe(self) -> str:
        default = "" if self.kind == "resource" else f" (default {self.default!r})"
        return f"{self.name}: {self.allowed()}{default} — {self.help}"


ACCEPTANCE_OPTIONS: tuple[Option, ...] = (
    Option("acceptance", "choice", "exact", "how drafts are verified: exact (lossless) or a relaxed rule "
           "(lantern, lantern++, bounded: lossy, TV bound per token)", choices=RULES),
    Option("k", "int", 10, "relaxed rules: latent neighbours per token", low=1, high=4096),
    Option("delta", "float", 0.1, "lantern / bounded: total-variation budget per token", low=0.0, high=1.0),
    Option("lam", "float", 5.0, "lantern++: λ", low=1.0, high=1e6),
    Option("neighbours", "resource", None, "relaxed rules: the tokenizer's codebook neighbourhoods [V, >= k] "
           "(the pipelines pass them)"),
)
_RULE_FIELDS = {"acceptance": "kind", "k": "k", "delta": "delta", "lam": "lam"}


def method_arguments(name: str, declared: Sequence[Option], given: Mapping[str, Any]) -> dict[str, Any]:
    """Constructor arguments of a method from user options: unknown names refused (``ValueError`` listing
    the method's options); ``acceptance``/``k``/``delta``/``lam`` validated here and folded into one
    :class:`~arvis.acceptance.relaxed.AcceptanceRule`; every other value is validated by the method's
    constructor against the same declarations."""
    by_name = {o.name: o for o in declared}
    unknown = sorted(set(given) - set(by_name))
    if unknown:
        raise ValueError(f"method {name!r} has no option(s) {unknown}; its options are {sorted(by_name) or 'none'}")
    arguments = {k: v for k, v in given.items() if k not in _RULE_FIELDS}
    rule_given = {k: v for k, v in given.items() if k in _RULE_FIELDS}
    if isinstance(rule_given.get("acceptance"), AcceptanceRule):
        if len(rule_given) > 1:
            raise ValueError(f"{name}: give k / delta / lam inside the AcceptanceRule, not beside it")
        arguments["acceptance"] = rule_given["acceptance"]
    elif rule_given:
        try:
            values = {k: by_name[k].check(rule_given.get(k, by_name[k].default)) for k in _RULE_FIELDS}
        except ValueError as error:
            raise ValueError(f"{name}: {error}") from None
        arguments["acceptance"] = AcceptanceRule(**{_RULE_FIELDS[k]: v for k, v in values.items()})
    return arguments


def rule_options(rule: AcceptanceRule) -> dict[str, Any]:
    """The flat options of a rule (for records): ``acceptance`` and, for relaxed rules, ``k``/``delta``/``lam``."""
    if rule.lossless:
        return {"acceptance": "exact"}
    return {"acceptance": rule.kind, "k": rule.k, "delta": rule.delta, "lam": rule.lam}
