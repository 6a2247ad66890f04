"""Temporal drafting on a video layout is lossless: exact enumeration of a tiny T x H x W model, the
project's calibrated decision rule (tests/lossless_harness.py), and a planted bug that must fail it.

The table model is the harness's, re-declared with a video layout: 2 frames of 2 x 2 tokens, vocabulary 3
(3^8 = 6,561 sequences, exact by the chain rule). Its conditionals depend on the whole prefix, so a draft
from the previous frame is just a draft; what the test proves is that the temporal initialisations
(``repeat_temporal`` with a one-hot q, ``previous_frame_distribution`` with the stored q), windows that
span a frame, maximal and Gumbel coupling and the staircase leave the output distribution exactly the
model's. The planted bugs (source mutations, as in tests/methods/test_lossless.py) misreport the q of a temporal
draft — a uniform q for a copy, the row above's distribution for a draw one frame back — and must fail.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from arvis.drafting.jacobi import TEMPORAL_INITS, JacobiSession, row_and_frame_period
from arvis.engine.sampling import SamplingConfig
from arvis.models.protocol import TokenLayout
from tests import REPO_ROOT
from tests.lossless_harness import TableBackbone, check, run_method
from tests.methods.test_lossless import plant

VIDEO_GRID = (2, 2, 2)  # frames, rows, columns
N_SAMPLES = 50_000
NO_CFG = SamplingConfig()
CFG = SamplingConfig(guidance_scale=3.0)
CFG_TOPK = SamplingConfig(guidance_scale=3.0, top_k=2)


class VideoTableBackbone(TableBackbone):
    """The harness's table model over 8 tokens, laid out as 2 frames of 2 x 2."""

    def __init__(self, seed: int = 0, vocab: int = 3):
        super().__init__(seed=seed, grid=(2, 4), vocab=vocab)
        self._layout = TokenLayout(grid=VIDEO_GRID, vocab_size=vocab, condition_length=1)


@pytest.fixture(scope="module")
def table() -> VideoTableBackbone:
    return VideoTableBackbone(seed=3)


@pytest.fixture(scope="module")
def exact(table):
    cache: dict[SamplingConfig, np.ndarray] = {}

    def get(sampling: SamplingConfig) -> np.ndarray:
        if sampling not in cache:
            cache[sampling] = table.sequence_probabilities(1, sampling)
        return cache[sampling]

    return get


CASES = [
    ("sjd", {"window": 3, "init": "repeat_temporal"}, CFG_TOPK),
    ("sjd", {"window": 4, "init": "previous_frame_distribution"}, NO_CFG),  # a window spanning a frame
    ("mc-sjd", {"window": 5, "init": "repeat_temporal"}, CFG),
    ("mc-sjd", {"window": 2, "init": "previous_frame_distribution"}, CFG_TOPK),
    ("mc-sjd", {"window": 4, "init": "repeat_temporal", "coupling": "gumbel"}, NO_CFG),
    ("mc-sjd", {"window": 3, "init": "previous_frame_distribution", "coupling": "gumbel"}, CFG),
    ("mc-sjd", {"window": 8, "init": "previous_frame_distribution"}, NO_CFG),  # the whole clip in one window
    ("mc-sjd", {"window": 2, "init": "repeat_temporal", "window_shape": "staircase", "staircase_rows": 1,
                "staircase_step": 1}, CFG_TOPK),
    # SJD-PAC's tree of candidates over temporal drafts (the tree spans the frame boundary at some windows).
    ("sjd-pac", {"window": 3, "init": "previous_frame_distribution", "tree_width": 3, "tree_depth": 3}, CFG),
    ("sjd-pac", {"window": 4, "init": "repeat_temporal", "tree_width": 2, "tree_depth": 3, "coupling": "gumbel"},
     NO_CFG),
    # PJD whose rows wait for the row above (rows run across frames): SJD with windows ending at rows.
    ("pjd", {"window": 2, "row_lag": 2}, CFG_TOPK),
]


def _case_id(method, options, sampling) -> str:
    return f"{method}-" + "-".join(f"{k}={v}" for k, v in options.items()) + f"-g{sampling.guidance_scale}k{sampling.top_k}"


