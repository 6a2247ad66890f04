"""Jacobi drafts (SJD, MC-SJD): the target's own previous outputs, refreshed every forward.

Each forward evaluates a window of drafts; afterwards every evaluated position after the commit point
gets a new draft from this forward's ``p`` — an independent draw (SJD), the maximal coupling of the old
draft with ``p`` (MC-SJD) or its Gumbel-max with noise fixed per position — and ``q := p``
(:func:`arvis.acceptance.coupling.refresh_drafts`). A position drafted for the first time gets an
*initial draft*, recording the distribution it was drawn from (losslessness depends on that ``q``):

- ``random``: ``d ~ Uniform(image vocabulary)`` with a uniform ``q`` (the references pair random drafts
  with a one-hot ``q``: still exact, since any draft independent of the coin may be verified against
  a one-hot ``q``, but it is accepted with probability ``p(d)`` only; a uniform ``q`` accepts with
  probability ``1 − TV(p, uniform)``);
- ``repeat_horizontal`` / ``repeat_vertical``: copy the left / upper neighbour's current token
  (committed or drafted), one-hot ``q`` (upper falls back to left on the first row);
- ``neighbour_distribution``: draw from the distribution of the upper neighbour (left on the first
  row) — the ``p`` it was committed with, or its current draft distribution — with ``q`` = that
  distribution;
- ``repeat_temporal`` / ``previous_frame_distribution`` (video layouts ``(T, H, W)`` only): the same with
  the same cell one frame back (``j − H·W``) as the source — its token with a one-hot ``q``, or a draw from
  its distribution with ``q`` = that distribution; in the first frame they fall back to
  ``repeat_vertical`` / ``neighbour_distribution``.

With a commit policy that leaves *holes* (``holes=True``: positions final ahead of the first uncommitted
index, :class:`arvis.methods.draft_verify.CommitPolicy`) the session keeps which positions are final: their
committed tokens are fed as inputs, and they are never drafted, verified or refreshed again.

A session may instead be given per-request *initial distributions* (:class:`InitialDistributions`,
e.g. multi-scale drafting's up-sampled ``q``, :mod:`arvis.drafting.multiscale`): every new position then
gets ``d ~ q`` from its own distribution (Gumbel coupling: the Gumbel-max with the position's fixed
noise), with ``q`` recorded; refreshes after a forward are unchanged.

A neighbour drafted in the same call (a chain of new positions) passes on its own source: the left
neighbour's chain ends at the last position holding a token, the upper neighbour's at the last one
above holding a token, the previous frame's chain at the last frame holding a token in that cell (or,
when none does, at the first frame's cell, which follows the spatial rule) — one vectorised pass, no host
synchronisation. Rows are the layout's rows (``T·H`` of them for a video: the row above the first row
of a frame is the previous frame's last row).

State per active sample, bounded by the window, not the sequence (``[A, N, V]`` would be a gigabyte
per sample for an Emu3-sized layout): the current token per sequence index ``[A, N]`` and a ring of
distributions ``[A, capacity, V]`` addressed by ``index mod capacity``, holding the drafts' ``q`` in
the window's reach and — for ``neighbour_distribution`` / ``previous_frame_distribution`` only — the
committed ``p`` of the previous row / frame.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import torch
import torch.nn.functional as F

from arvis.acceptance.coupling import gumbel_argmax, refresh_drafts
from arvis.acceptance.speculative import leading_accepted
from arvis.acceptance.verify import Verification
from arvis.drafting.base import Proposal
from arvis.engine.engine import NO_TOKEN, DecodeEngine
from arvis.engine.schedules import RasterWindow, WindowPlan
from arvis.models.protocol import TokenLayout
from arvis.utils.modes import COUPLINGS, JACOBI_INITS, TEMPORAL_INITS, Coupling, JacobiInit
from arvis.utils.random import PositionNoise, one_hot, sample_inverse_cdf

_REPEAT_INITS = ("repeat_horizontal", "repeat_vertical", "repeat_temporal")
_DISTRIBUTION_INITS = ("neighbour_distribution", "previous_frame_distribution")


def row_and_frame_period(layout: TokenLayout) -> tuple[int, int | None]:
    """Sequence-index periods of a layout's rows and frames (structural tokens included).

    Args:
        layout: a ``(H, W)`` image or ``(T, H, W)`` video layout.

    Returns:
        ``(row, frame)``: ``j − row`` is the cell above ``j`` (``W``, plus any per-row structural token),
        ``j − frame`` the same cell one frame back (``H·W`` …); ``frame`` is ``None`` without frames.
    """
    N, grid = layout.num_tokens, tuple(int(g) for g in layout.grid)
    rows = 1
    for g in grid[:-1]:
        rows *= g
    row = int(layout.row_stride)  # the grid width, plus any end-of-line token (Emu3)
    if len(grid) < 3:
        return row, None
    frame = N // grid[0] if N % grid[0] == 0 else rows // grid[0] * row
    return row, frame


class InitialDistributions(Protocol):
    """A request's own source of initial drafts: the distribution each sequence index is first drafted from.

    It must not depend on the target's unverified tokens (then exact acceptance stays lossless).
    """

    def at(self, index: torch.Tensor) -> torch.Tensor:
        """``[A, M, V]`` fp32: the distribution at sequence indices ``index [A, M]`` (active rows)."""
        ...

    def select(self, kept_index: torch.Tensor) -> InitialDistributions:
        """The rows ``kept_index [A']`` (finished samples left the batch)."""
        ...


class JacobiDrafter:
    """Jacobi drafting configuration.

    Args:
        init: one of :data:`JACOBI_INITS`.
        coupling: one of :data:`arvis.acceptance.coupling.COUPLINGS`.
        interval: draft only sequence indices in ``[lo, hi)`` (plain AR steps elsewhere); ``None``: all.
        lockstep: the batch advances by its minimum commit (drafts accepted past the cut are redrawn,
            since given their acceptance they are not draws from ``p``).
    """

    def __init__(self, init: JacobiInit = "random", coupling: Coupling = "none",
                 interval: tuple[int, int] | None = None, lockstep: bool = False, holes: bool = False):
        if init not in JACOBI_INITS:
            raise ValueError(f"init must be one of {JACOBI_INITS}, got {init!r}")
        if coupling not in COUPLINGS:
            raise ValueError(f"coupling must be one of {COUPLINGS}, got {coupling!r}")
        self.init, self.coupling, self.interval, self.lockstep = init, coupling, interval, lockstep
        self.holes = holes

    def check_layout(self, layout: TokenLayout) -> None:
        """Raise ``ValueError`` when the initialisation cannot run on ``layout`` (temporal inits need frames)."""
        if self.init in TEMPORAL_INITS and row_and_frame_period(layout)[1] is None:
            raise ValueError(f"init={self.init!r} drafts from the previous frame and needs a video layout "
                             f"(T, H, W); this model's grid is {tuple(layout.grid)}")

    def start(self, engine: DecodeEngine, schedule: RasterWindow, first_p: torch.Tensor,
              noise: PositionNoise | None = None, initial: InitialDistributions | None = None) -> JacobiSession:
        """A session after the prefill: ``first_p [A, V]`` is the ``p`` index 0 was committed with;
        ``noise``: the fixed per-position noise (Gumbel coupling); ``initial``: the request's initial
        distributions, replacing ``init`` (see the module docstring)."""
        return JacobiSession(self, engine, schedule, first_p, noise, initial)


class JacobiSession:
    """One request's Jacobi drafts (see the module docstring for the state kept)."""

    def __init__(self, drafter: JacobiDrafter, engine: DecodeEngine, schedule: RasterWindow, first_p: torch.Tensor,
                 noise: PositionNoise | None, initial: InitialDistributions | None = None):
        self.drafter, self.engine, self.schedule, self.noise = drafter, engine, schedule, noise
        self.initial = initial
        self.gumbel = drafter.coupling == "gumbel"
        if self.gumbel != (noise is not None):
            raise ValueError("Gumbel coupling needs the fixed per-position noise (and only it uses it)")
        layout = engine.layout
        drafter.check_layout(layout)
        N, V, A, dev = engine.num_tokens, engine.vocab_size, engine.num_active, engine.device
        self.N, self.V = N, V
        # Row and frame periods of the sequence (``frame`` is None for images).
        self.stride, self.frame = row_and_frame_period(layout)
        lo, hi = drafter.interval or (0, N)
        self.lo, self.hi = max(lo, 1), min(hi, N)  # index 0 comes from the prefill
        self.limited = (self.lo, self.hi) != (1, N)  # else every real position after the prefix is draftable
        back = {"neighbour_distribution": self.stride, "previous_frame_distribution": self.frame}.get(drafter.init, 1)
        self.capacity = schedule.reach + back + 1
        self.image_range = layout.image_token_range or (0, V)
        self._index = torch.arange(N + 1, device=dev)
        # Current token per sequence index (committed or draft; NO_TOKEN: none), plus a scratch column.
        self.tokens = torch.full((A, N + 1), NO_TOKEN, dtype=torch.long, device=dev)
        self.tokens[:, 0] = engine.tokens.index_select(0, engine.active)[:, 0]
        # Distribution per index in the ring (index mod capacity), plus a scratch slot.
        self.dist = torch.zeros(A, self.capacity + 1, V, device=dev)
        self.dist[:, 0] = first_p
        self._rows = torch.arange(A, device=dev)[:, None]
        lo, hi = self.image_range
        self._uniform_q = torch.zeros(V, device=dev)
        self._uniform_q[lo:hi] = 1.0 / (hi - lo)
        self._columns: dict[tuple[int, int], tuple[torch.Tensor, ...]] = {}
        # Constants of store(): the scratch index and slot as tensors (a Python number in torch.where costs one
        # more op per call), and the row ids expanded per shape.
        self._scratch_index = torch.tensor(N, device=dev)
        self._scratch_slot = torch.tensor(self.capacity, device=dev)
        self._row_ids: dict[torch.Size, torch.Tensor] = {}
        # Final positions ahead of the first uncommitted index (commit policies with holes only).
        self.final = torch.zeros(A, N + 1, dtype=torch.bool, device=dev) if drafter.holes else None

    # ------------------------------------------------------------------ buffers
    def _draftable(self, mask: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        """``mask`` restricted to the Jacobi interval (a no-op without one: positions after the committed
        prefix and inside the sequence are all draftable)."""
        return mask & (index >= self.lo) & (index < self.hi) if self.limited else mask

    def _window_columns(self, T: int, K: int) -> tuple[torch.Tensor, ...]:
        """Constants of a plan shape: column ids ``[T]``, raster columns, not-bonus columns, first band columns."""
        if (T, K) not in self._columns:
            column = torch.arange(T, device=self.dist.device)
            first_of_band = (column >= K) & ((column - K) % self.schedule.window == 0)
            self._columns[T, K] = (column, column < K, column != K - 1, first_of_band)
        return self._columns[T, K]

    def store(self, index: torch.Tensor, mask: torch.Tensor, tokens: torch.Tensor, dist: torch.Tensor) -> None:
        """Set the token and distribution of sequence ``index [A, M]`` where ``mask``: ``tokens [A, M]``,
        ``dist [A, M, V]`` (or ``[V]``, broadcast). No host synchronisation (masked entries go to scratch)."""
        rows = self._row_ids.get(index.shape)
        if rows is None:
            rows = self._row_ids[index.shape] = self._rows.expand_as(index)
        self.tokens.index_put_((rows, torch.where(mask, index, self._scratch_index)), tokens)
        slot = torch.where(mask, index % self.capacity, self._scratch_slot)
        self.dist.index_put_((rows, slot), dist if dist.dim() == 3 else dist.expand(*index.shape, self.V))

    def distribution_at(self, index: torch.Tensor) -> torch.Tensor:
        """``[A, M, V]``: the stored distribution of ``index [A, M]`` (valid inside the ring's reach)."""
        return self.dist.gather(1, (index % self.capacity)[..., None].expand(-1, -1, self.V))

    # ------------------------------------------------------------------ initial drafts
    def _sources(self, index: torch.Tensor) -> torch.Tensor:
        """The index each new position ``index [A, M]`` copies from / draws after (chains followed)."""
        known = torch.where(self.tokens[:, : self.N] != NO_TOKEN, self._index[: self.N], -1)  # [A, N]
        if self.drafter.init not in TEMPORAL_INITS:
            return self._spatial_sources(known, index, vertical=self.drafter.init != "repeat_horizontal")
        before = self._last_known_every(known, self.frame).gather(1, (index - self.frame).clamp_min(0))
        # Nothing known in the cell's earlier frames: the chain reaches the first frame's cell, which
        # follows the spatial rule (the row above).
        spatial = self._spatial_sources(known, index % self.frame, vertical=True)
        return torch.where((index >= self.frame) & (before >= 0), before, spatial)

    def _last_known_every(self, known: torch.Tensor, period: int) -> torch.Tensor:
        """``[A, N]``: for each ``j``, the last index ``<= j`` congruent to ``j`` mod ``period`` holding a token (-1: none)."""
        count = -(-self.N // period)
        padded = F.pad(known, (0, count * period - self.N), value=-1).view(-1, count, period)
        return padded.cummax(1).values.flatten(1)[:, : self.N]

    def _spatial_sources(self, known: torch.Tensor, index: torch.Tensor, vertical: bool) -> torch.Tensor:
        """Sources of the left (``vertical=False``) or upper-neighbour rule; ``known [A, N]``: index or -1."""
        left = known.cummax(1).values  # last index <= j holding a token
        left_of = left.gather(1, (index - 1).clamp_min(0))
        if not vertical:
            return left_of
        S = self.stride
        column = self._last_known_every(known, S)
        above = column.gather(1, (index - S).clamp_min(0))  # last index at or above j - S in j's column
        # Nothing known above: the chain reaches row 0, whose positions draw after their left neighbour.
        row0_left = left.gather(1, ((index % S) - 1).clamp_min(0))
        return torch.where(index < S, left_of, torch.where(above >= 0, above, row0_left))

    def initialise(self, index: torch.Tensor, want: torch.Tensor, committed: torch.Tensor) -> None:
        """Initial drafts at ``index [A, M]`` where ``want`` and there is no token yet."""
        init = self.drafter.init
        want = self._draftable(want, index) & (self.tokens.gather(1, index) == NO_TOKEN)
        if self.initial is not None:  # the request's own distributions (multi-scale drafting)
            dist = self.initial.at(index)
            self.store(index, want, self._draw(dist, index), dist)
        elif init == "random":
            lo, hi = self.image_range
            uniform_q = self._uniform_q
            if self.gumbel:  # the Gumbel-max of the uniform q with the position's own fixed noise
                drafts = gumbel_argmax(uniform_q, self.noise.at(index))
            else:
                drafts = lo + (self.engine.uniform((index.shape[1],)) * (hi - lo)).long().clamp_max(hi - lo - 1)
            self.store(index, want, drafts, uniform_q)
        else:
            source = self._sources(index)
            if init in _REPEAT_INITS:
                drafts = self.tokens.gather(1, source.clamp_min(0))
                self.store(index, want & (source >= 0), drafts, one_hot(drafts, self.V))
            else:  # neighbour / previous-frame distribution: the source's distribution must still be in the ring
                in_ring = source >= committed[:, None] - (self.capacity - self.schedule.reach - 1)
                dist = self.distribution_at(source.clamp_min(0))
                drafts = self._draw(dist, index)
                self.store(index, want & (source >= 0) & in_ring, drafts, dist)
        forced_tokens = self.engine.forced_tokens
        if forced_tokens is not None:  # structural tokens: the forced id, certain
            forced = forced_tokens[index]
            self.store(index, want & (forced >= 0), forced.clamp_min(0), one_hot(forced.clamp_min(0), self.V))

    def _draw(self, dist: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        """Drafts ``d ~ dist [A, M, V]`` at ``index [A, M]``: the Gumbel-max with the positions' fixed noise
        (Gumbel coupling), else by inverse CDF with fresh uniforms."""
        if self.gumbel:
            return gumbel_argmax(dist, self.noise.at(index))
        return sample_inverse_cdf(dist, self.engine.uniform((index.shape[1],)))

    # ------------------------------------------------------------------ the protocol
    def window_needed(self, committed: Sequence[int]) -> bool:
        if self.schedule.positions_per_forward > self.schedule.verified:  # staircase bands: always
            return True
        return any(self.lo <= n < self.hi for n in committed)

    def propose(self, committed: torch.Tensor, plan: WindowPlan) -> Proposal:
        targets, real, K = plan.targets, plan.real, plan.verified
        T = targets.shape[1]
        column, raster, not_bonus, first_of_band = self._window_columns(T, K)
        after = targets >= committed[:, None]
        final = self.final.gather(1, targets) if self.final is not None else None
        want = real & after & not_bonus
        if final is not None:
            want = want & ~final
        # Draft every position this forward reads or predicts (drafted positions keep their drafts). Each
        # call writes distinct positions (deterministic): the raster inputs are its targets shifted by one,
        # a band's inputs are its targets shifted by one except the input of its first column.
        self.initialise(targets, want, committed)
        inputs_index = plan.inputs_index
        if T > K:
            self.initialise(inputs_index, real & first_of_band & (inputs_index >= committed[:, None]), committed)
        drafts = self.tokens.gather(1, targets)
        has_draft = self._draftable((drafts != NO_TOKEN) & want, targets)
        # The raster window stops at the first position without a draft (nothing after it could commit);
        # band queries need their input drafted.
        lead = leading_accepted((has_draft if final is None else has_draft | final)[:, : K - 1])
        inputs = self.tokens.gather(1, inputs_index)
        in_window = column <= lead[:, None]
        use = real & (torch.where(raster, in_window, inputs != NO_TOKEN) if T > K else in_window)
        return Proposal(inputs=inputs.clamp_min(0), drafts=drafts.clamp_min(0), q=self.distribution_at(targets),
                        has_draft=has_draft & use, use=use, final=None if final is None else final & use)

    def update(self, committed: torch.Tensor, plan: WindowPlan, p: torch.Tensor, verification: Verification,
               proposal: Proposal, commit_mask: torch.Tensor) -> None:
        targets, K = plan.targets, plan.verified
        fresh = self.engine.uniform((p.shape[1],)) if self.drafter.coupling == "none" else None
        refreshed = refresh_drafts(self.drafter.coupling, p, verification.coupled, fresh)
        if self.drafter.lockstep and self.drafter.coupling == "maximal":
            # Accepted or recovered tokens past the batch cut are conditioned on the verification: redraw them.
            column, raster = self._window_columns(targets.shape[1], K)[:2]
            redraw = raster & (column <= verification.accepted_count[:, None]) & ~commit_mask
            refreshed = torch.where(redraw, sample_inverse_cdf(p, self.engine.uniform((p.shape[1],))), refreshed)
        # Committed positions keep their token and the p they were committed with; evaluated positions
        # after the commit point get the refreshed draft, with q := this forward's p.
        update = proposal.use & (commit_mask | self._draftable(targets >= committed[:, None], targets))
        if proposal.final is not None:  # positions final before this forward keep their token and p
            update = update & ~proposal.final
            self.final.index_put_((self._rows.expand_as(targets), torch.where(commit_mask, targets, self.N)),
                                  torch.ones((), dtype=torch.bool, device=targets.device))
        # Exact rules with maximal or Gumbel coupling commit the coupled tokens themselves: nothing to merge.
        merged = refreshed if refreshed is verification.tokens else torch.where(commit_mask, verification.tokens,
                                                                                   refreshed)
        self.store(targets, update, merged, p)

    def absorb(self, index: torch.Tensor, tokens: torch.Tensor, p: torch.Tensor) -> None:
        if self.final is not None:
            raise ValueError("plain AR steps outside a verification would overwrite positions a commit policy with "
                             "holes has already made final")
        if index.shape[1] > self.capacity:  # a run longer than the ring: only its last indices keep their p
            self.tokens.index_put_((self._rows.expand_as(index), index), tokens)
            index, tokens, p = index[:, -self.capacity:], tokens[:, -self.capacity:], p[:, -self.capacity:]
        self.store(index, torch.ones_like(index, dtype=torch.bool), tokens, p)

    def retire(self, kept: Sequence[int], kept_index: torch.Tensor) -> None:
        self.tokens = self.tokens.index_select(0, kept_index)
        self.dist = self.dist.index_select(0, kept_index)
        if self.final is not None:
            self.final = self.final.index_select(0, kept_index)
        self._rows = self._rows[: len(kept)]
        self._row_ids.clear()
        if self.initial is not None:
            self.initial = self.initial.select(kept_index)
        if self.noise is not None:
            self.noise.retire(kept, kept_index)

    def nbytes(self) -> int:
        total = sum(t.numel() * t.element_size() for t in (self.tokens, self.dist))
        return total + (self.noise.nbytes() if self.noise is not None else 0)
