"""Lossless on Emu3: the exact distribution of a tiny Emu3 layout, enumerated, against arvis's samplers.

A tiny random ``Emu3ForConditionalGeneration`` with 3 image codes, a 2 × 2 grid with end-of-line tokens
(sequence: 2 codes, EOL, 2 codes, EOL, EOF, EOI; 3^4 = 81 possible images), CFG with a negative prompt and
top-k 2. The exact distribution comes from full, cache-free transformers forwards with transformers'
own CFG formula (log-softmax, then ``g·(c − u) + u``), the prefix constraint and top-k — written here,
independently of arvis's engine. SJD, MC-SJD and the staircase run by default; AR, the other draft
initialisations and couplings, ZipAR at full width and draft-model SD are ``slow`` (``-m slow``). Each method draws 20,000 images in one batched call (ragged acceptance,
rollbacks and carried drafts all happen); it passes with chi-square ``p >= 1e-3`` and a total-variation
distance within 3× its sampling noise (``E|f − p| ≈ sqrt(2p(1−p)/(πn))`` per cell). The harness of
``tests/lossless_harness.py`` does the counting and the test.

Teeth: a backbone that lets queries read slots the engine invalidated (stale rejected drafts, i.e. no
rollback) must fail the same test.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from arvis.engine.sampling import SamplingConfig
from arvis.methods import decode
from arvis.models.emu3 import Emu3Backbone, image_codes
from tests.emu3_fixtures import NEGATIVE, backbone_for, prompt_ids, tiny_emu3
from tests.lossless_harness import check, empirical

K = 3
H = W = 2
N_SAMPLES = 20_000
GUIDANCE, TOP_K = 2.0, 2
SAMPLING = SamplingConfig(guidance_scale=GUIDANCE, top_k=TOP_K)


@pytest.fixture(scope="module")
def tiny():
    return tiny_emu3(num_codes=K, seed=4, head_std=0.6)


@pytest.fixture(scope="module")
def setup(tiny):
    return backbone_for(*tiny, ["red apple"], H, W, negative=NEGATIVE)


def _next_token(model, ids: torch.Tensor, neg: torch.Tensor, visual: list[int]) -> np.ndarray:
    """transformers' processing of one step: CFG on log-softmaxes, image tokens only, top-k."""
    with torch.no_grad():
        c = model(input_ids=ids[None]).logits[0, -1].double().log_softmax(-1)
        u = model(input_ids=neg[None]).logits[0, -1].double().log_softmax(-1)
    guided = (GUIDANCE * (c - u) + u)[visual]
    kth = guided.sort(descending=True).values[TOP_K - 1]
    guided = torch.where(guided < kth, float("-inf"), guided)
    return guided.softmax(-1).numpy()


@pytest.fixture(scope="module")
def exact(tiny, setup):
    return exact_distribution(*tiny, setup[0])


def exact_distribution(model, tok, backbone: Emu3Backbone) -> np.ndarray:
    """P(image) for all 81 code grids (index: base-K code of the 4 cells, first cell least significant)."""
    voc = backbone.vocabulary
    prompt = prompt_ids(tok, ["red apple"], H, W)[0][0]
    neg = prompt_ids(tok, [NEGATIVE], H, W)[0][0]
    model_ids = voc.model_ids()
    layout = backbone.layout
    free = [i for i in range(layout.num_tokens) if i not in layout.structural_tokens][: H * W]
    probs = np.zeros(K ** (H * W))
    for cells in itertools.product(range(K), repeat=H * W):
        seq = [layout.structural_tokens.get(i, 0) for i in range(layout.num_tokens)]
        for i, c in zip(free, cells, strict=True):
            seq[i] = c
        total = 1.0
        for i, c in zip(free, cells, strict=True):
            prefix = model_ids[torch.tensor(seq[:i], dtype=torch.long)]
            total *= _next_token(model, torch.cat([prompt, prefix]), torch.cat([neg, prefix]), list(voc.visual_ids))[c]
        probs[sum(c * K ** j for j, c in enumerate(cells))] = total
    assert abs(probs.sum() - 1) < 1e-9 and (probs == 0).sum() > 0  # top-k really removes outcomes
    return probs


def draw(backbone, condition, method: str, seed: int, **options) -> np.ndarray:
    big = condition.repeat_interleave(N_SAMPLES)
    tokens, _ = decode(backbone, big, SAMPLING, method, torch.Generator().manual_seed(seed), **options)
    return empirical(image_codes(tokens, backbone.layout).reshape(N_SAMPLES, -1), K)


slow = pytest.mark.slow
METHODS = [
    pytest.param("ar", {}, marks=slow, id="ar"),
    pytest.param("sjd", dict(window=2), id="sjd"),
    pytest.param("sjd", dict(window=3, init="neighbour_distribution"), marks=slow, id="sjd-neighbour-distribution"),
    pytest.param("sjd", dict(window=2, window_shape="staircase", staircase_rows=1, staircase_step=1), id="staircase"),
    pytest.param("mc-sjd", dict(window=3), id="mc-sjd"),
    pytest.param("mc-sjd", dict(window=3, coupling="gumbel"), marks=slow, id="mc-sjd-gumbel"),
    pytest.param("zipar", dict(row_lag=2), marks=slow, id="zipar-full-width"),  # exactly AR's conditionals
    pytest.param("sjd-pac", dict(window=3, tree_width=3, tree_depth=3), id="sjd-pac"),
    pytest.param("sjd-pac", dict(window=2, tree_width=2, tree_depth=3, coupling="gumbel"), marks=slow,
                 id="sjd-pac-gumbel"),
    pytest.param("pjd", dict(window=2, row_lag=3), marks=slow, id="pjd-rows-wait"),  # rows of 2 codes + EOL
]


@pytest.mark.parametrize("method,options", METHODS)
def test_method_samples_the_exact_distribution(setup, exact, method, options):
    backbone, condition = setup
    verdict = check(exact, draw(backbone, condition, method, seed=1, **options), N_SAMPLES)
    assert verdict.passed, (method, options, str(verdict))


@pytest.mark.slow
def test_speculative_decoding_with_an_emu3_draft_is_exact(tiny, setup, exact):
    backbone, condition = setup
    draft_model, _ = tiny_emu3(num_codes=K, seed=9, hidden=16, layers=1, heads=2, kv_heads=1, tokenizer=tiny[1])
    draft = Emu3Backbone(draft_model, backbone.vocabulary, H, W, backbone.layout.condition_length, backbone.negative)
    verdict = check(exact, draw(backbone, condition, "speculative", seed=2, draft_model=draft, window=2), N_SAMPLES)
    assert verdict.passed, str(verdict)


class StaleSlotsBackbone(Emu3Backbone):
    """Planted bug: every query reads every slot before it, including rejected drafts the engine rolled back."""

    def forward_tokens(self, tokens, slots, cache, attend_mask):
        causal = torch.arange(cache.slots) <= slots[..., None]
        return super().forward_tokens(tokens, slots, cache, causal & (attend_mask.any(1, keepdim=True) | causal))


def test_the_test_has_teeth(tiny, setup, exact):
    backbone, condition = setup
    broken = StaleSlotsBackbone(backbone.model, backbone.vocabulary, H, W, backbone.layout.condition_length,
                                backbone.negative)
    verdict = check(exact, draw(broken, condition, "sjd", seed=1, window=3), N_SAMPLES)
    assert not verdict.passed and verdict.tv > verdict.tv_bound, str(verdict)
