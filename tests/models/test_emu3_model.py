"""The Emu3 adapter against transformers itself: greedy token identity with ``generate()``, the sampled
distribution of every step against ``generate()``'s processed scores, and cached logits after rollbacks
and holes against a full recompute."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from arvis.engine.engine import DecodeEngine
from arvis.engine.sampling import SamplingConfig
from arvis.methods import decode
from arvis.models.emu3 import Emu3SlotCache, Emu3Vocabulary, emu3_layout, image_codes
from arvis.models.protocol import Condition
from tests.emu3_fixtures import NEGATIVE, backbone_for, prefix_allowed_tokens_fn, prompt_ids, tiny_emu3

GREEDY = SamplingConfig(temperature=0.0)


@pytest.fixture(scope="module")
def tiny():
    return tiny_emu3()


def to_model_ids(backbone, tokens: torch.Tensor) -> torch.Tensor:
    return backbone.vocabulary.model_ids()[tokens]


def test_layout_places_structural_tokens_and_extracts_the_grid():
    layout = emu3_layout(3, 4, num_codes=16, condition_length=7)
    assert layout.num_tokens == 3 * 5 + 2 and layout.row_stride == 5 and layout.image_token_range == (0, 16)
    assert layout.structural_tokens == {4: 16, 9: 16, 14: 16, 15: 17, 16: 18}
    seq = torch.arange(layout.num_tokens)[None]
    assert image_codes(seq, layout).tolist() == [[[0, 1, 2, 3], [5, 6, 7, 8], [10, 11, 12, 13]]]
    with pytest.raises(ValueError, match="height"):
        emu3_layout(0, 4, 16, 7)


def test_vocabulary_reads_the_tokenizer_and_refuses_gaps(tiny):
    model, tok = tiny
    voc = Emu3Vocabulary.from_map(tok.get_vocab())
    assert voc.num_codes == 16 and voc.visual_ids == tuple(range(voc.visual_ids[0], voc.visual_ids[0] + 16))
    assert voc == Emu3Vocabulary.from_map(model.config.vocabulary_map)
    broken = dict(tok.get_vocab())
    del broken["<|visual token 000003|>"]
    with pytest.raises(ValueError, match="without gaps"):
        Emu3Vocabulary.from_map(broken)
    with pytest.raises(ValueError, match="structural"):
        Emu3Vocabulary.from_map({k: v for k, v in tok.get_vocab().items() if k != "<|extra_200|>"})


def test_slot_cache_is_a_transformers_cache_written_only_at_explicit_slots(tiny):
    from transformers.cache_utils import Cache

    backbone, condition = backbone_for(*tiny, ["red apple"], 2, 2)
    cache = backbone.allocate_cache(1)
    assert isinstance(cache, Cache) and len(cache) == 2 and cache.slots == backbone.layout.max_slots
    with pytest.raises(RuntimeError, match="write slots"):
        cache.update(torch.zeros(1, 2, 1, 8), torch.zeros(1, 2, 1, 8), 0)
    k = torch.randn(1, cache.heads, 2, cache.head_dim)
    cache.write_slots = torch.tensor([[5, 2]])
    keys, _ = cache.update(k, k, 1)
    assert torch.equal(keys[0, :, 5], k[0, :, 0]) and torch.equal(keys[0, :, 2], k[0, :, 1])
    others = [i for i in range(keys.shape[2]) if i not in (2, 5)]
    assert not keys[:, :, others].any()  # nothing else written (exact: no float sums compared)


@pytest.mark.parametrize("height,width,prompt", [(3, 4, "red apple"), (4, 2, "rocket"), (2, 5, "dog face")])
def test_greedy_tokens_equal_transformers_generate(tiny, height, width, prompt):
    model, tok = tiny
    backbone, condition = backbone_for(model, tok, [prompt], height, width)
    tokens, stats = decode(backbone, condition, GREEDY)
    N = backbone.layout.num_tokens
    ref = model.generate(condition.token_ids, attention_mask=condition.mask.long(), max_new_tokens=N, do_sample=False,
                         prefix_allowed_tokens_fn=prefix_allowed_tokens_fn(tok, height, width))
    assert torch.equal(to_model_ids(backbone, tokens[0]), ref[0, condition.token_ids.shape[1]:][:N])
    assert len(set(image_codes(tokens, backbone.layout).flatten().tolist())) > 1  # not a constant path
    assert stats.summary()["target_forwards"] == N


def test_greedy_with_cfg_and_negative_prompt_equals_transformers_generate(tiny):
    model, tok = tiny
    height, width = 3, 3
    backbone, condition = backbone_for(model, tok, ["green heart"], height, width, negative=NEGATIVE)
    tokens, _ = decode(backbone, condition, SamplingConfig(temperature=0.0, guidance_scale=3.0))
    neg_ids, neg_mask = prompt_ids(tok, [NEGATIVE], height, width)
    N = backbone.layout.num_tokens
    ref = model.generate(condition.token_ids[:, ~(~condition.mask[0])], max_new_tokens=N, do_sample=False,
                         guidance_scale=3.0, negative_prompt_ids=neg_ids, negative_prompt_attention_mask=neg_mask.long(),
                         prefix_allowed_tokens_fn=prefix_allowed_tokens_fn(tok, height, width))
    C = int(condition.mask.sum())
    assert torch.equal(to_model_ids(backbone, tokens[0]), ref[0, C:][:N])
    plain, _ = decode(backbone, condition, GREEDY)
    assert not torch.equal(plain, tokens)  # guidance changed the path: the negative prompt was really used


def test_left_padded_batch_equals_transformers_generate_row_by_row(tiny):
    model, tok = tiny
    prompts = ["grinning face with big eyes", "rocket", "water wave"]
    backbone, condition = backbone_for(model, tok, prompts, 2, 3)
    assert not bool(condition.mask.all())  # real padding
    tokens, _ = decode(backbone, condition, GREEDY)
    N = backbone.layout.num_tokens
    for b, prompt in enumerate(prompts):
        ids, _ = prompt_ids(tok, [prompt], 2, 3)
        ref = model.generate(ids, max_new_tokens=N, do_sample=False,
                             prefix_allowed_tokens_fn=prefix_allowed_tokens_fn(tok, 2, 3))
        assert torch.equal(to_model_ids(backbone, tokens[b]), ref[0, ids.shape[1]:][:N]), prompt


def test_every_step_distribution_equals_transformers_processed_scores(tiny):
    """Sampling with CFG, temperature and top-k: teacher-forced on transformers' own sampled tokens, arvis's
    ``p`` at every step equals the softmax of ``generate()``'s processed scores (restricted to the layout ids)."""
    model, tok = tiny
    height, width = 2, 3
    sampling = SamplingConfig(temperature=0.8, top_k=6, guidance_scale=2.0)
    backbone, condition = backbone_for(model, tok, ["yellow star"], height, width, negative=NEGATIVE)
    N = backbone.layout.num_tokens
    neg_ids, neg_mask = prompt_ids(tok, [NEGATIVE], height, width)
    C = int(condition.mask.sum())
    torch.manual_seed(0)  # transformers' sampler draws from the global stream (test only)
    out = model.generate(condition.token_ids[:, -C:], max_new_tokens=N, do_sample=True, temperature=0.8, top_k=6,
                         guidance_scale=2.0, negative_prompt_ids=neg_ids, negative_prompt_attention_mask=neg_mask.long(),
                         prefix_allowed_tokens_fn=prefix_allowed_tokens_fn(tok, height, width),
                         output_scores=True, return_dict_in_generate=True)
    generated = out.sequences[0, C:C + N]
    ref = torch.stack([s[0].float().softmax(-1) for s in out.scores[:N]])  # [N, V_model]
    to_layout = {int(m): i for i, m in enumerate(backbone.vocabulary.model_ids())}
    layout_tokens = torch.tensor([to_layout[int(t)] for t in generated])
    engine = DecodeEngine(backbone, condition, sampling)
    p0 = engine.prefill()
    p = engine.evaluate(layout_tokens[None, :-1], torch.arange(N - 1)[None])[0]  # one forward, whole sequence
    ours = torch.cat([p0, p])  # [N, K + 3]
    ids = backbone.vocabulary.model_ids()
    torch.testing.assert_close(ours, ref[:, ids], atol=2e-6, rtol=1e-4)
    assert torch.allclose(ref[:, ids].sum(-1), torch.ones(N))  # no mass outside the layout ids
    assert (ours > 0).sum(-1).max() == 6  # top-k really cut


