"""The arvis command line: one grammar across subcommands, outputs that never mix runs, side by side."""

from __future__ import annotations

import argparse
import json
import os
import re
import sys

import numpy as np
import PIL.Image
import pytest
import torch

from arvis.cli import main
from tests import REPO_ROOT


def run(argv, tmp_path=None):
    return main([*argv, "--threads", "1", "--no-progress"])


# ----------------------------------------------------------------------------- one grammar, documented
def subparsers() -> dict[str, argparse.ArgumentParser]:
    from arvis.cli import build_parser

    parser = build_parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def test_help_lists_subcommands_and_version(capsys):
    assert main([]) == 0
    out = capsys.readouterr().out
    assert all(name in out for name in ("generate", "methods", "bench", "fid", "clip-score", "demo"))
    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0
    from arvis import __version__

    assert capsys.readouterr().out.strip() == f"arvis {__version__}"


def test_every_flag_of_every_subcommand_has_help_text():
    for name, parser in subparsers().items():
        for action in parser._actions:
            if action.option_strings and not isinstance(action, argparse._HelpAction):
                assert action.help, f"arvis {name} {action.option_strings[0]} has no help text"


def test_the_same_flag_means_the_same_everywhere():
    """Counts, batches, methods, seeds and runtime flags have one name, one type and one default rule."""
    import eval.sample

    parsers = subparsers()
    parsers["eval/sample.py"] = eval.sample.build_parser()
    for name in ("generate", "bench", "fid", "eval/sample.py"):
        actions = {o: a for a in parsers[name]._actions for o in a.option_strings}
        for flag in ("--model", "--num-images", "--batch-size", "--seed", "--method", "--threads", "--dtype",
                     "--device", "--guidance-scale", "--top-k", "--top-p", "--temperature", "--no-progress"):
            assert flag in actions, f"{name} lacks {flag}"
        assert "images per pipeline call" in actions["--batch-size"].help
        assert actions["--threads"].default is None and "all" in actions["--threads"].help  # all cores
        assert all(actions[f].default is None for f in ("--guidance-scale", "--top-k", "--top-p", "--temperature"))
        for old in ("--samples", "--num-samples", "--methods", "--option", "--sample-batch-size"):
            assert old not in actions, f"{name} still has {old}"
    demo = {o: a for a in parsers["demo"]._actions for o in a.option_strings}
    assert demo["--share"].nargs == 0  # a flag, not --share true
    assert demo["--threads"].default is None


def test_the_cli_grammar_is_documented_once():

    doc = (REPO_ROOT / "docs" / "cli.md").read_text()
    for flag in ("--num-images", "--batch-size", "--method", "--seed", "--threads", "--share", "--version",
                 "--overwrite", "--feature-batch-size"):
        assert flag in doc, flag


# ----------------------------------------------------------------------------- generate: outputs
def test_generate_writes_pngs_with_their_parameters_and_per_image_stats(tmp_path, capsys):
    from arvis.hub import tiny_random_pipeline
    from arvis.utils.random import image_generator, seed_for

    out_dir = tmp_path / "out"
    assert run(["generate", "--model", "tiny-random", "--class-ids", "0,b", "--num-images", "3", "--seed", "3",
                "--output", str(out_dir)]) == 0
    assert sorted(p.name for p in out_dir.iterdir()) == ["0000.png", "0001.png", "0002.png", "stats.json"]
    stats = json.loads((out_dir / "stats.json").read_text())
    assert stats["model"] == "tiny-random" and stats["sampling"]["guidance_scale"] == 4.0  # the model's default
    images = stats["images"]
    assert [i["class_label"] for i in images] == [0, 1, 0] and [i["class_name"] for i in images] == ["a", "b", "a"]
    assert [i["generator_seed"] for i in images] == [seed_for(3, i) for i in range(3)]
    assert all(i["target_forwards"] == 256 and i["method"] == "ar" and "batch_latency_s" in i for i in images)
    with PIL.Image.open(out_dir / "0002.png") as im:
        meta = json.loads(im.info["arvis"])
    assert meta["class_label"] == 0 and meta["generator_seed"] == seed_for(3, 2) and meta["model"] == "tiny-random"
    assert meta["sampling"]["guidance_scale"] == 4.0 and im.info["Software"].startswith("arvis ")
    # The recorded seed reproduces the image from Python: the one per-image seed rule.
    pipe = tiny_random_pipeline()
    pipe.set_progress_bar_config(disable=True)
    again = pipe(class_labels=[0], generator=image_generator(3, 2), output_type="pil").images[0]
    with PIL.Image.open(out_dir / "0002.png") as im:
        assert np.array_equal(np.asarray(again), np.asarray(im.convert("RGB")))
    assert "step_compression=1.00x" in capsys.readouterr().out


