"""PJD, Parallel Jacobi Decoding (Liao et al., CVPR 2026, arXiv:2606.05703): Jacobi iteration over image rows in
parallel. LOSSY.

``PJD = ZipAR's row schedule with a window of drafts per row × Jacobi drafts × exact acceptance per row × a
commit per row``. Rows start as in ZipAR (a row starts once the row above has ``row_lag`` committed
indices); each active row evaluates ``window`` drafts plus its bonus position in the same forward, under a
*row-causal* mask: a query sees the committed tokens of every row (holes — undecoded cells — masked) and the
inputs of its own row's window before it, never another row's drafts (the paper's mask against error
accumulation). Each row's drafts are verified left to right with exact speculative acceptance against that
``p``; the accepted ones plus one recovered (or bonus) token commit, the rest are refreshed from this forward's
``p`` as the row's next drafts (SJD's fresh draws, ``coupling="none"``, as published; or MC-SJD's maximal
coupling). A row never overtakes the one above: its index ``c`` is decoded only while ``c <= done(row above) −
row_lag`` (:func:`arvis.engine.schedules.row_windows`).

What is lost: a row's tokens are drawn from the model's conditionals given the rows above *as far as they are
decoded* — the tail of the row above is a hole (ZipAR's approximation), so the output is not the model's
distribution; its cost is measured by FID. With ``row_lag`` at least the row length, every row waits for the
one above and PJD is SJD with windows that stop at row ends: lossless (tested).

Where the published description leaves a choice, arvis takes ZipAR's (documented in docs/methods.md): without
end-of-line tokens (LlamaGen) a row start is fed the latest committed token two rows up at the unfinished row
end (a proxy, in a scratch slot: the row above may decode that index in the same forward), row 1 waits for
row 0, and a finished row's last token is re-fed once; with them (Emu3) the end-of-line token starts the row.
Batches are ragged (each sample keeps its own rows) and every sample draws the same random numbers whatever
the batch around it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from arvis.acceptance.coupling import maximal_coupling
from arvis.acceptance.speculative import leading_accepted
from arvis.drafting.jacobi import JacobiDrafter
from arvis.engine.engine import NO_TOKEN, DecodeEngine
from arvis.engine.schedules import RasterWindow, RowSegment, max_active_rows, row_lengths, row_windows
from arvis.methods.base import DecodingMethod, register_method
from arvis.methods.catalog import DecoderKind, MethodInfo, method_info
from arvis.models.protocol import TokenLayout
from arvis.utils.random import sample_inverse_cdf


def _rows_of(layout: TokenLayout) -> tuple[list[int], bool]:
    """``(indices per row, rows end with a known token)``; ``ValueError`` for layouts PJD cannot split in rows."""
    if len(layout.grid) not in (2, 3):
        raise ValueError(f"pjd needs a 2-D (H, W) or 3-D (T, H, W) token grid, got {layout.grid}")
    lengths = row_lengths(layout.num_tokens, layout.row_stride)
    structural = layout.structural_tokens
    ends = [sum(lengths[: r + 1]) - 1 for r in range(len(lengths) - 1)]
    known = bool(structural) and all(e in structural for e in ends)
    if structural and not known:
        raise ValueError("pjd needs a grid without structural tokens, or with an end-of-line token per row")
    return lengths, known


@register_method
@dataclass(frozen=True)
class ParallelJacobi(DecodingMethod):
    """PJD (module docstring). Options (declared in :mod:`arvis.methods.catalog`): ``window``, ``row_lag``,
    ``init``, ``coupling``."""

    info: ClassVar[MethodInfo] = method_info("pjd", DecoderKind.TOKEN)

    window: int = 3
    row_lag: int = 2
    init: str = "random"
    coupling: str = "none"

    def __post_init__(self) -> None:
        self._check_declared()

    def segments(self, layout: TokenLayout) -> int:
        lengths, _ = _rows_of(layout)
        return max_active_rows(max(lengths), len(lengths), self.row_lag)

    def scratch_slots(self, layout: TokenLayout) -> int:
        return self.segments(layout)  # one per segment: a row start's proxy

    def run(self, engine: DecodeEngine) -> dict[str, Any]:
        lengths, known_ends = _rows_of(engine.layout)
        loop = _RowLoop(self, engine, lengths, known_ends, self.segments(engine.layout))
        return {**loop.run(), "window": self.window, "row_lag": self.row_lag, "init": self.init,
                "coupling": self.coupling}


class _RowLoop:
    """One request's parallel-Jacobi decode. Row progress lives on the host (one synchronisation per forward
    reads the commits); drafts and their distributions in a Jacobi session (:mod:`arvis.drafting.jacobi`)."""

    def __init__(self, method: ParallelJacobi, engine: DecodeEngine, lengths: list[int], known_ends: bool,
                 segments: int):
        self.m, self.e, self.lengths, self.known_ends, self.R = method, engine, lengths, known_ends, segments
        self.W1 = method.window + 1
        self._ancestors: dict[int, torch.Tensor] = {}

    def ancestors(self, G: int) -> torch.Tensor:
        """``[G·W1, G·W1]``: a query sees the earlier queries of its own segment (the row-causal mask)."""
        if G not in self._ancestors:
            column = torch.arange(G * self.W1, device=self.e.device)
            segment, within = column // self.W1, column % self.W1
            self._ancestors[G] = (segment[:, None] == segment[None, :]) & (within[None, :] <= within[:, None])
        return self._ancestors[G]

    @torch.no_grad()
    def run(self) -> dict[str, Any]:
        e, m, N, R, W1 = self.e, self.m, self.e.num_tokens, self.R, self.W1
        H = len(self.lengths)
        p0 = e.prefill()
        e.commit(torch.zeros(e.batch_size, 1, dtype=torch.long, device=e.device), e.sample(p0[:, None]))
        span = R * max(self.lengths) + W1  # indices in flight at once: the ring of draft distributions holds them
        session = JacobiDrafter(m.init, m.coupling).start(e, RasterWindow(span, N), p0)
        done = [[1] + [0] * (H - 1) for _ in range(e.batch_size)]
        settled = [[False] * H for _ in range(e.batch_size)]
        samples = list(range(e.batch_size))  # sample id of each active row
        forced = e.forced_tokens
        iterations, positions = 0, 0
        while True:
            plans = [row_windows(done[s], self.lengths, m.window, m.row_lag, self.known_ends, settled[s])
                     for s in samples]
            kept = [a for a, plan in enumerate(plans) if plan]
            if not kept:
                break
            if len(kept) < len(plans):
                kept_index = e.retire(kept)
                session.retire(kept, kept_index)
                samples, plans = [samples[a] for a in kept], [plans[a] for a in kept]
            A, G = len(samples), max(len(p) for p in plans)
            first, queries, source, scratch, decodes = self._layout(plans)  # [A, R] host-built
            # Fixed-shape randomness per sample and forward ([R, W1, 3]), whatever the batch around it.
            noise = e.uniform((R, W1, 3))
            column = torch.arange(W1, device=e.device)
            index = first[..., None] + column  # [A, R, W1] input indices
            real = column < queries[..., None]
            drafted = real & (column < queries[..., None] - 1) & decodes[..., None]  # the bonus query has no draft
            index = torch.where(real, index, N - 1)
            targets = (index + 1).clamp_max(N - 1)
            session.initialise(targets.flatten(1), drafted.flatten(1), torch.zeros(A, dtype=torch.long,
                                                                                     device=e.device))
            inputs = session.tokens.gather(1, index.flatten(1)).view(A, R, W1)
            # Query 0 takes its source's token: committed, else known (an end-of-line), else the current draft.
            committed = e.tokens.index_select(0, e.active).gather(1, source)
            src = torch.where(committed != NO_TOKEN, committed, session.tokens.gather(1, source))
            if forced is not None:
                src = torch.where(forced[source] >= 0, forced[source], src)
            inputs[..., 0] = src
            T = G * W1

            def flat(t: torch.Tensor, G: int = G) -> torch.Tensor:  # the forward's columns: the used segments only
                return t[:, :G].flatten(1, 2)

            slot = torch.where(scratch, torch.arange(R, device=e.device), -1)
            scratch_cols = torch.where(column == 0, slot[..., None], -1)
            p = e.evaluate(flat(inputs).clamp_min(0), flat(index), pad=~flat(real),
                           extent=max(int(f) + int(q) for plan in plans for f, q in
                                      ((s.first_input, s.queries) for s in plan)),
                           scratch=flat(scratch_cols), ancestors=self.ancestors(G))
            drafts = session.tokens.gather(1, flat(targets))
            has = flat(drafted) & (drafts != NO_TOKEN)
            q = session.distribution_at(flat(targets)) * has[..., None]
            coupled, accepted = maximal_coupling(p, q, drafts.clamp_min(0), flat(noise[..., 0]), flat(noise[..., 1]))
            accepted = accepted & has
            lead = leading_accepted(accepted.view(A, G, W1))
            count = torch.where(decodes[:, :G], lead + 1, 0)  # [A, G]; a re-feed commits nothing
            commit = (column < count[..., None]).view(A, T) & flat(real)
            e.commit(flat(targets), coupled, commit)
            # Inputs whose tokens were not committed leave the cache; committed ones (and re-feeds) stay.
            keep = torch.where(decodes[:, :G], count, queries[:, :G])
            e.invalidate(flat(index), (column >= keep[..., None]).view(A, T) & flat(real) & (flat(scratch_cols) < 0))
            fresh = sample_inverse_cdf(p, flat(noise[..., 2])) if m.coupling == "none" else coupled
            session.store(flat(targets), flat(real & decodes[..., None]), torch.where(commit, coupled, fresh), p)
            counts = e.status(*count.T)  # the forward's one host synchronisation
            for a, s in enumerate(samples):
                for k, seg in enumerate(plans[a]):
                    if seg.decodes:
                        done[s][seg.row] += counts[k][a]
                        if not seg.scratch and seg.row > 0 and done[s][seg.row] == counts[k][a]:
                            settled[s][seg.row - 1] = True  # a row started on the real end of the row above
                    else:
                        settled[s][seg.row] = True
            iterations += 1
            positions += T
        return {"iterations": iterations, "mean_positions_per_forward": positions / max(iterations, 1)}

    def _layout(self, plans: list[list[RowSegment]]) -> tuple[torch.Tensor, ...]:
        """Per sample and segment (``[A, R]``, unused segments empty): first input, queries, query 0's source,
        scratch, decodes."""
        R = self.R
        rows = [[(s.first_input, s.queries, s.source, s.scratch, s.decodes) for s in plan]
                + [(0, 0, 0, False, False)] * (R - len(plan)) for plan in plans]
        if any(len(plan) > R for plan in plans):
            raise RuntimeError(f"pjd: more than {R} row segments in one forward")
        dev = self.e.device
        first, queries, source, scratch, decodes = (torch.tensor([[r[i] for r in row] for row in rows], device=dev)
                                                    for i in range(5))
        return first, queries, source, scratch.bool(), decodes.bool()


__all__ = ["ParallelJacobi"]
