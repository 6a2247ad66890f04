"""SJD-PAC is lossless: the multi-draft rule by exact enumeration, the implementation against the rule, the whole
method against the exact distribution of a table model (tests/lossless_harness.py, the decision rule of
tests/methods/test_lossless.py), with CFG on and off, every initialisation and coupling, ragged batches and per-sample
generators — and planted bugs, among them the two published choices arvis does not make, must fail.

Measured at N = 50,000 (seed 41): the planted bugs give TV 0.04-0.35 against a noise bound of about 0.02, with
chi-square p far below 1e-4 (their messages print the verdicts).
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

import arvis.acceptance.multidraft as multidraft
import arvis.acceptance.verify as verify_module
import arvis.drafting.tree as tree_module
from arvis.acceptance.multidraft import gumbel_multi_draft, multi_draft_step, successive_sample
from arvis.engine.sampling import SamplingConfig
from arvis.engine.schedules import TreeShape
from arvis.methods import build_method, decode, method_info
from arvis.methods.draft_verify import DraftVerifyLoop
from arvis.models.protocol import Condition
from tests.conftest import tiny_llamagen
from tests.lossless_harness import batch_equals_single_runs, check, run_method
from tests.methods.test_lossless import CFG, CFG_TOPK, N_SAMPLES, NO_CFG, plant


# --------------------------------------------------------------------------- the rule, exactly
def rule_output(p: np.ndarray, q: np.ndarray, K: int) -> np.ndarray:
    """Exact output distribution of recursive rejection sampling without replacement with K candidates,
    by enumeration of every ordered candidate tuple (written out here, independently of arvis)."""
    V = len(p)
    out = np.zeros(V)
    support = [v for v in range(V) if q[v] > 0]

    def rounds(target, proposal, drawn, weight):
        left = proposal.sum()
        if len(drawn) == K or left <= 0:  # no candidate left: the token comes from the last residual
            out[:] += weight * target
            return
        qk = proposal / left
        for c in range(V):
            if qk[c] == 0:
                continue
            a = min(1.0, target[c] / qk[c])
            out[c] += weight * qk[c] * a
            r = np.maximum(target - qk, 0)
            if a < 1 and r.sum() > 0:  # (target == q up to rounding: acceptance is certain)
                nxt = r / r.sum()
                removed = proposal.copy()
                removed[c] = 0
                rounds(nxt, removed, drawn + [c], weight * qk[c] * (1 - a))

    rounds(p.astype(np.float64), q.astype(np.float64), [], 1.0)
    assert len(support) >= 1
    return out


def _cases(V: int = 5, seed: int = 0):
    g = np.random.default_rng(seed)
    p = g.random(V) ** 3
    p /= p.sum()
    general = g.random(V) ** 2
    general[1] = 0.0
    general /= general.sum()
    uniform = np.full(V, 1 / V)
    one_hot = np.eye(V)[2]
    two = np.zeros(V)
    two[[0, 3]] = [0.7, 0.3]
    p_gap = p.copy()
    p_gap[4] = 0.0
    p_gap /= p_gap.sum()
    return [(p, general), (p, uniform), (p, one_hot), (p, two), (p_gap, general), (p, p)]


@pytest.mark.parametrize("K", [1, 2, 3, 5])
def test_multi_draft_rule_is_exact_by_enumeration(K):
    for p, q in _cases():
        np.testing.assert_allclose(rule_output(p, q, K), p, rtol=0, atol=1e-12)


def _reference_step(p, q, cands, has, U, u):
    """The rule literally, one position at a time, in float64 (the recovered token by inverse CDF)."""
    target, proposal = p.clone(), q.clone()
    for k in range(len(cands)):
        if not has[k] or proposal.sum() <= 0:
            continue
        qk = proposal / proposal.sum()
        c = int(cands[k])
        if qk[c] > 0 and U[k] * qk[c] < target[c]:
            return c, k
        r = (target - qk).clamp_min(0)
        target = r / r.sum() if r.sum() > 0 else target
        proposal[c] = 0
    cdf = target.cumsum(0)
    return int(torch.searchsorted(cdf, u * cdf[-1], right=True).clamp_max(len(p) - 1)), -1


def test_implementation_follows_the_rule():
    g = torch.Generator().manual_seed(3)
    V, K, n = 6, 3, 4000
    p = torch.rand(n, V, generator=g, dtype=torch.float64) ** 3
    p /= p.sum(-1, keepdim=True)
    q = torch.rand(n, V, generator=g, dtype=torch.float64) ** 2
    q[: n // 4, :3] = 0  # some positions with a support smaller than K
    q /= q.sum(-1, keepdim=True)
    first = torch.multinomial(q, 1, generator=g)[:, 0]
    extra, extra_has = successive_sample(q, first, torch.empty(n, V, dtype=torch.float64).exponential_(generator=g),
                                         K - 1)
    cands = torch.cat([first[:, None], extra], -1)
    has = torch.cat([torch.ones(n, 1, dtype=torch.bool), extra_has], -1)
    assert not (has[:, 1:] & (cands[:, 1:] == first[:, None])).any()  # without replacement
    U = torch.rand(n, K, generator=g, dtype=torch.float64)
    u = torch.rand(n, generator=g, dtype=torch.float64)
    tokens, rank, _ = multi_draft_step(p, q, cands, has, U, u)
    expected = [_reference_step(p[i], q[i], cands[i], has[i], U[i], u[i]) for i in range(n)]
    assert tokens.tolist() == [t for t, _ in expected]
    assert rank.tolist() == [r for _, r in expected]


def test_one_candidate_is_the_single_draft_step():
    from arvis.acceptance.speculative import speculative_step

    g = torch.Generator().manual_seed(5)
    p = torch.softmax(torch.randn(500, 7, generator=g), -1)
    q = torch.softmax(torch.randn(500, 7, generator=g), -1)
    d = torch.multinomial(q, 1, generator=g)[:, 0]
    U, u = torch.rand(500, generator=g), torch.rand(500, generator=g)
    single, accepted = speculative_step(p, q, d, U, u)
    tokens, rank, coupled = multi_draft_step(p, q, d[:, None], torch.ones(500, 1, dtype=torch.bool), U[:, None], u)
    assert torch.equal(tokens, single) and torch.equal(coupled, single) and torch.equal(rank >= 0, accepted)


def test_more_candidates_accept_more_and_gumbel_accepts_its_own_argmax():
    g = torch.Generator().manual_seed(6)
    p = torch.softmax(torch.randn(20000, 9, generator=g), -1)
    q = torch.softmax(torch.randn(20000, 9, generator=g), -1)
    first = torch.multinomial(q, 1, generator=g)[:, 0]
    rates = []
    for K in (1, 2, 4):
        extra, extra_has = successive_sample(q, first, torch.empty(20000, 9).exponential_(generator=g), K - 1)
        cands = torch.cat([first[:, None], extra], -1)
        has = torch.cat([torch.ones(20000, 1, dtype=torch.bool), extra_has], -1)
        _, rank, _ = multi_draft_step(p, q, cands, has, torch.rand(20000, K, generator=g), torch.rand(20000, generator=g))
        rates.append(float((rank >= 0).float().mean()))
    assert rates[0] < rates[1] < rates[2]
    E = torch.empty(20000, 9).exponential_(generator=g)
    tokens, rank = gumbel_multi_draft(p, torch.stack([p.argmax(-1), (p / E).argmax(-1)], -1),
                                      torch.ones(20000, 2, dtype=torch.bool), E)
    assert torch.equal(tokens, (p / E).argmax(-1)) and bool((rank >= 0).all())


def test_tree_shape():
    shape = TreeShape.build(window=4, width=3, depth=2)
    assert shape.extra == 2 + 8 and shape.children.shape == (15, 3)
    assert shape.children[0].tolist() == [1, 5, 6] and shape.children[2].tolist() == [3, -1, -1]
    assert shape.children[4].tolist() == [-1, -1, -1]  # the end of the chain: the bonus position
    assert (shape.node_depth[5:7] == 1).all() and (shape.node_depth[7:] == 2).all()
    assert shape.ancestors[9].nonzero().flatten().tolist() == [0, 5, 9]  # root, its rank-1 child, itself
    assert method_info("sjd-pac").check_options({"tree_width": 3, "tree_depth": 3})["window"] == 16
    assert build_method("sjd-pac", tree_width=4, tree_depth=3).positions_per_forward == 17 + 3 + 15
    for bad in ({"tree_depth": 6, "window": 4}, {"tree_width": 16, "tree_depth": 6}):
        with pytest.raises(ValueError, match="sjd-pac"):
            method_info("sjd-pac").check_options(bad)


# --------------------------------------------------------------------------- the method, statistically
INITS = ["random", "repeat_horizontal", "repeat_vertical", "neighbour_distribution"]
CASES = [
    ({"window": 2, "tree_width": 2, "tree_depth": 2}, NO_CFG),
    ({"window": 3, "tree_width": 3, "tree_depth": 3}, CFG),
    ({"window": 3, "tree_width": 4, "tree_depth": 3}, CFG_TOPK),  # more candidates than top-k leaves
    ({"window": 2, "tree_width": 2, "tree_depth": 3, "init": "repeat_horizontal"}, CFG),
    ({"window": 4, "tree_width": 3, "tree_depth": 2, "init": "repeat_vertical"}, NO_CFG),
    ({"window": 3, "tree_width": 2, "tree_depth": 4, "init": "neighbour_distribution"}, CFG_TOPK),
    ({"window": 3, "tree_width": 3, "tree_depth": 3, "coupling": "gumbel"}, CFG),
    ({"window": 2, "tree_width": 2, "tree_depth": 3, "coupling": "gumbel", "init": "neighbour_distribution"}, NO_CFG),
    ({"window": 2, "tree_width": 3, "tree_depth": 2, "coupling": "none"}, CFG),
    ({"window": 3, "tree_width": 2, "tree_depth": 3, "jacobi_interval": (2, 5)}, CFG_TOPK),
    ({"window": 8, "tree_width": 2, "tree_depth": 3}, NO_CFG),  # window longer than the sequence
]


def _case_id(options, sampling) -> str:
    return "-".join(f"{k}={v}" for k, v in options.items()) + f"-g{sampling.guidance_scale}k{sampling.top_k}"


@pytest.mark.parametrize("options, sampling", CASES, ids=[_case_id(*c) for c in CASES])
def test_sjd_pac_matches_exact_distribution(table, exact, options, sampling):
    observed = run_method(table, sampling, "sjd-pac", N_SAMPLES, seed=40, **options)
    verdict = check(exact(sampling), observed, N_SAMPLES)
    assert verdict.passed, str(verdict)


def _plant_rule(monkeypatch, name: str, old: str, new: str) -> None:
    """Plant a bug in a function of :mod:`arvis.acceptance.multidraft` and in the modules that imported it."""
    plant(monkeypatch, multidraft, name, old, new)
    for user in (verify_module, tree_module):
        if hasattr(user, name):
            monkeypatch.setattr(user, name, getattr(multidraft, name))


def _last_accepted_rank(monkeypatch):
    """The first accepted candidate is replaced by the last accepted one (a path choice after the fact, like
    the reference keeping the longest accepted path)."""
    _plant_rule(monkeypatch, "multi_draft_step", "rank = torch.where((rank < 0) & accepted, k, rank)",
                "rank = torch.where(accepted, k, rank)")


def _no_residual_between_rounds(monkeypatch):
    """Every candidate is tested against p itself instead of the residual left by the rejected ones."""
    _plant_rule(monkeypatch, "multi_draft_step", "target = torch.where(live[..., None], after, target)",
                "target = target")


def _candidates_with_replacement(monkeypatch):
    """Extra candidates may repeat the chain's draft (drawn with replacement), verified as if without."""
    _plant_rule(monkeypatch, "successive_sample", "keys = keys.scatter(-1, first[..., None], -1.0)", "keys = keys")


