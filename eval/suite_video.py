"""The video page (docs/figures/video.md, ``--suite video``): temporal drafting on the shipped video model.

Stages (one JSON record each under ``docs/figures/video/``; ``--list`` prints their commands):

- ``bench-<group>``: :func:`arvis.eval.bench.run_bench` on the shipped video model (``--model video``), batch 1,
  fp32, the same seeds for every method, AR first, interleaved repeats, median latency; time them on a quiet machine.
  Groups (one record each, AR in every group so that speedups are same-process ratios): ``sjd`` (SJD with random /
  previous-frame initial drafts), ``mc`` (MC-SJD with maximal coupling), ``gumbel`` (MC-SJD with Gumbel coupling at
  windows 16 ... 512, previous-frame distribution drafts; random drafts at 128 for comparison), ``zipar``
  (ZipAR across rows and frames, lossy; the staircase window as a lossless composition). The clips are
  one class of each kind and motion family (``BENCH_CLASSES``).
- ``lossless``: the verdicts of tests/pipelines/video/test_video_lossless.py's cases (chi-square p and TV against the
  exact distribution of a 2 x 2 x 2 table model, vocabulary 3), and the planted bug's.
- ``quality``: ``--num`` clips per method and seed set (:data:`SEED_SETS`, three; the model's classes round robin):
  AR, MC-SJD with maximal coupling and with Gumbel coupling (lossless: their figures must match AR's within AR's
  seed-to-seed spread; Gumbel with the same per-clip generators reproduces AR's clips, counted), ZipAR at row
  lag 1 (lossy). Per-frame FID (the image domain network of the model's data) and domain FVD (video feature
  network), each with its real-vs-real floor, and temporal consistency beside that of real held-out clips; a
  model of the moving named emoji is compared with held-out clips of them. Resumable row by row; a record
  measured before the seed sets is listed as to do.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from figure_runner import Declaration, Option, Page, Stage, Suite

from arvis.eval.files import write_bytes_atomic, write_json_atomic


def records(args: argparse.Namespace) -> Path:
    """The folder of the video records."""
    return args.out / "video"


#: Mixed clips: one class per kind and motion family (camera zoom in, emoji slide up, emoji orbit, digit 3); a model
#: of the named emoji: the emoji at those class indices.
BENCH_CLASSES = (4, 8, 12, 17)
PF = "init=previous_frame_distribution"
GROUPS: dict[str, list[str]] = {
    "sjd": ["ar", "sjd:window=16,init=random", "sjd:window=16,init=repeat_temporal",
            f"sjd:window=64,{PF}"],
    "mc": ["ar", "mc-sjd:window=64,init=random", f"mc-sjd:window=64,{PF}", f"mc-sjd:window=128,{PF}",
           "mc-sjd:window=128,init=repeat_temporal"],
    "gumbel": ["ar", *(f"mc-sjd:coupling=gumbel,window={w},{PF}" for w in (16, 64, 128, 256, 512)),
               "mc-sjd:coupling=gumbel,window=128,init=random", "mc-sjd:coupling=gumbel,window=128,init=repeat_temporal"],
    "zipar": ["ar", "zipar:row_lag=1", "zipar:row_lag=2", "zipar:row_lag=4",
              f"mc-sjd:coupling=gumbel,window=64,window_shape=staircase,staircase_rows=2,staircase_step=2,{PF}"],
}
QUALITY_METHODS: list[tuple[str, dict[str, Any]]] = [
    ("ar", {}),
    ("mc-sjd", {"window": 128, "init": "previous_frame_distribution"}),
    ("mc-sjd", {"coupling": "gumbel", "window": 128, "init": "previous_frame_distribution"}),
    ("zipar", {"row_lag": 1}),  # the fastest lag; lags 2 and 4 are timed by the benches (a row costs minutes here)
]
#: Every quality method is measured on each of these seed sets (clip i of a set seeded base + i), so a lossless
#: method's distance from AR can be read against AR's own seed-to-seed spread.
SEED_SETS: tuple[int, ...] = (1000, 500_000, 1_000_000)
ANCHOR = ("MC-SJD with Gumbel coupling (So et al., 2025): 7,680 → 564 forwards (13.6x) on Cosmos-1-AR video "
          "at L = 128, FVD 156.9 → 152.4 (RealEstate10k; a 4B-class model on a GPU).")


def _label(method: str, options: dict[str, Any]) -> str:
    return method + (":" + ",".join(f"{k}={v}" for k, v in options.items()) if options else "")


def load_pipe(model: str, threads: int):
    from arvis.hub import load_pipeline

    torch.set_num_threads(threads)
    pipe, defaults, path = load_pipeline(model, torch.float32, "cpu")
    pipe.set_progress_bar_config(disable=True)
    return pipe, defaults, path


def model_name(ref: Any) -> str:
    """The model as recorded: the hub's name for it (an alias, or a folder name; never a machine path)."""
    return ref.name if hasattr(ref, "name") and not isinstance(ref, Path) else Path(str(ref)).name


