"""Tests for arvis.tokenizers.llamagen_vq (LlamaGen VQ tokenizer, weight-compatible re-implementation).

Reference figures below were obtained by instantiating the official ``VQ_16`` / ``VQ_8`` from
FoundationVision/LlamaGen ``tokenizer/tokenizer_image/vq_model.py`` at commit
ce98ec41803a74a90ce68c40ababa9eaeffeb4ec (2024-06-30) on the meta device and counting
``parameters()`` and ``state_dict()`` entries. 71,883,403 is the "72M" VQ-16 tokenizer of the
LlamaGen paper (arXiv:2406.06525, Table 2).
"""

from __future__ import annotations

import re

import pytest
import torch

from arvis.tokenizers.llamagen_vq import VQ_PRESETS, LlamaGenVQModel, VQLosses

OFFICIAL_PARAMS = {"VQ-16": 71_883_403, "VQ-8": 70_109_835}
OFFICIAL_STATE_DICT_LEN = {"VQ-16": 344, "VQ-8": 300}

# Exact names and shapes taken from the official VQ-16 state dict.
OFFICIAL_VQ16_SAMPLE = {
    "encoder.conv_in.weight": (128, 3, 3, 3),
    "encoder.conv_blocks.0.res.0.conv1.weight": (128, 128, 3, 3),
    "encoder.conv_blocks.2.res.0.nin_shortcut.weight": (256, 128, 1, 1),
    "encoder.conv_blocks.3.downsample.conv.weight": (256, 256, 3, 3),
    "encoder.conv_blocks.4.res.1.conv2.weight": (512, 512, 3, 3),
    "encoder.conv_blocks.4.attn.1.proj_out.weight": (512, 512, 1, 1),
    "encoder.mid.1.q.weight": (512, 512, 1, 1),
    "encoder.mid.2.norm2.bias": (512,),
    "encoder.conv_out.weight": (256, 512, 3, 3),
    "quant_conv.weight": (8, 256, 1, 1),
    "quantize.embedding.weight": (16384, 8),
    "quantize.codebook_used": (65536,),
    "post_quant_conv.weight": (256, 8, 1, 1),
    "decoder.conv_in.weight": (512, 256, 3, 3),
    "decoder.mid.0.conv1.weight": (512, 512, 3, 3),
    "decoder.conv_blocks.0.res.2.conv2.weight": (512, 512, 3, 3),
    "decoder.conv_blocks.0.attn.2.k.weight": (512, 512, 1, 1),
    "decoder.conv_blocks.0.upsample.conv.weight": (512, 512, 3, 3),
    "decoder.conv_blocks.1.res.0.nin_shortcut.weight": (256, 512, 1, 1),
    "decoder.conv_blocks.3.res.0.nin_shortcut.weight": (128, 256, 1, 1),
    "decoder.conv_blocks.4.res.2.norm1.weight": (128,),
    "decoder.norm_out.weight": (128,),
    "decoder.conv_out.weight": (3, 128, 3, 3),
}

# The 98 distinct name patterns of the official VQ-16 state dict (indices replaced by {i}).
_RES = ["conv1", "conv2", "norm1", "norm2"]
_ATTN = ["k", "norm", "proj_out", "q", "v"]
_WB = ["weight", "bias"]
OFFICIAL_VQ16_PATTERNS = sorted(
    {f"{side}.conv_blocks.{{i}}.attn.{{i}}.{m}.{p}" for side in ("encoder", "decoder") for m in _ATTN for p in _WB}
    | {f"{side}.conv_blocks.{{i}}.res.{{i}}.{m}.{p}" for side in ("encoder", "decoder") for m in _RES + ["nin_shortcut"] for p in _WB}
    | {f"{side}.mid.{{i}}.{m}.{p}" for side in ("encoder", "decoder") for m in _RES + _ATTN for p in _WB}
    | {f"{side}.{m}.{p}" for side in ("encoder", "decoder") for m in ("conv_in", "conv_out", "norm_out") for p in _WB}
    | {f"encoder.conv_blocks.{{i}}.downsample.conv.{p}" for p in _WB}
    | {f"decoder.conv_blocks.{{i}}.upsample.conv.{p}" for p in _WB}
    | {f"{m}.{p}" for m in ("quant_conv", "post_quant_conv") for p in _WB}
    | {"quantize.embedding.weight", "quantize.codebook_used"}
)

