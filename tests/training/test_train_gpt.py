"""Training smoke tests: a few steps of the GPT trainer on a tiny config (full training is not run in CI)."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch

from arvis.models.llamagen import LlamaGenTransformer
from arvis.models.text_encoder import WordTextEncoder
from arvis.tokenizers.llamagen_vq import LlamaGenVQModel
from arvis.training import train_gpt


@pytest.fixture(scope="module")
def tiny_vq_folder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("vq")
    vq = LlamaGenVQModel(codebook_size=64, codebook_embed_dim=4, encoder_ch_mult=(1, 2, 2, 2),
                         decoder_ch_mult=(1, 2, 2, 2), z_channels=8, base_channels=8, norm_num_groups=4)
    vq.init_weights(torch.Generator().manual_seed(0)).save_pretrained(folder)
    return str(folder)


@pytest.mark.parametrize("preset", ["smoke", "smoke-t2i"])
def test_train_gpt_smoke_runs_exports_and_resumes(tmp_path, tiny_vq_folder, preset, monkeypatch):
    monkeypatch.setenv("ARVIS_CACHE", str(tmp_path / "cache"))
    out, scratch = tmp_path / "out", tmp_path / "scratch"
    argv = ["--preset", preset, "--out", str(out), "--scratch", str(scratch), "--vq", tiny_vq_folder]
    metrics = train_gpt.main(argv)
    assert metrics["steps"] == 3 and (out / "transformer" / "diffusion_pytorch_model.safetensors").is_file()
    from safetensors import safe_open

    with safe_open(str(out / "transformer" / "diffusion_pytorch_model.safetensors"), "pt") as f:
        assert {f.get_tensor(k).dtype for k in f.keys()} == {torch.float16}  # shipped weights are fp16
    model = LlamaGenTransformer.from_pretrained(out / "transformer")
    assert model.config.vocab_size == 64 and model.layout.grid == (16, 16)
    if preset == "smoke-t2i":
        text = WordTextEncoder.from_pretrained(out / "text_encoder")
        feats, mask = text.float().encode(["a small red circle on the left over grass"], 32)
        assert feats.shape == (1, 32, 16) and int(mask.sum()) == 9
    # A second run with more steps resumes from the checkpoint instead of starting over.
    metrics = train_gpt.main(argv + ["--steps", "4"])
    log = (scratch / "train.log").read_text()
    assert "resumed from" in log and "at step 3" in log and metrics["steps"] == 4
    assert "steps=4 (was 3)" in log  # a card's run history reads the schedule a resume continued with
    assert json.loads((out / "training_metrics.json").read_text())["steps"] == 4


def test_dropout_is_a_setting_in_range():
    cfg = train_gpt.PRESETS["smoke"]
    model, _ = train_gpt.build_models(dataclasses.replace(cfg, dropout=0.0), 64, 16)
    assert model.config.resid_dropout_p == 0.0 and model.config.ffn_dropout_p == 0.0
    assert model.config.class_dropout_prob == cfg.class_dropout  # CFG's condition dropout is its own setting
    for bad in (-0.1, 1.0):
        with pytest.raises(ValueError, match=r"dropout must be in \[0, 1\)"):
            dataclasses.replace(cfg, dropout=bad)


def test_the_same_config_builds_the_same_text_encoder_whatever_the_global_rng():
    cfg = train_gpt.PRESETS["smoke-t2i"]
    torch.manual_seed(1)
    _, first = train_gpt.build_models(cfg, 64, 16)
    torch.manual_seed(2)
    _, second = train_gpt.build_models(cfg, 64, 16)
    pairs = zip(first.state_dict().values(), second.state_dict().values(), strict=True)
    assert all(torch.equal(a, b) for a, b in pairs)


def test_init_from_warm_starts_from_exported_weights_and_checks_the_architecture(tmp_path, tiny_vq_folder,
                                                                                monkeypatch):
    monkeypatch.setenv("ARVIS_CACHE", str(tmp_path / "cache"))
    first = tmp_path / "first"
    base = ["--preset", "smoke", "--vq", tiny_vq_folder]
    train_gpt.main(base + ["--out", str(first), "--scratch", str(tmp_path / "s1")])
    start = LlamaGenTransformer.from_pretrained(first / "transformer", dtype=torch.float32)

    # A warm start begins from the exported weights: the first step's gradients act on them, not on a fresh init.
    cfg = train_gpt.PRESETS["smoke"]
    model, text = train_gpt.build_models(cfg, 64, 16)
    assert not torch.equal(model.tok_embeddings.weight, start.tok_embeddings.weight)
    train_gpt.warm_start(model, text, first / "transformer")
    for name, tensor in start.state_dict().items():
        assert torch.equal(model.state_dict()[name], tensor), name

    metrics = train_gpt.main(base + ["--out", str(tmp_path / "second"), "--scratch", str(tmp_path / "s2"),
                                     "--init-from", str(first / "transformer")])
    assert metrics["steps"] == 3 and metrics["init_from"].endswith("first/transformer")
    assert not metrics["init_from"].startswith("/")  # records carry no absolute paths
    assert "warm start from the weights in" in (tmp_path / "s2" / "train.log").read_text()

    wider = train_gpt.build_models(dataclasses.replace(cfg, dim=64), 64, 16)[0]
    with pytest.raises(ValueError, match="another architecture"):
        train_gpt.warm_start(wider, None, first / "transformer")
    emoji = train_gpt.build_models(dataclasses.replace(cfg, data="emoji-names"), 64, 16)[0]
    with pytest.raises(ValueError, match="trained on other classes"):
        train_gpt.warm_start(emoji, None, first / "transformer")
    with pytest.raises(FileNotFoundError, match="not a transformer folder"):
        train_gpt.warm_start(model, None, tmp_path)
    t2i_model, t2i_text = train_gpt.build_models(train_gpt.PRESETS["smoke-t2i"], 64, 16)
    with pytest.raises(ValueError, match="class-conditional"):
        train_gpt.warm_start(t2i_model, t2i_text, first / "transformer")