def _bonus_refresh_against_stale_q(monkeypatch):
    """A position without a candidate (the bonus) is refreshed from its residual against a stale q instead of
    from p (a bug the harness caught while SJD-PAC was written)."""
    _plant_rule(monkeypatch, "multi_draft_step", "torch.where((left > 0) & live[..., None], residual, target)",
                "torch.where(left > 0, residual, target)")


def _path_not_settled(monkeypatch):
    """A committed path through the tree's scratch slots leaves the chain's rejected candidate in the cache."""
    plant(monkeypatch, DraftVerifyLoop, "commit",
          "self.engine.settle(plan.tree.scratch, plan.inputs_index, commit_mask)", "pass")


PLANTED = {
    "last-accepted-rank": (_last_accepted_rank, {"window": 3, "tree_width": 3, "tree_depth": 3}, NO_CFG),
    "no-residual-between-rounds": (_no_residual_between_rounds, {"window": 2, "tree_width": 3, "tree_depth": 2},
                                   NO_CFG),
    "candidates-with-replacement": (_candidates_with_replacement, {"window": 2, "tree_width": 3, "tree_depth": 2},
                                    NO_CFG),
    "path-not-settled": (_path_not_settled, {"window": 3, "tree_width": 3, "tree_depth": 3}, NO_CFG),
    "bonus-refresh-against-stale-q": (_bonus_refresh_against_stale_q, {"window": 1, "tree_width": 2,
                                                                       "tree_depth": 2}, NO_CFG),
}


