"""The method suites of a figure set (one model): SJD / MC-SJD, ZipAR, the relaxed rules, latency on this machine,
the 2025-26 methods and cost-aware windows. Every job is one ``arvis bench`` or ``arvis fid`` command (or a script
of eval/) writing a JSON record under ``--out``; FID records are shared between the suites (``<out>/fid/``).

FID sizes: AR and every lossy method at ``--fid-num`` (1,000). The lossless methods (SJD, MC-SJD) are
sampled at a quarter of that, beside plain AR at the same N with two seeds: on a CPU a batched
verification forward over a 17-65-position window is compute-bound, so a lossless method costs about its
batch-1 latency per image (2-4 s here, against 0.3 s for batched AR) and 1,000 images of each would not
fit a session. Their losslessness is proved by the exact and statistical tests (tests/methods/test_lossless.py);
the FID is the end-to-end sanity check.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Iterator
from pathlib import Path

from figure_runner import Bench, Declaration, Fid, Job, Option, Page, Script, Suite, load_record
from figure_tables import (
    TOKEN_STATS,
    bench_table,
    cost_table,
    fid_label,
    fid_records,
    latency_table,
    setting_line,
    survival_table,
    token_stats_section,
)

# Published figures placed beside ours (the models and hardware differ; they are anchors, not targets met).
ANCHORS = {
    "sjd": [
        "SJD (Teng et al., ICLR 2025): 2.22x step compression on Lumina-mGPT.",
        "MC-SJD (So et al., 2025): 4.21x step compression at L = 64 on Lumina-mGPT, lossless.",
    ],
    "zipar": [
        "ZipAR (He et al., 2024): up to 91% fewer forwards on Emu3-Gen; on LlamaGen-XL 256 tokens, "
        "w = 4 → 88 forwards (the schedule formula 2W + (H − 2)w for a 16x16 grid).",
    ],
    "relaxed": [
        "LANTERN (Jang et al., ICLR 2025): 1.69x latency over AR when sampling on LlamaGen-XL "
        "(EAGLE-2 drafter; EAGLE-2 alone 0.93x).",
        "LANTERN++ (Park et al., 2025): static-tree drafting with relaxed acceptance (not implemented here: "
        "arvis drafts a chain, so the (k, λ) rows use LANTERN++'s acceptance rule with a chain drafter).",
    ],
}
#: The lossless methods' FIDs are measured at a quarter of --fid-num (module docstring).
LOSSLESS_FID_DIVISOR = 4


def token_stats(s: argparse.Namespace, samples: int = 64) -> Script:
    """Next-token statistics of the suite's model (entropy, top-1, the acceptance of simple drafts): shared by
    every suite of a figure set, printed beside the tables so that figures on an easy model are read as such."""
    return Script("tokens", TOKEN_STATS, ("eval/token_stats.py", "--model", s.model, "--samples", str(samples),
                                          "--json", str(s.out / TOKEN_STATS)))


# ----------------------------------------------------------------------------- sjd
WINDOWS = (8, 16, 32, 64)
INITS = ("repeat_horizontal", "repeat_vertical", "neighbour_distribution")
SJD_B1 = ("ar", *(f"sjd:window={w}" for w in WINDOWS), *(f"mc-sjd:window={w}" for w in WINDOWS),
          *(f"mc-sjd:window={w},coupling=gumbel" for w in (16, 64)), *(f"sjd:window=32,init={i}" for i in INITS),
          *(f"mc-sjd:window=64,init={i}" for i in INITS))
SJD_B8 = ("ar", "sjd:window=32", "sjd:window=32,batch_mode=lockstep", "mc-sjd:window=64",
          "mc-sjd:window=64,batch_mode=lockstep")
SJD_BF16 = ("ar", "sjd:window=32", "mc-sjd:window=64")


def sjd_jobs(s: argparse.Namespace) -> list[Declaration]:
    quarter = LOSSLESS_FID_DIVISOR
    return [
        Bench("sjd/batch1-fp32", SJD_B1, plots=True),
        Bench("sjd/batch8-fp32", SJD_B8, samples=8, batch=8),
        Bench("sjd/batch1-bf16", SJD_BF16, dtype="bf16"),
        Bench("sjd/batch8-bf16", SJD_BF16, samples=8, batch=8, dtype="bf16"),
        Fid("ar", floor=True), Fid("ar", seed=1),
        # Lossless methods at a smaller N, against AR at the same N and two seeds (module docstring).
        Fid("ar", divide=quarter, floor=True), Fid("ar", divide=quarter, seed=1),
        Fid("mc-sjd:window=16", divide=quarter), Fid("sjd:window=16", divide=quarter),
        token_stats(s),
    ]


# ----------------------------------------------------------------------------- zipar
# Staircase (window L, R band rows) evaluates L + 1 + R*L positions; its contiguous twin evaluates the same.
STAIRS = ("mc-sjd:window=16,window_shape=staircase,staircase_rows=2", "mc-sjd:window=48",
          "mc-sjd:window=32,window_shape=staircase,staircase_rows=1", "mc-sjd:window=64",
          "sjd:window=16,window_shape=staircase,staircase_rows=2", "sjd:window=48")


def zipar_jobs(s: argparse.Namespace) -> list[Declaration]:
    return [Bench("zipar/batch1-fp32", ("ar", "zipar:row_lag=2", "zipar:row_lag=4", "zipar:row_lag=8", *STAIRS),
                  plots=True),
            *(Fid(f"zipar:row_lag={w}") for w in (4, 2, 8)),
            token_stats(s)]


# ----------------------------------------------------------------------------- relaxed
RELAXED = ("speculative:window=4", "speculative:window=8",
           "speculative:window=4,acceptance=lantern,k=10,delta=0.1",
           *(f"speculative:window=4,acceptance=bounded,k=10,delta={d}" for d in (0.05, 0.1, 0.2)),
           "speculative:window=4,acceptance=lantern++,k=10,lam=5",
           "speculative:window=4,acceptance=lantern++,k=5,lam=20",
           "mc-sjd:window=16,acceptance=bounded,k=10,delta=0.1")


def relaxed_jobs(s: argparse.Namespace) -> list[Declaration]:
    fid_first = sorted((r for r in RELAXED if r != "speculative:window=8"),
                       key=lambda r: ("delta=0.1" not in r, "lantern" not in r))
    return [Bench("relaxed/batch1-fp32", ("ar", *RELAXED)), *(Fid(spec) for spec in fid_first), token_stats(s)]


# ----------------------------------------------------------------------------- latency
# Latency on this machine (issue: lossless methods clearly faster than AR): the methods of the headline claims.
LATENCY_B1 = ("ar", "sjd:window=16", "sjd:window=32", "mc-sjd:window=16", "mc-sjd:window=32",
              "mc-sjd:window=16,coupling=gumbel", "mc-sjd:window=32,coupling=gumbel",
              "mc-sjd:window=32,init=neighbour_distribution", "mc-sjd:window=64,init=neighbour_distribution")
# The window that pays best on a CPU: smaller windows compress less but their forwards are much cheaper.
LATENCY_WINDOWS = ("ar", "mc-sjd:window=4", "mc-sjd:window=8", "mc-sjd:window=12",
                   "mc-sjd:window=8,coupling=gumbel", "mc-sjd:window=12,coupling=gumbel", "sjd:window=8")
LATENCY_B8 = ("ar", "mc-sjd:window=16", "mc-sjd:window=32", "mc-sjd:window=16,batch_mode=lockstep")


def reference_records() -> Iterator[tuple[str, str, int, int | None]]:
    """(record name, reference, threads, batch) of every comparison with a reference implementation on the same
    weights: LlamaGen's generate() against arvis AR (one thread and every core, batch 1 and 8), the SJD authors'
    scheduler against arvis SJD; threads 0: every core."""
    for threads in (1, 0):
        for batch in (1, 8):
            yield f"llamagen-reference-b{batch}-{'all' if threads == 0 else threads}threads", "llamagen", threads, batch
    for threads in (1, 0):
        yield f"sjd-reference-{'all' if threads == 0 else threads}threads", "sjd", threads, None


def reference_jobs(s: argparse.Namespace) -> list[Declaration]:
    """The comparisons whose reference checkout was given (``--llamagen-repo``, ``--sjd-repo``)."""
    found: list[Declaration] = []
    for name, reference, threads, batch in reference_records():
        repo = s.llamagen_repo if reference == "llamagen" else s.sjd_repo
        if not repo:
            continue
        args = (f"eval/compare_{reference}_reference.py", "--reference-repo", repo, "--model", s.model,
                *(("--batch", str(batch)) if batch else ()), "--repeats", "5",
                "--json", str(s.out / "latency" / f"{name}.json"), *(("--threads", str(threads)) if threads else ()))
        found.append(Script(f"latency/{name}", f"latency/{name}.json", args))
    return found


def latency_jobs(s: argparse.Namespace) -> list[Declaration]:
    return [
        Bench("latency/batch1-fp32-allcores", LATENCY_B1),
        Bench("latency/batch1-fp32-1thread", LATENCY_B1, threads=1),
        Bench("latency/batch1-fp32-allcores-small-windows", LATENCY_WINDOWS),
        Bench("latency/batch8-fp32-allcores", LATENCY_B8, samples=8, batch=8),
        Bench("latency/batch8-fp32-1thread", LATENCY_B8, samples=8, batch=8, threads=1),
        *reference_jobs(s),
    ]


# ----------------------------------------------------------------------------- methods2026
# The 2025-26 methods (issue 38): SJD-PAC (lossless), GSD and PJD (lossy), beside SJD, MC-SJD, ZipAR and LANTERN++.
# sjd-pac:window=16 evaluates 17 + 10 positions per forward (its default tree: K = 3, D = 3); mc-sjd:window=26
# evaluates as many.
NEW_B1 = ("ar", "sjd:window=16", "mc-sjd:window=16", "mc-sjd:window=26", "sjd-pac:window=16",
          "sjd-pac:window=16,tree_width=4", "sjd-pac:window=16,coupling=gumbel",
          "sjd-pac:window=16,tree_width=4,init=repeat_vertical", "zipar:row_lag=2", "pjd:row_lag=2", "pjd:row_lag=1",
          "gsd:window=16", "mc-sjd:window=16,acceptance=gsd", "mc-sjd:window=16,acceptance=lantern++,k=10,lam=5")
NEW_B8 = ("ar", "mc-sjd:window=16", "sjd-pac:window=16", "sjd-pac:window=16,tree_width=4,init=repeat_vertical",
          "zipar:row_lag=2", "pjd:row_lag=2", "pjd:row_lag=1", "gsd:window=16")
# Ablations (adaptive continuation alone: tree_width=1; proactive drafting alone: coupling=none), windows <= 16,
# and the relaxed rules swept over their parameters with one drafter (MC-SJD's, window 16), to compare tokens per
# forward at equal realised TV per token.
NEW_SWEEP = ("ar", "mc-sjd:window=8", "mc-sjd:window=12", "mc-sjd:window=16,init=repeat_vertical",
             "sjd-pac:window=8", "sjd-pac:window=12", "sjd-pac:window=16,tree_width=1",
             "sjd-pac:window=16,coupling=none", "sjd-pac:window=16,tree_width=2,tree_depth=4",
             "sjd-pac:window=16,tree_width=8,tree_depth=2", "sjd-pac:window=12,tree_width=4,init=repeat_vertical",
             "pjd:row_lag=2,coupling=maximal", "pjd:row_lag=4",
             *(f"mc-sjd:window=16,acceptance=gsd,ranks={r}" for r in (3, 7, 20)),
             "mc-sjd:window=16,acceptance=gsd,k=30,ranks=30",
             *(f"mc-sjd:window=16,acceptance=lantern++,k=10,lam={lam}" for lam in (1.5, 2, 3, 5)),
             *(f"mc-sjd:window=16,acceptance=bounded,k=10,delta={d}" for d in (0.05, 0.1, 0.2)))
NEW_LOSSY_FID = ("pjd:row_lag=2", "pjd:row_lag=1", "gsd:window=16", "mc-sjd:window=16,acceptance=gsd",
                 "mc-sjd:window=16,acceptance=lantern++,k=10,lam=5")
EMU3_PROMPTS = ("red apple", "smiling face with sunglasses")
EMU3_METHODS = ("ar", "mc-sjd:window=16", "sjd-pac:window=16", "sjd-pac:window=16,tree_width=4",
                "zipar:row_lag=2", "pjd:row_lag=2", "gsd:window=16")


def methods2026_jobs(s: argparse.Namespace) -> list[Declaration]:
    """Issue 38's figures. The sweep runs on one thread (its figures are forward counts and realised TV); the
    batch-1 and batch-8 benches use every core (their latency column needs an otherwise idle machine: rerun them
    there with ``python eval/figures.py --suite methods2026 --force methods2026/batch``)."""
    found: list[Declaration] = [
        Bench("methods2026/sweep-fp32", NEW_SWEEP, samples=8, batch=8, threads=1),
        Bench("methods2026/batch1-fp32", NEW_B1, plots=True),
        *(Fid(spec, threads=1) for spec in NEW_LOSSY_FID),
        Fid("ar", threads=1), Fid("ar", seed=1, threads=1), Fid("sjd-pac:window=16", threads=1),
        Bench("methods2026/batch8-fp32", NEW_B8, samples=8, batch=8),
        token_stats(s),
    ]
    if s.model in ("c2i", "llamagen-c2i-photos"):  # Emu3 beside the photo model (its own prompts, batch 1)
        found.append(Bench("methods2026/emu3-batch1-fp32", EMU3_METHODS, model="emu3-emoji", samples=2,
                           prompts=EMU3_PROMPTS, threads=1))
    return found


# ----------------------------------------------------------------------------- windows
# Cost-aware windows (issue 40): window="auto" beside fixed windows, at batch 1, 4 and 8, fp32 and bf16.
WINDOW_METHODS = ("ar", "mc-sjd:window=4", "mc-sjd:window=8", "mc-sjd:window=16", "mc-sjd:window=32",
                  "mc-sjd:window=auto", "sjd:window=32", "sjd:window=auto", "speculative:window=2",
                  "speculative:window=4", "speculative:window=auto")


def window_jobs(s: argparse.Namespace) -> list[Declaration]:
    """Issue 40's figures: every bench on all cores (rerun on an otherwise idle machine), and the windows the
    policy chose against token position (eval/window_trace.py)."""
    trace = s.out / "windows" / "trace.json"
    return [
        *(Bench(f"windows/batch{b}-fp32", WINDOW_METHODS, samples=max(s.samples, b), batch=b) for b in (1, 4, 8)),
        Bench("windows/batch1-bf16", WINDOW_METHODS, dtype="bf16"),
        *(Bench(f"windows/batch{b}-bf16", WINDOW_METHODS, samples=max(s.samples, b), batch=b, dtype="bf16")
          for b in (4, 8)),
        Script("windows/trace", "windows/trace.json",
               ("eval/window_trace.py", "--model", s.model, "--batch-sizes", "1", "4", "8", "--json", str(trace),
                "--plot", str(trace.with_suffix(".png")))),
    ]


# ----------------------------------------------------------------------------- the method pages
def _reference_words(page: Page) -> str:
    """How the FIDs of this figure set's model are measured (its data set: photos or emoji)."""
    from arvis.data.sources import model_data
    from arvis.hub import TINY_RANDOM, resolve_model

    model = page.settings.model
    data = "photos" if model == TINY_RANDOM else model_data(resolve_model(model))
    if data == "emoji":
        return "the shipped emoji domain network (`domain-emoji`), held-out emoji (never trained on) as reference"
    return "the shipped domain network, held-out real crops as reference"


