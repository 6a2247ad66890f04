"""Acceptance math: hand-built exact cases and exact (float64) identities."""

from __future__ import annotations

import torch

from arvis.acceptance.coupling import gumbel_argmax, maximal_coupling
from arvis.acceptance.speculative import (
    accept_drafts,
    acceptance_probability,
    leading_accepted,
    residual,
    speculative_step,
)


def test_accept_rule_on_hand_built_cases():
    p = torch.tensor([[0.5, 0.5, 0.0], [0.2, 0.3, 0.5], [0.2, 0.3, 0.5]])
    q = torch.tensor([[0.25, 0.75, 0.0], [0.2, 0.3, 0.5], [0.0, 0.0, 0.0]])  # last row: no draft
    d = torch.tensor([1, 2, 2])
    # accept iff U * q(d) < p(d): row 0 ratio 2/3, row 1 ratio 1 (p == q), row 2 never.
    assert accept_drafts(p, q, d, torch.tensor([0.66, 0.999, 0.0])).tolist() == [True, True, False]
    assert accept_drafts(p, q, d, torch.tensor([0.67, 0.0, 0.5])).tolist() == [False, True, False]
    torch.testing.assert_close(acceptance_probability(p, q, d), torch.tensor([2 / 3, 1.0, 0.0]))


def test_zero_probability_draft_is_never_accepted():
    p = torch.tensor([0.0, 1.0])
    q = torch.tensor([1.0, 0.0])  # one-hot draft at a token the target forbids
    assert not accept_drafts(p, q, torch.tensor(0), torch.tensor(0.0))
    assert residual(p, q).tolist() == [0.0, 1.0]


def test_residual_definition_and_guard():
    p = torch.tensor([0.1, 0.6, 0.3], dtype=torch.float64)
    q = torch.tensor([0.3, 0.2, 0.5], dtype=torch.float64)
    torch.testing.assert_close(residual(p, q), torch.tensor([0.0, 1.0, 0.0], dtype=torch.float64))
    same = residual(p, p)  # no mass: acceptance is certain, the guard returns a distribution, not NaN
    assert torch.isfinite(same).all() and abs(float(same.sum()) - 1) < 1e-12
    absent = residual(p, torch.zeros(3, dtype=torch.float64))  # no draft: residual is p (bonus token)
    torch.testing.assert_close(absent, p)


def test_leading_accepted_counts_until_first_rejection():
    acc = torch.tensor([[True, True, False, True], [False, True, True, True], [True] * 4, [False] * 4])
    assert leading_accepted(acc).tolist() == [2, 0, 4, 0]


def _exact_output_distribution(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """P(output = a) of accept-or-recover in float64, by enumerating the draft d ~ q."""
    V = p.shape[-1]
    out = torch.zeros(V, dtype=torch.float64)
    for d in range(V):
        if q[d] == 0:
            continue
        alpha = acceptance_probability(p, q, torch.tensor(d))
        out[d] += q[d] * alpha
        out += q[d] * (1 - alpha) * residual(p, q)
    return out


def test_accept_or_recover_yields_p_exactly_for_any_q():
    g = torch.Generator().manual_seed(0)
    for V in (2, 4, 9):
        for _ in range(50):
            p = torch.rand(V, generator=g, dtype=torch.float64) ** 3
            p[torch.randint(0, V, (1,), generator=g)] = 0  # zero-probability tokens
            p /= p.sum()
            for q in (torch.rand(V, generator=g, dtype=torch.float64), torch.ones(V, dtype=torch.float64),
                      torch.nn.functional.one_hot(torch.randint(0, V, (1,), generator=g)[0], V).double(), p.clone()):
                q = q / q.sum()
                torch.testing.assert_close(_exact_output_distribution(p, q), p, rtol=0, atol=1e-12)


def test_maximal_coupling_is_maximal_and_marginally_p():
    """Monte-Carlo over a batch: new drafts ~ p and P(unchanged) = 1 - TV(p, q)."""
    g = torch.Generator().manual_seed(1)
    p = torch.tensor([0.5, 0.3, 0.2, 0.0])
    q = torch.tensor([0.1, 0.2, 0.3, 0.4])
    n = 400_000
    noise = torch.empty(n, 4).exponential_(generator=g)
    drafts = torch.argmax(q / noise, dim=-1)  # d ~ q
    new, kept = maximal_coupling(p.expand(n, 4), q.expand(n, 4), drafts, torch.rand(n, generator=g),
                                 torch.empty(n, 4).exponential_(generator=g))
    freq = torch.bincount(new, minlength=4).double() / n
    assert (freq - p.double()).abs().max() < 0.004
    tv = 0.5 * (p - q).abs().sum()
    assert abs(float((new == drafts).double().mean()) - (1 - float(tv))) < 0.004
    assert torch.equal(kept, (new == drafts) & kept)


def test_speculative_step_is_vectorised_over_batch_and_window():
    g = torch.Generator().manual_seed(2)
    p = torch.rand(3, 5, 7, generator=g).softmax(-1)
    q = torch.rand(3, 5, 7, generator=g).softmax(-1)
    d = torch.randint(0, 7, (3, 5), generator=g)
    u = torch.rand(3, 5, generator=g)
    e = torch.empty(3, 5, 7).exponential_(generator=g)
    tokens, acc = speculative_step(p, q, d, u, e)
    for b in range(3):
        for j in range(5):
            t1, a1 = speculative_step(p[b, j], q[b, j], d[b, j], u[b, j], e[b, j])
            assert t1 == tokens[b, j] and a1 == acc[b, j]
    assert tokens.dtype == torch.long and ((tokens >= 0) & (tokens < 7)).all()


def test_gumbel_argmax_never_picks_zero_probability():
    p = torch.tensor([0.0, 0.5, 0.5, 0.0])
    g = -torch.log(torch.empty(10_000, 4).exponential_(generator=torch.Generator().manual_seed(3)))
    picks = gumbel_argmax(p.expand(10_000, 4), g)
    assert set(picks.tolist()) == {1, 2}
