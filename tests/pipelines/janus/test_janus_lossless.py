"""Lossless on Janus: the exact distribution of a tiny Janus, enumerated, against arvis's samplers.

A tiny random ``JanusForConditionalGeneration`` with 3 codes and a 2 × 2 grid (3^4 = 81 possible images), Janus's
classifier-free guidance (the unconditional rows: the prompt with every token but BOS and BOI replaced by PAD)
and top-k 2. The exact distribution comes from full, cache-free transformers forwards — the decoder over the
prompt's embeddings and ``prepare_embeddings_for_image_generation`` of the codes so far, the generation head —
with transformers' CFG formula (``ClassifierFreeGuidanceLogitsProcessor``: ``u + s·(c − u)`` on the head's
logits) and top-k, written here independently of arvis's engine. SJD, MC-SJD (maximal and Gumbel coupling) and
the staircase run by default; AR, ZipAR at full width and draft-model speculative decoding are ``slow``
(``-m slow``). Each method draws 20,000 images in one batched call (ragged acceptance, rollbacks and carried
drafts all happen); the harness of ``tests/lossless_harness.py`` decides (chi-square and a TV noise bound).

Teeth: a backbone whose queries also read the draft slots ahead of them that earlier forwards wrote (drafts not
yet verified, or rejected) must fail the same test.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from arvis.engine.sampling import SamplingConfig
from arvis.methods import decode
from arvis.models.janus import JanusBackbone, JanusPromptTokens
from tests.janus_fixtures import backbone_for, tiny_janus
from tests.lossless_harness import check, empirical

K = 3
SIDE = 2
N_SAMPLES = 20_000
GUIDANCE, TOP_K = 2.0, 2
SAMPLING = SamplingConfig(guidance_scale=GUIDANCE, top_k=TOP_K)
PROMPT = "red apple"


@pytest.fixture(scope="module")
def tiny():
    return tiny_janus(num_codes=K, grid=SIDE, seed=4, head_std=3.0)


@pytest.fixture(scope="module")
def setup(tiny):
    return backbone_for(*tiny, [PROMPT])


def _head_logits(model, prompt: torch.Tensor, grids: torch.Tensor) -> torch.Tensor:
    """The generation head's logits ``[G, N, K]`` (float64) predicting each cell of every code grid ``[G, N]`` after
    ``prompt``: one cache-free causal forward of ``prompt + grid`` per grid, all grids in one batch."""
    with torch.no_grad():
        G = grids.shape[0]
        text = model.get_input_embeddings()(prompt[None]).expand(G, -1, -1)
        h = torch.cat([text, model.prepare_embeddings_for_image_generation(grids)], dim=1)
        out = model.model.language_model(inputs_embeds=h).last_hidden_state
        C = prompt.numel()
        return model.model.generation_head(out[:, C - 1:C - 1 + grids.shape[1]]).double()


def exact_distribution(model, tok, prompt: torch.Tensor) -> np.ndarray:
    """P(image) for all 81 code grids (index: base-K code of the 4 cells, first cell least significant)."""
    special = JanusPromptTokens.from_tokenizer(tok)
    keep = (prompt == special.bos) | (prompt == special.boi)
    null = torch.where(keep, prompt, torch.full_like(prompt, special.pad))  # generate()'s unconditional prompt
    grids = torch.tensor(list(itertools.product(range(K), repeat=SIDE * SIDE)))  # [81, 4], cell 0 first
    cond, uncond = _head_logits(model, prompt, grids), _head_logits(model, null, grids)
    guided = uncond + (cond - uncond) * GUIDANCE  # transformers' ClassifierFreeGuidanceLogitsProcessor
    kth = guided.sort(-1, descending=True).values[..., TOP_K - 1:TOP_K]
    p = torch.where(guided < kth, float("-inf"), guided).softmax(-1)  # [81, 4, K]: step i given cells < i
    chain = p.gather(-1, grids[..., None])[..., 0].prod(-1).numpy()
    probs = np.zeros(K ** (SIDE * SIDE))
    probs[(grids * K ** torch.arange(SIDE * SIDE)).sum(-1).numpy()] = chain
    assert abs(probs.sum() - 1) < 1e-9 and (probs == 0).sum() > 0  # top-k really removes outcomes
    return probs


@pytest.fixture(scope="module")
def exact(tiny, setup):
    _, condition = setup
    assert bool(condition.mask.all())
    return exact_distribution(*tiny, condition.token_ids[0])


def draw(backbone, condition, method: str, seed: int, **options) -> np.ndarray:
    big = condition.repeat_interleave(N_SAMPLES)
    tokens, _ = decode(backbone, big, SAMPLING, method, torch.Generator().manual_seed(seed), **options)
    return empirical(tokens, K)


slow = pytest.mark.slow
METHODS = [
    pytest.param("ar", {}, marks=slow, id="ar"),
    pytest.param("sjd", dict(window=2), id="sjd"),
    pytest.param("sjd", dict(window=2, window_shape="staircase", staircase_rows=1, staircase_step=1), id="staircase"),
    pytest.param("mc-sjd", dict(window=3), id="mc-sjd"),
    pytest.param("mc-sjd", dict(window=3, coupling="gumbel"), id="mc-sjd-gumbel"),
    pytest.param("zipar", dict(row_lag=SIDE), marks=slow, id="zipar-full-width"),  # exactly AR's conditionals
]


@pytest.mark.parametrize("method,options", METHODS)
def test_method_samples_the_exact_distribution(setup, exact, method, options):
    backbone, condition = setup
    verdict = check(exact, draw(backbone, condition, method, seed=1, **options), N_SAMPLES)
    assert verdict.passed, (method, options, str(verdict))


@pytest.mark.slow
def test_speculative_decoding_with_a_janus_draft_is_exact(tiny, setup, exact):
    backbone, condition = setup
    draft_model, _ = tiny_janus(num_codes=K, grid=SIDE, seed=9, hidden=16, layers=1, heads=2, kv_heads=1,
                                tokenizer=tiny[1])
    draft = JanusBackbone(draft_model, backbone.tokens, backbone.layout.condition_length)
    verdict = check(exact, draw(backbone, condition, "speculative", seed=2, draft_model=draft, window=2), N_SAMPLES)
    assert verdict.passed, str(verdict)


class StaleSlotsBackbone(JanusBackbone):
    """Planted bug: every query also reads the image-token slots ahead of it that earlier forwards of the request
    wrote (drafts not yet verified, or rejected ones) — what a cache without slot validity would let through."""

    def forward_tokens(self, tokens, slots, cache, attend_mask):
        C = self.layout.condition_length
        written = getattr(cache, "written_until", C)  # test-only bookkeeping on the request's cache
        index = torch.arange(attend_mask.shape[-1])
        ahead = (index >= C) & (index < written)
        cache.written_until = max(written, int(slots.max()) + 1)
        return super().forward_tokens(tokens, slots, cache, attend_mask | ahead)


def test_the_test_has_teeth(tiny, setup, exact):
    backbone, condition = setup
    broken = StaleSlotsBackbone(backbone.model, backbone.tokens, backbone.layout.condition_length)
    verdict = check(exact, draw(broken, condition, "sjd", seed=1, window=3), N_SAMPLES)
    assert not verdict.passed and verdict.tv > verdict.tv_bound, str(verdict)