TINY = dict(
    codebook_size=64,
    codebook_embed_dim=4,
    encoder_ch_mult=(1, 2),
    decoder_ch_mult=(1, 2),
    z_channels=16,
    base_channels=16,
    norm_num_groups=4,
)


def tiny_model(seed: int = 0, **kw) -> LlamaGenVQModel:
    model = LlamaGenVQModel(**{**TINY, **kw})
    return model.init_weights(torch.Generator().manual_seed(seed)).eval()


@pytest.mark.parametrize("name", ["VQ-8", "VQ-16"])
def test_presets_match_official_parameter_counts(name: str) -> None:
    with torch.device("meta"):
        model = LlamaGenVQModel.from_preset(name)
    assert sum(p.numel() for p in model.parameters()) == OFFICIAL_PARAMS[name]
    assert len(model.state_dict()) == OFFICIAL_STATE_DICT_LEN[name]
    assert model.downsample_factor == {"VQ-8": 8, "VQ-16": 16}[name]
    assert model.codebook_size == 16384


def test_vq16_state_dict_layout_matches_official() -> None:
    with torch.device("meta"):
        sd = LlamaGenVQModel.from_preset("VQ-16").state_dict()
    for key, shape in OFFICIAL_VQ16_SAMPLE.items():
        assert key in sd, key
        assert tuple(sd[key].shape) == shape, key
    patterns = sorted({re.sub(r"\.\d+\.", ".{i}.", re.sub(r"\.\d+\.", ".{i}.", k)) for k in sd})
    assert patterns == OFFICIAL_VQ16_PATTERNS
    assert len(OFFICIAL_VQ16_PATTERNS) == 98
    # Attention only at the lowest resolution: 2 encoder + 3 decoder blocks, plus one per mid.
    assert sorted(k for k in sd if k.endswith(".q.weight")) == [
        "decoder.conv_blocks.0.attn.0.q.weight",
        "decoder.conv_blocks.0.attn.1.q.weight",
        "decoder.conv_blocks.0.attn.2.q.weight",
        "decoder.mid.1.q.weight",
        "encoder.conv_blocks.4.attn.0.q.weight",
        "encoder.conv_blocks.4.attn.1.q.weight",
        "encoder.mid.1.q.weight",
    ]
    assert {k for k in sd if "sample" in k} == {
        f"{side}.conv_blocks.{i}.{kind}.conv.{p}"
        for side, kind in (("encoder", "downsample"), ("decoder", "upsample"))
        for i in range(4)
        for p in _WB
    }


def test_unknown_preset_lists_known() -> None:
    with pytest.raises(ValueError, match="VQ-16"):
        LlamaGenVQModel.from_preset("VQ-32")
    assert set(VQ_PRESETS) == {"VQ-8", "VQ-16"}


def test_encode_decode_shapes_and_range() -> None:
    model = tiny_model()
    images = torch.rand(2, 3, 16, 24, generator=torch.Generator().manual_seed(1)) * 2 - 1
    codes = model.encode(images)
    assert codes.shape == (2, 8, 12) and codes.dtype == torch.long
    assert 0 <= int(codes.min()) and int(codes.max()) < 64
    out = model.decode_codes(codes)
    assert out.shape == images.shape and float(out.detach().abs().max()) <= 1.0
    # Flat codes with an explicit grid decode to the same image.
    torch.testing.assert_close(model.decode_codes(codes.flatten(1), grid=(8, 12)), out)
    emb = model.codebook_embeddings()
    assert emb.shape == (64, 4)
    torch.testing.assert_close(emb.norm(dim=-1), torch.ones(64))


