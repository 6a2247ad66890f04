"""SJD, MC-SJD and speculative decoding are lossless: exact enumeration, a calibrated statistical test with
teeth (planted bugs must fail it), greedy equivalence.

See tests/lossless_harness.py for the table model and the decision rule. Why N = 50,000 samples per case is
enough (checked by ``test_null_tv_calibration``): the table's distributions are peaked (at N = 50,000 only
32-147 of the 4,096 sequences have an expected count >= 5), so exact sampling gives an empirical TV of
0.005-0.016 and a perturbation of TV 0.03 — even one spread in proportion to p, the shape chi-square finds
hardest — moves the empirical TV above the 5-sigma noise bound and chi-square below p = 1e-4 in every draw.
The planted bugs below (TV 0.07-0.27) all fail at this N by a wide margin.
"""

from __future__ import annotations

import inspect
import textwrap

import numpy as np
import pytest
import torch

import arvis.acceptance.speculative as spec
from arvis.acceptance.speculative import acceptance_probability, residual
from arvis.drafting.draft_model import DraftModelSession
from arvis.drafting.jacobi import JacobiSession
from arvis.engine.engine import DecodeEngine
from arvis.engine.sampling import SamplingConfig
from arvis.methods import decode
from arvis.methods.window_policy import AutoWindow
from arvis.models.protocol import Condition
from tests.conftest import tiny_llamagen
from tests.lossless_harness import (
    NUM_CLASSES,
    TableBackbone,
    batch_equals_single_runs,
    check,
    decode_table,
    empirical,
    run_method,
    sequence_code,
    tv_bound,
)

N_SAMPLES = 50_000  # per case in the default run (see the module docstring)
N_SLOW = 200_000  # the slow suite's re-runs
NO_CFG = SamplingConfig()
CFG = SamplingConfig(guidance_scale=3.0)
CFG_TOPK = SamplingConfig(guidance_scale=3.0, top_k=2)


# The table model and its exact distributions: the ``table`` and ``exact`` fixtures of tests/conftest.py.


# --------------------------------------------------------------------------- exact enumeration
def _one_verification_step(table, cond, sampling, prefix, qs):
    """Exact distribution over full sequences: one SJD step on a window with drafts ~ qs, then exact AR.

    Drafts d_1..d_L are drawn independently from ``qs``; the step verifies them left to right with the
    acceptance functions of arvis.acceptance (float64), recovers from the residual at the first rejection,
    or draws the bonus token from p_{L+1}. ``cond`` holds every prefix's exact conditional (class 1).
    """
    out = np.zeros(table.V ** table.N)
    L = len(qs)
    drafts_all = torch.cartesian_prod(*[torch.arange(table.V)] * L).view(-1, L)
    for drafts in drafts_all.tolist():
        reach = float(np.prod([float(q[d]) for q, d in zip(qs, drafts, strict=True)]))
        if reach == 0:
            continue
        for k in range(L + 1):
            context = prefix + tuple(drafts[:k])
            if len(context) == table.N:
                out[sequence_code(context, table.V)] += reach
                break
            p = cond[table.offsets[len(context)] + sequence_code(context, table.V)]
            if k == L:  # all accepted: bonus token from p
                weights = reach * p
            else:
                alpha = float(acceptance_probability(p, qs[k], torch.tensor(drafts[k])))
                weights = reach * (1 - alpha) * residual(p, qs[k])
                reach *= alpha
            for a in torch.nonzero(weights > 0).flatten().tolist():
                out += float(weights[a]) * table.sequence_probabilities(1, sampling, context + (a,))
            if k == L:
                break
    return out


@pytest.mark.parametrize("sampling", [NO_CFG, CFG_TOPK], ids=["no-cfg", "cfg-topk"])
def test_one_verification_step_is_exact_by_enumeration(table, exact, sampling):
    g = torch.Generator().manual_seed(0)
    V = table.V
    cond = table.conditionals(1, sampling)
    uniform = torch.full((V,), 1 / V, dtype=torch.float64)
    one_hot = torch.nn.functional.one_hot(torch.tensor(2), V).double()
    other = torch.rand(V, generator=g, dtype=torch.float64)
    other /= other.sum()
    neighbour = cond[table.offsets[1] + 1]  # a real model distribution at another position
    target = exact(sampling)
    assert target.sum() == pytest.approx(1.0, abs=1e-12)
    for prefix, qs in [((), [uniform, uniform]), ((1,), [one_hot, other, uniform]), ((3, 0), [neighbour, one_hot]),
                       ((2, 2, 1), [other, neighbour, neighbour])]:
        # The step starts after `prefix` was committed: compare with the target conditioned on it.
        got = _one_verification_step(table, cond, sampling, prefix, qs)
        assert abs(got.sum() - 1) < 1e-12
        np.testing.assert_allclose(got, table.sequence_probabilities(1, sampling, prefix), rtol=0, atol=1e-12)
    # With an empty prefix the step's output is the model's own distribution.
    np.testing.assert_allclose(_one_verification_step(table, cond, sampling, (), [uniform, neighbour]), target,
                               rtol=0, atol=1e-12)


# --------------------------------------------------------------------------- calibration of the decision rule
@pytest.mark.parametrize("sampling", [NO_CFG, CFG, CFG_TOPK], ids=["no-cfg", "cfg", "cfg-topk"])
def test_null_tv_calibration(exact, sampling):
    """The decision rule against exact sampling (no method involved): false alarms and power at N_SAMPLES.

    - Null: 500 independent runs of N_SAMPLES exact draws from p. The rule must (almost) never fail them:
      chi-square is uniform under the null, so at ALPHA = 1e-4 about 0.05 false alarms are expected in 500
      runs, and the TV bound sits 5 null standard deviations above the null mean. The chi-square
      approximation is checked at the 1% level too (expected 5 of 500).
    - Power: p perturbed to a TV of exactly 0.03 — in proportion to p (mass moved between random halves of
      the sequences: the shape with the least chi-square signal per unit of TV) and concentrated (mass
      moved between the two likeliest sequences) — must fail the rule in every one of 100 runs.
    """
    p = exact(sampling)
    n = N_SAMPLES
    rng = np.random.default_rng(1)
    bound = tv_bound(p, n)
    null_verdicts = [check(p, rng.multinomial(n, p) / n, n) for _ in range(500)]
    false_alarms = sum(not v.passed for v in null_verdicts)
    at_one_percent = sum(v.p_value < 0.01 for v in null_verdicts)
    null_tv = np.array([v.tv for v in null_verdicts])
    assert false_alarms <= 1, f"{false_alarms} false alarms in 500 exact runs"
    assert at_one_percent <= 14, f"chi-square below 0.01 in {at_one_percent}/500 exact runs (expected ~5)"
    assert null_tv.max() < bound

    up = rng.random(p.size) < 0.5
    proportional = np.where(up, p * (1 + 0.03 / p[up].sum()), p * (1 - 0.03 / p[~up].sum()))
    concentrated = p.copy()
    concentrated[np.argsort(p)[-2:]] += [0.03, -0.03]
    for name, bug in [("proportional", proportional), ("concentrated", concentrated)]:
        assert 0.5 * np.abs(bug - p).sum() == pytest.approx(0.03) and bug.min() >= 0
        verdicts = [check(p, rng.multinomial(n, bug / bug.sum()) / n, n) for _ in range(100)]
        missed = [v for v in verdicts if v.passed]
        assert not missed, f"a TV-0.03 {name} perturbation passed: {missed[0]}"


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
    ("sjd", {"window": 8, "init": "random"}, NO_CFG),  # window longer than the sequence
    ("mc-sjd", {"window": 2, "batch_mode": "lockstep"}, NO_CFG),
    ("sjd", {"window": 3, "batch_mode": "lockstep", "init": "repeat_vertical"}, CFG_TOPK),
    ("mc-sjd", {"window": 3, "jacobi_interval": (2, 5), "init": "neighbour_distribution"}, CFG),
    # Draft-model speculative decoding (a different table model drafts).
    ("speculative", {"window": 2, "draft_model": TableBackbone(seed=5)}, CFG),
    ("speculative", {"window": 4, "draft_model": TableBackbone(seed=6, scale=1.0)}, CFG_TOPK),
    # Staircase windows (the ZipAR staircase as window shape), still verified in raster order.
    ("mc-sjd", {"window": 1, "window_shape": "staircase", "staircase_rows": 1, "staircase_step": 1}, CFG_TOPK),
    ("sjd", {"window": 2, "window_shape": "staircase", "staircase_rows": 1, "staircase_step": 2,
             "init": "neighbour_distribution"}, NO_CFG),
    ("mc-sjd", {"window": 2, "window_shape": "staircase", "staircase_rows": 1, "staircase_step": 1,
                "coupling": "gumbel", "init": "repeat_vertical"}, CFG),
]


