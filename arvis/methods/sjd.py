"""Speculative Jacobi Decoding (SJD; Teng et al., ICLR 2025, arXiv:2410.01699) and its coupled
variants (MC-SJD; So et al., 2025, arXiv:2510.24211). Lossless.

One iteration, per sample with ``n`` committed tokens and a window of ``L`` drafts ``d_n … d_{n+L−1}``:

1. one target forward over ``[x_{n−1}, d_n, …, d_{n+L−1}]`` at sequence indices ``n−1 … n+L−1``
   gives ``p_n … p_{n+L}`` (``p_k`` conditions on the committed prefix and the drafts before ``k``);
2. verify left to right with exact speculative acceptance; at the first rejection ``k`` draw the
   recovered token from ``normalize(max(0, p_k − q_k))``; if all ``L`` pass, the bonus token comes
   from ``p_{n+L}`` (a position with no draft: its residual is ``p``). Commit 1 … L+1 tokens;
3. refresh the drafts after the commit point from this forward's ``p``: independent draws (SJD),
   the maximal coupling of the old draft with ``p`` (MC-SJD), or the Gumbel-max of ``p`` with noise
   fixed per position (Gumbel coupling); then ``q := p``. New window slots get initial drafts
   (:mod:`arvis.drafting.jacobi`);
4. roll back the cache to the committed prefix (a mask update; both CFG halves).

A forward evaluates ``window + 1`` positions. With Gumbel coupling every committed token is the
Gumbel-max sample of its true conditional with the same noise plain AR would use (one ``[V]`` draw
per token from each sample's generator), so with per-sample generators it reproduces plain AR's
tokens exactly — in fewer forwards.

Batches are *ragged*: every sample keeps its own committed length, window and drafts, and commits
as many tokens per forward as it accepted. The forward evaluates each sample at its own absolute
positions (the engine's explicit masks make that exact); samples that finish leave the batch
(``DecodeEngine.retire``). ``batch_mode="lockstep"`` advances every sample by the batch minimum
instead (for measuring what ragged decoding buys); accepted drafts past the cut are discarded and
redrawn fresh, which keeps it lossless.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from arvis.acceptance.speculative import leading_accepted, speculative_step
from arvis.drafting.jacobi import JACOBI_INITS, initial_drafts
from arvis.engine.engine import DecodeEngine
from arvis.methods.base import DecodingMethod
from arvis.utils.random import sample_categorical

COUPLINGS = ("none", "maximal", "gumbel")
BATCH_MODES = ("ragged", "lockstep")


@dataclass(frozen=True)
class SpeculativeJacobi(DecodingMethod):
    """SJD with a window of ``window`` drafts (options validated on construction).

    Attributes:
        window: drafts verified per forward (``L`` >= 1).
        init: initial drafts, one of ``random``, ``repeat_horizontal``, ``repeat_vertical``,
            ``neighbour_distribution``.
        coupling: draft refresh: ``none`` (SJD), ``maximal`` (MC-SJD), ``gumbel``.
        jacobi_interval: ``(l, r)``: draft only for sequence indices in ``[l, r)`` (plain AR elsewhere).
        batch_mode: ``ragged`` (default) or ``lockstep``.
    """

    name: ClassVar[str] = "sjd"
    lossless: ClassVar[bool] = True

    window: int = 16
    init: str = "random"
    coupling: str = "none"
    jacobi_interval: tuple[int, int] | None = None
    batch_mode: str = "ragged"

    def __post_init__(self) -> None:
        if not isinstance(self.window, int) or isinstance(self.window, bool) or not 1 <= self.window <= 1024:
            raise ValueError(f"window must be an integer in [1, 1024], got {self.window!r}")
        if self.init not in JACOBI_INITS:
            raise ValueError(f"init must be one of {JACOBI_INITS}, got {self.init!r}")
        if self.coupling not in COUPLINGS:
            raise ValueError(f"coupling must be one of {COUPLINGS}, got {self.coupling!r}")
        if self.batch_mode not in BATCH_MODES:
            raise ValueError(f"batch_mode must be one of {BATCH_MODES}, got {self.batch_mode!r}")
        if self.jacobi_interval is not None:
            interval = tuple(self.jacobi_interval)
            if len(interval) != 2 or not all(isinstance(v, int) for v in interval) or not 0 <= interval[0] <= interval[1]:
                raise ValueError(f"jacobi_interval must be (l, r) with 0 <= l <= r, got {self.jacobi_interval!r}")
            object.__setattr__(self, "jacobi_interval", interval)

    def run(self, engine: DecodeEngine) -> dict[str, Any]:
        return _JacobiRun(self, engine).run()


@dataclass(frozen=True)
class CoupledJacobi(SpeculativeJacobi):
    """MC-SJD: SJD whose later drafts are refreshed by maximal coupling (or Gumbel coupling)."""

    name: ClassVar[str] = "mc-sjd"
    coupling: str = "maximal"

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.coupling == "none":
            raise ValueError("mc-sjd: coupling must be 'maximal' or 'gumbel' (use method 'sjd' for none)")


class _JacobiRun:
    """The per-request state of one SJD decode (window drafts, their q's, committed lengths)."""

    def __init__(self, method: SpeculativeJacobi, engine: DecodeEngine):
        self.m, self.e = method, engine
        self.N, self.V = engine.num_tokens, engine.vocab_size
        self.width = engine.layout.grid[-1]
        self.K = method.window + 1  # outputs per forward: window drafts + the bonus position
        self.gumbel = method.coupling == "gumbel"
        lo, hi = method.jacobi_interval or (0, self.N)
        self.interval = (lo, hi)
        self.offsets = torch.arange(self.K, device=engine.device)
        self.forced = engine.forced_tokens
        # Diagnostics: how often the draft at each window offset was inside the accepted prefix.
        self.drafted_at = torch.zeros(self.K, dtype=torch.long, device=engine.device)
        self.accepted_at = torch.zeros(self.K, dtype=torch.long, device=engine.device)

    # ------------------------------------------------------------------ helpers
    def _has_draft(self, index: torch.Tensor) -> torch.Tensor:
        lo, hi = self.interval
        # The last window offset is the bonus position: never a draft.
        return (index < self.N) & (index >= max(lo, 1)) & (index < hi) & (self.offsets < self.K - 1)

    def _init(self, index, need):
        noise = None
        if self.m.init in ("random", "neighbour_distribution"):
            noise = self.noise_at(index) if self.gumbel else self.e.exponential((self.K, self.V))
        drafts, q = initial_drafts(self.m.init, index, need, self.guess, self.dists, self.width, self.V, noise,
                                   self.e.layout.image_token_range)
        if self.forced is not None:  # structural tokens: the forced id, certain
            f = self.forced[index.clamp_max(self.N - 1)]
            is_forced = need & (f >= 0)
            drafts = torch.where(is_forced, f, drafts)
            q = torch.where(is_forced[..., None], torch.nn.functional.one_hot(f.clamp_min(0), self.V).float(), q)
        return drafts, q

    def noise_at(self, index: torch.Tensor) -> torch.Tensor:
        """The fixed Exp(1) noise of sequence ``index [A, K]`` (Gumbel coupling) → ``[A, K, V]``."""
        return self.E.gather(1, index.clamp_max(self.N - 1)[..., None].expand(-1, -1, self.V))

    # ------------------------------------------------------------------ main loop
    @torch.no_grad()
    def run(self) -> dict[str, Any]:
        e, N, V, K = self.e, self.N, self.V, self.K
        A = e.batch_size
        p0 = e.prefill()  # [A, V]
        if self.gumbel:
            # One [V] draw per token and sample, in sequence order: the same stream plain AR consumes.
            self.E = torch.stack([e.exponential((V,)) for _ in range(N)], dim=1)  # [A, N, V]
            first = sample_categorical(p0, self.E[:, 0])
        else:
            first = e.sample(p0[:, None])[:, 0]
        e.commit(torch.zeros(A, 1, dtype=torch.long, device=e.device), first[:, None])
        self.n = torch.ones(A, dtype=torch.long, device=e.device)
        self.guess = torch.full((A, N), -1, dtype=torch.long, device=e.device)
        self.guess[:, 0] = first
        self.dists = None
        if self.m.init == "neighbour_distribution":
            self.dists = torch.zeros(A, N, V, device=e.device)
            self.dists[:, 0] = p0
        index = self.n[:, None] + self.offsets
        need = self._has_draft(index)
        self.drafts, self.q = self._init(index, need)
        if N == 1:
            return self._extra()

        while True:
            index = self.n[:, None] + self.offsets  # [A, K]: sequence indices this forward predicts
            has = self._has_draft(index)
            any_draft = bool(has.any())  # host sync: once per iteration
            width = K if any_draft else 1
            idx, has_w = index[:, :width], has[:, :width]
            inputs = torch.cat([self._last_committed(), self.drafts[:, : width - 1]], dim=1)
            p = e.evaluate(inputs, idx - 1, pad=idx > N - 1)  # [A, width, V]
            drafts, q = self.drafts[:, :width], self.q[:, :width] * has_w[..., None]
            has_w = has_w & (q.sum(-1) > 0)  # slots an initialisation could not fill hold no draft

            if self.gumbel:
                target = sample_categorical(p, self.noise_at(idx))  # Gumbel-max with the fixed noise
                accepted = has_w & (drafts == target)
                new_tokens = target
            else:
                new_tokens, accepted = speculative_step(p, q, drafts, e.uniform((width,)),
                                                        e.exponential((width, V)))
                accepted &= has_w
            n_acc = leading_accepted(accepted)  # [A] in [0, width - 1]
            n_commit = torch.minimum(n_acc + 1, N - self.n)
            if self.m.batch_mode == "lockstep":
                n_commit = n_commit.min().expand_as(n_commit)
            self.drafted_at[:width] += has_w.sum(0)
            self.accepted_at[:width] += (has_w & (self.offsets[:width] < n_acc[:, None])).sum(0)

            commit_mask = self.offsets[:width] < n_commit[:, None]
            e.commit(idx, new_tokens, commit_mask)
            self._record_commits(idx, new_tokens, p, commit_mask)
            n_new = self.n + n_commit
            e.truncate(n_new - 1)  # roll back: slots after the last committed input hold rejected drafts

            # Refresh the drafts after the commit point from this forward's p (q := p).
            if self.gumbel:
                refreshed = new_tokens  # Gumbel-max of p with the fixed noise
            elif self.m.coupling == "maximal":
                refreshed = new_tokens  # the maximal coupling of each old draft with p
                if self.m.batch_mode == "lockstep":
                    # Accepted or recovered tokens past the batch cut are not draws from p: redraw them.
                    redraw = (self.offsets[:width] <= n_acc[:, None]) & ~commit_mask
                    refreshed = torch.where(redraw, e.sample(p), refreshed)
            else:
                refreshed = e.sample(p)  # SJD: independent draws from p
            self._slide(refreshed, p, n_commit, width)
            self.n = n_new
            done = self.n >= N
            if bool(done.all()):  # host sync: once per iteration
                break
            if bool(done.any()):
                self._retire(~done)
        return self._extra()

    def _last_committed(self) -> torch.Tensor:
        """``[A, 1]``: the last committed token of every active sample (the window's first input)."""
        return self.guess.gather(1, (self.n - 1)[:, None])

    def _record_commits(self, idx, tokens, p, mask) -> None:
        safe = idx.clamp_max(self.N - 1)
        self.guess.scatter_(1, safe, torch.where(mask, tokens, self.guess.gather(1, safe)))
        if self.dists is not None:
            full = safe[..., None].expand(-1, -1, self.V)
            self.dists.scatter_(1, full, torch.where(mask[..., None], p, self.dists.gather(1, full)))

    def _slide(self, refreshed: torch.Tensor, p: torch.Tensor, n_commit: torch.Tensor, width: int) -> None:
        """Shift every sample's window left by its commit count; refreshed drafts carry over with q = p."""
        N, V = self.N, self.V
        src = self.offsets[None] + n_commit[:, None]  # [A, K]: old window offset feeding each new offset
        carried = src < width  # the old forward produced p there
        src_c = src.clamp_max(width - 1)
        drafts = refreshed.gather(1, src_c)
        gather_v = src_c[..., None].expand(-1, -1, V)
        q = self._carried_distribution(p.gather(1, gather_v), self.q[:, :width].gather(1, gather_v))
        new_index = (self.n + n_commit)[:, None] + self.offsets
        has = self._has_draft(new_index)
        carried &= has
        # Forget drafted-but-uncommitted guesses beyond the committed prefix, then write the carried ones.
        committed_len = (self.n + n_commit)[:, None]
        positions = torch.arange(N, device=refreshed.device)[None]
        self.guess = torch.where(positions < committed_len, self.guess, -1)
        safe = new_index.clamp_max(N - 1)
        self.guess.scatter_(1, safe, torch.where(carried, drafts, self.guess.gather(1, safe)))
        if self.dists is not None:
            keep = (positions < committed_len)[..., None]
            self.dists = torch.where(keep, self.dists, 0.0)
            full = safe[..., None].expand(-1, -1, V)
            self.dists.scatter_(1, full, torch.where(carried[..., None], q, self.dists.gather(1, full)))
        if self.forced is not None:  # structural tokens stay forced and certain
            f = self.forced[safe]
            is_forced = carried & (f >= 0)
            drafts = torch.where(is_forced, f, drafts)
            q = torch.where(is_forced[..., None], torch.nn.functional.one_hot(f.clamp_min(0), V).float(), q)
        init_drafts, init_q = self._init(new_index, has & ~carried)
        self.drafts = torch.where(carried, drafts, init_drafts)
        self.q = torch.where(carried[..., None], q, init_q)

    @staticmethod
    def _carried_distribution(p: torch.Tensor, old_q: torch.Tensor) -> torch.Tensor:
        """The distribution a refreshed draft was drawn from: this forward's ``p`` (never the old ``q``)."""
        return p

    def _retire(self, keep: torch.Tensor) -> None:
        kept = self.e.retire(keep)
        for name in ("n", "guess", "drafts", "q"):
            setattr(self, name, getattr(self, name).index_select(0, kept))
        if self.dists is not None:
            self.dists = self.dists.index_select(0, kept)
        if self.gumbel:
            self.E = self.E.index_select(0, kept)

    def _extra(self) -> dict[str, Any]:
        drafted = self.drafted_at.tolist()
        accepted = self.accepted_at.tolist()
        return {"acceptance_by_offset": [a / d if d else None for a, d in zip(accepted, drafted, strict=True)],
                "window": self.m.window, "init": self.m.init, "coupling": self.m.coupling}


__all__ = ["CoupledJacobi", "SpeculativeJacobi"]
