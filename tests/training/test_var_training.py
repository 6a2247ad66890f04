"""The VAR trainers run end to end on tiny configurations (seconds), resume, and export loadable folders."""

from __future__ import annotations

import json

import torch

from arvis.models.var import VARTransformer
from arvis.tokenizers.var_vq import VARVQModel
from arvis.training import train_var, train_var_vq
from tests import REPO_ROOT


def test_tokenizer_then_transformer_smoke_runs(tmp_path):
    vq_out = tmp_path / "vq"
    metrics = train_var_vq.main(["--smoke", "--out", str(vq_out), "--scratch", str(tmp_path / "vq-scratch"),
                                 "--threads", "1"])
    vq = VARVQModel.from_pretrained(vq_out)
    assert vq.patch_nums == (1, 2, 4) and metrics["steps"] == 4 and 0 < metrics["usage"] <= 1
    assert json.loads((vq_out / "metrics.json").read_text())["command"].startswith("python -m arvis.training.train_var_vq")

    # Without --data the transformer trains on what its tokenizer was fitted on (the smoke tokenizer: photos).
    assert train_var.tokenizer_data(vq_out) == "photos"
    assert train_var.tokenizer_data(REPO_ROOT / "arvis/weights/var-vq-emoji") == "emoji-names"  # one class per named emoji
    assert train_var.tokenizer_data(tmp_path / "no-such-folder") is None

    out = tmp_path / "var"
    args = ["--preset", "smoke", "--vq", str(vq_out), "--out", str(out), "--scratch", str(tmp_path / "s"), "--threads", "1"]
    first = train_var.main(args)
    model = VARTransformer.from_pretrained(out / "transformer")
    assert model.scale_layout.patch_nums == (1, 2, 4) and model.config.vocab_size == 32
    assert first["steps"] == 3 and all(torch.isfinite(p).all() for p in model.parameters())
    # A rerun with the same scratch folder resumes at the end: nothing left to train, same export.
    again = train_var.main(args)
    assert again["steps"] == 3 and again["final_train_loss"] == first["final_train_loss"]


def test_warm_start_folds_the_llamagen_latent_layers():
    """With equal code dimensions, the LlamaGen tokenizer's linear latent layers compose exactly into VAR's."""
    from arvis.tokenizers.llamagen_vq import LlamaGenVQModel

    g = torch.Generator().manual_seed(0)
    src = LlamaGenVQModel(codebook_size=16, codebook_embed_dim=4, encoder_ch_mult=(1, 2), decoder_ch_mult=(1, 2),
                          z_channels=8, base_channels=8, norm_num_groups=4).init_weights(g).eval()
    folded = train_var_vq._composed_latent_layers(src.state_dict(), 4)
    z = torch.randn(2, 16, 6, 6, generator=g)  # an encoder body output (width 8 x 2)
    conv_out = src.encoder.conv_out
    expected = src.quant_conv(conv_out(z))  # LlamaGen: 3x3 conv then 1x1 conv
    got = torch.nn.functional.conv2d(z, folded["encoder.conv_out.weight"], folded["encoder.conv_out.bias"], padding=1)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
