"""GSD's grouped acceptance (So et al., ICCV 2025): the rule as published, its exact output distribution (closed
form against enumeration and against sampling), the realised TV it reports, and the method end to end."""

from __future__ import annotations

import pytest
import torch

from arvis.acceptance.neighbours import nearest_neighbours
from arvis.acceptance.relaxed import (
    AcceptanceRule,
    gsd_output_distribution,
    realised_output_distribution,
    realised_tv,
    relaxed_step,
)
from arvis.acceptance.speculative import residual
from arvis.engine.sampling import SamplingConfig
from arvis.methods import build_method, decode, method_info
from arvis.models.protocol import Condition
from tests.acceptance.test_relaxed import V, tv
from tests.conftest import tiny_llamagen


def group(p: torch.Tensor, x: int, nb: torch.Tensor, rule: AcceptanceRule) -> list[int]:
    """GSD's group of draft x, written out: x plus its neighbours ranked and weighed like it by p."""
    order = sorted(range(len(p)), key=lambda v: (-float(p[v]), v))
    rank = {v: i for i, v in enumerate(order)}
    members = [x]
    for g in nb[x, : rule.k].tolist():
        if g >= 0 and abs(rank[g] - rank[x]) <= rule.ranks and abs(float(p[g]) - float(p[x])) < rule.gap:
            members.append(g)
    return members


def enumerated_output(p, q, nb, rule) -> torch.Tensor:
    """The output of one GSD step, enumerating the draft x ~ q (float64)."""
    if float(q.sum()) == 0:
        return p
    out = torch.zeros_like(p)
    for x in range(len(p)):
        if q[x] == 0:
            continue
        members = group(p, x, nb, rule)
        alpha = min(1.0, float(p[members].sum()) / float(q[members].sum()))
        out[x] += q[x] * alpha
        out += q[x] * (1 - alpha) * residual(p, q)
    return out


