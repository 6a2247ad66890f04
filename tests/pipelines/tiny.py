"""Tiny pipelines of every family (random weights, seconds to build) for the contract test and the family tests.

Each has what its family's methods need (a draft model where the family has one), so every applicable method
runs on it.
"""

from __future__ import annotations

import torch

from arvis.hub import tiny_random_video_pipeline
from arvis.pipelines import Emu3Pipeline, JanusPipeline, LlamaGenPipeline, VARPipeline
from tests.conftest import tiny_llamagen

CLASS_NAMES = ["cat", "dog", "owl", "fox", "emu"]


def llamagen_c2i() -> LlamaGenPipeline:
    from tests.pipelines.test_llamagen import tiny_vq

    target = tiny_llamagen("c2i", class_names=CLASS_NAMES)
    drafter = tiny_llamagen("c2i", seed=1, dim=16, n_layer=1, n_head=2, class_names=CLASS_NAMES)
    return LlamaGenPipeline(target, tiny_vq(), draft_transformer=drafter)


def llamagen_t2i() -> LlamaGenPipeline:
    from arvis.models.text_encoder import WordTextEncoder
    from tests.pipelines.test_llamagen import tiny_vq

    with torch.random.fork_rng():  # nn.Module initialisation draws from the global stream: keep it local
        torch.manual_seed(0)
        encoder = WordTextEncoder(["a", "red", "blue", "circle", "square", "on", "grass"], dim=12, num_layers=1,
                                  num_heads=2, max_length=6).eval()
    return LlamaGenPipeline(tiny_llamagen("t2i"), tiny_vq(), text_encoder=encoder)


def var() -> VARPipeline:
    from tests.pipelines.test_var import tiny_pipeline

    return tiny_pipeline()


def emu3() -> Emu3Pipeline:
    from tests.emu3_fixtures import tiny_emu3

    model, tok = tiny_emu3()
    draft, _ = tiny_emu3(seed=5, hidden=16, layers=1, heads=2, kv_heads=1, tokenizer=tok)
    return Emu3Pipeline(model, tok, draft_transformer=draft, default_height=3, default_width=4,
                        default_negative_prompt="")


def janus() -> JanusPipeline:
    from tests.janus_fixtures import tiny_janus

    model, tok = tiny_janus(num_codes=16, grid=3)
    draft, _ = tiny_janus(num_codes=16, grid=3, seed=5, hidden=16, layers=1, heads=2, kv_heads=1, tokenizer=tok)
    return JanusPipeline(model, tok, draft_transformer=draft)


def video():
    return tiny_random_video_pipeline()


def mar(causal: bool):
    """A MAR pair of one variant with a draft of the same variant (masked: ``cspd``; causal: ``cspd-exact``)."""
    from arvis.pipelines import MARPipeline
    from tests.pipelines.test_mar import tiny_mar, tiny_vae

    transformer, head = tiny_mar(causal)
    draft, draft_head = tiny_mar(causal, seed=5, width=16)
    return MARPipeline(transformer, head, tiny_vae(), draft_transformer=draft, draft_head=draft_head)
