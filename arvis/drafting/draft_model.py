"""A small AR model as drafter (Leviathan et al., 2023): it proposes γ tokens autoregressively.

The draft model runs through its own :class:`~arvis.engine.engine.DecodeEngine` (its own static
cache, the CFG pair, the same sampling settings — so ``q`` is exactly the processed distribution
each draft was drawn from) and shares the target engine's random streams, so per-sample generators
still make every sample reproducible on its own. Its forwards are counted as draft forwards.
"""

from __future__ import annotations

import torch

from arvis.engine.engine import DecodeEngine
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
        self.engine = DecodeEngine(model, target.condition, target.sampling, method="draft")
        self.engine.random = target.random  # one stream per sample, shared with the verifier
        self.N, self.V = target.num_tokens, target.vocab_size
        self.p_next = None  # [A, V]: the draft model's p for its next position, when known
        self.fed = None  # [A]: sequence indices < fed have their (final) keys in the draft cache

    def propose(self, committed: torch.Tensor, count: int) -> tuple[torch.Tensor, torch.Tensor]:
        e, A, dev = self.engine, committed.shape[0], committed.device
        if self.fed is None:  # first call: the prefill gives p for index 0, already committed by the target
            e.prefill()
            self.target.count_draft_forward()
            self.fed = torch.zeros(A, dtype=torch.long, device=dev)
        drafts = torch.zeros(A, count, dtype=torch.long, device=dev)
        q = torch.zeros(A, count, self.V, device=dev)
        # Catch up: feed committed tokens the draft model has not read ([fed, committed)), then draft.
        lag = committed - self.fed  # 1 after a rejection, 2 after a full acceptance (last draft + bonus)
        width = int(lag.max())  # host sync: once per proposal
        offsets = torch.arange(width, device=dev)
        index = self.fed[:, None] + offsets
        pad = offsets >= lag[:, None]
        tokens = self.target.tokens[self.target.active].gather(1, index.clamp_max(self.N - 1)).clamp_min(0)
        probs = e.evaluate(tokens, index, pad=pad)  # [A, width, V]
        self.target.count_draft_forward()
        p = probs.gather(1, (lag - 1).clamp_min(0)[:, None, None].expand(-1, 1, self.V))[:, 0]
        self.fed = committed.clone()
        self.drafted_upto = committed + count - 1  # drafts at [committed, drafted_upto) get fed below
        for j in range(count):
            position = committed + j
            alive = position < self.N
            token = e.sample(p[:, None])[:, 0]
            drafts[:, j] = token
            q[:, j] = p * alive[:, None]
            if j == count - 1:
                break
            feed_pad = ~(position + 1 < self.N)
            probs = e.evaluate(token[:, None], position[:, None], pad=feed_pad[:, None])
            self.target.count_draft_forward()
            p = probs[:, 0]
        return drafts, q

    def update(self, committed: torch.Tensor) -> None:
        # Fed drafts that the target committed are final; everything after them is stale. The last
        # committed token (recovered or bonus) has not been read by the draft model yet.
        agreed = torch.minimum(committed - 1, self.drafted_upto)
        self.engine.truncate(agreed)
        self.fed = agreed

    def retire(self, kept: torch.Tensor) -> None:
        keep = torch.zeros(self.engine.num_active, dtype=torch.bool, device=kept.device)
        keep[kept] = True
        self.engine.retire(keep)
        self.fed = self.fed.index_select(0, kept)
        self.drafted_upto = self.drafted_upto.index_select(0, kept)
