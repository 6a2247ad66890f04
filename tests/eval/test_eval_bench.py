"""The speed harness (arvis.eval.bench, `arvis bench`): spec parsing, protocol, records, outputs, bad input."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from typing import ClassVar

import pytest
import torch

import arvis.eval.bench as bench
import arvis.methods.catalog as catalog
from arvis.cli import main
from arvis.engine import SamplingConfig
from arvis.eval.bench import MethodSpec, format_markdown, format_text, parse_method_specs, run_bench
from arvis.methods import METHODS, DecoderKind, MethodInfo, Option, build_method, decode
from arvis.methods.ar import Autoregressive
from arvis.models.protocol import Condition
from arvis.pipelines.interface import BenchInputs
from tests import REPO_ROOT
from tests.conftest import tiny_llamagen
from tests.eval.eval_modules import eval_module

FIGURES = ("tokens", "target_forwards", "draft_forwards", "step_compression", "accepted_per_forward", "latency_s",
           "speedup", "peak_memory_mb")


WINDOWED = MethodInfo("test-windowed", DecoderKind.TOKEN, "AR under another name", (
    Option("window", "int", 4, "unused", low=1, high=1024), Option("init", "text", "random", "unused")))


@dataclass(frozen=True)
class WindowedAR(Autoregressive):
    """AR under another name with a (unused) ``window`` option: a stand-in for windowed methods."""

    info: ClassVar[MethodInfo] = WINDOWED
    window: int = 4
    init: str = "random"


@pytest.fixture
def windowed(monkeypatch):
    """The stand-in, declared and registered for one test (both registries restored after it)."""
    monkeypatch.setitem(METHODS[DecoderKind.TOKEN], WindowedAR.name, WindowedAR)
    monkeypatch.setitem(catalog._BY_KIND[DecoderKind.TOKEN], WindowedAR.name, WINDOWED)
    return WindowedAR.name


def token_inputs(model, samples: int, batch_size: int = 1, decode_fn=None) -> BenchInputs:
    """What a class-conditional pipeline's ``bench_inputs`` gives (class ``i % num_classes``, ``batch_size`` a
    call), decoding with ``decode_fn`` (default: :func:`arvis.methods.decode`)."""
    n = model.config.num_classes
    batches = [(idx, Condition(class_labels=torch.tensor([i % n for i in idx])))
               for idx in (list(range(s, min(s + batch_size, samples))) for s in range(0, samples, batch_size))]
    run = decode_fn or decode
    return BenchInputs(batches, lambda cond, sampling, method, gens: run(model, cond, sampling, method, gens),
                       lambda name, options: build_method(name, **options), tuple(model.layout.grid),
                       torch.device("cpu"), model)


def test_spec_syntax(windowed):
    specs = parse_method_specs("ar,test-windowed:window=16,init=zeros,test-windowed:window=32")
    assert specs == [MethodSpec("ar"), MethodSpec("test-windowed", (("window", 16), ("init", "zeros"))),
                     MethodSpec("test-windowed", (("window", 32),))]
    assert specs[1].label == "test-windowed:window=16,init=zeros" and specs[1].window == 16
    assert parse_method_specs(["ar; test-windowed:window=8", 'test-windowed:init="x,y"']) == [
        MethodSpec("ar"), MethodSpec("test-windowed", (("window", 8),)), MethodSpec("test-windowed", (("init", "x,y"),))]


@pytest.mark.parametrize("text, message", [
    ("ar,nope", "unknown method 'nope'; available methods: ar"),
    ("window=3", "comes before any method name"),
    ("test-windowed:window=4,bogus=1", "has no option 'bogus'"),
    ("test-windowed:window=4,window=2", "option 'window' of 'test-windowed' given twice"),
    ("speculative:draft_model=1", "draft_model is not an option: the pipeline supplies it"),
    ("speculative:gamma=3", "option 'gamma' is now called 'window'"),
    ("ar,ar", "given more than once"),
    ("test-windowed:16", "expected key=value"),
    ("", "no method given"),
])
def test_spec_errors(windowed, text, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")
                       .replace("]", r"\]")):
        parse_method_specs(text)


def test_protocol_interleaves_warms_up_and_times_every_sample(windowed, monkeypatch):
    model = tiny_llamagen(grid=4, vocab=32)
    calls = []

    def spy(backbone, condition, sampling, method, generator):
        calls.append((method.name, condition.class_labels.tolist(), [g.initial_seed() for g in generator]))
        return decode(backbone, condition, sampling, method, generator)

    specs = parse_method_specs("test-windowed:window=8")
    result = run_bench(token_inputs(model, 3, 2, spy), specs, SamplingConfig(guidance_scale=2.0), seed=4, repeats=5,
                       forward_cost_sizes=(1, 4, 64), progress=False, context={"model": "tiny"})
    names = [c[0] for c in calls]
    # Warm-up, then 5 interleaved rounds, then one untimed decode per method (first batch) counting host syncs.
    assert names == (["ar", "ar", "test-windowed", "test-windowed"] * 6) + ["ar", "test-windowed"]
    assert {tuple(c[1]) for c in calls} == {(0, 1), (2,)}  # class i % num_classes, batches of 2
    assert calls[0][2] == calls[2][2] == calls[4][2]  # same per-sample seeds for every method and round
    ar, win = result.records
    assert ar["spec"] == "ar" and win["spec"] == "test-windowed:window=8"  # AR added first as the baseline
    for r in result.records:
        assert all(k in r for k in FIGURES), r.keys()
        assert r["tokens"] == 16 and r["target_forwards"] == 16 and r["step_compression"] == 1.0
        assert r["accepted_per_forward_histogram"] == {"1": 48} and len(r["latency_repeats_s"]) == 5
        assert r["deterministic"] and r["model"] == "tiny" and r["grid"] == [4, 4]
        assert r["commit_forward"] == list(range(16))
        # The time split adds up, AR's loop syncs the host only at the end, and the ideal is AR's own.
        assert r["target_forward_s"] > 0 and r["draft_forward_s"] == 0 and 0 <= r["outside_share"] < 1
        # Inside + outside is the decode calls' own time, within the bench's clock around them (3 samples).
        assert 0 < r["target_forward_s"] + r["outside_s"] <= 3 * r["latency_s"] * 1.05
        assert r["target_ms_per_forward"] * r["batch_target_forwards"] == pytest.approx(1e3 * r["target_forward_s"])
        # AR syncs only when the decode ends (one read, over 15 iterations of its first 2-sample batch).
        assert r["host_syncs_per_iteration"] == pytest.approx(1 / 15) and r["aten_ops_per_forward"] > 0
        assert r["positions_per_forward"] == 1 and r["ideal_speedup"] == pytest.approx(1.0)
        assert r["forwards_vs_ar"] == ar["target_forwards"] / r["target_forwards"]  # against the same AR run
    assert ar["speedup"] == 1.0
    assert [c["positions"] for c in result.forward_cost] == [1, 4]  # 64 > sequence: dropped
    assert result.forward_cost[0]["ratio"] == 1.0 and result.forward_cost[1]["ms"] > 0
    text = format_text(result)
    assert "forward cost on this machine" in text and "test-windowed:window=8" in text
    md = format_markdown(result)
    assert "| spec |" in md and "| positions | ms/forward | min | vs T=1 |" in md


def test_speedup_is_the_ratio_of_median_latencies(windowed):
    model = tiny_llamagen(grid=4, vocab=32)
    ticks = iter(range(10_000))
    # A fake clock: each decode call of AR takes 3 ticks of 1 s, of the other method 1 tick.
    state = {"t": 0.0}

    def clock():
        next(ticks)
        return state["t"]

    def timed(backbone, condition, sampling, method, generator):
        state["t"] += 3.0 if method.name == "ar" else 1.0
        return decode(backbone, condition, sampling, method, generator)

    result = run_bench(token_inputs(model, 2, 1, timed), parse_method_specs("ar,test-windowed"), SamplingConfig(),
                       repeats=5, forward_cost_sizes=(), progress=False, clock=clock)
    ar, win = result.records
    assert ar["latency_s"] == 3.0 and win["latency_s"] == 1.0 and win["speedup"] == 3.0
    assert result.forward_cost == []


def test_repeats_below_five_are_refused():
    with pytest.raises(ValueError, match=r"repeats must be an integer >= 5 \(docs/measurement.md"):
        run_bench(token_inputs(tiny_llamagen(), 4), [MethodSpec("ar")], SamplingConfig(), repeats=3, progress=False)


def test_bench_command_writes_json_markdown_and_plots(windowed, tmp_path, capsys):
    paths = {"json": tmp_path / "b.json", "markdown": tmp_path / "b.md", "plots": tmp_path / "plots"}
    rc = main(["bench", "--model", "tiny-random", "--method", "ar", "--method", "test-windowed:window=2",
               "--num-images", "1", "--guidance-scale", "1.0", "--json", str(paths["json"]), "--markdown",
               str(paths["markdown"]), "--plots", str(paths["plots"]), "--no-progress", "--threads", "1"])
    cores = 1
    assert rc == 0
    out = capsys.readouterr().out
    assert "forward cost on this machine" in out and f"threads={cores}" in out
    records = json.loads(paths["json"].read_text())
    assert [r["spec"] for r in records] == ["ar", "test-windowed:window=2"]
    for r in records:
        assert all(k in r for k in FIGURES)
        assert r["threads"] == cores and r["dtype"] == "float32" and r["seed"] == 0
        assert r["versions"]["torch"] == torch.__version__ and r["git_commit"] and r["model"] == "tiny-random"
        assert r["tokens"] == 256 and len(r["forward_cost"]) == 7
    assert "| ar | yes | 256.0 |" in paths["markdown"].read_text()
    assert sorted(p.name for p in paths["plots"].iterdir()) == [
        "accepted_per_forward.png", "decode_order.png", "forward_cost.png", "speedup_vs_window.png"]


def test_bench_uses_every_core_by_default(monkeypatch):
    seen = {}

    def fake_run_bench(*args, **kwargs):  # stop before timing anything: only the thread setting is checked
        seen["threads"] = torch.get_num_threads()
        raise SystemExit(0)

    monkeypatch.setattr(bench, "run_bench", fake_run_bench)
    try:
        with pytest.raises(SystemExit):
            main(["bench", "--model", "tiny-random", "--method", "ar", "--no-progress"])
    finally:
        torch.set_num_threads(1)  # the suite's setting (conftest)
    assert seen["threads"] == bench.available_cores()


def test_bench_command_bad_input_writes_nothing(tmp_path, capsys):
    out = tmp_path / "b.json"
    for args in (["--method", "ar,nope"], ["--method", "ar", "--repeats", "2"], ["--method", "ar:window=2"],
                 ["--num-images", "0"], ["--threads", "0"]):
        rc = main(["bench", "--model", "tiny-random", *args, "--json", str(out), "--plots", str(tmp_path / "p"),
                   "--no-progress", "--no-forward-cost"])
        assert rc == 2, args
        assert not out.exists() and not (tmp_path / "p").exists(), args
    err = capsys.readouterr().err
    assert "unknown method 'nope'; available methods:" in err and "repeats must be" in err
    assert "has no option 'window'" in err and "--num-images must be" in err


def test_report_joins_bench_and_fid_records_of_the_same_model_and_settings(tmp_path, capsys):
    report = _load_script("report")
    sampling = {"guidance_scale": 3.0, "top_k": 0, "top_p": 1.0, "temperature": 1.0}
    same = {"model": "c2i", "model_sha256": "abc", "dtype": "float32"}
    bench_records = [{"spec": "ar", "step_compression": 1.0, "speedup": 1.0, "threads": 1,
                      "sampling": {**sampling, "cfg_interval": -1}, **same},
                     {"spec": "sjd:window=16", "step_compression": 2.5, "speedup": 1.8, "sampling": sampling, **same}]
    (tmp_path / "bench.json").write_text(json.dumps(bench_records))

    def fid_record(name, method, options, fid, **changes):
        record = {"method": method, "options": options, "fid": fid, "num_generated": 1000, "extractor": "domain",
                  "real_vs_real_floor": 1.2, "sampling": dict(sampling), **same}
        for key, value in changes.items():
            if key in sampling:
                record["sampling"][key] = value
            else:
                record[key] = value
        (tmp_path / f"{name}.json").write_text(json.dumps(record))
        return str(tmp_path / f"{name}.json")

    a, b = fid_record("a", "ar", {}, 5.0), fid_record("b", "sjd", {"window": 16}, 5.1)
    out = tmp_path / "report"
    assert report.main(["--bench", str(tmp_path / "bench.json"), "--fid", a, b, "--output", str(out)]) == 0
    md = (out / "report.md").read_text()
    assert "| sjd:window=16 | 2.50x | 1.80x | 5.100 | 1000 | domain |" in md and "floor at the same N: 1.200" in md
    assert (out / "fid_vs_speed.png").stat().st_size > 0 and str(tmp_path) not in md
    capsys.readouterr()
    for changes, reason in (({"model": "t2i"}, "model 't2i' (FID) vs 'c2i' (bench)"),
                            ({"model_sha256": "def"}, "same name, different weights"),
                            ({"guidance_scale": 4.0}, "sampling guidance_scale 4.0 (FID) vs 3.0 (bench)"),
                            ({"top_k": 100}, "sampling top_k"), ({"dtype": "bfloat16"}, "dtype 'bfloat16'")):
        bad = fid_record("bad", "sjd", {"window": 16}, 5.1, **changes)
        assert report.main(["--bench", str(tmp_path / "bench.json"), "--fid", a, bad, "--output",
                            str(tmp_path / "refused")]) == 2, changes
        err = capsys.readouterr().err
        assert "cannot join the bench record of 'sjd:window=16'" in err and reason in err, (changes, err)
    assert not (tmp_path / "refused").exists()
    (tmp_path / "quick.json").write_text(json.dumps([{**r, "quick": True} for r in bench_records]))
    assert report.main(["--bench", str(tmp_path / "quick.json"), "--fid", a, b, "--output",
                        str(tmp_path / "refused")]) == 2
    assert "a quick run (arvis bench --quick: one round) is not a measurement" in capsys.readouterr().err


def test_method_extras_are_aggregated_over_samples():
    from arvis.engine.stats import BatchStats, DecodeStats, summarize

    def stats(tv: float, max_tv: float) -> DecodeStats:
        return DecodeStats(method="speculative", tokens=4, target_forwards=2, draft_forwards=8,
                           accepted_per_forward=[2, 2], commit_forward=[0, 0, 1, 1],
                           extra={"mean_tv_per_token": tv, "max_tv_per_token": max_tv, "tv_kind": "realised (exact)"})

    batch = BatchStats(samples=[stats(0.02, 0.05), stats(0.04, 0.09)], batch_target_forwards=2,
                       batch_draft_forwards=8, latency_s=1.0, peak_memory_mb=0.0)
    extra = summarize([batch], details=True)["extra"]
    assert extra["mean_tv_per_token"] == pytest.approx(0.03)
    assert extra["max_tv_per_token"] == pytest.approx(0.09)
    assert extra["tv_kind"] == "realised (exact)"

    # Separate decodes (batch 1) report different dicts and lists: averaged per key / index over those reporting it,
    # not dropped (the window policy's record of what it chose); a list of non-numbers that differs is dropped.
    def decode(extra: dict) -> BatchStats:
        return BatchStats(samples=[DecodeStats(method="mc-sjd", tokens=4, target_forwards=2, draft_forwards=0,
                                               accepted_per_forward=[2, 2], commit_forward=[0, 0, 1, 1], extra=extra)],
                          batch_target_forwards=2, batch_draft_forwards=0, latency_s=1.0, peak_memory_mb=0.0)

    first = {"windows_chosen": {"16": 60, "32": 4}, "acceptance_by_offset": [0.5, 0.8], "trace": [[1, 16]]}
    second = {"windows_chosen": {"16": 40, "8": 10}, "acceptance_by_offset": [0.7], "trace": [[1, 8]]}
    extra = summarize([decode(first), decode(second)], details=True)["extra"]
    assert extra["windows_chosen"] == {"16": 50, "32": 4, "8": 10}
    assert extra["acceptance_by_offset"] == pytest.approx([0.6, 0.8])
    assert "trace" not in extra


def _load_script(name: str):
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"arvis_eval_{name}",
                                                  REPO_ROOT / "eval" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_figures_jobs_are_real_commands_and_tables_come_from_records(tmp_path, capsys):
    figures = eval_module("figures")
    run = figures.plan(["--suite", "zipar", "--model", "tiny-random", "--out", str(tmp_path), "--fid-num", "16",
                        "--samples", "2"])
    jobs, suite, settings = run.jobs["zipar"], figures.SUITES["zipar"], run.settings["zipar"]
    bench_job = jobs[0]
    # Every bench job's method list parses with the real spec parser and names real methods.
    specs = parse_method_specs(bench_job.args[bench_job.args.index("--method") + 1])
    assert [s.name for s in specs][:4] == ["ar", "zipar", "zipar", "zipar"]
    assert all(s.name in METHODS[DecoderKind.TOKEN] for s in specs)
    assert figures.main(["--suite", "zipar", "--model", "tiny-random", "--out", str(tmp_path), "--list"]) == 0
    assert capsys.readouterr().out.count("[todo]") == len(jobs)

    record = {"spec": "zipar:row_lag=4", "lossless": False, "target_forwards": 88.0, "draft_forwards": 0.0,
              "step_compression": 256 / 88, "accepted_per_forward": 256 / 88, "latency_s": 0.5, "speedup": 2.5,
              "samples": 2, "batch_size": 1, "repeats": 5, "warmup": 1, "sampling": {"guidance_scale": 3.0},
              "forward_cost": [{"positions": 1, "ms": 2.0, "ratio": None}, {"positions": 2, "ms": 3.0, "ratio": 1.5}]}
    bench_job.output.parent.mkdir(parents=True)
    bench_job.output.write_text(json.dumps([record]))
    (tmp_path / "fid").mkdir()
    for seed, value in ((0, 10.0), (1, 10.6)):
        (tmp_path / "fid" / f"ar-seed{seed}.json").write_text(json.dumps(
            {"method": "ar", "options": {}, "seed": seed, "fid": value, "num_generated": 16}))
    jobs[2].output.write_text(json.dumps({"method": "zipar", "options": {"row_lag": 4}, "seed": 0, "fid": 11.25,
                                          "num_generated": 16, "real_vs_real_floor": 1.5}))
    md = suite.write_page(settings, jobs)[-1].read_text()
    assert "| `zipar:row_lag=4` | no | 88.0 | 0.0 | 2.91x | 2.91 | 0.500 | 2.50x | 11.25 (16) |" in md
    assert "| `zipar:row_lag=4` | 0 | 16 | 11.25 | 1.50 |" in md and "|ΔFID| = 0.60" in md
    assert "| ms / forward | 2.00 | 3.00 |" in md
    # The model's next-token statistics (its own record, first) beside the other figure sets'.
    tokens = next(j for j in jobs if j.name == "tokens")
    assert tokens.display().startswith("python eval/token_stats.py --model tiny-random")
    tokens.output.write_text(json.dumps({"model": "tiny-random", "samples": 64, "guidance_scale": 3.0, "entropy": 1.234,
                                         "top1": 0.5, "fraction_positions_top1_over_0.9": 0.25, "accept_uniform_draft": 0.1,
                                         "accept_upper_neighbour": 0.4, "repeat_left_prob": 0.3}))
    md = suite.write_page(settings, jobs)[-1].read_text()
    rows = md[md.index("## How predictable each model is"):].splitlines()
    assert next(r for r in rows if r.startswith("| `tiny-random`")).startswith("| `tiny-random` (this page) | 64 | 3.0 | off | 1.23 |")


def test_specs_needing_pipeline_resources_parse_without_a_pipeline():
    """A draft model / codebook neighbourhoods come from the pipeline at run time, not at parse time."""
    specs = parse_method_specs("speculative:window=4;sjd:window=8,acceptance=lantern;mc-sjd:acceptance=bounded")
    assert [s.name for s in specs] == ["speculative", "sjd", "mc-sjd"]
    with pytest.raises(ValueError, match="window must be"):
        parse_method_specs("speculative:window=0")


def test_relaxed_acceptance_makes_any_method_lossy():
    from arvis.methods import is_lossless

    assert is_lossless("sjd", {"window": 8}) and is_lossless("speculative", {"acceptance": "exact"})
    assert not is_lossless("sjd", {"acceptance": "bounded"}) and not is_lossless("speculative", {"acceptance": "lantern"})
    assert not is_lossless("zipar", {})


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_bench_runs_on_cuda():
    model = tiny_llamagen(grid=4, vocab=32).to("cuda")
    inputs = token_inputs(model, 2)
    inputs.device = torch.device("cuda")
    inputs.batches = [(idx, Condition(class_labels=c.class_labels.cuda())) for idx, c in inputs.batches]
    result = run_bench(inputs, parse_method_specs("ar;mc-sjd:window=4"), SamplingConfig(guidance_scale=2.0),
                       repeats=5, forward_cost_sizes=(1, 4), progress=False)
    for r in result.records:
        assert r["target_forward_s"] > 0 and r["deterministic"] and r["host_syncs_per_iteration"] <= 1.5


def test_figures_reruns_records_of_other_weights(tmp_path, monkeypatch, capsys):
    """A record measured on other weights than the model's now is stale: listed as such and run again."""
    figures = eval_module("figure_runner")
    monkeypatch.setattr(figures, "current_model_sha256", lambda model: "new0000000000000")
    out = tmp_path / "record.json"
    write = f"import json, pathlib; pathlib.Path({str(out)!r}).write_text(json.dumps([{{'model_sha256': 'new0000000000000'}}]))"
    job = figures.Job("x", "script", ["-c", write, "--model", "mine"], out)
    assert job.model() == "mine" and job.status() == "todo"
    out.write_text(json.dumps([{"model_sha256": "old0000000000000", "latency_s": 1.0}]))
    assert job.status() == "stale"
    figures.list_jobs([job])
    assert capsys.readouterr().out.startswith("[stale] x:")
    assert figures.run_missing_jobs([job]) == 0 and job.status() == "done"
    assert json.loads(out.read_text()) == [{"model_sha256": "new0000000000000"}]  # measured again
    out.write_text(json.dumps({"fid": 3.0}))  # a record that names no weights is kept
    assert job.status() == "done"

    # A stage of a page's second model (the MAR page's causal pair) is checked against that model, not --model.
    monkeypatch.setattr(figures, "current_model_sha256", {"first": "aaaa", "second": "bbbb"}.get)
    settings = argparse.Namespace(stage_argv=["--model", "first"], out=tmp_path, causal_model="second")
    stage = figures.Stage("acceptance", "stage.json", lambda s: None, model_setting="causal_model").job(settings)
    (tmp_path / "stage.json").write_text(json.dumps({"model_sha256": "bbbb"}))
    assert stage.model() == "second" and stage.status() == "done"
    (tmp_path / "stage.json").write_text(json.dumps({"model_sha256": "aaaa"}))
    assert stage.status() == "stale"