def test_each_run_gets_its_own_folder_and_a_used_folder_needs_overwrite(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    for _ in range(2):
        assert run(["generate", "--model", "tiny-random", "--class-ids", "1"]) == 0
    runs = sorted((tmp_path / "outputs").iterdir())
    assert len(runs) == 2 and all(sorted(p.name for p in r.iterdir()) == ["0000.png", "stats.json"] for r in runs)

    target = tmp_path / "mine"
    assert run(["generate", "--model", "tiny-random", "--class-ids", "1", "--num-images", "3",
                "--output", str(target)]) == 0
    (target / "notes.txt").write_text("keep me")
    capsys.readouterr()
    assert run(["generate", "--model", "tiny-random", "--class-ids", "2", "--output", str(target)]) == 2
    assert "is not empty" in capsys.readouterr().err and (target / "0002.png").is_file()
    assert run(["generate", "--model", "tiny-random", "--class-ids", "2", "--output", str(target),
                "--overwrite"]) == 0
    # The earlier run's images are gone (no stale 0001/0002 mixed in); other files stay.
    assert sorted(p.name for p in target.iterdir()) == ["0000.png", "notes.txt", "stats.json"]
    assert json.loads((target / "stats.json").read_text())["images"][0]["class_label"] == 2


def test_generate_side_by_side_shows_acceleration_and_gumbel_reproduces_ar(tmp_path, capsys):
    out_dir = tmp_path / "cmp"
    assert run(["generate", "--model", "tiny-random", "--class-ids", "0,3", "--num-images", "2",
                "--method", "mc-sjd:window=16,coupling=gumbel", "--method", "zipar:row_lag=2",
                "--output", str(out_dir)]) == 0
    text = capsys.readouterr().out
    assert re.search(r"^ar\s", text, re.M) and "identical to AR" in text
    stats = json.loads((out_dir / "stats.json").read_text())
    rows = {m["spec"]: m for m in stats["methods"]}
    assert list(rows) == ["ar", "mc-sjd:window=16,coupling=gumbel", "zipar:row_lag=2"]  # AR added first
    gumbel, zipar = rows["mc-sjd:window=16,coupling=gumbel"], rows["zipar:row_lag=2"]
    assert gumbel["identical_to_ar"] is True and gumbel["lossless"] and gumbel["target_forwards"] < 256
    assert zipar["lossless"] is False and zipar["target_forwards"] == 60  # 16 + 15*2 + ... ZipAR's schedule
    assert rows["ar"]["identical_to_ar"] is None and rows["ar"]["speedup"] == 1.0
    for folder in ("ar", "mc-sjd_window-16_coupling-gumbel", "zipar_row_lag-2"):
        assert sorted(p.name for p in (out_dir / folder).iterdir()) == ["0000.png", "0001.png"]
    for name in ("0000.png", "0001.png"):  # the same PNG bytes as AR (the metadata names the method)
        with PIL.Image.open(out_dir / "ar" / name) as a, \
                PIL.Image.open(out_dir / "mc-sjd_window-16_coupling-gumbel" / name) as b:
            assert np.array_equal(np.asarray(a), np.asarray(b))
    with PIL.Image.open(out_dir / "side_by_side.png") as sheet:
        assert sheet.width > 3 * 128


def test_model_defaults_decide_guidance_unless_a_flag_overrides(tmp_path):
    from arvis.hub import tiny_random_pipeline

    pipe = tiny_random_pipeline()
    pipe.sampling_defaults = {"guidance_scale": 2.5, "top_k": 7}
    pipe.save_pretrained(tmp_path / "model")
    for extra, expected in (([], (2.5, 7)), (["--guidance-scale", "1.5"], (1.5, 7))):
        out = tmp_path / f"out{len(extra)}"
        assert run(["generate", "--model", str(tmp_path / "model"), "--class-ids", "0", "--output", str(out),
                    *extra]) == 0
        s = json.loads((out / "stats.json").read_text())["sampling"]
        assert (s["guidance_scale"], s["top_k"]) == expected


def test_records_name_models_without_absolute_paths(tmp_path, monkeypatch):
    from arvis.hub import tiny_random_pipeline

    tiny_random_pipeline().save_pretrained(tmp_path / "models" / "mine")
    monkeypatch.chdir(tmp_path)
    assert run(["generate", "--model", str(tmp_path / "models" / "mine"), "--class-ids", "0",
                "--output", "out"]) == 0
    text = (tmp_path / "out" / "stats.json").read_text()
    stats = json.loads(text)
    assert stats["model"] == "models/mine" and re.fullmatch(r"[0-9a-f]{16}", stats["model_sha256"])
    assert str(tmp_path) not in text and os.sep + "tmp" not in text


def test_bad_input_exits_2_and_writes_nothing(tmp_path, capsys):
    out_dir = tmp_path / "out"
    for argv in (["--class-ids", "99"], ["--top-k", "-3"], ["--method", "nope"], ["--top-p", "2"],
                 ["--guidance-scale", "-1"], ["--method", "ar:window=3"], ["--method", "sjd:window=0"]):
        rc = run(["generate", "--model", "tiny-random", "--output", str(out_dir), *argv])
        assert rc == 2, argv
        assert not out_dir.exists(), argv
    err = capsys.readouterr().err
    assert "--class-ids: 99 is not a class id" in err and "top_k must be" in err and "unknown method" in err
    assert run(["generate", "--model", str(tmp_path / "nowhere"), "--output", str(out_dir)]) == 2
    assert "neither a shipped model" in capsys.readouterr().err


def test_bench_compares_methods_against_ar(tmp_path, capsys):
    out = tmp_path / "bench.json"
    assert run(["bench", "--model", "tiny-random", "--method", "sjd:window=8", "--num-images", "1",
                "--no-forward-cost", "--json", str(out)]) == 0
    records = json.loads(out.read_text())
    assert [r["spec"] for r in records] == ["ar", "sjd:window=8"] and records[0]["model"] == "tiny-random"
    assert "model_sha256" in records[0] and torch.get_num_threads() >= 1


@pytest.mark.parametrize(("spec", "message"), [
    ("speculative:draft_model=1", "draft_model is not an option: the pipeline supplies it"),
    ("sjd:acceptance=lantern,neighbours=[1,2]", "neighbours is not an option"),
    ('mulo:upsampler="x"', "upsampler is not an option"),
    ("mulo:lowres_model=0", "lowres_model is not an option"),
    ("sjd:neighbours=[1,2]", "neighbours is not an option"),
    ("sjd:window=16,window=8", "option 'window' of 'sjd' given twice"),
    ("speculative:gamma=4", "option 'gamma' is now called 'window'"),
    ("zipar:window=4", "option 'window' is now called 'row_lag'"),
])
def test_resources_duplicates_and_old_spellings_are_refused_before_anything_loads(spec, message, tmp_path, capsys,
                                                                                  monkeypatch):
    """Issue 36, root cause 6: what a pipeline supplies is never a user option; a key given twice and an old
    spelling are refused (one line, exit 2) before any model loads."""
    import arvis.hub

    monkeypatch.setattr(arvis.hub, "load_pipeline", lambda *a, **k: pytest.fail("loaded a model"))
    assert run(["generate", "--model", "tiny-random", "--method", spec, "--output", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and "Traceback" not in err


def test_an_inapplicable_method_is_refused_from_the_folder_in_milliseconds(capsys, monkeypatch):
    """`arvis generate --model var --method mc-sjd` is refused from the folder's metadata: no model loads, and in a
    fresh process no torch is imported."""
    import subprocess
    import time

    import arvis.hub

    monkeypatch.setattr(arvis.hub, "load_pipeline", lambda *a, **k: pytest.fail("loaded a model"))
    for model, method in (("var", "mc-sjd"), ("mar", "zipar"), ("mar-causal", "cspd"), ("mar", "cspd-exact")):
        if model not in arvis.hub.shipped_names():
            continue
        assert run(["generate", "--model", model, "--method", method]) == 2
        err = capsys.readouterr().err
        assert f"'{method}'" in err and err.count("\n") == 1, err
    code = ("import sys, time; t = time.perf_counter(); from arvis.cli import main; rc = main(['generate', '--model', "
            "'var', '--method', 'mc-sjd']); print(rc, 'torch' in sys.modules, round(time.perf_counter() - t, 2))")
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    wall = time.perf_counter() - t0
    rc, torch_loaded, _ = out.stdout.split()
    assert rc == "2" and torch_loaded == "False", out
    assert wall < 10, wall  # seconds, with Python's own start-up; the check itself is milliseconds
