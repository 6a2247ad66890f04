"""One card writer: :mod:`arvis.utils.model_card` renders every card, and ``eval/cards.py`` rebuilds the shipped
cards from the records committed with them — byte for byte, without retraining or re-evaluating anything."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from arvis.utils.model_card import ModelCard, Section, Training, measured, table, write_card
from tests import REPO_ROOT

WEIGHTS = REPO_ROOT / "arvis" / "weights"

#: Shipped cards that their records rebuild exactly (each a different card kind). The other shipped cards are
#: either edited by hand (llamagen-c2i-photos, llamagen-t2i-scenes), written by the figure scripts (emu3-emoji,
#: lowres-c2i-photos), from records older than the card's facts (vq-*, llamagen-c2i-emoji), or older than their
#: writer's current wording (mar-*, video-emoji: rebuilding them changes their text).
REBUILT_EXACTLY = ("clip-scenes", "clip-emoji", "domain-classifier", "mar-vae-emoji", "upsampler-photos",
                   "var-emoji", "var-vq-emoji", "video-features", "llamagen-c2i-emoji-names")


@pytest.fixture(scope="module")
def cards():
    spec = importlib.util.spec_from_file_location("cards", REPO_ROOT / "eval" / "cards.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("name", REBUILT_EXACTLY)
def test_shipped_cards_are_rebuilt_from_their_records(cards, name, monkeypatch):
    monkeypatch.chdir(REPO_ROOT)  # cards name their records and folders as the repository does
    folder = Path("arvis/weights") / name
    assert cards.render(folder) == (folder / "README.md").read_text()


def test_check_reports_a_card_that_differs_from_its_records(cards, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(REPO_ROOT)
    assert cards.main(["--model", "arvis/weights/mar-vae-emoji", "--check"]) == 0
    # A copy whose committed card was edited by hand: --check shows the edit and writes nothing.
    folder = tmp_path / "mar-vae-emoji"
    folder.mkdir()
    for file in ("config.json", "metrics.json", "README.md"):
        (folder / file).write_text((WEIGHTS / "mar-vae-emoji" / file).read_text())
    edited = (folder / "README.md").read_text().replace("No perceptual", "No fancy")
    (folder / "README.md").write_text(edited)
    assert cards.main(["--model", str(folder), "--check"]) == 1
    out = capsys.readouterr().out
    assert "-loss: no fancy" not in out and "No fancy" in out and "differs" in out
    assert (folder / "README.md").read_text() == edited
    assert cards.main(["--model", str(folder)]) == 0
    assert (folder / "README.md").read_text() == (WEIGHTS / "mar-vae-emoji" / "README.md").read_text()


def test_a_folder_without_a_card_writer_is_refused(cards, tmp_path):
    (tmp_path / "model_index.json").write_text(json.dumps({"_class_name": "Emu3Pipeline"}))
    with pytest.raises(SystemExit, match="no card writer"):
        cards.card_kind(tmp_path)


def test_the_card_renders_its_parts_in_one_order(tmp_path):
    card = ModelCard(title="m: a model", summary="What it is.\n", usage="load()",
                     evaluation=Section("Evaluation", table(("metric", "value"), [("FID", measured(None))])),
                     training=Training(["python train.py"], "How."), data=Section("Data (no leakage)", "Crops."),
                     limits="Small.", licence="CC BY-SA 4.0.")
    assert card.render() == ("# m: a model\n\nWhat it is.\n\nCC BY-SA 4.0.\n\n```python\nload()\n```\n\n"
                             "## Data (no leakage)\nCrops.\n\n## Training\n```\npython train.py\n```\nHow.\n\n"
                             "## Evaluation\n| metric | value |\n|---|---|\n| FID | not measured |\n\n"
                             "## Limits\nSmall.\n")
    assert table(("", "a"), [("x", "")]) == "| | a |\n|---|---|\n| x | |"
    path = write_card(tmp_path, card)
    assert path == tmp_path / "README.md" and path.read_text() == card.render()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["README.md"]  # no temporary left behind


def test_run_history_reads_starts_and_resumes_from_a_scratch_log():
    """A run's starts from its train.log: the first start's schedule from its config, a resume's from the settings
    the shared loop logs (``steps=B (was A)``; unknown where it did not log them); the trainers' older loops
    continued with the final schedule."""
    from tests.eval.eval_modules import eval_module

    var_card = eval_module("var_model_card")
    log = "\n".join([
        '2026-11-29 06:31:36 INFO new run: 6479104 transformer + 1329952 head parameters, config {"steps": 3000}',
        "2026-11-29 06:52:52 INFO resumed from ../runs/t/checkpoint.pt at step 400 (1245 s elapsed); "
        "eval_every=250, steps=2000 (was 3000)",
        "2026-11-29 06:55:51 INFO resumed from ../runs/t/checkpoint.pt at step 475 (1374 s elapsed)",
        "2026-11-29 07:00:00 INFO resumed at step 500"])
    runs = var_card.run_history(log, 2500)
    assert runs == [{"at_step": 0, "schedule_steps": 3000}, {"at_step": 400, "schedule_steps": 2000},
                    {"at_step": 475, "schedule_steps": None}, {"at_step": 500, "schedule_steps": 2500}]
    text = var_card.history_text({"runs": runs[:2] + [{"at_step": 475, "schedule_steps": None},
                                                       {"at_step": 2000, "schedule_steps": 4500}]}, "changed")
    assert text == ("started with a 3000-step cosine schedule; resumed from the step-400 checkpoint, the schedule "
                    "shortened to 2000 steps; resumed from the step-475 checkpoint; resumed from the step-2000 "
                    "checkpoint, the schedule lengthened to 4500 steps (changed; each resume continues the "
                    "checkpointed weights, optimiser and EMA)")