# ----------------------------------------------------------------------------- issue 37: quick runs, honest notes
def test_quick_bench_is_one_round_and_labelled_not_a_measurement(windowed, monkeypatch, tmp_path, capsys):
    import arvis.pipelines.pipeline_llamagen as llamagen

    calls = []
    real_decode = llamagen.decode  # what the tiny-random pipeline's bench inputs decode with
    monkeypatch.setattr(llamagen, "decode", lambda *a: calls.append(a[3].name) or real_decode(*a))
    out = tmp_path / "quick.json"
    assert main(["bench", "--model", "tiny-random", "--quick", "--method", "test-windowed:window=2", "--num-images",
                 "1", "--json", str(out), "--markdown", str(tmp_path / "q.md"), "--no-progress", "--threads", "1"]) == 0
    assert calls == ["ar", "test-windowed"] * 2  # one warm-up and one timed round; no extra sync-count decode
    text = capsys.readouterr().out
    assert "QUICK RUN: one warm-up and one timed round; not a measurement" in text
    assert "repeats=1 (QUICK: not a measurement, warm-up 1)" in text
    assert "**QUICK RUN" in (tmp_path / "q.md").read_text()
    for r in json.loads(out.read_text()):
        assert r["quick"] and r["repeats"] == 1 and len(r["latency_repeats_s"]) == 1 and "host_syncs" not in r
    # Without --quick the protocol's minimum stands, and says how to get a quick look.
    assert main(["bench", "--model", "tiny-random", "--repeats", "2", "--no-progress"]) == 2
    assert "repeats must be an integer >= 5" in capsys.readouterr().err
    with pytest.raises(ValueError, match="--quick for a look"):
        bench.check_settings(samples=1, repeats=1, warmup=1, batch_size=1)
    bench.check_settings(samples=1, repeats=1, warmup=1, batch_size=1, quick=True)