# ----------------------------------------------------------------------------- bench
def stage_bench(args: argparse.Namespace, group: str) -> Path:
    from arvis.engine.sampling import SamplingConfig
    from arvis.eval.bench import format_markdown, parse_method_specs, run_bench

    out = records(args) / f"bench-{group}.json"
    pipe, defaults, path = load_pipe(args.model, args.threads)
    sampling = SamplingConfig(guidance_scale=defaults.get("guidance_scale", 3.0), top_k=defaults.get("top_k", 0))
    classes = BENCH_CLASSES[: args.samples]
    inputs = pipe.bench_inputs(classes, len(classes), 1)  # sample i: class classes[i], one per decode call
    result = run_bench(inputs, parse_method_specs([";".join(GROUPS[group])]), sampling,
                       repeats=args.repeats, warmup=1, forward_cost_sizes=(1, 16, 64, 128, 256),
                       context={"model": model_name(path), "group": group, "classes": list(classes),
                                "threads": torch.get_num_threads()}, progress=True)
    write_json_atomic(out, result.records)
    write_bytes_atomic(out.with_suffix(".md"), format_markdown(result).encode())
    print(f"wrote {out}")
    return out


# ----------------------------------------------------------------------------- quality
#: Clip i of every quality row is seeded SEED_BASE + i (the same clips' seeds for every method).
SEED_BASE = 1000


def _clips(pipe, method: str, options: dict[str, Any], num: int, batch: int, sampling: dict[str, Any],
           seed_base: int = SEED_BASE) -> tuple[np.ndarray, torch.Tensor, list[Any]]:
    from arvis.utils.random import make_generators

    names = pipe.class_names
    frames, tokens, stats = [], [], []
    for start in range(0, num, batch):
        idx = list(range(start, min(start + batch, num)))
        out = pipe(class_labels=[names[i % len(names)] for i in idx], generator=make_generators([seed_base + i for i in idx]),
                   output_type="np", method=method, **sampling, **options)
        frames.append((out.frames * 255).round().astype(np.uint8))
        tokens.append(out.tokens)
        stats.extend(out.stats.samples)
    return np.concatenate(frames), torch.cat(tokens), stats


#: Clip i of the seed-noise rows is seeded SECOND_SEED_BASE + i: AR and the lossless
#: method each measured twice, so the spread of each pair is beside the difference between them.
SECOND_SEED_BASE = 500_000
SECOND_SEED_ROWS: dict[str, tuple[str, dict[str, Any]]] = {
    "ar_second_seed": ("ar", {}),
    "lossless_second_seed": QUALITY_METHODS[1],
}


def _is_named(pipe: Any) -> bool:
    """A model of the moving named emoji (one class per emoji): its references are clips of them."""
    from arvis.data.sources import class_names

    return list(pipe.class_names) == list(class_names("emoji-names"))


