"""Draft-model speculative decoding (Leviathan et al., 2023, arXiv:2211.17192; Chen et al., 2023,
arXiv:2302.01318), with exact or relaxed acceptance (LANTERN, LANTERN++, arvis's bounded rule).

``speculative = raster window L × draft-model drafter × acceptance rule``: per iteration and sample
with ``n`` committed tokens the drafter proposes ``window`` tokens (the papers' γ) with their distributions; one
target forward over ``[x_{n−1}, d_n … d_{n+L−1}]`` gives ``p_n … p_{n+L}``; drafts are verified left to right;
the first rejection is replaced by a recovered token, or the bonus token is drawn from ``p_{n+γ}`` when
all pass; the target cache rolls back to the committed prefix and the drafter is told how far the
target committed (:class:`arvis.methods.draft_verify.DraftVerifyLoop`, the loop SJD uses too).
``acceptance="exact"`` is lossless; the relaxed rules are lossy and report the realised TV per token
given the prefix (exact for every rule; over an image it adds up to at most ``n`` times the per-token figure).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

import torch

from arvis.acceptance.relaxed import AcceptanceRule
from arvis.drafting.draft_model import DraftModelDrafter
from arvis.engine.cost import measured_curve
from arvis.engine.engine import DecodeEngine
from arvis.engine.schedules import RasterWindow
from arvis.methods.base import DecodingMethod, register_method, require
from arvis.methods.catalog import DecoderKind, MethodInfo, method_info
from arvis.methods.draft_verify import DraftVerifyLoop
from arvis.methods.options import rule_options
from arvis.methods.relaxation import checked_neighbours
from arvis.methods.window_policy import AutoWindow


@register_method
@dataclass(frozen=True)
class SpeculativeDecoding(DecodingMethod):
    """Speculative decoding with a draft model.

    Options: ``window`` (drafts verified per target forward, the papers' γ; ``"auto"``: chosen every forward up to
    ``max_window``, pricing the draft model's forwards too, :mod:`arvis.methods.window_policy`), the acceptance rule
    (``acceptance``, ``k``, ``delta``, ``lam`` by name; one :class:`AcceptanceRule` field here), and two
    resources the pipelines supply: ``draft_model`` (their ``draft_transformer``) and ``neighbours`` (codebook
    neighbourhoods, relaxed rules).
    """

    info: ClassVar[MethodInfo] = method_info("speculative", DecoderKind.TOKEN)

    window: int | Literal["auto"] = 4
    max_window: int = 16
    acceptance: AcceptanceRule = field(default_factory=AcceptanceRule)
    draft_model: Any = None
    neighbours: torch.Tensor | None = None

    def __post_init__(self) -> None:
        self._check_declared()

    @property
    def positions_per_forward(self) -> int | None:  # type: ignore[override]
        """Positions one target forward evaluates (``window`` drafts after the last committed token, plus the
        bonus); ``None`` when the window is chosen per forward."""
        return None if self.window == "auto" else self.window + 1

    def run(self, engine: DecodeEngine) -> dict[str, Any]:
        draft_model = require(self.draft_model, "draft_model: speculative decoding needs a draft model (the "
                                                "pipeline's draft_transformer, or pass draft_model=…)")
        neighbours = checked_neighbours(self.acceptance, self.neighbours)
        drafter = DraftModelDrafter(draft_model)
        policy = None
        if self.window == "auto":  # proposing L drafts: one 2-wide catch-up forward, then L - 1 single steps
            draft_ms = [c.get("ms_min", c["ms"]) for c in
                        measured_curve(draft_model, engine.condition, engine.sampling, (1, 2))]
            # A draft model's acceptance per offset does not depend on the window: the model estimate is the
            # measurement, and no window needs trying beyond what it predicts (optimism 1).
            policy = AutoWindow(engine, self.max_window, drafting_ms=lambda L: draft_ms[1] + (L - 1) * draft_ms[0],
                                optimism=1.0, memory_key=(self.info.name, id(draft_model), repr(self.acceptance)))
        window = self.max_window if self.window == "auto" else self.window
        loop = DraftVerifyLoop(engine, RasterWindow(window, engine.num_tokens),
                               lambda p0, noise: drafter.start(engine), rule=self.acceptance, neighbours=neighbours,
                               window_policy=policy)
        return {**loop.run(), "window": self.window, **rule_options(self.acceptance)}
