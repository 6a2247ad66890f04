"""train_janus: the three stages run end to end on a tiny config, resume, and train exactly what decoding uses."""

from __future__ import annotations

import json

import pytest
import torch

from arvis.engine.engine import DecodeEngine
from arvis.engine.sampling import SamplingConfig
from arvis.pipelines import JanusPipeline
from arvis.tokenizers.janus_text import prompt_batch
from arvis.tokenizers.janus_vq import JanusImageTokenizer, nearest_codes, quantized_forward
from arvis.training import train_janus
from arvis.training.train_janus import janus_lm_loss, unconditional_prompts
from tests.janus_fixtures import backbone_for, tiny_janus


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    root = tmp_path_factory.mktemp("janus-train")
    vq = train_janus.main(["vq", "--smoke", "--out", str(root / "vq"), "--scratch", str(root / "vq-run")])
    lm = train_janus.main(["lm", "--smoke", "--vq", str(root / "vq"), "--out", str(root / "lm"),
                           "--scratch", str(root / "lm-run")])
    train_janus.main(["assemble", "--lm", str(root / "lm"), "--vq", str(root / "vq"), "--out", str(root / "pipe")])
    return root, vq, lm


def test_stages_export_an_official_layout_and_a_loadable_pipeline(trained):
    root, vq, lm = trained
    assert vq["steps"] == 4 and 0 <= vq["usage"] <= 1 and "psnr" in vq
    assert lm["steps"] == 3 and lm["validation_loss"] > 0
    assert json.loads((root / "lm" / "config.json").read_text())["model_type"] == "janus"
    official = JanusPipeline.from_pretrained(root / "lm")  # the lm export is itself an official folder
    assert official.token_layout.grid == (16, 16)
    pipe = JanusPipeline.from_pretrained(root / "pipe")
    pipe.set_progress_bar_config(disable=True)
    out = pipe("red apple", generator=torch.Generator().manual_seed(0), output_type="np")
    assert out.images.shape[1:] == (32, 32, 3) and out.tokens.shape == (1, 16, 16)  # 32 px, VQ factor 2
    assert json.loads((root / "pipe" / "sampling_defaults.json").read_text()) == {"guidance_scale": 3.0, "top_k": 0}
    assert {p.name for p in (root / "pipe" / "training").iterdir()} == {"lm_training_metrics.json",
                                                                         "vq_training_metrics.json"}
    # The trained VQ ships inside the transformer, bit for bit (in fp16).
    from transformers import JanusVQVAE

    exported = JanusVQVAE.from_pretrained(root / "vq")
    for name, value in exported.state_dict().items():
        assert torch.equal(pipe.transformer.model.vqmodel.state_dict()[name], value.to(torch.float16)), name


def test_rerun_resumes_instead_of_restarting(trained):
    root, _, _ = trained
    log = (root / "lm-run" / "train.log").read_text()
    metrics = train_janus.main(["lm", "--smoke", "--vq", str(root / "vq"), "--out", str(root / "lm2"),
                                "--scratch", str(root / "lm-run")])
    assert metrics["steps"] == 3
    assert "resumed from" in (root / "lm-run" / "train.log").read_text()[len(log):]


def test_a_draft_shares_the_tokenizer_and_ships_with_a_placeholder_vq(trained):
    root, _, _ = trained
    draft = train_janus.main(["lm", "--smoke", "--draft", "--vq", str(root / "vq"), "--out", str(root / "draft"),
                              "--scratch", str(root / "draft-run"), "--tokenizer", str(root / "lm"),
                              "--hidden-size", "16", "--heads", "2", "--kv-heads", "1", "--intermediate-size", "32"])
    assert draft["config"]["draft"] and draft["params_by_part"]["vqmodel"] < 200_000
    train_janus.main(["assemble", "--lm", str(root / "lm"), "--out", str(root / "pipe-d"),
                      "--draft-lm", str(root / "draft")])
    pipe = JanusPipeline.from_pretrained(root / "pipe-d")
    pipe.set_progress_bar_config(disable=True)
    assert "speculative" in pipe.methods()
    out = pipe("red apple", generator=torch.Generator().manual_seed(0), method="speculative", window=2,
               output_type="np")
    assert out.stats.summary()["draft_forwards"] > 0 and out.images.shape[1:] == (32, 32, 3)


def test_the_loss_is_the_backbones_distribution():
    """The training loss reads exactly the distribution arvis decodes with: its per-token NLL equals
    −log p of the engine's teacher-forced forward over the same prompt and codes (left padding included)."""
    model, tok = tiny_janus(num_codes=16, grid=3)
    prompts = ["grinning face with big eyes", "rocket"]
    backbone, condition = backbone_for(model, tok, prompts)
    codes = torch.randint(0, 16, (2, 3, 3), generator=torch.Generator().manual_seed(0))
    ids, valid = prompt_batch(tok, prompts)
    with torch.no_grad():
        nll = janus_lm_loss(model, ids, valid, codes, per_token=True)  # [2, 9]
    engine = DecodeEngine(backbone, condition, SamplingConfig())
    p0 = engine.prefill()
    flat = codes.reshape(2, -1)
    p = torch.cat([p0[:, None], engine.evaluate(flat[:, :-1], torch.arange(8).expand(2, -1))], dim=1)
    torch.testing.assert_close(nll, -p.gather(-1, flat[..., None])[..., 0].log(), atol=1e-4, rtol=1e-4)


