#!/usr/bin/env python
"""Join speed and quality: a bench JSON plus FID JSONs → a Markdown table and the FID-vs-speed plot.

    arvis bench --model c2i --methods "ar;sjd:window=16" --samples 8 --json out/bench.json
    arvis fid --model c2i --num-samples 1000 --floor --json out/fid-ar.json
    arvis fid --model c2i --num-samples 1000 --method sjd -o window=16 --json out/fid-sjd16.json
    python eval/report.py --bench out/bench.json --fid out/fid-ar.json out/fid-sjd16.json --output out/report

FID records are matched to bench records by method and options (``arvis fid --model`` records both).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def spec_label(method: str, options: dict) -> str:
    from arvis.eval.bench import MethodSpec

    return MethodSpec(method, tuple(options.items())).label


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--bench", required=True, help="JSON written by arvis bench --json")
    p.add_argument("--fid", nargs="+", required=True, help="JSON records written by arvis fid --model ... --json")
    p.add_argument("--output", required=True, help="folder for report.md and fid_vs_speed.png")
    args = p.parse_args(argv)
    try:
        bench = json.loads(Path(args.bench).read_text())
        fids = [json.loads(Path(f).read_text()) for f in args.fid]
    except (OSError, ValueError) as err:
        print(f"eval/report.py: error: {err}", file=sys.stderr)
        return 2
    by_spec = {r["spec"]: r for r in bench}
    rows, points, floor = [], [], None
    for f in fids:
        if "method" not in f:
            print(f"eval/report.py: error: {f.get('generated')} has no method (use arvis fid --model)", file=sys.stderr)
            return 2
        label = spec_label(f["method"], f.get("options", {}))
        if label not in by_spec:
            print(f"eval/report.py: error: no bench record for {label!r} (bench has {sorted(by_spec)})",
                  file=sys.stderr)
            return 2
        b = by_spec[label]
        floor = f.get("real_vs_real_floor", floor)
        rows.append(f"| {label} | {b['step_compression']:.2f}x | {b['speedup']:.2f}x | {f['fid']:.3f} | "
                    f"{f['num_generated']} | {f['extractor']} |")
        points.append({"spec": label, "speedup": b["speedup"], "fid": f["fid"]})

    from arvis.eval.files import write_bytes_atomic
    from arvis.eval.plots import plot_fid_vs_speed

    out = Path(args.output)
    plot_fid_vs_speed(points, out / "fid_vs_speed.png", floor=floor)
    floor_text = f"Real-vs-real floor at the same N: {floor:.3f}." if floor is not None else ""
    md = ["# Speed and quality", "", f"Bench: `{args.bench}` (model {bench[0].get('model')}, threads "
          f"{bench[0].get('threads')}, commit {str(bench[0].get('git_commit'))[:12]}). {floor_text}", "",
          "| spec | step compression | latency speedup | FID | N | extractor |", "|---|---|---|---|---|---|", *rows,
          "", "![FID vs speed](fid_vs_speed.png)", ""]
    write_bytes_atomic(out / "report.md", "\n".join(md).encode())
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    sys.exit(main())
