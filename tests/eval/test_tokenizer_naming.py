"""eval/tokenizer_naming.py: the emoji CLIP's naming of a tokenizer's round trips, the ceiling of its models."""

from __future__ import annotations

import json

import numpy as np
import torch
from PIL import Image

from arvis.tokenizers.mar_vae import build_kl_vae
from tests.eval.eval_modules import eval_module


def test_an_untrained_vae_round_trip_is_named_below_the_renders(tmp_path, monkeypatch):
    """A random VAE destroys the emoji: its round trips are named far less often than the renders and reconstruct
    them badly; the record names the folder relatively, and the grid puts the renders above their round trips."""
    torch.manual_seed(0)  # diffusers initialises from the global generator
    vae = build_kl_vae((8, 8, 8), latent_channels=4, resolution=32, attn_resolutions=(), layers_per_block=1,
                       norm_num_groups=4)
    vae.save_pretrained(tmp_path / "vae")
    monkeypatch.chdir(tmp_path)
    record = eval_module("tokenizer_naming").main(["--folder", "vae", "--resolution", "32", "--json", "r.json",
                                                   "--grid", "rt.png"])
    assert json.loads((tmp_path / "r.json").read_text())["roundtrip_named"] == record["roundtrip_named"]
    assert record["kind"] == "kl-vae" and record["folder"] == "vae" and record["emoji"] == 123
    assert record["real_renders_named"] > record["roundtrip_named"] + 0.2 and record["renders_psnr_db"] < 15
    grid = np.asarray(Image.open(tmp_path / "rt.png"))
    assert grid.shape == (64, 24 * 32, 3)