def test_caption_dropout_is_generates_unconditional_prompt():
    model, tok = tiny_janus(num_codes=16, grid=3)
    backbone, condition = backbone_for(model, tok, ["rocket", "grinning face with big eyes"])
    t = backbone.tokens
    assert torch.equal(unconditional_prompts(condition.token_ids, t.bos, t.boi, t.pad),
                       backbone.null_condition(condition).token_ids)


def test_vq_forward_trains_what_decode_reads():
    """The training forward quantises as the tokenizer encodes (normalised nearest code) and its decoder reads
    what ``JanusVQVAE.decode`` reads for those codes."""
    model, _ = tiny_janus(num_codes=16, grid=3)
    vq = model.model.vqmodel
    images = torch.rand(2, 3, 6, 6, generator=torch.Generator().manual_seed(0)) * 2 - 1
    out = quantized_forward(vq, images)
    tokenizer = JanusImageTokenizer(vq)
    codes = tokenizer.encode(images)
    assert torch.equal(out.codes, codes) and codes.shape == (2, 3, 3)
    torch.testing.assert_close(out.reconstruction.detach(), tokenizer.decode_codes(codes), atol=1e-5, rtol=1e-4)
    latents = out.latents.permute(0, 3, 1, 2)
    assert torch.equal(nearest_codes(vq, latents), codes)
    out.reconstruction.mean().backward()  # straight through: the encoder gets gradients
    assert vq.encoder.conv_in.weight.grad is not None


def test_extract_then_a_warm_start_keeps_the_tokenizer_the_vq_and_the_weights(trained, tmp_path):
    """extract: an assembled folder's vq / lm as stage exports (the same weights); lm --init-from starts from them
    (at lr 0 the export is the start, bit for bit), keeps the tokenizer, refuses another VQ's codes, and the shipped
    record names the commands that trained its start."""
    import os
    from pathlib import Path

    from transformers import AutoTokenizer, JanusForConditionalGeneration, JanusVQVAE

    root, _, _ = trained
    parts = train_janus.main(["extract", "--folder", str(root / "pipe"), "--out", str(tmp_path / "parts")])
    assert set(parts) == {"vq", "lm"}
    ref = JanusForConditionalGeneration.from_pretrained(root / "lm").state_dict()
    start = JanusForConditionalGeneration.from_pretrained(parts["lm"]).state_dict()
    assert ref.keys() == start.keys() and all(torch.equal(ref[k], start[k]) for k in ref)
    vq, ref_vq = JanusVQVAE.from_pretrained(parts["vq"]), JanusVQVAE.from_pretrained(root / "vq")
    assert all(torch.equal(a.half(), b.half()) for a, b in zip(vq.state_dict().values(), ref_vq.state_dict().values(),
                                                                 strict=True))
    out = tmp_path / "warm-lm"
    metrics = train_janus.main(["lm", "--smoke", "--init-from", parts["lm"], "--vq", parts["vq"], "--out", str(out),
                                "--scratch", str(tmp_path / "warm-run"), "--steps", "1", "--lr", "0"])
    assert metrics["config"]["init_from"] == parts["lm"]
    assert "warm start from the model" in (tmp_path / "warm-run" / "train.log").read_text()
    warm = JanusForConditionalGeneration.from_pretrained(out).state_dict()
    assert all(torch.equal(warm[k], start[k]) for k in start)
    assert AutoTokenizer.from_pretrained(out).get_vocab() == AutoTokenizer.from_pretrained(root / "lm").get_vocab()
    other = JanusVQVAE.from_pretrained(parts["vq"])
    other.quantize.embedding.weight.data.mul_(-1)
    other.save_pretrained(tmp_path / "other-vq")
    with pytest.raises(ValueError, match="another VQ"):
        train_janus.main(["lm", "--smoke", "--init-from", parts["lm"], "--vq", str(tmp_path / "other-vq"), "--out",
                          str(tmp_path / "x"), "--scratch", str(tmp_path / "x-run"), "--steps", "1"])
    train_janus.main(["assemble", "--lm", str(out), "--vq", parts["vq"], "--out", str(tmp_path / "warm")])
    shipped = json.loads((tmp_path / "warm" / "training" / "lm_training_metrics.json").read_text())
    assert os.path.isabs(parts["lm"]) and shipped["config"]["init_from"] == os.path.relpath(parts["lm"])
    first = json.loads((Path(parts["lm"]) / "training_metrics.json").read_text())
    assert shipped["init_commands"] == [first["command"]] and "--init-from" in shipped["command"]
