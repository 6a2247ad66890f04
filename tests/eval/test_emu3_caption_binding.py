"""eval/emu3_caption_binding.py: the caption's information is measured against a true derangement of the names."""

from __future__ import annotations

import importlib.util
import sys

import numpy as np
import pytest

from arvis.pipelines import Emu3Pipeline
from tests import REPO_ROOT as ROOT
from tests.emu3_fixtures import tiny_emu3


@pytest.fixture(scope="module")
def binding():
    spec = importlib.util.spec_from_file_location("arvis_eval_emu3_caption_binding",
                                                  ROOT / "eval" / "emu3_caption_binding.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_the_same_name_for_every_image_carries_no_information(binding):
    model, tok = tiny_emu3(num_codes=16)
    pipe = Emu3Pipeline(model, tok, default_height=2, default_width=2)
    images = np.random.default_rng(0).integers(0, 256, (5, 4, 4, 3), dtype=np.uint8)
    same = binding.caption_binding(pipe, images, ["red apple"] * 5, batch_size=2)
    assert same["gain"] == 0.0 and same["gain_first"] == 0.0 and same["own_name_more_likely"] == 0.0
    names = ["red apple", "dog face", "rocket", "green square", "flag of Japan"]
    out = binding.caption_binding(pipe, images, names, batch_size=2)
    assert out["images"] == 5 and out["first_drawing_tokens"] == binding.FIRST_DRAWING_TOKENS
    assert out["gain"] == pytest.approx(out["nll_shuffled"] - out["nll_true"])
    assert out["gain"] != 0.0  # a random model still reads its prompt: other names change the likelihoods
    assert 0.0 <= out["own_name_more_likely"] <= 1.0
