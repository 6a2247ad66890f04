"""Every token method on a tiny Janus (raster layout, the generation head's codes as ids), and the drafting state
at Janus-Pro's size.

Greedy lossless methods (SJD, MC-SJD maximal and Gumbel, the staircase, draft-model speculative decoding) give
plain AR's tokens exactly and take fewer target forwards; ZipAR with a full-width row lag is AR; the relaxed rules
and sampled runs give valid codes. The memory test measures what SJD / MC-SJD keep per sample to draft at
Janus-Pro's vocabulary (16,384 codes) and 576 tokens, against the dense ``[N, V]`` fp32 table.
"""

from __future__ import annotations

import pytest
import torch

from arvis.engine.sampling import SamplingConfig
from arvis.methods import decode
from arvis.models.janus import JanusBackbone
from arvis.pipelines import JanusPipeline
from tests.janus_fixtures import backbone_for, tiny_janus

GREEDY_CFG = SamplingConfig(temperature=0.0, guidance_scale=2.0)
SAMPLED = SamplingConfig(guidance_scale=2.0, top_k=8)
PROMPTS = ["red apple", "grinning face with big eyes"]
GRID = 4


@pytest.fixture(scope="module")
def tiny():
    return tiny_janus(num_codes=16, grid=GRID)


@pytest.fixture(scope="module")
def setup(tiny):
    return backbone_for(*tiny, PROMPTS)


@pytest.fixture(scope="module")
def draft(tiny, setup):
    draft_model, _ = tiny_janus(num_codes=16, grid=GRID, seed=5, hidden=16, layers=1, heads=2, kv_heads=1,
                                tokenizer=tiny[1])
    backbone, _ = setup
    return JanusBackbone(draft_model, backbone.tokens, backbone.layout.condition_length)


def gens():
    return [torch.Generator().manual_seed(s) for s in (11, 12)]


def assert_valid(tokens: torch.Tensor, backbone: JanusBackbone) -> None:
    assert tokens.shape == (2, backbone.layout.num_tokens)
    assert bool(((tokens >= 0) & (tokens < backbone.layout.vocab_size)).all())