@pytest.mark.parametrize("bug", list(PLANTED))
def test_harness_catches_planted_sjd_pac_bugs(table, exact, monkeypatch, bug):
    planter, options, sampling = PLANTED[bug]
    planter(monkeypatch)
    observed = run_method(table, sampling, "sjd-pac", N_SAMPLES, seed=41, **options)
    verdict = check(exact(sampling), observed, N_SAMPLES)
    assert not verdict.passed, f"planted bug {bug} went unnoticed: {verdict}"


# --------------------------------------------------------------------------- equivalences
@pytest.mark.parametrize("options", [{"window": 4}, {"window": 3, "tree_width": 4, "tree_depth": 3},
                                     {"window": 5, "coupling": "gumbel", "init": "repeat_vertical"}])
def test_greedy_equals_plain_ar_token_for_token(options):
    model = tiny_llamagen("c2i", grid=4, vocab=32)
    cond = Condition(class_labels=torch.tensor([0, 1, 2, 3, 4]))
    sampling = SamplingConfig(top_k=1, guidance_scale=2.0)
    ar, _ = decode(model, cond, sampling, "ar", torch.Generator().manual_seed(0))
    fast, stats = decode(model, cond, sampling, "sjd-pac", torch.Generator().manual_seed(1), **options)
    assert torch.equal(ar, fast)
    for s in stats.samples:
        assert min(s.accepted_per_forward) >= 1 and sum(s.accepted_per_forward) == 16


