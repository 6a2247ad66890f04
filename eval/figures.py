#!/usr/bin/env python
"""Every published figure of arvis, reproducible: one command per page, its jobs, then the page from the records.

    python eval/figures.py --suite all                   # the method suites: run missing jobs, write their pages
    python eval/figures.py --suite sjd --shard 0/2 &     # two processes on a two-core machine
    python eval/figures.py --suite sjd --shard 1/2
    python eval/figures.py --suite all --report-only     # rebuild the pages from the JSON records
    python eval/figures.py --suite var --list            # print a suite's jobs and their commands
    python eval/figures.py --suite sjd --model arvis/weights/llamagen-c2i-emoji --out docs/figures/emoji
    python eval/figures.py --suite janus --only parity,memory --force parity,memory   # rerun two stages

Suites (``--suite all``: the method suites, on one model): ``sjd`` (SJD / MC-SJD: windows, initialisations,
couplings, batch 1 and 8, fp32 and bf16, ragged vs lockstep), ``zipar`` (ZipAR windows, staircase vs contiguous
MC-SJD windows, decode-order heat maps), ``relaxed`` (draft-model speculative decoding, LANTERN, LANTERN++, the
bounded rule, MC-SJD + bounded), ``latency`` (wall-clock latency on this machine: batch 1 fp32 on every core and on
one thread with each forward-cost curve, the time split and host syncs per iteration, batch 8 ragged vs batched AR,
and the reference implementations on the same weights — with ``--llamagen-repo`` / ``--sjd-repo`` checkouts; run
it on an otherwise idle machine), ``methods2026`` (SJD-PAC, GSD, PJD), ``windows`` (cost-aware windows); the
families' pages: ``var``, ``mar``, ``video``, ``emu3``, ``janus`` and ``mulo`` (``--help`` with ``--suite NAME``
lists a suite's own options).

Every job is one command (printed with ``--list``) writing a JSON record under ``--out``: ``arvis bench``,
``arvis fid``, a script of eval/, or a suite's own stage (``--stage NAME``, run by the list). A job whose record
exists is skipped, so an interrupted run resumes, unless the record was measured on other weights than the model's
now (eval/figure_runner.py). Nothing here is typed in by hand: the pages are built from the records.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

# The suite modules beside this script, and the repository (the stages use the test fixtures' tiny models).
sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]
from figure_runner import Job, Plan, Stage, Suite, list_jobs, run_missing_jobs  # noqa: E402
from suite_emu3 import SUITE as EMU3  # noqa: E402
from suite_janus import SUITE as JANUS  # noqa: E402
from suite_mar import SUITE as MAR  # noqa: E402
from suite_methods import SUITES as METHOD_SUITES  # noqa: E402
from suite_mulo import SUITE as MULO  # noqa: E402
from suite_var import SUITE as VAR  # noqa: E402
from suite_video import SUITE as VIDEO  # noqa: E402

SUITES: dict[str, Suite] = {s.name: s for s in (*METHOD_SUITES, VAR, MAR, VIDEO, EMU3, JANUS, MULO)}
#: ``--suite all``: the suites of one figure set (one model, shared FID records).
ALL = tuple(s.name for s in METHOD_SUITES)
# The options of what a job measures, beside the suite's own: a stage's command carries them when given (and
# --force, so that a forced stage starts afresh).
MEASUREMENT_OPTIONS = ("--fid-num", "--samples", "--repeats", "--force")


def parser(suites: list[Suite]) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--suite", choices=[*SUITES, "all"], default="all")
    p.add_argument("--model", default=None, help="the model (alias or folder); default: the suite's")
    p.add_argument("--out", default="docs/figures", type=Path, help="records under it, pages in it")
    p.add_argument("--fid-num", type=int, default=1000,
                   help="images per FID (docs/measurement.md: 1,000); lossless methods use a quarter, against AR at "
                        "the same N")
    p.add_argument("--samples", type=int, default=None, help="samples per timed round (batch-1 benches); default: "
                   "the suite's")
    p.add_argument("--repeats", type=int, default=5, help="interleaved timing rounds of every bench")
    p.add_argument("--shard", default="0/1", help="K/N: run jobs K, K+N, K+2N … (two processes: 0/2 and 1/2)")
    p.add_argument("--only", default=None, help="comma-separated: run only the jobs of these kinds (bench, fid, "
                   "a stage) or whose name starts with one of these")
    p.add_argument("--list", action="store_true", help="print the jobs and their commands, run nothing")
    p.add_argument("--report-only", action="store_true", help="rebuild the pages from the records, run nothing")
    p.add_argument("--force", default=None, help="comma-separated: also rerun the jobs whose name contains one of "
                   "these (e.g. methods2026/batch: the timed benches, on an idle machine)")
    p.add_argument("--stage", default=None, help=argparse.SUPPRESS)  # how a stage job runs (its command)
    seen = set()
    for suite in suites:
        for o in suite.options:
            if o.flag not in seen:
                seen.add(o.flag)
                p.add_argument(o.flag, default=o.default, type=o.type, nargs=o.nargs, help=o.help)
    return p


def settings_for(suite: Suite, args: argparse.Namespace, p: argparse.ArgumentParser) -> argparse.Namespace:
    """The run's options as ``suite`` reads them (its model and sample count unless given), and ``stage_argv``:
    the options a stage's command carries (those given, beside the suite, its folder and its model)."""
    s = argparse.Namespace(**vars(args))
    s.model = args.model or suite.model
    s.samples = args.samples or suite.samples
    s.stage_argv = ["--suite", suite.name, "--out", str(args.out), "--model", s.model]
    for flag in (*MEASUREMENT_OPTIONS, *(o.flag for o in suite.options)):
        dest = flag.removeprefix("--").replace("-", "_")
        value = getattr(args, dest)
        if value != p.get_default(dest):
            s.stage_argv += [flag, *map(str, value if isinstance(value, list) else [value])]
    return s


