"""The machinery every figure suite shares: a suite declares its jobs and its page's sections; this module turns
the declarations into jobs (one command and the JSON record it writes each), tells which records are missing or
stale, runs those, and builds the page from the records.

A job whose record exists is skipped, so an interrupted run resumes, unless the record was measured on other
weights than the model's now (its ``model_sha256``): such a record is stale and the job runs again, so a retrained
model never keeps figures of its predecessor. ``eval/figures.py`` is the command line over this module.
"""

from __future__ import annotations

import argparse
import functools
import json
import shlex
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: The command line of every suite, relative to the repository root (the folder the jobs run from).
FIGURES_SCRIPT = "eval/figures.py"


# ----------------------------------------------------------------------------- jobs
@dataclass
class Job:
    """One command and the record it writes. ``kind``: ``bench`` / ``fid`` (an ``arvis`` command), else ``args[0]``
    is a script path (``script``, a script's own kind, or ``stage``: a suite's stage, ``eval/figures.py --stage``)."""

    name: str
    kind: str
    args: list[str]
    output: Path
    # Whether an existing record is complete (a record format a stage has outgrown is not): the default, it exists.
    complete: Callable[[Path], bool] | None = None
    # The model the record measures when it is not the command's ``--model`` (a stage of a page's second model).
    measures: str | None = None

    def command(self) -> list[str]:
        if self.kind in ("bench", "fid"):
            return [sys.executable, "-m", "arvis", self.kind, *self.args]
        return [sys.executable, *self.args]

    def model(self) -> str | None:
        if self.measures is not None:
            return self.measures
        return self.args[self.args.index("--model") + 1] if "--model" in self.args else None

    def status(self) -> str:
        """``todo`` (no complete record), ``stale`` (a record of other weights than the model's now) or ``done``."""
        if not self.output.exists() or (self.complete is not None and not self.complete(self.output)):
            return "todo"
        recorded = recorded_model_sha256(self.output)
        current = current_model_sha256(model) if (model := self.model()) else None
        return "stale" if recorded and current and recorded != current else "done"

    def display(self) -> str:
        """The command as a user types it."""
        args = self.command()[1:]
        return shlex.join(["arvis", *args[2:]] if args[:2] == ["-m", "arvis"] else ["python", *args])