def _record(spec, forwards, fwd_s, out_s, speedup, ideal, draft_s=0.0):
    return {"spec": spec, "target_forward_s": fwd_s, "draft_forward_s": draft_s, "outside_s": out_s,
            "outside_share": out_s / (fwd_s + draft_s + out_s), "speedup": speedup, "ideal_speedup": ideal,
            "target_forwards": forwards}


def test_ideal_below_measured_is_explained_from_the_records_own_time_split():
    # AR: 256 forwards, 1.28 s inside them, 1.0 s outside (sampling per token); the method: 4x fewer forwards at
    # 2x the cost each, and a quarter of AR's outside time. Ideal (forwards only): 2.0x; measured: 2.38x.
    ar = _record("ar", 256, 1.28, 1.0, 1.0, 1.0)
    (note,) = bench.ideal_notes([ar, _record("m:window=8", 64, 0.64, 0.32, 2.28 / 0.96, 2.0)])
    assert note.startswith("m:window=8: measured 2.38x > ideal 2.00x. 'Ideal' counts time inside target forwards only")
    assert "AR spent 1.280 s in forwards and 1.000 s outside them (44%" in note
    assert note.endswith("Why: the time outside forwards shrank 3.12x, more than the forward time (2.00x): AR pays "
                         "sampling and bookkeeping per token, m:window=8 per forward")
    # Forwards that shrank more inside the decode than the curve prices them.
    (note,) = bench.ideal_notes([ar, _record("m", 64, 0.512, 0.5, 2.28 / 1.012, 2.0)])
    assert "Why: the forwards timed inside the decode shrank 2.50x, more than the curve's 2.00x" in note
    assert "outside forwards shrank" not in note
    (note,) = bench.ideal_notes([ar, _record("m", 64, 0.66, 0.55, 2.05, 2.0)])
    assert note.endswith("the difference is timing noise between rounds")
    assert bench.ideal_notes([ar, _record("m", 64, 0.64, 0.5, 1.9, 2.0)]) == []  # measured below ideal: nothing


