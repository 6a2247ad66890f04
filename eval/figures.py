#!/usr/bin/env python
"""Every published figure of arvis's methods, reproducible: benchmark and FID jobs, then the tables.

    python eval/figures.py --suite all                   # run missing jobs, then write docs/figures/*.md
    python eval/figures.py --suite sjd --shard 0/2 &     # two processes on a two-core machine
    python eval/figures.py --suite sjd --shard 1/2
    python eval/figures.py --suite all --report-only     # rebuild the tables from the JSON records
    python eval/figures.py --suite all --list            # print the jobs and their commands
    python eval/figures.py --suite sjd --model arvis/weights/llamagen-c2i-emoji --out docs/figures/emoji

Suites: ``sjd`` (SJD / MC-SJD: windows, initialisations, couplings, batch 1 and 8, fp32 and bf16, ragged vs
lockstep), ``zipar`` (ZipAR windows, staircase vs contiguous MC-SJD windows, decode-order heat maps),
``relaxed`` (draft-model speculative decoding, LANTERN, LANTERN++, the bounded rule, MC-SJD + bounded),
``latency`` (wall-clock latency on this machine: batch 1 fp32 on every core and on one thread with each
forward-cost curve, the time split and host syncs per iteration, batch 8 ragged vs batched AR, and the
reference implementations on the same weights — with ``--llamagen-repo`` / ``--sjd-repo`` checkouts; run it
on an otherwise idle machine).
Every job is one ``arvis bench`` or ``arvis fid`` command (printed with ``--list``) writing a JSON record
under ``--out``; a job whose record exists is skipped, so an interrupted run resumes, unless the record was
measured on other weights than the model's now (its ``model_sha256``): such a record is stale and the job
runs again, so a retrained model never keeps figures of its predecessor. FID records are
shared between suites (``<out>/fid/``). Nothing here is typed in by hand: the Markdown tables are built
from the records.

FID sizes: AR and every lossy method at ``--fid-num`` (1,000). The lossless methods (SJD, MC-SJD) are
sampled at a quarter of that, beside plain AR at the same N with two seeds: on a CPU a batched
verification forward over a 17-65-position window is compute-bound, so a lossless method costs about its
batch-1 latency per image (2-4 s here, against 0.3 s for batched AR) and 1,000 images of each would not
fit a session. Their losslessness is proved by the exact and statistical tests (tests/methods/test_lossless.py);
the FID is the end-to-end sanity check.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import shlex
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

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


@dataclass
class Job:
    """One command and the record it writes."""

    name: str
    kind: str  # "bench" | "fid" | "script" (args[0] is a script path)
    args: list[str]
    output: Path

    def command(self) -> list[str]:
        if self.kind == "script":
            return [sys.executable, *self.args]
        return [sys.executable, "-m", "arvis", self.kind, *self.args]

    def model(self) -> str | None:
        return self.args[self.args.index("--model") + 1] if "--model" in self.args else None

    def status(self) -> str:
        """``todo`` (no record), ``stale`` (a record of other weights than the model's now) or ``done``."""
        if not self.output.exists():
            return "todo"
        recorded = recorded_model_sha256(self.output)
        current = current_model_sha256(model) if (model := self.model()) else None
        return "stale" if recorded and current and recorded != current else "done"

    def display(self) -> str:
        """The command as a user types it (also for subclasses that build their own :meth:`command`)."""
        args = self.command()[1:]
        return shlex.join(["arvis", *args[2:]] if args[:2] == ["-m", "arvis"] else ["python", *args])


def recorded_model_sha256(path: Path) -> str | None:
    """The ``model_sha256`` a record was measured on (a bench record's first row), ``None`` when it names none."""
    record = _load(path)
    row = record[0] if isinstance(record, list) and record else record
    return row.get("model_sha256") if isinstance(row, dict) else None


@functools.cache
def current_model_sha256(model: str) -> str | None:
    """The content hash of the weights a job's ``--model`` names now (``None``: an in-memory test model)."""
    from arvis.errors import CheckpointError
    from arvis.hub import model_ref

    try:
        return model_ref(model).sha256
    except (ValueError, CheckpointError):  # no such model (yet): its job, when run, says so
        return None


def list_jobs(jobs: list[Job]) -> None:
    """Print every job, done, stale or to do, with its command."""
    for job in jobs:
        print(f"[{job.status()}] {job.name}: {job.display()}")


def run_missing_jobs(jobs: list[Job], shard: tuple[int, int] = (0, 1), force: str | None = None) -> int:
    """Run, in order, every job whose record is missing or stale (a run resumes) among shard ``k`` of ``n`` (jobs
    ``i`` with ``i % n == k``), and the jobs whose name contains ``force`` even when done (a latency rerun on an
    idle machine); stop at the first failure, returning its exit code (0 when all ran)."""
    k, n = shard
    forced = {j.name for j in jobs if force and force in j.name}
    missing = [j for i, j in enumerate(jobs) if i % n == k and (j.status() != "done" or j.name in forced)]
    for i, job in enumerate(missing, 1):
        if job.status() == "done" and job.name not in forced:  # written meanwhile by another run of the list
            print(f"[{i}/{len(missing)}] {job.name}: done meanwhile, skipped", flush=True)
            continue
        job.output.parent.mkdir(parents=True, exist_ok=True)
        print(f"[{i}/{len(missing)}] {job.name}: {job.display()}", flush=True)
        t0 = time.time()
        rc = subprocess.run(job.command()).returncode
        print(f"[{i}/{len(missing)}] {job.name}: exit {rc} after {time.time() - t0:.0f} s", flush=True)
        if rc != 0:
            return rc
    return 0


def bench_job(out: Path, suite: str, name: str, methods: list[str], *, model: str, samples: int,
              batch_size: int = 1, dtype: str = "fp32", repeats: int = 5, plots: bool = False,
              threads: int | None = None, prompts: tuple[str, ...] = ()) -> Job:
    base = out / suite / name
    args = ["--model", model, "--method", ";".join(methods), "--num-images", str(samples),
            "--batch-size", str(batch_size), "--dtype", dtype, "--repeats", str(repeats), "--seed", "0",
            "--json", str(base.with_suffix(".json")), "--markdown", str(base.with_suffix(".md")),
            "--no-progress"]
    for prompt in prompts:  # text-conditional models (Emu3)
        args += ["--prompt", prompt]
    if threads is not None:
        args += ["--threads", str(threads)]
    if plots:
        args += ["--plots", str(out / suite / f"{name}-plots")]
    return Job(f"{suite}/{name}", "bench", args, base.with_suffix(".json"))


def fid_slug(spec: str) -> str:
    """A method spec as it appears in FID record names (``mc-sjd:window=16`` → ``mc-sjd_window-16``)."""
    return spec.replace(":", "_").replace(",", "_").replace("=", "-").replace('"', "")


def fid_job(out: Path, spec: str, *, model: str, num: int, seed: int = 0, floor: bool = False,
            batch_size: int = 16, threads: int | None = None) -> Job:
    slug = fid_slug(spec)
    path = out / "fid" / f"{slug}-seed{seed}-n{num}.json"
    args = ["--model", model, "--num-images", str(num), "--seed", str(seed), "--batch-size",
            str(batch_size), "--json", str(path), "--no-progress", "--method", spec]
    if floor:
        args.append("--floor")
    if threads is not None:
        args += ["--threads", str(threads)]
    return Job(f"fid/{slug}-seed{seed}", "fid", args, path)


def token_stats_job(out: Path, model: str, samples: int = 64) -> Job:
    """Next-token statistics of the suite's model (entropy, top-1, the acceptance of simple drafts): shared by
    every suite of a figure set, printed beside the tables so that figures on an easy model are read as such."""
    path = out / TOKEN_STATS
    return Job("tokens", "script", ["eval/token_stats.py", "--model", model, "--samples", str(samples),
                                    "--json", str(path)], path)


TOKEN_STATS = "token_stats.json"
#: The figure sets whose next-token statistics every report shows side by side (folder relative to the repo).
FIGURE_SETS = {"docs/figures": "photos (`llamagen-c2i-photos`)", "docs/figures/emoji": "emoji (`llamagen-c2i-emoji`)",
               "docs/figures/emoji-names": "emoji, one class each (`llamagen-c2i-emoji-names`, the default)"}
WINDOWS = (8, 16, 32, 64)
INITS = ("repeat_horizontal", "repeat_vertical", "neighbour_distribution")


def sjd_jobs(out: Path, model: str, fid_num: int, samples: int) -> list[Job]:
    b1 = ["ar"]
    b1 += [f"sjd:window={w}" for w in WINDOWS]
    b1 += [f"mc-sjd:window={w}" for w in WINDOWS]
    b1 += [f"mc-sjd:window={w},coupling=gumbel" for w in (16, 64)]
    b1 += [f"sjd:window=32,init={i}" for i in INITS]
    b1 += [f"mc-sjd:window=64,init={i}" for i in INITS]
    b8 = ["ar", "sjd:window=32", "sjd:window=32,batch_mode=lockstep", "mc-sjd:window=64",
          "mc-sjd:window=64,batch_mode=lockstep"]
    bf16 = ["ar", "sjd:window=32", "mc-sjd:window=64"]
    return [
        bench_job(out, "sjd", "batch1-fp32", b1, model=model, samples=samples, plots=True),
        bench_job(out, "sjd", "batch8-fp32", b8, model=model, samples=8, batch_size=8),
        bench_job(out, "sjd", "batch1-bf16", bf16, model=model, samples=samples, dtype="bf16"),
        bench_job(out, "sjd", "batch8-bf16", bf16, model=model, samples=8, batch_size=8, dtype="bf16"),
        fid_job(out, "ar", model=model, num=fid_num, floor=True),
        fid_job(out, "ar", model=model, num=fid_num, seed=1),
        # Lossless methods at a smaller N, against AR at the same N and two seeds (module docstring).
        fid_job(out, "ar", model=model, num=lossless_fid_num(fid_num), floor=True),
        fid_job(out, "ar", model=model, num=lossless_fid_num(fid_num), seed=1),
        fid_job(out, "mc-sjd:window=16", model=model, num=lossless_fid_num(fid_num)),
        fid_job(out, "sjd:window=16", model=model, num=lossless_fid_num(fid_num)),
        token_stats_job(out, model),
    ]


def lossless_fid_num(fid_num: int) -> int:
    return max(fid_num // 4, 1)


def zipar_jobs(out: Path, model: str, fid_num: int, samples: int) -> list[Job]:
    # Staircase (window L, R band rows) evaluates L + 1 + R*L positions; its contiguous twin evaluates the same.
    stairs = ["mc-sjd:window=16,window_shape=staircase,staircase_rows=2", "mc-sjd:window=48",
              "mc-sjd:window=32,window_shape=staircase,staircase_rows=1", "mc-sjd:window=64",
              "sjd:window=16,window_shape=staircase,staircase_rows=2", "sjd:window=48"]
    methods = ["ar", "zipar:row_lag=2", "zipar:row_lag=4", "zipar:row_lag=8", *stairs]
    return [
        bench_job(out, "zipar", "batch1-fp32", methods, model=model, samples=samples, plots=True),
        *(fid_job(out, f"zipar:row_lag={w}", model=model, num=fid_num) for w in (4, 2, 8)),
        token_stats_job(out, model),
    ]


RELAXED = ["speculative:window=4", "speculative:window=8",
           "speculative:window=4,acceptance=lantern,k=10,delta=0.1",
           *(f"speculative:window=4,acceptance=bounded,k=10,delta={d}" for d in (0.05, 0.1, 0.2)),
           "speculative:window=4,acceptance=lantern++,k=10,lam=5",
           "speculative:window=4,acceptance=lantern++,k=5,lam=20",
           "mc-sjd:window=16,acceptance=bounded,k=10,delta=0.1"]


def relaxed_jobs(out: Path, model: str, fid_num: int, samples: int) -> list[Job]:
    return [
        bench_job(out, "relaxed", "batch1-fp32", ["ar", *RELAXED], model=model, samples=samples),
        *(fid_job(out, spec, model=model, num=fid_num) for spec in sorted(
            (r for r in RELAXED if r != "speculative:window=8"), key=lambda r: ("delta=0.1" not in r, "lantern" not in r))),
        token_stats_job(out, model),
    ]


# Latency on this machine (issue: lossless methods clearly faster than AR): the methods of the headline claims.
LATENCY_B1 = ["ar", "sjd:window=16", "sjd:window=32", "mc-sjd:window=16", "mc-sjd:window=32",
              "mc-sjd:window=16,coupling=gumbel", "mc-sjd:window=32,coupling=gumbel",
              "mc-sjd:window=32,init=neighbour_distribution", "mc-sjd:window=64,init=neighbour_distribution"]
# The window that pays best on a CPU: smaller windows compress less but their forwards are much cheaper.
LATENCY_WINDOWS = ["ar", "mc-sjd:window=4", "mc-sjd:window=8", "mc-sjd:window=12",
                   "mc-sjd:window=8,coupling=gumbel", "mc-sjd:window=12,coupling=gumbel", "sjd:window=8"]
LATENCY_B8 = ["ar", "mc-sjd:window=16", "mc-sjd:window=32", "mc-sjd:window=16,batch_mode=lockstep"]


def reference_jobs(out: Path, model: str, llamagen_repo: str | None, sjd_repo: str | None) -> list[Job]:
    """The reference implementations on the same weights: LlamaGen's generate() against arvis AR (one
    thread and every core, batch 1 and 8), the SJD authors' scheduler against arvis SJD."""
    jobs = []
    if llamagen_repo:
        for threads in (1, 0):
            for batch in (1, 8):
                name = f"llamagen-reference-b{batch}-{'all' if threads == 0 else threads}threads"
                path = out / "latency" / f"{name}.json"
                args = ["eval/compare_llamagen_reference.py", "--reference-repo", llamagen_repo, "--model", model,
                        "--batch", str(batch), "--repeats", "5", "--json", str(path)]
                if threads:
                    args += ["--threads", str(threads)]
                jobs.append(Job(f"latency/{name}", "script", args, path))
    if sjd_repo:
        for threads in (1, 0):
            name = f"sjd-reference-{'all' if threads == 0 else threads}threads"
            path = out / "latency" / f"{name}.json"
            args = ["eval/compare_sjd_reference.py", "--reference-repo", sjd_repo, "--model", model,
                    "--repeats", "5", "--json", str(path)]
            if threads:
                args += ["--threads", str(threads)]
            jobs.append(Job(f"latency/{name}", "script", args, path))
    return jobs


def latency_jobs(out: Path, model: str, fid_num: int, samples: int, llamagen_repo: str | None = None,
                 sjd_repo: str | None = None) -> list[Job]:
    return [
        bench_job(out, "latency", "batch1-fp32-allcores", LATENCY_B1, model=model, samples=samples),
        bench_job(out, "latency", "batch1-fp32-1thread", LATENCY_B1, model=model, samples=samples, threads=1),
        bench_job(out, "latency", "batch1-fp32-allcores-small-windows", LATENCY_WINDOWS, model=model,
                  samples=samples),
        bench_job(out, "latency", "batch8-fp32-allcores", LATENCY_B8, model=model, samples=8, batch_size=8),
        bench_job(out, "latency", "batch8-fp32-1thread", LATENCY_B8, model=model, samples=8, batch_size=8, threads=1),
        *reference_jobs(out, model, llamagen_repo, sjd_repo),
    ]


# The 2025-26 methods (issue 38): SJD-PAC (lossless), GSD and PJD (lossy), beside SJD, MC-SJD, ZipAR and LANTERN++.
# sjd-pac:window=16 evaluates 17 + 10 positions per forward (its default tree: K = 3, D = 3); mc-sjd:window=26
# evaluates as many.
NEW_B1 = ["ar", "sjd:window=16", "mc-sjd:window=16", "mc-sjd:window=26", "sjd-pac:window=16",
          "sjd-pac:window=16,tree_width=4", "sjd-pac:window=16,coupling=gumbel",
          "sjd-pac:window=16,tree_width=4,init=repeat_vertical", "zipar:row_lag=2", "pjd:row_lag=2", "pjd:row_lag=1",
          "gsd:window=16", "mc-sjd:window=16,acceptance=gsd", "mc-sjd:window=16,acceptance=lantern++,k=10,lam=5"]
NEW_B8 = ["ar", "mc-sjd:window=16", "sjd-pac:window=16", "sjd-pac:window=16,tree_width=4,init=repeat_vertical",
          "zipar:row_lag=2", "pjd:row_lag=2", "pjd:row_lag=1", "gsd:window=16"]
# Ablations (adaptive continuation alone: tree_width=1; proactive drafting alone: coupling=none), windows <= 16,
# and the relaxed rules swept over their parameters with one drafter (MC-SJD's, window 16), to compare tokens per
# forward at equal realised TV per token.
NEW_SWEEP = ["ar", "mc-sjd:window=8", "mc-sjd:window=12", "mc-sjd:window=16,init=repeat_vertical",
             "sjd-pac:window=8", "sjd-pac:window=12", "sjd-pac:window=16,tree_width=1",
             "sjd-pac:window=16,coupling=none", "sjd-pac:window=16,tree_width=2,tree_depth=4",
             "sjd-pac:window=16,tree_width=8,tree_depth=2", "sjd-pac:window=12,tree_width=4,init=repeat_vertical",
             "pjd:row_lag=2,coupling=maximal", "pjd:row_lag=4",
             *(f"mc-sjd:window=16,acceptance=gsd,ranks={r}" for r in (3, 7, 20)),
             "mc-sjd:window=16,acceptance=gsd,k=30,ranks=30",
             *(f"mc-sjd:window=16,acceptance=lantern++,k=10,lam={lam}" for lam in (1.5, 2, 3, 5)),
             *(f"mc-sjd:window=16,acceptance=bounded,k=10,delta={d}" for d in (0.05, 0.1, 0.2))]
NEW_LOSSY_FID = ["pjd:row_lag=2", "pjd:row_lag=1", "gsd:window=16", "mc-sjd:window=16,acceptance=gsd",
                 "mc-sjd:window=16,acceptance=lantern++,k=10,lam=5"]
EMU3_PROMPTS = ("red apple", "smiling face with sunglasses")
EMU3_METHODS = ["ar", "mc-sjd:window=16", "sjd-pac:window=16", "sjd-pac:window=16,tree_width=4",
                "zipar:row_lag=2", "pjd:row_lag=2", "gsd:window=16"]


def new_jobs(out: Path, model: str, fid_num: int, samples: int) -> list[Job]:
    """Issue 38's figures. The sweep runs on one thread (its figures are forward counts and realised TV); the
    batch-1 and batch-8 benches use every core (their latency column needs an otherwise idle machine: rerun them
    there with ``python eval/figures.py --suite methods2026 --force methods2026/batch``)."""
    jobs = [
        bench_job(out, "methods2026", "sweep-fp32", NEW_SWEEP, model=model, samples=8, batch_size=8, threads=1),
        bench_job(out, "methods2026", "batch1-fp32", NEW_B1, model=model, samples=samples, plots=True),
        *(fid_job(out, spec, model=model, num=fid_num, threads=1) for spec in NEW_LOSSY_FID),
        fid_job(out, "ar", model=model, num=fid_num, threads=1),
        fid_job(out, "ar", model=model, num=fid_num, seed=1, threads=1),
        fid_job(out, "sjd-pac:window=16", model=model, num=fid_num, threads=1),
        bench_job(out, "methods2026", "batch8-fp32", NEW_B8, model=model, samples=8, batch_size=8),
        token_stats_job(out, model),
    ]
    if model in ("c2i", "llamagen-c2i-photos"):  # Emu3 beside the photo model (its own prompts, batch 1)
        jobs.append(bench_job(out, "methods2026", "emu3-batch1-fp32", EMU3_METHODS, model="emu3-emoji", samples=2,
                              prompts=EMU3_PROMPTS, threads=1))
    return jobs


# Cost-aware windows (issue 40): window="auto" beside fixed windows, at batch 1, 4 and 8, fp32 and bf16 (batch 1).
WINDOW_METHODS = ["ar", "mc-sjd:window=4", "mc-sjd:window=8", "mc-sjd:window=16", "mc-sjd:window=32",
                  "mc-sjd:window=auto", "sjd:window=32", "sjd:window=auto", "speculative:window=2",
                  "speculative:window=4", "speculative:window=auto"]


def window_jobs(out: Path, model: str, fid_num: int, samples: int) -> list[Job]:
    """Issue 40's figures: every bench on all cores (rerun on an otherwise idle machine), and the windows the
    policy chose against token position (eval/window_trace.py)."""
    trace = out / "windows" / "trace.json"
    return [
        *(bench_job(out, "windows", f"batch{b}-fp32", WINDOW_METHODS, model=model, samples=max(samples, b),
                    batch_size=b) for b in (1, 4, 8)),
        bench_job(out, "windows", "batch1-bf16", WINDOW_METHODS, model=model, samples=samples, dtype="bf16"),
        Job("windows/trace", "script", ["eval/window_trace.py", "--model", model, "--batch-sizes", "1", "4", "8",
                                        "--json", str(trace), "--plot", str(trace.with_suffix(".png"))], trace),
    ]


SUITES = {"sjd": sjd_jobs, "zipar": zipar_jobs, "relaxed": relaxed_jobs, "latency": latency_jobs,
          "methods2026": new_jobs, "windows": window_jobs}


# ----------------------------------------------------------------------------- report
def _load(path: Path) -> object | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _fid_records(out: Path) -> dict[tuple[str, int, int], dict]:
    found = {}
    for path in sorted((out / "fid").glob("*.json")):
        rec = _load(path)
        if isinstance(rec, dict):
            found[(_label(rec), rec["seed"], rec["num_generated"])] = rec
    return found


def _best_fid(fids: dict[tuple[str, int, int], dict], label: str) -> dict | None:
    """The seed-0 record of ``label`` with the largest N."""
    recs = [rec for (lab, seed, _), rec in fids.items() if lab == label and seed == 0]
    return max(recs, key=lambda r: r["num_generated"]) if recs else None


def _label(rec: dict) -> str:
    from arvis.eval.bench import MethodSpec

    return MethodSpec(rec["method"], tuple(rec.get("options", {}).items())).label


def _bench_table(records: list[dict], fids: dict[tuple[str, int, int], dict], extra_cols: bool = False) -> list[str]:
    head = ["method", "lossless", "target fwd", "draft fwd", "step compr.", "tokens/fwd", "latency s", "speedup",
            "FID (N)"]
    if extra_cols:
        head += ["mean TV/token", "max TV/token"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in records:
        fid = _best_fid(fids, r["spec"])
        fid_s = f"{fid['fid']:.2f} ({fid['num_generated']})" if fid else "–"
        row = [f"`{r['spec']}`", "yes" if r["lossless"] else "no", f"{r['target_forwards']:.1f}",
               f"{r['draft_forwards']:.1f}", f"{r['step_compression']:.2f}x", f"{r['accepted_per_forward']:.2f}",
               f"{r['latency_s']:.3f}", f"{r['speedup']:.2f}x", fid_s]
        if extra_cols:
            ex = r.get("extra", {})
            row += [f"{ex['mean_tv_per_token']:.4f}" if "mean_tv_per_token" in ex else "–",
                    f"{ex['max_tv_per_token']:.4f}" if "max_tv_per_token" in ex else "–"]
        lines.append("| " + " | ".join(row) + " |")
    return lines


def _cost_table(curve: list[dict]) -> list[str]:
    if not curve:
        return []
    return ["| positions T | " + " | ".join(str(c["positions"]) for c in curve) + " |",
            "|---|" + "---|" * len(curve),
            "| ms / forward | " + " | ".join(f"{c['ms']:.2f}" for c in curve) + " |",
            "| vs T = 1 | " + " | ".join("–" if c["ratio"] is None else f"{c['ratio']:.2f}" for c in curve) + " |"]


def _survival_table(records: list[dict], points: tuple[int, ...] = (2, 3, 5, 9, 17, 33, 65)) -> list[str]:
    """P(a forward commits >= j tokens) per method, from the accepted-per-forward histograms of all samples:
    how far into the window acceptance survives (with the forward's own token, j - 1 drafts accepted)."""
    head = ["method", *(f">= {j}" for j in points)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in records:
        hist = {int(k): v for k, v in r.get("accepted_per_forward_histogram", {}).items()}
        total = sum(hist.values())
        if not total or r["method"] == "ar":
            continue
        cells = [f"{sum(v for k, v in hist.items() if k >= j) / total:.3f}" for j in points]
        lines.append(f"| `{r['spec']}` | " + " | ".join(cells) + " |")
    return lines


def _setting(records: list[dict]) -> str:
    r = records[0]
    s = r["sampling"]
    return (f"model `{r.get('model')}`, {r['samples']} samples (class i mod classes), batch {r['batch_size']}, "
            f"dtype {r.get('dtype')}, {r.get('threads')} thread(s), CFG {s.get('guidance_scale')}, "
            f"top-k {s.get('top_k')}, temperature {s.get('temperature')}; median of {r['repeats']} interleaved "
            f"rounds after {r['warmup']} warm-up; commit `{str(r.get('git_commit'))[:12]}`"
            f"{' (dirty tree)' if r.get('git_dirty') else ''}, {r.get('timestamp', '')[:16]}")


def _latency_table(records: list[dict]) -> list[str]:
    head = ["method", "lossless", "step compr.", "T", "latency s", "speedup", "ideal", "fwd ms", "outside ms",
            "outside", "syncs / iter"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in records:
        ideal = r.get("ideal_speedup")
        lines.append("| " + " | ".join([
            f"`{r['spec']}`", "yes" if r["lossless"] else "no", f"{r['step_compression']:.2f}x",
            str(r.get("positions_per_forward") or "–"), f"{r['latency_s']:.3f}", f"**{r['speedup']:.2f}x**",
            "–" if ideal is None else f"{ideal:.2f}x", f"{r['target_ms_per_forward']:.2f}",
            f"{r['outside_ms_per_forward']:.2f}", f"{100 * r['outside_share']:.0f}%",
            f"{r['host_syncs_per_iteration']:.2f}"]) + " |")
    return lines


def _reference_rows(jobs: list[Job]) -> list[str]:
    rows = []
    for job in jobs:
        rec = _load(job.output) if job.kind == "script" else None
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


def _latency_sections(jobs: list[Job], lines: list[str]) -> Iterator[tuple[Job, list[dict]]]:
    """For every bench job: its heading, then (when it has run) its setting, AR's spread of rounds and its latency
    table appended to ``lines``; yields the jobs that ran with their records (for what a page adds after)."""
    for job in jobs:
        if job.kind != "bench":
            continue
        records = _load(job.output)
        lines += [f"## {job.name}", ""]
        if not isinstance(records, list):
            lines += ["(not run yet)", ""]
            continue
        lines += [_setting(records), ""]
        ar = next((r for r in records if r["spec"] == "ar"), None)
        if ar and ar.get("latency_repeats_s"):
            rounds = ar["latency_repeats_s"]
            lines += [f"AR's {len(rounds)} rounds: {min(rounds):.3f}–{max(rounds):.3f} s per sample (the noise of "
                      "this machine at the time; speedups are medians of interleaved rounds).", ""]
        lines += _latency_table(records)
        yield job, records


def write_latency_report(jobs: list[Job], out: Path) -> Path:
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
    for _job, records in _latency_sections(jobs, lines):
        lines += ["", "Forward cost on this machine (ms inside one target forward, same model, batch and guidance):", ""]
        lines += _cost_table(records[0].get("forward_cost", [])) + [""]
    refs = _reference_rows(jobs)
    lines += ["## Against the reference implementations (same weights, same settings, interleaved)", ""]
    if refs:
        lines += ["| comparison | batch | threads | reference s | arvis s | arvis faster by | note |",
                  "|---|---|---|---|---|---|---|", *refs, ""]
    else:
        lines += ["(not run: pass `--llamagen-repo` / `--sjd-repo` checkouts)", ""]
    path = out / "latency.md"
    path.write_text("\n".join(lines))
    return path


def _reference_words(jobs: list[Job]) -> str:
    """How the FIDs of these jobs' model are measured (its data set: photos or emoji)."""
    from arvis.data.sources import model_data
    from arvis.hub import TINY_RANDOM, resolve_model

    model = jobs[0].args[jobs[0].args.index("--model") + 1]
    data = "photos" if model == TINY_RANDOM else model_data(resolve_model(model))
    if data == "emoji":
        return "the shipped emoji domain network (`domain-emoji`), held-out emoji (never trained on) as reference"
    return "the shipped domain network, held-out real crops as reference"


def token_stats_section(suite: str, out: Path) -> list[str]:
    """This figure set's next-token statistics (first) beside every other known set's, with links to their
    pages of ``suite``."""
    from arvis.eval.token_stats import TABLE_HEADER, table_row

    root = Path(__file__).resolve().parents[1]
    here = out.resolve()
    known = {(root / f).resolve(): name for f, name in FIGURE_SETS.items()}
    rows = []
    for folder in [here, *(f for f in known if f != here)]:
        rec = _load(folder / TOKEN_STATS)
        if not isinstance(rec, dict):
            continue
        label = known.get(folder, f"`{rec['model']}`")
        page = folder / f"{suite}.md"
        link = ("this page" if folder == here else f"[its {suite} figures]({os.path.relpath(page, here)})"
                if page.is_file() else f"no {suite} figures for it yet")
        rows.append(table_row(f"{label} ({link})", rec))
    if not rows:
        return []
    return ["## How predictable each model is", "",
            "Next-token statistics over AR samples (`eval/token_stats.py`: the sampling distribution recomputed "
            "teacher-forced at every position, CFG as in decoding). How much a method wins depends on these: a "
            "sharper model accepts a right guess more often and a random draft less often (1 − TV(p, uniform)), so "
            "a figure measured on one model does not stand for the other. Read each table beside the other "
            "model's.", "",
            *TABLE_HEADER, *rows, ""]


def write_windows_report(jobs: list[Job], out: Path) -> Path:
    """docs/figures/windows.md: cost-aware windows against fixed ones, per batch and dtype, with the share of the
    best fixed window's speed and the windows chosen along the image."""
    lines = ["# Figures: cost-aware windows (`window=auto`)", "",
             "Generated by `python eval/figures.py --suite windows` from the JSON records in this folder (`--list` "
             "prints every command). `window=auto` chooses every forward's window from this machine's forward-cost "
             "curve and the acceptance measured so far (docs/methods.md); the rows beside it are fixed windows. "
             "Latencies are medians of interleaved rounds and only mean something on an otherwise idle machine: "
             "the setting line says how many threads and the spread of AR's rounds says how noisy the machine was.",
             ""]
    for _job, records in _latency_sections(jobs, lines):
        for family in ("mc-sjd", "sjd", "speculative"):
            auto = next((r for r in records if r["spec"] == f"{family}:window=auto"), None)
            fixed = [r for r in records if r["method"] == family and r["spec"] != f"{family}:window=auto"]
            if auto and fixed:
                best = max(fixed, key=lambda r: r["speedup"])
                lines += ["", f"* `{family}:window=auto`: {auto['speedup']:.2f}x AR, {100 * auto['speedup'] / best['speedup']:.0f}% "
                          f"of the best fixed window's speed (`{best['spec']}`, {best['speedup']:.2f}x); mean window "
                          f"{auto.get('extra', {}).get('mean_window', float('nan')):.1f}."]
        lines += ["", "Forward cost on this machine (ms inside one target forward, same model, batch and guidance):", ""]
        lines += _cost_table(records[0].get("forward_cost", [])) + [""]
    trace_job = next((j for j in jobs if j.kind == "script"), None)
    traces = _load(trace_job.output) if trace_job else None
    lines += ["## Windows chosen along the image", ""]
    if isinstance(traces, list):
        lines += ["| method | batch | forwards | mean window | windows chosen (window: forwards) | loop overhead ms |",
                  "|---|---|---|---|---|---|"]
        for t in traces:
            chosen = ", ".join(f"{w}: {n}" for w, n in t["windows_chosen"].items())
            lines.append(f"| {t['spec']} | {t['batch_size']} | {t['target_forwards']:.0f} | {t['mean_window']:.1f} | "
                         f"{chosen} | {t['loop_overhead_ms']:.2f} |")
        lines += ["", f"![window against token position]({os.path.relpath(trace_job.output.with_suffix('.png'), out)})",
                  ""]
    else:
        lines += ["(not run yet)", ""]
    path = out / "windows.md"
    path.write_text("\n".join(lines))
    return path


def write_report(suite: str, jobs: list[Job], out: Path) -> Path:
    if suite == "latency":
        return write_latency_report(jobs, out)
    if suite == "windows":
        return write_windows_report(jobs, out)
    fids = _fid_records(out)
    reference = _reference_words(jobs)
    lines = [f"# Figures: {suite}", "",
             f"Generated by `python eval/figures.py --suite {suite}` from the JSON records in this folder "
             f"(re-run it to reproduce; `--list` prints every command). FID: {reference} (see docs/evaluation.md).",
             ""]
    for job in jobs:
        if job.kind != "bench":
            continue
        records = _load(job.output)
        lines += [f"## {job.name}", ""]
        if not isinstance(records, list):
            lines += ["(not run yet)", ""]
            continue
        lines += [_setting(records), ""]
        lines += _bench_table(records, fids, extra_cols=suite == "relaxed")
        if suite == "sjd":
            lines += ["", "Acceptance by window position — share of target forwards that commit at least j tokens "
                          "(all samples):", ""]
            lines += _survival_table(records)
        lines += ["", "Forward cost on this machine (same model, batch and guidance):", ""]
        lines += _cost_table(records[0].get("forward_cost", [])) + [""]
        plots = out / suite / f"{Path(job.output).stem}-plots"
        if plots.is_dir():
            lines += ["Plots: " + ", ".join(f"[{p.name}]({suite}/{plots.name}/{p.name})"
                                            for p in sorted(plots.glob("*.png"))), ""]
    fid_rows = [rec for (label, _, _), rec in sorted(fids.items()) if label == "ar"]  # the baseline in every suite
    fid_rows += [rec for j in jobs if j.kind == "fid" and isinstance(rec := _load(j.output), dict) and _label(rec) != "ar"]
    if fid_rows:
        lines += ["## FID", "", "| method | seed | N | FID | real-vs-real floor (same N) |", "|---|---|---|---|---|"]
        for rec in sorted(fid_rows, key=lambda r: (-r["num_generated"], _label(r) != "ar", _label(r), r["seed"])):
            label, seed = _label(rec), rec["seed"]
            floor = rec.get("real_vs_real_floor")
            lines.append(f"| `{label}` | {seed} | {rec['num_generated']} | {rec['fid']:.2f} | "
                         f"{'–' if floor is None else f'{floor:.2f}'} |")
        for n in sorted({num for (label, _, num) in fids if label == "ar"}, reverse=True):
            ar = [rec["fid"] for (label, _, num), rec in fids.items() if label == "ar" and num == n]
            if len(ar) >= 2:
                lines += ["", f"Seed-to-seed noise of AR at N = {n} (same model and method; seeds differ): "
                              f"|ΔFID| = {max(ar) - min(ar):.2f}."]
        lines.append("")
    lines += token_stats_section(suite, out)
    lines += ["## Published anchors", "", *(f"- {a}" for a in ANCHORS.get(suite, ())), ""]
    path = out / f"{suite}.md"
    path.write_text("\n".join(lines))
    return path


# ----------------------------------------------------------------------------- main
# The families' figure pages, each built by its own script from its records: `--suite NAME` runs it with the
# arguments that follow (`--list`, `--report-only`… as that script takes them), so every page has one entry point.
FAMILY_SUITES: dict[str, list[str]] = {
    "var": ["eval/var_figures.py"], "mar": ["eval/mar_figures.py"], "video": ["eval/video_figures.py"],
    "emu3": ["eval/emu3_figures.py"], "janus": ["eval/janus_figures.py"], "mulo": ["eval/mulo.py", "figures"],
}


def run_family_suite(suite: str, rest: list[str]) -> int:
    """Run a family's figures script (:data:`FAMILY_SUITES`) with ``rest``, from the repository root."""
    import subprocess

    root = Path(__file__).resolve().parents[1]
    script, *sub = FAMILY_SUITES[suite]
    return subprocess.run([sys.executable, str(root / script), *sub, *rest], cwd=root).returncode


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if len(argv) >= 2 and argv[0] == "--suite" and argv[1] in FAMILY_SUITES:
        return run_family_suite(argv[1], argv[2:])
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                epilog=f"family pages: --suite {{{','.join(FAMILY_SUITES)}}} [that script's arguments]")
    p.add_argument("--suite", choices=[*SUITES, "all"], default="all")
    p.add_argument("--model", default="c2i")
    p.add_argument("--out", default="docs/figures", type=Path)
    p.add_argument("--fid-num", type=int, default=1000,
                   help="images per FID (docs/measurement.md: 1,000); lossless methods use a quarter, against AR at "
                        "the same N")
    p.add_argument("--samples", type=int, default=4, help="samples per timed round (batch-1 benches)")
    p.add_argument("--shard", default="0/1", help="K/N: run jobs K, K+N, K+2N … (two processes: 0/2 and 1/2)")
    p.add_argument("--only", choices=["bench", "fid"], default=None)
    p.add_argument("--list", action="store_true", help="print the jobs and their commands, run nothing")
    p.add_argument("--report-only", action="store_true")
    p.add_argument("--force", default=None, help="also rerun the jobs whose name contains this (e.g. "
                   "methods2026/batch: the timed benches, on an idle machine)")
    p.add_argument("--llamagen-repo", default=None, help="latency suite: a FoundationVision/LlamaGen checkout")
    p.add_argument("--sjd-repo", default=None, help="latency suite: a tyshiwo1/Accelerating-T2I-AR-with-SJD checkout")
    args = p.parse_args(argv)
    k, n = (int(x) for x in args.shard.split("/"))
    suites = list(SUITES) if args.suite == "all" else [args.suite]
    jobs: dict[str, Job] = {}
    per_suite = {}
    for suite in suites:
        extra = {"llamagen_repo": args.llamagen_repo, "sjd_repo": args.sjd_repo} if suite == "latency" else {}
        per_suite[suite] = SUITES[suite](args.out, args.model, args.fid_num, args.samples, **extra)
        for job in per_suite[suite]:
            jobs.setdefault(str(job.output), job)  # FID jobs shared between suites run once
    todo = [j for j in jobs.values() if args.only in (None, j.kind)]
    if args.list:
        list_jobs(todo)
        return 0
    if not args.report_only and (rc := run_missing_jobs(todo, (k, n), args.force)) != 0:
        return rc
    for suite in suites:
        print(f"wrote {write_report(suite, per_suite[suite], args.out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