def _case_id(method, options, sampling) -> str:
    shown = "-".join(f"{k}={v}" for k, v in options.items() if k != "draft_model")
    return f"{method}-{shown}-g{sampling.guidance_scale}k{sampling.top_k}"


@pytest.mark.parametrize("method, options, sampling", CASES, ids=[_case_id(*c) for c in CASES])
def test_method_matches_exact_distribution(table, exact, method, options, sampling):
    observed = run_method(table, sampling, method, N_SAMPLES, seed=11, **options)
    verdict = check(exact(sampling), observed, N_SAMPLES)
    assert verdict.passed, str(verdict)


SLOW_CASES = [CASES[4], CASES[10], CASES[15], CASES[18], CASES[20]]  # mc-sjd, gumbel, lockstep, speculative, staircase


@pytest.mark.slow
@pytest.mark.parametrize("method, options, sampling", SLOW_CASES, ids=[_case_id(*c) for c in SLOW_CASES])
def test_method_matches_exact_distribution_large_n(table, exact, method, options, sampling):
    observed = run_method(table, sampling, method, N_SLOW, seed=13, **options)
    verdict = check(exact(sampling), observed, N_SLOW)
    assert verdict.passed, str(verdict)


# --------------------------------------------------------------------------- planted bugs (negative controls)
def plant(monkeypatch, owner, name: str, old: str, new: str) -> None:
    """Replace ``owner.name`` by a copy of its source with ``old`` replaced by ``new`` (a mutation).

    Fails loudly when ``old`` is not in the source exactly once: a control that silently plants nothing
    would pass the harness for the wrong reason. After a refactor, re-point the snippet.
    """
    function = inspect.getattr_static(owner, name)
    module = inspect.getmodule(owner) if inspect.isclass(owner) else owner
    source = textwrap.dedent(inspect.getsource(getattr(function, "__func__", function)))
    assert source.count(old) == 1, f"planted bug: {old!r} not found once in {owner.__name__}.{name}; re-point it"
    namespace = dict(vars(module))
    exec(compile(source.replace(old, new), inspect.getsourcefile(module), "exec"), namespace)  # noqa: S102
    monkeypatch.setattr(owner, name, namespace[name])


def _residual_from_p(monkeypatch):
    """On rejection, sample p instead of normalize(max(0, p − q)) (the classic speculative-sampling bug)."""
    plant(monkeypatch, spec, "sample_residual", "r = (p.to(dtype) - q.to(dtype)).clamp_min(0.0)", "r = p.to(dtype)")


def _keep_old_q(monkeypatch):
    """After the draft refresh, keep the old draft's distribution (the reference Lumina/Janus MC-SJD bug)."""
    plant(monkeypatch, JacobiSession, "update", "self.store(targets, update, merged, p)",
          "self.store(targets, update, merged, proposal.q)")


def _claim_uniform_q(monkeypatch):
    """Neighbour-distribution drafts reported as drawn from the uniform distribution."""
    plant(monkeypatch, JacobiSession, "initialise", "self.store(index, want & (source >= 0) & in_ring, drafts, dist)",
          "self.store(index, want & (source >= 0) & in_ring, drafts, self._uniform_q)")


def _drafter_misreports_q(monkeypatch):
    """The draft model samples from its p but reports a smoothed q (e.g. q before top-k / temperature)."""
    plant(monkeypatch, DraftModelSession, "propose", "q[:, j] = p * (position < self.N)[:, None]",
          "q[:, j] = (p + 0.5 / self.V) / 1.5 * (position < self.N)[:, None]")


def _band_keeps_old_q(monkeypatch):
    """A staircase band redraws its drafts from its approximate p but leaves the old q recorded for them."""
    plant(monkeypatch, JacobiSession, "update", "self.store(targets, update, merged, p)",
          "self.store(targets, update, merged, torch.where(self._window_columns(targets.shape[1], K)[1][:, None], "
          "p, proposal.q))")


def _lockstep_keeps_drafts_past_the_cut(monkeypatch):
    """Lockstep SJD: drafts a sample accepted past the batch's cut are kept for the next forward (they were
    good), only the others are redrawn from p — but an accepted draft is not a draw from p."""
    plant(monkeypatch, JacobiSession, "update",
          "refreshed = refresh_drafts(self.drafter.coupling, p, verification.coupled, fresh)",
          "refreshed = torch.where(verification.accepted, proposal.drafts, "
          "refresh_drafts(self.drafter.coupling, p, verification.coupled, fresh))")


# (planter, method, options, sampling): each bug on the path it breaks. Measured at N = 50,000 (seed 12): TV
# 0.15, 0.20, 0.20, 0.27, 0.17, 0.08, 0.07 in this order, chi-square p < 1e-300 — far past the bound (0.022).
PLANTED_BUGS = {
    "sjd-residual-from-p": (_residual_from_p, "mc-sjd", {"window": 2, "init": "random"}, NO_CFG),
    "sjd-keep-old-q": (_keep_old_q, "mc-sjd", {"window": 2, "init": "random"}, NO_CFG),
    "sjd-wrong-q": (_claim_uniform_q, "sjd", {"window": 2, "init": "neighbour_distribution"}, NO_CFG),
    "speculative-residual-from-p": (_residual_from_p, "speculative",
                                    {"window": 2, "draft_model": TableBackbone(seed=5)}, NO_CFG),
    "speculative-drafter-misreports-q": (_drafter_misreports_q, "speculative",
                                         {"window": 4, "draft_model": TableBackbone(seed=6, scale=1.0)}, NO_CFG),
    "staircase-band-keeps-old-q": (_band_keeps_old_q, "sjd",
                                   {"window": 1, "window_shape": "staircase", "staircase_rows": 1,
                                    "staircase_step": 1, "init": "neighbour_distribution"}, NO_CFG),
    "lockstep-keeps-drafts-past-the-cut": (_lockstep_keeps_drafts_past_the_cut, "sjd",
                                           {"window": 3, "batch_mode": "lockstep", "init": "repeat_vertical"},
                                           NO_CFG),
}