def stage_quality(args: argparse.Namespace) -> Path:
    """Every quality method on every seed set (resumable row by row: a partial record keeps the rows done)."""
    from arvis.eval import video_metrics as vm
    from arvis.eval.fid import load_extractor

    out = records(args) / "quality.json"
    partial = out.with_suffix(".partial.json")
    pipe, defaults, path = load_pipe(args.model, args.threads)
    named = _is_named(pipe)
    sampling = {"guidance_scale": defaults.get("guidance_scale", 3.0), "top_k": defaults.get("top_k", 0)}
    T, side = pipe.num_frames, pipe.resolution
    frames_net = load_extractor("domain-emoji") if named else None
    record: dict[str, Any] = {"model": model_name(path), "num_clips": args.num, "sampling": sampling,
                              "reference_frames": args.reference_frames, "seed_sets": list(SEED_SETS),
                              "reference": "held-out moving named emoji" if named else "held-out clips of every kind",
                              "frame_network": "domain-emoji" if named else "domain", "rows": []}
    if partial.exists() and "quality" not in (args.force or ""):  # a forced run starts afresh
        saved = json.loads(partial.read_text())
        if saved.get("seed_sets") == record["seed_sets"] and saved.get("model") == record["model"]:
            record = saved
    real = vm.heldout_clips(args.num, T, side, seed=vm.FLOOR_SEED, named=named)
    record["real"] = {"temporal": vm.temporal_consistency(real, frames_net)}
    done = {(r["label"], r["seed_base"]) for r in record["rows"]}
    ar_tokens: dict[int, torch.Tensor] = {}
    for base in SEED_SETS:
        for method, options in QUALITY_METHODS:
            label = _label(method, options)
            if (label, base) in done and not (method == "ar" and base not in ar_tokens and _needs_ar(record, base)):
                continue
            t0 = time.time()
            clips, tokens, stats = _clips(pipe, method, options, args.num, args.batch, sampling, base)
            if method == "ar":
                ar_tokens[base] = tokens
                if (label, base) in done:
                    continue
            row = {"label": label, "method": method, "options": options, "seed_base": base,
                   "lossless": method != "zipar", "seconds": time.time() - t0,
                   "target_forwards": float(np.mean([st.target_forwards for st in stats]))}
            if base in ar_tokens and method != "ar":
                row["clips_identical_to_ar"] = int((tokens == ar_tokens[base]).flatten(1).all(1).sum())
            row.update(per_frame_fid=vm.per_frame_fid(clips, frames_net, reference_frames=args.reference_frames,
                                                      named=named).to_dict(),
                       domain_fvd=vm.frechet_video_distance(clips, reference_num=args.reference_clips,
                                                            named=named).to_dict(),
                       temporal=vm.temporal_consistency(clips, frames_net))
            record["rows"].append(row)
            print(json.dumps({k: row[k] for k in ("label", "seed_base", "target_forwards", "seconds")}))
            write_json_atomic(partial, record)
    write_json_atomic(out, record)
    partial.unlink(missing_ok=True)
    print(f"wrote {out}")
    return out


def _needs_ar(record: dict[str, Any], base: int) -> bool:
    """AR's tokens of a seed set are needed again when a method of that set is still to be measured."""
    done = {(r["label"], r["seed_base"]) for r in record["rows"]}
    return any((_label(m, o), base) not in done for m, o in QUALITY_METHODS if m != "ar")


