"""Every decoding method, declared once: its decoder kind, options, losslessness and what it needs of a model.

This module is the method half of arvis's *family seam* (docs/architecture.md): a declaration that can be read
without importing torch, so the command line, the demo and the pipelines refuse an inapplicable method or a bad
option in milliseconds, from a model folder's metadata, before any weights load. The implementations
(:mod:`arvis.methods.sjd`, :mod:`~arvis.methods.next_scale`, :mod:`~arvis.methods.continuous`…) read their
options from here.

Three *decoder kinds* exist, one decoder each (:class:`DecoderKind`): a method belongs to one kind and runs on
that kind's decoder; the same name may exist in several kinds (``ar`` is plain decoding in each).

What a method needs of a model is a set of *capabilities* (:data:`CAPABILITIES`): resources the pipeline
supplies (a draft model, codebook neighbourhoods, a low-resolution drafter) and traits of its model (a causal
or masked MAR, video frames). A user never passes a resource; the pipeline does.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

from arvis.utils.modes import (
    ACCEPTANCE_KINDS,
    BATCH_MODES,
    COUPLINGS,
    JACOBI_INITS,
    TEMPORAL_INITS,
    WINDOW_SHAPES,
)


class DecoderKind(StrEnum):
    """The unit a model decodes, and so the decoder its methods drive."""

    TOKEN = "token"  # discrete tokens in a fixed order (LlamaGen, Emu3, video): arvis.engine.DecodeEngine
    NEXT_SCALE = "next-scale"  # a pyramid of token maps, scale by scale (VAR): arvis.engine.next_scale
    CONTINUOUS = "continuous"  # continuous tokens sampled by a diffusion head (MAR): arvis.engine.continuous


#: Resources a pipeline supplies to a method (never a user option) and traits of a model, with what they are.
CAPABILITIES: dict[str, str] = {
    "draft_model": "a small draft model (the pipeline's draft_transformer)",
    "neighbours": "the tokenizer's codebook neighbourhoods (relaxed acceptance)",
    "lowres_model": "a low-resolution drafter (the pipeline's lowres_transformer)",
    "upsampler": "a token up-sampler (the pipeline's upsampler)",
    "frames": "video frames (temporal drafts)",
    "causal": "a causal raster-order MAR",
    "masked": "a masked MAR (MAR's own sampler)",
}
RESOURCES = ("draft_model", "neighbours", "lowres_model", "upsampler")

OPTION_KINDS = ("int", "float", "bool", "choice", "text", "interval", "fractions")


@dataclass(frozen=True)
class Option:
    """One user-facing method option.

    Attributes:
        name: the keyword (``window``, ``init``…).
        kind: one of :data:`OPTION_KINDS`.
        default: the value when not given.
        help: one line for ``arvis methods`` and the demo.
        choices: allowed values of a ``choice``.
        low, high: inclusive bounds of an ``int`` / ``float`` (``None``: unbounded); ``fractions``: ``[low, high)``.
        nullable: ``None`` is allowed (it means "the method's choice", said in ``help``).
        words: strings allowed besides the kind's values (``window="auto"``).
    """

    name: str
    kind: str
    default: Any
    help: str
    choices: tuple[str, ...] = ()
    low: float | None = None
    high: float | None = None
    nullable: bool = False
    words: tuple[str, ...] = ()

    def allowed(self) -> str:
        """The allowed values, in words (for errors and listings)."""
        if self.kind == "choice":
            text = "one of " + ", ".join(repr(c) for c in self.choices)
        elif self.kind in ("int", "float"):
            lo = "-inf" if self.low is None else f"{self.low:g}"
            hi = "inf" if self.high is None else f"{self.high:g}"
            text = f"{'an integer' if self.kind == 'int' else 'a number'} in [{lo}, {hi}]"
        elif self.kind == "interval":
            text = "a pair (l, r) of integers with 0 <= l <= r"
        elif self.kind == "fractions":
            text = f"a list of numbers in [{self.low:g}, {self.high:g})"
        elif self.kind == "bool":
            text = "true or false"
        else:
            text = "a string"
        return text + "".join(f" or {w!r}" for w in self.words) + (" or None" if self.nullable else "")

    def check(self, value: Any) -> Any:
        """``value`` validated and normalised; ``ValueError`` naming the option, the value and the allowed range."""
        if value is None and (self.nullable or self.kind == "interval"):
            return None
        if isinstance(value, str) and value in self.words:
            return value
        bad = ValueError(f"{self.name} must be {self.allowed()}, got {value!r}")
        if self.kind == "interval":
            pair = tuple(value) if isinstance(value, list | tuple) else None
            if (pair is None or len(pair) != 2 or not all(isinstance(v, int) and not isinstance(v, bool) for v in pair)
                    or not 0 <= pair[0] <= pair[1]):
                raise bad
            return pair
        if self.kind == "fractions":
            if not isinstance(value, list | tuple) or not all(
                    isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
                    and self.low <= v < self.high for v in value):
                raise bad
            return tuple(float(v) for v in value)
        if self.kind == "text":
            if not isinstance(value, str):
                raise bad
            return value
        if self.kind == "bool":
            if not isinstance(value, bool):
                raise bad
            return value
        if self.kind == "choice":
            if not isinstance(value, str) or value not in self.choices:
                raise bad
            return value
        integer = self.kind == "int"
        ok_type = isinstance(value, int) if integer else isinstance(value, int | float)
        if isinstance(value, bool) or not ok_type or not math.isfinite(value) \
                or (self.low is not None and value < self.low) or (self.high is not None and value > self.high):
            raise bad
        return int(value) if integer else float(value)

    def describe(self) -> str:
        return f"{self.name}: {self.allowed()} (default {self.default!r}) — {self.help}"


@dataclass(frozen=True)
class MethodInfo:
    """The declaration of one method of one decoder kind.

    Attributes:
        name: the registry name (``"sjd"``).
        kind: the decoder kind it runs on.
        summary: one line (``arvis methods``, the demo).
        options: the user-facing options.
        lossless: whether its output distribution is the model's: ``True`` / ``False``, or ``"acceptance"``:
            lossless exactly when its ``acceptance`` option is ``"exact"``.
        needs: capabilities (:data:`CAPABILITIES`) the model must offer whatever the options.
        renamed: old option names → their new name (a spec using the old one is refused, naming the new one).
        paper: where the method is published.
        constraint: a check across options (pure Python), ``ValueError`` when they do not go together.
    """

    name: str
    kind: DecoderKind
    summary: str
    options: tuple[Option, ...] = ()
    lossless: bool | str = True
    needs: tuple[str, ...] = ()
    renamed: Mapping[str, str] = field(default_factory=dict)
    paper: str = ""
    constraint: Callable[[dict[str, Any]], None] | None = None

    def option(self, name: str) -> Option:
        return next(o for o in self.options if o.name == name)

    def check_options(self, given: Mapping[str, Any]) -> dict[str, Any]:
        """``given`` validated: every declared option's value (defaults filled in). ``ValueError`` for an
        unknown, renamed or resource option (naming what to do instead) and for a bad value."""
        declared = {o.name: o for o in self.options}
        for key in given:
            if key in declared:
                continue
            if key in self.renamed:
                raise ValueError(f"{self.name}: option {key!r} is now called {self.renamed[key]!r} "
                                 f"({self.renamed[key]}={given[key]!r})")
            if key in RESOURCES:
                raise ValueError(f"{self.name}: {key} is not an option: the pipeline supplies it ({CAPABILITIES[key]})")
            hint = difflib.get_close_matches(key, list(declared), n=1)
            raise ValueError(f"method {self.name!r} has no option {key!r}"
                             + (f" (did you mean {hint[0]!r}?)" if hint else "")
                             + f"; its options are {', '.join(declared) or 'none'}")
        values = {}
        for name, option in declared.items():
            try:
                values[name] = option.check(given[name]) if name in given else option.default
            except ValueError as error:
                raise ValueError(f"{self.name}: {error}") from None
        if self.constraint is not None:
            self.constraint(values)
        return values

    def acceptance(self, options: Mapping[str, Any] | None = None) -> str:
        """The acceptance rule ``options`` choose (the declared default when they name none; ``exact`` when the
        method has no acceptance option)."""
        declared = next((o.default for o in self.options if o.name == "acceptance"), "exact")
        return (options or {}).get("acceptance", declared)

    def is_lossless(self, options: Mapping[str, Any] | None = None) -> bool:
        if self.lossless == "acceptance":
            return self.acceptance(options) == "exact"
        return bool(self.lossless)

    def requirements(self, options: Mapping[str, Any] | None = None) -> tuple[str, ...]:
        """Capabilities these options need: :attr:`needs`, codebook neighbourhoods under a relaxed rule,
        frames for temporal initial drafts."""
        options = options or {}
        out = list(self.needs)
        if self.acceptance(options) != "exact":
            out.append("neighbours")
        if options.get("init") in TEMPORAL_INITS:
            out.append("frames")
        return tuple(out)

    def describe(self) -> str:
        kind = ("lossless" if self.lossless is True else "lossy" if self.lossless is False
                else "lossless with acceptance='exact', lossy with a relaxed rule")
        lines = [f"{self.name}: {self.summary} [{kind}]"]
        if self.needs:
            lines.append("    needs " + "; ".join(CAPABILITIES[n] for n in self.needs))
        lines += [f"    {o.describe()}" for o in self.options]
        return "\n".join(lines)


# ----------------------------------------------------------------------------- shared option declarations
ACCEPTANCE_OPTIONS: tuple[Option, ...] = (
    Option("acceptance", "choice", "exact", "how drafts are verified: exact (lossless) or a relaxed rule "
           "(lantern, lantern++, bounded, gsd: lossy; the realised TV per token is reported: by bounded always, "
           "by the others with tv=true)",
           choices=ACCEPTANCE_KINDS),
    Option("k", "int", 10, "relaxed rules: latent neighbours per token", low=1, high=4096),
    Option("delta", "float", 0.1, "lantern / bounded: total-variation budget per token", low=0.0, high=1.0),
    Option("lam", "float", 5.0, "lantern++: λ", low=1.0, high=1e6),
    Option("ranks", "int", 7, "gsd: a neighbour joins the draft's group when the target ranks it within this many "
           "places of the draft", low=0, high=4096),
    Option("gap", "float", 0.15, "gsd: ... and gives it a probability within this gap of the draft's",
           low=0.0, high=1.0),
    Option("tv", "bool", False, "lantern / lantern++ / gsd: also measure the realised TV per token (exact, about a "
           "fifth of the decode's time; bounded always reports it)"),
)
#: Which relaxed rules read which acceptance parameter (the others ignore it).
RULE_PARAMETERS: dict[str, tuple[str, ...]] = {
    "k": ("lantern", "lantern++", "bounded", "gsd"), "delta": ("lantern", "bounded"), "lam": ("lantern++",),
    "ranks": ("gsd",), "gap": ("gsd",), "tv": ("lantern", "lantern++", "gsd")}
#: Options that only apply while another option has one of some values (the demo shows them only then).
APPLIES_WHEN: dict[str, tuple[str, tuple[str, ...]]] = {"max_window": ("window", ("auto",))}
WINDOW = Option("window", "int", 16, "drafts verified per target forward (L)", low=1, high=1024)
AUTO_WINDOW = replace(WINDOW, words=("auto",), help="drafts verified per target forward (L); 'auto': chosen every "
                      "forward from this machine's forward-cost curve and the tokens each window committed so far (at most max_window)")
MAX_WINDOW = Option("max_window", "int", 32, "window='auto': the largest window it may choose", low=1, high=256)
SJD_OPTIONS: tuple[Option, ...] = (
    AUTO_WINDOW,
    MAX_WINDOW,
    Option("init", "choice", "random", "initial drafts of newly drafted positions", choices=JACOBI_INITS),
    Option("coupling", "choice", "none", "draft refresh: none (SJD), maximal (MC-SJD), gumbel", choices=COUPLINGS),
    Option("window_shape", "choice", "contiguous", "raster window, or plus ZipAR's staircase bands",
           choices=WINDOW_SHAPES),
    Option("staircase_rows", "int", 2, "staircase: rows below the current one that get a band", low=1, high=64),
    Option("staircase_step", "int", 4, "staircase: columns each band is shifted left per row", low=1, high=4096),
    Option("jacobi_interval", "interval", None, "draft only sequence indices in [l, r) (plain AR elsewhere)"),
    Option("batch_mode", "choice", "ragged", "ragged: each sample commits what it accepted; lockstep: the "
           "batch minimum", choices=BATCH_MODES),
    *ACCEPTANCE_OPTIONS,
)
MC_SJD_OPTIONS: tuple[Option, ...] = tuple(
    replace(o, default="maximal", help="draft refresh: maximal (MC-SJD) or gumbel", choices=("maximal", "gumbel"))
    if o.name == "coupling" else o for o in SJD_OPTIONS)
GSD_OPTIONS: tuple[Option, ...] = tuple(
    replace(o, default="gsd") if o.name == "acceptance" else o for o in SJD_OPTIONS)
MULTISCALE_OPTIONS: tuple[Option, ...] = (
    Option("temperature", "float", 1.0, "up-sampler drafts: q = softmax(logits / temperature)", low=1e-3, high=1e3),
    Option("lowres_window", "int", 0, "the low-resolution model decodes by plain AR (0) or MC-SJD with this window",
           low=0, high=1024),
)
PRUNE_RATIOS = Option("prune_ratios", "fractions", (), "fraction of tokens dropped at each of the last scales "
                      "(FastVAR cached token pruning)", low=0.0, high=1.0)
GUIDED_SCALES = Option("guided_scales", "int", None, "scales with classifier-free guidance; later scales run the "
                       "conditional rows only (None: all)", low=0, high=64, nullable=True)


def _gumbel_needs_exact(options: dict[str, Any]) -> None:
    if options.get("coupling") == "gumbel" and options.get("acceptance", "exact") != "exact":
        raise ValueError("acceptance: Gumbel coupling verifies by matching argmaxes; relaxed acceptance needs "
                         "coupling 'none' or 'maximal'")
    if options.get("window") == "auto" and options.get("window_shape", "contiguous") != "contiguous":
        raise ValueError("window='auto' chooses a raster window per forward; window_shape must be 'contiguous'")


def tree_extra_nodes(width: int, depth: int) -> int:
    """Extra queries of a ``width``-ary tree of candidates with ``depth`` levels including its root (SJD-PAC's
    ``K`` and ``D``): every node at depths ``1 … D − 1`` but the chain's own."""
    return sum(width ** d - 1 for d in range(1, depth))