def _reference_probs(model, backbone, prompt: torch.Tensor, tokens: list[int], positions: list[int]) -> torch.Tensor:
    """``softmax`` over the image tokens of a full, cache-free transformers forward of ``prompt + tokens`` with
    explicit positions: the probabilities after the last token."""
    ids = torch.cat([prompt, backbone.vocabulary.model_ids()[torch.tensor(tokens, dtype=torch.long)]])[None]
    pos = torch.tensor(list(range(prompt.numel())) + positions)[None]
    with torch.no_grad():
        logits = model(input_ids=ids, position_ids=pos).logits[0, -1]
    K = backbone.vocabulary.num_codes
    return logits[list(backbone.vocabulary.visual_ids)].float().softmax(-1)[:K]


def test_logits_after_rollbacks_and_holes_equal_a_full_recompute(tiny):
    model, tok = tiny
    backbone, condition = backbone_for(model, tok, ["smiling cat"], 3, 4)
    C = backbone.layout.condition_length
    engine = DecodeEngine(backbone, condition, SamplingConfig())
    engine.prefill()
    g = torch.Generator().manual_seed(3)
    K = backbone.vocabulary.num_codes
    committed = [int(t) for t in torch.randint(0, K, (2,), generator=g)]
    engine.evaluate(torch.tensor([committed]), torch.tensor([[0, 1]]))
    prompt = condition.token_ids[0]
    for _trial in range(4):
        # A window of drafts after the committed prefix, then roll back to the prefix (rejected drafts).
        drafts = [int(t) for t in torch.randint(0, K, (3,), generator=g)]
        n = len(committed)
        index = torch.arange(n, n + 3)[None]
        p = engine.evaluate(torch.tensor([drafts]), index)[0]
        for t in range(3):
            ref = _reference_probs(model, backbone, prompt, committed + drafts[: t + 1], list(range(C, C + n + t + 1)))
            if (n + t + 1) not in backbone.layout.structural_tokens:
                torch.testing.assert_close(p[t, :K], ref, atol=1e-5, rtol=1e-4)
        engine.truncate(torch.tensor([n]))
        committed.append(drafts[0] if (n not in backbone.layout.structural_tokens) else K)
        engine.evaluate(torch.tensor([[committed[-1]]]), torch.tensor([[n]]))
    # Holes (ZipAR, staircase bands): slots never written are never read; each query sees exactly the written
    # tokens at their own positions. Indices 1, 3, 4 stay holes while 0, 2, 5 are evaluated in one forward
    # (their queries predict the free indices 1, 3 and 6).
    engine = DecodeEngine(backbone, condition, SamplingConfig())
    engine.prefill()
    tokens = [5, 9, 2]
    p = engine.evaluate(torch.tensor([tokens]), torch.tensor([[0, 2, 5]]))[0]
    for t, (seen, positions) in enumerate([([5], [C]), ([5, 9], [C, C + 2]), ([5, 9, 2], [C, C + 2, C + 5])]):
        torch.testing.assert_close(p[t, :K], _reference_probs(model, backbone, prompt, seen, positions),
                                   atol=1e-5, rtol=1e-4)