def quality_lines(q: dict[str, Any]) -> list[str]:
    """The quality section from a seed-set record: every method's figures on every seed set, and whether each
    lossless method's distance from AR lies inside AR's seed-to-seed spread."""
    sets = q["seed_sets"]
    by = {(r["label"], r["seed_base"]): r for r in q["rows"]}
    labels = list(dict.fromkeys(r["label"] for r in q["rows"]))
    lines = ["## Quality beside speed", "",
             f"{q['num_clips']} clips per method and seed set (clip i of a set seeded base + i, bases "
             f"{', '.join(map(str, sets))}; the same seeds for every method), CFG {q['sampling']['guidance_scale']}. "
             f"Per-frame FID: the `{q['frame_network']}` network, {q['reference_frames']} frames of "
             f"{q['reference']} as reference. Domain FVD: the video feature network trained here (not comparable with "
             "I3D FVDs). Floors: independent real held-out clips of the same size against the same references.", "",
             "| method | lossless | forwards | per-frame FID by seed set | mean ± sd | domain FVD by seed set | "
             "frame change | feature similarity |", "|---|---|---|---|---|---|---|---|"]
    stats = {}
    for label in labels:
        rows = [by[(label, b)] for b in sets if (label, b) in by]
        fids = np.array([r["per_frame_fid"]["fid"] for r in rows])
        fvds = [r["domain_fvd"]["fvd"] for r in rows]
        stats[label] = fids
        lines.append(f"| `{label}` | {'yes' if rows[0]['lossless'] else 'no (lossy)'} | "
                     f"{np.mean([r['target_forwards'] for r in rows]):.1f} | {' / '.join(f'{x:.2f}' for x in fids)} | "
                     f"{fids.mean():.2f} ± {fids.std(ddof=1) if len(fids) > 1 else 0:.2f} | "
                     f"{' / '.join(f'{v:.2f}' for v in fvds)} | "
                     f"{np.mean([r['temporal']['frame_change'] for r in rows]):.4f} | "
                     f"{np.mean([r['temporal']['feature_similarity'] for r in rows]):.4f} |")
    first = by.get(("ar", sets[0]))
    if first:
        f = first["per_frame_fid"]
        lines.append(f"| real held-out clips | - | - | floor {_fmt(f['real_vs_real_floor'])} | - | floor "
                     f"{_fmt(first['domain_fvd']['real_vs_real_floor'])} | {q['real']['temporal']['frame_change']:.4f} "
                     f"| {q['real']['temporal']['feature_similarity']:.4f} |")
    ar = stats.get("ar")
    if ar is not None and len(ar) > 1:
        spread = float(ar.max() - ar.min())
        lines += ["", f"AR's seed-to-seed spread of per-frame FID over the {len(ar)} seed sets: {spread:.2f} "
                  f"(sd {ar.std(ddof=1):.2f}). A lossless method samples AR's distribution with other random numbers, so "
                  "its per-set differences from AR should be of that size:", "",
                  "| lossless method | FID − AR's, per seed set | mean | inside AR's spread? | clips identical to AR's |",
                  "|---|---|---|---|---|"]
        for label in labels:
            rows = [by[(label, b)] for b in sets if (label, b) in by]
            if label == "ar" or not rows[0]["lossless"] or len(stats[label]) != len(ar):
                continue
            diff = stats[label] - ar
            inside = abs(float(diff.mean())) <= spread
            same = sum(r.get("clips_identical_to_ar", 0) for r in rows)
            lines.append(f"| `{label}` | {' / '.join(f'{d:+.2f}' for d in diff)} | {diff.mean():+.2f} | "
                         f"{'yes' if inside else '**no**'} | {same} of {q['num_clips'] * len(rows)} |")
    return lines + [""]


# ----------------------------------------------------------------------------- lossless
def stage_lossless(args: argparse.Namespace) -> Path:
    out = records(args) / "lossless.json"
    import pytest

    from tests.lossless_harness import check, run_method
    from tests.pipelines.video import test_video_lossless as t

    table = t.VideoTableBackbone(seed=3)
    rows = []
    for method, options, sampling in t.CASES:
        exact = table.sequence_probabilities(1, sampling)
        verdict = check(exact, run_method(table, sampling, method, t.N_SAMPLES, seed=21, **options), t.N_SAMPLES)
        rows.append({"case": t._case_id(method, options, sampling), "tv": verdict.tv, "tv_bound": verdict.tv_bound,
                     "p_value": verdict.p_value, "passed": verdict.passed})
        print(rows[-1])
    monkey = pytest.MonkeyPatch()
    try:  # the planted bug (previous-frame drafts with a uniform q), exactly as the test plants it
        import arvis.drafting.jacobi as jacobi

        original = jacobi.JacobiSession.initialise

        def initialise(self, index, want, committed):
            fresh = want & (self.tokens.gather(1, index) == jacobi.NO_TOKEN)
            original(self, index, want, committed)
            drafted = fresh & (self.tokens.gather(1, index) != jacobi.NO_TOKEN)
            self.store(index, drafted, self.tokens.gather(1, index), torch.full((self.V,), 1.0 / self.V))

        monkey.setattr(jacobi.JacobiSession, "initialise", initialise)
        exact = table.sequence_probabilities(1, t.NO_CFG)
        verdict = check(exact, run_method(table, t.NO_CFG, "sjd", t.N_SAMPLES, seed=22, window=3, init="repeat_temporal"),
                        t.N_SAMPLES)
    finally:
        monkey.undo()
    planted = {"case": "planted bug: previous-frame drafts recorded with a uniform q", "tv": verdict.tv,
               "tv_bound": verdict.tv_bound, "p_value": verdict.p_value, "passed": verdict.passed}
    write_json_atomic(out, {"grid": list(t.VIDEO_GRID), "vocab": 3, "n": t.N_SAMPLES, "cases": rows,
                            "planted": planted})
    print(f"wrote {out}")
    return out


