"""Shared fixtures: tiny models built from a fixed generator, single-threaded torch.

Tests run single-threaded by default: the models here are tiny, and with two OpenMP threads on a
busy two-core machine a small matmul can stall for milliseconds. Set ARVIS_TEST_THREADS to change it.
"""

from __future__ import annotations

import os

import pytest
import torch

torch.set_num_threads(int(os.environ.get("ARVIS_TEST_THREADS", "1")))


def tiny_llamagen(model_type: str = "c2i", grid: int = 4, vocab: int = 32, seed: int = 0, **overrides):
    from arvis.models.llamagen import LlamaGenTransformer

    cfg = dict(dim=32, n_layer=2, n_head=4, vocab_size=vocab, block_size=grid * grid, multiple_of=16,
               num_classes=5, model_type=model_type)
    if model_type == "t2i":
        cfg.update(caption_dim=12, cls_token_num=6)
    cfg.update(overrides)
    model = LlamaGenTransformer(**cfg)
    g = torch.Generator().manual_seed(seed)
    model.init_weights(g)
    with torch.no_grad():  # the official init zeroes the head; give the tiny model real logits
        model.output.weight.normal_(0.0, 0.5, generator=g)
    return model.eval()


@pytest.fixture
def c2i_model():
    return tiny_llamagen("c2i")


@pytest.fixture
def t2i_model():
    return tiny_llamagen("t2i")


@pytest.fixture(autouse=True)
def _keep_test_threads():
    """Commands run in-process set torch's thread count (their default: every core); restore it after each test."""
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def pytest_configure(config):
    # Rows of docs/reliability.md: see tests/reliability_rows.py.
    config.addinivalue_line("markers", "reliability(area, probe, outcome): the docs/reliability.md row this test proves")
