"""LlamaGen backbone: cached multi-position forwards equal the full forward; presets; protocol."""

from __future__ import annotations

import pytest
import torch

from arvis.models.llamagen import GPT_PRESETS, LlamaGenTransformer
from arvis.models.protocol import Condition
from tests.conftest import tiny_llamagen


def _parse_count(s: str) -> tuple[float, float]:
    """The official figure '111M' / '1.4B' → the interval of parameter counts that round to it."""
    scale = 1e9 if s.endswith("B") else 1e6
    digits = s[:-1]
    step = 10 ** -len(digits.split(".")[1]) if "." in digits else 1
    return (float(digits) - step / 2) * scale, (float(digits) + step / 2) * scale


@pytest.mark.parametrize("name", list(GPT_PRESETS))
def test_preset_parameter_counts_match_official(name):
    # c2i presets are counted with 1000 classes; the 1B/3B/7B text models with flan-t5-xl captions (120 x 2048).
    kw = dict(model_type="t2i", cls_token_num=120) if name in ("GPT-1B", "GPT-3B", "GPT-7B") else {}
    with torch.device("meta"):
        model = LlamaGenTransformer.from_preset(name, **kw)
    n = sum(p.numel() for p in model.parameters())
    lo, hi = _parse_count(GPT_PRESETS[name].params)
    assert lo <= n < hi, f"{name}: {n / 1e6:.1f}M parameters, official {GPT_PRESETS[name].params}"


def test_state_dict_has_official_keys_and_no_caches(t2i_model, c2i_model):
    keys = set(c2i_model.state_dict())
    assert "cls_embedding.embedding_table.weight" in keys
    for k in ("tok_embeddings.weight", "layers.0.attention.wqkv.weight", "layers.0.attention.wo.weight",
              "layers.1.feed_forward.w1.weight", "layers.1.feed_forward.w2.weight", "layers.1.feed_forward.w3.weight",
              "layers.0.attention_norm.weight", "layers.0.ffn_norm.weight", "norm.weight", "output.weight"):
        assert k in keys
    assert not any("cache" in k or "freqs" in k or "mask" in k for k in keys)
    assert not any(k.endswith(".bias") for k in keys)
    t_keys = set(t2i_model.state_dict())
    assert {"cls_embedding.cap_proj.fc1.weight", "cls_embedding.cap_proj.fc2.weight",
            "cls_embedding.uncond_embedding"} <= t_keys


def _engine_style_logits(model, condition, tokens, chunks):
    """Feed ``tokens`` through the cache in the given chunks (lists of sequence indices)."""
    B = tokens.shape[0]
    cache = model.allocate_cache(B, torch.float32, "cpu")
    logits0, valid_cond = model.prefill(condition, cache)
    C = model.layout.condition_length
    slot_valid = torch.zeros(B, cache.slots, dtype=torch.bool)
    slot_valid[:, :C] = valid_cond
    out = {}
    slot_ids = torch.arange(cache.slots)
    for chunk in chunks:
        idx = torch.tensor(chunk).expand(B, -1)
        slots = idx + C
        slot_valid.scatter_(1, slots, True)
        mask = (slot_ids <= slots[..., None]) & slot_valid[:, None, :] | (slot_ids == slots[..., None])
        logits = model.forward_tokens(tokens.gather(1, idx), slots, cache, mask)
        for t, j in enumerate(chunk):
            out[j + 1] = logits[:, t]
    out[0] = logits0
    return out


@pytest.mark.parametrize("model_type", ["c2i", "t2i"])
def test_cached_multi_position_forward_equals_full_forward(model_type):
    torch.manual_seed(0)  # test data only
    model = tiny_llamagen(model_type, grid=4, vocab=32)
    N = model.layout.num_tokens
    B = 3
    if model_type == "c2i":
        cond = Condition(class_labels=torch.tensor([0, 3, 4]))
    else:
        mask = torch.ones(B, 6, dtype=torch.bool)
        mask[1, :2] = False  # left padding
        mask[2, :5] = False
        cond = Condition(embeddings=torch.randn(B, 6, 12) * mask[..., None], mask=mask)
    tokens = torch.randint(0, 32, (B, N))
    with torch.no_grad():
        full = model(tokens, cond)  # [B, N, V], teacher forcing
        # Random chunk boundaries, then a re-evaluation of an arbitrary, non-contiguous set of positions.
        perm = list(range(N - 1))
        chunks, i = [], 0
        for size in (1, 3, 2, 5, 4):
            chunks.append(perm[i:i + size])
            i += size
        if perm[i:]:
            chunks.append(perm[i:])
        chunks.append([0, 2, 3, 7, 11, 14])
        got = _engine_style_logits(model, cond, tokens, chunks)
    for j in range(N):
        torch.testing.assert_close(got[j], full[:, j], rtol=0, atol=1e-5)


def test_forward_never_reads_masked_slots(c2i_model):
    """Garbage in a slot the mask excludes must not change any logit."""
    model = c2i_model
    cond = Condition(class_labels=torch.tensor([1]))
    tokens = torch.randint(0, 32, (1, 16), generator=torch.Generator().manual_seed(1))
    ref = _engine_style_logits(model, cond, tokens, [list(range(15))])
    cache = model.allocate_cache(1, torch.float32, "cpu")
    model.prefill(cond, cache)
    for k in cache.keys + cache.values:
        k.normal_(0, 100.0, generator=torch.Generator().manual_seed(2))  # poison every slot
    model.prefill(cond, cache)
    slots = torch.arange(15)[None] + 1
    slot_ids = torch.arange(cache.slots)
    mask = (slot_ids <= slots[..., None]) & (slot_ids[None, None] <= 15)
    logits = model.forward_tokens(tokens[:, :15], slots, cache, mask)
    for j in range(1, 16):
        torch.testing.assert_close(logits[:, j - 1], ref[j], rtol=0, atol=1e-5)


def test_condition_slots_have_zero_rotation(c2i_model):
    rope = c2i_model._rope
    assert rope.shape == (1 + 16, 4, 2)
    assert torch.count_nonzero(rope[0]) == 0
    torch.testing.assert_close(rope[1, :, 0], torch.ones(4))  # grid cell (0, 0): cos = 1


def test_bad_configs_raise():
    with pytest.raises(ValueError, match="block_size"):
        LlamaGenTransformer(dim=32, n_layer=1, n_head=4, block_size=15)
    with pytest.raises(ValueError, match="model_type"):
        LlamaGenTransformer(dim=32, n_layer=1, n_head=4, model_type="x2i")
    with pytest.raises(ValueError, match="unknown LlamaGen preset"):
        LlamaGenTransformer.from_preset("GPT-Z")
