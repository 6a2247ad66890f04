"""The documentation runs: every command and Python example in README.md and docs/*.md is executed here,
at small sizes, so the docs cannot drift from the code.

How: each document's ```bash and ```python blocks run in order, in a fresh working folder per document
(so a later command can read what an earlier one wrote, as a reader following the page would).
``arvis …`` and ``python eval/X.py …`` run in-process; ``make demo`` runs the Makefile's demo recipe.
Sizes shrink (``--num-images`` at most 2 — 1 for ``arvis bench`` —, also where a command leaves it to its default,
``--per-class`` 1, ``--ref-num`` 16, one timing round, ``--repeats`` 5 — the protocol's minimum — and no forward-cost
curve); nothing else about a command changes. The few commands that cannot run here
are listed in :data:`NOT_RUN` with the reason and the test that covers them instead; an entry that matches
no documented command fails, so the list cannot go stale either.

Also checked: the repository never points at design notes outside it, nor at absolute paths of this machine.
"""

from __future__ import annotations

import json
import re
import shlex
import sys
from pathlib import Path

import pytest

from tests import REPO_ROOT as ROOT

DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

# Commands that cannot run inside the test suite: (pattern, why, what covers them instead).
NOT_RUN = [
    (r"^make test\b", "the test suite itself", "this suite"),
    (r"^(torchrun|accelerate launch)\b", "starts several processes",
     "tests/eval/test_eval_sampling.py (two gloo ranks; the real torchrun launch under -m slow)"),
    (r"^arvis demo\b", "serves until stopped", "tests/demo/test_demo.py (launches `arvis demo` on 127.0.0.1)"),
    (r"--extractor inception:", "needs the Inception weights file, not shipped", "tests/eval/test_eval_fid.py"),
    (r"--clip-model ViT-B-32 --weights", "needs open_clip's ViT-B-32 weights file, not shipped",
     "tests/eval/test_eval_clip.py (registered architecture + local weights)"),
    (r"c2i_XL_384\.pt", "needs an official LlamaGen checkpoint (not shipped)", "tests/models/test_checkpoints.py"),
    (r"Emu3-Gen-hf", "needs the official Emu3 weights (not shipped)",
     "tests/pipelines/emu3/test_emu3_pipeline.py (official-layout folders written by the test)"),
    (r"arvis/weights/video-emoji", "rewrites the shipped video model's folder (assemble, card)",
     "tests/pipelines/video/test_video.py::test_train_video_smoke_assemble_and_card"),
    (r"^python -m arvis\.training\.train_video", "trains the video GPT or the video feature network (an hour or "
     "more on this CPU)", "tests/pipelines/video/test_video.py (train_video and train_video_features smoke runs, assemble, card)"),
    (r"^python eval/cards\.py --model arvis/weights/video-features --evaluate", "evaluates the shipped feature "
     "network on 400 held-out clips and rewrites its card (minutes)",
     "tests/pipelines/video/test_video.py::test_train_video_features_smoke (the card script on a smoke-trained network)"),
    (r"^python eval/video_tokenizer\.py", "encodes 200 held-out clips and 4,000 reference frames (minutes)",
     "tests/eval/test_video_metrics.py (the script's temporal candidate on a tiny Emu3VQVAE)"),
    (r"^python eval/video_temporal_drafting\.py", "needs a train_video checkpoint (runs/video/run/checkpoint.pt)",
     "tests/pipelines/video/test_video_lossless.py (the script's measurements on a tiny video model)"),
    (r"^python eval/figures\.py --suite video\b", "times every method on the shipped video model and samples 96 clips per "
     "method (tens of minutes)",
     "no end-to-end test; its stages are covered: run_bench on a video model "
     "(tests/pipelines/video/test_video.py::test_cli_bench_on_a_video_model), the video metrics (tests/eval/test_video_metrics.py), "
     "the lossless cases (tests/pipelines/video/test_video_lossless.py)"),
    (r"pretrained_models/mar/", "needs the official MAR checkpoint and KL-16 VAE (not shipped)",
     "tests/pipelines/test_mar.py (tiny checkpoints in the official layouts, loaded and round-tripped)"),
    (r"^python -m arvis\.training\.train_mar", "trains the MAR VAE and transformers (hours on this CPU) or assembles "
     "their exports", "tests/training/test_mar_training.py (smoke presets: train, export, resume, reload, assemble, generate)"),
    (r"^python eval/mar_train_cost\.py", "times full-size training steps (minutes on this CPU)",
     "tests/training/test_mar_training.py (the losses it times, on smoke presets)"),
    (r"^python eval/figures\.py --suite mar (--model|--reference-repo)", "needs the trained MAR pairs or an LTH14/mar checkout",
     "tests/eval/test_mar_figures.py (job list, acceptance task on a tiny folder, page from records)"),
    (r"^python -m arvis\.training\.(train_var_vq|train_var)\b|--out arvis/weights/var-photos\b",
     "trains the retired photo VAR tokenizer and pair (hours on this CPU) and assembles them",
     "tests/training/test_var_training.py (tokenizer then transformer smoke runs) and "
     "tests/training/test_emoji_training.py::test_assemble_records_the_data_set"),
    (r"--suite latency", "times every method for about 25 minutes and needs reference checkouts",
     "tests/eval/test_eval_bench.py (the figures script on a tiny model)"),
]
SIZE_FLAGS = {"--num-images": 2, "--ref-num": 16, "--rounds": 1, "--per-class": 1, "--repeats": 5}