def _bench_headings(jobs: list[Job], lines: list[str]) -> Iterator[tuple[Job, list[dict]]]:
    """For every bench job: its heading appended to ``lines``, then "(not run yet)" or its setting line; yields the
    jobs that ran with their records (for the tables a page adds after)."""
    for job in jobs:
        if job.kind != "bench":
            continue
        records = load_record(job.output)
        lines += [f"## {job.name}", ""]
        if not isinstance(records, list):
            lines += ["(not run yet)", ""]
            continue
        lines += [setting_line(records), ""]
        yield job, records


def method_intro(page: Page) -> list[str]:
    return [f"# Figures: {page.suite}", "",
            f"Generated by `python eval/figures.py --suite {page.suite}` from the JSON records in this folder "
            f"(re-run it to reproduce; `--list` prints every command). FID: {_reference_words(page)} (see "
            "docs/evaluation.md).", ""]


def bench_sections(extra_cols: bool = False, survival: bool = False):
    """Every bench job's table (``extra_cols``: the relaxed rules' TV; ``survival``: acceptance by window position),
    its forward-cost curve and its plots."""

    def section(page: Page) -> list[str]:
        fids = fid_records(page.out)
        lines: list[str] = []
        for job, records in _bench_headings(page.jobs, lines):
            lines += bench_table(records, fids, extra_cols=extra_cols)
            if survival:
                lines += ["", "Acceptance by window position — share of target forwards that commit exactly one "
                              "token (`= 1`) and at least j tokens (all samples):", ""]
                lines += survival_table(records)
            lines += ["", "Forward cost on this machine (same model, batch and guidance):", ""]
            lines += cost_table(records[0].get("forward_cost", [])) + [""]
            plots = page.out / page.suite / f"{Path(job.output).stem}-plots"
            if plots.is_dir():
                lines += ["Plots: " + ", ".join(f"[{p.name}]({page.suite}/{plots.name}/{p.name})"
                                                for p in sorted(plots.glob("*.png"))), ""]
        return lines

    return section


