"""From user options to a method's constructor arguments: the acceptance options folded into one rule.

The options themselves are declared in :mod:`arvis.methods.catalog` (:class:`~arvis.methods.catalog.Option`,
one validation for every method); here, :func:`method_arguments` turns validated options into constructor
arguments — ``acceptance``/``k``/``delta``/``lam`` become one :class:`~arvis.acceptance.relaxed.AcceptanceRule`
— and :func:`rule_options` turns a rule back into flat options for records.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from arvis.acceptance.relaxed import AcceptanceRule
from arvis.methods.catalog import ACCEPTANCE_OPTIONS, RULE_PARAMETERS, MethodInfo, Option

_RULE_FIELDS = {"acceptance": "kind", **{name: name for name in RULE_PARAMETERS}}
#: The acceptance options that parameterise a rule (folded into one AcceptanceRule).
RULE_OPTION_NAMES: tuple[str, ...] = tuple(RULE_PARAMETERS)


def method_arguments(info: MethodInfo, given: Mapping[str, Any]) -> dict[str, Any]:
    """Constructor arguments of method ``info`` from user options ``given`` (validated by
    :meth:`MethodInfo.check_options`: unknown, renamed and resource names refused, values checked); an
    :class:`AcceptanceRule` object may stand for ``acceptance`` (then without ``k``/``delta``/``lam`` beside it)."""
    given = dict(given)
    rule = given.get("acceptance")
    if isinstance(rule, AcceptanceRule):
        if any(k in given for k in RULE_OPTION_NAMES):
            raise ValueError(f"{info.name}: give {' / '.join(RULE_OPTION_NAMES)} inside the AcceptanceRule, not "
                             f"beside it")
        given["acceptance"] = rule.kind
        if "acceptance" not in {o.name for o in info.options}:
            info.check_options(given)  # names the unknown option
        values = info.check_options({k: v for k, v in given.items()})
        values["acceptance"] = rule
        return {k: v for k, v in values.items() if k not in RULE_OPTION_NAMES}
    values = info.check_options(given)
    if "acceptance" in values:
        values["acceptance"] = AcceptanceRule(**{_RULE_FIELDS[k]: values.pop(k) for k in list(_RULE_FIELDS)})
    return values


def rule_options(rule: AcceptanceRule) -> dict[str, Any]:
    """The flat options of a rule (for records): ``acceptance`` and, for relaxed rules, ``k``/``delta``/``lam``."""
    if rule.lossless:
        return {"acceptance": "exact"}
    tv = {"tv": True} if rule.tv else {}
    if rule.kind == "gsd":
        return {"acceptance": rule.kind, "k": rule.k, "ranks": rule.ranks, "gap": rule.gap, **tv}
    return {"acceptance": rule.kind, "k": rule.k, "delta": rule.delta, "lam": rule.lam, **tv}


__all__ = ["ACCEPTANCE_OPTIONS", "RULE_OPTION_NAMES", "Option", "method_arguments", "rule_options"]
