"""Next-token statistics of a shipped / given class-conditional model (see arvis/eval/token_stats.py).

    python eval/token_stats.py --model c2i --samples 64 --guidance-scale 3.0 --json docs/figures/token_stats_c2i.json \
        --plot docs/figures/token_stats_c2i.png
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="c2i")
    p.add_argument("--samples", type=int, default=64)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--guidance-scale", type=float, default=None)
    p.add_argument("--top-k", type=int, default=None)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--json", default=None)
    p.add_argument("--plot", default=None)
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    from arvis.engine.sampling import SamplingConfig
    from arvis.eval.token_stats import class_requests, token_statistics
    from arvis.hub import load_pipeline

    pipe, defaults, model = load_pipeline(args.model, torch.float32, "cpu")
    sampling = SamplingConfig(guidance_scale=args.guidance_scale if args.guidance_scale is not None
                              else defaults.get("guidance_scale", 4.0),
                              top_k=args.top_k if args.top_k is not None else defaults.get("top_k", 0))
    n_classes = pipe.transformer.config.num_classes
    labels = [i % n_classes for i in range(args.samples)]
    stats = token_statistics(class_requests(pipe.transformer.eval(), labels), sampling, seed=args.seed)
    stats.update(model.record())  # the model's name and weights hash (eval/figures.py reruns stale records)
    summary = {k: v for k, v in stats.items() if not k.endswith(("_map", "_by_row"))}
    print(json.dumps(summary, indent=2))
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(stats, indent=1) + "\n")
    if args.plot:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        names = ["entropy", "top1", "accept_uniform_draft", "accept_upper_neighbour", "repeat_left_prob"]
        fig, axes = plt.subplots(1, len(names), figsize=(3.2 * len(names), 3.2))
        for ax, name in zip(axes, names, strict=True):
            im = ax.imshow(stats[f"{name}_map"], cmap="viridis")
            ax.set_title(f"{name}\nmean {stats[name]:.3f}", fontsize=9)
            ax.axis("off")
            fig.colorbar(im, ax=ax, fraction=0.046)
        fig.suptitle(f"{Path(model.name).name}: next-token statistics over the 16x16 grid "
                     f"(cfg {sampling.guidance_scale}, top-k {sampling.top_k}, {args.samples} samples)", fontsize=10)
        fig.tight_layout()
        Path(args.plot).parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(args.plot, dpi=110)
    return stats


if __name__ == "__main__":
    main()