def fid_section(page: Page) -> list[str]:
    """AR's FIDs of the figure set (the baseline in every suite) and this suite's methods', with AR's seed noise."""
    fids = fid_records(page.out)
    rows = [rec for (label, _, _), rec in sorted(fids.items()) if label == "ar"]
    rows += [rec for j in page.jobs if j.kind == "fid" and isinstance(rec := load_record(j.output), dict)
             and fid_label(rec) != "ar"]
    if not rows:
        return []
    lines = ["## FID", "", "| method | seed | N | FID | real-vs-real floor (same N) |", "|---|---|---|---|---|"]
    for rec in sorted(rows, key=lambda r: (-r["num_generated"], fid_label(r) != "ar", fid_label(r), r["seed"])):
        floor = rec.get("real_vs_real_floor")
        lines.append(f"| `{fid_label(rec)}` | {rec['seed']} | {rec['num_generated']} | {rec['fid']:.2f} | "
                     f"{'–' if floor is None else f'{floor:.2f}'} |")
    for n in sorted({num for (label, _, num) in fids if label == "ar"}, reverse=True):
        ar = [rec["fid"] for (label, _, num), rec in fids.items() if label == "ar" and num == n]
        if len(ar) >= 2:
            lines += ["", f"Seed-to-seed noise of AR at N = {n} (same model and method; seeds differ): "
                          f"|ΔFID| = {max(ar) - min(ar):.2f}."]
    return lines + [""]


