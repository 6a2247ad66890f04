"""The Janus adapter against transformers itself: greedy token identity with ``JanusForConditionalGeneration``'s
own image ``generate()`` on three tiny configs (GQA, MHA, MQA; with and without CFG; left-padded batches),
cached logits after rollbacks and holes against a full recompute, and the unconditional rows as ``generate``
builds them."""

from __future__ import annotations

import pytest
import torch

from arvis.engine.engine import DecodeEngine
from arvis.engine.sampling import SamplingConfig
from arvis.methods import decode
from arvis.models.hf_backbone import SlotCache
from arvis.models.janus import JanusBackbone, JanusPromptTokens, janus_config, janus_grid, janus_layout
from arvis.models.protocol import Condition
from arvis.tokenizers.janus_text import prompt_batch
from tests.janus_fixtures import backbone_for, tiny_janus, transformers_generate

GREEDY = SamplingConfig(temperature=0.0)
# (codes, grid side, hidden, layers, heads, kv heads): grouped-query, multi-head and multi-query attention.
CONFIGS = {
    "gqa-3x3": dict(num_codes=16, grid=3, hidden=32, layers=2, heads=4, kv_heads=2),
    "mha-4x4": dict(num_codes=24, grid=4, hidden=48, layers=1, heads=3, kv_heads=3, seed=1),
    "mqa-2x2": dict(num_codes=32, grid=2, hidden=16, layers=3, heads=2, kv_heads=1, seed=2),
}
PROMPTS = ["grinning face with big eyes", "rocket", "water wave"]


@pytest.fixture(scope="module", params=list(CONFIGS), ids=list(CONFIGS))
def tiny(request):
    return tiny_janus(**CONFIGS[request.param])


@pytest.fixture(scope="module")
def gqa():
    return tiny_janus(**CONFIGS["gqa-3x3"])


@pytest.mark.parametrize("guidance", [None, 3.0], ids=["no-cfg", "cfg-3"])
def test_greedy_tokens_equal_transformers_generate(tiny, guidance):
    """A left-padded batch of three prompts: arvis's greedy tokens are ``generate()``'s, row by row."""
    model, tok = tiny
    backbone, condition = backbone_for(model, tok, PROMPTS)
    assert not bool(condition.mask.all())  # real padding
    sampling = SamplingConfig(temperature=0.0, guidance_scale=guidance or 1.0)
    tokens, stats = decode(backbone, condition, sampling)
    ref = transformers_generate(model, condition, guidance, do_sample=False)
    assert torch.equal(tokens, ref)
    assert len(set(tokens.flatten().tolist())) > 2  # not a constant path
    assert stats.summary()["target_forwards"] == backbone.layout.num_tokens
    if guidance is not None:
        plain, _ = decode(backbone, condition, GREEDY)
        assert not torch.equal(plain, tokens)  # guidance changed the path: the unconditional rows were used


def test_greedy_cfg_single_unpadded_prompt_equals_generate(gqa):
    model, tok = gqa
    backbone, condition = backbone_for(model, tok, ["green heart"])
    assert bool(condition.mask.all())
    tokens, _ = decode(backbone, condition, SamplingConfig(temperature=0.0, guidance_scale=5.0))
    assert torch.equal(tokens, transformers_generate(model, condition, 5.0, do_sample=False))


def test_null_condition_is_generates_unconditional_rows(gqa):
    """Every prompt token but BOS and BOI becomes PAD; the mask (left padding included) is the prompt's."""
    model, tok = gqa
    backbone, condition = backbone_for(model, tok, ["rocket", "grinning face with big eyes"])
    null = backbone.null_condition(condition)
    special = JanusPromptTokens.from_tokenizer(tok)
    assert torch.equal(null.mask, condition.mask)
    kept = (condition.token_ids == special.bos) | (condition.token_ids == special.boi)
    assert torch.equal(null.token_ids[kept], condition.token_ids[kept])
    assert bool((null.token_ids[~kept] == special.pad).all())
    assert int(kept.sum()) == 4  # BOS and BOI of each prompt


def test_layout_grid_and_config_checks(gqa):
    model, _ = gqa
    assert janus_grid(model) == 3
    layout = janus_layout(3, 16, condition_length=5)
    assert layout.num_tokens == 9 and layout.vocab_size == 16 and not layout.structural_tokens
    with pytest.raises(ValueError, match="multiple of 32"):
        janus_config(300, 32, 1, 2, 1, 64, num_codes=8, grid=2, vq=dict(base_channels=16, channel_multiplier=[1]))
    cfg = janus_config(300, 32, 1, 2, 1, 64, num_codes=8, grid=2, vq=dict(base_channels=32, channel_multiplier=[1]))
    cfg.vision_config.num_image_tokens = 9
    with pytest.raises(ValueError, match="num_image_tokens"):
        janus_grid(cfg)
    with pytest.raises(TypeError, match="JanusForConditionalGeneration"):
        JanusBackbone(torch.nn.Linear(2, 2), JanusPromptTokens(1, 4, 0), 3)


