"""The multi-scale drafting page (docs/figures/mulo.md, ``--suite mulo``): ``mulo`` (lossless) and ``mulo-local``
(lossy) against AR and MC-SJD; α and the decode-order maps by eval/mulo.py, benches and FIDs by ``arvis``."""

from __future__ import annotations

import argparse
from typing import Any

from figure_runner import Bench, Declaration, Fid, Option, Page, Script, Suite, load_record
from figure_tables import (
    bench_table,
    best_fid,
    cost_table,
    fid_label,
    fid_records,
    setting_line,
    survival_table,
)
from mulo import _alpha_lines
from suite_methods import LOSSLESS_FID_DIVISOR


def mulo_jobs(s: argparse.Namespace) -> list[Declaration]:
    """Every record docs/figures/mulo.md is built from."""
    local = tuple(f"mulo-local:window=32,radius={int(r)}" for r in s.radii.split(",") if r)
    b1 = ("ar", "mc-sjd:window=16", "mc-sjd:window=32", "mulo:window=16", "mulo:window=32", *local)
    b8 = ("ar", "mc-sjd:window=32", "mulo:window=32", *local)
    quarter = LOSSLESS_FID_DIVISOR
    folder = s.out / "mulo"
    return [
        Script("mulo/alpha", "mulo/alpha.json", ("eval/mulo.py", "alpha", "--json", str(folder / "alpha.json")),
               kind="alpha"),
        Script("mulo/maps", "mulo/maps.json", ("eval/mulo.py", "maps", "--json", str(folder / "maps.json"), "--plots",
                                               str(folder / "maps-plots"), "--specs", "mc-sjd:window=32",
                                               "mulo:window=32", *local), kind="maps"),
        Bench("mulo/batch1-fp32", b1, plots=True),
        Bench("mulo/batch8-fp32", b8, samples=8, batch=8),
        # The published variant at the window where MC-SJD's latency is best on this CPU (16), same rounds as batch1.
        Bench("mulo/batch1-window16", ("ar", "mc-sjd:window=16", "mulo-local:window=16,radius=1")),
        Fid("mulo-local:window=16,radius=1"),
        Bench("mulo/batch1-window16-radius2", ("ar", "mulo-local:window=16,radius=2")),
        Fid("mulo-local:window=16,radius=2"),
        Fid("ar", floor=True), Fid("ar", seed=1),
        *(Fid(spec) for spec in local),
        # Lossless methods at a quarter of N beside AR at the same N and two seeds (as the method suites do).
        Fid("ar", divide=quarter, floor=True), Fid("ar", divide=quarter, seed=1),
        Fid("mulo:window=32", divide=quarter), Fid("mc-sjd:window=32", divide=quarter),
    ]


def _drafter_lines(records: list[dict[str, Any]]) -> list[str]:
    rows = [r for r in records if r["method"] in ("mulo", "mulo-local")]
    if not rows:
        return []
    lines = ["Drafts of the multi-scale methods in these decodes (means over samples): acceptance probability "
             "Σ min(p, q) of the up-sampler's drafts at their first verification and of refreshed drafts, tokens "
             "committed ahead of the first uncommitted position (mulo-local's local commits):", "",
             "| method | draft forwards | α (up-sampler drafts) | α (refreshed drafts) | committed ahead / image |",
             "|---|---|---|---|---|"]
    for r in rows:
        ex = r.get("extra", {})
        cells = [f"{ex[k]:.3f}" if k in ex else "–" for k in ("alpha_upsampler_drafts", "alpha_refreshed_drafts")]
        ahead = f"{ex['committed_ahead_of_frontier'] / r['samples']:.1f}" if "committed_ahead_of_frontier" in ex else "–"
        lines.append(f"| `{r['spec']}` | {r['draft_forwards']:.0f} | {cells[0]} | {cells[1]} | {ahead} |")
    return lines + [""]


def _verdicts(records: list[dict[str, Any]], fids: dict, fid_num: int, maps: Any = None) -> list[str]:
    """The two targets of the issue, decided from the records (the lossless one from the batch-1 bench and, over
    more samples, the maps record's forwards)."""
    by_spec = {r["spec"]: r for r in records}
    lines = []
    mc, mulo = by_spec.get("mc-sjd:window=32"), by_spec.get("mulo:window=32")
    if mc and mulo:
        beats = mulo["step_compression"] > mc["step_compression"]
        line = (f"- Lossless, 33 positions per forward: `mulo:window=32` {mulo['step_compression']:.2f}x vs "
                f"`mc-sjd:window=32` {mc['step_compression']:.2f}x step compression ({mulo['samples']} samples, batch 1)")
        specs = maps.get("specs", {}) if isinstance(maps, dict) else {}
        if mulo["spec"] in specs and mc["spec"] in specs:
            m_fwd, c_fwd = specs[mulo["spec"]]["target_forwards"], specs[mc["spec"]]["target_forwards"]
            f_mulo, f_mc = sum(m_fwd) / len(m_fwd), sum(c_fwd) / len(c_fwd)
            tokens = len(specs[mulo["spec"]]["commit_forward"][0])
            line += (f"; over the maps' {len(m_fwd)} samples {tokens / f_mulo:.2f}x vs {tokens / f_mc:.2f}x "
                     f"({f_mulo:.1f} vs {f_mc:.1f} forwards)")
            beats = beats and f_mulo < f_mc
        lines.append(line + f" — {'beats' if beats else 'does not beat'} MC-SJD at equal positions per forward.")
    ar_fids = [rec["fid"] for (label, _, n), rec in fids.items() if label == "ar" and n == fid_num]
    noise = max(ar_fids) - min(ar_fids) if len(ar_fids) >= 2 else None
    ar0 = best_fid(fids, "ar")
    for r in records:
        if r["method"] != "mulo-local":
            continue
        rec = best_fid(fids, r["spec"])
        if rec is None or ar0 is None or noise is None:
            lines.append(f"- `{r['spec']}`: {r['speedup']:.2f}x latency over AR (FID not measured yet).")
            continue
        within = abs(rec["fid"] - ar0["fid"]) <= noise
        ok = within and r["speedup"] >= 1.7
        lines.append(f"- `{r['spec']}`: {r['speedup']:.2f}x latency over AR, FID {rec['fid']:.2f} vs AR "
                     f"{ar0['fid']:.2f} (seed noise {noise:.2f}; {'within' if within else 'outside'} it) — "
                     f"target (>= 1.7x at FID within noise) {'met' if ok else 'not met'}.")
    return lines


