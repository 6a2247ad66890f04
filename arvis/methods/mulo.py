"""Multi-scale local drafting (MuLo-SD; Peruzzo et al., CVPR 2026): a low-resolution drafter with a learned
up-sampler (:mod:`arvis.drafting.multiscale`), verified by the full-resolution target.

Both variants start the same way: the low-resolution model samples the image at low resolution, the
up-sampler turns it into ``q_j`` for every sequence index ``j`` of the target, and every position gets a
draft ``d_j ~ q_j`` (all counted as draft forwards and timed inside the latency). Each target forward then
evaluates a raster window of ``window + 1`` positions after the first uncommitted one, with the current
tokens (committed or drafted) as inputs, and verifies the drafts there with exact speculative acceptance
(accept ``d_j`` w.p. ``min(1, p_j(d_j)/q_j(d_j))``, else draw from ``normalize(max(0, p_j − q_j))``).

- ``mulo`` — LOSSLESS. MC-SJD (:class:`arvis.methods.sjd.CoupledJacobi`) whose initial drafts are the
  up-sampler's instead of uniform random tokens (``raster window × Jacobi drafter started from the up-sampler's
  q × exact acceptance``: the up-sampled ``q`` is the Jacobi session's initial distributions,
  :class:`arvis.drafting.jacobi.InitialDistributions`): commits in raster order up to the first rejection plus
  the recovered token, and every later draft is refreshed by maximal coupling with this forward's ``p``. The
  drafts' ``q_j`` depend only on the low-resolution sample, never on the target's tokens, so exact
  acceptance is exact here as it is for any independently drawn draft (:mod:`arvis.drafting.multiscale`).
- ``mulo-local`` — the published variant, LOSSY. A rejection at ``i`` does not discard the rest of the
  window: a later position ``j`` is committed unless a position rejected in this forward lies in ``j``'s
  spatial neighbourhood (at most ``radius`` rows above and ``radius`` columns away, before ``j``). Positions
  in such a neighbourhood are re-verified by the next forward with the corrected token as context; their
  drafts are refreshed by maximal coupling with this forward's ``p`` (MC-SJD), and since a re-verified
  position that is rejected again invalidates its own neighbourhood, the region that is resampled grows
  for as long as rejections keep occurring in it (the "expanding" neighbourhood). What is lost: a
  committed token was drawn from ``p_j`` given the window's tokens *at that moment*; outside the radius
  some of those may be rejected drafts that change later, so its context is not the final prefix. The cost
  is measured by FID. With ``radius >= `` the grid size every later position of the window is in the
  neighbourhood of every earlier one, and the method is exact speculative decoding with coupled refreshes
  (lossless — the statistical test checks this limit, and that ``radius = 1`` is not lossless).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from arvis.acceptance.relaxed import AcceptanceRule
from arvis.acceptance.verify import Verification
from arvis.drafting.base import Proposal
from arvis.drafting.jacobi import JacobiDrafter
from arvis.drafting.multiscale import MultiScaleDraft, MultiScaleDrafter
from arvis.engine.engine import DecodeEngine
from arvis.engine.schedules import RasterWindow, WindowPlan
from arvis.methods.ar import Autoregressive
from arvis.methods.base import DecodingMethod, register_method, require
from arvis.methods.catalog import DecoderKind, MethodInfo, method_info
from arvis.methods.draft_verify import DraftVerifyLoop
from arvis.methods.options import rule_options
from arvis.methods.relaxation import checked_neighbours
from arvis.methods.sjd import CoupledJacobi

MISSING = ("lowres_model / upsampler: multi-scale drafting needs a low-resolution model and an up-sampler (the "
           "pipeline's lowres_transformer and upsampler, or pass lowres_model=…, upsampler=…)")

def _lowres_runner(lowres_window: int):
    """How the low-resolution model decodes: plain AR, or MC-SJD with ``lowres_window`` (lossless for the
    low-resolution model; either way the drafts are exact draws of its distribution)."""
    if lowres_window == 0:
        return Autoregressive().run
    return CoupledJacobi(window=lowres_window).run


def _draft(method: Any, engine: DecodeEngine) -> MultiScaleDraft:
    """The request's low-resolution sample and up-sampled ``q`` (``MissingResourceError`` without the models)."""
    lowres_model = require(method.lowres_model, MISSING)
    upsampler = require(method.upsampler, MISSING)
    drafter = MultiScaleDrafter(lowres_model, upsampler, method.temperature)
    return drafter.draft(engine, _lowres_runner(method.lowres_window))