def test_batch_equals_single_and_retire_compacts_the_positions(tiny):
    """Ragged SJD on prompts of different lengths (finished samples leave the batch) gives each sample the
    tokens it gets alone with the same generator — the padding offsets follow the compaction."""
    model, tok = tiny
    prompts = ["grinning face with big eyes", "rocket", "blue car"]
    backbone, condition = backbone_for(model, tok, prompts, 3, 3, negative=NEGATIVE)
    sampling = SamplingConfig(guidance_scale=2.0, top_k=8)
    gens = [torch.Generator().manual_seed(s) for s in (1, 2, 3)]
    batch, _ = decode(backbone, condition, sampling, "mc-sjd", gens, window=4, coupling="gumbel")
    for b in range(3):
        single, _ = decode(backbone, Condition(token_ids=condition.token_ids[b:b + 1], mask=condition.mask[b:b + 1]),
                           sampling, "ar", torch.Generator().manual_seed(b + 1))
        assert torch.equal(batch[b], single[0]), prompts[b]


def test_select_rows_compacts_buffers_and_offsets():
    cache = Emu3SlotCache(2, 4, 1, 6, 2, torch.float32, "cpu")
    cache.keys[1][:, 0, 0, 0] = torch.arange(4.0)
    cache.position_offset = torch.tensor([0, 3, 1, 2])
    cache.select_rows(torch.tensor([3, 1]))
    assert cache.rows == 2 and cache.keys[1][:, 0, 0, 0].tolist() == [3.0, 1.0]
    assert cache.position_offset.tolist() == [2, 3] and cache.layers[1].keys is cache.keys[1]


def test_prefill_refuses_right_padding_and_wrong_lengths(tiny):
    model, tok = tiny
    backbone, condition = backbone_for(model, tok, ["rocket", "grinning face with big eyes"], 2, 2)
    right = Condition(token_ids=condition.token_ids, mask=condition.mask.flip(1))
    with pytest.raises(ValueError, match="left-padded"):
        decode(backbone, right, GREEDY)
    with pytest.raises(ValueError, match="token_ids of shape"):
        decode(backbone, Condition(token_ids=condition.token_ids[:, 1:]), GREEDY)
    with pytest.raises(ValueError, match="negative prompt"):
        decode(backbone, condition, SamplingConfig(guidance_scale=2.0))


def test_head_is_sliced_not_copied_when_visual_ids_are_contiguous(tiny):
    backbone, _ = backbone_for(*tiny, ["rocket"], 2, 2)
    assert backbone._visual_block is not None
    h = torch.randn(2, 3, 32)
    full = F.linear(h, tiny[0].lm_head.weight)[..., backbone.vocabulary.model_ids()]
    torch.testing.assert_close(backbone.head_logits(h), full)


def test_narrow_masks_read_only_the_mask_width(tiny):
    """A mask narrower than the cache gives the same logits as the full-width mask (the slots beyond are unread)."""
    backbone, condition = backbone_for(*tiny, ["rocket"], 3, 4)
    C = backbone.layout.condition_length
    logits = []
    for narrow in (False, True):
        cache = backbone.allocate_cache(1)
        _, valid = backbone.prefill(condition, cache)
        slots = torch.tensor([[C, C + 1, C + 2]])
        width = C + 3 if narrow else cache.slots
        ids = torch.arange(width)
        mask = (ids <= slots[..., None]) & ((ids >= C) | valid[0, ids.clamp_max(C - 1)])
        logits.append(backbone.forward_tokens(torch.tensor([[1, 2, 3]]), slots, cache, mask))
        assert cache.read_width == cache.slots  # restored after the forward
    torch.testing.assert_close(logits[0], logits[1])
