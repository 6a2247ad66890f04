"""Would speculative verification of a small VAR's scales by the large one pay? Measure it.

For every scale of the shipped VAR pair, on samples of the target model: the mean per-token total
variation between the target's and the draft's sampling distributions, the probability that per-token
exact verification accepts the whole scale (``Π (1 − TV_i)``), and the best acceptance any exact
verification of a drafted scale can reach (``1 − TV`` of the two joint distributions, estimated by
sampling). The math is in docs/var.md. Example::

    python eval/var_acceptance.py --model var --samples 64 --json docs/figures/var/acceptance.json
"""

from __future__ import annotations

import argparse

import torch


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="var", help="VAR pipeline alias or folder (needs a draft_transformer)")
    p.add_argument("--samples", type=int, default=64, help="samples (class i mod classes)")
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--joint-draws", type=int, default=32, help="draft draws per sample for the joint acceptance")
    p.add_argument("--guidance-scale", type=float, default=None, help="VAR cfg (default: the model's)")
    p.add_argument("--top-k", type=int, default=None)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    for name in ("samples", "batch_size", "joint_draws"):
        if getattr(args, name) < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be >= 1")
    torch.set_num_threads(args.threads)

    from arvis.eval.files import write_json_atomic
    from arvis.eval.jobs import image_generator
    from arvis.hub import load_pipeline
    from arvis.methods.next_scale import measure_scale_agreement

    pipe, _, loaded = load_pipeline(args.model, torch.float32, "cpu")
    if pipe.draft_transformer is None:
        raise ValueError(f"--model: {args.model!r} has no draft_transformer to measure")
    # The pipeline's sampling settings (its defaults, VAR's guidance rule), the options given replacing them.
    sampling = pipe.sampling_config(guidance_scale=args.guidance_scale, top_k=args.top_k)
    guidance, top_k = sampling.guidance_scale, sampling.top_k
    n_classes = pipe.transformer.num_classes
    per_batch = []
    for start in range(0, args.samples, args.batch_size):
        idx = list(range(start, min(start + args.batch_size, args.samples)))
        labels = torch.tensor([i % n_classes for i in idx])
        rows = measure_scale_agreement(pipe.transformer, pipe.draft_transformer, pipe.vqvae.quantize, labels, sampling,
                                       [image_generator(args.seed, i) for i in idx], args.joint_draws)
        per_batch.append((len(idx), rows))
    scales = []
    for s in range(len(per_batch[0][1])):
        n = sum(w for w, _ in per_batch)
        row = {k: per_batch[0][1][s][k] for k in ("scale", "side", "tokens")}
        for key in ("tv", "tokenwise", "joint"):
            row[key] = sum(w * rows[s][key] for w, rows in per_batch) / n
        row["log10_tokenwise_median_of_batches"] = sorted(rows[s]["log10_tokenwise"] for _, rows in per_batch)[
            len(per_batch) // 2]
        scales.append(row)
    result = {**loaded.record(), "samples": args.samples, "seed": args.seed, "guidance_scale": guidance,
              "top_k": top_k, "joint_draws": args.joint_draws, "scales": scales}
    print(f"{'scale':>5} {'side':>4} {'tokens':>6} {'mean TV':>8} {'P(all tokens accepted)':>23} "
          f"{'log10 (median)':>14} {'joint 1-TV':>10}")
    for r in scales:
        print(f"{r['scale']:>5} {r['side']:>4} {r['tokens']:>6} {r['tv']:>8.4f} {r['tokenwise']:>23.3e} "
              f"{r['log10_tokenwise_median_of_batches']:>14.1f} {r['joint']:>10.3e}")
    if args.json:
        write_json_atomic(args.json, result)
        print(f"wrote {args.json}")
    return result


if __name__ == "__main__":
    main()
