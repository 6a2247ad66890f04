"""The VAR page's own measurements: the acceptance script runs on a VAR folder with its guidance rule and names the
weights it measured, and the page shows only records measured on the model's weights now (issue 41: a replaced
model's figures never stand under its successor's name)."""

from __future__ import annotations

import json

from arvis.hub import folder_sha256
from tests.eval.eval_modules import eval_module
from tests.pipelines.test_var import tiny_pipeline


def test_acceptance_runs_with_vars_guidance_and_names_its_weights(tmp_path):
    folder = tmp_path / "pair"
    tiny_pipeline().save_pretrained(folder)
    out = tmp_path / "acceptance.json"
    result = eval_module("var_acceptance").main(["--model", str(folder), "--samples", "2", "--batch-size", "2",
                                                  "--joint-draws", "2", "--json", str(out)])
    assert json.loads(out.read_text()) == result
    assert result["model_sha256"] == folder_sha256(folder)
    assert result["guidance_scale"] == tiny_pipeline().sampling_config().guidance_scale
    assert [r["side"] for r in result["scales"]] and all(0 <= r["tv"] <= 1 for r in result["scales"])


def test_page_leaves_out_records_of_other_weights(tmp_path):
    folder = tmp_path / "pair"
    tiny_pipeline().save_pretrained(folder)
    sha = folder_sha256(folder)
    figures = eval_module("figures")
    fid = {"method": "ar", "options": {}, "seed": 0, "fid": 5.0, "num_generated": 8, "num_reference": 8, "reference": "r", "extractor": "domain",
           "threads": 1, "real_vs_real_floor": 0.1}
    (tmp_path / "var" / "fid").mkdir(parents=True)
    for seed, (value, weights) in enumerate(((5.0, sha), (5.5, "0" * 16))):  # seed 1 measured on other weights
        (tmp_path / "var" / "fid" / f"ar-seed{seed}-n8.json").write_text(
            json.dumps(fid | {"seed": seed, "fid": value, "model_sha256": weights}))
    run = figures.plan(["--suite", "var", "--model", str(folder), "--out", str(tmp_path), "--fid-num", "8",
                        "--report-only"])
    (suite,) = run.suites
    text = suite.page_text(run.settings["var"], run.jobs["var"])
    assert f"content hash `{sha}`" in text
    assert "`ar`: FID 5.00 (seed 0); second seed not run yet." in text and "5.50" not in text
    assert "left out until they run again (`--force`): `fid/ar-seed1`" in text