def instances(n: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    for i in range(n):
        p = (torch.randn(V, generator=g, dtype=torch.float64) * 1.5).softmax(-1)
        if i % 3 == 0:
            q = torch.nn.functional.one_hot(torch.randint(0, V, (1,), generator=g)[0], V).double()
        elif i % 3 == 1:
            q = (p + (torch.randn(V, generator=g, dtype=torch.float64) * 0.5).softmax(-1)) / 2
        else:
            q = (torch.randn(V, generator=g, dtype=torch.float64) * 1.5).softmax(-1)
        if i % 10 == 7:
            q = torch.zeros(V, dtype=torch.float64)
        yield p, q


RULES = [AcceptanceRule("gsd", k=4), AcceptanceRule("gsd", k=4, ranks=2, gap=0.05),
         AcceptanceRule("gsd", k=3, ranks=8, gap=1.0)]


@pytest.mark.parametrize("rule", RULES, ids=["default", "tight", "loose"])
def test_closed_form_output_equals_enumeration(neighbours, rule):
    cases = list(instances(60, seed=3))
    for p, q in cases:
        expected = enumerated_output(p, q, neighbours, rule)
        assert abs(float(expected.sum()) - 1) < 1e-12
        torch.testing.assert_close(gsd_output_distribution(p, q, neighbours, rule), expected, rtol=0, atol=1e-12)
        torch.testing.assert_close(gsd_output_distribution(p, q, neighbours, rule, max_elements=3), expected,
                                   rtol=0, atol=1e-12)
    ps = torch.stack([p for p, _ in cases]).view(4, 15, V)
    qs = torch.stack([q for _, q in cases]).view(4, 15, V)
    batched = gsd_output_distribution(ps.float(), qs.float(), neighbours, rule)
    expected = torch.stack([enumerated_output(p, q, neighbours, rule) for p, q in cases]).view(4, 15, V)
    torch.testing.assert_close(batched.double(), expected, rtol=0, atol=2e-6)


def test_without_a_group_gsd_is_exact(neighbours):
    """ranks = 0 (no neighbour ranked like the draft but itself) or gap = 0: the group is the draft alone, and GSD
    is exact speculative acceptance (realised TV 0)."""
    for p, q in instances(30, seed=4):
        for rule in (AcceptanceRule("gsd", k=4, ranks=0), AcceptanceRule("gsd", k=4, gap=0.0)):
            assert float(realised_tv(p, q, neighbours, rule)) < 1e-12


def test_reported_tv_is_the_realised_tv(neighbours):
    rule = AcceptanceRule("gsd", k=4, ranks=8, gap=1.0, tv=True)
    p, q = list(instances(3, seed=11))[2]
    n = 200_000
    g = torch.Generator().manual_seed(5)
    drafts = torch.argmax(q.float() / torch.empty(n, V).exponential_(generator=g), dim=-1)
    tokens, accepted, reported = relaxed_step(rule, p.float().expand(n, V), q.float().expand(n, V), drafts,
                                              torch.rand(n, generator=g), torch.empty(n, V).exponential_(generator=g),
                                              neighbours)
    expected = realised_output_distribution(p, q, neighbours, rule)
    freq = torch.bincount(tokens, minlength=V).double() / n
    assert tv(freq, expected) < 0.006
    assert tv(expected, p) > 0.02  # the case has teeth: GSD moves mass here
    assert abs(float(reported[0]) - tv(expected, p)) < 1e-5
    # Grouped acceptance accepts at least as often as exact acceptance would.
    exact_rate = float(torch.minimum(p, q).sum())
    assert float(accepted.double().mean()) > exact_rate + 0.01


def test_position_without_draft_samples_p(neighbours):
    p = (torch.randn(V, generator=torch.Generator().manual_seed(1)) * 1.5).softmax(-1)
    rule = AcceptanceRule("gsd", k=4, ranks=8, gap=1.0, tv=True)
    n = 100_000
    g = torch.Generator().manual_seed(0)
    tokens, accepted, reported = relaxed_step(rule, p.expand(n, V), torch.zeros(n, V), torch.zeros(n, dtype=torch.long),
                                              torch.rand(n, generator=g), torch.empty(n, V).exponential_(generator=g),
                                              neighbours)
    assert tv(torch.bincount(tokens, minlength=V).double() / n, p) < 0.006
    assert not accepted.any() and float(reported.abs().max()) == 0.0


def test_gsd_method_runs_reports_tv_and_refuses_what_it_cannot_do():
    model = tiny_llamagen("c2i", grid=4, vocab=32)
    nb = nearest_neighbours(torch.randn(32, 4, generator=torch.Generator().manual_seed(2)), 10)
    cond = Condition(class_labels=torch.tensor([0, 1, 2]))
    tokens, stats = decode(model, cond, SamplingConfig(guidance_scale=2.0), "gsd", torch.Generator().manual_seed(0),
                           window=4, neighbours=nb, gap=0.5, ranks=10, tv=True)
    extra = stats.samples[0].extra
    assert extra["acceptance"] == "gsd" and extra["gap"] == 0.5 and 0 < extra["mean_tv_per_token"] <= 1
    # Without tv=true the TV is not computed, and not reported as a zero either; the tokens are the same.
    same, unmeasured = decode(model, cond, SamplingConfig(guidance_scale=2.0), "gsd", torch.Generator().manual_seed(0),
                              window=4, neighbours=nb, gap=0.5, ranks=10)
    assert torch.equal(same, tokens) and "mean_tv_per_token" not in unmeasured.samples[0].extra
    assert not build_method("gsd").lossless and build_method("gsd", acceptance="exact").lossless
    assert method_info("gsd").requirements() == ("neighbours",)
    with pytest.raises(ValueError, match="relaxed acceptance needs coupling"):
        build_method("gsd", coupling="gumbel")
    with pytest.raises(ValueError, match="gap"):
        build_method("mc-sjd", acceptance="gsd", gap=2.0)
    # the acceptance rule is available to every method with an acceptance option
    assert build_method("mc-sjd", acceptance="gsd", ranks=3).acceptance.ranks == 3
