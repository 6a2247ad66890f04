"""SJD and MC-SJD are lossless: exact enumeration, a statistical test with teeth, greedy equivalence.

See tests/lossless_harness.py for the table model and the calibration of the thresholds.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

import arvis.acceptance.coupling as coupling_module
from arvis.acceptance import speculative as spec
from arvis.drafting.jacobi import JacobiSession
from arvis.acceptance.speculative import acceptance_probability, residual
from arvis.engine.sampling import SamplingConfig
from arvis.methods import decode
from arvis.models.protocol import Condition
from tests.conftest import tiny_llamagen
from tests.lossless_harness import TableBackbone, compare, exact_next_token, run_method, sequence_code

N_SAMPLES = 200_000
NO_CFG = SamplingConfig()
CFG = SamplingConfig(guidance_scale=3.0)
CFG_TOPK = SamplingConfig(guidance_scale=3.0, top_k=2)


@pytest.fixture(scope="module")
def table():
    return TableBackbone(seed=0)


@pytest.fixture(scope="module")
def exact(table):
    cache = {}

    def get(sampling: SamplingConfig) -> np.ndarray:
        if sampling not in cache:
            cache[sampling] = table.sequence_probabilities(1, sampling)
        return cache[sampling]

    return get


# --------------------------------------------------------------------------- exact enumeration
def _conditional(table: TableBackbone, prefix: tuple[int, ...], sampling: SamplingConfig) -> torch.Tensor:
    padded = torch.tensor(prefix + (0,) * (table.N - len(prefix)))
    row = table.prefix_id(padded, torch.tensor(len(prefix)))
    return torch.from_numpy(exact_next_token(table.table[1, row], table.table[2, row], sampling, len(prefix)))


def _complete(table, prefix, sampling, mass, out):
    """Finish ``prefix`` with the exact target conditionals, adding ``mass`` × P(completion) into ``out``."""
    if len(prefix) == table.N:
        out[sequence_code(prefix, table.V)] += mass
        return
    p = _conditional(table, prefix, sampling)
    for a in range(table.V):
        if p[a] > 0:
            _complete(table, prefix + (a,), sampling, mass * float(p[a]), out)


def _one_verification_step(table, prefix, qs, sampling):
    """Exact distribution over full sequences: one SJD step on a window with drafts ~ qs, then exact AR.

    Drafts d_1..d_L are drawn independently from ``qs``; the step verifies them left to right with
    the acceptance functions of arvis.acceptance (float64), recovers from the residual at the first
    rejection, or draws the bonus token from p_{L+1}.
    """
    out = np.zeros(table.V ** table.N)
    L = len(qs)
    for drafts in itertools.product(range(table.V), repeat=L):
        p_drafts = float(np.prod([float(q[d]) for q, d in zip(qs, drafts, strict=True)]))
        if p_drafts == 0:
            continue
        reach = p_drafts  # probability of the drafts and of every verification so far succeeding
        for k in range(L + 1):
            context = prefix + drafts[:k]
            if len(context) == table.N:
                out[sequence_code(context, table.V)] += reach
                break
            p = _conditional(table, context, sampling)
            if k == L:  # all accepted: bonus token from p
                for a in range(table.V):
                    _complete(table, context + (a,), sampling, reach * float(p[a]), out)
                break
            q = qs[k]
            alpha = float(acceptance_probability(p, q, torch.tensor(drafts[k])))
            r = residual(p, q)
            for a in range(table.V):
                if r[a] > 0:
                    _complete(table, context + (a,), sampling, reach * (1 - alpha) * float(r[a]), out)
            reach *= alpha
    return out


@pytest.mark.parametrize("sampling", [NO_CFG, CFG_TOPK], ids=["no-cfg", "cfg-topk"])
def test_one_verification_step_is_exact_by_enumeration(table, exact, sampling):
    g = torch.Generator().manual_seed(0)
    V = table.V
    uniform = torch.full((V,), 1 / V, dtype=torch.float64)
    one_hot = torch.nn.functional.one_hot(torch.tensor(2), V).double()
    other = torch.rand(V, generator=g, dtype=torch.float64)
    other /= other.sum()
    neighbour = _conditional(table, (1,), sampling)  # a real model distribution at another position
    target = exact(sampling)
    assert target.sum() == pytest.approx(1.0, abs=1e-12)
    for prefix, qs in [((), [uniform, uniform]), ((1,), [one_hot, other, uniform]), ((3, 0), [neighbour, one_hot]),
                       ((2, 2, 1), [other, neighbour, neighbour])]:
        # The step starts after `prefix` was committed: compare with the target conditioned on it.
        got = _one_verification_step(table, prefix, qs, sampling)
        expected = np.zeros_like(target)
        _complete(table, prefix, sampling, 1.0, expected)
        assert abs(got.sum() - 1) < 1e-12
        np.testing.assert_allclose(got, expected, rtol=0, atol=1e-12)
    # With an empty prefix the step's output is the model's own distribution.
    np.testing.assert_allclose(_one_verification_step(table, (), [uniform, neighbour], sampling), target,
                               rtol=0, atol=1e-12)


# --------------------------------------------------------------------------- statistical tests
# Every method x every initialisation, rotating the sampling settings so that each method and each
# initialisation is checked without CFG, with CFG, and with CFG + top-k.
SETTINGS = [NO_CFG, CFG, CFG_TOPK]
INITS = ["random", "repeat_horizontal", "repeat_vertical", "neighbour_distribution"]
CASES = []
for m_i, (method, options) in enumerate([("sjd", {}), ("mc-sjd", {}), ("mc-sjd", {"coupling": "gumbel"})]):
    for i_i, init in enumerate(INITS):
        window = 2 + (m_i + i_i) % 2  # windows of 2 and 3 on a 6-token sequence
        CASES.append((method, {**options, "init": init, "window": window}, SETTINGS[(m_i + i_i) % 3]))
CASES += [
    ("ar", {}, CFG_TOPK),
    ("sjd", {"window": 8, "init": "random"}, CFG),  # window longer than the sequence
    ("mc-sjd", {"window": 2, "batch_mode": "lockstep"}, NO_CFG),
    ("sjd", {"window": 3, "batch_mode": "lockstep", "init": "repeat_vertical"}, CFG_TOPK),
    ("mc-sjd", {"window": 3, "jacobi_interval": (2, 5), "init": "neighbour_distribution"}, CFG),
    # Draft-model speculative decoding (a different table model drafts).
    ("speculative", {"gamma": 2, "draft_model": TableBackbone(seed=5)}, CFG),
    ("speculative", {"gamma": 4, "draft_model": TableBackbone(seed=6, scale=1.0)}, CFG_TOPK),
    # Staircase windows (the ZipAR staircase as window shape), still verified in raster order.
    ("mc-sjd", {"window": 1, "window_shape": "staircase", "staircase_rows": 1, "staircase_step": 1}, CFG_TOPK),
    ("sjd", {"window": 2, "window_shape": "staircase", "staircase_rows": 1, "staircase_step": 2,
             "init": "neighbour_distribution"}, NO_CFG),
    ("mc-sjd", {"window": 2, "window_shape": "staircase", "staircase_rows": 1, "staircase_step": 1,
                "coupling": "gumbel", "init": "repeat_vertical"}, CFG),
]


@pytest.mark.parametrize("method, options, sampling", CASES,
                         ids=[f"{m}-{'-'.join(f'{k}={v}' for k, v in o.items() if k != 'draft_model')}-g{s.guidance_scale}k{s.top_k}"
                              for m, o, s in CASES])
def test_method_matches_exact_distribution(table, exact, method, options, sampling):
    observed = run_method(table, sampling, method, N_SAMPLES, seed=11, **options)
    tv, p_value = compare(exact(sampling), observed, N_SAMPLES)
    assert p_value >= 1e-4 and tv <= 0.015, f"TV {tv:.4f}, chi-square p {p_value:.2e}"


# --------------------------------------------------------------------------- negative controls
def _recover_from_p(p, q, drafts, uniform, noise):
    """Planted bug: on rejection sample from p instead of the residual."""
    accepted = spec.accept_drafts(p, q, drafts, uniform)
    return torch.where(accepted, drafts, spec.draw(p, noise)), accepted


def _claim_uniform_q(original):
    """Planted bug: drafts are drawn from a neighbour's distribution but reported as uniform."""

    def initialise(self, index, want, committed):
        store = self.store
        self.store = lambda index, mask, tokens, dist: store(index, mask, tokens, torch.full((self.V,), 1.0 / self.V))
        try:
            original(self, index, want, committed)
        finally:
            del self.store

    return initialise