def _tree_fits(options: dict[str, Any]) -> None:
    width, depth = options["tree_width"], options["tree_depth"]
    if depth - 1 > options["window"]:
        raise ValueError(f"sjd-pac: tree_depth={depth} branches over {depth - 1} positions, more than "
                         f"window={options['window']}")
    if tree_extra_nodes(width, depth) > MAX_TREE_NODES:
        raise ValueError(f"sjd-pac: tree_width={width}, tree_depth={depth} adds {tree_extra_nodes(width, depth)} "
                         f"queries per forward (at most {MAX_TREE_NODES})")


MAX_TREE_NODES = 512
SJD_PAC_OPTIONS: tuple[Option, ...] = (
    WINDOW,
    Option("init", "choice", "random", "initial drafts of newly drafted positions", choices=JACOBI_INITS),
    Option("coupling", "choice", "maximal", "draft refresh: maximal (the paper's adaptive continuation: MC-SJD's "
           "coupling), gumbel (reproduces AR's tokens with per-sample generators), none (proactive drafting alone)",
           choices=COUPLINGS),
    Option("tree_width", "int", 3, "candidates per position of the tree (the paper's K; 1: MC-SJD)", low=1, high=16),
    Option("tree_depth", "int", 3, "tree levels including its root, the last committed token (the paper's D): "
           "candidates at the first tree_depth - 1 positions", low=1, high=6),
    Option("jacobi_interval", "interval", None, "draft only sequence indices in [l, r) (plain AR elsewhere)"),
)


