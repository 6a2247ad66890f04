"""Engine primitives: logits processing, sampling, randomness, statistics."""

from __future__ import annotations

import pytest
import torch
from scipy import stats as sps

from arvis.engine.engine import DecodeEngine, NonFiniteError
from arvis.engine.sampling import SamplingConfig, filter_logits, logits_to_probs
from arvis.methods import decode
from arvis.methods.ar import Autoregressive
from arvis.models.protocol import Condition
from arvis.utils.random import RandomStreams, sample_categorical
from tests.conftest import tiny_llamagen


def reference_filter(logits: torch.Tensor, top_k: int, top_p: float) -> torch.Tensor:
    """A plain per-row restatement of LlamaGen's top_k_top_p_filtering (ties at the k-th value kept)."""
    out = logits.clone()
    for row in out.view(-1, out.shape[-1]):
        if top_k > 0:
            kth = sorted(row.tolist(), reverse=True)[min(top_k, row.numel()) - 1]
            row[row < kth] = float("-inf")
        if top_p < 1.0:
            order = sorted(range(row.numel()), key=lambda i: -row[i].item())
            probs = row.softmax(-1)
            mass = 0.0
            for rank, i in enumerate(order):
                if rank > 0 and mass > top_p:
                    row[i] = float("-inf")
                mass += probs[i].item()
    return out


@pytest.mark.parametrize("top_k, top_p", [(0, 1.0), (3, 1.0), (0, 0.5), (5, 0.8), (1, 1.0), (100, 0.3)])
def test_filter_matches_reference(top_k, top_p):
    logits = torch.randn(4, 2, 16, generator=torch.Generator().manual_seed(top_k))
    logits[0, 0, :4] = 1.5  # ties at the top-k boundary are kept
    torch.testing.assert_close(filter_logits(logits, top_k, top_p), reference_filter(logits, top_k, top_p))


def test_cfg_combine_and_interval():
    c = torch.randn(1, 4, 8, generator=torch.Generator().manual_seed(0))
    u = torch.randn(1, 4, 8, generator=torch.Generator().manual_seed(1))
    idx = torch.arange(4)[None]
    cfg = SamplingConfig(guidance_scale=3.0, cfg_interval=1)  # guides indices 0..2 (LlamaGen counts after prefill)
    p = logits_to_probs(c, u, cfg, idx)
    guided = (u + 3.0 * (c - u)).softmax(-1)
    torch.testing.assert_close(p[:, :3], guided[:, :3])
    torch.testing.assert_close(p[:, 3], c[:, 3].softmax(-1))
    p_all = logits_to_probs(c, u, SamplingConfig(guidance_scale=3.0), idx)
    torch.testing.assert_close(p_all, guided)


def test_greedy_and_forced_tokens():
    logits = torch.randn(2, 3, 10, generator=torch.Generator().manual_seed(2))
    p = logits_to_probs(logits, None, SamplingConfig(temperature=0.0), torch.zeros(2, 3, dtype=torch.long))
    assert torch.equal(p.argmax(-1), logits.argmax(-1)) and torch.equal(p.sum(-1), torch.ones(2, 3))
    forced = torch.tensor([-1, 7, -1])
    idx = torch.tensor([[0, 1, 2], [1, 1, 0]])
    p = logits_to_probs(logits, None, SamplingConfig(), idx, forced)
    assert torch.equal(p[0, 1], torch.nn.functional.one_hot(torch.tensor(7), 10).float())
    assert torch.equal(p[1, :2].argmax(-1), torch.tensor([7, 7]))
    torch.testing.assert_close(p[0, 0], logits[0, 0].softmax(-1))


def test_exponential_race_samples_the_distribution():
    probs = torch.tensor([0.5, 0.25, 0.125, 0.125, 0.0])
    noise = torch.empty(200_000, 5).exponential_(generator=torch.Generator().manual_seed(0))
    counts = torch.bincount(sample_categorical(probs.expand(200_000, 5), noise), minlength=5)
    assert counts[4] == 0
    chi2 = sps.chisquare(counts[:4].numpy(), (probs[:4] * 200_000).numpy())
    assert chi2.pvalue > 1e-4


def test_random_streams_per_sample_independent_of_batch():
    a = RandomStreams([torch.Generator().manual_seed(s) for s in (1, 2, 3)], 3)
    b = RandomStreams([torch.Generator().manual_seed(2)], 1)
    assert torch.equal(a.uniform((5,))[1], b.uniform((5,))[0])
    assert torch.equal(a.uniform((5,), rows=[1])[0], b.uniform((5,))[0])
    with pytest.raises(ValueError, match="exactly one per sample"):
        RandomStreams([torch.Generator()], 2)


def test_stats_record_which_forward_committed_each_token():
    model = tiny_llamagen("c2i")
    tokens, stats = decode(model, Condition(class_labels=torch.tensor([0, 1])), SamplingConfig(guidance_scale=2.0),
                           "ar", torch.Generator().manual_seed(0))
    assert tokens.shape == (2, 16) and (tokens >= 0).all()
    for s in stats.samples:
        assert s.commit_forward == list(range(16))
        assert s.accepted_per_forward == [1] * 16 and s.target_forwards == 16 and s.step_compression == 1.0
    assert stats.batch_target_forwards == 16