# ----------------------------------------------------------------------------- report
def _fmt(x: Any, digits: int = 2) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def video_page(page: Page) -> list[str]:
    """docs/figures/video.md from the records under ``video/``."""
    records = page.out / "video"
    lines = ["# Video: temporal drafting on the shipped video model", "",
             "Built by `python eval/figures.py --suite video` from the JSON records in `docs/figures/video/`; "
             "`--list` prints the command that made each.", "",
             f"Anchor: {ANCHOR}", ""]
    benches = [json.loads(p.read_text()) for p in sorted(records.glob("bench-*.json"))]
    if benches:
        r0 = benches[0][0]
        lines += ["## Forwards, step compression and latency (batch 1, fp32, CPU)", "",
                  f"Model `{r0['model']}`, grid {r0['grid']} ({r0['tokens']:.0f} tokens per clip), classes "
                  f"{r0['classes']}, CFG {r0['sampling']['guidance_scale']}, top-k {r0['sampling']['top_k']}, "
                  f"{r0['repeats']} interleaved repeats (median), {r0.get('threads', '?')} thread(s). "
                  "Speedup = AR latency / method latency in the same run.", "",
                  "| group | method | lossless | target forwards | step compression | latency (s) | speedup |",
                  "|---|---|---|---|---|---|---|"]
        for records_of_group in benches:
            for r in records_of_group:
                lines.append(f"| {r['group']} | `{r['spec']}` | {'yes' if r['lossless'] else 'no (lossy)'} | "
                             f"{r['target_forwards']:.1f} | {r['step_compression']:.2f}x | {r['latency_s']:.3f} | "
                             f"{r['speedup']:.2f}x |")
        best = max((r for g in benches for r in g if r["lossless"]), key=lambda r: r["step_compression"])
        lines += ["", f"Best lossless step compression: **{best['step_compression']:.2f}x** (`{best['spec']}`, "
                  f"{best['target_forwards']:.1f} forwards for {best['tokens']:.0f} tokens); target >= 10x.", ""]
    quality = records / "quality.json"
    if quality.exists() and "seed_sets" in json.loads(quality.read_text()):
        lines += quality_lines(json.loads(quality.read_text()))
    elif quality.exists():  # a record measured before the seed sets
        q = json.loads(quality.read_text())
        lines += ["## Quality beside speed", "",
                  f"{q['num_clips']} clips per method (the 24 classes round robin, clip i seeded {SEED_BASE} + i), "
                  f"CFG {q['sampling']['guidance_scale']}. Per-frame FID: image domain network, "
                  f"{q['reference_frames']} held-out frames as reference. Domain FVD: the video feature network "
                  "trained here (not comparable with I3D FVDs). Floors: independent real held-out clips of the same "
                  "size against the same references.", "",
                  "| method | lossless | forwards | per-frame FID (floor) | domain FVD (floor) | frame change | "
                  "feature similarity |", "|---|---|---|---|---|---|---|"]
        second = q.get("ar_second_seed")
        others = [{**q[key], "label": f"{q[key]['label']} (other seeds)"} for key in SECOND_SEED_ROWS if key in q]
        for r in [*q["rows"], *others]:
            f, v, t = r["per_frame_fid"], r["domain_fvd"], r["temporal"]
            lines.append(f"| `{r['label']}` | {'yes' if r['lossless'] else 'no (lossy)'} | {r['target_forwards']:.1f} | "
                         f"{f['fid']:.2f} ({_fmt(f['real_vs_real_floor'])}) | {v['fvd']:.2f} ({_fmt(v['real_vs_real_floor'])}) "
                         f"| {t['frame_change']:.4f} | {t['feature_similarity']:.4f} |")
        rt = q["real"]["temporal"]
        lines.append(f"| real held-out clips | - | - | - | - | {rt['frame_change']:.4f} | {rt['feature_similarity']:.4f} |")
        if second:
            ar = next(r for r in q["rows"] if r["method"] == "ar")
            lines += ["", f"Seed-to-seed noise of plain AR at this N (clip i seeded {second['seed_base']} + i instead of "
                      f"{SEED_BASE} + i): |Δ per-frame FID| = {abs(ar['per_frame_fid']['fid'] - second['per_frame_fid']['fid']):.2f}, "
                      f"|Δ domain FVD| = {abs(ar['domain_fvd']['fvd'] - second['domain_fvd']['fvd']):.2f}. A lossless method's "
                      "differences from `ar` should be of this size: it samples the same distribution with other random numbers."]
            if "lossless_second_seed" in q:
                b = q["lossless_second_seed"]
                a = next(r for r in q["rows"] if r["label"] == b["label"])
                lines.append(f"`{b['label']}` with the same two seed sets: per-frame FID {a['per_frame_fid']['fid']:.2f} "
                             f"and {b['per_frame_fid']['fid']:.2f}, domain FVD {a['domain_fvd']['fvd']:.2f} and "
                             f"{b['domain_fvd']['fvd']:.2f} (AR: {ar['per_frame_fid']['fid']:.2f} and "
                             f"{second['per_frame_fid']['fid']:.2f}, {ar['domain_fvd']['fvd']:.2f} and "
                             f"{second['domain_fvd']['fvd']:.2f}).")
        g = q["gumbel_identical_to_ar"]
        lines += ["", f"MC-SJD with Gumbel coupling ({g['options']}) and the same per-clip generators reproduced AR's "
                  f"clips token for token: **{g['identical']}** ({g['clips_identical']} of {q['num_clips']} clips "
                  f"identical), in {g['target_forwards']:.1f} forwards per clip — its quality figures are AR's.", ""]
    lossless = records / "lossless.json"
    if lossless.exists():
        lo = json.loads(lossless.read_text())
        lines += ["## Lossless on a video layout (exact enumeration)", "",
                  f"Table model over a {' x '.join(map(str, lo['grid']))} grid (frames x rows x columns), vocabulary "
                  f"{lo['vocab']}: the exact distribution over all {lo['vocab'] ** int(np.prod(lo['grid'])):,} clips by "
                  f"the chain rule; {lo['n']:,} samples per case; pass = chi-square p >= 1e-4 and TV below the "
                  "sampling-noise bound (tests/lossless_harness.py).", "",
                  "| case | TV | TV bound | chi-square p | verdict |", "|---|---|---|---|---|"]
        for r in [*lo["cases"], lo["planted"]]:
            lines.append(f"| {r['case']} | {r['tv']:.4f} | {r['tv_bound']:.4f} | {r['p_value']:.2e} | "
                         f"{'pass' if r['passed'] else 'FAIL'} |")
        lines.append("")
    tokenizer = records / "tokenizer.json"
    if tokenizer.exists():
        tk = json.loads(tokenizer.read_text())
        lines += ["## Tokenizer at 512 tokens per clip", "",
                  f"{tk['clips']} held-out clips (`eval/video_tokenizer.py`).", "",
                  "| candidate | grid | PSNR camera / emoji / digits / all (dB) | per-frame FID | domain FVD |",
                  "|---|---|---|---|---|"]
        for name, c in tk["candidates"].items():
            ps = c["psnr"]
            fvd = c.get("domain_fvd", {}).get("fvd")
            lines.append(f"| {name} ({c['tokenizer']}, {c['resolution']} px) | {c['grid']} | "
                         f"{ps.get('camera', 0):.2f} / {ps.get('emoji', 0):.2f} / {ps.get('digits', 0):.2f} / "
                         f"{ps['all']:.2f} | {c['per_frame_fid']['fid']:.2f} | {_fmt(fvd)} |")
        lines.append("")
    return lines


def video_jobs(s: argparse.Namespace) -> list[Declaration]:
    return [*(Stage(f"bench-{group}", f"video/bench-{group}.json", lambda s, group=group: stage_bench(s, group))
              for group in GROUPS),
            Stage("lossless", "video/lossless.json", stage_lossless),
            Stage("quality", "video/quality.json", stage_quality,
                  complete=lambda path: "seed_sets" in json.loads(path.read_text()))]


SUITE = Suite("video", "video", video_jobs, (video_page,), samples=len(BENCH_CLASSES), options=(
    Option("--num", 96, type=int, help="video: clips per method (quality; 4 per class)"),
    Option("--batch", 16, type=int, help="video: clips per pipeline call (quality)"),
    Option("--reference-frames", 4000, type=int, help="video: reference frames of the per-frame FID"),
    Option("--reference-clips", 1000, type=int, help="video: reference clips of the domain FVD"),
    Option("--threads", 1, type=int, help="video: torch threads of the stages")))