def token_section(page: Page) -> list[str]:
    return token_stats_section(page.suite, page.out)


def anchors_section(page: Page) -> list[str]:
    return ["## Published anchors", "", *(f"- {a}" for a in ANCHORS.get(page.suite, ())), ""]


METHOD_PAGE = (method_intro, bench_sections(), fid_section, token_section, anchors_section)


# ----------------------------------------------------------------------------- the latency and windows pages
def _latency_sections(jobs: list[Job], lines: list[str]) -> Iterator[tuple[Job, list[dict]]]:
    """For every bench job: its heading, then (when it has run) its setting, AR's spread of rounds and its latency
    table appended to ``lines``; yields the jobs that ran with their records (for what a page adds after)."""
    for job, records in _bench_headings(jobs, lines):
        ar = next((r for r in records if r["spec"] == "ar"), None)
        if ar and ar.get("latency_repeats_s"):
            rounds = ar["latency_repeats_s"]
            lines += [f"AR's {len(rounds)} rounds: {min(rounds):.3f}–{max(rounds):.3f} s per sample (the noise of "
                      "this machine at the time; speedups are medians of interleaved rounds).", ""]
        lines += latency_table(records)
        yield job, records


def _reference_rows(out: Path) -> list[str]:
    """The comparisons with the reference implementations measured so far (whatever checkouts this run has)."""
    rows = []
    for name, *_ in reference_records():
        rec = load_record(out / "latency" / f"{name}.json")
        if not isinstance(rec, dict):
            continue
        if "arvis_ar_s" in rec:
            rows.append(f"| LlamaGen `generate()` vs arvis AR | {rec['batch']} | {rec['threads']} | "
                        f"{rec['reference_generate_s']:.3f} | {rec['arvis_ar_s']:.3f} | "
                        f"**{rec['arvis_speedup_over_reference']:.2f}x** | logits max abs diff "
                        f"{rec['max_abs_logit_diff']:.1e} |")
        else:
            rows.append(f"| SJD authors' scheduler vs arvis SJD (window {rec['window']}) | {rec['batch']} | "
                        f"{rec['threads']} | {rec['reference_s']:.3f} | {rec['arvis_s']:.3f} | "
                        f"**{rec['arvis_speedup_over_reference']:.2f}x** | step compression "
                        f"{rec['reference_step_compression']:.2f}x (reference) vs {rec['arvis_step_compression']:.2f}x |")
    return rows