def test_greedy_ar_is_deterministic_across_generators():
    model = tiny_llamagen("c2i")
    cond = Condition(class_labels=torch.tensor([3]))
    a, _ = decode(model, cond, SamplingConfig(top_k=1), "ar", torch.Generator().manual_seed(0))
    b, _ = decode(model, cond, SamplingConfig(top_k=1), "ar", torch.Generator().manual_seed(1))
    assert torch.equal(a, b)


# --------------------------------------------------------------------------- non-finite numbers (issue 15.1)
@pytest.mark.parametrize("name, value", [("guidance_scale", float("inf")), ("guidance_scale", float("nan")),
                                         ("guidance_scale", 1e300), ("temperature", float("inf")),
                                         ("temperature", float("nan"))])
def test_sampling_config_refuses_non_finite(name, value):
    with pytest.raises(ValueError, match=f"{name} must be a finite number"):
        SamplingConfig(**{name: value})


def _poison_class(model, label: int) -> None:
    """NaN condition embedding for one class: only the samples of that class get NaN logits."""
    with torch.no_grad():
        model.cls_embedding.embedding_table.weight[label] = float("nan")


@pytest.mark.parametrize("method, options", [("ar", {}), ("mc-sjd", {"window": 4}), ("sjd", {"window": 3}),
                                             ("zipar", {"row_lag": 2})])
def test_nan_logits_fail_the_request_naming_the_samples(method, options):
    model = tiny_llamagen("c2i")
    _poison_class(model, 3)
    cond = Condition(class_labels=torch.tensor([0, 3, 1, 3]))
    with pytest.raises(NonFiniteError, match=r"sample\(s\) \[1, 3\].*model's logits were NaN"):
        decode(model, cond, SamplingConfig(guidance_scale=2.0), method, torch.Generator().manual_seed(0), **options)


def test_guidance_overflow_is_named_as_the_cause():
    model = tiny_llamagen("c2i")
    cond = Condition(class_labels=torch.tensor([0, 1]))
    # Finite in fp32, but (c - u) * 3e38 overflows: the guided logits hold ±inf and p is NaN.
    with pytest.raises(NonFiniteError, match=r"sample\(s\) \[0, 1\].*guidance_scale=3e\+38"):
        decode(model, cond, SamplingConfig(guidance_scale=3e38), "mc-sjd", torch.Generator().manual_seed(0), window=4)


def test_healthy_samples_are_unaffected_by_a_bad_one():
    """Rows never mix: a healthy sample decoded beside a poisoned one equals the same sample alone."""
    model = tiny_llamagen("c2i")
    alone, _ = decode(model, Condition(class_labels=torch.tensor([0])), SamplingConfig(guidance_scale=2.0), "ar",
                      [torch.Generator().manual_seed(5)])
    poisoned = tiny_llamagen("c2i")
    _poison_class(poisoned, 3)
    engine = DecodeEngine(poisoned, Condition(class_labels=torch.tensor([0, 3])), SamplingConfig(guidance_scale=2.0),
                          [torch.Generator().manual_seed(5), torch.Generator().manual_seed(6)])
    Autoregressive().run(engine)
    assert torch.equal(engine.tokens[0], alone[0])
    with pytest.raises(NonFiniteError, match=r"sample\(s\) \[1\]"):
        engine.finish()


def test_sjd_stops_at_the_first_iteration_after_the_bad_forward():
    """The Jacobi loop reads the flags at its once-per-iteration sync: it fails after a few forwards."""
    model = tiny_llamagen("c2i", grid=8)
    _poison_class(model, 2)
    forwards = []
    original = model.forward_tokens

    def counting(*args):
        forwards.append(1)
        return original(*args)

    model.forward_tokens = counting
    with pytest.raises(NonFiniteError):
        decode(model, Condition(class_labels=torch.tensor([2])), SamplingConfig(), "mc-sjd",
               torch.Generator().manual_seed(0), window=4)
    assert len(forwards) <= 1  # the prefill's NaN is seen at the first sync, before a second forward


# --------------------------------------------------------------------------- cache rows
def test_static_cache_select_rows_keeps_the_chosen_rows():
    from arvis.models.protocol import StaticKVCache

    cache = StaticKVCache(2, 4, 1, 3, 2, torch.float32, "cpu")
    for layer in range(2):
        cache.keys[layer].copy_(torch.arange(4.0)[:, None, None, None].expand(4, 1, 3, 2) + 10 * layer)
        cache.values[layer].copy_(-cache.keys[layer])
    cache.select_rows(torch.tensor([3, 1]))
    assert cache.rows == 2 and cache.keys[1][:, 0, 0, 0].tolist() == [13.0, 11.0]
    assert cache.values[0][:, 0, 0, 0].tolist() == [-3.0, -1.0]


def test_inverse_cdf_samples_the_distribution_and_never_a_zero():
    from arvis.utils.random import draw

    probs = torch.tensor([0.5, 0.0, 0.25, 0.125, 0.125, 0.0])
    u = torch.rand(200_000, generator=torch.Generator().manual_seed(0))
    u[:3] = torch.tensor([0.0, 0.5, 1.0 - 2**-24])  # the edges of [0, 1)
    counts = torch.bincount(draw(probs.expand(200_000, 6) * 3.0, u), minlength=6)  # unnormalised weights
    assert counts[1] == 0 and counts[5] == 0
    chi2 = sps.chisquare(counts[[0, 2, 3, 4]].numpy(), (probs[[0, 2, 3, 4]] * 200_000).numpy())
    assert chi2.pvalue > 1e-4
