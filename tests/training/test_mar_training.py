"""The MAR trainers: the diffusion objective and the masking ratio are MAR's, the smoke presets train, export,
resume and reload, and an assembled folder generates with ``ar``, ``cspd`` and (causal) ``cspd-exact``."""

from __future__ import annotations

import json
import math
import os

import pytest
import torch
from diffusers import AutoencoderKL
from safetensors.torch import load_file
from torch import nn

from arvis.models.diffusion_head import MARDiffusionHead
from arvis.models.mar import MARTransformer
from arvis.pipelines import MARPipeline
from arvis.training import train_mar, train_mar_vae


class _OracleHead(nn.Module):
    """Predicts the exact noise for a point-mass target ``c`` and the true posterior variance (``v = -1``)."""

    def __init__(self, c: torch.Tensor, shift: float = 0.0):
        super().__init__()
        self.c, self.shift = c, shift
        self.anchor = nn.Parameter(torch.zeros(()))

    @property
    def dtype(self) -> torch.dtype:
        return torch.float32

    def forward(self, x_t: torch.Tensor, t: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        ab = train_mar._table("alphas_cumprod", t)
        eps = (x_t - ab.sqrt() * self.c) / (1 - ab).sqrt() + self.shift
        return torch.cat([eps, -torch.ones_like(eps)], dim=1) + 0 * self.anchor


def test_diffusion_loss_is_zero_for_the_exact_denoiser_and_not_otherwise():
    c = torch.tensor([[0.7, -1.2, 0.3]])
    target, z = c.expand(4000, -1), torch.zeros(4000, 1)
    exact = train_mar.diffusion_loss(_OracleHead(c), target, z, torch.Generator().manual_seed(0))
    # t = 0 (about 4 in 4000) carries the decoder NLL; every other step is exactly denoised: MSE 0 and KL 0.
    exact = exact.detach()
    assert (exact.abs() < 1e-3).float().mean() > 0.99 and torch.isfinite(exact).all()
    off = train_mar.diffusion_loss(_OracleHead(c, shift=0.3), target, z, torch.Generator().manual_seed(0))
    assert float(off.detach().median()) > 0.09  # the noise error alone is 0.3² = 0.09


def test_mask_ratio_is_mars_truncated_normal():
    g = torch.Generator().manual_seed(0)
    r = torch.tensor([train_mar.sample_mask_ratio(0.7, g) for _ in range(4000)])
    assert float(r.min()) >= 0.7 and float(r.max()) <= 1.0
    # Mean of N(1, 0.25²) truncated to [0.7, 1]: 1 − 0.25·(φ(−1.2) − φ(0)) / (Φ(0) − Φ(−1.2)).
    phi = lambda x: math.exp(-x * x / 2) / math.sqrt(2 * math.pi)  # noqa: E731
    Phi = lambda x: 0.5 * (1 + math.erf(x / math.sqrt(2)))  # noqa: E731
    expected = 1 + 0.25 * (phi(-1.2) - phi(0)) / (Phi(0) - Phi(-1.2))
    assert abs(float(r.mean()) - expected) < 0.005


def test_causal_loss_covers_every_token():
    """The causal variant learns every token: the last one is never an input, so its gradient is the loss's."""
    model = MARTransformer(img_size=32, vae_stride=8, encoder_embed_dim=16, encoder_depth=1, encoder_num_heads=2,
                           decoder_embed_dim=16, decoder_depth=1, decoder_num_heads=2, vae_embed_dim=2, num_classes=2,
                           buffer_size=2, attn_dropout=0.0, proj_dropout=0.0, causal=True).eval()
    model.init_weights(torch.Generator().manual_seed(0))
    head = model.default_head(width=16, depth=1, sampling_steps=4)
    head.init_weights(torch.Generator().manual_seed(1))
    with torch.no_grad():
        for p in head.parameters():
            p.add_(0.1 * torch.randn(p.shape, generator=torch.Generator().manual_seed(2)))
    tokens = torch.randn(1, 16, 2, requires_grad=True)
    train_mar.mar_loss(model, head, tokens, torch.tensor([1]), None, torch.Generator().manual_seed(3), 2).backward()
    assert bool((tokens.grad[0, -1].abs() > 0).any())


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    root = tmp_path_factory.mktemp("mar-train")
    vae_metrics = train_mar_vae.main(["--preset", "smoke", "--out", str(root / "vae"), "--scratch", str(root / "vs")])
    runs = {}
    for preset in ("smoke", "smoke-causal"):
        args = ["--preset", preset, "--vae", str(root / "vae"), "--out", str(root / preset), "--scratch",
                str(root / f"{preset}-s"), "--data-cache", str(root / "latents")]
        runs[preset] = (args, train_mar.main(args))
    return root, vae_metrics, runs


def test_vae_smoke_exports_a_loadable_folder_with_a_card(trained):
    root, metrics, _ = trained
    vae = AutoencoderKL.from_pretrained(root / "vae")
    assert metrics["steps"] == 3 and metrics["latent_grid"] == 4 and vae.config.latent_channels == 4
    assert vae.config.scaling_factor == pytest.approx(metrics["scaling_factor"]) and metrics["scaling_factor"] != 1.0
    weights = load_file(root / "vae" / "diffusion_pytorch_model.safetensors")
    assert {t.dtype for t in weights.values()} == {torch.float16}
    card = (root / "vae" / "README.md").read_text()
    assert "python -m arvis.training.train_mar_vae --preset smoke" in card and "PSNR" in card


def test_mar_smoke_trains_exports_and_resumes(trained):
    root, _, runs = trained
    for preset, causal in (("smoke", False), ("smoke-causal", True)):
        args, first = runs[preset]
        t = MARTransformer.from_pretrained(root / preset / "transformer")
        h = MARDiffusionHead.from_pretrained(root / preset / "head")
        assert t.is_causal is causal and t.seq_len == 16 and t.num_classes > 1 and h.config.cond_dim == 32
        assert first["steps"] == 3 and math.isfinite(first["validation_loss"])
        assert "MAR" in (root / preset / "README.md").read_text()
        # The latents were cached once for both runs (same VAE, same crops).
        assert len(list((root / "latents").glob("latents-*-train-*.npz"))) == 1
        again = train_mar.main(args)  # resumes at the end: nothing to train, the same export
        assert again["steps"] == 3 and again["final_train_loss"] == first["final_train_loss"]


def test_assembled_folders_generate_with_every_method(trained):
    root, _, _ = trained
    train_mar.main(["assemble", "--target", str(root / "smoke"), "--draft", str(root / "smoke"), "--vae",
                    str(root / "vae"), "--out", str(root / "pipe"), "--num-iter", "4"])
    train_mar.main(["assemble", "--target", str(root / "smoke-causal"), "--draft", str(root / "smoke-causal"),
                    "--vae", str(root / "vae"), "--out", str(root / "pipe-causal"), "--sampling-schedule", "cosine"])
    assert (root / "pipe" / "vae").is_symlink()
    # the heads' sampling schedule: linear unless asked (the exports themselves keep the official cosine)
    head_config = json.loads((root / "pipe" / "head" / "config.json").read_text())
    assert head_config["sampling_schedule"] == "linear"
    assert json.loads((root / "pipe" / "draft_head" / "config.json").read_text())["sampling_schedule"] == "linear"
    assert json.loads((root / "pipe-causal" / "head" / "config.json").read_text())["sampling_schedule"] == "cosine"
    assert json.loads((root / "smoke" / "head" / "config.json").read_text()).get("sampling_schedule",
                                                                                 "cosine") == "cosine"
    assert json.loads((root / "pipe" / "sampling_defaults.json").read_text())["num_iter"] == 4
    assert json.loads((root / "pipe-causal" / "sampling_defaults.json").read_text())["cfg_schedule"] == "constant"
    for folder, methods in (("pipe", ("ar", "cspd")), ("pipe-causal", ("ar", "cspd-exact"))):
        pipe = MARPipeline.from_pretrained(str(root / folder))
        pipe.set_progress_bar_config(disable=True)
        for method in methods:
            out = pipe(class_labels=[0, 1], method=method, generator=torch.Generator().manual_seed(0), output_type="np",
                       **({"final_std": 0.05} if method == "cspd-exact" else {}))
            assert out.images.shape == (2, 32, 32, 3) and bool(torch.isfinite(torch.as_tensor(out.images)).all())
            assert out.stats.samples[0].target_forwards >= 1
    with pytest.raises(ValueError, match="both be masked or both causal"):
        train_mar.assemble(str(root / "smoke"), str(root / "vae"), str(root / "bad"), str(root / "smoke-causal"))


def test_vae_fine_tune_starts_from_the_given_folder(trained, tmp_path):
    """--init-from loads every weight of an existing VAE (strictly) before training; its card says so."""
    root, _, _ = trained
    out = tmp_path / "tuned"
    args = ["--preset", "smoke", "--init-from", str(root / "vae"), "--out", str(out), "--scratch", str(tmp_path / "s")]
    from arvis.training.train_mar_vae import PRESETS, train

    start = AutoencoderKL.from_pretrained(root / "vae", torch_dtype=torch.float32).state_dict()
    cfg = PRESETS["smoke"].__class__(**{**PRESETS["smoke"].__dict__, "init_from": str(root / "vae"), "steps": 1,
                                        "lr": 0.0})
    vae, _ = train(cfg, tmp_path / "s0")
    assert all(torch.equal(v, start[k]) for k, v in vae.state_dict().items())  # lr 0: still the loaded weights
    metrics = train_mar_vae.main(args)
    # the record names the folder it started from without this machine's absolute path, and lists the command
    # that made it before its own
    start_from = os.path.relpath(root / "vae")
    assert metrics["config"]["init_from"] == start_from and not os.path.isabs(start_from)
    card = (out / "README.md").read_text()
    assert f"initialised from `{start_from}`" in card
    first = json.loads((root / "vae" / "metrics.json").read_text())["command"]
    assert metrics["init_commands"] == [first] and card.index(first) < card.index("--init-from")


def test_chroma_term_weighs_colour_only_and_reaches_the_card(trained, tmp_path):
    """The opponent-colour channels vanish on greys and see a hue change that keeps the mean intensity; the loss
    term is added only when weighted, and --chroma-weight is recorded in the config and the card."""
    from arvis.training.train_mar_vae import PRESETS, opponent_chroma, vae_loss

    grey = torch.rand(2, 1, 4, 4).expand(2, 3, 4, 4)
    assert torch.equal(opponent_chroma(grey), torch.zeros(2, 2, 4, 4))
    red, green = torch.tensor([1.0, 0.0, 0.0]), torch.tensor([0.0, 1.0, 0.0])  # same sum, another hue
    assert not torch.equal(opponent_chroma(red.view(1, 3, 1, 1)), opponent_chroma(green.view(1, 3, 1, 1)))
    root, _, _ = trained
    vae = AutoencoderKL.from_pretrained(root / "vae", torch_dtype=torch.float32)
    x = torch.rand(2, 3, 32, 32) * 2 - 1
    cfg0 = PRESETS["smoke"]
    cfg2 = cfg0.__class__(**{**cfg0.__dict__, "chroma_weight": 2.0})
    loss0, terms0 = vae_loss(vae, x, cfg0, torch.Generator().manual_seed(0))
    loss2, terms2 = vae_loss(vae, x, cfg2, torch.Generator().manual_seed(0))
    assert "chroma" not in terms0 and terms2["chroma"] > 0
    torch.testing.assert_close(loss2, loss0 + 2.0 * terms2["chroma"])
    with pytest.raises(ValueError, match="chroma_weight"):
        cfg0.__class__(**{**cfg0.__dict__, "chroma_weight": -1.0})
    out = tmp_path / "chroma"
    metrics = train_mar_vae.main(["--preset", "smoke", "--chroma-weight", "2", "--out", str(out),
                                  "--scratch", str(tmp_path / "s")])
    assert metrics["config"]["chroma_weight"] == 2.0
    assert "2·L1 of the opponent-colour channels" in (out / "README.md").read_text()