def _some_pruning(options: dict[str, Any]) -> None:
    if not any(r > 0 for r in options["prune_ratios"]):
        raise ValueError("fastvar: prune_ratios: give at least one ratio > 0 (otherwise use method 'ar')")


T, S, C = DecoderKind.TOKEN, DecoderKind.NEXT_SCALE, DecoderKind.CONTINUOUS
CATALOG: tuple[MethodInfo, ...] = (
    # -- token-by-token models (LlamaGen, Emu3, video)
    MethodInfo("ar", T, "plain autoregressive decoding, one token per forward (the baseline)"),
    MethodInfo("sjd", T, "Speculative Jacobi Decoding: a window of Jacobi drafts verified per forward",
               SJD_OPTIONS, "acceptance", paper="https://arxiv.org/abs/2410.01699", constraint=_gumbel_needs_exact),
    MethodInfo("mc-sjd", T, "SJD with coupled draft refresh (maximal or Gumbel coupling)", MC_SJD_OPTIONS,
               "acceptance", paper="https://arxiv.org/abs/2510.24211", constraint=_gumbel_needs_exact),
    MethodInfo("sjd-pac", T, "SJD-PAC (CVPR 2026): MC-SJD plus proactive drafting, a tree of candidates at the "
               "first positions after each commit, verified exactly (recursive rejection sampling without "
               "replacement)", SJD_PAC_OPTIONS, True, paper="https://arxiv.org/abs/2603.18599",
               constraint=_tree_fits),
    MethodInfo("gsd", T, "Grouped Speculative Decoding (ICCV 2025): SJD whose drafts are accepted when their group of "
               "visually equivalent tokens is likely enough", GSD_OPTIONS, "acceptance",
               paper="https://arxiv.org/abs/2508.07747", constraint=_gumbel_needs_exact),
    MethodInfo("speculative", T, "draft-model speculative decoding", (replace(AUTO_WINDOW, default=4, high=64,
               help="drafts proposed by the draft model and verified per target forward; 'auto': chosen every "
               "forward from the target's and the draft's forward costs and the acceptance so far"),
               replace(MAX_WINDOW, default=16, high=64), *ACCEPTANCE_OPTIONS),
               "acceptance", needs=("draft_model",), renamed={"gamma": "window"},
               paper="https://arxiv.org/abs/2211.17192"),
    MethodInfo("zipar", T, "ZipAR spatially parallel decoding: rows decode in parallel, unverified",
               (Option("row_lag", "int", 4, "a row starts once the row above has this many tokens (the paper's "
                       "window)", low=1, high=4096),), False, renamed={"window": "row_lag"},
               paper="https://arxiv.org/abs/2412.04062"),
    MethodInfo("pjd", T, "Parallel Jacobi Decoding (CVPR 2026): rows decode in parallel (ZipAR's schedule), each "
               "with a window of Jacobi drafts verified under a row-causal mask",
               (replace(WINDOW, default=3, high=256, help="drafts per active row per forward (plus its bonus position)"),
                Option("row_lag", "int", 2, "a row starts once the row above has this many tokens, and stays that "
                       "far behind it (ZipAR's window)", low=1, high=4096),
                Option("init", "choice", "random", "initial drafts of newly drafted positions",
                       choices=("random", "repeat_horizontal", "repeat_vertical")),
                Option("coupling", "choice", "none", "draft refresh: none (SJD's, the paper's) or maximal (MC-SJD)",
                       choices=("none", "maximal"))),
               False, paper="https://arxiv.org/abs/2606.05703"),
    MethodInfo("mulo", T, "multi-scale drafting (MuLo-SD, CVPR 2026) verified exactly: MC-SJD started from an up-sampled "
               "low-resolution sample", (replace(WINDOW, default=32),
                                          *(o for o in MC_SJD_OPTIONS if o.name in ("coupling", "jacobi_interval",
                                                                                   "batch_mode")),
                                          *ACCEPTANCE_OPTIONS, *MULTISCALE_OPTIONS),
               "acceptance", needs=("lowres_model", "upsampler"),
               constraint=_gumbel_needs_exact),
    MethodInfo("mulo-local", T, "MuLo-SD's local verification: a rejection re-verifies only its spatial "
               "neighbourhood", (replace(WINDOW, default=32, help="drafts verified per target forward (positions "
                                          "after the first uncommitted one)"),
                                 Option("radius", "int", 1, "rows and columns around a rejection whose later "
                                        "positions are re-verified (>= the grid size: lossless)", low=1, high=4096),
                                 *MULTISCALE_OPTIONS),
               False, needs=("lowres_model", "upsampler")),
    # -- next-scale models (VAR)
    MethodInfo("ar", S, "plain next-scale decoding, every scale by the target (VAR's sampler)"),
    MethodInfo("code", S, "CoDe: the large model decodes the first scales, the small one refines the rest",
               (Option("draft_scales", "int", 4, "scales decoded by the large model; the small model decodes the "
                       "rest", low=1, high=64), GUIDED_SCALES, PRUNE_RATIOS),
               False, needs=("draft_model",), paper="https://arxiv.org/abs/2411.17787"),
    MethodInfo("cfg-cutoff", S, "classifier-free guidance on the first scales only",
               (replace(GUIDED_SCALES, default=4, nullable=False), PRUNE_RATIOS), False),
    MethodInfo("fastvar", S, "FastVAR: cached token pruning at the last scales",
               (replace(PRUNE_RATIOS, default=(0.5,)),), False, paper="https://arxiv.org/abs/2503.23367",
               constraint=_some_pruning),
    # -- continuous-token models (MAR)
    MethodInfo("ar", C, "plain decoding: MAR's masked sampler, or one token per forward for the causal variant",
               (Option("final_std", "float", 0.0, "causal MAR: std added at the head's last step (the sampler "
                       "cspd-exact with the same final_std is exact for; 0: MAR's)", low=0.0, high=1.0),)),
    MethodInfo("cspd-exact", C, "exact continuous speculative decoding on causal MAR (a draft MAR's "
               "trajectories verified by the target)",
               (replace(WINDOW, default=None, high=64, nullable=True,
                        help="tokens the draft proposes per target forward (None: 4 with final_std > 0; 1 with "
                             "final_std = 0, where the context break ends every window at its first position)"),
                Option("final_std", "float", 0.0, "std added at the head's last step by draft, target and baseline "
                       "(0: MAR's sampler, about one token per verify)", low=0.0, high=1.0),
                Option("max_rounds", "int", 1024, "residual proposals per rejected position before the counted "
                       "fallback", low=1, high=65536)),
               True, needs=("draft_model", "causal"), renamed={"gamma": "window"},
               paper="https://arxiv.org/abs/2411.11925"),
    MethodInfo("cspd", C, "continuous speculative decoding as published, on masked MAR (tempered ratio)",
               (Option("verify_every", "int", 8, "draft iterations between target verifications (the "
                       "reference's num_draft)", low=1, high=4096),
                Option("prefill_ratio", "float", 0.15, "fraction of the iterations decoded by the target alone",
                       low=0.0, high=1.0),
                Option("tau", "float", 42.0, "tempering of the acceptance ratio (the reference's "
                       "inner_temperature)", low=1e-3, high=1e6),
                Option("max_tries", "int", 100, "resampling proposals per rejected token before the counted "
                       "fallback", low=1, high=10000)),
               False, needs=("draft_model", "masked"), renamed={"window": "verify_every"},
               paper="https://arxiv.org/abs/2411.11925"),
)
del T, S, C

