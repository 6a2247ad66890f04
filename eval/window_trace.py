"""The windows cost-aware decoding chooses: window against token position, per batch size.

    python eval/window_trace.py --model c2i --batch-sizes 1 4 8 --json docs/figures/windows/trace.json \
        --plot docs/figures/windows/trace.png

For each batch size, one decode of each method (default ``mc-sjd:window=auto`` and ``sjd:window=auto``) of the
first ``batch`` classes with seeded per-sample generators; the record keeps, per decode, the window chosen at
every forward with the first sample's committed position then, the windows' histogram, the forward-cost curve the
policy measured and its loop overhead. The plot draws window against position, one line per batch size.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch


def main(argv: list[str] | None = None) -> list[dict]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="c2i")
    p.add_argument("--method", action="append", default=None,
                   help="method spec with window=auto (repeatable; default mc-sjd and sjd)")
    p.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 4, 8])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--json", required=True)
    p.add_argument("--plot", default=None)
    args = p.parse_args(argv)

    from arvis.eval.files import write_json_atomic
    from arvis.hub import load_pipeline
    from arvis.methods.spec import parse_method_specs
    from arvis.utils.random import seed_for

    if args.threads is not None:
        torch.set_num_threads(args.threads)
    specs = parse_method_specs(args.method or ["mc-sjd:window=auto", "sjd:window=auto"])
    pipe, _, model = load_pipeline(args.model, torch.float32, "cpu")
    if pipe.capabilities.conditioning != "class":
        raise SystemExit(f"window_trace: {args.model} is not class-conditional; give a class-conditional model")
    classes = list(range(pipe.capabilities.num_classes))
    pipe.set_progress_bar_config(disable=True)
    records = []
    for batch in args.batch_sizes:
        labels = [classes[i % len(classes)] for i in range(batch)]
        for spec in specs:
            gens = [torch.Generator().manual_seed(seed_for(args.seed, i)) for i in range(batch)]
            out = pipe(class_labels=labels, generator=gens, method=spec.name, output_type="latent",
                       **spec.options_dict)
            extra = out.stats.samples[0].extra
            if "window_trace" not in extra:
                raise SystemExit(f"window_trace: {spec.label} did not choose its windows (give window=auto)")
            records.append({**model.record(), "spec": spec.label, "batch_size": batch, "seed": args.seed,
                            "threads": torch.get_num_threads(), "target_forwards": out.stats.target_forwards,
                            "tokens": out.stats.tokens, **{k: extra[k] for k in (
                                "window_trace", "windows_chosen", "mean_window", "cost_curve_ms",
                                "loop_overhead_ms", "max_window")}})
            print(f"{spec.label} batch {batch}: {out.stats.target_forwards:.0f} forwards, mean window "
                  f"{extra['mean_window']:.1f}, chosen {extra['windows_chosen']}")
    write_json_atomic(Path(args.json), records)
    if args.plot:
        plot(records, Path(args.plot))
    return records


def plot(records: list[dict], path: Path) -> Path:
    from arvis.eval.plots import _pyplot, _save

    plt = _pyplot()
    specs = sorted({r["spec"] for r in records})
    fig, axes = plt.subplots(1, len(specs), figsize=(5.5 * len(specs), 3.4), squeeze=False, sharey=True)
    for ax, spec in zip(axes[0], specs, strict=True):
        for r in (r for r in records if r["spec"] == spec):
            xs = [t[0] for t in r["window_trace"]]
            ys = [t[1] for t in r["window_trace"]]
            ax.step(xs, ys, where="post", label=f"batch {r['batch_size']} (mean {r['mean_window']:.1f})")
        ax.set_title(f"{spec} on {records[0]['model']}", fontsize=9)
        ax.set_xlabel("token position (first sample's committed tokens)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    axes[0][0].set_ylabel("window chosen (0: a plain AR step)")
    return _save(fig, path)


if __name__ == "__main__":
    main()