def mulo_page(page: Page) -> list[str]:
    """docs/figures/mulo.md from the records under ``mulo/`` and the figure set's FIDs."""
    jobs, out, fid_num = page.jobs, page.out, page.settings.fid_num
    fids = fid_records(out)
    lines = ["# Figures: multi-scale drafting (mulo, mulo-local)", "",
             "Generated by `python eval/figures.py --suite mulo` from the JSON records in `docs/figures/mulo/` and "
             "`docs/figures/fid/` (re-run it to reproduce; `--list` prints every command). Method: docs/mulo.md. "
             "`mulo` is lossless; `mulo-local` (MuLo-SD's local resampling) is lossy. FID: the shipped domain "
             "network, held-out real crops as reference (docs/evaluation.md).", ""]
    verdict_records: list[dict[str, Any]] = []
    for job in jobs:
        record = load_record(job.output)
        if job.kind == "alpha":
            lines += ["## α: what the up-sampler's drafts are worth", ""]
            lines += _alpha_lines(record) if isinstance(record, dict) else ["(not run yet)", ""]
        elif job.kind == "maps":
            lines += ["## Where tokens are committed and where drafts are rejected", ""]
            if isinstance(record, dict):
                lines += [f"{record['samples']} samples per method (class i mod classes, seeds {record['seed']}…); "
                          "decode order of sample 0 and mean rejections per position:", "",
                          "| method | target forwards (mean) |", "|---|---|"]
                for label, d in record["specs"].items():
                    lines.append(f"| `{label}` | {sum(d['target_forwards']) / len(d['target_forwards']):.1f} |")
                plots = out / "mulo" / "maps-plots"
                lines += ["", "Plots: " + ", ".join(f"[{p.name}](mulo/{plots.name}/{p.name})"
                                                    for p in sorted(plots.glob("*.png"))), ""]
            else:
                lines += ["(not run yet)", ""]
        elif job.kind == "bench":
            lines += [f"## {job.name}", ""]
            if not isinstance(record, list):
                lines += ["(not run yet)", ""]
                continue
            verdict_records += record if record[0]["batch_size"] == 1 else []
            lines += [setting_line(record), ""]
            lines += bench_table(record, fids)
            lines += ["", *_drafter_lines(record)]
            lines += ["Acceptance by window position — share of target forwards that commit at least j tokens:", ""]
            lines += survival_table(record)
            lines += ["", "Forward cost on this machine (same model, batch and guidance):", ""]
            lines += cost_table(record[0].get("forward_cost", [])) + [""]
            plots = out / "mulo" / f"{job.output.stem}-plots"
            if plots.is_dir():
                lines += ["Plots: " + ", ".join(f"[{p.name}](mulo/{plots.name}/{p.name})"
                                                for p in sorted(plots.glob("*.png"))), ""]
    fid_jobs = [j for j in jobs if j.kind == "fid"]
    rows = [rec for j in fid_jobs if isinstance(rec := load_record(j.output), dict)]
    if rows:
        lines += ["## FID", "", "| method | seed | N | FID | real-vs-real floor (same N) |", "|---|---|---|---|---|"]
        for rec in sorted(rows, key=lambda r: (-r["num_generated"], fid_label(r) != "ar", fid_label(r), r["seed"])):
            floor = rec.get("real_vs_real_floor")
            lines.append(f"| `{fid_label(rec)}` | {rec['seed']} | {rec['num_generated']} | {rec['fid']:.2f} | "
                         f"{'–' if floor is None else f'{floor:.2f}'} |")
        for n in sorted({r["num_generated"] for r in rows}, reverse=True):
            ar = [r["fid"] for r in rows if fid_label(r) == "ar" and r["num_generated"] == n]
            if len(ar) >= 2:
                lines.append(f"\nSeed-to-seed noise of AR at N = {n}: |ΔFID| = {max(ar) - min(ar):.2f}.")
        lines.append("")
    maps = next((load_record(j.output) for j in jobs if j.kind == "maps"), None)
    lines += ["## Targets", "", *_verdicts(verdict_records, fids, fid_num, maps), "",
              "## Published anchor", "",
              "- MuLo-SD (Peruzzo et al., CVPR 2026): up to 1.7x latency (v1) and up to 5x (v2) on large "
              "text-to-image models; no public code, so no like-for-like comparison.", ""]
    return lines


SUITE = Suite("mulo", "c2i", mulo_jobs, (mulo_page,),
              options=(Option("--radii", "1,2", help="mulo: radii of the mulo-local specs"),))
