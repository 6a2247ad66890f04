#!/usr/bin/env python
"""Join speed and quality: a bench JSON plus FID JSONs → a Markdown table and the FID-vs-speed plot.

    arvis bench --model c2i --method "sjd:window=16" --num-images 8 --json out/bench.json
    arvis fid --model c2i --num-images 1000 --floor --json out/fid-ar.json
    arvis fid --model c2i --num-images 1000 --method sjd:window=16 --json out/fid-sjd16.json
    python eval/report.py --bench out/bench.json --fid out/fid-ar.json out/fid-sjd16.json --output out/report

A FID record joins the bench record of the same method and options, and only when both describe the same
model (name and content hash) with the same sampling settings and dtype: records of different models or
settings are refused, naming the field that differs.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

SAMPLING_KEYS = ("guidance_scale", "top_k", "top_p", "temperature")


def spec_label(method: str, options: dict) -> str:
    from arvis.eval.bench import MethodSpec

    return MethodSpec(method, tuple(options.items())).label


def mismatch(bench: dict[str, Any], fid: dict[str, Any]) -> str | None:
    """Why a FID record cannot join a bench record (``None`` when it can)."""
    if fid.get("model") != bench.get("model"):
        return f"model {fid.get('model')!r} (FID) vs {bench.get('model')!r} (bench)"
    a, b = fid.get("model_sha256"), bench.get("model_sha256")
    if a is not None and b is not None and a != b:
        return f"model_sha256 {a} (FID) vs {b} (bench): same name, different weights"
    fs, bs = fid.get("sampling", {}), bench.get("sampling", {})
    for key in SAMPLING_KEYS:
        if fs.get(key) != bs.get(key):
            return f"sampling {key} {fs.get(key)!r} (FID) vs {bs.get(key)!r} (bench)"
    if fid.get("dtype") != bench.get("dtype"):
        return f"dtype {fid.get('dtype')!r} (FID) vs {bench.get('dtype')!r} (bench)"
    return None


def join(bench: list[dict[str, Any]], fids: list[dict[str, Any]], names: list[str]) -> list[tuple[dict, dict]]:
    """``(bench record, FID record)`` pairs; ``ValueError`` naming the file and the reason for any that cannot join."""
    if any(r.get("quick") for r in bench):
        raise ValueError("--bench: a quick run (arvis bench --quick: one round) is not a measurement; run the bench "
                         "without --quick")
    by_spec = {r["spec"]: r for r in bench}
    pairs = []
    for name, f in zip(names, fids, strict=True):
        if "method" not in f:
            raise ValueError(f"{name}: has no method (write FID records with arvis fid --model … --json)")
        label = spec_label(f["method"], f.get("options", {}))
        if label not in by_spec:
            raise ValueError(f"{name}: no bench record for {label!r} (bench has {sorted(by_spec)})")
        why = mismatch(by_spec[label], f)
        if why:
            raise ValueError(f"{name}: cannot join the bench record of {label!r}: {why}")
        pairs.append((by_spec[label], f))
    return pairs


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--bench", required=True, help="JSON written by arvis bench --json")
    p.add_argument("--fid", nargs="+", required=True, help="JSON records written by arvis fid --model ... --json")
    p.add_argument("--output", required=True, help="folder for report.md and fid_vs_speed.png")
    args = p.parse_args(argv)
    try:
        bench = json.loads(Path(args.bench).read_text())
        fids = [json.loads(Path(f).read_text()) for f in args.fid]
        pairs = join(bench, fids, args.fid)
    except (OSError, ValueError) as err:
        print(f"eval/report.py: error: {err}", file=sys.stderr)
        return 2

    from arvis.eval.files import write_bytes_atomic
    from arvis.eval.plots import plot_fid_vs_speed

    rows, points, floor = [], [], None
    for b, f in pairs:
        floor = f.get("real_vs_real_floor", floor)
        rows.append(f"| {b['spec']} | {b['step_compression']:.2f}x | {b['speedup']:.2f}x | {f['fid']:.3f} | "
                    f"{f['num_generated']} | {f['extractor']} |")
        points.append({"spec": b["spec"], "speedup": b["speedup"], "fid": f["fid"]})
    out = Path(args.output)
    model = bench[0].get("model")
    plot_fid_vs_speed(points, out / "fid_vs_speed.png", floor=floor, model=model)
    floor_text = f"Real-vs-real floor at the same N: {floor:.3f}." if floor is not None else ""
    md = ["# Speed and quality", "", f"Bench: `{Path(args.bench).name}` (model {model}, threads "
          f"{bench[0].get('threads')}, commit {str(bench[0].get('git_commit'))[:12]}). {floor_text}", "",
          "| spec | step compression | latency speedup | FID | N | extractor |", "|---|---|---|---|---|---|", *rows,
          "", "![FID vs speed](fid_vs_speed.png)", ""]
    write_bytes_atomic(out / "report.md", "\n".join(md).encode())
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    sys.exit(main())
