"""Every decoding method on the Emu3 layout (end-of-line tokens, row stride W + 1, image-token range).

Greedy lossless methods must give plain AR's tokens exactly; ZipAR's end-of-line schedule must reduce to AR
for a window of the full width and never read unwritten slots; structural tokens are never relaxed or
drafted wrongly; the Jacobi drafts' vertical neighbour is the cell above (stride W + 1)."""

from __future__ import annotations

import pytest
import torch

from arvis.drafting.jacobi import JacobiDrafter
from arvis.engine.engine import DecodeEngine
from arvis.engine.sampling import SamplingConfig
from arvis.engine.schedules import RasterWindow, zipar_schedule_eol
from arvis.methods import decode
from arvis.models.emu3 import Emu3Backbone, image_codes
from arvis.pipelines import Emu3Pipeline
from tests.emu3_fixtures import NEGATIVE, backbone_for, tiny_emu3
from tests.methods.test_zipar import WriteTrackingBackbone

GREEDY_CFG = SamplingConfig(temperature=0.0, guidance_scale=2.0)
PROMPTS = ["red apple", "grinning face with big eyes"]


@pytest.fixture(scope="module")
def tiny():
    return tiny_emu3()


@pytest.fixture(scope="module")
def setup(tiny):
    backbone, condition = backbone_for(*tiny, PROMPTS, 3, 4, negative=NEGATIVE)
    return backbone, condition


def gens():
    return [torch.Generator().manual_seed(s) for s in (11, 12)]


def assert_valid_emu3_sequences(tokens: torch.Tensor, backbone: Emu3Backbone) -> None:
    layout = backbone.layout
    K = backbone.vocabulary.num_codes
    for index, token in layout.structural_tokens.items():
        assert (tokens[:, index] == token).all(), index
    free = [i for i in range(layout.num_tokens) if i not in layout.structural_tokens]
    assert ((tokens[:, free] >= 0) & (tokens[:, free] < K)).all()


LOSSLESS = [
    ("sjd", dict(window=4)),
    ("sjd", dict(window=3, init="repeat_vertical")),
    ("sjd", dict(window=3, init="neighbour_distribution")),
    ("sjd", dict(window=3, init="repeat_horizontal", window_shape="staircase", staircase_rows=2, staircase_step=1)),
    ("mc-sjd", dict(window=5)),
    ("mc-sjd", dict(window=5, coupling="gumbel")),
    ("mc-sjd", dict(window=3, window_shape="staircase", staircase_rows=1, staircase_step=2)),
    ("sjd", dict(window=4, batch_mode="lockstep")),
]


@pytest.mark.parametrize("method,options", LOSSLESS, ids=[f"{m}-{i}" for i, (m, _) in enumerate(LOSSLESS)])
def test_greedy_lossless_methods_equal_ar(setup, method, options):
    backbone, condition = setup
    ar, ar_stats = decode(backbone, condition, GREEDY_CFG, "ar", gens())
    tokens, stats = decode(backbone, condition, GREEDY_CFG, method, gens(), **options)
    assert torch.equal(tokens, ar)
    assert_valid_emu3_sequences(tokens, backbone)
    assert stats.summary()["target_forwards"] < ar_stats.summary()["target_forwards"]


def test_speculative_decoding_with_an_emu3_draft_model(tiny, setup):
    backbone, condition = setup
    draft_model, _ = tiny_emu3(seed=5, hidden=16, layers=1, heads=2, kv_heads=1, tokenizer=tiny[1])
    draft = Emu3Backbone(draft_model, backbone.vocabulary, 3, 4, backbone.layout.condition_length, backbone.negative)
    ar, _ = decode(backbone, condition, GREEDY_CFG, "ar", gens())
    tokens, stats = decode(backbone, condition, GREEDY_CFG, "speculative", gens(), draft_model=draft, window=3)
    assert torch.equal(tokens, ar)
    assert stats.summary()["draft_forwards"] > 0
    sampled, _ = decode(backbone, condition, SamplingConfig(guidance_scale=2.0, top_k=8), "speculative", gens(),
                        draft_model=draft, window=3)
    assert_valid_emu3_sequences(sampled, backbone)


