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

from arvis.acceptance.speculative import speculative_step
from arvis.drafting.jacobi import JacobiDrafter
from arvis.drafting.multiscale import MultiScaleDraft, MultiScaleDrafter
from arvis.engine.engine import DecodeEngine
from arvis.methods.ar import Autoregressive
from arvis.methods.base import DecodingMethod, require
from arvis.methods.catalog import DecoderKind, MethodInfo, method_info
from arvis.methods.draft_verify import DraftVerifyLoop
from arvis.methods.options import rule_options
from arvis.methods.registry import register_method
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


@register_method
@dataclass(frozen=True)
class MultiScaleLocal(DecodingMethod):
    """MuLo-SD's local verification (LOSSY; see the module docstring).

    Options:
        window: drafts verified per forward after the first uncommitted position (``window + 1`` positions).
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
        out = _LocalRun(self, engine, draft).run()
        out["per_sample"]["low_tokens"] = draft.low_tokens.tolist()
        return out


class _LocalRun:
    """Per-request state: the current token and its draft distribution at every index, which are final.

    ``tokens [A, N]`` (committed or drafted), ``q [A, N, V]`` (the draft's distribution: the up-sampler's
    until a forward refreshes it, then that forward's ``p``), ``final [A, N]``, ``n [A]`` the first index
    that is not final.
    """

    def __init__(self, method: MultiScaleLocal, engine: DecodeEngine, draft: MultiScaleDraft):
        self.m, self.e = method, engine
        self.N, self.V = engine.num_tokens, engine.vocab_size
        self.width = engine.layout.grid[-1]
        A, dev = engine.num_active, engine.device
        self.q = draft.q  # owned by this run: refreshed in place
        index = torch.arange(self.N, device=dev).expand(A, -1)
        self.tokens, _ = draft.draw(index, engine.uniform((self.N,)))  # d_j ~ q_j everywhere
        self.final = torch.zeros(A, self.N, dtype=torch.bool, device=dev)
        self.fresh = torch.ones(A, self.N, dtype=torch.bool, device=dev)  # still the up-sampler's draft
        self.offsets = torch.arange(method.window + 1, device=dev)
        # Statistics: acceptance of the up-sampler's drafts (expected, Σ min(p, q)) and of refreshed drafts,
        # rejections per position, positions committed ahead of the first uncommitted one.
        self.rejections = torch.zeros(engine.batch_size, self.N, dtype=torch.long, device=dev)
        self.alpha_sum = torch.zeros(2, device=dev)
        self.alpha_count = torch.zeros(2, device=dev)
        self.ahead = torch.zeros((), dtype=torch.long, device=dev)

    def _verify(self, p: torch.Tensor, targets: torch.Tensor, live: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Exact accept-or-recover of the drafts at ``targets [A, T]`` against ``p [A, T, V]``."""
        T, V = targets.shape[1], self.V
        drafts = self.tokens.gather(1, targets)
        q = self.q.gather(1, targets[..., None].expand(-1, -1, V)) * live[..., None]
        uniform = self.e.uniform((2, T))  # the accept test's and the recovered token's (inverse CDF)
        tokens, accepted = speculative_step(p, q, drafts, uniform[:, 0], uniform[:, 1])
        overlap = torch.minimum(p, q).sum(-1)  # = 1 − TV(p, q): the probability the draft is accepted
        fresh = self.fresh.gather(1, targets) & live
        for k, mask in enumerate((fresh, live & ~fresh)):
            self.alpha_sum[k] += (overlap * mask).sum()
            self.alpha_count[k] += mask.sum()
        return tokens, accepted & live

    @torch.no_grad()
    def run(self) -> dict[str, Any]:
        e, N, W, r = self.e, self.N, self.width, self.m.radius
        dev = e.device
        A = e.num_active
        zero = torch.zeros(A, 1, dtype=torch.long, device=dev)
        p0 = e.prefill()[:, None]  # [A, 1, V]: index 0 given the condition only
        first, _ = self._verify(p0, zero, torch.ones(A, 1, dtype=torch.bool, device=dev))
        e.commit(zero, first)
        self.tokens[:, :1] = first
        self.final[:, 0] = True
        n = torch.ones(A, dtype=torch.long, device=dev)
        # i before k in the window, and within the radius: [K, K] pattern per sample from the targets' coordinates.
        before = self.offsets[:, None] < self.offsets[None, :]
        while True:
            (committed,) = e.status(n)  # the one host synchronisation per iteration
            kept = [a for a, m in enumerate(committed) if m < N]
            if not kept:
                break
            if len(kept) < len(committed):  # finished samples leave the batch
                kept_index = e.retire(kept)
                n, self.tokens, self.q, self.final, self.fresh = (
                    t.index_select(0, kept_index) for t in (n, self.tokens, self.q, self.final, self.fresh))
                A = len(kept)
            targets = n[:, None] + self.offsets  # [A, K]
            real = targets < N
            targets = targets.clamp_max(N - 1)
            inputs_index = targets - 1
            p = e.evaluate(self.tokens.gather(1, inputs_index), inputs_index, pad=~real)  # [A, K, V]
            live = real & ~self.final.gather(1, targets)
            new, accepted = self._verify(p, targets, live)
            rejected = live & ~accepted
            rows, cols = targets // W, targets % W
            near = ((rows[:, None, :] - rows[:, :, None]).abs() <= r) & ((cols[:, None, :] - cols[:, :, None]).abs() <= r)
            invalid = (rejected[:, :, None] & near & before).any(1)  # a rejection in j's neighbourhood, before j
            commit = live & ~invalid
            e.commit(targets, new, commit)
            a = torch.arange(A, device=dev)[:, None].expand_as(targets)
            # Committed: the final token. Re-verified later: the maximal coupling of the old draft with p, q := p.
            self.tokens[a[live], targets[live]] = new[live]
            refreshed = live & ~commit
            self.q[a[refreshed], targets[refreshed]] = p[refreshed]
            self.fresh[a[live], targets[live]] = False
            self.final[a[commit], targets[commit]] = True
            self.rejections.index_put_((e.active[:, None].expand_as(targets)[rejected], targets[rejected]),
                                       torch.ones_like(targets[rejected]), accumulate=True)
            pending = ~self.final
            n_new = torch.where(pending.any(1), pending.long().argmax(1), torch.full_like(n, N))
            self.ahead += (commit & (targets >= n_new[:, None])).sum()
            n = n_new
            e.truncate(n - 1)  # inputs from the first uncommitted index on are re-fed by the next window
        alpha = e.to_host(self.alpha_sum / self.alpha_count.clamp_min(1))
        return {"window": self.m.window, "radius": self.m.radius, "temperature": self.m.temperature,
                "lowres_window": self.m.lowres_window,
                "positions_per_forward": self.m.positions_per_forward,
                "alpha_upsampler_drafts": alpha[0], "alpha_refreshed_drafts": alpha[1],
                "committed_ahead_of_frontier": int(self.ahead), "per_sample": {"rejections": self.rejections.tolist()}}


__all__ = ["MultiScaleJacobi", "MultiScaleLocal"]
