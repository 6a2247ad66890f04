"""Relaxed acceptance: the bounded rule keeps TV <= δ for any drafter; published LANTERN does not."""

from __future__ import annotations

import pytest
import torch

from arvis.acceptance.neighbours import nearest_neighbours
from arvis.acceptance.relaxed import (
    AcceptanceRule,
    bounded_relaxed_target,
    lantern_relaxed_target,
    realised_output_distribution,
    relaxed_step,
)
from arvis.engine.sampling import SamplingConfig
from arvis.methods import decode
from arvis.models.protocol import Condition
from tests.conftest import tiny_llamagen

V = 8


def tv(a: torch.Tensor, b: torch.Tensor) -> float:
    return 0.5 * float((a.double() - b.double()).abs().sum())


@pytest.fixture(scope="module")
def neighbours():
    return nearest_neighbours(torch.randn(V, 2, generator=torch.Generator().manual_seed(0)), 4)


def random_instances(n: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    for i in range(n):
        p = (torch.randn(V, generator=g, dtype=torch.float64) * 1.5).softmax(-1)
        if i % 3 == 0:  # deterministic (one-hot) draft
            q = torch.nn.functional.one_hot(torch.randint(0, V, (1,), generator=g)[0], V).double()
        elif i % 3 == 1:  # a drafter that confuses latent neighbours: p's mass shifted to neighbours
            q = (p + (torch.randn(V, generator=g, dtype=torch.float64) * 0.5).softmax(-1)) / 2
        else:  # an unrelated sampled drafter
            q = (torch.randn(V, generator=g, dtype=torch.float64) * 1.5).softmax(-1)
        yield p, q


def test_neighbourhoods_equal_brute_force():
    emb = torch.randn(37, 5, generator=torch.Generator().manual_seed(1))
    table = nearest_neighbours(emb, 6, chunk_size=8)  # chunks smaller than the codebook
    d = torch.cdist(emb.double(), emb.double())
    d.fill_diagonal_(float("inf"))
    for i in range(37):
        order = sorted(range(37), key=lambda j: (float(d[i, j]), j))[:6]
        assert table[i].tolist() == order
    valid = torch.ones(37, dtype=torch.bool)
    valid[[3, 9]] = False  # e.g. structural tokens: no neighbours, never a neighbour
    table = nearest_neighbours(emb, 6, valid=valid)
    assert (table[3] == -1).all() and (table[9] == -1).all()
    assert not ((table == 3) | (table == 9)).any()


@pytest.mark.parametrize("delta", [0.05, 0.1, 0.2])
def test_bounded_exact_tv_within_delta_for_any_drafter(neighbours, delta):
    rule = AcceptanceRule("bounded", k=4, delta=delta)
    for p, q in random_instances(600, seed=int(delta * 100)):
        out = realised_output_distribution(p, q, neighbours, rule)
        pi, moved = bounded_relaxed_target(p, q, neighbours, rule)
        assert tv(out, p) <= delta + 1e-6
        assert abs(tv(out, pi) - 0) < 1e-6  # the output is exactly π
        assert abs(tv(pi, p) - float(moved)) < 1e-6
        # Acceptance rises by exactly the mass moved: 1 - TV(π, q) = 1 - TV(p, q) + moved.
        assert abs((1 - tv(pi, q)) - (1 - tv(p, q) + float(moved))) < 1e-6


def test_bounded_measured_tv_by_sampling(neighbours):
    """N = 200,000 one-step draws with sampled drafts: measured TV to p <= δ + 0.015."""
    rule = AcceptanceRule("bounded", k=4, delta=0.1)
    g = torch.Generator().manual_seed(3)
    p, q = list(random_instances(3, seed=11))[2]
    n = 200_000
    noise = torch.empty(n, V).exponential_(generator=g)
    drafts = torch.argmax(q.float() / noise, dim=-1)
    tokens, accepted, moved = relaxed_step(rule, p.float().expand(n, V), q.float().expand(n, V), drafts,
                                           torch.rand(n, generator=g), torch.empty(n, V).exponential_(generator=g),
                                           neighbours)
    freq = torch.bincount(tokens, minlength=V).double() / n
    assert tv(freq, p) <= 0.1 + 0.015
    pi, _ = bounded_relaxed_target(p, q, neighbours, rule)
    assert tv(freq, pi) <= 0.015  # and it is π that is sampled
    assert abs(float(accepted.double().mean()) - (1 - tv(pi, q))) < 0.005


def test_lantern_bound_holds_for_deterministic_drafts(neighbours):
    rule = AcceptanceRule("lantern", k=4, delta=0.1)
    for p, q in list(random_instances(300, seed=5))[::3]:  # the one-hot instances
        out = realised_output_distribution(p, q, neighbours, rule)
        relaxed, moved = lantern_relaxed_target(p[None], q.argmax()[None], neighbours, rule)
        assert tv(out, relaxed[0]) < 1e-9 and tv(out, p) <= 0.1 + 1e-9


def test_lantern_with_sampled_drafts_can_exceed_delta(neighbours):
    """A concrete case (documented so nobody mistakes published LANTERN for a bounded rule)."""
    p = torch.tensor([0.033, 0.012, 0.038, 0.024, 0.027, 0.036, 0.034, 0.794], dtype=torch.float64)
    q = torch.tensor([0.009, 0.275, 0.286, 0.13, 0.065, 0.062, 0.152, 0.02], dtype=torch.float64)
    p, q = p / p.sum(), q / q.sum()
    lantern = realised_output_distribution(p, q, neighbours, AcceptanceRule("lantern", k=4, delta=0.1))
    bounded = realised_output_distribution(p, q, neighbours, AcceptanceRule("bounded", k=4, delta=0.1))
    assert tv(lantern, p) > 0.35  # realised TV 0.387 at δ = 0.1
    assert tv(bounded, p) <= 0.1 + 1e-6


def test_lantern_plus_plus_caps_the_relaxed_mass(neighbours):
    rule = AcceptanceRule("lantern++", k=4, lam=2.0)
    for p, _ in random_instances(100, seed=7):
        x = torch.tensor([int(p.argmin())])
        relaxed, moved = lantern_relaxed_target(p[None], x, neighbours, rule)
        assert float(relaxed[0, x]) <= 2.0 * float(p[x]) + 1e-12
        assert abs(float(relaxed.sum()) - 1) < 1e-12


def test_tokens_without_neighbours_are_never_relaxed():
    emb = torch.randn(V, 2, generator=torch.Generator().manual_seed(0))
    valid = torch.ones(V, dtype=torch.bool)
    valid[7] = False  # a structural token
    nb = nearest_neighbours(emb, 4, valid=valid)
    p = torch.full((V,), 1 / V, dtype=torch.float64)
    relaxed, moved = lantern_relaxed_target(p[None], torch.tensor([7]), nb, AcceptanceRule("lantern", k=4, delta=0.5))
    assert float(moved) == 0 and torch.equal(relaxed[0], p)
    q = torch.nn.functional.one_hot(torch.tensor(7), V).double()
    pi, moved = bounded_relaxed_target(p, q, nb, AcceptanceRule("bounded", k=4, delta=0.5))
    assert float(moved) == 0 and tv(pi, p) < 1e-7


def test_speculative_relaxed_rules_run_and_report_tv():
    model = tiny_llamagen("c2i", grid=4, vocab=32)
    draft = tiny_llamagen("c2i", grid=4, vocab=32, seed=1, n_layer=1)
    nb = nearest_neighbours(torch.randn(32, 4, generator=torch.Generator().manual_seed(2)), 8)
    cond = Condition(class_labels=torch.tensor([0, 1]))
    _, exact = decode(model, cond, SamplingConfig(guidance_scale=2.0), "speculative", torch.Generator().manual_seed(0),
                      draft_model=draft, gamma=3)
    for kind in ("lantern", "lantern++", "bounded"):
        tokens, stats = decode(model, cond, SamplingConfig(guidance_scale=2.0), "speculative",
                               torch.Generator().manual_seed(0), draft_model=draft, gamma=3, acceptance=kind,
                               neighbours=nb, k=8, delta=0.1)
        extra = stats.samples[0].extra
        assert ((tokens >= 0) & (tokens < 32)).all() and "mean_tv_per_token" in extra
        if kind == "bounded":
            assert extra["max_tv_per_token"] <= 0.1 + 1e-6
    with pytest.raises(ValueError, match="neighbourhoods"):
        decode(model, cond, SamplingConfig(), "speculative", None, draft_model=draft, acceptance="bounded")
    with pytest.raises(ValueError, match="draft_model"):
        decode(model, cond, SamplingConfig(), "speculative", None)


def test_greedy_speculative_equals_ar():
    model = tiny_llamagen("c2i", grid=4, vocab=32)
    draft = tiny_llamagen("c2i", grid=4, vocab=32, seed=3, n_layer=1)
    cond = Condition(class_labels=torch.tensor([0, 1, 2]))
    ar, _ = decode(model, cond, SamplingConfig(top_k=1), "ar", None)
    sd, stats = decode(model, cond, SamplingConfig(top_k=1), "speculative", None, draft_model=draft, gamma=4)
    assert torch.equal(ar, sd) and stats.samples[0].draft_forwards > 0
    self_draft, stats = decode(model, cond, SamplingConfig(guidance_scale=2.0), "speculative",
                               torch.Generator().manual_seed(0), draft_model=model, gamma=4)
    assert all(s.target_forwards == 4 for s in stats.samples)  # a perfect drafter: γ + 1 tokens per forward