def test_forward_cost_dips_are_flagged_with_the_spread_of_their_timings():
    def point(t, ms, ms_min, iqr):
        return {"positions": t, "ms": ms, "ms_min": ms_min, "ms_iqr": iqr, "ratio": None}

    curve = [point(1, 5.0, 4.9, 0.1), point(2, 4.95, 4.8, 0.2), point(4, 6.0, 5.8, 0.1), point(8, 5.0, 5.85, 0.1),
             point(16, 7.0, 6.9, 0.1), point(32, 6.0, 5.9, 0.1)]
    notes = bench.curve_dips(curve)
    assert notes == [
        "T=2 costs 4.950 ms, less than T=1 (5.000 ms): 0.050 ms, within the spread of the timings (noise from other "
        "work on the machine) (spread 0.200 ms)",
        "T=8 costs 5.000 ms, less than T=4 (6.000 ms): 1.000 ms, but the minima rise: noise (spread 0.100 ms)",
        "T=32 costs 6.000 ms, less than T=16 (7.000 ms): 1.000 ms, beyond the spread, in the minima too: this shape "
        "really runs faster here (spread 0.100 ms)"]
    assert [r[0] for r in bench.cost_rows(curve)] == ["1", "2*", "4", "8*", "16", "32*"]
    old = [{"positions": 1, "ms": 2.0, "ratio": 1.0}, {"positions": 2, "ms": 3.0, "ratio": 1.5}]  # older records
    assert bench.cost_rows(old) == [["1", "2.000", "-", "1.00x"], ["2", "3.000", "-", "1.50x"]]
    assert bench.curve_dips(old) == []