def _keep_old_q(original):
    """Planted bug: after the coupling, store the draft's old distribution instead of this forward's p."""

    def update(self, committed, plan, p, verification, proposal, commit_mask):
        original(self, committed, plan, proposal.q, verification, proposal, commit_mask)

    return update


@pytest.mark.parametrize("bug", ["recover_from_p", "keep_old_q", "wrong_q"])
@pytest.mark.parametrize("sampling", [NO_CFG, CFG_TOPK], ids=["no-cfg", "cfg-topk"])
def test_harness_catches_planted_bugs(table, exact, monkeypatch, bug, sampling):
    method, options = "mc-sjd", {"window": 2, "init": "random"}
    if bug == "recover_from_p":
        monkeypatch.setattr(coupling_module, "speculative_step", _recover_from_p)
    elif bug == "keep_old_q":  # store the draft's old distribution after coupling (the reference's bug)
        monkeypatch.setattr(JacobiSession, "update", _keep_old_q(JacobiSession.update))
    else:  # drafts drawn from a neighbour's distribution but reported as uniform
        monkeypatch.setattr(JacobiSession, "initialise", _claim_uniform_q(JacobiSession.initialise))
        method, options = "sjd", {"window": 2, "init": "neighbour_distribution"}
    observed = run_method(table, sampling, method, N_SAMPLES, seed=12, **options)
    tv, p_value = compare(exact(sampling), observed, N_SAMPLES)
    assert tv >= 0.03 and p_value < 1e-4, f"planted bug {bug} went unnoticed: TV {tv:.4f}, p {p_value:.2e}"