@register_method
@dataclass(frozen=True)
class MultiScaleJacobi(CoupledJacobi):
    """MuLo-SD drafts verified losslessly: MC-SJD started from the up-sampler's ``q`` (module docstring).

    Options: ``window``, ``coupling`` (maximal or gumbel), ``jacobi_interval``, ``batch_mode`` and the acceptance
    rule as MC-SJD (``init`` and the staircase are not used: the up-sampler drafts every position of a raster
    window), plus ``temperature`` (``q = softmax(logits / temperature)``), ``lowres_window`` (0: the
    low-resolution model decodes by plain AR; L: by MC-SJD with window L) and the drafter's models
    ``lowres_model`` and ``upsampler`` (the pipelines pass them).
    """

    info: ClassVar[MethodInfo] = method_info("mulo", DecoderKind.TOKEN)

    window: int = 32
    temperature: float = 1.0
    lowres_window: int = 0
    lowres_model: Any = None
    upsampler: Any = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.init != "random":
            raise ValueError(f"init: mulo drafts every position from the up-sampler; got init={self.init!r}")
        if self.window_shape != "contiguous":
            raise ValueError(f"window_shape: mulo verifies a contiguous raster window; got {self.window_shape!r}")

    def run(self, engine: DecodeEngine) -> dict[str, Any]:
        neighbours = checked_neighbours(self.acceptance, self.neighbours)
        draft = _draft(self, engine)
        schedule = self.schedule(engine)
        lockstep = self.batch_mode == "lockstep"
        drafter = JacobiDrafter("random", self.coupling, self.jacobi_interval, lockstep=lockstep)
        loop = DraftVerifyLoop(engine, schedule,
                               lambda p0, noise: drafter.start(engine, schedule, p0, noise, initial=draft),
                               rule=self.acceptance, neighbours=neighbours, gumbel=self.coupling == "gumbel",
                               lockstep=lockstep)
        return {**loop.run(), "window": self.window, "coupling": self.coupling,
                "positions_per_forward": self.positions_per_forward, "temperature": self.temperature,
                "lowres_window": self.lowres_window, "per_sample": {"low_tokens": draft.low_tokens.tolist()},
                **rule_options(self.acceptance)}