@pytest.mark.parametrize("bug", list(PLANTED_BUGS))
def test_harness_catches_planted_bugs(table, exact, monkeypatch, bug):
    planter, method, options, sampling = PLANTED_BUGS[bug]
    planter(monkeypatch)
    observed = run_method(table, sampling, method, N_SAMPLES, seed=12, **options)
    verdict = check(exact(sampling), observed, N_SAMPLES)
    assert not verdict.passed, f"planted bug {bug} went unnoticed: {verdict}"


# --------------------------------------------------------------------------- issue 15.12: γ = 3, 3x3 grid, V = 2
def _speculative_joint(target: TableBackbone, draft: TableBackbone, label: int, sampling: SamplingConfig,
                       gamma: int) -> np.ndarray:
    """Exact joint distribution of (sequence, target forwards) of draft-model speculative decoding.

    Enumerates the whole process independently of arvis.methods: the prefill commits token 0 (one
    forward); each iteration drafts ``d_n … d_{n+γ−1}`` from the draft table's conditionals (same sampling
    settings), runs one target forward, accepts each draft with ``min(1, p/q)`` left to right, recovers the
    first rejection from ``normalize(max(0, p − q))`` or adds the bonus token from ``p``, and never commits
    past the last index. Returns ``[V^N, F]`` probabilities (``F`` = N + 1 forward counts).
    """
    V, N = target.V, target.N
    p_all, q_all = target.conditionals(label, sampling), draft.conditionals(label, sampling)
    out = np.zeros((V ** N, N + 1))
    memo: dict[tuple[int, ...], list[tuple[int, int, float]]] = {}

    def cond(table_probs, prefix):
        return table_probs[target.offsets[len(prefix)] + sequence_code(prefix, V)]

    def finish(prefix: tuple[int, ...]) -> list[tuple[int, int, float]]:
        """(sequence code, forwards still to run, probability) of every way to finish from ``prefix``."""
        if len(prefix) == N:
            return [(sequence_code(prefix, V), 0, 1.0)]
        if prefix in memo:
            return memo[prefix]
        outcomes: dict[tuple[int, int], float] = {}

        def add(committed, weight):
            for code, forwards, prob in finish(committed):
                key = (code, forwards + 1)
                outcomes[key] = outcomes.get(key, 0.0) + weight * prob

        def draft_and_verify(context, reach, j):
            """Drafts ``j`` onward of this iteration, the drafts before them accepted with probability ``reach``."""
            if len(context) == N:  # every draft up to the last index accepted: no bonus
                add(context, reach)
                return
            p = cond(p_all, context)
            if j == gamma:  # all drafts accepted: the bonus token from p
                for a in range(V):
                    if p[a] > 0:
                        add(context + (a,), reach * float(p[a]))
                return
            q = cond(q_all, context)
            for d in range(V):
                if q[d] == 0:
                    continue
                alpha = float(acceptance_probability(p, q, torch.tensor(d)))
                r = residual(p, q)
                for a in range(V):
                    if r[a] > 0 and alpha < 1:
                        add(context + (a,), reach * float(q[d]) * (1 - alpha) * float(r[a]))
                if alpha > 0:
                    draft_and_verify(context + (d,), reach * float(q[d]) * alpha, j + 1)

        draft_and_verify(prefix, 1.0, 0)
        memo[prefix] = [(code, f, prob) for (code, f), prob in outcomes.items()]
        return memo[prefix]

    p0 = p_all[0]
    for a in range(V):
        for code, forwards, prob in finish((a,)):
            out[code, forwards + 1] += float(p0[a]) * prob
    return out


GRID_3X3 = {"grid": (3, 3), "vocab": 2}


def _speculative_3x3_verdicts(label: int, sampling: SamplingConfig, n: int, chunks: int = 1):
    """Verdicts on ``n x chunks`` speculative samples (γ = 3, 3x3 grid, V = 2).

    Returns:
        ``(verdict on sequences, verdict on (sequence, target forwards))``.
    """
    target, draft = TableBackbone(seed=7, **GRID_3X3), TableBackbone(seed=8, scale=1.5, **GRID_3X3)
    joint = _speculative_joint(target, draft, label, sampling, gamma=3)
    np.testing.assert_allclose(joint.sum(1), target.sequence_probabilities(label, sampling), rtol=0, atol=1e-12)
    counts = np.zeros_like(joint)
    for c in range(chunks):
        tokens, stats = decode_table(target, sampling, "speculative", n, seed=100 + c, label=label, draft_model=draft,
                                     window=3)
        seq = (tokens * 2 ** torch.arange(9)).sum(1).numpy()
        np.add.at(counts, (seq, np.array([s.target_forwards for s in stats.samples])), 1.0)
    total = n * chunks
    return check(joint.sum(1), counts.sum(1) / total, total), check(joint.ravel(), counts.ravel() / total, total)


def test_speculative_gamma3_joint_with_forward_counts_is_exact():
    """Exact enumeration of the whole speculative process (draft model included) on a 3x3 grid, V = 2:
    its sequence marginal is the target's exact distribution, and arvis's joint of (sequence, target
    forwards) matches it — a check of the drafter's conditioning and of the commit counts that the
    sequence distribution alone cannot see."""
    sequences, with_forwards = _speculative_3x3_verdicts(0, NO_CFG, N_SAMPLES)
    assert sequences.passed and with_forwards.passed, f"sequences {sequences}; with forwards {with_forwards}"


def test_joint_check_catches_a_drafter_reading_the_wrong_prefix(monkeypatch):
    """Planted bug: the draft model reads token 0 wherever it catches up on the committed prefix. Its drafts
    are still exactly distributed as the q it reports, so the output stays lossless — only the forward
    counts change, and only the joint check sees it."""
    plant(monkeypatch, DraftModelSession, "propose",
          "tokens = self.target.tokens[self.target.active[:, None], index.clamp_max(self.N - 1)]",
          "tokens = self.target.tokens[self.target.active[:, None], index.clamp_max(self.N - 1) * 0]")
    sequences, with_forwards = _speculative_3x3_verdicts(0, NO_CFG, N_SAMPLES)
    assert sequences.passed, f"the drafter's bug is lossless, yet: {sequences}"
    assert not with_forwards.passed, f"planted drafter bug went unnoticed: {with_forwards}"