@pytest.mark.parametrize("acceptance", ["lantern", "lantern++", "bounded"])
def test_relaxed_rules_never_touch_structural_tokens(tiny, setup, acceptance):
    from transformers import Emu3ImageProcessor, Emu3Processor  # noqa: F401  (the pipeline needs vision extras)

    model, tok = tiny
    pipe = Emu3Pipeline(model, tok, default_height=3, default_width=4, default_negative_prompt=NEGATIVE)
    pipe.set_progress_bar_config(disable=True)
    out = pipe(PROMPTS, guidance_scale=2.0, top_k=8, generator=gens(), output_type="latent", method="sjd",
               window=4, acceptance=acceptance, k=4, delta=0.2)
    backbone, condition = setup
    options = dict(window=4, acceptance=acceptance, k=4, delta=0.2, neighbours=pipe.codebook_neighbours(4))
    assert (options["neighbours"][backbone.vocabulary.num_codes:] == -1).all()  # structural ids have no neighbours
    tokens, stats = decode(backbone, condition, SamplingConfig(guidance_scale=2.0, top_k=8), "sjd", gens(), **options)
    assert_valid_emu3_sequences(tokens, backbone)
    assert torch.equal(image_codes(tokens, backbone.layout), out.tokens)
    assert stats.samples[0].tokens == backbone.layout.num_tokens


def test_vertical_neighbour_is_the_cell_above_with_end_of_line_tokens(setup):
    """Jacobi's vertical drafts read the cell above at ``index - (W + 1)`` on Emu3, never ``index - W``."""
    backbone, condition = setup
    stride = backbone.layout.row_stride
    assert stride == 5 and backbone.layout.grid == (3, 4)
    engine = DecodeEngine(backbone, condition, SamplingConfig(), gens())
    p0 = engine.prefill()
    engine.commit(torch.zeros(2, 1, dtype=torch.long), torch.zeros(2, 1, dtype=torch.long))
    schedule = RasterWindow(4, engine.num_tokens)
    session = JacobiDrafter("repeat_vertical").start(engine, schedule, p0)
    row0 = torch.tensor([[0, 1, 2, 3, 16]]).expand(2, -1)  # codes 0..3, then the end-of-line (id K)
    session.store(torch.arange(5).expand(2, -1), torch.ones(2, 5, dtype=torch.bool), row0, p0[:, None])
    cell = torch.full((2, 1), 1 * stride + 2)  # (1, 2)
    session.initialise(cell, torch.ones(2, 1, dtype=torch.bool), torch.full((2,), 5))
    assert session.tokens[:, 1 * stride + 2].tolist() == [2, 2]  # the code of (0, 2), not of index 3


@pytest.mark.parametrize("row_lag", [4, 6])
def test_zipar_with_full_width_row_lag_is_ar(setup, row_lag):
    backbone, condition = setup
    ar, _ = decode(backbone, condition, GREEDY_CFG, "ar", gens())
    tokens, stats = decode(backbone, condition, GREEDY_CFG, "zipar", gens(), row_lag=row_lag)
    assert torch.equal(tokens, ar)
    assert stats.summary()["target_forwards"] == 3 * 4 + 1  # one forward per image token (+ the tail)


def test_zipar_end_of_line_schedule_reads_only_written_slots(tiny):
    inner, condition = backbone_for(*tiny, PROMPTS, 4, 5, negative=NEGATIVE)
    tracked = WriteTrackingBackbone(inner)
    tokens, stats = decode(tracked, condition, SamplingConfig(guidance_scale=2.0), "zipar", gens(), row_lag=2)
    assert_valid_emu3_sequences(tokens, inner)
    expected = len(zipar_schedule_eol(4, 5, 2, tail=2)) + 1
    assert stats.summary()["target_forwards"] == expected < 4 * 6 + 2
    predicted = sorted(q.predicts for f in zipar_schedule_eol(4, 5, 2, tail=2) for q in f.queries if q.predicts)
    assert predicted == list(range(1, inner.layout.num_tokens))  # every index exactly once


def test_zipar_refuses_other_structural_layouts(tiny):
    from arvis.models.protocol import TokenLayout

    backbone, condition = backbone_for(*tiny, PROMPTS, 2, 2)
    odd = TokenLayout(grid=(2, 2), vocab_size=19, condition_length=backbone.layout.condition_length,
                      image_token_range=(0, 16), structural_tokens={1: 16})
    backbone._layout = odd
    with pytest.raises(ValueError, match="end-of-line"):
        decode(backbone, condition, SamplingConfig(), "zipar", None, row_lag=1)