def test_encode_is_nearest_codebook_entry() -> None:
    model = tiny_model()
    images = torch.rand(1, 3, 16, 16, generator=torch.Generator().manual_seed(2)) * 2 - 1
    with torch.no_grad():
        quant, codes, _ = model.encode_with_quant(images)
        z = torch.nn.functional.normalize(model.quant_conv(model.encoder(images)), dim=1)
        sims = torch.einsum("bdhw,vd->bhwv", z, model.codebook_embeddings())
    assert torch.equal(codes, sims.argmax(-1))
    torch.testing.assert_close(quant, model.quant_from_codes(codes))


def test_forward_losses_and_straight_through_gradient() -> None:
    model = tiny_model().train()
    images = torch.rand(2, 3, 16, 16, generator=torch.Generator().manual_seed(3)) * 2 - 1
    rec, losses = model(images)
    assert isinstance(losses, VQLosses)
    assert rec.shape == images.shape
    torch.testing.assert_close(losses.commit_loss, 0.25 * losses.vq_loss.detach())
    assert 0.0 < losses.codebook_usage <= 1.0
    (rec.pow(2).mean() + losses.total).backward()
    assert model.encoder.conv_in.weight.grad is not None  # gradient passes the quantiser
    assert model.quantize.embedding.weight.grad is not None


def test_entropy_loss_enabled() -> None:
    model = tiny_model(entropy_loss_ratio=0.1).train()
    _, losses = model(torch.zeros(1, 3, 16, 16))
    assert losses.entropy_loss.requires_grad and torch.isfinite(losses.entropy_loss)


def test_init_weights_is_deterministic() -> None:
    a, b, c = tiny_model(seed=5), tiny_model(seed=5), tiny_model(seed=6)
    for (k, va), vb in zip(a.state_dict().items(), b.state_dict().values(), strict=True):
        assert torch.equal(va, vb), k
    assert not torch.equal(a.quant_conv.weight, c.quant_conv.weight)


def test_save_pretrained_round_trip_bit_identical(tmp_path) -> None:
    model = tiny_model(seed=7)
    model.quantize.codebook_used[:5] = torch.arange(5.0)
    model.save_pretrained(tmp_path, safe_serialization=True)
    loaded = LlamaGenVQModel.from_pretrained(tmp_path).eval()
    sd_a, sd_b = model.state_dict(), loaded.state_dict()
    assert sd_a.keys() == sd_b.keys()
    for k in sd_a:
        assert torch.equal(sd_a[k], sd_b[k]), k
    images = torch.rand(2, 3, 16, 16, generator=torch.Generator().manual_seed(8)) * 2 - 1
    with torch.no_grad():
        assert torch.equal(model.encode(images), loaded.encode(images))
        assert torch.equal(model.decode_codes(model.encode(images)), loaded.decode_codes(loaded.encode(images)))


def test_fp16_round_trip(tmp_path) -> None:
    model = tiny_model(seed=9)
    model.half().save_pretrained(tmp_path, safe_serialization=True)
    loaded = LlamaGenVQModel.from_pretrained(tmp_path, torch_dtype=torch.float16)
    assert loaded.dtype == torch.float16
    assert torch.equal(model.quant_conv.weight, loaded.quant_conv.weight)


def test_official_state_dict_loads_strictly() -> None:
    """A state dict with exactly the official key set (here produced by a twin) loads strictly."""
    a, b = tiny_model(seed=1), tiny_model(seed=2)
    b.load_state_dict(a.state_dict(), strict=True)
    assert torch.equal(a.decoder.conv_out.weight, b.decoder.conv_out.weight)


