"""Side by side with FoundationVision/VAR's own code on the same weights: tokenizer, logits, tokens, speed.

arvis does not contain or vendor VAR's code. Point this script at a checkout of the reference repository
(``--reference-repo``, the folder holding ``models/`` and ``dist.py``). It exports an arvis VAR pipeline in
the official layout (the transformer through :func:`arvis.models.var.export_var_checkpoint`, the tokenizer's
state dict as is), loads both with the reference classes (``load_state_dict(strict=True)``), and checks:

1. the tokenizer: the reference ``img_to_idxBl`` ids equal arvis's and ``img_to_reconstructed_img``
   equals arvis's reconstruction (max |Δ| printed) on held-out crops;
2. the transformer: teacher-forced logits on those crops' codes (max |Δ|; fp32);
3. the sampler: the reference ``autoregressive_infer_cfg`` driven by the same random draws as arvis
   (its ``sample_with_top_k_top_p_`` is replaced, for this comparison only, by the same filtering and an
   exponential-race draw from a seeded ``torch.Generator``) gives the same tokens;
4. speed: the reference ``autoregressive_infer_cfg`` (unchanged, its own sampler) against arvis's plain
   next-scale decoding (``VARPipeline``, method ``ar``), both returning images, same weights, batch, CFG,
   top-k/top-p, interleaved repeats, median wall time.

The official tokenizer hard-codes two architecture constants that arvis makes configuration fields
(``ch_mult`` and the GroupNorm group count); for a tokenizer that changes them the reference encoder and
decoder are built from the reference ``Encoder``/``Decoder`` classes with those two values.

Example::

    python eval/compare_var_reference.py --reference-repo <VAR checkout> --model var --batch 8 --json out.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch


def load_reference(repo: str | Path) -> dict[str, Any]:
    """The reference modules (``models.var``, ``models.vqvae``, ``models.basic_vae``) from a checkout."""
    repo = Path(repo)
    if not (repo / "models" / "var.py").is_file() or not (repo / "dist.py").is_file():
        raise ValueError(f"--reference-repo: {repo} has no models/var.py and dist.py (a FoundationVision/VAR checkout?)")
    if str(repo) not in sys.path:
        sys.path.insert(0, str(repo))
    import models.basic_vae as basic_vae  # noqa: PLC0415
    import models.var as ref_var  # noqa: PLC0415
    import models.vqvae as ref_vqvae  # noqa: PLC0415

    return {"var": ref_var, "vqvae": ref_vqvae, "basic_vae": basic_vae}


def official_vqvae(ref: dict[str, Any], vq: Any) -> Any:
    """The reference ``VQVAE`` holding ``vq``'s weights (``load_state_dict(strict=True)``)."""
    c = vq.config
    vae = ref["vqvae"].VQVAE(vocab_size=c.vocab_size, z_channels=c.z_channels, ch=c.ch, dropout=c.dropout, beta=c.beta,
                             using_znorm=c.using_znorm, quant_conv_ks=c.quant_conv_ks, quant_resi=c.quant_resi,
                             share_quant_resi=c.share_quant_resi, default_qresi_counts=c.default_qresi_counts,
                             v_patch_nums=tuple(c.v_patch_nums), test_mode=True)
    if tuple(c.ch_mult) != (1, 1, 2, 2, 4) or c.norm_num_groups != 32 or c.num_res_blocks != 2:
        bv = ref["basic_vae"]
        normalize = bv.Normalize
        bv.Normalize = lambda channels, num_groups=32: normalize(channels, c.norm_num_groups)
        try:
            dd = dict(ch=c.ch, ch_mult=tuple(c.ch_mult), num_res_blocks=c.num_res_blocks, dropout=c.dropout,
                      z_channels=c.z_channels, using_sa=c.using_sa, using_mid_sa=c.using_mid_sa)
            vae.encoder = bv.Encoder(double_z=False, **dd)
            vae.decoder = bv.Decoder(**dd)
        finally:
            bv.Normalize = normalize
    vae.load_state_dict({k: v.float() for k, v in vq.state_dict().items()}, strict=True)
    return vae.eval()


