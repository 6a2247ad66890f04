"""The MAR suite (eval/suite_mar.py, ``eval/figures.py --suite mar``): its job list, the acceptance task on a tiny saved causal pair, and the page built from
records only (no long runs)."""

from __future__ import annotations

import importlib.util
import json
import sys

import pytest
import torch

from arvis.models.mar import MARTransformer
from arvis.pipelines import MARPipeline
from arvis.tokenizers.mar_vae import build_kl_vae
from tests import REPO_ROOT as ROOT
from tests.eval.eval_modules import eval_module


@pytest.fixture(scope="module")
def figures():
    return eval_module("suite_mar")


@pytest.fixture(scope="module")
def cli():
    return eval_module("figures")


def _page(cli, out) -> str:
    """The page built from the records under ``out`` (none run)."""
    run = cli.plan(["--suite", "mar", "--out", str(out), "--report-only"])
    return cli.SUITES["mar"].write_page(run.settings["mar"], run.jobs["mar"])[-1].read_text()


def _pair(width: int, seed: int, num_classes: int = 3):
    t = MARTransformer(img_size=64, vae_stride=16, encoder_embed_dim=width, encoder_depth=1, encoder_num_heads=2,
                       decoder_embed_dim=width, decoder_depth=1, decoder_num_heads=2, vae_embed_dim=4, buffer_size=4,
                       num_classes=num_classes, causal=True)
    t.init_weights(torch.Generator().manual_seed(seed))
    head = t.default_head(width=16, depth=1, sampling_steps=4)
    head.init_weights(torch.Generator().manual_seed(seed + 1))
    with torch.no_grad():
        for p in head.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=torch.Generator().manual_seed(seed + 2)))
    return t.eval(), head.eval()


def test_job_list(cli, tmp_path, capsys):
    def jobs(*extra: str):
        return cli.plan(["--suite", "mar", "--out", str(tmp_path), "--model", "m", "--causal-model", "c",
                         *extra]).jobs["mar"]

    found = jobs()
    names = [j.name for j in found]
    assert len(names) == len(set(names)) and "parity" not in names
    assert all(tmp_path / "mar" in j.output.parents for j in found)
    assert {"masked/bench-b1", "masked/bench-b8", "causal/bench-b1", "causal/bench-b8", "acceptance",
            "lossless"} <= set(names)
    fid = [j for j in found if "/fid/" in j.name]
    # Per pair: ar at two seeds (one with the real-vs-real floor) and every other method once, all at N = 1000; the
    # causal pair's exact method beside the AR sampler it is exact for (the same final_std).
    assert len(fid) == 2 + 2 + 2 + 2 and all("1000" in j.args for j in fid)
    assert any("cspd-exact:final_std=0.05,window=2" in j.args for j in fid)
    assert any("ar:final_std=0.05" in j.args for j in fid)
    causal_bench = next(j for j in found if j.name == "causal/bench-b8")
    assert "ar;cspd-exact:final_std=0.05,window=2" in causal_bench.args and "c" in causal_bench.args
    b1 = next(j for j in found if j.name == "causal/bench-b1")
    assert "ar;cspd-exact:final_std=0;cspd-exact:final_std=0.05;cspd-exact:final_std=0.05,window=2" in b1.args
    assert "--batch-size" in causal_bench.args and "8" in causal_bench.args
    with_ref = jobs("--reference-repo", str(tmp_path / "mar-checkout"))
    # The parity stage runs through the suite's command with the options it needs.
    assert with_ref[0].name == "parity" and with_ref[0].args[0] == "eval/figures.py"
    assert with_ref[0].args[-2:] == ["--stage", "parity"] and str(tmp_path / "mar-checkout") in with_ref[0].args
    # A job whose record exists is listed as done (and skipped by a run).
    (tmp_path / "mar").mkdir()
    (tmp_path / "mar" / "acceptance.json").write_text(json.dumps({"model_sha256": "0123456789abcdef"}))
    (tmp_path / "mar" / "lossless.json").write_text("{}")  # names no weights: predates the check, runs again
    assert cli.main(["--suite", "mar", "--out", str(tmp_path), "--model", "m", "--causal-model", "c", "--list"]) == 0
    listed = capsys.readouterr().out
    assert "[done] acceptance" in listed and "[todo] lossless" in listed and "[todo] masked/bench-b1" in listed


def test_acceptance_task_on_a_tiny_causal_pair(figures, tmp_path):
    vae = build_kl_vae(block_out_channels=(8, 8, 8, 8, 8), latent_channels=4, resolution=64, norm_num_groups=4).eval()
    pipe = MARPipeline(*_pair(32, 0), vae, *_pair(16, 5))
    pipe.save_pretrained(tmp_path / "causal", safe_serialization=True)
    (tmp_path / "causal" / "sampling_defaults.json").write_text(json.dumps({"cfg_schedule": "constant"}))
    record = figures.task_acceptance(tmp_path, str(tmp_path / "causal"), num_images=2, head_steps=(2, 4))
    assert [r["head_steps"] for r in record["rows"]] == [2, 4]
    for r in record["rows"]:
        assert 0.0 <= r["acceptance_rate"] <= 1.0 and 1 <= r["target_forwards"] <= 16 and r["tokens"] == 16
    assert json.loads((tmp_path / "mar" / "acceptance.json").read_text())["rows"] == record["rows"]


