"""VAR: official layouts, presets, caches, the next-scale sampler's exact distribution, the pipeline and its methods.

The official code is not part of the repository; the tests marked ``reference`` import it from a checkout
named by ``ARVIS_VAR_REFERENCE`` (FoundationVision/VAR) and are skipped without one —
``eval/compare_var_reference.py`` runs the same comparisons on exported weights.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import sys

import numpy as np
import pytest
import torch

from arvis.engine.guidance import RULES
from arvis.engine.sampling import SamplingConfig
from arvis.methods import METHODS, DecoderKind, build_method, is_lossless, validate_method
from arvis.methods.next_scale import decode_scales
from arvis.models.next_scale import ScaleLayout
from arvis.models.var import (
    VAR_PRESETS,
    VARTransformer,
    export_var_checkpoint,
    load_var_checkpoint,
    official_state_dict,
)
from arvis.pipelines import VARPipeline
from arvis.tokenizers.var_vq import VARVQModel, load_var_vq_checkpoint
from tests.lossless_harness import compare, empirical

PATCH = (1, 2, 3, 4)


def tiny_var(vocab: int = 32, cvae: int = 4, depth: int = 2, dim: int = 32, heads: int = 2, patch=PATCH, seed: int = 0,
             **kw) -> VARTransformer:
    model = VARTransformer(vocab_size=vocab, Cvae=cvae, num_classes=3, depth=depth, embed_dim=dim, num_heads=heads,
                           patch_nums=patch, class_names=["a", "b", "c"], **kw)
    model.init_weights(torch.Generator().manual_seed(seed), init_head=1.0, init_adaln_gamma=0.5)
    return model.eval()


def tiny_vq(vocab: int = 32, cvae: int = 4, patch=PATCH, seed: int = 0) -> VARVQModel:
    vq = VARVQModel(vocab_size=vocab, z_channels=cvae, ch=8, ch_mult=(1, 2), norm_num_groups=4, v_patch_nums=patch)
    vq.init_weights(torch.Generator().manual_seed(seed))
    with torch.no_grad():
        vq.quantize.embedding.weight.normal_(0, 1.0, generator=torch.Generator().manual_seed(seed + 1))
    return vq.eval()


def tiny_pipeline() -> VARPipeline:
    return VARPipeline(tiny_var(), tiny_vq(), tiny_var(depth=1, dim=16, seed=1))


# ----------------------------------------------------------------------------- official layouts
@pytest.mark.parametrize("name", sorted(VAR_PRESETS))
def test_presets_have_the_official_parameter_counts(name):
    with torch.device("meta"):
        model = VARTransformer.from_preset(name)
    preset = VAR_PRESETS[name]
    count = sum(p.numel() for p in model.parameters())
    assert count == preset.params  # measured with the official code (models/__init__.py build_vae_var)
    unit = 1e9 if preset.published.endswith("B") else 1e6
    assert abs(count / unit / float(preset.published[:-1]) - 1) < 0.05  # the README rounds (1.03B is "1.0B")


def test_official_tokenizer_architecture():
    with torch.device("meta"):
        vq = VARVQModel()  # vae_ch160v4096z32.pth
    sd = vq.state_dict()
    assert len(sd) == 324  # the official VQVAE's state dict (measured with the official code)
    assert sum(p.numel() for p in vq.parameters()) == 108_948_355
    assert tuple(sd["quantize.ema_vocab_hit_SV"].shape) == (10, 4096)
    assert tuple(sd["encoder.down.4.attn.1.qkv.weight"].shape) == (1920, 640, 1, 1)
    assert {f"quantize.quant_resi.qresi_ls.{i}.weight" for i in range(4)} <= set(sd)
    assert tuple(sd["decoder.up.0.block.2.conv2.weight"].shape) == (160, 160, 3, 3)


def test_official_checkpoint_round_trip(tmp_path):
    model = tiny_var()
    path = tmp_path / "var_tiny.pth"
    export_var_checkpoint(model, path)
    raw = torch.load(path, weights_only=True)
    assert set(raw) == set(official_state_dict(model))
    assert {"lvl_1L", "attn_bias_for_masking", "blocks.0.attn.zero_k_bias"} <= set(raw)
    loaded = load_var_checkpoint(path)
    for key in ("vocab_size", "Cvae", "num_classes", "depth", "embed_dim", "num_heads", "shared_aln", "attn_l2_norm"):
        assert loaded.config[key] == model.config[key], key
    assert tuple(loaded.config.patch_nums) == PATCH
    x = torch.randn(2, 29, 4)
    torch.testing.assert_close(loaded(torch.tensor([0, 2]), x), model(torch.tensor([0, 2]), x), atol=0, rtol=0)
    again = tmp_path / "again.pth"
    export_var_checkpoint(loaded, again)
    back = torch.load(again, weights_only=True)
    assert set(back) == set(raw) and all(torch.equal(back[k], raw[k]) for k in raw)


def test_official_tokenizer_file_round_trip(tmp_path):
    vq = tiny_vq()
    torch.save(vq.state_dict(), tmp_path / "vae.pth")  # the official file is a flat state dict
    config = {k: v for k, v in vq.config.items() if not k.startswith("_")}
    loaded = load_var_vq_checkpoint(str(tmp_path / "vae.pth"), **config)
    codes = vq.encode(torch.rand(1, 3, 8, 8) * 2 - 1)
    assert torch.equal(loaded.decode_codes(codes), vq.decode_codes(codes))
    with pytest.raises(ValueError, match="does not fit VARVQModel"):
        load_var_vq_checkpoint(str(tmp_path / "vae.pth"), **{**config, "z_channels": 8})


def test_wrong_preset_and_foreign_checkpoints_are_refused(tmp_path):
    path = tmp_path / "m.pth"
    export_var_checkpoint(tiny_var(), path)
    with pytest.raises(ValueError, match="not a VAR-d20 checkpoint"):
        load_var_checkpoint(path, preset="d20")
    with pytest.raises(ValueError, match="patch_nums"):
        load_var_checkpoint(path, patch_nums=(1, 2, 3, 5))
    torch.save({"tok_embeddings.weight": torch.zeros(2, 2)}, tmp_path / "llamagen.pth")
    with pytest.raises(ValueError, match="not a VAR transformer"):
        load_var_checkpoint(tmp_path / "llamagen.pth")


# ----------------------------------------------------------------------------- model
def test_cached_scale_by_scale_logits_equal_teacher_forced():
    model, vq = tiny_var(), tiny_vq()
    layout = model.scale_layout
    codes = torch.randint(0, 32, (3, layout.num_tokens), generator=torch.Generator().manual_seed(0))
    labels = torch.tensor([0, 1, 2])
    inputs = vq.quantize.teacher_inputs(vq.split_codes(codes))
    with torch.no_grad():
        full = model(labels, inputs)
        cache = model.allocate_cache(3)
        cond = model.condition(labels)
        parts = []
        for s, (b, e) in enumerate(layout.bounds):
            x = model.first_input(cond) if s == 0 else model.embed_input(s, inputs[:, b - 1:e - 1])
            parts.append(model.forward_scales(x, cond, cache, s, s))
        # Two scales at once (CoDe's refiner entry) against a fresh cache.
        cache2 = model.allocate_cache(3)
        x01 = torch.cat([model.first_input(cond), model.embed_input(1, inputs[:, 0:4])], 1)
        joint = model.forward_scales(x01, cond, cache2, 0, 1)
    torch.testing.assert_close(torch.cat(parts, 1), full, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(joint, full[:, :5], atol=1e-5, rtol=1e-5)


def test_shared_adaln_and_no_l2_variants_run():
    for kw in ({"shared_aln": True}, {"attn_l2_norm": False}):
        model = tiny_var(**kw)
        out = model(torch.tensor([0]), torch.zeros(1, model.scale_layout.num_tokens - 1, 4))
        assert out.shape == (1, 30, 32) and torch.isfinite(out).all()


def test_tokenizer_codes_round_trip_and_teacher_inputs():
    vq = tiny_vq()
    images = torch.rand(2, 3, 8, 8) * 2 - 1
    codes = vq.encode(images)
    assert codes.shape == (2, sum(p * p for p in PATCH))
    f_hat = vq.quantize.fhat_from_ids(vq.split_codes(codes))
    torch.testing.assert_close(vq.decode_codes(codes), vq.fhat_to_img(f_hat))
    # The next-scale inputs the sampler builds equal the teacher-forcing inputs of training.
    f = torch.zeros_like(f_hat)
    nexts = []
    for s, ids in enumerate(vq.split_codes(codes)):
        f, nxt = vq.quantize.next_scale_input(s, f, vq.quantize.code_map(ids, PATCH[s]))
        if nxt is not None:
            nexts.append(nxt)
    torch.testing.assert_close(torch.cat(nexts, 1), vq.quantize.teacher_inputs(vq.split_codes(codes)))
    with pytest.raises(ValueError, match="codes must have shape"):
        vq.decode_codes(codes[:, :5])


# ----------------------------------------------------------------------------- exact distribution
def exact_pyramid_distribution(model, vq, label, sampling) -> np.ndarray:
    """P(every token pyramid) for patch_nums (1, 2), written out from the model's logits in float64."""
    V, S = model.scale_layout.vocab_size, model.scale_layout.num_scales
    cond_u = model.condition(torch.tensor([label, model.num_classes]))

    def probs(logits, s):
        t = sampling.guidance_scale * s / (S - 1)  # VAR's ramp, written out here (not the library's rule)
        c, u = logits[0].double(), logits[1].double()
        return ((1 + t) * c - t * u).softmax(-1)

    out = np.zeros(V ** 5)
    with torch.no_grad():
        cache = model.allocate_cache(2)
        p0 = probs(model.forward_scales(model.first_input(cond_u), cond_u, cache, 0, 0), 0)[0]
        for x0 in range(V):
            f, nxt = vq.quantize.next_scale_input(0, torch.zeros(1, 4, 2, 2), vq.quantize.code_map(torch.tensor([[x0]]), 1))
            c1 = model.allocate_cache(2)
            x = torch.cat([model.first_input(cond_u), model.embed_input(1, nxt.repeat(2, 1, 1))], 1)
            p1 = probs(model.forward_scales(x, cond_u, c1, 0, 1)[:, 1:], 1)  # [4, V]
            for rest in itertools.product(range(V), repeat=4):
                prob = p0[x0] * math.prod(float(p1[i, r]) for i, r in enumerate(rest))
                out[sum(t * V ** i for i, t in enumerate((x0, *rest)))] = prob
    return out