def official_var(ref: dict[str, Any], model: Any, ref_vae: Any) -> Any:
    """The reference ``VAR`` holding ``model``'s weights exported in the official ``.pth`` layout."""
    from arvis.models.var import export_var_checkpoint

    c = model.config
    net = ref["var"].VAR(ref_vae, num_classes=c.num_classes, depth=c.depth, embed_dim=c.embed_dim, num_heads=c.num_heads,
                         mlp_ratio=c.mlp_ratio, drop_rate=0.0, attn_drop_rate=0.0, drop_path_rate=0.0, norm_eps=c.norm_eps,
                         shared_aln=c.shared_aln, cond_drop_rate=0.0, attn_l2_norm=c.attn_l2_norm,
                         patch_nums=tuple(c.patch_nums), flash_if_available=False, fused_if_available=False)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "var.pth"
        export_var_checkpoint(model.float(), path)
        state = torch.load(path, map_location="cpu", weights_only=True)  # what a user of the release would do
    net.load_state_dict(state, strict=True)
    return net.eval()


def official_pair(patch_nums, vocab: int, cvae: int, depth: int, dim: int, heads: int, classes: int, seed: int = 0):
    """Randomly initialised official models (official init) and arvis models loaded from them (for tests)."""
    from arvis.models.var import load_var_state_dict
    from arvis.tokenizers.var_vq import VARVQModel

    ref = load_reference(_reference_root())
    torch.manual_seed(seed)  # the official constructors and init_weights draw from the global RNG
    vae = ref["vqvae"].VQVAE(vocab_size=vocab, z_channels=cvae, ch=32, test_mode=True, v_patch_nums=tuple(patch_nums))
    with torch.no_grad():
        for p in vae.parameters():
            p.normal_(0, 0.3)
    var = ref["var"].VAR(vae, num_classes=classes, depth=depth, embed_dim=dim, num_heads=heads, patch_nums=tuple(patch_nums),
                         cond_drop_rate=0.0, flash_if_available=False, fused_if_available=False, attn_l2_norm=True)
    var.init_weights(init_adaln=0.5, init_adaln_gamma=0.5, init_head=1.0, init_std=0.05)
    vq = VARVQModel(vocab_size=vocab, z_channels=cvae, ch=32, v_patch_nums=tuple(patch_nums)).eval()
    vq.load_state_dict(vae.state_dict(), strict=True)
    return vae.eval(), var.eval(), vq, load_var_state_dict(var.state_dict())


def _reference_root() -> Path:
    import models  # noqa: PLC0415  (already on sys.path: the caller put the checkout there)

    return Path(models.__file__).resolve().parent.parent