def latency_page(page: Page) -> list[str]:
    """docs/figures/latency.md: every bench job's table with its forward-cost curve, then the references."""
    lines = ["# Figures: latency on this machine", "",
             "Generated by `python eval/figures.py --suite latency` from the JSON records in this folder (run with no "
             "training or test job on the CPU; rounds are interleaved so that any other load falls on every method "
             "alike, and each table prints the spread of AR's rounds; `--list` prints every command). "
             "Per method: step compression, positions per forward `T`, median latency per sample over 5 "
             "interleaved rounds, **speedup over arvis AR**, the *ideal* speedup the forward-cost curve allows "
             "(AR forwards / method forwards × cost(1) / cost(T)), ms inside one target forward and outside "
             "forwards per target forward, the share of the latency spent outside forwards, and host "
             "synchronisations per loop iteration (all counted, including the reads when a decode ends).", ""]
    for _job, records in _latency_sections(page.jobs, lines):
        lines += ["", "Forward cost on this machine (ms inside one target forward, same model, batch and guidance):", ""]
        lines += cost_table(records[0].get("forward_cost", [])) + [""]
    refs = _reference_rows(page.out)
    lines += ["## Against the reference implementations (same weights, same settings, interleaved)", ""]
    if refs:
        lines += ["| comparison | batch | threads | reference s | arvis s | arvis faster by | note |",
                  "|---|---|---|---|---|---|---|", *refs, ""]
    else:
        lines += ["(not run: pass `--llamagen-repo` / `--sjd-repo` checkouts)", ""]
    return lines