LOSSLESS = [
    ("sjd", dict(window=4)),
    ("sjd", dict(window=3, init="repeat_vertical")),
    ("sjd", dict(window=3, init="neighbour_distribution")),
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
    assert stats.summary()["target_forwards"] < ar_stats.summary()["target_forwards"]


def test_speculative_decoding_with_a_tiny_janus_draft(setup, draft):
    backbone, condition = setup
    ar, _ = decode(backbone, condition, GREEDY_CFG, "ar", gens())
    tokens, stats = decode(backbone, condition, GREEDY_CFG, "speculative", gens(), draft_model=draft, window=3)
    assert torch.equal(tokens, ar) and stats.summary()["draft_forwards"] > 0
    sampled, _ = decode(backbone, condition, SAMPLED, "speculative", gens(), draft_model=draft, window=3)
    assert_valid(sampled, backbone)


@pytest.mark.parametrize("acceptance", ["lantern", "lantern++", "bounded"])
def test_relaxed_rules_through_the_pipeline_equal_the_backbone(tiny, setup, acceptance):
    """The pipeline supplies its codebook neighbourhoods; its tokens are the backbone's with the same options."""
    model, tok = tiny
    pipe = JanusPipeline(model, tok)
    pipe.set_progress_bar_config(disable=True)
    out = pipe(PROMPTS, guidance_scale=2.0, top_k=8, generator=gens(), output_type="latent", method="mc-sjd",
               window=4, acceptance=acceptance, k=4, delta=0.2)
    backbone, condition = setup
    neighbours = pipe.codebook_neighbours(4)
    assert neighbours.shape == (16, 4) and bool((neighbours >= 0).all())
    tokens, stats = decode(backbone, condition, SAMPLED, "mc-sjd", gens(), window=4, acceptance=acceptance, k=4,
                           delta=0.2, neighbours=neighbours)
    assert_valid(tokens, backbone)
    assert torch.equal(tokens.reshape(2, GRID, GRID), out.tokens)


@pytest.mark.parametrize("method,options", [("zipar", dict(row_lag=2)), ("sjd", dict(window=4)),
                                            ("mc-sjd", dict(window=4, window_shape="staircase"))])
def test_sampled_methods_give_valid_codes(setup, method, options):
    backbone, condition = setup
    tokens, stats = decode(backbone, condition, SAMPLED, method, gens(), **options)
    assert_valid(tokens, backbone)
    assert stats.summary()["target_forwards"] < backbone.layout.num_tokens


def test_zipar_with_full_width_row_lag_is_ar(setup):
    backbone, condition = setup
    ar, _ = decode(backbone, condition, GREEDY_CFG, "ar", gens())
    tokens, stats = decode(backbone, condition, GREEDY_CFG, "zipar", gens(), row_lag=GRID)
    assert torch.equal(tokens, ar) and stats.summary()["target_forwards"] == GRID * GRID


# ----------------------------------------------------------------------------- memory at Janus-Pro's size
JANUS_PRO_CODES, JANUS_PRO_GRID = 16_384, 24  # Janus-Pro: 16,384 codes, 24 x 24 = 576 tokens
WINDOW = 32


def pro_sized(grid: int):
    """A Janus with Janus-Pro's codebook, a ``grid`` square, and a tiny decoder (the drafting state does not depend
    on the decoder)."""
    return tiny_janus(num_codes=JANUS_PRO_CODES, grid=grid, hidden=16, layers=1, heads=2, kv_heads=1,
                      vq=dict(embed_dim=8, latent_channels=8, base_channels=32, channel_multiplier=[1],
                              num_res_blocks=1))


def drafting_state_bytes(model, tok, method: str, **options) -> int:
    """Bytes of one sample's drafting state after the method's start and one full-window iteration, measured by
    the draft-verify loop itself (its ``state_bytes``: what the method reports as ``draft_state_mb``)."""
    from arvis.drafting.jacobi import JacobiDrafter
    from arvis.engine.engine import DecodeEngine
    from arvis.methods.catalog import DecoderKind
    from arvis.methods.draft_verify import DraftVerifyLoop
    from arvis.methods.registry import build_method

    backbone, condition = backbone_for(model, tok, ["red apple"])
    built = build_method(method, DecoderKind.TOKEN, {}, window=WINDOW, **options)
    engine = DecodeEngine(backbone, condition, SamplingConfig(), torch.Generator().manual_seed(0))
    schedule = built.schedule(engine)
    drafter = JacobiDrafter(built.init, built.coupling)
    loop = DraftVerifyLoop(engine, schedule, lambda p0, noise: drafter.start(engine, schedule, p0, noise),
                           rule=built.acceptance, gumbel=built.coupling == "gumbel")
    loop.start()
    committed = loop.sync()
    plan = schedule.plan(loop.committed, max(committed))
    if loop.noise is not None:
        loop.noise.advance([min(n + schedule.reach, engine.num_tokens) for n in committed])
    proposal = loop.session.propose(loop.committed, plan)
    assert bool(proposal.has_draft[:, :WINDOW].all())  # the whole window is drafted
    return max(loop.state_bytes, loop.session.nbytes())


@pytest.fixture(scope="module")
def janus_pro_sized():
    return pro_sized(JANUS_PRO_GRID)


@pytest.mark.parametrize("method,options", [("sjd", {}), ("mc-sjd", {}), ("mc-sjd", dict(coupling="gumbel"))],
                         ids=["sjd", "mc-sjd", "mc-sjd-gumbel"])
def test_drafting_state_is_sparse_at_janus_pro_size(janus_pro_sized, method, options):
    """At 576 tokens x 16,384 codes the drafting state is the window's reach, not the dense ``[N, V]`` fp32 table
    (36 MiB per sample): a fraction of it, and against a 144-token grid it grows by a few bytes per token (the
    token ids), never by a ``[V]`` row."""
    N, V = JANUS_PRO_GRID ** 2, JANUS_PRO_CODES
    state = drafting_state_bytes(*janus_pro_sized, method, **options)
    dense = N * V * 4
    assert 0 < state < dense / 6, (state, dense)
    smaller = drafting_state_bytes(*pro_sized(12), method, **options)
    assert 0 <= state - smaller <= 16 * (N - 12 ** 2), (state, smaller)
