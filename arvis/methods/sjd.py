"""Speculative Jacobi Decoding (SJD; Teng et al., ICLR 2025, arXiv:2410.01699) and its coupled
variants (MC-SJD; So et al., 2025, arXiv:2510.24211), with contiguous or staircase windows. Lossless.

One iteration, per sample with ``n`` committed tokens and drafts ``d_n … d_{n+L−1}``:

1. one target forward over ``[x_{n−1}, d_n, …, d_{n+L−1}]`` at sequence indices ``n−1 … n+L−1``
   gives ``p_n … p_{n+L}`` (``p_k`` conditions on the committed prefix and the drafts before ``k``);
2. verify left to right with exact speculative acceptance; at the first rejection ``k`` draw the
   recovered token from ``normalize(max(0, p_k − q_k))``; if all ``L`` pass, the bonus token comes
   from ``p_{n+L}`` (a position with no draft: its residual is ``p``). Commit 1 … L+1 tokens;
3. refresh every evaluated draft after the commit point from this forward's ``p``: independent draws
   (SJD), the maximal coupling of the old draft with ``p`` (MC-SJD), or the Gumbel-max of ``p`` with
   noise fixed per position (Gumbel coupling); then ``q := p``. Positions drafted for the first time
   get initial drafts (:mod:`arvis.drafting.jacobi`);
4. roll back the cache to the committed prefix (a mask update; both CFG halves).

A forward evaluates ``window + 1`` positions (plus the staircase band, below).

*Staircase windows* (``window_shape="staircase"``, an arvis composition of ZipAR's spatial schedule
with exact verification): besides the contiguous window, each forward evaluates a band of
``window`` positions in each of the next ``staircase_rows`` rows, shifted left by ``staircase_step``
columns per row (ZipAR's staircase). Band queries attend to the committed prefix and the inputs of
this forward (holes masked), so their ``p`` is an approximation — used only to refresh the drafts
there (``q :=`` that ``p``). Nothing is committed from the band: every token is still verified in
raster order against the exact conditional once the contiguous window reaches it, so the method
stays lossless while drafts for later rows start from spatial context.

With Gumbel coupling every committed token is the Gumbel-max sample of its true conditional with the
same noise plain AR would use (one ``[V]`` draw per token from each sample's generator), so with
per-sample generators it reproduces plain AR's tokens exactly — in fewer forwards.

Batches are *ragged*: every sample keeps its own committed length and drafts and commits as many
tokens per forward as it accepted; the forward evaluates each sample at its own absolute positions
(the engine's explicit masks make that exact) and finished samples leave the batch
(``DecodeEngine.retire``). ``batch_mode="lockstep"`` advances every sample by the batch minimum
instead (to measure what ragged decoding buys); accepted drafts past the cut are redrawn fresh,
which keeps it lossless.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import torch
import torch.nn.functional as F

from arvis.acceptance.relaxed import relaxed_step
from arvis.acceptance.speculative import leading_accepted, speculative_step
from arvis.drafting.jacobi import JACOBI_INITS, fill_drafts
from arvis.engine.engine import DecodeEngine
from arvis.methods.base import DecodingMethod
from arvis.methods.relaxation import acceptance_rule
from arvis.utils.random import sample_categorical

COUPLINGS = ("none", "maximal", "gumbel")
BATCH_MODES = ("ragged", "lockstep")
WINDOW_SHAPES = ("contiguous", "staircase")


@dataclass(frozen=True)
class SpeculativeJacobi(DecodingMethod):
    """SJD (options validated on construction).

    Attributes:
        window: drafts verified per forward (``L`` >= 1).
        init: initial drafts: ``random``, ``repeat_horizontal``, ``repeat_vertical``, ``neighbour_distribution``.
        coupling: draft refresh: ``none`` (SJD), ``maximal`` (MC-SJD), ``gumbel``.
        window_shape: ``contiguous`` or ``staircase``.
        staircase_rows: rows below the current one that get a band (staircase only).
        staircase_step: columns each band is shifted left per row (ZipAR's window; staircase only).
        jacobi_interval: ``(l, r)``: draft only for sequence indices in ``[l, r)`` (plain AR elsewhere).
        batch_mode: ``ragged`` (default) or ``lockstep``.
        acceptance: ``exact`` (lossless) or a relaxed rule (``lantern``, ``lantern++``, ``bounded``;
            lossy — see :mod:`arvis.acceptance.relaxed`); ``k``, ``delta``, ``lam`` its parameters and
            ``neighbours`` the codebook neighbourhoods (passed by the pipelines). Relaxation only
            changes which tokens are committed; refreshed drafts always come from the exact coupling.
    """

    name: ClassVar[str] = "sjd"
    lossless: ClassVar[bool] = True

    window: int = 16
    init: str = "random"
    coupling: str = "none"
    window_shape: str = "contiguous"
    staircase_rows: int = 2
    staircase_step: int = 4
    jacobi_interval: tuple[int, int] | None = None
    batch_mode: str = "ragged"
    acceptance: str = "exact"
    k: int = 10
    delta: float = 0.1
    lam: float = 5.0
    neighbours: torch.Tensor | None = None

    def __post_init__(self) -> None:
        def positive_int(name: str, value: Any, hi: int) -> None:
            if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= hi:
                raise ValueError(f"{name} must be an integer in [1, {hi}], got {value!r}")

        positive_int("window", self.window, 1024)
        positive_int("staircase_rows", self.staircase_rows, 64)
        positive_int("staircase_step", self.staircase_step, 4096)
        for name, value, allowed in (("init", self.init, JACOBI_INITS), ("coupling", self.coupling, COUPLINGS),
                                     ("window_shape", self.window_shape, WINDOW_SHAPES),
                                     ("batch_mode", self.batch_mode, BATCH_MODES)):
            if value not in allowed:
                raise ValueError(f"{name} must be one of {allowed}, got {value!r}")
        if self.jacobi_interval is not None:
            interval = tuple(self.jacobi_interval)
            if len(interval) != 2 or not all(isinstance(v, int) for v in interval) or not 0 <= interval[0] <= interval[1]:
                raise ValueError(f"jacobi_interval must be (l, r) with 0 <= l <= r, got {self.jacobi_interval!r}")
            object.__setattr__(self, "jacobi_interval", interval)
        acceptance_rule(self.acceptance, self.k, self.delta, self.lam, self.neighbours)
        if self.acceptance != "exact" and self.coupling == "gumbel":
            raise ValueError("acceptance: Gumbel coupling verifies by matching argmaxes; relaxed acceptance "
                             "needs coupling 'none' or 'maximal'")

    @property
    def positions_per_forward(self) -> int:
        """Positions one forward evaluates (contiguous window + bonus, plus the staircase bands)."""
        bands = self.staircase_rows * self.window if self.window_shape == "staircase" else 0
        return self.window + 1 + bands

    def run(self, engine: DecodeEngine) -> dict[str, Any]:
        return _JacobiRun(self, engine).run()


@dataclass(frozen=True)
class CoupledJacobi(SpeculativeJacobi):
    """MC-SJD: SJD whose drafts are refreshed by maximal coupling (or Gumbel coupling)."""

    name: ClassVar[str] = "mc-sjd"
    coupling: str = "maximal"

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.coupling == "none":
            raise ValueError("mc-sjd: coupling must be 'maximal' or 'gumbel' (use method 'sjd' for none)")


class _JacobiRun:
    """Per-request state of one SJD decode.

    ``tokens [A, N]`` holds, per sequence index, the committed token or the current draft (-1: none);
    ``q [A, N, V]`` the draft's distribution (for committed positions: the ``p`` they were committed
    with, which neighbour-distribution drafts read); ``n [A]`` the committed lengths.
    """

    def __init__(self, method: SpeculativeJacobi, engine: DecodeEngine):
        self.m, self.e = method, engine
        self.N, self.V = engine.num_tokens, engine.vocab_size
        self.width = engine.layout.row_stride  # sequence indices between vertical neighbours (W + 1 with end-of-line)
        self.gumbel = method.coupling == "gumbel"
        self.lo, self.hi = method.jacobi_interval or (0, self.N)
        self.lo = max(self.lo, 1)  # index 0 comes from the prefill
        self.K = method.window + 1
        self.T = method.positions_per_forward
        dev = engine.device
        self.offsets = torch.arange(self.K, device=dev)
        bands = []
        if method.window_shape == "staircase":
            for i in range(1, method.staircase_rows + 1):
                bands.append(torch.full((method.window,), i, device=dev))
        self.band_row = torch.cat(bands) if bands else torch.zeros(0, dtype=torch.long, device=dev)
        self.band_col = (torch.arange(method.window, device=dev).repeat(len(bands)) if bands
                         else torch.zeros(0, dtype=torch.long, device=dev))
        self.rule = acceptance_rule(method.acceptance, method.k, method.delta, method.lam, method.neighbours)
        self.neighbours = None if method.neighbours is None else method.neighbours.to(dev)
        self.tv_sum = torch.zeros((), device=dev)
        self.tv_count = torch.zeros((), device=dev)
        self.tv_max = torch.zeros((), device=dev)
        self.drafted_at = torch.zeros(self.K, dtype=torch.long, device=dev)
        self.accepted_at = torch.zeros(self.K, dtype=torch.long, device=dev)

    # ------------------------------------------------------------------ positions
    def _targets(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Sequence indices this forward predicts ``[A, T]``, which are real, and which are contiguous."""
        n, N, W = self.n, self.N, self.width
        contiguous = n[:, None] + self.offsets  # [A, K]
        if self.band_row.numel():
            r0, c0 = n // W, n % W
            rows = r0[:, None] + self.band_row
            cols = (c0[:, None] - self.band_row * self.m.staircase_step).clamp_min(0) + self.band_col
            band = rows * W + cols
            # A band position must lie in its row, inside the grid, after the contiguous window.
            band_ok = (cols < W) & (band < N) & (band > contiguous[:, -1:])
            band = torch.where(band_ok, band, N - 1)
            targets = torch.cat([contiguous, band], dim=1)
            real = torch.cat([contiguous < N, band_ok], dim=1)
        else:
            targets, real = contiguous, contiguous < N
        is_contiguous = torch.zeros_like(real)
        is_contiguous[:, : self.K] = True
        return targets.clamp_max(N - 1), real, is_contiguous

    def _draftable(self, index: torch.Tensor) -> torch.Tensor:
        return (index >= self.lo) & (index < self.hi) & (index < self.N)

    def _ensure_drafts(self, index: torch.Tensor, want: torch.Tensor) -> None:
        """Initial drafts at ``index`` where wanted and there is no token yet."""
        want = want & self._draftable(index) & (self.tokens.gather(1, index) < 0)
        noise = None
        if self.m.init in ("random", "neighbour_distribution"):
            noise = self._noise_at(index) if self.gumbel else self.e.exponential((index.shape[1], self.V))
        fill_drafts(self.m.init, index, want, self.tokens, self.q, self.width, noise,
                    self.e.layout.image_token_range)
        if self.e.forced_tokens is not None:  # structural tokens: the forced id, certain
            f = self.e.forced_tokens[index]
            forced = want & (f >= 0)
            rows = torch.arange(index.shape[0], device=index.device)[:, None].expand_as(index)
            self.tokens[rows[forced], index[forced]] = f[forced]
            self.q[rows[forced], index[forced]] = F.one_hot(f[forced], self.V).to(self.q.dtype)

    def _noise_at(self, index: torch.Tensor) -> torch.Tensor:
        """Fixed Exp(1) noise of sequence ``index [A, M]`` (Gumbel coupling) → ``[A, M, V]``."""
        return self.E.gather(1, index[..., None].expand(-1, -1, self.V))

    # ------------------------------------------------------------------ main loop
    @torch.no_grad()
    def run(self) -> dict[str, Any]:
        e, N, V = self.e, self.N, self.V
        A, dev = e.batch_size, e.device
        p0 = e.prefill()  # [A, V]
        if self.gumbel:
            # One [V] draw per token and sample, in sequence order: the same stream plain AR consumes.
            self.E = torch.stack([e.exponential((V,)) for _ in range(N)], dim=1)  # [A, N, V]
            first = sample_categorical(p0, self.E[:, 0])
        else:
            first = e.sample(p0[:, None])[:, 0]
        e.commit(torch.zeros(A, 1, dtype=torch.long, device=dev), first[:, None])
        self.n = torch.ones(A, dtype=torch.long, device=dev)
        self.tokens = torch.full((A, N), -1, dtype=torch.long, device=dev)
        self.tokens[:, 0] = first
        self.q = torch.zeros(A, N, V, device=dev)
        self.q[:, 0] = p0
        rows_all = torch.arange(A, device=dev)

        while bool((self.n < N).any()):  # host sync: once per iteration
            targets, real, is_contiguous = self._targets()  # [A, T]
            inputs_index = (targets - 1).clamp_min(0)
            # Draft every position this forward reads or predicts (drafted positions keep their drafts).
            need_index = torch.cat([inputs_index, targets], dim=1)
            need_mask = torch.cat([real, real & ~(is_contiguous & (targets - self.n[:, None] == self.K - 1))], dim=1)
            self._ensure_drafts(need_index, need_mask & (need_index >= self.n[:, None]))
            # The contiguous part stops at the first position without a draft (a window boundary).
            drafted = (self.tokens.gather(1, targets) >= 0) & self._draftable(targets)
            lead = leading_accepted(drafted[:, : self.K - 1] & real[:, : self.K - 1])  # drafts usable in order
            k_offsets = torch.arange(targets.shape[1], device=dev)
            contiguous_ok = is_contiguous & (k_offsets <= lead[:, None]) & real
            band_ok = ~is_contiguous & real & (self.tokens.gather(1, inputs_index) >= 0)
            use = contiguous_ok | band_ok
            width = self.K if self.band_row.numel() or bool((lead > 0).any()) else 1
            if width == 1:  # no drafts anywhere: plain AR steps, one position per sample
                targets, use, is_contiguous = targets[:, :1], use[:, :1], is_contiguous[:, :1]
                inputs_index = inputs_index[:, :1]
            inputs = self.tokens.gather(1, inputs_index).clamp_min(0)
            p = e.evaluate(inputs, inputs_index, pad=~use)  # [A, T, V]

            T = targets.shape[1]
            draft_tok = self.tokens.gather(1, targets).clamp_min(0)
            draft_q = self.q.gather(1, targets[..., None].expand(-1, -1, V))
            has = use & (self.tokens.gather(1, targets) >= 0) & self._draftable(targets) & (targets >= self.n[:, None])
            has &= ~(is_contiguous & (k_offsets[:T] == self.K - 1))  # the bonus position has no draft
            draft_q = draft_q * has[..., None]
            if self.gumbel:
                new_tokens = sample_categorical(p, self._noise_at(targets))  # Gumbel-max with the fixed noise
                accepted = has & (draft_tok == new_tokens)
            else:
                u, noise = e.uniform((T,)), e.exponential((T, V))
                new_tokens, accepted = speculative_step(p, draft_q, draft_tok, u, noise)
                if not self.rule.lossless:  # commits follow the relaxed rule; drafts keep the exact coupling
                    verified, accepted, tv = relaxed_step(self.rule, p, draft_q, draft_tok, u, noise, self.neighbours)
                accepted &= has
            contiguous_acc = accepted & is_contiguous[:, :T]
            n_acc = leading_accepted(contiguous_acc[:, : min(self.K, T)])
            n_commit = torch.minimum(n_acc + 1, N - self.n)
            if self.m.batch_mode == "lockstep":
                n_commit = n_commit.min().expand_as(n_commit)
            cw = min(self.K, T)
            self.drafted_at[:cw] += has[:, :cw].sum(0)
            self.accepted_at[:cw] += (has[:, :cw] & (self.offsets[:cw] < n_acc[:, None])).sum(0)

            commit_mask = is_contiguous[:, :T] & (k_offsets[:T] < n_commit[:, None]) & use
            if not self.gumbel and not self.rule.lossless:
                committed_tokens = verified
                self.tv_sum += (tv * commit_mask).sum()
                self.tv_count += commit_mask.sum()
                self.tv_max = torch.maximum(self.tv_max, (tv * commit_mask).max())
            else:
                committed_tokens = new_tokens
            e.commit(targets, committed_tokens, commit_mask)
            n_new = self.n + n_commit
            e.truncate(n_new - 1)  # roll back: slots after the last committed input hold rejected drafts

            # New drafts after the commit point, with q := p; committed positions keep q := their p.
            if self.gumbel or self.m.coupling == "maximal":
                refreshed = new_tokens  # Gumbel-max / maximal coupling of each old draft with p
                if self.m.batch_mode == "lockstep" and not self.gumbel:
                    # Accepted or recovered tokens past the batch cut are not draws from p: redraw them.
                    redraw = is_contiguous[:, :T] & (k_offsets[:T] <= n_acc[:, None]) & ~commit_mask
                    refreshed = torch.where(redraw, e.sample(p), refreshed)
            else:
                refreshed = e.sample(p)  # SJD: independent draws from p
            update = use & (commit_mask | (self._draftable(targets) & (targets >= n_new[:, None])))
            value = torch.where(commit_mask, committed_tokens, refreshed)
            rows = rows_all[: targets.shape[0], None].expand_as(targets)
            a, i = rows[update], targets[update]
            self.tokens[a, i] = value[update]
            self.q[a, i] = self._carried_distribution(p[update], self.q[a, i])
            self.n = n_new
            done = self.n >= N
            if bool(done.any()) and not bool(done.all()):
                self._retire(~done)
        return self._extra()

    @staticmethod
    def _carried_distribution(p: torch.Tensor, old_q: torch.Tensor) -> torch.Tensor:
        """The distribution a refreshed draft was drawn from: this forward's ``p`` (never the old ``q``)."""
        return p

    def _retire(self, keep: torch.Tensor) -> None:
        kept = self.e.retire(keep)
        self.n, self.tokens, self.q = (t.index_select(0, kept) for t in (self.n, self.tokens, self.q))
        if self.gumbel:
            self.E = self.E.index_select(0, kept)

    def _extra(self) -> dict[str, Any]:
        drafted, accepted = self.drafted_at.tolist(), self.accepted_at.tolist()
        return {"acceptance_by_offset": [a / d if d else None for a, d in zip(accepted, drafted, strict=True)],
                "window": self.m.window, "init": self.m.init, "coupling": self.m.coupling,
                "window_shape": self.m.window_shape, "positions_per_forward": self.m.positions_per_forward,
                "acceptance": self.m.acceptance,
                **({} if self.rule.lossless else {
                    "delta": self.m.delta, "k": self.m.k, "lam": self.m.lam,
                    "tv_kind": "realised (exact)" if self.rule.kind == "bounded" else "nominal c_m* (exact for one-hot q)",
                    "mean_tv_per_token": float(self.tv_sum / self.tv_count.clamp_min(1)),
                    "max_tv_per_token": float(self.tv_max)})}


__all__ = ["CoupledJacobi", "SpeculativeJacobi"]