def windows_page(page: Page) -> list[str]:
    """docs/figures/windows.md: cost-aware windows against fixed ones, per batch and dtype, with the share of the
    best fixed window's speed and the windows chosen along the image."""
    lines = ["# Figures: cost-aware windows (`window=auto`)", "",
             "Generated by `python eval/figures.py --suite windows` from the JSON records in this folder (`--list` "
             "prints every command). `window=auto` chooses every forward's window from this machine's forward-cost "
             "curve and the acceptance measured so far (docs/methods.md); the rows beside it are fixed windows. "
             "Latencies are medians of interleaved rounds and only mean something on an otherwise idle machine: "
             "the setting line says how many threads and the spread of AR's rounds says how noisy the machine was.",
             ""]
    for _job, records in _latency_sections(page.jobs, lines):
        for family in ("mc-sjd", "sjd", "speculative"):
            auto = next((r for r in records if r["spec"] == f"{family}:window=auto"), None)
            fixed = [r for r in records if r["method"] == family and r["spec"] != f"{family}:window=auto"]
            if auto and fixed:
                best = max(fixed, key=lambda r: r["speedup"])
                extra = auto.get("extra", {})
                chosen = ", ".join(f"{w}: {n:.0f}" for w, n in extra.get("windows_chosen", {}).items())
                overheads = ""
                if extra.get("loop_overhead_ms") is not None:
                    overheads = f"; time outside the forwards {extra['loop_overhead_ms']:.2f} ms per loop iteration"
                    if extra.get("ar_step_overhead_ms") is not None:
                        overheads += f", {extra['ar_step_overhead_ms']:.2f} ms per step of a run of plain AR steps"
                lines += ["", f"* `{family}:window=auto`: {auto['speedup']:.2f}x AR, {100 * auto['speedup'] / best['speedup']:.0f}% "
                          f"of the best fixed window's speed (`{best['spec']}`, {best['speedup']:.2f}x); mean window "
                          f"{extra.get('mean_window', float('nan')):.1f}"
                          + (f"; forwards per window {chosen}" if chosen else "")
                          + (f"; {extra['ar_runs']:.1f} runs of plain AR steps per decode" if "ar_runs" in extra else "")
                          + overheads + "."]
        lines += ["", "Forward cost on this machine (ms inside one target forward, same model, batch and guidance):", ""]
        lines += cost_table(records[0].get("forward_cost", [])) + [""]
    trace_job = next((j for j in page.jobs if j.kind == "script"), None)
    traces = load_record(trace_job.output) if trace_job else None
    lines += ["## Windows chosen along the image", ""]
    if isinstance(traces, list):
        lines += ["| method | batch | forwards | mean window | windows chosen (window: forwards) | loop overhead ms |",
                  "|---|---|---|---|---|---|"]
        for t in traces:
            chosen = ", ".join(f"{w}: {n}" for w, n in t["windows_chosen"].items())
            lines.append(f"| {t['spec']} | {t['batch_size']} | {t['target_forwards']:.0f} | {t['mean_window']:.1f} | "
                         f"{chosen} | {t['loop_overhead_ms']:.2f} |")
        lines += ["", f"![window against token position]({os.path.relpath(trace_job.output.with_suffix('.png'), page.out)})",
                  ""]
    else:
        lines += ["(not run yet)", ""]
    return lines


REFERENCE_OPTIONS = (Option("--llamagen-repo", help="latency suite: a FoundationVision/LlamaGen checkout"),
                     Option("--sjd-repo", help="latency suite: a tyshiwo1/Accelerating-T2I-AR-with-SJD checkout"))
SUITES = (
    Suite("sjd", "c2i", sjd_jobs, (method_intro, bench_sections(survival=True), fid_section, token_section,
                                    anchors_section)),
    Suite("zipar", "c2i", zipar_jobs, METHOD_PAGE),
    Suite("relaxed", "c2i", relaxed_jobs, (method_intro, bench_sections(extra_cols=True), fid_section, token_section,
                                            anchors_section)),
    Suite("latency", "c2i", latency_jobs, (latency_page,), options=REFERENCE_OPTIONS),
    Suite("methods2026", "c2i", methods2026_jobs, (method_intro, bench_sections(extra_cols=True, survival=True),
                                                   fid_section, token_section, anchors_section)),
    Suite("windows", "c2i", window_jobs, (windows_page,)),
)