_BY_KIND: dict[DecoderKind, dict[str, MethodInfo]] = {}


def register(info: MethodInfo) -> MethodInfo:
    """Add a method declaration (a method defined outside arvis registers its implementation too:
    :func:`arvis.methods.register_method`)."""
    _BY_KIND.setdefault(info.kind, {})[info.name] = info
    return info


for _info in CATALOG:
    register(_info)


def method_names(kind: DecoderKind | str | None = None) -> list[str]:
    """The methods of ``kind`` (all kinds: every name once), sorted."""
    if kind is None:
        return sorted({name for methods in _BY_KIND.values() for name in methods})
    return sorted(_BY_KIND.get(DecoderKind(kind), {}))


def method_info(name: str, kind: DecoderKind | str = DecoderKind.TOKEN) -> MethodInfo:
    """The declaration of method ``name`` of ``kind``; ``ValueError`` naming the kind's methods (and the
    closest name, or the kinds that do have it)."""
    kind = DecoderKind(kind)
    methods = _BY_KIND.get(kind, {})
    if isinstance(name, str) and name in methods:
        return methods[name]
    elsewhere = [str(k) for k, m in _BY_KIND.items() if k != kind and name in m]
    if elsewhere:
        raise ValueError(f"method {name!r} does not apply (it decodes {' / '.join(elsewhere)} models, and this is a "
                         f"{kind} model); {kind} methods: {', '.join(sorted(methods))}")
    hint = difflib.get_close_matches(str(name), list(methods), n=1)
    raise ValueError(f"unknown method {name!r}" + (f" (did you mean {hint[0]!r}?)" if hint else "")
                     + f"; {kind} methods: {', '.join(sorted(methods))}")


def describe(kind: DecoderKind | str | None = None, capabilities: Iterable[str] | None = None) -> str:
    """``arvis methods``: every method of ``kind`` (all kinds when ``None``) whose needs ``capabilities``
    meet (all when ``None``), with its options."""
    kinds = list(DecoderKind) if kind is None else [DecoderKind(kind)]
    have = None if capabilities is None else set(capabilities)
    out = []
    for k in kinds:
        infos = [i for n, i in sorted(_BY_KIND.get(k, {}).items()) if have is None or set(i.needs) <= have]
        if infos:
            out.append(f"# {k} models")
            out += [i.describe() for i in infos]
    return "\n".join(out)


__all__ = ["ACCEPTANCE_OPTIONS", "CAPABILITIES", "CATALOG", "RESOURCES", "RULE_PARAMETERS", "DecoderKind", "MethodInfo",
           "Option", "describe", "method_info", "method_names", "register", "tree_extra_nodes"]