def blocks(path: Path) -> list[tuple[str, str]]:
    """``(language, text)`` of the fenced bash and python blocks of a Markdown file, in order."""
    return [(m.group(1), m.group(2)) for m in re.finditer(r"```(bash|python)\n(.*?)```", path.read_text(), re.S)]


def commands(text: str) -> list[str]:
    """Shell commands of a bash block: continuation lines joined, comments and blank lines dropped."""
    text = text.replace("\\\n", " ")
    out = []
    for line in text.splitlines():
        line = re.sub(r"(^|\s)#.*$", "", line).strip()
        if line:
            out.extend(part.strip() for part in line.split(" ; ") if part.strip())
    return out


def not_run(command: str) -> tuple[str, str] | None:
    for pattern, why, covered in NOT_RUN:
        if re.search(pattern, command):
            return why, covered
    return None


def conditions(argv: list[str]) -> int:
    """How many conditions a command names (class ids, prompts); a large number when it names none and takes the
    command's default list."""
    if "--class-ids" in argv:
        return len(argv[argv.index("--class-ids") + 1].split(","))
    return argv.count("--prompt") or 1_000


def shrink(argv: list[str]) -> list[str]:
    out = list(argv)
    for flag, small in SIZE_FLAGS.items():
        if flag in out:
            i = out.index(flag) + 1
            out[i] = str(min(int(out[i]), small))
    if out and out[0] == "fid" and "--ref-num" not in out and "--ref" not in out:
        out += ["--ref-num", "16"]
    # A command that leaves the image count to its default (one per condition, or bench's 2) gets the small count.
    small = SIZE_FLAGS["--num-images"]
    if out and out[0] in ("generate", "bench") and "--num-images" not in out and "--per-class" not in out \
            and conditions(out) > small:
        out += ["--num-images", str(small)]
    if out and out[0] == "bench":
        # --repeats is left to the command: its default is the protocol's minimum, and --quick's one round stays one.
        out = [*out, "--no-forward-cost"]
        if "--num-images" in out:
            out[out.index("--num-images") + 1] = "1"
        else:
            out += ["--num-images", "1"]
    if out and out[0] in ("generate", "bench", "fid", "clip-score"):
        out += ["--threads", "1", "--no-progress"]
    return out