def test_next_scale_sampler_draws_the_exact_distribution_and_a_wrong_ramp_fails():
    """N = 40,000 pyramids of a 2-scale model (V = 3: 243 outcomes), CFG ramp on, in one batched call.

    Pass: chi-square p >= 1e-4 and TV below three times its expected value under exact sampling
    (E[TV] = ½ Σ sqrt(2 p (1 − p) / (π N)), from the exact distribution). Control with teeth: sampling with the
    scale-0 logits guided at full strength (t = cfg instead of VAR's t = 0 there — a constant-CFG port) must be
    rejected by both criteria."""
    model = tiny_var(vocab=3, patch=(1, 2), seed=3)
    vq = tiny_vq(vocab=3, patch=(1, 2), seed=3)
    sampling = SamplingConfig(guidance_scale=1.5, guidance="var")
    exact = exact_pyramid_distribution(model, vq, 1, sampling)
    assert abs(exact.sum() - 1) < 1e-9
    n = 40_000
    bound = 3 * 0.5 * float(np.sqrt(2 * exact * (1 - exact) / (np.pi * n)).sum())
    labels = torch.full((n,), 1)
    tokens, _ = decode_scales(model, vq.quantize, labels, sampling, "ar", torch.Generator().manual_seed(0))
    tv, p = compare(exact, empirical(tokens, 3), n)
    assert p >= 1e-4 and tv <= bound, (tv, p, bound)
    bad, _ = decode_scales(_ConstantRamp(model), vq.quantize, labels, sampling, "ar", torch.Generator().manual_seed(0))
    tv_bad, p_bad = compare(exact, empirical(bad, 3), n)
    assert p_bad < 1e-4 and tv_bad > bound, (tv_bad, p_bad, bound)


