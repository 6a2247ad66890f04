"""A small AR model as drafter (Leviathan et al., 2023): it proposes γ tokens autoregressively.

The draft model runs through its own drafter engine (:class:`~arvis.engine.engine.DecodeEngine` with
``drafter_of``: its own static cache, the CFG pair, the same sampling settings — so ``q`` is exactly the
processed distribution each draft was drawn from). It shares the target engine's random streams, so
per-sample generators still make every sample reproducible on its own, and its forwards are counted
and timed as draft forwards.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from arvis.acceptance.verify import Verification
from arvis.drafting.base import Proposal
from arvis.engine.engine import DecodeEngine
from arvis.engine.schedules import WindowPlan
from arvis.models.protocol import Backbone


class DraftModelDrafter:
    """Drafts from a smaller backbone with the same token layout and vocabulary."""

    def __init__(self, model: Backbone):
        self.model = model

    def start(self, engine: DecodeEngine) -> DraftModelSession:
        layout, target = self.model.layout, engine.layout
        if (layout.grid, layout.vocab_size) != (target.grid, target.vocab_size):
            raise ValueError(f"draft_model: its layout {layout.grid} x {layout.vocab_size} differs from the "
                             f"target's {target.grid} x {target.vocab_size}")
        return DraftModelSession(self.model, engine)


class DraftModelSession:
    """One request's draft-model state: its engine (cache, masks) and how far it has read the prefix."""

    def __init__(self, model: Backbone, target: DecodeEngine):
        self.target = target
        self.engine = DecodeEngine(model, target.condition, target.sampling, method="draft", drafter_of=target)
        self.N, self.V = target.num_tokens, target.vocab_size
        self.engine.prefill()  # p of index 0, which the target has already committed
        dev = target.device
        self.fed = torch.zeros(target.num_active, dtype=torch.long, device=dev)  # indices < fed are in its cache
        self.drafted_upto = self.fed.clone()
        # Plain AR steps the loop ran since the last proposal (host count): the next catch-up reads them too.
        self._ar_steps = 0

    def window_needed(self, committed: Sequence[int]) -> bool:
        return True

    def absorb(self, index: torch.Tensor, tokens: torch.Tensor, p: torch.Tensor) -> None:
        """The loop committed a run of plain AR steps per sample (``window=auto`` playing window 0): the draft
        model does not run; its next proposal reads the run's tokens in its catch-up forward."""
        self._ar_steps += index.shape[1]

    def propose(self, committed: torch.Tensor, plan: WindowPlan) -> Proposal:
        e, A, dev = self.engine, committed.shape[0], committed.device
        gamma = plan.verified - 1
        drafts = torch.zeros(A, gamma, dtype=torch.long, device=dev)
        q = torch.zeros(A, gamma, self.V, device=dev)
        # Catch up on committed tokens it has not read, [fed, committed): one after a rejection, two after a
        # full acceptance (the last draft and the bonus token), plus the plain AR steps run since — one forward,
        # padded to the widest lag (known on the host: 2 + those steps).
        width = 2 + self._ar_steps
        self._ar_steps = 0
        offsets = torch.arange(width, device=dev)
        lag = committed - self.fed
        index = self.fed[:, None] + offsets
        pad = offsets >= lag[:, None]
        tokens = self.target.tokens[self.target.active[:, None], index.clamp_max(self.N - 1)]
        probs = e.evaluate(tokens.clamp_min(0), index, pad=pad, extent=plan.extent)  # [A, width, V]
        p = probs.gather(1, (lag - 1).clamp(0, width - 1)[:, None, None].expand(-1, 1, self.V))[:, 0]
        self.fed = committed.clone()
        self.drafted_upto = committed + gamma - 1  # drafts at [committed, drafted_upto) get fed below
        for j in range(gamma):
            position = committed + j
            token = e.sample(p[:, None])[:, 0]
            drafts[:, j] = token
            q[:, j] = p * (position < self.N)[:, None]
            if j == gamma - 1:
                break
            probs = e.evaluate(token[:, None], position[:, None], pad=(position + 1 >= self.N)[:, None],
                               extent=min(plan.extent + j + 1, self.N))
            p = probs[:, 0]
        last = self.target.tokens[self.target.active, committed - 1]
        real = plan.real
        zero = torch.zeros_like(drafts[:, :1])
        return Proposal(inputs=torch.cat([last[:, None], drafts], dim=1), drafts=torch.cat([drafts, zero], dim=1),
                        q=torch.cat([q, torch.zeros_like(q[:, :1])], dim=1),
                        has_draft=real & (torch.arange(gamma + 1, device=dev) < gamma), use=real)

    def update(self, committed: torch.Tensor, plan: WindowPlan, p: torch.Tensor, verification: Verification,
               proposal: Proposal, commit_mask: torch.Tensor) -> None:
        # Fed drafts that the target committed are final; everything after them is stale. The last
        # committed token (recovered or bonus) has not been read by the draft model yet.
        agreed = torch.minimum(committed - 1, self.drafted_upto)
        self.engine.truncate(agreed)
        self.fed = agreed

    def retire(self, kept: Sequence[int], kept_index: torch.Tensor) -> None:
        self.engine.retire(kept)
        self.fed = self.fed.index_select(0, kept_index)
        self.drafted_upto = self.drafted_upto.index_select(0, kept_index)

    def nbytes(self) -> int:
        cache = self.engine.cache
        return sum(t.numel() * t.element_size() for t in cache.keys + cache.values)