def make_recipe(target: str) -> list[str]:
    """The commands of a Makefile target (its ``arvis …`` lines; the venv set-up is not repeated here)."""
    text = (ROOT / "Makefile").read_text().replace("\\\n", " ")
    match = re.search(rf"^{target}:.*\n((?:\t.*\n?)+)", text, re.M)
    assert match, f"Makefile has no {target} target"
    lines = [line.strip() for line in match.group(1).splitlines()]
    return [re.sub(r"^\$\(VENV\)/bin/", "", line) for line in lines if "arvis" in line and "pip" not in line]


def run_command(command: str) -> None:
    from arvis.cli import main

    argv = shlex.split(command)
    if argv[:2] == ["make", "demo"]:
        for line in make_recipe("demo"):
            run_command(line)
        return
    if argv[0] == "arvis":
        args = shrink(argv[1:])
        if args[0] == "generate" and "--overwrite" not in args:
            args.append("--overwrite")  # a page may repeat an output folder
        rc = main(args)
    elif argv[0] == "python" and argv[1].startswith("eval/"):
        import importlib.util

        script = ROOT / argv[1]
        spec = importlib.util.spec_from_file_location(f"docs_{script.stem}", script)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        args = [str(ROOT / a) if a.startswith("eval/") else a for a in argv[2:]]
        if script.stem == "sample":
            args = shrink(["generate", *args])[1:]
        rc = module.main(args)
    else:
        raise AssertionError(f"the docs test does not know how to run {command!r}: add it to NOT_RUN or teach it")
    assert rc == 0, f"{command!r} exited with {rc}"


def run_python(code: str) -> None:
    code = re.sub(r"(num_images_per_prompt=)\d+", r"\g<1>1", code)
    exec(compile(code, "<docs>", "exec"), {"__name__": "__docs__"})


def prepare(cwd: Path, doc: Path) -> None:
    """Inputs a reader brings along: a captions file beside the images it names; for docs/video.md a first
    frame (``first_frame.png``; ``--model video`` is the shipped model)."""
    if doc.name == "video.md" and not (cwd / "first_frame.png").exists():
        import numpy as np
        import PIL.Image

        PIL.Image.fromarray(np.full((64, 64, 3), 180, np.uint8)).save(cwd / "first_frame.png")
    manifest = cwd / "samples" / "t2i-ar" / "manifest.json"
    if manifest.is_file():
        images = json.loads(manifest.read_text())["images"]
        (cwd / "captions.json").write_text(json.dumps({i["file"]: i["prompt"] for i in images}))


@pytest.mark.parametrize("doc", DOCS, ids=[str(p.relative_to(ROOT)) for p in DOCS])
def test_every_documented_command_runs(doc, tmp_path, monkeypatch, capsys):
    import torch

    monkeypatch.chdir(tmp_path)
    threads = torch.get_num_threads()
    ran = 0
    for language, text in blocks(doc):
        if language == "python":
            if not not_run(text):
                run_python(text)
            ran += 1
            continue
        for command in commands(text):
            if not_run(command):
                continue
            prepare(tmp_path, doc)
            run_command(command)
            torch.set_num_threads(threads)
            ran += 1
    capsys.readouterr()
    if doc == ROOT / "README.md":  # the first screen's commands (docs/README.md is the index: links only)
        assert ran >= 3


def test_the_not_run_list_names_only_documented_commands():
    documented = [c for doc in DOCS for lang, text in blocks(doc)
                  for c in (commands(text) if lang == "bash" else [text])]
    for pattern, _why, _covered in NOT_RUN:
        assert any(re.search(pattern, c) for c in documented), f"NOT_RUN entry {pattern!r} matches no command"


def test_the_t2i_prompts_file_is_the_held_out_captions():
    from arvis.data.scenes import sample_scene

    lines = (ROOT / "eval" / "prompts" / "t2i-scenes-heldout.txt").read_text().splitlines()
    assert len(lines) == 1000
    assert lines[:50] == [sample_scene(3, i, split="heldout").caption for i in range(50)]