@pytest.mark.parametrize("name", ["bench", "fid"])
def test_help_defaults_are_the_defaults_argparse_applies(name):
    import argparse

    from arvis.cli import build_parser
    from arvis.eval import defaults

    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)).choices[name]
    for action in sub._actions:
        default = action.default
        if isinstance(default, bool) or default in (None, argparse.SUPPRESS) or not action.help:
            continue
        text = action.help % {"default": default}
        assert f"default {default}" in text or f"default and minimum {default}" in text, (action.dest, text)
    if name == "bench":
        text = " ".join(sub.format_help().split())  # unwrapped
        assert f"default and minimum {defaults.MIN_REPEATS}" in text and f"with --quick {defaults.QUICK_REPEATS})" in text


def test_no_progress_turns_off_the_model_loaders_bars():
    import diffusers.utils.logging as dlog
    import huggingface_hub.utils as hlog

    from arvis import cli_args

    assert dlog.is_progress_bar_enabled()
    with cli_args.progress_bars(False):
        assert not dlog.is_progress_bar_enabled() and hlog.are_progress_bars_disabled()
    assert dlog.is_progress_bar_enabled() and not hlog.are_progress_bars_disabled()
    with cli_args.progress_bars(True):
        assert dlog.is_progress_bar_enabled()


