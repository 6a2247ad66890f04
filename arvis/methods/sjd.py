"""Speculative Jacobi Decoding (SJD; Teng et al., ICLR 2025, arXiv:2410.01699) and its coupled
variants (MC-SJD; So et al., 2025, arXiv:2510.24211), with raster or staircase windows. Lossless
with exact acceptance.

``SJD = raster window L × Jacobi drafts × exact acceptance``; MC-SJD couples the draft refresh. One
iteration, per sample with ``n`` committed tokens and drafts ``d_n … d_{n+L−1}``
(:class:`arvis.methods.draft_verify.DraftVerifyLoop`):

1. one target forward over ``[x_{n−1}, d_n, …, d_{n+L−1}]`` at sequence indices ``n−1 … n+L−1``
   gives ``p_n … p_{n+L}`` (``p_k`` conditions on the committed prefix and the drafts before ``k``);
2. verify left to right with exact speculative acceptance; at the first rejection ``k`` draw the
   recovered token from ``normalize(max(0, p_k − q_k))``; if all ``L`` pass, the bonus token comes
   from ``p_{n+L}``. Commit 1 … L+1 tokens;
3. refresh every evaluated draft after the commit point from this forward's ``p``: independent draws
   (SJD), the maximal coupling of the old draft with ``p`` (MC-SJD), or the Gumbel-max of ``p`` with
   noise fixed per position (Gumbel coupling); then ``q := p``. Positions drafted for the first time
   get initial drafts (:mod:`arvis.drafting.jacobi`: random, from a spatial neighbour, or — on video
   layouts — from the same cell one frame back);
4. roll back the cache to the committed prefix (a mask update; both CFG halves).

*Staircase windows* (``window_shape="staircase"``): besides the raster window, each forward evaluates
bands of ``window`` positions in the next ``staircase_rows`` rows (:class:`arvis.engine.schedules.StaircaseWindow`);
their ``p`` only seeds the drafts there, every token is still verified in raster order — lossless.

With Gumbel coupling every committed token is the Gumbel-max sample of its true conditional with the
same noise plain AR would use (one ``[V]`` draw per token from each sample's generator), so with
per-sample generators it reproduces plain AR's tokens exactly — in fewer forwards — provided the
window forward and AR's single-token forward compute the same ``p`` up to rounding that never moves
an argmax: true in fp32 (tested); in bf16/fp16 the two forwards round differently and the tokens
drift from AR's after a few dozen positions (each is still an exact sample of the model as the window
forward evaluates it).

Batches are *ragged*: every sample keeps its own committed length and drafts and commits as many
tokens per forward as it accepted; finished samples leave the batch (``DecodeEngine.retire``).
``batch_mode="lockstep"`` advances every sample by the batch minimum instead (to measure what ragged
decoding buys); accepted drafts past the cut are redrawn fresh, which keeps it lossless.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

import torch

from arvis.acceptance.relaxed import AcceptanceRule
from arvis.drafting.jacobi import JacobiDrafter
from arvis.engine.engine import DecodeEngine
from arvis.engine.schedules import RasterWindow, StaircaseWindow
from arvis.methods.base import DecodingMethod, register_method
from arvis.methods.catalog import DecoderKind, MethodInfo, method_info
from arvis.methods.draft_verify import DraftVerifyLoop
from arvis.methods.options import rule_options
from arvis.methods.relaxation import checked_neighbours
from arvis.methods.window_policy import AutoWindow
from arvis.utils.modes import BatchMode, Coupling, JacobiInit, WindowShape


@register_method
@dataclass(frozen=True)
class SpeculativeJacobi(DecodingMethod):
    """SJD: a raster (or staircase) window of Jacobi drafts, verified by an acceptance rule.

    Options (declared in :mod:`arvis.methods.catalog`): ``window`` (an int, or ``"auto"``: cost-aware windows up to
    ``max_window``, :mod:`arvis.methods.window_policy`), ``init``, ``coupling``, ``window_shape``,
    ``staircase_rows``, ``staircase_step``, ``jacobi_interval``, ``batch_mode``, and the acceptance
    rule (``acceptance``, ``k``, ``delta``, ``lam`` by name; one :class:`AcceptanceRule` field here).
    Relaxation only changes which tokens are committed; refreshed drafts always come from the exact
    coupling. ``neighbours``: the codebook neighbourhoods relaxed rules need (passed by the pipelines).
    """

    info: ClassVar[MethodInfo] = method_info("sjd", DecoderKind.TOKEN)

    window: int | Literal["auto"] = 16
    max_window: int = 32
    init: JacobiInit = "random"
    coupling: Coupling = "none"
    window_shape: WindowShape = "contiguous"
    staircase_rows: int = 2
    staircase_step: int = 4
    jacobi_interval: tuple[int, int] | None = None
    batch_mode: BatchMode = "ragged"
    acceptance: AcceptanceRule = field(default_factory=AcceptanceRule)
    neighbours: torch.Tensor | None = None

    def __post_init__(self) -> None:
        self._check_declared()

    @property
    def positions_per_forward(self) -> int | None:  # type: ignore[override]
        """Positions one forward evaluates (raster window + bonus, plus the staircase bands); ``None`` when the
        window is chosen per forward (``window="auto"``: the record's ``windows_chosen`` and ``mean_window`` say which)."""
        if self.window == "auto":
            return None
        bands = self.staircase_rows * self.window if self.window_shape == "staircase" else 0
        return self.window + 1 + bands

    def schedule(self, engine: DecodeEngine) -> RasterWindow:
        if self.window == "auto":
            return RasterWindow(self.max_window, engine.num_tokens)
        if self.window_shape == "staircase":
            return StaircaseWindow(self.window, engine.num_tokens, engine.layout.row_stride, self.staircase_rows,
                                   self.staircase_step)
        return RasterWindow(self.window, engine.num_tokens)

    def run(self, engine: DecodeEngine) -> dict[str, Any]:
        neighbours = checked_neighbours(self.acceptance, self.neighbours)
        schedule = self.schedule(engine)
        drafter = JacobiDrafter(self.init, self.coupling, self.jacobi_interval, lockstep=self.batch_mode == "lockstep")
        drafter.check_layout(engine.layout)  # before the prefill: temporal inits need frames
        policy = (AutoWindow(engine, self.max_window, memory_key=(self.info.name, self.init, self.coupling,
                                                                  self.batch_mode, repr(self.acceptance)))
                  if self.window == "auto" else None)
        loop = DraftVerifyLoop(engine, schedule, lambda p0, noise: drafter.start(engine, schedule, p0, noise),
                               rule=self.acceptance, neighbours=neighbours, gumbel=self.coupling == "gumbel",
                               lockstep=self.batch_mode == "lockstep", window_policy=policy)
        return {**loop.run(), "window": self.window, "init": self.init, "coupling": self.coupling,
                "window_shape": self.window_shape, "positions_per_forward": self.positions_per_forward,
                **rule_options(self.acceptance)}


@register_method
@dataclass(frozen=True)
class CoupledJacobi(SpeculativeJacobi):
    """MC-SJD: SJD whose drafts are refreshed by maximal coupling (or Gumbel coupling)."""

    info: ClassVar[MethodInfo] = method_info("mc-sjd", DecoderKind.TOKEN)
    coupling: Coupling = "maximal"


@register_method
@dataclass(frozen=True)
class GroupedJacobi(SpeculativeJacobi):
    """GSD (So et al., ICCV 2025, arXiv:2508.07747): SJD verified by grouped acceptance
    (:func:`arvis.acceptance.relaxed.gsd_step`; lossy, its realised TV per token reported)."""

    info: ClassVar[MethodInfo] = method_info("gsd", DecoderKind.TOKEN)
    acceptance: AcceptanceRule = field(default_factory=lambda: AcceptanceRule(kind="gsd"))


__all__ = ["CoupledJacobi", "GroupedJacobi", "SpeculativeJacobi"]