# --------------------------------------------------------------------------- equivalences and edge cases
@pytest.mark.parametrize("method, options", [
    ("sjd", {"window": 4}), ("sjd", {"window": 7, "init": "repeat_vertical"}),
    ("mc-sjd", {"window": 5, "init": "neighbour_distribution"}), ("mc-sjd", {"window": 3, "coupling": "gumbel"}),
    ("mc-sjd", {"window": 32, "init": "repeat_horizontal"}),
    ("mc-sjd", {"window": 3, "window_shape": "staircase", "staircase_rows": 2, "staircase_step": 1}),
])
def test_greedy_equals_plain_ar_token_for_token(method, options):
    model = tiny_llamagen("c2i", grid=4, vocab=32)
    cond = Condition(class_labels=torch.tensor([0, 1, 2, 3, 4]))
    sampling = SamplingConfig(top_k=1, guidance_scale=2.0)
    ar, _ = decode(model, cond, sampling, "ar", torch.Generator().manual_seed(0))
    fast, stats = decode(model, cond, sampling, method, torch.Generator().manual_seed(1), **options)
    assert torch.equal(ar, fast)
    assert all(s.target_forwards <= 16 for s in stats.samples)


def test_gumbel_coupling_reproduces_plain_ar_with_the_same_generators():
    model = tiny_llamagen("c2i", grid=4, vocab=32)
    cond = Condition(class_labels=torch.tensor([0, 3, 4]))
    gens = lambda: [torch.Generator().manual_seed(s) for s in (5, 6, 7)]  # noqa: E731
    ar, _ = decode(model, cond, CFG, "ar", gens())
    fast, stats = decode(model, cond, CFG, "mc-sjd", gens(), window=8, coupling="gumbel")
    assert torch.equal(ar, fast)
    assert stats.summary()["target_forwards"] < 16