@pytest.mark.slow
@pytest.mark.parametrize("label, sampling", [(0, NO_CFG), (1, CFG)], ids=["class0-no-cfg", "class1-cfg"])
def test_speculative_gamma3_on_3x3_v2_at_a_million_samples(label, sampling):
    """Issue 15, item 12: the decisive run for the case an audit saw at chi-square p = 0.0099 (N = 3x10^5).

    10^6 samples, sequence distribution and joint (sequence, target forwards) against exact enumeration.
    Measured at 2x10^6 samples per case with these same checks (classes 0 / 1 without CFG, then with
    CFG 3.0): sequence chi-square p 0.31 / 0.71 / 0.91 / 0.60, TV 0.0023 / 0.0019 / 0.0012 / 0.0009 (noise
    bounds 0.0034 / 0.0029 / 0.0022 / 0.0021); joint (sequence, forwards) p 0.22 / 0.54 / 0.94 / 0.36 —
    no bias: the audit's p = 0.0099 at 3x10^5 was noise.
    """
    sequences, with_forwards = _speculative_3x3_verdicts(label, sampling, 250_000, chunks=4)
    assert sequences.passed and with_forwards.passed, f"sequences {sequences}; with forwards {with_forwards}"


# --------------------------------------------------------------------------- issue 14: multi-scale drafting, 3x3 grid, V = 2
# The drafts come from an up-sampler's q (a 1x1 low-resolution table model, then a random but peaked 1x1 -> 3x3
# TokenUpsampler, so q differs between positions and low-resolution samples); the Jacobi session stores them as
# its initial drafts and refreshes them by MC-SJD's coupling after each forward.
MULO_CASES = [
    ({"window": 3}, CFG),
    ({"window": 2, "coupling": "gumbel"}, NO_CFG),
    ({"window": 4, "temperature": 0.5, "batch_mode": "lockstep"}, CFG_TOPK),
    ({"window": 2, "jacobi_interval": (3, 8), "lowres_window": 1}, CFG),
]


@pytest.fixture(scope="module")
def mulo_table():
    return TableBackbone(seed=3, scale=1.5, class_scale=0.5, **GRID_3X3)


@pytest.fixture(scope="module")
def mulo_parts():
    from tests.drafting.test_mulo import peaked_upsampler

    return {"lowres_model": TableBackbone(seed=4, grid=(1, 1), vocab=2),
            "upsampler": peaked_upsampler(2, 1, 3, NUM_CLASSES)}


def _upsampler_q_misreported(monkeypatch):
    """Multi-scale drafting proposes the up-sampler's argmax but reports the full q it was not drawn from."""
    plant(monkeypatch, JacobiSession, "initialise", "self.store(index, want, self._draw(dist, index), dist)",
          "self.store(index, want, dist.argmax(-1), dist)")


@pytest.mark.parametrize("options, sampling", MULO_CASES, ids=[_case_id("mulo", *c) for c in MULO_CASES])
def test_multiscale_drafting_matches_exact_distribution(mulo_table, mulo_parts, options, sampling):
    tokens, stats = decode_table(mulo_table, sampling, "mulo", N_SAMPLES, seed=31, **mulo_parts, **options)
    assert all(s.draft_forwards == 2 for s in stats.samples[:10])  # the 1x1 low-res prefill + the up-sampler
    verdict = check(mulo_table.sequence_probabilities(1, sampling), empirical(tokens, mulo_table.V), N_SAMPLES)
    assert verdict.passed, str(verdict)


def test_harness_catches_misreported_upsampler_q(mulo_table, mulo_parts, monkeypatch):
    _upsampler_q_misreported(monkeypatch)
    tokens, _ = decode_table(mulo_table, CFG, "mulo", N_SAMPLES, seed=32, window=3, **mulo_parts)
    verdict = check(mulo_table.sequence_probabilities(1, CFG), empirical(tokens, mulo_table.V), N_SAMPLES)
    assert not verdict.passed, f"planted bug mulo-upsampler-q-misreported went unnoticed: {verdict}"


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
    for s in stats.samples:  # every forward commits at least one token, and the counts add up
        assert min(s.accepted_per_forward) >= 1 and sum(s.accepted_per_forward) == 16
        assert len(s.accepted_per_forward) == s.target_forwards
    # A greedy draft that equals the argmax of its context is always accepted: on this model some samples
    # converge early (2-3 forwards), others not at all (16), so the batch needs fewer forwards than AR's 5 x 16.
    assert sum(s.target_forwards for s in stats.samples) < 5 * 16


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
    batch_equals_single_runs(tiny_llamagen("c2i", grid=4, vocab=32), CFG, "mc-sjd", [21, 22, 23], window=4)


def test_bad_options_raise():
    for options, match in [({"window": 0}, "window"), ({"init": "zeros"}, "init"), ({"coupling": "weird"}, "coupling"),
                           ({"batch_mode": "x"}, "batch_mode"), ({"jacobi_interval": (5, 2)}, "jacobi_interval")]:
        with pytest.raises(ValueError, match=match):
            decode(tiny_llamagen("c2i"), Condition(class_labels=torch.tensor([0])), NO_CFG, "sjd", None, **options)
    with pytest.raises(ValueError, match="mc-sjd: coupling"):
        decode(tiny_llamagen("c2i"), Condition(class_labels=torch.tensor([0])), NO_CFG, "mc-sjd", None, coupling="none")


# --------------------------------------------------------------------------- cost-aware windows (window="auto")
def _synthetic_curve(slope: float, sizes=range(1, 40)) -> list[dict[str, float]]:
    """A forward-cost curve ``cost(T) = 1 + slope · (T − 1)`` ms (the lossless tests fix it: no timing)."""
    return [{"positions": t, "ms": 1.0 + slope * (t - 1)} for t in sizes]


class HistoryWindow(AutoWindow):
    """An adversarial policy: each forward's window is 1 + (drafts sample 0 accepted last time) mod 3, so the
    window sequence is a function of the random acceptance history itself (and 0 — a run of 1 to 3 plain AR
    steps, as many as that count says — every other choice)."""

    def __init__(self, engine, max_window, drafting_ms=None, **_):
        super().__init__(engine, max_window, curve=_synthetic_curve(0.0), overhead_ms=0.0, drafting_ms=drafting_ms)
        self.last = torch.zeros((), dtype=torch.long)
        self.step = 0

    def expected_tokens(self):
        return self.last.double()[None]

    def prior_tokens(self):
        return [0.0]  # expected_tokens() before any forward

    def observe(self, plan, proposal, verification):
        super().observe(plan, proposal, verification)
        self.last = verification.accepted_count[0]

    def choose(self, expected, committed, advanced):
        self.step += 1
        window = 0 if self.step % 2 == 0 and 0 in self.candidates else 1 + int(expected[0]) % 3
        self.trace.append((committed[0], window))
        self.run = 1 + int(expected[0]) % 3
        return window

    def take_ar_block(self):
        return self.run


AUTO_CASES = [
    ("sjd", {"window": "auto", "max_window": 4}, NO_CFG, 0.9),
    ("mc-sjd", {"window": "auto", "max_window": 3}, CFG_TOPK, 0.9),
    ("mc-sjd", {"window": "auto", "max_window": 8, "coupling": "gumbel"}, CFG, 0.2),
    ("mc-sjd", {"window": "auto", "max_window": 3, "init": "neighbour_distribution"}, CFG, None),  # history policy
    ("sjd", {"window": "auto", "max_window": 3}, CFG_TOPK, None),
    # Runs of several plain AR steps (a lockstep batch: a ragged one's runs stop at its most advanced sample's end).
    ("mc-sjd", {"window": "auto", "max_window": 4, "coupling": "gumbel", "batch_mode": "lockstep"}, NO_CFG, None),
    # Draft-model speculative decoding's draft length, and runs of plain AR steps the draft model catches up on.
    ("speculative", {"window": "auto", "max_window": 3, "draft_model": TableBackbone(seed=5)}, CFG, 0.1),
    ("speculative", {"window": "auto", "max_window": 3, "draft_model": TableBackbone(seed=6, scale=1.0)}, NO_CFG,
     None),
]


