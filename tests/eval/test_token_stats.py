"""Next-token statistics (arvis.eval.token_stats): the teacher-forced distributions are the ones decoding samples
from, on LlamaGen and on Emu3's layout with structural tokens; the summaries are the textbook quantities."""

from __future__ import annotations

import math

import torch

from arvis.engine.sampling import SamplingConfig, logits_to_probs
from arvis.eval.token_stats import class_requests, sampling_distributions, summarise, token_statistics
from arvis.methods import decode
from arvis.models.protocol import Condition, TokenLayout
from tests.conftest import tiny_llamagen
from tests.emu3_fixtures import backbone_for, tiny_emu3


def test_llamagen_distributions_equal_a_full_cache_free_forward():
    model = tiny_llamagen("c2i", grid=4, vocab=32, seed=3)
    sampling = SamplingConfig(guidance_scale=2.5, top_k=10, temperature=0.8)
    cond = Condition(class_labels=torch.tensor([1, 4]))
    tokens, _ = decode(model, cond, sampling, "ar", [torch.Generator().manual_seed(i) for i in range(2)])
    with torch.no_grad():
        full = logits_to_probs(model(tokens, cond), model(tokens, model.null_condition(cond)), sampling,
                               torch.arange(tokens.shape[1]).expand_as(tokens))
    torch.testing.assert_close(sampling_distributions(model, tokens, cond, sampling), full, atol=1e-5, rtol=1e-4)


def test_emu3_statistics_cover_the_image_positions_only():
    """On Emu3's layout (end-of-line after each row, end-of-frame, end-of-image) the structural positions are
    forced, not predicted: the maps are the H x W image grid and every distribution lives on the K codes."""
    model, tok = tiny_emu3(num_codes=16, seed=2)
    backbone, cond = backbone_for(model, tok, ["red apple", "rocket"], 3, 4, negative="low quality")
    sampling = SamplingConfig(guidance_scale=2.0)
    stats = token_statistics([(backbone, cond)], sampling, seed=5)
    assert stats["samples"] == 2
    assert len(stats["entropy_map"]) == 3 and len(stats["entropy_map"][0]) == 4
    assert abs(stats["entropy_of_uniform"] - math.log(16)) < 1e-6
    assert 0 < stats["entropy"] < math.log(16) and 0 < stats["top1"] <= 1
    # The same figure by hand, from the teacher-forced distributions at the free positions only.
    tokens, _ = decode(backbone, cond, sampling, "ar", [torch.Generator().manual_seed(5 + i) for i in range(2)])
    p = sampling_distributions(backbone, tokens, cond, sampling)
    free = [j for j in range(backbone.layout.num_tokens) if j not in backbone.layout.structural_tokens]
    q = p[:, free, :16]
    torch.testing.assert_close(q.sum(-1), torch.ones(2, 12))  # no mass outside the codes at image positions
    entropy = float(-(q * q.clamp_min(1e-30).log()).sum(-1).mean())
    assert abs(stats["entropy"] - entropy) < 1e-5


def test_summaries_of_known_distributions():
    layout = TokenLayout(grid=(2, 2), vocab_size=4, condition_length=1)
    uniform = torch.full((1, 4, 4), 0.25)
    tokens = torch.tensor([[0, 1, 2, 3]])
    u = summarise(uniform, tokens, layout)
    assert abs(u["entropy"] - math.log(4)) < 1e-6 and abs(u["accept_uniform_draft"] - 1) < 1e-6
    assert abs(u["accept_upper_neighbour"] - 1) < 1e-6 and abs(u["repeat_left_prob"] - 0.25) < 1e-6
    onehot = torch.nn.functional.one_hot(torch.tensor([[0, 0, 1, 1]]), 4).float()
    s = summarise(onehot, torch.tensor([[0, 0, 1, 1]]), layout)
    assert s["entropy"] == 0 and s["top1"] == 1 and s["fraction_positions_top1_over_0.9"] == 1
    assert abs(s["accept_uniform_draft"] - 0.25) < 1e-6  # 1 - TV(one-hot, uniform over 4)
    assert s["accept_upper_neighbour"] == 0  # rows 0,0 then 1,1: the cell above always disagrees
    # p_j(x_{j-1}) in sequence order (what repeat_horizontal drafts): 1, then 0 across the row break, then 1.
    assert abs(s["repeat_left_prob"] - 2 / 3) < 1e-6


def test_class_requests_batch_the_labels():
    model = tiny_llamagen("c2i")
    requests = class_requests(model, list(range(5)), batch_size=2)
    assert [r[1].class_labels.tolist() for r in requests] == [[0, 1], [2, 3], [4]]
