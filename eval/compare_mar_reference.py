"""Side by side with LTH14/mar's own code on the same weights: transformer ``z``, diffusion head, KL-16 VAE.

arvis does not contain or vendor MAR's code. Point this script at a checkout of the reference repository
(``--reference-repo``, the folder holding ``models/mar.py`` and ``diffusion/``; its ``models/mar.py``
imports ``timm``: ``pip install timm``). It builds the official modules from the checkout with a tiny
configuration (random weights, perturbed so that no zero-initialised layer hides a difference), writes them
in the official checkpoint layouts (``checkpoint-last.pth``: ``{"model", "model_ema", "args"}``;
``kl16.ckpt``: ``{"model"}``), loads those files with arvis's loaders and prints the max |Δ| of:

1. the masked transformer's ``z`` (``forward_mae_encoder`` + ``forward_mae_decoder``) for a random mask;
2. the head's transition (mean and std of ``p(x_{t-1} | x_t, z)``) at every sampling step, without and
   with classifier-free guidance (the official ``p_mean_variance`` on ``net`` / ``net.forward_with_cfg``);
3. a whole head sampling run with the same fixed noise (the official ``p_sample`` formula, step by step),
   with MAR's temperature;
4. the VAE decode of random latents (the official KL-16 architecture at full size) and the encoder mean;
5. the masked sampler's schedule: the official ``sample_tokens`` (run on the CPU: its ``.cuda()`` calls are
   made no-ops for this run only) records, per iteration, how many tokens it predicts and the CFG scale it
   passes to the head; arvis's :func:`arvis.engine.continuous.mask_schedule` must give the same.

Example::

    python eval/compare_mar_reference.py --reference-repo /path/to/LTH14-mar
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
from functools import partial
from pathlib import Path
from typing import Any

import torch
from torch import nn


def load_reference(repo: str | Path) -> dict[str, Any]:
    """The reference modules (``models.mar``, ``models.vae``, ``diffusion``) from a checkout."""
    repo = Path(repo)
    if not (repo / "models" / "mar.py").is_file() or not (repo / "diffusion" / "gaussian_diffusion.py").is_file():
        raise ValueError(f"--reference-repo: {repo} has no models/mar.py and diffusion/ (an LTH14/mar checkout?)")
    try:
        import timm  # noqa: F401, PLC0415
    except ModuleNotFoundError:
        raise ValueError("the reference models/mar.py imports timm's ViT Block: pip install timm") from None
    if str(repo) not in sys.path:
        sys.path.insert(0, str(repo))
    import models.mar as ref_mar  # noqa: PLC0415
    import models.vae as ref_vae  # noqa: PLC0415

    return {"mar": ref_mar, "vae": ref_vae}


@contextlib.contextmanager
def cuda_calls_are_noops():
    """The reference sampler moves tensors with ``.cuda()``; on a CPU machine make that the identity (this
    run only; restored on exit)."""
    original = torch.Tensor.cuda
    torch.Tensor.cuda = lambda self, *args, **kwargs: self  # type: ignore[method-assign]
    try:
        yield
    finally:
        torch.Tensor.cuda = original  # type: ignore[method-assign]


def perturb(module: nn.Module, generator: torch.Generator, std: float = 0.05) -> None:
    """Add noise to every parameter (the official init zeroes the head's output layers and AdaLN)."""
    with torch.no_grad():
        for p in module.parameters():
            p.add_(torch.randn(p.shape, generator=generator) * std)


def max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.float() - b.float()).abs().max())