def official_tokens(ref_var: Any, labels: torch.Tensor, cfg: float, top_k: int, top_p: float, seed: int) -> torch.Tensor:
    """Tokens ``[B, L]`` of the reference ``autoregressive_infer_cfg`` when its draws come from arvis's sampler.

    The reference's ``sample_with_top_k_top_p_`` (its filtering, verbatim in behaviour) is swapped, for
    this call only, for the same filtering followed by ``argmax(p / E)``, ``E ~ Exp(1)`` drawn as arvis
    draws it (one ``[B, l, V]`` block per scale from one generator seeded ``seed``).
    """
    module = sys.modules[type(ref_var).__module__]
    original = module.sample_with_top_k_top_p_
    g = torch.Generator().manual_seed(seed)
    drawn: list[torch.Tensor] = []

    def same_noise(logits: torch.Tensor, top_k: int = 0, top_p: float = 0.0, rng: Any = None, num_samples: int = 1):
        B, L, V = logits.shape
        if top_k > 0:
            logits.masked_fill_(logits < logits.topk(top_k, largest=True, sorted=False, dim=-1)[0].amin(-1, keepdim=True),
                                -torch.inf)
        if top_p > 0:
            sorted_logits, order = logits.sort(dim=-1, descending=False)
            remove = sorted_logits.softmax(-1).cumsum_(-1) <= (1 - top_p)
            remove[..., -1:] = False
            logits.masked_fill_(remove.scatter(order.ndim - 1, order, remove), -torch.inf)
        ids = (logits.softmax(-1) / torch.empty(B, L, V).exponential_(generator=g).clamp_min(1e-30)).argmax(-1)
        drawn.append(ids)
        return ids[..., None]

    module.sample_with_top_k_top_p_ = same_noise
    try:
        with torch.no_grad():
            ref_var.autoregressive_infer_cfg(labels.shape[0], labels, cfg=cfg, top_k=top_k, top_p=top_p)
    finally:
        module.sample_with_top_k_top_p_ = original
    return torch.cat(drawn, 1)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--reference-repo", required=True, type=Path)
    p.add_argument("--reference-commit", default=None, help="recorded in the JSON (the checkout's commit)")
    p.add_argument("--model", default="var", help="arvis VAR pipeline alias or folder")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--guidance-scale", type=float, default=None, help="VAR cfg (default: the model's)")
    p.add_argument("--top-k", type=int, default=0)
    p.add_argument("--top-p", type=float, default=0.0, help="VAR's convention: 0 disables")
    p.add_argument("--crops", type=int, default=16, help="held-out crops for the tokenizer / logit checks")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    if args.batch < 1 or args.repeats < 1 or args.crops < 1:
        raise ValueError("--batch, --repeats and --crops must be >= 1")
    torch.set_num_threads(args.threads)

    from arvis.data.crops import heldout_crops
    from arvis.engine.sampling import SamplingConfig
    from arvis.eval.files import write_json_atomic
    from arvis.hub import load_pipeline
    from arvis.methods.next_scale import decode_scales

    ref = load_reference(args.reference_repo)
    pipe, defaults, loaded = load_pipeline(args.model, torch.float32, "cpu")
    pipe.set_progress_bar_config(disable=True)
    model, vq = pipe.transformer.float().eval(), pipe.vqvae.float().eval()
    cfg_scale = args.guidance_scale if args.guidance_scale is not None else defaults.get("guidance_scale", 1.5)
    ref_vae = official_vqvae(ref, vq)
    ref_model = official_var(ref, model, ref_vae)

    # 1-2. tokenizer and teacher-forced logits on held-out crops.
    images, labels_np = heldout_crops(args.crops, resolution=vq.image_size, seed=3, progress=False)
    x = torch.from_numpy(images).permute(0, 3, 1, 2).float() / 127.5 - 1
    labels = torch.from_numpy(labels_np).long()
    with torch.no_grad():
        ref_ids, ours_ids = ref_vae.img_to_idxBl(x), vq.encode_scales(x)
        ids_equal = all(torch.equal(a, b) for a, b in zip(ref_ids, ours_ids, strict=True))
        recon_diff = float((ref_vae.img_to_reconstructed_img(x, last_one=True) - vq.reconstruct_scales(x)[-1]).abs().max())
        inputs = vq.quantize.teacher_inputs(ours_ids)
        ours_logits, ref_logits = model(labels, inputs), ref_model(labels, inputs)
        logit_diff = float((ours_logits - ref_logits).abs().max())

    # 3. tokens with the same draws.
    B = args.batch
    sample_labels = labels[:B] if B <= len(labels) else labels.repeat(B // len(labels) + 1)[:B]
    sampling = SamplingConfig(guidance_scale=cfg_scale, top_k=args.top_k, top_p=args.top_p or 1.0, guidance="var")
    ours_tokens, _ = decode_scales(model, vq.quantize, sample_labels, sampling, "ar", torch.Generator().manual_seed(0))
    ref_tokens = official_tokens(ref_model, sample_labels, cfg_scale, args.top_k, args.top_p, seed=0)
    mismatched = int((ours_tokens != ref_tokens).sum())

    # 4. speed, interleaved, images out on both sides.
    def run_ours() -> None:
        pipe(class_labels=sample_labels.tolist(), guidance_scale=cfg_scale, top_k=args.top_k, top_p=args.top_p or 1.0,
             generator=[torch.Generator().manual_seed(i) for i in range(B)], output_type="pt")

    def run_ref() -> None:
        with torch.no_grad():
            ref_model.autoregressive_infer_cfg(B, sample_labels, g_seed=0, cfg=cfg_scale, top_k=args.top_k, top_p=args.top_p)

    run_ours(), run_ref()  # warm-up
    times: dict[str, list[float]] = {"arvis": [], "reference": []}
    for _ in range(args.repeats):
        for name, fn in (("arvis", run_ours), ("reference", run_ref)):
            t = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t)
    result = {
        **loaded.record(), "reference": f"FoundationVision/VAR@{args.reference_commit or 'unknown'}",
        "patch_nums": list(model.scale_layout.patch_nums), "batch": B, "guidance_scale": cfg_scale, "top_k": args.top_k,
        "top_p": args.top_p, "threads": torch.get_num_threads(), "dtype": "fp32", "crops": args.crops,
        "tokenizer_ids_identical": ids_equal, "max_abs_reconstruction_diff": recon_diff,
        "max_abs_logit_diff": logit_diff, "same_noise_token_mismatches": mismatched,
        "same_noise_tokens": int(ours_tokens.numel()),
        "arvis_s": statistics.median(times["arvis"]), "reference_s": statistics.median(times["reference"]),
        "arvis_repeats_s": times["arvis"], "reference_repeats_s": times["reference"], "repeats": args.repeats,
    }
    result["arvis_speedup_over_reference"] = result["reference_s"] / result["arvis_s"]
    print(json.dumps({k: v for k, v in result.items() if not k.endswith("repeats_s")}, indent=2))
    if args.json:
        write_json_atomic(args.json, result)
    return result


if __name__ == "__main__":
    main()