def _reference_probs(model, prompt: torch.Tensor, tokens: list[int], positions: list[int]) -> torch.Tensor:
    """Next-code probabilities after ``prompt + tokens`` from a full, cache-free transformers forward with explicit
    positions (the decoder over the prompt's embeddings and ``prepare_embeddings_for_image_generation``)."""
    with torch.no_grad():
        h = model.get_input_embeddings()(prompt[None])
        if tokens:
            h = torch.cat([h, model.prepare_embeddings_for_image_generation(torch.tensor([tokens]))], dim=1)
        pos = torch.tensor(list(range(prompt.numel())) + positions)[None]
        out = model.model.language_model(inputs_embeds=h, position_ids=pos).last_hidden_state
        return model.model.generation_head(out[0, -1]).float().softmax(-1)


def test_logits_after_rollbacks_and_holes_equal_a_full_recompute(gqa):
    model, tok = gqa
    backbone, condition = backbone_for(model, tok, ["smiling cat"])
    C = backbone.layout.condition_length
    prompt = condition.token_ids[0]
    engine = DecodeEngine(backbone, condition, SamplingConfig())
    engine.prefill()
    g = torch.Generator().manual_seed(3)
    K = backbone.layout.vocab_size
    committed = [int(t) for t in torch.randint(0, K, (2,), generator=g)]
    engine.evaluate(torch.tensor([committed]), torch.tensor([[0, 1]]))
    for _trial in range(3):  # a window of drafts after the prefix, then a rollback to the prefix
        drafts = [int(t) for t in torch.randint(0, K, (3,), generator=g)]
        n = len(committed)
        p = engine.evaluate(torch.tensor([drafts]), torch.arange(n, n + 3)[None])[0]
        for t in range(3):
            ref = _reference_probs(model, prompt, committed + drafts[: t + 1], list(range(C, C + n + t + 1)))
            torch.testing.assert_close(p[t], ref, atol=1e-5, rtol=1e-4)
        engine.truncate(torch.tensor([n]))
        committed.append(drafts[0])
        engine.evaluate(torch.tensor([[committed[-1]]]), torch.tensor([[n]]))
    # Holes (ZipAR, staircase bands): indices 1, 3, 4 stay unwritten while 0, 2, 5 are evaluated in one forward.
    engine = DecodeEngine(backbone, condition, SamplingConfig())
    engine.prefill()
    p = engine.evaluate(torch.tensor([[5, 9, 2]]), torch.tensor([[0, 2, 5]]))[0]
    for t, (seen, positions) in enumerate([([5], [C]), ([5, 9], [C, C + 2]), ([5, 9, 2], [C, C + 2, C + 5])]):
        torch.testing.assert_close(p[t], _reference_probs(model, prompt, seen, positions), atol=1e-5, rtol=1e-4)


def test_batch_equals_single_and_retire_compacts_the_positions(gqa):
    """Ragged MC-SJD over prompts of different lengths (finished samples leave the batch) gives each sample the
    tokens it gets alone with the same generator."""
    model, tok = gqa
    backbone, condition = backbone_for(model, tok, PROMPTS)
    sampling = SamplingConfig(guidance_scale=2.0, top_k=8)
    gens = [torch.Generator().manual_seed(s) for s in (1, 2, 3)]
    batch, _ = decode(backbone, condition, sampling, "mc-sjd", gens, window=4, coupling="gumbel")
    for b in range(3):
        one = Condition(token_ids=condition.token_ids[b:b + 1], mask=condition.mask[b:b + 1])
        single, _ = decode(backbone, one, sampling, "ar", torch.Generator().manual_seed(b + 1))
        assert torch.equal(batch[b], single[0]), PROMPTS[b]


def test_slot_cache_is_a_transformers_cache_and_refuses_right_padding(gqa):
    from transformers.cache_utils import Cache

    model, tok = gqa
    backbone, condition = backbone_for(model, tok, ["rocket", "grinning face with big eyes"])
    cache = backbone.allocate_cache(2)
    assert isinstance(cache, Cache) and isinstance(cache, SlotCache) and cache.slots == backbone.layout.max_slots
    assert cache.nbytes() == 2 * backbone.cache_bytes_per_row()
    right = Condition(token_ids=condition.token_ids, mask=condition.mask.flip(1))
    with pytest.raises(ValueError, match="left-padded"):
        decode(backbone, right, GREEDY)
    with pytest.raises(ValueError, match="token_ids of shape"):
        decode(backbone, Condition(token_ids=condition.token_ids[:, 1:]), GREEDY)


def test_prompts_equal_janus_processor(gqa):
    """``prompt_batch`` tokenises exactly what ``JanusProcessor(generation_mode="image")`` does, left-padded."""
    from transformers import JanusImageProcessor, JanusProcessor

    _, tok = gqa
    processor = JanusProcessor(JanusImageProcessor(), tok)
    ids, mask = prompt_batch(tok, PROMPTS)
    ref = processor(text=PROMPTS, generation_mode="image", padding=True)
    assert torch.equal(ids, ref.input_ids) and torch.equal(mask, ref.attention_mask.bool())