class LocalCommit:
    """MuLo-SD's commit policy (a :class:`~arvis.methods.draft_verify.CommitPolicy` with holes): a verified
    position is committed unless a position rejected in the same forward lies in its spatial neighbourhood (at
    most ``radius`` rows above and ``radius`` columns away, before it). Positions in such a neighbourhood are
    re-verified by a later forward with the corrected token as context.

    Statistics: the acceptance of the up-sampler's drafts (``Σ min(p, q)`` at positions drafted but never
    evaluated before) and of refreshed drafts, the positions committed ahead of the first uncommitted one,
    and the rejections per sequence index of every sample.
    """

    holes = True

    def __init__(self, radius: int, row_stride: int, batch_size: int, num_tokens: int, device: torch.device):
        self.radius, self.stride, self.N = radius, row_stride, num_tokens
        self.final = torch.zeros(batch_size, num_tokens + 1, dtype=torch.bool, device=device)  # [A, N + 1]
        self.evaluated = torch.zeros_like(self.final)  # the draft there is no longer the up-sampler's
        self.rejections = torch.zeros(batch_size, num_tokens + 1, dtype=torch.long, device=device)  # [B, N + 1]
        self.alpha_sum = torch.zeros(2, device=device)
        self.alpha_count = torch.zeros(2, device=device)
        self.ahead = torch.zeros((), dtype=torch.long, device=device)
        self.final[:, 0] = True  # index 0 comes from the prefill

    def decide(self, plan: WindowPlan, proposal: Proposal, verification: Verification, p: torch.Tensor,
               committed: torch.Tensor, engine: DecodeEngine) -> tuple[torch.Tensor, torch.Tensor]:
        targets = plan.targets  # [A, T]
        rows = torch.arange(targets.shape[0], device=targets.device)[:, None].expand_as(targets)
        final = proposal.final if proposal.final is not None else torch.zeros_like(proposal.use)
        live = proposal.use & ~final
        rejected = live & proposal.has_draft & ~verification.accepted
        r, c = targets // self.stride, targets % self.stride
        near = ((r[:, None, :] - r[:, :, None]).abs() <= self.radius) & ((c[:, None, :] - c[:, :, None]).abs() <= self.radius)
        column = torch.arange(targets.shape[1], device=targets.device)
        before = column[:, None] < column[None, :]  # [i, j]: i is evaluated before j in the window
        invalid = (rejected[:, :, None] & near & before).any(1)  # a rejection in j's neighbourhood, before j
        commit = live & ~invalid
        # Statistics: acceptance (1 − TV) of the drafts, the up-sampler's or refreshed ones.
        overlap = torch.minimum(p, proposal.q).sum(-1)  # [A, T]
        drafted = live & proposal.has_draft
        fresh = drafted & ~self.evaluated.gather(1, targets)
        for k, mask in enumerate((fresh, drafted & ~fresh)):
            self.alpha_sum[k] += (overlap * mask).sum()
            self.alpha_count[k] += mask.sum()
        self.evaluated.index_put_((rows, torch.where(live, targets, self.N)), torch.ones((), dtype=torch.bool,
                                                                                         device=targets.device))
        self.rejections.index_put_((engine.active[:, None].expand_as(targets), torch.where(rejected, targets, self.N)),
                                   rejected.long(), accumulate=True)
        self.final.index_put_((rows, torch.where(commit, targets, self.N)), torch.ones((), dtype=torch.bool,
                                                                                       device=targets.device))
        pending = ~self.final[:, : self.N]
        frontier = torch.where(pending.any(1), pending.long().argmax(1), torch.full_like(committed, self.N))
        self.ahead += (commit & (targets >= frontier[:, None])).sum()
        return commit, frontier

    def retire(self, kept_index: torch.Tensor) -> None:
        self.final = self.final.index_select(0, kept_index)
        self.evaluated = self.evaluated.index_select(0, kept_index)

    def report(self) -> dict[str, Any]:
        alpha = (self.alpha_sum / self.alpha_count.clamp_min(1)).tolist()
        return {"alpha_upsampler_drafts": alpha[0], "alpha_refreshed_drafts": alpha[1],
                "committed_ahead_of_frontier": int(self.ahead),
                "per_sample": {"rejections": self.rejections[:, : self.N].tolist()}}


@register_method
@dataclass(frozen=True)
class MultiScaleLocal(DecodingMethod):
    """MuLo-SD's local verification (LOSSY; see the module docstring): the composition
    ``raster window × Jacobi drafter started from the up-sampler's q (maximal coupling) × exact acceptance ×``
    :class:`LocalCommit`.

    Options:
        window: drafts verified per forward after the first uncommitted position.
        radius: spatial neighbourhood of a rejection, in rows and columns (``>=`` the grid size: lossless).
        temperature, lowres_window, lowres_model, upsampler: the drafter's (as ``mulo``).
    """

    info: ClassVar[MethodInfo] = method_info("mulo-local", DecoderKind.TOKEN)

    window: int = 32
    radius: int = 1
    temperature: float = 1.0
    lowres_window: int = 0
    lowres_model: Any = None
    upsampler: Any = None

    def __post_init__(self) -> None:
        self._check_declared()

    @property
    def positions_per_forward(self) -> int:
        return self.window + 1

    def run(self, engine: DecodeEngine) -> dict[str, Any]:
        draft = _draft(self, engine)
        schedule = RasterWindow(self.window, engine.num_tokens)
        drafter = JacobiDrafter("random", "maximal", holes=True)
        policy = LocalCommit(self.radius, engine.layout.row_stride, engine.batch_size, engine.num_tokens,
                             engine.device)
        loop = DraftVerifyLoop(engine, schedule,
                               lambda p0, noise: drafter.start(engine, schedule, p0, noise, initial=draft),
                               rule=AcceptanceRule(), policy=policy)
        out = loop.run()
        out["per_sample"]["low_tokens"] = draft.low_tokens.tolist()
        return {**out, "window": self.window, "radius": self.radius, "temperature": self.temperature,
                "lowres_window": self.lowres_window, "positions_per_forward": self.positions_per_forward}


__all__ = ["LocalCommit", "MultiScaleJacobi", "MultiScaleLocal"]