def test_video_table_layout(table, exact) -> None:
    assert table.layout.grid == VIDEO_GRID and table.layout.num_tokens == 8
    p = exact(NO_CFG)
    assert p.shape == (3 ** 8,) and p.sum() == pytest.approx(1.0, abs=1e-12)


@pytest.mark.parametrize("method, options, sampling", CASES, ids=[_case_id(*c) for c in CASES])
def test_temporal_drafting_matches_the_exact_distribution(table, exact, method, options, sampling) -> None:
    observed = run_method(table, sampling, method, N_SAMPLES, seed=21, **options)
    verdict = check(exact(sampling), observed, N_SAMPLES)
    assert verdict.passed, str(verdict)


def _copy_claims_uniform_q(monkeypatch) -> None:
    """Previous-frame copies recorded with a uniform q instead of their one-hot q (acceptance ratio wrong)."""
    plant(monkeypatch, JacobiSession, "initialise",
          "self.store(index, want & (source >= 0), drafts, one_hot(drafts, self.V))",
          "self.store(index, want & (source >= 0), drafts, self._uniform_q)")


def _draws_one_frame_back_reports_the_row_above(monkeypatch) -> None:
    """Drafts drawn from the previous frame's distribution but recorded with the distribution stored one row
    above (a frame / row period mix-up in the q bookkeeping)."""
    plant(monkeypatch, JacobiSession, "initialise",
          "self.store(index, want & (source >= 0) & in_ring, drafts, dist)",
          "self.store(index, want & (source >= 0) & in_ring, drafts, "
          "self.distribution_at((index - self.stride).clamp_min(0)))")


# (planter, method, options, sampling): each bug on the temporal path it breaks.
PLANTED_BUGS = {
    "repeat-temporal-uniform-q": (_copy_claims_uniform_q, "sjd", {"window": 3, "init": "repeat_temporal"}, NO_CFG),
    "previous-frame-distribution-wrong-q": (_draws_one_frame_back_reports_the_row_above, "mc-sjd",
                                            {"window": 4, "init": "previous_frame_distribution"}, NO_CFG),
}


@pytest.mark.parametrize("bug", list(PLANTED_BUGS))
def test_harness_catches_planted_temporal_bugs(table, exact, monkeypatch, bug) -> None:
    planter, method, options, sampling = PLANTED_BUGS[bug]
    planter(monkeypatch)
    observed = run_method(table, sampling, method, N_SAMPLES, seed=22, **options)
    verdict = check(exact(sampling), observed, N_SAMPLES)
    assert not verdict.passed, f"planted bug {bug} went unnoticed: {verdict}"


def test_temporal_inits_refuse_an_image_layout() -> None:
    """No frames, no previous frame: the method says so before the prefill."""
    from arvis.methods import decode
    from arvis.models.protocol import Condition

    for init in TEMPORAL_INITS:
        with pytest.raises(ValueError, match=f"init='{init}'.*video layout"):
            decode(TableBackbone(seed=0), Condition(class_labels=torch.tensor([1])), NO_CFG, "sjd", None, init=init)


@pytest.mark.parametrize("grid, structural, expected", [
    ((4, 6), {}, (6, None)), ((2, 3, 5), {}, (5, 15)), ((1, 2, 2), {}, (2, 4)),
    ((3, 4), {4: 0, 9: 0, 14: 0}, (5, None)),  # an end-of-line token per row
    ((2, 2, 3), {3: 0, 7: 0, 11: 0, 15: 0}, (4, 8)),
])
def test_row_and_frame_periods(grid, structural, expected) -> None:
    # A layout with an end-of-line token per row states its row stride (the grid width plus one), as Emu3's does.
    layout = TokenLayout(grid=grid, vocab_size=8, condition_length=1, structural_tokens=structural,
                         row_stride=grid[-1] + (1 if structural else 0))
    assert row_and_frame_period(layout) == expected