def _bench(spec: str, fwd: float, lossless: bool, speedup: float) -> dict:
    extra = {} if spec == "ar" else {"acceptance_rate": 0.62, "fallbacks": 0.5}
    return {"extra": extra, "spec": spec, "lossless": lossless, "target_forwards": fwd, "draft_forwards": 0.0 if spec == "ar" else 20.0,
            "latency_s": 1.0 / speedup, "speedup": speedup, "outside_share": 0.7, "samples": 8, "dtype": "fp32", "threads": 1,
            "sampling": {"guidance_scale": 3.0}, "repeats": 5, "git_commit": "abc"}


def test_report_is_built_from_records_only(cli, tmp_path):
    empty = _page(cli, tmp_path)
    assert empty.count("(not run yet)") >= 5 and "--reference-repo" in empty
    root = tmp_path / "mar"
    (root / "masked" / "fid").mkdir(parents=True)
    (root / "masked" / "bench-b1.json").write_text(json.dumps([_bench("ar", 16, True, 1.0),
                                                                _bench("cspd", 6.4, False, 1.9)]))
    for method, seed, fid in (("ar", 0, 40.0), ("ar", 1, 41.5), ("cspd", 0, 40.9)):
        (root / "masked" / "fid" / f"{method}-seed{seed}.json").write_text(json.dumps(
            {"method": method, "options": {}, "seed": seed, "fid": fid, "num_generated": 1000,
             "real_vs_real_floor": 3.0}))
    (root / "acceptance.json").write_text(json.dumps(
        {"model": "mar-causal", "num_images": 8, "final_std": 0.05,
         "rows": [{"head_steps": 8, "acceptance_rate": 0.81, "target_forwards": 20.5, "tokens": 64}]}))
    (root / "sampling-schedule-m.json").write_text(json.dumps(
        {"model": "m", "command": "python eval/mar_sampling_schedule.py --model m", "num_images": 8, "head_steps": 50,
         "transition_gain": {"cosine": {"50": 632.0}, "linear": {"50": 0.41}}, "eps_mse": {"999": 0.0011},
         "sampled_token_std": {"cosine": 609.0, "linear": 1.09}, "heldout_token_std": 1.1}))
    (root / "parity.json").write_text(json.dumps({"reference": "mar", "lines": ["1. transformer z: max |diff| = 0"]}))
    views = {"pos0/ch0": 0.5, "pos0/mean": 0.2}
    (root / "lossless.json").write_text(json.dumps(
        {"num": 2000, "final_std": 0.05, "window": 4, "sampling": {"guidance_scale": 3.0}, "alpha": 1e-3,
         "p_values": {"cspd-exact": views, "draft's own samples (planted bug)": {"pos0/ch0": 1e-9, "pos0/mean": 0.3}},
         "min_p": {"cspd-exact": 0.2, "draft's own samples (planted bug)": 1e-9},
         "passes": {"cspd-exact": True, "draft's own samples (planted bug)": False},
         "acceptance_rate": 0.55, "target_forwards": 30.2}))
    page = _page(cli, tmp_path)
    assert "| cspd-exact | 2.00e-01 | yes |" in page and "| draft's own samples (planted bug) | 1.00e-09 | no |" in page
    assert "2000 samples per arm" in page and "(pos0/ch0, pos0/mean)" in page
    assert "| `cspd` | no | 6.4 | 20.0 | 2.50x | 0.620 | 0.5 | 0.5263 | 70% | 1.90x | 40.90 (1000) | +0.90 |" in page
    assert "seed-to-seed noise |ΔFID| = 1.50" in page and "real-vs-real floor 3.00" in page
    assert "| 8 | 0.810 | 20.5 | 64 |" in page and "1. transformer z: max |diff| = 0" in page
    assert "| `m` | 0.0011 | 609 | 1.09 | 1.1 |" in page and "cosine: 632 at 50 steps" in page


