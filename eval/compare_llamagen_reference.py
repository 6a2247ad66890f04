"""Side by side with FoundationVision/LlamaGen's own code on the same weights: logits and AR speed.

arvis does not contain or vendor LlamaGen's code. Point this script at a checkout of the reference
repository (``--reference-repo``, the folder holding ``autoregressive/`` and ``utils/``); it exports
an arvis model in the official layout, loads it with the reference ``Transformer``, and checks:

1. weight compatibility — the reference ``load_state_dict(strict=True)`` accepts the export and its
   teacher-forced logits equal arvis's (max |Δ| printed; fp32);
2. speed — the reference ``generate()`` against arvis's plain AR (``method="ar"``) with the same
   weights, batch, CFG scale, top-k and temperature, interleaved repeats, median wall time.

Example::

    python eval/compare_llamagen_reference.py --reference-repo /tmp/llamagen-ref --model c2i --repeats 5
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch


def load_reference(repo: Path):
    if not (repo / "autoregressive" / "models" / "gpt.py").is_file():
        raise ValueError(f"--reference-repo: {repo} has no autoregressive/models/gpt.py (a LlamaGen checkout?)")
    sys.path.insert(0, str(repo))
    from autoregressive.models import generate as ref_generate  # noqa: PLC0415
    from autoregressive.models import gpt as ref_gpt  # noqa: PLC0415

    return ref_gpt, ref_generate


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--reference-repo", required=True, type=Path)
    p.add_argument("--model", default="c2i", help="arvis model alias or pipeline folder (class-conditional)")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--guidance-scale", type=float, default=3.0)
    p.add_argument("--top-k", type=int, default=0)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: every core)")
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    from arvis.eval.bench import available_cores

    torch.set_num_threads(args.threads or available_cores())

    from arvis.engine.sampling import SamplingConfig
    from arvis.hub import load_pipeline
    from arvis.methods import decode
    from arvis.models.checkpoint import export_llamagen_checkpoint
    from arvis.models.protocol import Condition

    ref_gpt, ref_generate = load_reference(args.reference_repo)
    pipe, _, path = load_pipeline(args.model, torch.float32, "cpu")
    model = pipe.transformer.float().eval()
    cfg = model.config
    with tempfile.TemporaryDirectory() as tmp:
        ckpt = Path(tmp) / "model.pt"
        export_llamagen_checkpoint(model, ckpt)
        state = torch.load(ckpt, map_location="cpu", weights_only=False)["model"]  # our own file
    ref = ref_gpt.Transformer(ref_gpt.ModelArgs(
        dim=cfg.dim, n_layer=cfg.n_layer, n_head=cfg.n_head, n_kv_head=cfg.n_kv_head, multiple_of=cfg.multiple_of,
        ffn_dim_multiplier=cfg.ffn_dim_multiplier, rope_base=cfg.rope_base, norm_eps=cfg.norm_eps,
        num_classes=cfg.num_classes, class_dropout_prob=cfg.class_dropout_prob, model_type=cfg.model_type,
        vocab_size=cfg.vocab_size, cls_token_num=cfg.cls_token_num, block_size=cfg.block_size,
        token_dropout_p=0.0, resid_dropout_p=0.0, ffn_dropout_p=0.0))
    ref.load_state_dict(state, strict=True)

    B, N = args.batch, model.layout.num_tokens
    g = torch.Generator().manual_seed(0)
    labels = torch.randint(0, cfg.num_classes, (B,), generator=g)
    tokens = torch.randint(0, cfg.vocab_size, (B, N), generator=g)
    # The reference computes teacher-forced logits only in training mode; with every dropout at 0 and
    # label dropout off (on this local object) that path is deterministic.
    ref.train()
    ref.cls_embedding.dropout_prob = 0.0
    with torch.no_grad():
        ours = model(tokens, Condition(class_labels=labels))
        theirs, _ = ref(idx=tokens[:, :-1], cond_idx=labels)
    max_diff = float((ours - theirs).abs().max())
    ref.eval()

    sampling = SamplingConfig(guidance_scale=args.guidance_scale, top_k=args.top_k)
    gens = lambda: [torch.Generator().manual_seed(s) for s in range(B)]  # noqa: E731

    def run_ours():
        decode(model, Condition(class_labels=labels), sampling, "ar", gens())

    def run_ref():
        with torch.no_grad():
            ref_generate.generate(ref, labels, N, cfg_scale=args.guidance_scale, top_k=args.top_k,
                                  temperature=1.0, top_p=1.0, sample_logits=True)

    run_ours(), run_ref()  # warm-up
    times = {"arvis": [], "reference": []}
    for _ in range(args.repeats):
        for name, fn in (("arvis", run_ours), ("reference", run_ref)):
            t = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t)
    result = {"model": args.model, "batch": B, "guidance_scale": args.guidance_scale, "top_k": args.top_k,
              "threads": torch.get_num_threads(), "max_abs_logit_diff": max_diff,
              "arvis_ar_s": statistics.median(times["arvis"]), "reference_generate_s": statistics.median(times["reference"])}
    result["arvis_speedup_over_reference"] = result["reference_generate_s"] / result["arvis_ar_s"]
    print(json.dumps(result, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    return result


if __name__ == "__main__":
    main()