@pytest.mark.parametrize("method, options, sampling, slope", AUTO_CASES,
                         ids=[_case_id(m, o, s) + ("-history" if c is None else f"-slope{c}")
                              for m, o, s, c in AUTO_CASES])
def test_adaptive_windows_match_exact_distribution(table, exact, monkeypatch, method, options, sampling, slope):
    """Windows chosen every forward — by the cost-aware policy (a fixed curve, so the choice follows the
    acceptance measured so far) or adversarially from the random acceptance history — leave the output
    distribution exactly AR's."""
    import functools

    import arvis.methods.sjd
    import arvis.methods.speculative

    policy = (HistoryWindow if slope is None else
              functools.partial(AutoWindow, curve=_synthetic_curve(slope), overhead_ms=0.0, block=1))
    for module in (arvis.methods.sjd, arvis.methods.speculative):
        monkeypatch.setattr(module, "AutoWindow", policy)
    # The draft model's cost (speculative): fixed too (timing the table model outside a prefix is not allowed), a
    # tenth of the target's, so that drafting can pay against plain AR steps.
    monkeypatch.setattr(arvis.methods.speculative, "measured_curve",
                        lambda *a, **k: [{**c, "ms": 0.1 * c["ms"]} for c in _synthetic_curve(0.5, (1, 2))])
    tokens, stats = decode_table(table, sampling, method, N_SAMPLES, seed=17, **options)
    extra = stats.samples[0].extra
    chosen = extra["windows_chosen"]
    assert len(chosen) > 1, chosen  # the window really changed between forwards
    if slope is None:  # window 0: runs of plain AR steps
        assert extra["ar_runs"] > 0, extra
        if options.get("batch_mode") == "lockstep":  # some longer than one step
            assert extra["ar_runs"] < chosen["0"], extra
    verdict = check(exact(sampling), empirical(tokens, table.V), N_SAMPLES)
    assert verdict.passed, str(verdict)


def test_a_draft_model_catches_up_on_runs_of_ar_steps(monkeypatch):
    """Runs of plain AR steps do not run the draft model; its next proposal reads their tokens. With the target as
    its own draft model every draft's ``q`` is then exactly ``p``: every window of ``L`` drafts commits ``L + 1``
    tokens per sample, after runs as before them (a draft model that skipped a run's tokens would draw from the
    wrong prefix and be rejected)."""
    import arvis.methods.speculative

    choices: list[tuple[list[int], int]] = []

    class Recording(HistoryWindow):
        def choose(self, expected, committed, advanced):
            window = super().choose(expected, committed, advanced)
            choices.append((list(committed), window))
            return window

    monkeypatch.setattr(arvis.methods.speculative, "AutoWindow", Recording)
    monkeypatch.setattr(arvis.methods.speculative, "measured_curve", lambda *a, **k: _synthetic_curve(0.5, (1, 2)))
    model = tiny_llamagen("c2i", grid=8)  # 64 tokens: many windows before and after runs
    N = model.layout.num_tokens
    _, stats = decode(model, Condition(class_labels=torch.tensor([0, 1, 2])), CFG, "speculative",
                      [torch.Generator().manual_seed(s) for s in (1, 2, 3)], window="auto", max_window=3,
                      draft_model=model)
    assert stats.samples[0].extra["ar_runs"] > 0
    after_run = False
    checked = {"after a run": 0, "otherwise": 0}
    for (before, window), (after, _) in zip(choices[:-1], choices[1:], strict=True):
        if window and len(after) == len(before) and max(before) + window + 1 < N:
            assert [b + window + 1 for b in before] == after, (before, window, after)
            checked["after a run" if after_run else "otherwise"] += 1
        after_run = window == 0
    assert min(checked.values()) > 0, checked


def _auto_policy(table, slope: float, **kwargs) -> AutoWindow:
    engine = DecodeEngine(table, Condition(class_labels=torch.ones(2, dtype=torch.long)), NO_CFG)
    policy = AutoWindow(engine, 4, curve=_synthetic_curve(slope), overhead_ms=0.0, **kwargs)
    # the host-side decodes simulated below run longer than the table's sequence
    policy._num_tokens = 10**6
    return policy