def test_all_drafts_accepted_when_the_drafter_is_exact():
    """Deterministic table (greedy): repeat drafts of a constant sequence are all accepted."""
    table = TableBackbone(seed=1)
    with torch.no_grad():
        table.table[...] = torch.tensor([5.0, 0.0, 0.0, 0.0], dtype=torch.float64)  # always token 0
    cond = Condition(class_labels=torch.tensor([1, 1]))
    tokens, stats = decode(table, cond, SamplingConfig(temperature=0.0), "sjd", torch.Generator().manual_seed(0),
                           window=8, init="repeat_horizontal")
    assert tokens.eq(0).all()
    # Prefill commits token 0, one forward verifies the 5 remaining drafts.
    assert [s.target_forwards for s in stats.samples] == [2, 2]


def test_no_draft_accepted_still_commits_one_token_per_forward():
    table = TableBackbone(seed=2)
    with torch.no_grad():  # the target always wants token 3; repeat drafts copy token 0 → rejected
        table.table[...] = torch.tensor([-50.0, -50.0, -50.0, 5.0], dtype=torch.float64)
        table.table[:, 0] = torch.tensor([5.0, -50.0, -50.0, -50.0], dtype=torch.float64)
    cond = Condition(class_labels=torch.tensor([1]))
    tokens, stats = decode(table, cond, SamplingConfig(temperature=0.0), "sjd", torch.Generator().manual_seed(0),
                           window=3, init="repeat_horizontal")
    assert tokens.tolist() == [[0, 3, 3, 3, 3, 3]]
    assert stats.samples[0].accepted_per_forward[:2] == [1, 1]


def test_ragged_batch_with_very_different_acceptance_per_row():
    """Rows whose targets are deterministic and rows that are diffuse decode in one batch, each exactly."""
    model = tiny_llamagen("c2i", grid=4, vocab=32)
    cond = Condition(class_labels=torch.tensor([0, 1, 2, 3]))
    gens = [torch.Generator().manual_seed(s) for s in range(4)]
    tokens, stats = decode(model, cond, SamplingConfig(guidance_scale=2.0), "mc-sjd", gens, window=6,
                           init="repeat_horizontal")
    forwards = [s.target_forwards for s in stats.samples]
    assert ((tokens >= 0) & (tokens < 32)).all()
    for s in stats.samples:
        assert sum(s.accepted_per_forward) == 16 and len(s.accepted_per_forward) == s.target_forwards
        assert sorted(set(s.commit_forward)) == list(range(s.target_forwards))
    assert stats.batch_target_forwards == max(forwards)


def test_batch_of_per_sample_generators_equals_single_runs():
    model = tiny_llamagen("c2i", grid=4, vocab=32)
    labels, seeds = [0, 1, 2], [21, 22, 23]
    batch, _ = decode(model, Condition(class_labels=torch.tensor(labels)), CFG, "mc-sjd",
                      [torch.Generator().manual_seed(s) for s in seeds], window=4)
    for i, (label, seed) in enumerate(zip(labels, seeds, strict=True)):
        single, _ = decode(model, Condition(class_labels=torch.tensor([label])), CFG, "mc-sjd",
                           [torch.Generator().manual_seed(seed)], window=4)
        assert torch.equal(batch[i], single[0])


def test_bad_options_raise():
    for options, match in [({"window": 0}, "window"), ({"init": "zeros"}, "init"), ({"coupling": "weird"}, "coupling"),
                           ({"batch_mode": "x"}, "batch_mode"), ({"jacobi_interval": (5, 2)}, "jacobi_interval")]:
        with pytest.raises(ValueError, match=match):
            decode(tiny_llamagen("c2i"), Condition(class_labels=torch.tensor([0])), NO_CFG, "sjd", None, **options)
    with pytest.raises(ValueError, match="mc-sjd: coupling"):
        decode(tiny_llamagen("c2i"), Condition(class_labels=torch.tensor([0])), NO_CFG, "mc-sjd", None, coupling="none")