@pytest.mark.parametrize("init", ["repeat_temporal", "previous_frame_distribution"])
def test_previous_frame_drafts_come_from_the_same_cell_one_frame_back(init: str, monkeypatch) -> None:
    """Every initial draft of a cell whose previous-frame cell holds a token is sourced there (j - H·W); in
    the first frame, from the row above (j - W) when it holds a token."""
    import arvis.drafting.jacobi as jacobi
    from arvis.methods import decode
    from arvis.models.protocol import Condition
    from tests.pipelines.video.test_video import tiny_video

    seen = []
    original = jacobi.JacobiSession._sources

    def spy(self, index):
        source = original(self, index)
        seen.append((index.clone(), source.clone(), (self.tokens[:, : self.N] != jacobi.NO_TOKEN).clone(),
                     self.frame, self.stride))
        return source

    monkeypatch.setattr(jacobi.JacobiSession, "_sources", spy)
    model = tiny_video(frames=3, side=3)
    decode(model, Condition(class_labels=torch.tensor([0, 2])), SamplingConfig(guidance_scale=2.0), "mc-sjd",
           [torch.Generator().manual_seed(s) for s in (0, 1)], window=12, init=init)
    checked = 0
    for index, source, known, frame, stride in seen:
        assert (frame, stride) == (9, 3)
        back = (index - frame).clamp_min(0)
        temporal = (index >= frame) & known.gather(1, back)
        assert torch.equal(source[temporal], index[temporal] - frame)
        up = (index - stride).clamp_min(0)
        vertical = (index < frame) & (index >= stride) & known.gather(1, up)
        assert torch.equal(source[vertical], index[vertical] - stride)
        checked += int(temporal.sum())
    assert checked > 0


def _temporal_drafting_script():
    import importlib.util

    path = REPO_ROOT / "eval" / "video_temporal_drafting.py"
    spec = importlib.util.spec_from_file_location("video_temporal_drafting", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_temporal_drafting_record_measures_what_it_says() -> None:
    """eval/video_temporal_drafting.py: repeat rates count equal tokens per source; the teacher-forced
    acceptance of a copy is p_j of the copied token (a model certain of a constant clip accepts every copy
    and every draw from a neighbour's p; a uniform random draft with probability 1 / V)."""
    from tests.pipelines.video.test_video import tiny_video

    script = _temporal_drafting_script()
    T, S = 3, 2
    codes = np.array([[1, 2, 3, 4] * T, [5, 5, 5, 5, 6, 6, 6, 6, 7, 7, 7, 7]])
    rates = script.repeat_rates(codes, np.array([0, 12]), T, S)  # a camera clip and an emoji clip
    assert rates["camera"]["previous_frame"] == 1.0 and rates["camera"]["row_above"] == 0.0
    assert rates["emoji"]["previous_frame"] == 0.0 and rates["emoji"]["row_above"] == 1.0
    assert rates["all"]["clips"] == 2 and rates["all"]["left"] == 0.5

    class CertainOfNine:  # teacher-forced logits of a model certain of token 9 everywhere
        config = tiny_video(frames=T, side=S, vocab=16).config

        def __call__(self, tokens, condition, drop_condition=None):
            logits = torch.full((*tokens.shape, 16), -30.0)
            logits[..., 9] = 30.0
            return logits

    model = CertainOfNine()
    constant = np.full((2, T * S * S), 9)
    tf = script.teacher_forced(model, constant, np.array([0, 1]), guidance=1.0)
    for init in ("repeat_horizontal", "repeat_vertical", "repeat_temporal", "neighbour_distribution",
                 "previous_frame_distribution", "p_of_the_clips_own_token"):
        assert tf[init] == pytest.approx(1.0, abs=1e-6), init
    assert tf["random"] == pytest.approx(1 / 16, abs=1e-6)
    F = S * S

    class CopiesThePreviousFrame:  # certain that each token repeats the same cell one frame back
        config = CertainOfNine.config

        def __call__(self, tokens, condition, drop_condition=None):
            logits = torch.zeros((*tokens.shape, 16))
            logits[:, F:] = torch.nn.functional.one_hot(tokens[:, :-F], 16) * 60.0 - 30.0
            return logits

    tf = script.teacher_forced(CopiesThePreviousFrame(), codes[:1], np.array([0]), guidance=1.0)
    assert tf["repeat_temporal"] == pytest.approx(1.0) and tf["p_of_the_clips_own_token"] == pytest.approx(1.0)
    assert tf["repeat_vertical"] == pytest.approx(0.0, abs=1e-6) and tf["repeat_horizontal"] == pytest.approx(0.0, abs=1e-6)