@torch.no_grad()
def compare_models(official: nn.Module, transformer: Any, head: Any, g: torch.Generator, labels: torch.Tensor,
                   tag: str = "") -> None:
    """Print checks 1-3 (transformer ``z``, head transitions with and without CFG, a fixed-noise sampling run)
    for the official module and arvis's loaded ``(transformer, head)`` on the same weights."""
    B, L, D = labels.shape[0], transformer.seq_len, transformer.token_embed_dim
    # 1. z of the masked transformer
    tokens = torch.randn(B, L, D, generator=g)
    orders = torch.stack([torch.randperm(L, generator=g) for _ in range(B)])
    n_masked = L // 3
    mask = torch.zeros(B, L).scatter(1, orders[:, :n_masked], 1.0)
    ce = official.class_emb(labels)
    z_ref = official.forward_mae_decoder(official.forward_mae_encoder(tokens, mask, ce), mask)
    z = transformer(tokens, mask.bool(), transformer.class_embedding(labels), num_masked=n_masked)
    print(f"1.{tag} transformer z ({B}x{L}x{z.shape[-1]}, {n_masked} masked): max |diff| = {max_diff(z, z_ref):.3e} "
          f"(|z| max {float(z_ref.abs().max()):.2f})")

    # 2. head transitions
    diff = official.diffloss.gen_diffusion
    zc = z_ref.reshape(-1, z_ref.shape[-1])[:16]
    zu = torch.randn(zc.shape, generator=g)
    x = torch.randn(16, D, generator=g)
    worst = {"mean": 0.0, "std": 0.0, "mean_cfg": 0.0, "std_cfg": 0.0}
    S = head.num_sampling_steps()
    for step in range(S):
        t = torch.full((16,), step, dtype=torch.long)
        out = diff.p_mean_variance(official.diffloss.net, x, t, clip_denoised=False, model_kwargs={"c": zc})
        mean, std = head.transition(x, step, zc)
        ref_std = torch.exp(0.5 * out["log_variance"]) * (step != 0)
        worst["mean"] = max(worst["mean"], max_diff(mean, out["mean"]))
        worst["std"] = max(worst["std"], max_diff(std.expand_as(ref_std), ref_std))
        out = diff.p_mean_variance(official.diffloss.net.forward_with_cfg, torch.cat([x, x]), torch.cat([t, t]),
                                   clip_denoised=False, model_kwargs={"c": torch.cat([zc, zu]), "cfg_scale": 2.5})
        mean, std = head.transition(x, step, zc, guidance_scale=2.5, z_uncond=zu)
        ref_std = torch.exp(0.5 * out["log_variance"][:16]) * (step != 0)
        worst["mean_cfg"] = max(worst["mean_cfg"], max_diff(mean, out["mean"][:16]))
        worst["std_cfg"] = max(worst["std_cfg"], max_diff(std.expand_as(ref_std), ref_std))
    print(f"2.{tag} head transitions over {S} steps: max |diff| mean {worst['mean']:.3e}, std {worst['std']:.3e}; "
          f"with CFG 2.5: mean {worst['mean_cfg']:.3e}, std {worst['std_cfg']:.3e}")

    # 3. a whole sampling run with fixed noise and temperature 0.9
    noise = torch.randn(S, 16, D, generator=g)
    x_ref = noise[0].clone()
    for k, step in enumerate(range(S - 1, -1, -1)):
        t = torch.full((16,), step, dtype=torch.long)
        out = diff.p_mean_variance(official.diffloss.net, x_ref, t, clip_denoised=False, model_kwargs={"c": zc})
        eps = noise[k + 1] if step > 0 else torch.zeros_like(x_ref)
        x_ref = out["mean"] + (step != 0) * torch.exp(0.5 * out["log_variance"]) * eps * 0.9  # p_sample's formula
    x0 = head.sample(zc, temperature=0.9, noise=noise)
    print(f"3.{tag} head sampling ({S} steps, temperature 0.9, fixed noise): max |diff| x0 = {max_diff(x0, x_ref):.3e} "
          f"(|x0| max {float(x_ref.abs().max()):.2f})")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reference-repo", required=True, help="an LTH14/mar checkout")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--sampling-steps", type=int, default=20, help="head sampling steps (default 20)")
    parser.add_argument("--skip-vae", action="store_true", help="skip the full-size VAE (66M parameters)")
    parser.add_argument("--pipeline", default=None,
                        help="also a trained masked MARPipeline folder: its weights exported to the official layout, "
                             "loaded by the official module, checks 1-3 on them")
    args = parser.parse_args(argv)
    ref = load_reference(args.reference_repo)

    from arvis.engine.continuous import mask_schedule
    from arvis.models.mar import load_mar_checkpoint
    from arvis.tokenizers.mar_vae import load_mar_vae_checkpoint
    from arvis.utils.serialization import save_pickle_checkpoint

    torch.manual_seed(args.seed)  # the reference modules initialise from the global RNG (this script only)
    g = torch.Generator().manual_seed(args.seed)
    cfg = dict(img_size=64, vae_stride=16, patch_size=1, encoder_embed_dim=64, encoder_depth=2, encoder_num_heads=4,
               decoder_embed_dim=64, decoder_depth=2, decoder_num_heads=4, vae_embed_dim=16, buffer_size=8,
               class_num=5)
    official = ref["mar"].MAR(**cfg, mlp_ratio=4.0, norm_layer=partial(nn.LayerNorm, eps=1e-6), diffloss_d=3,
                              diffloss_w=48, num_sampling_steps=str(args.sampling_steps)).eval()
    perturb(official, g)
    print(f"reference MAR (tiny): {sum(p.numel() for p in official.parameters()):,} parameters")

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "checkpoint-last.pth"
        ns = argparse.Namespace(model=None, img_size=cfg["img_size"], vae_stride=cfg["vae_stride"], patch_size=1,
                                vae_embed_dim=16, buffer_size=cfg["buffer_size"], diffloss_d=3, diffloss_w=48,
                                num_sampling_steps=str(args.sampling_steps), class_num=cfg["class_num"])
        sd = official.state_dict()
        save_pickle_checkpoint({"model": sd, "model_ema": sd, "epoch": 0, "args": ns}, path)
        transformer, head = load_mar_checkpoint(path, num_heads=cfg["encoder_num_heads"])
    print(f"arvis loaded checkpoint-last.pth: transformer {sum(p.numel() for p in transformer.parameters()):,} + "
          f"head {sum(p.numel() for p in head.parameters()):,} parameters")

    L, D = transformer.seq_len, 16
    compare_models(official, transformer, head, g, torch.tensor([1, 3]))
    with torch.no_grad():
        # 5. the masked sampler's schedule (count of predicted tokens and CFG scale per iteration)
        for num_iter, cfg_scale in ((4, 3.0), (16, 1.5), (L, 2.0)):
            calls: list[tuple[int, float]] = []
            original_sample = official.diffloss.sample

            def record(zz, temperature=1.0, cfg=1.0, calls=calls, rows=2 if cfg_scale != 1.0 else 1):
                calls.append((zz.shape[0] // rows, float(cfg)))
                return torch.zeros(zz.shape[0], D)

            official.diffloss.sample = record
            try:
                with cuda_calls_are_noops():
                    official.sample_tokens(1, num_iter=num_iter, cfg=cfg_scale, labels=torch.tensor([0]))
            finally:
                official.diffloss.sample = original_sample
            ours = [(n, s) for n, s in mask_schedule(L, num_iter, cfg_scale)]
            same_counts = [c[0] for c in calls] == [n for n, _ in ours]
            worst_cfg = max(abs(c[1] - s) for c, (_, s) in zip(calls, ours, strict=True))
            print(f"5. schedule num_iter={num_iter} cfg={cfg_scale}: tokens per iteration equal: {same_counts}; "
                  f"max |diff| of the CFG scale: {worst_cfg:.1e}")

    if not args.skip_vae:
        # 4. the KL-16 VAE at full size
        ref_vae = ref["vae"].AutoencoderKL(embed_dim=16, ch_mult=(1, 1, 2, 2, 4)).eval()
        perturb(ref_vae, g, std=0.02)
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "kl16.ckpt"
            save_pickle_checkpoint({"model": ref_vae.state_dict()}, path)
            vae = load_mar_vae_checkpoint(path)
        with torch.no_grad():
            latents = torch.randn(1, 16, 16, 16, generator=g)
            a, b = ref_vae.decode(latents), vae.decode(latents).sample
            img = torch.rand(1, 3, 256, 256, generator=g) * 2 - 1
            ma, mb = ref_vae.encode(img).mean, vae.encode(img).latent_dist.mean
        print(f"4. KL-16 VAE (diffusers AutoencoderKL, {sum(p.numel() for p in vae.parameters()):,} parameters): "
              f"decode max |diff| = {max_diff(a, b):.3e} (|x| max {float(a.abs().max()):.2f}); "
              f"encoder mean max |diff| = {max_diff(ma, mb):.3e}")
    if args.pipeline:
        compare_pipeline(ref, args.pipeline, g)
    return 0


def compare_pipeline(ref: dict[str, Any], folder: str, g: torch.Generator) -> None:
    """Checks 1-3 on a trained arvis MAR: exported with ``export_mar_checkpoint``, the file read back with
    ``torch.load(weights_only=True)`` into the official module (strict keys)."""
    from arvis.models.mar import export_mar_checkpoint
    from arvis.pipelines import MARPipeline
    from arvis.utils.serialization import load_pickle_checkpoint

    pipe = MARPipeline.from_pretrained(folder, dtype=torch.float32)
    transformer, head = pipe.transformer, pipe.head
    # the official sampler re-spaces the trained cosine schedule; arvis's own folders may sample on the linear one
    head = head.with_sampling_steps(head.num_sampling_steps(), schedule="cosine")
    if transformer.is_causal:
        raise ValueError("--pipeline: the official code has no causal variant; pass the masked pair")
    c, h = transformer.config, head.config
    official = ref["mar"].MAR(
        img_size=c.img_size, vae_stride=c.vae_stride, patch_size=c.patch_size, encoder_embed_dim=c.encoder_embed_dim,
        encoder_depth=c.encoder_depth, encoder_num_heads=c.encoder_num_heads, decoder_embed_dim=c.decoder_embed_dim,
        decoder_depth=c.decoder_depth, decoder_num_heads=c.decoder_num_heads, mlp_ratio=c.mlp_ratio,
        norm_layer=partial(nn.LayerNorm, eps=1e-6), vae_embed_dim=c.vae_embed_dim, class_num=c.num_classes,
        buffer_size=c.buffer_size, diffloss_d=h.depth, diffloss_w=h.width, num_sampling_steps=str(h.sampling_steps)
    ).eval()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "checkpoint-last.pth"
        export_mar_checkpoint(transformer, head, path)
        ckpt = load_pickle_checkpoint(path)  # torch.load(weights_only=True), argparse.Namespace allowed
        official.load_state_dict(ckpt["model_ema"], strict=True)
    name = Path(folder).resolve().name
    print(f"reference MAR built for {name}: {sum(p.numel() for p in official.parameters()):,} parameters "
          f"(arvis: {sum(p.numel() for p in transformer.parameters()) + sum(p.numel() for p in head.parameters()):,})")
    labels = torch.arange(2) % c.num_classes
    compare_models(official, transformer, head, g, labels, tag=f" [{name}]")


if __name__ == "__main__":
    sys.exit(main())