def test_auto_window_follows_the_cost_curve_and_the_acceptance_by_age(table):
    """Jacobi drafts: the window modelled to commit the most tokens per unit of cost wins, whatever the curve —
    flat cost and good drafts → the widest; cost growing with positions and little acceptance → plain AR steps; a
    cost jump → the window before it. Acceptance that rises with a draft's age lets a wide window win even when
    only the young drafts of narrow windows were ever seen."""
    def chosen(policy, alpha_by_age, iterations=40):
        assert policy.candidates == [0, 1, 2, 4] and policy.by_age
        policy.age_counts = torch.tensor([[100.0] * policy.max_age,
                                          [100.0 * alpha_by_age(a) for a in range(policy.max_age)]])
        # each iteration commits what the model says its window commits, in lockstep (no ragged batch)
        windows, committed, advanced = [], 1, 0.0
        for _ in range(iterations):
            counts = policy.expected_tokens().tolist()
            windows.append(policy.choose(counts, [committed, committed], advanced))
            advanced = policy._expected_by_age(counts)[policy.candidates.index(windows[-1])]
            committed += round(advanced)
        late = windows[iterations // 2:]
        return max(set(late), key=late.count), windows

    assert chosen(_auto_policy(table, 0.0), lambda age: 0.9)[0] == 4
    assert chosen(_auto_policy(table, 1.0), lambda age: 0.1)[0] == 0
    jump = [{"positions": t, "ms": 1.0 + 0.1 * (t - 1) + (5.0 if t > 3 else 0.0)} for t in range(1, 40)]
    engine = DecodeEngine(table, Condition(class_labels=torch.ones(2, dtype=torch.long)), NO_CFG)
    assert chosen(AutoWindow(engine, 4, curve=jump, overhead_ms=0.0), lambda age: 0.8)[0] == 2
    assert chosen(_auto_policy(table, 0.0), lambda age: 0.9)[1][0] == 4  # flat cost: the widest costs one step
    assert chosen(_auto_policy(table, 1.0), lambda age: 1.0)[1][0] == 1  # the widest costing at most two steps
    # Young drafts rarely accepted, refined ones mostly: the only ages ever counted are those narrow windows reach
    # (0 and 1), yet the model prices the older ages of a wide window at the best rate seen.
    policy = _auto_policy(table, 0.3)
    policy.age_counts = torch.zeros(2, policy.max_age)
    policy.age_counts[:, :2] = torch.tensor([[100.0, 100.0], [20.0, 90.0]])
    modelled = policy._expected_by_age(policy.expected_tokens().tolist())
    assert modelled[-1] > modelled[-2] > modelled[1] > 1.0, modelled
    # Two lucky tests at an older age (both accepted) do not price every older age at their rate; fifty do.
    policy.age_counts = torch.zeros(2, policy.max_age)
    policy.age_counts[:, :2] = torch.tensor([[100.0, 100.0], [20.0, 20.0]])
    modelled = policy._expected_by_age(policy.expected_tokens().tolist())
    policy.age_counts[:, 2] = torch.tensor([2.0, 2.0])
    assert policy._expected_by_age(policy.expected_tokens().tolist()) == pytest.approx(modelled, rel=0.02)
    policy.age_counts[:, 2] = torch.tensor([50.0, 50.0])
    assert policy._expected_by_age(policy.expected_tokens().tolist())[-1] > 1.2 * modelled[-1]



def test_auto_window_doubles_runs_of_ar_steps_while_they_keep_winning(table):
    """Each run of plain AR steps ends in a loop iteration; while window 0 keeps winning, each run is twice the
    last (up to eight blocks); a try of another window starts the doubling again."""
    policy = _auto_policy(table, 1.0, block=4)
    policy.age_counts = torch.tensor([[100.0] * policy.max_age, [10.0] * policy.max_age])  # drafts rarely accepted
    runs, committed = [], 1
    for _ in range(12):  # the first block plays window 1 (the widest costing at most two steps), then AR runs
        window = policy.choose(policy.expected_tokens().tolist(), [committed, committed], 1.0)
        if window == 0:
            steps = policy.take_ar_block()
            policy.played_ar_run(steps, committed)
            runs.append(steps)
            committed += steps
        else:
            runs.append(-window)
            committed += 1
    assert runs[runs.index(4):][:5] == [4, 8, 16, 32, 32], runs
    assert policy.max_ar_run == 32
    policy._current, policy._left = 1, 0  # a block of window 1 was played (a try): the next run is a block again
    assert policy.choose(policy.expected_tokens().tolist(), [committed, committed], 1.0) == 0
    assert policy.take_ar_block() == 4


def test_auto_window_prices_a_batch_at_its_slowest_sample(table):
    """A batch decodes until its slowest sample ends: when one sample accepts every draft and the other none, the
    windows played are priced at the laggard's pace (ragged factor 3 at window 4) and plain AR steps, which keep
    the batch in lockstep, win; both samples accepting every draft keep the widest window."""
    def late_windows(lockstep: bool, iterations: int = 48) -> tuple[list[int], AutoWindow]:
        policy = _auto_policy(table, 0.3)
        policy.age_counts = torch.tensor([[100.0] * policy.max_age, [90.0] * policy.max_age])
        ahead = behind = 1
        advanced, windows = 0.0, []
        for _ in range(iterations):
            window = policy.choose(policy.expected_tokens().tolist(), [ahead, behind], advanced)
            windows.append(window)
            step = window + 1
            lag = step if lockstep else 1
            ahead, behind, advanced = ahead + step, behind + lag, (step + lag) / 2
        return windows[iterations // 2:], policy

    windows, policy = late_windows(lockstep=True)
    assert max(set(windows), key=windows.count) == 4, windows
    assert all(r == pytest.approx(1.0) for r in policy.ragged_factors())
    windows, policy = late_windows(lockstep=False)
    assert max(set(windows), key=windows.count) == 0, windows
    played = [r for L, r, n in zip(policy.candidates, policy.ragged_factors(), policy.played, strict=True)
              if L > 0 and n > 4]
    assert played and all(1.2 < r <= 3.0 for r in played), policy.report()["ragged_factor_by_window"]
    assert policy.ragged_factors()[0] == 1.0


def test_auto_window_seeds_a_decode_with_what_the_last_one_measured(table):
    """With a memory key, a decode starts from the last one's measurements, the loop's time per iteration included
    (else its first blocks price that time at 0 and play windows wider than the machine pays for)."""
    engine = DecodeEngine(table, Condition(class_labels=torch.ones(2, dtype=torch.long)), NO_CFG)
    first = AutoWindow(engine, 4, curve=_synthetic_curve(0.3), memory_key=("seeded", object()))
    first.overhead_ms, first.ar_overhead_ms = 2.5, 0.7
    first.played[2], first.committed_sum[2], first.laggard_sum[2] = 8.0, 12.0, 10.0
    first.age_counts[0, :3], first.age_counts[1, :3] = 50.0, torch.tensor([10.0, 30.0, 40.0])
    first.report()
    second = AutoWindow(engine, 4, curve=_synthetic_curve(0.3), memory_key=first.memory_key[0])
    assert (second.overhead_ms, second.ar_overhead_ms) == (2.5, 0.7)
    assert second.ragged_factors()[2] == first.ragged_factors()[2] > 1.0
    # the first choice, made before any sync, reads the seeded counts per age
    assert second.prior_tokens() == first.age_counts.flatten().tolist() == second.expected_tokens().tolist()
    fresh = AutoWindow(engine, 4, curve=_synthetic_curve(0.3), memory_key=("other", object()))
    assert (fresh.overhead_ms, fresh.ar_overhead_ms, sum(fresh.played)) == (0.0, None, 0.0)

def test_auto_window_counts_a_decodes_first_window_once_its_fresh_drafts_slid_past(table):
    """A decode opens on fresh drafts, which commit about one token per forward until refined: its first window is
    counted only after it slid its whole width at that pace, however well earlier decodes say it pays. Counting from
    the window's own estimate measured the fresh start (batch 1 on ``c2i``: window 16 at 1.26 tokens per iteration
    against 3.5 refined) and the decode stayed at narrow windows."""
    for seeded in (False, True):
        policy = _auto_policy(table, 0.0)  # flat cost: the first window is the widest, 4
        if seeded:  # earlier decodes measured window 4 at 5 tokens per iteration
            policy.played[-1], policy.committed_sum[-1], policy.laggard_sum[-1] = 8.0, 40.0, 40.0
        policy.age_counts = torch.tensor([[100.0] * policy.max_age, [90.0] * policy.max_age])
        committed, windows = 1, []
        for i in range(12):
            advanced = 1.0 if i <= 4 else 5.0  # the first 4 forwards commit one token each (their result is read next)
            windows.append(policy.choose(policy.expected_tokens().tolist(), [committed, committed], advanced))
            committed += int(advanced)
        assert windows[0] == 4 and set(windows[:12]) == {4}, windows
        mean = policy.committed_sum[-1] / policy.played[-1]
        assert mean == pytest.approx(5.0, rel=0.02), (seeded, mean)


def test_auto_window_times_iterations_only_while_the_whole_batch_is_active(table):
    """The curve prices full-batch forwards; once a sample has finished, iterations and runs of AR steps cost less,
    and their times would price the next decode's full batch: they are not kept."""
    engine = DecodeEngine(table, Condition(class_labels=torch.ones(2, dtype=torch.long)), NO_CFG)
    policy = AutoWindow(engine, 4, curve=_synthetic_curve(0.0))
    window = policy.choose(policy.prior_tokens(), [1, 1], 0.0)
    current = policy.candidates.index(window)
    policy.choose(policy.expected_tokens().tolist(), [2, 2], 1.0)
    assert len(policy._iterations_by[current]) == 1 and len(policy._overheads) == 1
    policy.choose(policy.expected_tokens().tolist(), [9], 1.0)  # sample 1 finished during the iteration
    assert len(policy._iterations_by[current]) == 1 and len(policy._overheads) == 1
    policy.played_ar_run(4, 9)  # a run with one sample left
    assert not policy._ar_timed and policy.ar_overhead_ms is None


def test_auto_window_prices_runs_of_ar_steps_at_their_mean_time_per_step(table):
    """Runs cover different stretches of the sequence and an early one is cheap (a short context): plain AR steps
    are priced at the runs' mean time per step, not the least run's, or a window that beats AR over a decode loses
    to the first run's price (batch 4 on ``c2i``: 5.3 ms against 6.4, and the decode kept to AR at 0.95x)."""
    policy = _auto_policy(table, 1.0, optimism=1.0)
    policy.ar_overhead_ms = 0.0
    policy._iterations_by[3].append(5.0)  # window 4 was played and took 5 ms an iteration
    policy.played[3] = policy.committed_sum[3] = policy.laggard_sum[3] = 1.0
    estimates = [1.0, 1.0, 1.0, 7.0]  # window 4: 1.4 tokens per ms
    policy._ar_timed.append((8.0, 16))  # the first run, 0.5 ms per step: AR would score 2 tokens per ms
    assert policy._next(estimates) == (0, False)
    policy._ar_timed.append((112.0, 112))  # a long run at 1 ms per step: 0.94 ms per step over both
    assert policy.iteration_ms()[0] == pytest.approx(120.0 / 128)
    assert policy._next(estimates) == (3, False)


def test_auto_window_prices_unplayed_windows_at_the_curve_scaled_by_what_played_ones_took(table):
    """The curve is timed apart, each size at its fastest: when what the played windows took is above their
    price (here runs of AR steps at twice theirs), the windows not played are priced at the curve times the least
    such ratio, and a window that beat AR at the curve's price no longer does."""
    policy = _auto_policy(table, 1.0, optimism=1.0)
    policy.ar_overhead_ms = 0.0
    policy.played[3] = policy.committed_sum[3] = policy.laggard_sum[3] = 1.0  # measured tokens, no timed iteration
    estimates = [1.0, 1.0, 1.0, 4.0]  # window 4: 5 ms at the curve's price
    policy._ar_timed.append((32.0, 16))  # AR steps at twice their price (1 ms): 0.525 tokens per ms with the margin
    # window 4 at the curve's price would score 0.8 tokens per ms; at twice it, 0.4
    assert policy._next(estimates) == (0, False)
    policy._iterations_by[3].append(5.0)  # once played, a window is priced at what it took
    assert policy._next(estimates) == (3, False)


def test_auto_window_keeps_plain_ar_steps_unless_a_window_beats_them_by_the_margin(table):
    """Scores are estimates and plain AR steps are the floor: a window is played only if it beats them by
    ``ar_margin``; near the sequence's end a window is not widened at all (its fresh drafts would not pay)."""
    policy = _auto_policy(table, 1.0, optimism=1.0)
    policy.ar_overhead_ms = 0.0
    policy._ar_timed.append((16.0, 16))  # AR: 1 token per ms
    policy.played[3] = policy.committed_sum[3] = policy.laggard_sum[3] = 1.0
    policy._iterations_by[3].append(5.0)
    assert policy._next([1.0, 1.0, 1.0, 5.1]) == (0, False)  # 2% better than AR: not enough
    assert policy._next([1.0, 1.0, 1.0, 5.5]) == (3, False)  # 10% better
    policy._furthest = policy._num_tokens - 15  # widening from AR to window 4 needs 16 tokens to go
    assert policy._next([1.0, 1.0, 1.0, 5.5]) == (0, False)
    policy._current = 2  # at window 2, widening by 2 needs 8
    assert policy._next([1.0, 1.0, 1.0, 5.5]) == (3, False)


def test_auto_window_does_not_narrow_near_the_end_to_a_window_it_never_timed(table):
    """Near the sequence's end narrowing is for good (the window could not be widened back) and a window played
    there is hardly measured: a narrower window priced only at the curve is not taken there, nor tried; one whose
    iterations were timed is, when it scores better."""
    policy = _auto_policy(table, 1.0, optimism=1.0)
    policy.ar_overhead_ms, policy._measure_overhead = 0.0, True  # times measured as a real decode does
    policy._ar_timed.append((64.0, 16))  # AR steps: 4 ms each, far below the other windows' scores
    policy.played[3] = policy.committed_sum[3] = policy.laggard_sum[3] = 1.0
    policy._iterations_by[3].append(10.0)  # window 4, timed: 10 ms an iteration
    policy.played[2] = policy.committed_sum[2] = policy.laggard_sum[2] = 1.0  # window 2: tokens measured, not timed
    policy._current = 3
    estimates = [1.0, 1.0, 2.9, 4.0]  # window 4: 0.4 tokens per ms; window 2 at the curve's 3 ms: 0.97
    assert policy._next(estimates) == (2, False)  # mid-sequence: the estimate is corrected once it is played
    policy._furthest = policy._num_tokens - 7  # window 4 -> 2 could not be undone with 7 tokens to go
    assert policy._next(estimates) == (3, False)
    policy._iterations_by[2].append(3.0)  # timed: narrowing to it is an informed choice
    assert policy._next(estimates) == (2, False)


def test_auto_window_does_not_count_iterations_cut_short_by_the_sequence_end(table):
    """A window reaching past the sequence's end commits at most what is left there: its iterations are not counted
    in what it commits elsewhere (nor in its ragged factor)."""
    policy = _auto_policy(table, 0.0)  # flat cost: the first window is the widest, 4
    N = policy._num_tokens = 256
    window = policy.choose(policy.prior_tokens(), [N - 20, N - 20], 0.0)
    assert window == 4
    policy._warming = 0
    policy.choose(policy.expected_tokens().tolist(), [N - 17, N - 16], 3.5)  # an iteration far from the end
    assert policy.played[-1] == pytest.approx(1.0) and policy.committed_sum[-1] == pytest.approx(3.5)
    policy.choose(policy.expected_tokens().tolist(), [N - 3, N - 2], 1.0)  # played from N - 16: counted
    policy.choose(policy.expected_tokens().tolist(), [N - 2, N - 1], 1.0)  # played from N - 2: cut short
    decay = policy.window_decay
    assert policy.played[-1] == pytest.approx(1.0 * decay**2 + decay)
    assert policy.committed_sum[-1] == pytest.approx(3.5 * decay**2 + 1.0 * decay)


def test_auto_window_prices_a_draft_models_host_work_per_window(table):
    """With a draft model each window is priced with its own time outside the forwards (every draft adds host
    work): measured where played, on the line through the nearest played windows elsewhere (flat beyond a single
    one, never below the least measured); Jacobi drafts keep one figure. What a decode measured seeds the next."""
    engine = DecodeEngine(table, Condition(class_labels=torch.ones(2, dtype=torch.long)), NO_CFG)
    key = ("per-window", object())
    policy = AutoWindow(engine, 4, curve=_synthetic_curve(0.3), drafting_ms=lambda L: 0.1 * L, memory_key=key)
    assert policy.candidates == [0, 1, 2, 4]  # plain AR steps are a candidate with a draft model too
    by_window = dict(zip(policy.candidates, policy._overheads_by, strict=True))
    by_window[4].extend([6.0, 5.0])  # the least recent time counts
    assert policy.overheads_by_window()[1:] == [5.0, 5.0, 5.0]  # one window played: flat
    by_window[1].append(2.0)
    assert policy.overheads_by_window()[1:] == [2.0, 3.0, 5.0]  # between played windows: the line
    by_window[4].clear()
    by_window[2].append(3.0)
    assert policy.overheads_by_window()[1:] == [2.0, 3.0, 5.0]  # beyond them: the line through the nearest two
    by_window[2][0] = 1.0
    assert policy.overheads_by_window()[1:] == [2.0, 1.0, 1.0]  # never below the least measured
    # A played window is priced at what its iterations took in all (runs of AR steps: per step), not from the
    # curves: window 2 scores best from them; timed at 40 ms an iteration it does not, and window 4 does.
    policy.optimism, policy.ar_overhead_ms, policy.overhead_ms = 1.0, 2.0, 2.0
    policy._num_tokens = 10**6  # far from the sequence's end (the table's is a few tokens away)
    policy.played[1], policy.committed_sum[1], policy.laggard_sum[1] = 8.0, 14.0, 14.0
    iterations = dict(zip(policy.candidates, policy._iterations_by, strict=True))
    policy._ar_timed.append((6.0, 2))  # a run of 2 AR steps, 3 ms each: their price (the curve's 1 ms + 2)
    assert policy._next(policy.estimates([1.0, 1.9, 2.5, 3.0])) == (2, False)
    iterations[2].append(40.0)
    assert policy._next(policy.estimates([1.0, 1.9, 2.5, 3.0])) == (3, False)
    assert policy.report()["iteration_ms_by_window"] == {"0": 3.0, "2": 40.0}
    seeded = AutoWindow(engine, 4, curve=_synthetic_curve(0.3), drafting_ms=lambda L: 0.1 * L, memory_key=key)
    assert seeded.overheads_by_window()[1:] == [2.0, 1.0, 1.0]
    assert [list(d) for d in seeded._iterations_by] == [[], [], [40.0], []]
    assert seeded.iteration_ms()[0] == 3.0
    jacobi = AutoWindow(engine, 4, curve=_synthetic_curve(0.3), overhead_ms=1.5)
    jacobi._overheads_by[1].append(9.0)
    assert jacobi.overheads_by_window() == [1.5] * len(jacobi.candidates)


class AlwaysAR(AutoWindow):
    """Window 0 at every choice, each a run of up to 5 plain AR steps."""

    def __init__(self, engine, max_window, **_):
        super().__init__(engine, max_window, curve=_synthetic_curve(0.0), overhead_ms=0.0)

    def choose(self, expected, committed, advanced):
        self.trace.append((committed[0], 0))
        return 0

    def take_ar_block(self):
        return 5


@pytest.mark.parametrize("coupling", ["maximal", "gumbel"])
def test_auto_window_runs_of_ar_steps_are_plain_ar(monkeypatch, coupling):
    """A decode whose window policy plays window 0 throughout runs plain AR steps in a row, outside the loop's
    iteration: token for token what ``ar`` draws with the same generator (Gumbel coupling: what every position's
    Gumbel-max with its fixed noise gives, the output of a window-0 iteration in the loop), one forward per
    token, and one host read per run instead of per token."""
    import arvis.methods.sjd

    model = tiny_llamagen("c2i")
    condition = Condition(class_labels=torch.tensor([0, 1]))
    N = model.layout.num_tokens

    def run(method, **options):
        return decode(model, condition, CFG, method, [torch.Generator().manual_seed(s) for s in (1, 2)], **options)

    monkeypatch.setattr(arvis.methods.sjd, "AutoWindow", AlwaysAR)
    syncs = DecodeEngine.host_syncs_total
    tokens, stats = run("mc-sjd", window="auto", max_window=4, coupling=coupling)
    extra, runs = stats.samples[0].extra, -(-(N - 1) // 5)
    assert extra["windows_chosen"] == {"0": N - 1} and extra["ar_runs"] == runs
    assert DecodeEngine.host_syncs_total - syncs <= runs + 1
    assert stats.samples[0].target_forwards == N
    if coupling == "maximal":
        reference, _ = run("ar")
    else:  # the loop's own window-0 iteration (a policy that runs one step at a time) commits the Gumbel-max too
        monkeypatch.setattr(AlwaysAR, "take_ar_block", lambda self: 1)
        reference, _ = run("mc-sjd", window="auto", max_window=4, coupling=coupling)
    assert torch.equal(tokens, reference)


def test_auto_window_counts_acceptance_by_draft_age(table):
    """A draft's age is the forwards whose window covered its position before; tested drafts are those up to the
    first rejection, counted per age, and the ages follow retired samples."""
    from types import SimpleNamespace

    policy = _auto_policy(table, 0.0, age_decay=1.0)

    def forward(targets, accepted):
        targets = torch.tensor(targets)
        plan = SimpleNamespace(verified=targets.shape[1], targets=targets, real=torch.ones_like(targets, dtype=torch.bool))
        proposal = SimpleNamespace(has_draft=torch.ones(targets.shape[0], targets.shape[1] - 1, dtype=torch.bool))
        policy.observe(plan, proposal, SimpleNamespace(accepted_count=torch.tensor(accepted)))

    assert policy.seen.shape[1] >= 5
    forward([[1, 2, 3], [1, 2, 3]], [1, 0])  # drafts at 1 and 2, both fresh
    assert policy.age_counts[:, :2].tolist() == [[2.0 + 1.0, 0.0], [1.0, 0.0]]
    forward([[2, 3, 4], [1, 2, 3]], [2, 1])  # sample 0: 2 refined once, 3 fresh; sample 1: 1 and 2 refined once
    assert policy.age_counts[:, :2].tolist() == [[3.0 + 1.0, 1.0 + 2.0], [1.0 + 1.0, 1.0 + 1.0]]
    assert policy.seen[0, 1:5].tolist() == [1, 2, 1, 0] and policy.seen[1, 1:5].tolist() == [2, 2, 0, 0]
    policy.retire(torch.tensor([1]))
    assert policy.seen.shape[0] == 1 and policy.seen[0, 1:5].tolist() == [2, 2, 0, 0]

    # Only the ages a forward tests forget (age_decay): fresh drafts tested again and again leave the older ages'
    # counts as they were, so they stay reliable and keep pricing the wide windows.
    policy = _auto_policy(table, 0.0, age_decay=0.5)
    policy.age_counts[:, 3] = torch.tensor([40.0, 30.0])
    for _ in range(8):
        policy.seen.zero_()
        forward([[1, 2], [1, 2]], [0, 0])  # one fresh draft per sample, rejected
    assert policy.age_counts[:, 3].tolist() == [40.0, 30.0]
    assert policy.age_counts[0, 0].item() == pytest.approx(2 * sum(0.5**k for k in range(8)))
    assert policy.age_counts[1, 0].item() == 0.0