def test_the_first_screen_table_quotes_the_records_of_make_demos_methods():
    """README's first table: the methods of the Makefile's demo recipe, with their figures as the committed
    batch-1 records state them (forwards, step compression, lossless) on the default model the demo decodes and,
    beside them, on the photo benchmark model."""
    from arvis.hub import DEFAULT_MODEL

    recipe = shlex.split(make_recipe("demo")[0])
    assert "--model" not in recipe  # make demo decodes the default model
    specs = ["ar", *recipe[recipe.index("--method") + 1].split(";")]
    default = {r["spec"]: r for r in json.loads(
        (ROOT / "docs" / "figures" / "emoji-names" / "demo-methods-batch1-fp32.json").read_text())}
    photos = {r["spec"]: r for name in ("sjd", "zipar")
              for r in json.loads((ROOT / "docs" / "figures" / name / "batch1-fp32.json").read_text())}
    readme = (ROOT / "README.md").read_text()
    table = readme.split("<!-- measured: the table below is docs/figures/emoji-names/demo-methods-batch1-fp32.json")[1]
    rows = [[c.strip() for c in line.strip().strip("|").split("|")]
            for line in table.split("\n\n")[0].splitlines() if line.startswith("| `")]
    assert [row[0] for row in rows] == [f"`{spec}`" for spec in specs]
    for row in rows:
        spec = row[0].strip("`")
        d, p = default[spec], photos[spec]
        assert (d["model"], p["model"]) == (DEFAULT_MODEL, "c2i")
        assert row[1:6] == ["yes" if d["lossless"] else "no (lossy)", f"{d['target_forwards']:.1f}",
                            f"{d['step_compression']:.2f}x", f"{p['target_forwards']:.1f}",
                            f"{p['step_compression']:.2f}x"], row


# ----------------------------------------------------------------------------- the repository stands alone
TEXT = (".py", ".md", ".json", ".txt", ".toml", ".cfg", ".yml", ".yaml")
ABSOLUTE = re.compile(r"(?<![\w.:/])/(work|home|root|tmp|Users|mnt|scratch)/[\w.-]")


def repository_files() -> list[Path]:
    skip = {".git", ".venv", "__pycache__", ".pytest_cache"}
    return [p for p in ROOT.rglob("*") if p.is_file() and p.suffix in TEXT
            and not skip.intersection(p.relative_to(ROOT).parts)]


def test_nothing_points_at_design_notes_outside_the_repository():
    offenders = []
    for path in repository_files():
        if path == Path(__file__):
            continue
        for k, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            if re.search(r"BENCHMARKS\.md|METHODS\.md|DESIGN\.md|STYLE\.md|\.\./shared|/work/shared", line):
                offenders.append(f"{path.relative_to(ROOT)}:{k}")
    assert not offenders, offenders


def test_committed_records_and_configs_carry_no_absolute_paths():
    offenders = []
    for path in repository_files():
        if path.suffix not in (".json", ".md", ".txt") or path == Path(__file__):
            continue
        for k, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            if ABSOLUTE.search(line):
                offenders.append(f"{path.relative_to(ROOT)}:{k}: {line.strip()[:80]}")
    assert not offenders, offenders


def test_saved_pipelines_carry_no_absolute_paths(tmp_path):
    from arvis import LlamaGenPipeline
    from arvis.hub import tiny_random_pipeline

    tiny_random_pipeline().save_pretrained(tmp_path / "a")
    loaded = LlamaGenPipeline.from_pretrained(str((tmp_path / "a").resolve()))  # sets _name_or_path everywhere
    loaded.save_pretrained(tmp_path / "b")
    for config in (tmp_path / "b").rglob("*.json"):
        assert str(tmp_path) not in config.read_text(), config


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-q"]))