@pytest.mark.parametrize(
    "images, match",
    [
        (torch.zeros(1, 1, 16, 16), "images"),
        (torch.zeros(3, 16, 16), "images"),
        (torch.zeros(1, 3, 15, 16), "multiples of 2"),
        (torch.zeros(1, 3, 16, 17), "multiples of 2"),
    ],
)
def test_bad_images_raise(images: torch.Tensor, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        tiny_model().encode(images)


def test_bad_codes_raise() -> None:
    model = tiny_model()
    with pytest.raises(ValueError, match=r"\[0, 64\)"):
        model.decode_codes(torch.full((1, 4, 4), 64))
    with pytest.raises(ValueError, match=r"\[0, 64\)"):
        model.decode_codes(torch.full((1, 4, 4), -1))
    with pytest.raises(ValueError, match="grid"):
        model.decode_codes(torch.zeros(1, 12, dtype=torch.long))
    with pytest.raises(ValueError, match="grid"):
        model.decode_codes(torch.zeros(1, 12, dtype=torch.long), grid=(3, 5))
    with pytest.raises(ValueError, match="integer"):
        model.decode_codes(torch.zeros(1, 4, 4))


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(norm_num_groups=5), "norm_num_groups"),
        (dict(encoder_ch_mult=(1, 2, 2)), "same length"),
        (dict(codebook_size=0), "codebook_size"),
        (dict(dropout_p=1.5), "dropout_p"),
        (dict(encoder_ch_mult=(), decoder_ch_mult=()), "encoder_ch_mult"),
    ],
)
def test_bad_config_raises(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        LlamaGenVQModel(**{**TINY, **kwargs})


def test_train_vq_smoke_exports_loadable_model(tmp_path) -> None:
    """The trainer's --smoke run trains a few steps, resumes, and exports a diffusers folder."""
    from arvis.training import train_vq

    out, scratch = tmp_path / "vq", tmp_path / "scratch"
    args = ["--out", str(out), "--scratch", str(scratch), "--smoke", "--threads", "0"]
    metrics = train_vq.main(args)
    assert {"psnr", "usage", "perplexity", "params", "decode_ms_16x16"} <= set(metrics)
    assert {p.name for p in out.iterdir()} == {"config.json", "diffusion_pytorch_model.safetensors", "metrics.json",
                                               "README.md"}
    model = LlamaGenVQModel.from_pretrained(out)
    assert model.codebook_size == train_vq.SMOKE_CONFIG.codebook_size
    # Resuming with more steps continues from the checkpoint instead of starting over.
    train_vq.main(args + ["--steps", str(train_vq.SMOKE_CONFIG.steps + 2)])
    assert "resumed" in (scratch / "train.log").read_text()


def test_train_vq_decoder_only_keeps_every_code(tmp_path) -> None:
    """A decoder-only fine-tune changes the pictures decoded from codes but not the codes: encoder, quant_conv and
    codebook come out bit-identical to the tokenizer it started from, so transformers trained on its codes stay
    valid."""
    from arvis.training import train_vq

    base = tmp_path / "base"
    train_vq.main(["--out", str(base), "--scratch", str(tmp_path / "s0"), "--smoke", "--threads", "0"])
    tuned = tmp_path / "tuned"
    train_vq.main(["--out", str(tuned), "--scratch", str(tmp_path / "s1"), "--smoke", "--threads", "0",
                   "--init-from", str(base), "--decoder-only", "--steps", "6", "--resolution", "16", "--patch-size", "8"])
    assert "\n16x16 RGB image" in (tuned / "README.md").read_text()  # a decoder fine-tuned for smaller frames
    before, after = LlamaGenVQModel.from_pretrained(base).eval(), LlamaGenVQModel.from_pretrained(tuned).eval()
    frozen = ("encoder.", "quant_conv.", "quantize.")
    b, a = dict(before.named_parameters()), dict(after.named_parameters())  # buffers only count code usage
    assert [k for k in b if k.startswith(frozen) and not torch.equal(b[k], a[k])] == []
    assert not all(torch.equal(b[k], a[k]) for k in b if k.startswith("decoder."))
    images = torch.rand(3, 3, 32, 32, generator=torch.Generator().manual_seed(0)) * 2 - 1
    with torch.no_grad():
        assert torch.equal(before.encode(images), after.encode(images))
    assert "decoder only" in (tuned / "README.md").read_text()
    with pytest.raises(ValueError, match="init_from"):
        train_vq.main(["--out", str(tmp_path / "x"), "--scratch", str(tmp_path / "s2"), "--smoke", "--decoder-only"])