def load_record(path: Path) -> Any:
    """A JSON record, or ``None`` when it is missing or unreadable (a page says "not run yet")."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def recorded_model_sha256(path: Path) -> str | None:
    """The ``model_sha256`` the record at ``path`` was measured on, ``None`` when it names none."""
    return record_model_sha256(load_record(path))


def record_model_sha256(record: Any) -> str | None:
    """The ``model_sha256`` a loaded record was measured on (a bench record's first row), ``None`` when it names
    none."""
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


def run_missing_jobs(jobs: list[Job], shard: tuple[int, int] = (0, 1), force: Iterable[str] = ()) -> int:
    """Run, in order, every job whose record is missing or stale (a run resumes) among shard ``k`` of ``n`` (jobs
    ``i`` with ``i % n == k``), and the jobs whose name contains one of ``force`` even when done (a latency rerun
    on an idle machine); stop at the first failure, returning its exit code (0 when all ran)."""
    k, n = shard
    forced = {j.name for j in jobs if any(f in j.name for f in force)}
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


# ----------------------------------------------------------------------------- declarations
@dataclass(frozen=True)
class Bench:
    """One ``arvis bench`` record, ``<out>/<record>.json`` (with its ``.md`` beside it)."""

    record: str
    methods: tuple[str, ...]
    samples: int | None = None  # None: the run's --samples
    batch: int = 1
    dtype: str = "fp32"
    repeats: int | None = None  # None: the run's --repeats
    threads: int | None = None
    plots: bool = False
    prompts: tuple[str, ...] = ()  # text-conditional models
    model: str | None = None  # None: the suite's model
    name: str | None = None  # the job's name; None: the record

    def job(self, s: argparse.Namespace) -> Job:
        base = s.out / self.record
        args = ["--model", self.model or s.model, "--method", ";".join(self.methods), "--num-images",
                str(self.samples or s.samples), "--batch-size", str(self.batch), "--dtype", self.dtype, "--repeats",
                str(self.repeats or s.repeats), "--seed", "0", "--json", str(base.with_suffix(".json")), "--markdown",
                str(base.with_suffix(".md")), "--no-progress"]
        for prompt in self.prompts:
            args += ["--prompt", prompt]
        if self.threads is not None:
            args += ["--threads", str(self.threads)]
        if self.plots:
            args += ["--plots", str(s.out / f"{self.record}-plots")]
        return Job(self.name or self.record, "bench", args, base.with_suffix(".json"))


def fid_slug(spec: str) -> str:
    """A method spec as it appears in FID record names (``mc-sjd:window=16`` → ``mc-sjd_window-16``)."""
    return spec.replace(":", "_").replace(",", "_").replace("=", "-").replace('"', "")


@dataclass(frozen=True)
class Fid:
    """One ``arvis fid`` record, ``<out>/<folder>/fid/<method>-seed<seed>-n<N>.json``; N is the run's ``--fid-num``
    divided by ``divide`` (the lossless methods' quarter)."""

    method: str
    seed: int = 0
    divide: int = 1
    floor: bool = False  # also the real-vs-real floor at the same N
    batch: int = 16
    threads: int | None = None
    folder: str = ""  # records shared between the suites of a figure set: the out folder itself
    model: str | None = None
    prefix: str = ""  # of the job's name

    def job(self, s: argparse.Namespace) -> Job:
        num = max(s.fid_num // self.divide, 1)
        slug = fid_slug(self.method)
        path = s.out / self.folder / "fid" / f"{slug}-seed{self.seed}-n{num}.json"
        args = ["--model", self.model or s.model, "--num-images", str(num), "--seed", str(self.seed), "--batch-size",
                str(self.batch), "--json", str(path), "--no-progress", "--method", self.method]
        if self.floor:
            args.append("--floor")
        if self.threads is not None:
            args += ["--threads", str(self.threads)]
        return Job(f"{self.prefix}fid/{slug}-seed{self.seed}", "fid", args, path)


@dataclass(frozen=True)
class Script:
    """A record written by another script of eval/ (its arguments name the record)."""

    name: str
    record: str
    args: tuple[str, ...]  # args[0]: the script, relative to the repository root
    kind: str = "script"  # a page that shows several scripts' records tells them apart by it

    def job(self, s: argparse.Namespace) -> Job:
        return Job(self.name, self.kind, list(self.args), s.out / self.record)


@dataclass(frozen=True)
class Stage:
    """A suite's own measurement (a parity check, a memory count…): ``run(settings)`` writes ``<out>/<record>``.
    It runs as ``python eval/figures.py --suite S --stage NAME`` with the run's options."""

    name: str
    record: str
    run: Callable[[argparse.Namespace], Any]
    complete: Callable[[Path], bool] | None = None
    # The run's setting naming the model the stage measures, when not ``--model`` (its record's ``model_sha256``
    # is checked against that model's weights).
    model_setting: str | None = None

    def job(self, s: argparse.Namespace) -> Job:
        return Job(self.name, "stage", [FIGURES_SCRIPT, *s.stage_argv, "--stage", self.name], s.out / self.record,
                   self.complete, getattr(s, self.model_setting) if self.model_setting else None)


Declaration = Bench | Fid | Script | Stage


@dataclass(frozen=True)
class Option:
    """A command-line option of one suite (beside the options every suite takes)."""

    flag: str
    default: Any = None
    help: str = ""
    type: Callable[[str], Any] = str
    nargs: str | None = None


@dataclass(frozen=True)
class Page:
    """What a page's sections read: the run's settings (``out``, ``model``, the suite's options) and its jobs."""

    suite: str
    settings: argparse.Namespace
    jobs: list[Job]

    @property
    def out(self) -> Path:
        return self.settings.out


Section = Callable[[Page], list[str]]


@dataclass(frozen=True)
class Suite:
    """A figure page, ``<out>/<name>.md``: its model, its jobs (declarations, given the run's settings), the page's
    sections in order, and what else is built from the records (plots, a model card: ``extras`` return the paths
    they wrote)."""

    name: str
    model: str
    jobs: Callable[[argparse.Namespace], list[Declaration]]
    sections: tuple[Section, ...]
    samples: int = 4
    options: tuple[Option, ...] = ()
    extras: tuple[Callable[[Page], list[Path]], ...] = ()

    def declarations(self, settings: argparse.Namespace) -> list[Declaration]:
        return self.jobs(settings)

    def build_jobs(self, settings: argparse.Namespace) -> list[Job]:
        return [d.job(settings) for d in self.declarations(settings)]

    def write_page(self, settings: argparse.Namespace, jobs: list[Job]) -> list[Path]:
        """The extras (first: a page may link a plot), then the page from the records, atomically; the paths
        written."""
        from arvis.eval.files import write_bytes_atomic

        page = Page(self.name, settings, jobs)
        written = [path for extra in self.extras for path in extra(page)]
        return [*written, write_bytes_atomic(settings.out / f"{self.name}.md", self.page_text(settings, jobs).encode())]

    def page_text(self, settings: argparse.Namespace, jobs: list[Job]) -> str:
        """The page's Markdown, its sections in order, from the records."""
        page = Page(self.name, settings, jobs)
        return "\n".join(line for section in self.sections for line in section(page))


@dataclass(frozen=True)
class Plan:
    """A command line read: its options, and per suite the settings its jobs and page read and its jobs."""

    args: argparse.Namespace
    suites: list[Suite]
    settings: dict[str, argparse.Namespace]
    jobs: dict[str, list[Job]]