def test_ideal_of_a_chosen_window_prices_the_windows_it_chose():
    """A method that chooses its window per forward (window=auto) has no fixed T: its ideal prices the windows its
    trace chose (or else its mean window), between the curve's measured sizes; a method with neither has none."""
    from arvis.eval.bench import ideal_speedup

    curve = [{"positions": 1, "ms": 1.0}, {"positions": 5, "ms": 2.0}]
    auto = {"positions_per_forward": None, "target_forwards": 64, "extra": {"mean_window": 2.0}}
    assert ideal_speedup(auto, 256, curve) == pytest.approx(256 / 64 * 1.0 / 1.5)  # T = 3: halfway, 1.5 ms
    assert ideal_speedup({"positions_per_forward": None, "target_forwards": 64}, 256, curve) is None
    # With the trace of windows it chose, every forward is priced at its own window (cost is not linear in T).
    traced = {**auto, "extra": {"mean_window": 2.0, "window_trace": [[1, 0], [2, 4], [7, 2]]}}
    assert ideal_speedup(traced, 256, curve) == pytest.approx(256 / 64 * 1.0 / ((1.0 + 2.0 + 1.5) / 3))


def test_relaxed_rules_time_without_their_tv_and_report_it_from_one_more_decode():
    """LANTERN / GSD compute their exact realised TV only with tv=true (a sizeable share of a step): the bench times
    them without it and measures it in one extra untimed decode, so the record has both."""
    from arvis.acceptance.neighbours import nearest_neighbours

    model = tiny_llamagen(grid=4, vocab=32)
    nb = nearest_neighbours(torch.randn(32, 4, generator=torch.Generator().manual_seed(2)), 10)
    inputs = token_inputs(model, 2)
    built: list[dict] = []

    def build(name: str, options: dict):
        built.append(dict(options))
        return build_method(name, resources={"neighbours": nb}, **options)

    inputs.build = build
    result = run_bench(inputs, parse_method_specs("ar;gsd:window=4;mc-sjd:window=4,acceptance=bounded;zipar:row_lag=2"),
                       SamplingConfig(guidance_scale=2.0), repeats=5, forward_cost_sizes=(), progress=False,
                       count_syncs=False)
    by_spec = {r["spec"]: r for r in result.records}
    gsd = by_spec["gsd:window=4"]["extra"]
    assert gsd["tv_kind"].startswith("realised") and 0 < gsd["mean_tv_per_token"] <= gsd["max_tv_per_token"] <= 1
    assert {"window": 4, "tv": True} in built  # the one decode that measured it
    assert "mean_tv_per_token" in by_spec["mc-sjd:window=4,acceptance=bounded"]["extra"]  # bounded: always measured
    assert "mean_tv_per_token" not in by_spec["zipar:row_lag=2"]["extra"]  # no acceptance rule: nothing to measure
    assert not any(o.get("tv") for o in built if o != {"window": 4, "tv": True})  # timed methods never measured it