def selected(job: Job, only: str | None) -> bool:
    keys = [k for k in (only or "").split(",") if k]
    return not keys or any(job.kind == k or job.name.startswith(k) for k in keys)


def plan(argv: list[str]) -> Plan:
    """Read a command line: the suites it names, their settings and their jobs."""
    name = _suite_of(argv)
    p = parser([SUITES[n] for n in (ALL if name == "all" else [name] if name in SUITES else [])])
    args = p.parse_args(argv)
    suites = [SUITES[n] for n in (ALL if args.suite == "all" else [args.suite])]
    settings = {suite.name: settings_for(suite, args, p) for suite in suites}
    return Plan(args, suites, settings, {suite.name: suite.build_jobs(settings[suite.name]) for suite in suites})


def main(argv: list[str] | None = None) -> int:
    run = plan(list(sys.argv[1:] if argv is None else argv))
    args = run.args
    if args.stage:
        (suite,) = run.suites
        settings = run.settings[suite.name]
        stage = next(d for d in suite.declarations(settings) if isinstance(d, Stage) and d.name == args.stage)
        stage.run(settings)
        return 0
    jobs: dict[str, Job] = {}
    for suite_jobs in run.jobs.values():
        for job in suite_jobs:
            jobs.setdefault(str(job.output), job)  # FID jobs shared between suites run once
    todo = [j for j in jobs.values() if selected(j, args.only)]
    if args.list:
        list_jobs(todo)
        return 0
    k, n = (int(x) for x in args.shard.split("/"))
    force = [f for f in (args.force or "").split(",") if f]
    if not args.report_only and (rc := run_missing_jobs(todo, (k, n), force)) != 0:
        return rc
    for suite in run.suites:
        for path in suite.write_page(run.settings[suite.name], run.jobs[suite.name]):
            print(f"wrote {path}")
    return 0


def _suite_of(argv: list[str]) -> str:
    """``--suite``'s value in ``argv`` (before the full parser, which depends on it: each suite adds options)."""
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--suite", default="all")
    return pre.parse_known_args(argv)[0].suite


if __name__ == "__main__":
    sys.exit(main())
