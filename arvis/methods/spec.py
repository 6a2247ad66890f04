"""Method specs: a registered method's name plus options, as written on a command line.

A spec (:func:`parse_method_specs`) is ``name`` or ``name:key=value,key=value`` with values parsed
as JSON (``sjd:window=16``, ``mc-sjd:window=32,init="random"``; a bare word stays a string). Several specs
are joined by ``;`` or by ``,``: a comma-separated item that contains ``=`` but no ``:`` before it
continues the options of the spec before it, anything else starts a new spec. So
``ar,sjd:window=16,init=random,mc-sjd:window=32`` is three specs. Brackets and quotes nest (``x=[1,2]``).

Parsing needs no model and no torch (:mod:`arvis.methods.catalog`): a name no decoder kind has, an unknown,
renamed, duplicated or resource option, or a bad value is refused here; whether a method applies to a given
model is :meth:`arvis.families.Capabilities.check`'s question.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from arvis.methods.catalog import DecoderKind, method_info, method_names


@dataclass(frozen=True)
class MethodSpec:
    """A method name plus options, e.g. ``sjd:window=16``."""

    name: str
    options: tuple[tuple[str, Any], ...] = ()

    @property
    def options_dict(self) -> dict[str, Any]:
        return dict(self.options)

    @property
    def label(self) -> str:
        if not self.options:
            return self.name
        return self.name + ":" + ",".join(f"{k}={_format_value(v)}" for k, v in self.options)

    @property
    def window(self) -> int | None:
        w = self.options_dict.get("window")
        return w if isinstance(w, int) and not isinstance(w, bool) else None


def _format_value(v: Any) -> str:
    return v if isinstance(v, str) else json.dumps(v)


def _split_top_level(text: str, seps: str) -> list[str]:
    """Split on any of ``seps`` outside brackets and quotes."""
    parts, depth, quote, cur = [], 0, "", []
    for ch in text:
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "\"'":
            quote = ch
        elif ch in "[{(":
            depth += 1
        elif ch in "]})":
            depth -= 1
        elif ch in seps and depth == 0:
            parts.append("".join(cur))
            cur = []
            continue
        cur.append(ch)
    parts.append("".join(cur))
    return parts


def _parse_value(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def parse_method_specs(texts: str | Sequence[str]) -> list[MethodSpec]:
    """Parse and validate method specs (module docstring); ``ValueError`` names the bad part.

    Every spec is checked with :func:`arvis.methods.build_method` (unknown method → the list of
    available methods; unknown option → the method's options). Duplicates are an error.
    """
    if isinstance(texts, str):
        texts = [texts]
    specs: list[MethodSpec] = []
    for text in texts:
        for group in _split_top_level(text, ";"):
            current: tuple[str, dict[str, Any]] | None = None
            for item in (s.strip() for s in _split_top_level(group, ",")):
                if not item:
                    continue
                colon, eq = item.find(":"), item.find("=")
                if eq >= 0 and (colon < 0 or colon > eq):  # key=value continuing the previous spec
                    if current is None:
                        raise ValueError(f"methods: option {item!r} comes before any method name")
                    key, value = item.split("=", 1)
                    _add_option(current, key, value)
                    continue
                if current is not None:
                    specs.append(_make_spec(*current))
                name, _, first = item.partition(":")
                current = (name.strip(), {})
                if first:
                    if "=" not in first:
                        raise ValueError(f"methods: expected key=value after {name!r}:, got {first!r}")
                    key, value = first.split("=", 1)
                    _add_option(current, key, value)
            if current is not None:
                specs.append(_make_spec(*current))
    if not specs:
        raise ValueError(f"methods: no method given; available methods: {', '.join(method_names())}")
    labels = [s.label for s in specs]
    dupes = sorted({x for x in labels if labels.count(x) > 1})
    if dupes:
        raise ValueError(f"methods: {dupes} given more than once")
    return specs


def _add_option(current: tuple[str, dict[str, Any]], key: str, value: str) -> None:
    key = key.strip().replace("-", "_")
    if key in current[1]:
        raise ValueError(f"methods: option {key!r} of {current[0]!r} given twice")
    current[1][key] = _parse_value(value.strip())


def _make_spec(name: str, options: dict[str, Any]) -> MethodSpec:
    """A spec whose options are valid for ``name`` in at least one decoder kind (the model decides which)."""
    errors = []
    for kind in DecoderKind:
        if name not in method_names(kind):
            continue
        try:
            method_info(name, kind).check_options(options)
            return MethodSpec(name, tuple(options.items()))
        except ValueError as err:
            errors.append(err)
    if errors:
        raise errors[0]
    hint = difflib.get_close_matches(name, method_names(), n=1)
    raise ValueError(f"methods: unknown method {name!r}" + (f" (did you mean {hint[0]!r}?)" if hint else "")
                     + f"; available methods: {', '.join(method_names())}")