@pytest.mark.parametrize("options", [{"tree_width": 3, "tree_depth": 3}, {"tree_width": 2, "tree_depth": 4},
                                     {"tree_width": 4, "tree_depth": 2, "init": "neighbour_distribution"}])
def test_gumbel_sjd_pac_reproduces_plain_ar_with_the_same_generators(options):
    """Gumbel coupling: every committed token is the Gumbel-max of its true conditional with the noise plain AR
    uses, whichever candidate of the tree carried it — so SJD-PAC reproduces AR's tokens, in fewer forwards."""
    model = tiny_llamagen("c2i", grid=4, vocab=32)
    cond = Condition(class_labels=torch.tensor([0, 3, 4]))
    gens = lambda: [torch.Generator().manual_seed(s) for s in (5, 6, 7)]  # noqa: E731
    ar, _ = decode(model, cond, CFG, "ar", gens())
    fast, stats = decode(model, cond, CFG, "sjd-pac", gens(), window=8, coupling="gumbel", **options)
    assert torch.equal(ar, fast)
    assert stats.summary()["target_forwards"] < 16


def test_batch_of_per_sample_generators_equals_single_runs():
    batch_equals_single_runs(tiny_llamagen("c2i", grid=4, vocab=32), CFG, "sjd-pac", [21, 22, 23], window=4)


def test_ragged_batch_counts_add_up():
    model = tiny_llamagen("c2i", grid=4, vocab=32)
    cond = Condition(class_labels=torch.tensor([0, 1, 2, 3]))
    tokens, stats = decode(model, cond, SamplingConfig(guidance_scale=2.0), "sjd-pac",
                           [torch.Generator().manual_seed(s) for s in range(4)], window=6)
    assert ((tokens >= 0) & (tokens < 32)).all()
    for s in stats.samples:
        assert sum(s.accepted_per_forward) == 16 and len(s.accepted_per_forward) == s.target_forwards
    assert stats.batch_target_forwards == max(s.target_forwards for s in stats.samples)


def test_the_tree_raises_acceptance_over_mc_sjd_on_the_table_model(table):
    """The point of proactive drafting: fewer single-token forwards than MC-SJD at the same window."""
    cond = Condition(class_labels=torch.full((4000,), 1, dtype=torch.long))
    forwards = {}
    for method, options in (("mc-sjd", {}), ("sjd-pac", {"tree_width": 3, "tree_depth": 3})):
        _, stats = decode(table, cond, NO_CFG, method, torch.Generator().manual_seed(9), window=3, **options)
        forwards[method] = sum(s.target_forwards for s in stats.samples)
    assert forwards["sjd-pac"] < 0.95 * forwards["mc-sjd"], forwards


def test_options_are_refused_where_they_cannot_apply():
    model = tiny_llamagen("c2i", grid=4, vocab=32)
    cond = Condition(class_labels=torch.tensor([0]))
    for options, match in [({"acceptance": "lantern"}, "no option 'acceptance'"),
                           ({"batch_mode": "lockstep"}, "no option 'batch_mode'"),
                           ({"tree_width": 0}, "tree_width"), ({"window": 1, "tree_depth": 3}, "tree_depth")]:
        with pytest.raises(ValueError, match=match):
            decode(model, cond, NO_CFG, "sjd-pac", None, **options)
    assert list(itertools.islice(method_info("sjd-pac").options, 1))[0].name == "window"