class _ConstantRamp(torch.nn.Module):
    """The same model, but its scale-0 logits come out as if guided at full strength (a constant-CFG port)."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def __getattr__(self, name):
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(self.model, name)

    def forward_scales(self, x, cond, cache, first, last, pruning=None):
        logits = self.model.forward_scales(x, cond, cache, first, last, pruning)
        if first == 0 and logits.shape[0] % 2 == 0:  # t = 1.5 instead of 0 at scale 0: c + 1.5 (c - u)
            B = logits.shape[0] // 2
            c, u = logits[:B], logits[B:]
            logits = torch.cat([c + 1.5 * (c - u), u])
        return logits


# ----------------------------------------------------------------------------- pipeline and methods
def test_pipeline_conventions(tmp_path):
    pipe = tiny_pipeline()
    pipe.set_progress_bar_config(disable=True)
    gens = [torch.Generator().manual_seed(i) for i in range(3)]
    out = pipe(class_labels=["a", 1, "c"], generator=gens, output_type="np")
    assert out.images.shape == (3, 8, 8, 3) and out.tokens.shape == (3, 30)
    s = out.stats.samples[0]
    assert (s.tokens, s.target_forwards, s.draft_forwards) == (30, 4, 0) and s.accepted_per_forward == [1, 4, 9, 16]
    # Batch = single with per-image generators; dict = tuple; save/load keeps the samples.
    single = pipe(class_labels=[1], generator=torch.Generator().manual_seed(1), output_type="latent").tokens
    assert torch.equal(single[0], out.tokens[1])
    images, tokens, _ = pipe(class_labels=["a", 1, "c"], generator=[torch.Generator().manual_seed(i) for i in range(3)],
                             output_type="np", return_dict=False)
    assert torch.equal(tokens, out.tokens) and np.array_equal(images, out.images)
    pipe.save_pretrained(tmp_path / "p")
    again = VARPipeline.from_pretrained(tmp_path / "p")
    again.set_progress_bar_config(disable=True)
    assert torch.equal(again(class_labels=[1], generator=torch.Generator().manual_seed(1), output_type="latent").tokens,
                       single)
    seen = []
    pipe(class_labels=[0], output_type="latent", callback_on_step_end=lambda p, s, c, d: seen.append((s, int(c[0]))))
    assert seen == [(0, 1), (1, 5), (2, 14), (3, 30)]


def test_methods_are_registered_labelled_and_validated():
    var = DecoderKind.NEXT_SCALE
    for name in ("code", "cfg-cutoff", "fastvar"):
        assert name in METHODS[var] and not is_lossless(name, kind=var)
    assert is_lossless("ar", kind=var) and RULES["var"].off == 0.0
    validate_method("code", {"draft_scales": 3}, var)  # the draft model comes from the pipeline later
    with pytest.raises(ValueError, match=r"draft_scales must be an integer in \[1, 64\]"):
        validate_method("code", {"draft_scales": 0}, var)
    with pytest.raises(ValueError, match="prune_ratios"):
        build_method("fastvar", var, prune_ratios=[1.5])
    pipe = tiny_pipeline()
    pipe.set_progress_bar_config(disable=True)
    with pytest.raises(ValueError, match=r"draft_scales must be an integer scale index in \[0, 4\]"):
        pipe(class_labels=[0], method="code", draft_scales=7)
    with pytest.raises(ValueError, match="it decodes token models, and this is a next-scale model"):
        pipe(class_labels=[0], method="sjd")
    with pytest.raises(ValueError, match="class id"):
        pipe(class_labels=[5])


def test_folder_sampling_defaults_reach_python_and_the_cli(tmp_path, capsys):
    """The model folder decides what a call leaves out (as for LlamaGen), and `arvis generate|fid` load VAR
    folders through the hub (they failed: VARPipeline had no sampling_defaults)."""
    from arvis.cli import main
    from arvis.hub import load_pipeline

    pipe = tiny_pipeline()
    pipe.sampling_defaults = {"guidance_scale": 0.0, "top_k": 3}
    pipe.save_pretrained(tmp_path / "p")
    loaded = load_pipeline(str(tmp_path / "p"))
    assert loaded.defaults == {"guidance_scale": 0.0, "top_k": 3} == loaded.pipeline.sampling_defaults
    assert loaded.pipeline.sampling_config(top_k=None, top_p=0.5) == SamplingConfig(guidance_scale=0.0, top_k=3,
                                                                                    top_p=0.5, guidance="var")
    assert "_name_or_path" not in (tmp_path / "p" / "transformer" / "config.json").read_text()
    with pytest.raises(ValueError, match="unknown setting"):
        pipe.sampling_defaults = {"guidance": 2.0}
    code = main(["generate", "--model", str(tmp_path / "p"), "--class-ids", "0,1", "--output", str(tmp_path / "out"),
                 "--no-progress"])
    assert code == 0, capsys.readouterr().err
    assert sorted(p.name for p in (tmp_path / "out").glob("*.png")) == ["0000.png", "0001.png"]


@pytest.mark.parametrize("method, options, models, rows", [
    ("code", {"draft_scales": 2}, ["target", "target", "draft", "draft"], [4, 4, 4, 4]),
    ("cfg-cutoff", {"guided_scales": 2}, ["target"] * 4, [4, 4, 2, 2]),
    ("fastvar", {"prune_ratios": [0.5, 0.5]}, ["target"] * 4, [4, 4, 4, 4]),
    ("code", {"draft_scales": 2, "guided_scales": 3, "prune_ratios": [0.5]}, ["target", "target", "draft", "draft"],
     [4, 4, 4, 2]),
])
def test_lossy_methods_follow_their_schedule(method, options, models, rows):
    pipe = tiny_pipeline()
    pipe.set_progress_bar_config(disable=True)
    out = pipe(class_labels=[0, 2], method=method, output_type="latent", generator=torch.Generator().manual_seed(0),
               **options)
    extra = out.stats.samples[0].extra
    assert extra["scale_model"] == models and extra["scale_rows"] == rows
    assert out.tokens.min() >= 0 and out.tokens.max() < 32
    s = out.stats.samples[0]
    assert s.target_forwards == models.count("target") and s.draft_forwards == models.count("draft")
    if method == "fastvar":
        assert extra["pruned_tokens_kept"] == {"2": 5, "3": 8}


def _masked_block_reference(block, x, cond, keys, values, select, fill):
    """One AdaLN block the slow way (the reference FastVAR's gathered forward must equal): both parts run on
    every position of the scale; attention hides the keys of the current scale's pruned tokens (mask); the
    pruned positions then take ``fill`` (the cached outputs). Returns the new ``x`` and the keys/values the
    kept tokens add, in their selection order."""
    g1, g2, s1, s2, b1, b2 = block.modulation(cond)
    a = block.attn
    R, T, C = x.shape
    index = select(0, x)
    kept = torch.zeros(R, T, dtype=torch.bool).scatter_(1, index, True)
    h = block.ln_wo_grad(x) * (s1 + 1) + b1
    bias = torch.cat([a.q_bias, torch.zeros_like(a.q_bias), a.v_bias])
    q, k, v = torch.nn.functional.linear(h, a.mat_qkv.weight, bias).view(R, T, 3, a.heads, a.head_dim).permute(2, 0, 3, 1, 4)
    q = torch.nn.functional.normalize(q, dim=-1) * a.scale_mul_1H11.clamp_max(a.max_scale_mul).exp()
    k = torch.nn.functional.normalize(k, dim=-1)
    allowed = torch.cat([torch.ones(R, keys.shape[2], dtype=torch.bool), kept], 1)[:, None, None, :]
    out = torch.nn.functional.scaled_dot_product_attention(q, torch.cat([keys, k], 2), torch.cat([values, v], 2),
                                                           attn_mask=allowed, scale=a.scale)
    out = a.proj(out.transpose(1, 2).reshape(R, T, C)) * g1
    x = x + torch.where(kept[..., None], out, fill(0, "attn"))
    new_kv = (k.gather(2, index[:, None, :, None].expand(-1, a.heads, -1, a.head_dim)),
              v.gather(2, index[:, None, :, None].expand(-1, a.heads, -1, a.head_dim)))
    index = select(1, x)
    kept = torch.zeros(R, T, dtype=torch.bool).scatter_(1, index, True)
    out = block.ffn(block.ln_wo_grad(x) * (s2 + 1) + b2) * g2
    return x + torch.where(kept[..., None], out, fill(0, "ffn")), new_kv


@torch.no_grad()
def test_fastvar_gathers_the_kept_tokens_and_matches_the_masked_computation():
    """A pruned scale runs the blocks on the kept tokens only (fewer positions through attention and MLP, fewer
    keys in the cache) and gives the same logits as running every position with the pruned keys masked and
    the pruned outputs replaced by the cached ones."""
    from arvis.methods.next_scale import CachedTokenPruning

    model = tiny_var(depth=2, dim=32, heads=2, vocab=32)
    layout = model.scale_layout
    last, keep = 3, 6  # 6 of the 16 tokens of the 4x4 scale
    gen = torch.Generator().manual_seed(3)
    cond = model.condition(torch.tensor([0, 2, 3, 3]))  # two samples and their unconditional rows
    inputs = [model.first_input(cond)] + [model.embed_input(s, torch.randn(4, p * p, 4, generator=gen))
                                          for s, p in enumerate(layout.patch_nums) if s > 0]
    pruning = CachedTokenPruning({last: keep})
    cache = model.allocate_cache(4)
    for s in range(last):
        pruning.begin(layout, s, s)
        model.forward_scales(inputs[s], cond, cache, s, s, pruning)
    length = cache.length
    past = [(cache.keys[i][:, :, :length].clone(), cache.values[i][:, :, :length].clone()) for i in range(2)]

    seen: list[int] = []
    hooks = [m.register_forward_hook(lambda mod, args, out: seen.append(args[0].shape[1]))
             for b in model.blocks for m in (b.attn, b.ffn)]
    pruning.begin(layout, last, last)
    logits = model.forward_scales(inputs[last], cond, cache, last, last, pruning)
    for h in hooks:
        h.remove()
    assert seen == [keep] * 4  # every attention and MLP call saw the kept tokens only, not the 16 of the scale
    assert cache.length == length + keep and cache.scales == last + 1  # only the kept tokens' keys/values

    # The masked reference, block by block, with the same selection rule and the same cached fill maps.
    x = inputs[last]
    ada = model.adaln_condition(cond)
    for i, block in enumerate(model.blocks):
        select = lambda j, h, i=i: pruning.select(i, ("attn", "ffn")[j], h)  # noqa: E731
        fill = lambda j, part, i=i: pruning.fill(i, part, 4)  # noqa: E731
        x, (k, v) = _masked_block_reference(block, x, ada, *past[i], select, fill)
        torch.testing.assert_close(cache.keys[i][:, :, length:length + keep], k, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(cache.values[i][:, :, length:length + keep], v, rtol=1e-5, atol=1e-6)
    reference = model.head(model.head_nm(x, cond)).float()
    torch.testing.assert_close(logits, reference, rtol=1e-5, atol=1e-5)


def test_fastvar_runs_fewer_positions_through_the_blocks_than_ar():
    pipe = tiny_pipeline()
    pipe.set_progress_bar_config(disable=True)
    counted: list[int] = []
    hook = pipe.transformer.blocks[0].ffn.register_forward_hook(lambda m, a, o: counted.append(a[0].shape[:2].numel()))
    positions = {}
    for method, options in (("ar", {}), ("fastvar", {"prune_ratios": [0.5, 0.75]})):
        counted.clear()
        out = pipe(class_labels=[0, 2], method=method, output_type="latent", generator=torch.Generator().manual_seed(0),
                   **options)
        positions[method] = list(counted)
        assert out.stats.samples[0].extra["scale_positions"] == [p // 4 for p in counted]  # rows: 2 samples x CFG
    assert positions["ar"] == [4 * n for n in (1, 4, 9, 16)]
    assert positions["fastvar"] == [4 * n for n in (1, 4, 5, 4)]  # ceil(9·0.5), ceil(16·0.25)
    hook.remove()


def test_code_with_every_scale_on_the_target_is_the_baseline():
    pipe = tiny_pipeline()
    pipe.set_progress_bar_config(disable=True)
    kw = dict(class_labels=[0, 1], output_type="latent")
    a = pipe(**kw, generator=torch.Generator().manual_seed(5)).tokens
    b = pipe(**kw, generator=torch.Generator().manual_seed(5), method="code", draft_scales=4).tokens
    c = pipe(**kw, generator=torch.Generator().manual_seed(5), method="cfg-cutoff", guided_scales=4).tokens
    assert torch.equal(a, b) and torch.equal(a, c)


def test_scale_layout_validates():
    with pytest.raises(ValueError, match="strictly increasing"):
        ScaleLayout((1, 2, 2), 4)
    with pytest.raises(ValueError, match="patch_nums"):
        VARTransformer(patch_nums=(1,))


# ----------------------------------------------------------------------------- against the official code
REFERENCE = os.environ.get("ARVIS_VAR_REFERENCE")


@pytest.mark.skipif(not REFERENCE, reason="set ARVIS_VAR_REFERENCE to a FoundationVision/VAR checkout")
def test_same_noise_same_tokens_as_the_official_sampler():
    sys.path.insert(0, REFERENCE)
    from eval.compare_var_reference import official_pair, official_tokens  # noqa: PLC0415

    ref_vae, ref_var, vq, model = official_pair(PATCH, vocab=32, cvae=4, depth=2, dim=32, heads=2, classes=3)
    labels = torch.tensor([0, 2])
    for cfg, top_k, top_p in ((1.5, 0, 0.0), (3.0, 8, 0.9)):
        ref = official_tokens(ref_var, labels, cfg, top_k, top_p, seed=7)
        sampling = SamplingConfig(guidance_scale=cfg, top_k=top_k, top_p=top_p or 1.0, guidance="var")
        ours, _ = decode_scales(model, vq.quantize, labels, sampling, "ar", torch.Generator().manual_seed(7))
        assert torch.equal(ours, ref)


def test_demo_runs_a_var_model_side_by_side():
    """The demo's core (no server): plain next-scale decoding and CoDe on the same seed, statistics and plots."""
    from arvis.demo.core import (
        DemoLimits,
        DemoModel,
        ModelSet,
        RunResult,
        comparison,
        side_by_side,
        stats_plots,
        validate_request,
    )

    pipe = tiny_pipeline()
    pipe.sampling_defaults = {"guidance_scale": 1.5}
    models = ModelSet({"var": DemoModel(pipeline=pipe, untrained=True, description="tiny")})
    request = validate_request(models, DemoLimits(), model="var", class_label=1, prompt=None, method="code", seed=0,
                               num_images=2, guidance_scale=1.5, top_k=0, top_p=1.0, temperature=1.0,
                               live_preview=True, options={"draft_scales": 3})
    results = [r for r in side_by_side(models, request, DemoLimits(preview_interval_s=0.001)) if isinstance(r, RunResult)]
    ar, code = results
    record = comparison(request, ar, code, untrained=True)
    assert record["method"]["lossless"] is False and record["ar"]["tokens_per_image"] == 30
    assert code.stats.samples[0].draft_forwards == 1
    histogram, order = stats_plots(ar, code, list(pipe.transformer.layout.grid))
    assert histogram.size[0] > 0 and order.size[0] > 0


# ----------------------------------------------------------------------------- the shipped pair
SHIPPED = __import__("arvis.hub", fromlist=["x"]).WEIGHTS_DIR / "var-emoji"  # the `var` alias


@pytest.mark.skipif(not (SHIPPED / "model_index.json").is_file(), reason="the VAR pair is not shipped")
def test_shipped_var_pair_is_trained_and_every_method_runs():
    pipe = VARPipeline.from_pretrained(str(SHIPPED))
    pipe.set_progress_bar_config(disable=True)
    assert pipe.draft_transformer is not None and pipe.vqvae.image_size == 64
    layout = pipe.transformer.scale_layout
    metrics = json.loads((SHIPPED / "metrics.json").read_text())
    for part in ("transformer", "draft_transformer"):  # trained: far below the uniform loss ln V
        assert metrics[part]["val_loss"] < 0.8 * math.log(layout.vocab_size), part
    assert len(pipe.class_names) == pipe.transformer.num_classes == 123  # one class per named emoji
    kw = dict(class_labels=[pipe.class_names[0], 3], output_type="latent")  # a class by its name, one by its id
    for method, options in (("ar", {}), ("code", {"draft_scales": 4}), ("cfg-cutoff", {"guided_scales": 4}),
                            ("fastvar", {"prune_ratios": [0.5]})):
        out = pipe(**kw, method=method, generator=torch.Generator().manual_seed(0), **options)
        assert out.tokens.shape == (2, layout.num_tokens) and 0 <= int(out.tokens.min()) and \
            int(out.tokens.max()) < layout.vocab_size
    with pytest.raises(ValueError, match="draft_scales"):
        pipe(**kw, method="code", draft_scales=layout.num_scales + 1)


def test_var_bench_rows_are_ratios_against_the_same_ar_run():
    """Every VAR method's row takes its speed-up and forward ratio against the one AR run of the bench, and
    AR's many tokens per forward (a whole scale) are printed as a count, not as a speed-up."""
    from arvis.eval.bench import format_markdown, format_text, parse_method_specs, run_bench
    from arvis.eval.plots import compression_vs_ar

    pipe = tiny_pipeline()
    pipe.set_progress_bar_config(disable=True)
    specs = parse_method_specs("fastvar;code:draft_scales=2")
    result = run_bench(pipe.bench_inputs([0, 1], 2, 1), specs, pipe.sampling_config(), repeats=5,
                       forward_cost_sizes=(), progress=False, count_syncs=False)
    ar, fastvar, code = result.records
    assert ar["spec"] == "ar" and ar["step_compression"] == 30 / 4  # a whole scale per forward
    for r in result.records:
        assert r["speedup"] == pytest.approx(ar["latency_s"] / r["latency_s"])
        assert r["forwards_vs_ar"] == ar["target_forwards"] / r["target_forwards"]
        assert compression_vs_ar(r, ar) == r["forwards_vs_ar"]
    assert (ar["forwards_vs_ar"], fastvar["forwards_vs_ar"], code["forwards_vs_ar"]) == (1.0, 1.0, 2.0)
    for text in (format_text(result), format_markdown(result)):
        assert "7.50x" not in text and "7.50" in text  # tokens per forward: a count
    row = next(line for line in format_markdown(result).splitlines() if line.startswith("| ar |"))
    assert "| 7.50 | 1.00x |" in row and "| 1.00x |" in row