def test_records_of_replaced_weights_are_labelled_and_kept_apart(cli, tmp_path):
    """Records name a shipped pair by its alias, which outlives the weights: a bench or FID record whose weights
    hash is not the pair folder's says so on the page, and no FID of one set of weights is set beside a bench of
    another."""
    from arvis.hub import folder_sha256

    pair = tmp_path / "pair"
    pair.mkdir()
    (pair / "model_index.json").write_text(json.dumps({"_class_name": "MARPipeline"}))
    current = folder_sha256(pair)
    root = tmp_path / "mar"
    (root / "masked" / "fid").mkdir(parents=True)
    old = [{**_bench(spec, fwd, spec == "ar", x), "model": "mar", "model_sha256": "0ld0ld0ld0ld0ld0"}
           for spec, fwd, x in (("ar", 16, 1.0), ("cspd", 6.4, 1.9))]
    (root / "masked" / "bench-b1.json").write_text(json.dumps(old))
    new = [{**r, "model_sha256": current, "latency_s": 0.5} for r in old]
    (root / "masked" / "bench-b8.json").write_text(json.dumps(new))
    for method, seed, fid, sha in (("ar", 0, 40.0, current), ("ar", 1, 41.5, current), ("cspd", 0, 40.9, "0ld0ld0ld0ld0ld0")):
        (root / "masked" / "fid" / f"{method}-seed{seed}.json").write_text(json.dumps(
            {"method": method, "options": {}, "seed": seed, "fid": fid, "num_generated": 1000, "model": "mar",
             "model_sha256": sha}))
    run = cli.plan(["--suite", "mar", "--out", str(tmp_path), "--report-only", "--model", str(pair)])
    page = cli.SUITES["mar"].write_page(run.settings["mar"], run.jobs["mar"])[-1].read_text()
    masked = page.split("## Masked MAR")[1].split("## Causal")[0]
    b1, b8 = masked.split("### Batch 8")
    assert "**as it was before** (weights `0ld0ld0ld0ld0ld0`" in b1 and "40.00" not in b1
    assert "On `mar`." in b8 and "| `ar` | yes | 16.0 |" in b8 and "40.00 (1000)" in b8
    assert "| `cspd` |" in b8 and "40.90" not in page  # the cspd FID was of the replaced weights
    assert "FID records of replaced weights, not shown: 1 (`cspd` seed 0)" in masked
    assert "FID of `ar` on `mar`: 40.00 (seed 0), 41.50 (seed 1)" in masked


def test_lossless_task_on_a_tiny_causal_pair(figures, tmp_path):
    """The task's structure and its power on a pair whose draft is unrelated: cspd-exact (all residual draws
    here) passes, the draft's own samples do not."""
    vae = build_kl_vae(block_out_channels=(8, 8, 8, 8, 8), latent_channels=4, resolution=64, norm_num_groups=4).eval()
    pipe = MARPipeline(*_pair(32, 0), vae, *_pair(16, 5))
    pipe.save_pretrained(tmp_path / "causal", safe_serialization=True)
    (tmp_path / "causal" / "sampling_defaults.json").write_text(json.dumps({"cfg_schedule": "constant"}))
    record = figures.task_lossless(tmp_path, str(tmp_path / "causal"), num=600, batch=300, final_std=0.1)
    rows = record["p_values"]
    assert set(rows) == {"cspd-exact", "ar (second seed set)", "draft's own samples (planted bug)"}
    assert set(rows["cspd-exact"]) == {f"pos{p}/{v}" for p in (0, 1, 2, 7, 15) for v in ("ch0", "mean")}
    assert record["passes"]["cspd-exact"] and record["passes"]["ar (second seed set)"]
    assert not record["passes"]["draft's own samples (planted bug)"]
    assert 0.0 <= record["acceptance_rate"] <= 1.0 and 1 <= record["target_forwards"] <= 16
    assert json.loads((tmp_path / "mar" / "lossless.json").read_text())["min_p"] == record["min_p"]


def test_sampling_schedule_script_on_a_tiny_folder(tmp_path, capsys):
    """eval/mar_sampling_schedule.py measures gains, held-out eps errors and sampled token stds and records them."""
    sys.path.insert(0, str(ROOT / "eval"))
    spec = importlib.util.spec_from_file_location("mar_sampling_schedule", ROOT / "eval" / "mar_sampling_schedule.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    vae = build_kl_vae(block_out_channels=(8, 8, 8, 8, 8), latent_channels=4, resolution=64, norm_num_groups=4).eval()
    pipe = MARPipeline(*_pair(32, 0, num_classes=22), vae)  # the photo classes (the script's held-out data)
    pipe.save_pretrained(tmp_path / "causal", safe_serialization=True)
    (tmp_path / "causal" / "sampling_defaults.json").write_text(json.dumps({"cfg_schedule": "constant"}))
    out = tmp_path / "rec.json"
    assert module.main(["--model", str(tmp_path / "causal"), "--num-images", "2", "--num-heldout", "4",
                        "--data-cache", str(tmp_path / "cache"), "--json", str(out)]) == 0
    rec = json.loads(out.read_text())
    assert rec["transition_gain"]["cosine"]["50"] > 300 > 1 > rec["transition_gain"]["linear"]["50"]
    assert set(rec["eps_mse"]) == {str(t) for t in module.NOISE_STEPS} and all(v >= 0 for v in rec["eps_mse"].values())
    assert set(rec["sampled_token_std"]) == {"cosine", "linear"} and rec["heldout_token_std"] > 0
    assert "sampled token std" in capsys.readouterr().out
