"""Draft-model speculative decoding (Leviathan et al., 2023, arXiv:2211.17192; Chen et al., 2023,
arXiv:2302.01318), with exact or relaxed acceptance (LANTERN, LANTERN++, arvis's bounded rule).

Per iteration and sample with ``n`` committed tokens: the drafter proposes ``gamma`` tokens with
their distributions; one target forward over ``[x_{n−1}, d_n … d_{n+γ−1}]`` gives ``p_n … p_{n+γ}``;
drafts are verified left to right (``acceptance``); the first rejection is replaced by a recovered
token, or the bonus token is drawn from ``p_{n+γ}`` when all pass; the target cache rolls back to the
committed prefix and the drafter is told how far the target committed. ``acceptance="exact"`` is
lossless; the relaxed rules are lossy and report their realised per-step TV where it is exact (the
bounded rule) or LANTERN's nominal ``c_{m*}`` (exact only for one-hot drafts).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from arvis.acceptance.relaxed import RULES, relaxed_step
from arvis.acceptance.speculative import leading_accepted
from arvis.drafting.draft_model import DraftModelDrafter
from arvis.engine.engine import DecodeEngine
from arvis.methods.base import DecodingMethod, MissingResourceError
from arvis.methods.relaxation import acceptance_rule


@dataclass(frozen=True)
class SpeculativeDecoding(DecodingMethod):
    """Speculative decoding with a draft model.

    Attributes:
        gamma: drafts per iteration (>= 1).
        acceptance: ``exact`` (lossless), ``lantern``, ``lantern++``, ``bounded`` (lossy).
        k, delta, lam: relaxation parameters (neighbours used; TV budget; LANTERN++'s λ).
        draft_model: the drafter backbone (the pipeline passes its ``draft_transformer``).
        neighbours: ``[V, K]`` codebook neighbourhoods (the pipeline computes them for relaxed rules).
    """

    name: ClassVar[str] = "speculative"
    lossless: ClassVar[bool] = True  # with acceptance="exact"; relaxed rules are labelled per run

    gamma: int = 4
    acceptance: str = "exact"
    k: int = 10
    delta: float = 0.1
    lam: float = 5.0
    draft_model: Any = None
    neighbours: torch.Tensor | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.gamma, int) or isinstance(self.gamma, bool) or not 1 <= self.gamma <= 64:
            raise ValueError(f"gamma must be an integer in [1, 64], got {self.gamma!r}")
        if self.acceptance not in RULES:
            raise ValueError(f"acceptance must be one of {RULES}, got {self.acceptance!r}")
        acceptance_rule(self.acceptance, self.k, self.delta, self.lam, self.neighbours)
        if self.draft_model is None:
            raise MissingResourceError("draft_model: speculative decoding needs a draft model (the pipeline's "
                             "draft_transformer, or pass draft_model=…)")

    @torch.no_grad()
    def run(self, engine: DecodeEngine) -> dict[str, Any]:
        rule = acceptance_rule(self.acceptance, self.k, self.delta, self.lam, self.neighbours)
        neighbours = None if self.neighbours is None else self.neighbours.to(engine.device)
        session = DraftModelDrafter(self.draft_model).start(engine)
        N, V, dev = engine.num_tokens, engine.vocab_size, engine.device
        A = engine.batch_size
        first = engine.sample(engine.prefill()[:, None])
        engine.commit(torch.zeros(A, 1, dtype=torch.long, device=dev), first)
        n = torch.ones(A, dtype=torch.long, device=dev)
        offsets = torch.arange(self.gamma + 1, device=dev)
        tv_sum = torch.zeros((), device=dev)
        tv_max = torch.zeros((), device=dev)
        tv_count = torch.zeros((), device=dev)
        while True:
            drafts, q = session.propose(n, self.gamma)  # [A, γ], [A, γ, V]
            targets = n[:, None] + offsets  # [A, γ + 1]
            real = targets < N
            last = engine.tokens[engine.active].gather(1, (n - 1)[:, None])
            inputs = torch.cat([last, drafts], dim=1)
            p = engine.evaluate(inputs, targets - 1, pad=~real)  # [A, γ + 1, V]
            drafts_full = torch.cat([drafts, torch.zeros_like(drafts[:, :1])], dim=1)
            q_full = torch.cat([q, torch.zeros_like(q[:, :1])], dim=1) * real[..., None]
            tokens, accepted, tv = relaxed_step(rule, p, q_full, drafts_full, engine.uniform((self.gamma + 1,)),
                                                engine.exponential((self.gamma + 1, V)), neighbours)
            n_acc = leading_accepted(accepted & (q_full.sum(-1) > 0))
            n_commit = torch.minimum(n_acc + 1, N - n)
            commit_mask = offsets < n_commit[:, None]
            engine.commit(targets, tokens, commit_mask)
            tv_sum += (tv * commit_mask).sum()
            tv_count += commit_mask.sum()
            tv_max = torch.maximum(tv_max, (tv * commit_mask).max())
            n = n + n_commit
            engine.truncate(n - 1)
            session.update(n)
            done = n >= N
            if bool(done.all()):  # host sync: once per iteration
                break
            if bool(done.any()):
                kept = engine.retire(~done)
                session.retire(kept)
                n = n.index_select(0, kept)
        extra: dict[str, Any] = {"gamma": self.gamma, "acceptance": self.acceptance}
        if not rule.lossless:
            extra.update(k=self.k, delta=self.delta, lam=self.lam,
                         tv_kind="realised (exact)" if rule.kind == "bounded" else "nominal c_m* (exact for one-hot q)",
                         mean_tv_per_token=float(tv_sum / tv_count.clamp_min(1)), max_tv_per_token=float(tv_max))
        return extra
