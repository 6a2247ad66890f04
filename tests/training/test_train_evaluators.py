"""Training smoke tests for the evaluator networks: a few steps of the domain-network and CLIP trainers on
tiny configs, export, reload through the official loaders, and the domain network's evaluation card
(``eval/domain_card.py``; full training is not run in CI)."""

from __future__ import annotations

import importlib.util
import json

import numpy as np
import pytest
import torch

from arvis.training import train_domain
from tests import REPO_ROOT as ROOT


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("ARVIS_CACHE", str(tmp_path / "cache"))


def _dtypes(path) -> set[torch.dtype]:
    from safetensors import safe_open

    with safe_open(str(path), "pt") as f:
        return {f.get_tensor(k).dtype for k in f.keys()}


def _script(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "eval" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def domain_card():
    """``eval/domain_card.py``, the evaluation and model card of an exported domain network (a card kind)."""
    return _script("domain_card")


def evaluate_and_write_card(folder) -> dict:
    """``python eval/cards.py --model FOLDER --evaluate``: the folder's metrics, as it wrote them."""
    assert _script("cards").main(["--model", str(folder), "--evaluate", "--no-progress"]) == 0
    return json.loads((folder / "metrics.json").read_text())


def test_train_domain_smoke_exports_loads_and_resumes(tmp_path):
    from arvis.eval.domain import DomainClassifier, load_domain_network
    from arvis.eval.fid import array_statistics, compute_fid, load_extractor

    out, scratch = tmp_path / "domain", tmp_path / "scratch"
    argv = ["--preset", "smoke", "--out", str(out), "--scratch", str(scratch)]
    trained = train_domain.main(argv)
    # Training exports weights and training metrics; evaluation and the card are the eval layer's.
    assert trained["steps"] == 4 and "fid" not in trained and "heldout_accuracy" not in trained
    assert sorted(p.name for p in out.iterdir()) == ["config.json", "diffusion_pytorch_model.safetensors",
                                                     "training_metrics.json"]
    assert _dtypes(out / "diffusion_pytorch_model.safetensors") == {torch.float16}  # shipped weights are fp16
    net = load_domain_network(out)
    assert isinstance(net, DomainClassifier) and net.dtype == torch.float32 and net.config.image_size == 32
    metrics = evaluate_and_write_card(out)
    assert metrics["steps"] == 4 and 0.0 <= metrics["heldout_accuracy"] <= 1.0
    assert {"heldout_vs_heldout", "train_vs_heldout", "degraded"} <= set(metrics["fid"])
    assert sorted(p.name for p in out.iterdir()) == ["README.md", "config.json", "diffusion_pytorch_model.safetensors",
                                                     "metrics.json", "training_metrics.json"]
    assert json.loads((out / "metrics.json").read_text())["fingerprint"] == trained["fingerprint"]
    readme = (out / "README.md").read_text()
    assert "python -m arvis.training.train_domain" in readme and "python eval/cards.py --model " in readme
    assert "--evaluate\n```" in readme  # the command that reproduces the figures
    # The evaluation is deterministic: a second run reproduces the card.
    evaluate_and_write_card(out)
    assert (out / "README.md").read_text() == readme
    # The folder works as an FID extractor through the public API.
    images = np.random.default_rng(0).integers(0, 256, (12, 32, 32, 3), dtype=np.uint8)
    extractor = load_extractor(str(out))
    reference = array_statistics(images[6:], extractor)
    result = compute_fid(images[:6], reference=reference, extractor=extractor, progress=False)
    assert np.isfinite(result.fid)
    # A rerun with more steps resumes from the checkpoint.
    trained = train_domain.main(argv + ["--steps", "5"])
    assert "resumed from" in (scratch / "train.log").read_text() and trained["steps"] == 5
    # --export-only re-exports the checkpoint and keeps the command that trained it in the model card.
    trained = train_domain.main(argv + ["--export-only"])
    assert trained["steps"] == 5 and trained["command"].endswith("--steps 5")
    evaluate_and_write_card(out)
    assert "Exported by `python -m arvis.training.train_domain" in (out / "README.md").read_text()


def test_domain_card_needs_an_exported_folder(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"_class_name": "DomainClassifier"}))
    with pytest.raises(ValueError, match="training_metrics.json"):
        _script("cards").main(["--model", str(tmp_path), "--evaluate"])


def test_degradations_keep_shape_and_change_pixels():
    card = domain_card()
    images = np.random.default_rng(0).integers(0, 256, (2, 32, 32, 3), dtype=np.uint8)
    for kind, amount in card.DEGRADATIONS:
        d = card.degrade(images, kind, amount)
        assert d.shape == images.shape and d.dtype == np.uint8 and not np.array_equal(d, images), (kind, amount)
    with pytest.raises(ValueError, match="kind"):
        card.degrade(images, "sharpen", 1.0)


def test_train_clip_smoke_exports_and_loads_through_load_clip(tmp_path):
    pytest.importorskip("open_clip")
    from arvis.eval.clip_score import CONFIG_FILE, WEIGHTS_FILE, load_clip
    from arvis.training import train_clip

    out, scratch = tmp_path / "clip", tmp_path / "scratch"
    argv = ["--preset", "smoke", "--out", str(out), "--scratch", str(scratch)]
    metrics = train_clip.main(argv)
    assert metrics["steps"] == 4
    e = metrics["heldout"]
    assert 0.0 <= e["retrieval"]["image_to_text_top1"] <= 1.0 and set(e["attributes"]) == set(train_clip.ATTRIBUTES)
    assert sorted(p.name for p in out.iterdir()) == sorted([CONFIG_FILE, WEIGHTS_FILE, "README.md", "metrics.json"])
    assert _dtypes(out / WEIGHTS_FILE) == {torch.float16}
    cfg = json.loads((out / CONFIG_FILE).read_text())
    assert cfg["model_cfg"]["text_cfg"]["vocab_size"] == 49408 and cfg["preprocess_cfg"]["size"] == 32
    scorer = load_clip(out)
    assert next(scorer.model.parameters()).dtype == torch.float32
    from arvis.data.scenes import build_scenes

    images, captions, _ = build_scenes(3, "heldout", 32, seed=7)
    result = scorer.score(images, captions)
    assert len(result.per_pair) == 3 and 0.0 <= result.score <= 100.0
    # The trainer's tensor preprocessing is exactly the folder's open_clip preprocessing.
    from PIL import Image

    smoke = train_clip.PRESETS["smoke"]
    expected = torch.stack([scorer.preprocess(Image.fromarray(im)) for im in images])
    assert torch.allclose(train_clip.to_input(images, smoke), expected, atol=1e-6)
    metrics = train_clip.main(argv + ["--steps", "5"])
    assert "resumed from" in (scratch / "train.log").read_text() and metrics["steps"] == 5


def test_swap_attribute_changes_exactly_one_attribute():
    from arvis.data.scenes import parse_caption
    from arvis.training.train_clip import ATTRIBUTES, swap_attribute

    caption = "a large red circle on the left and a small blue square at the top over grass"
    rng = np.random.default_rng(0)
    (o1, o2), bg = parse_caption(caption)
    for kind in ATTRIBUTES:
        for _ in range(20):
            swapped = swap_attribute(caption, kind, rng)
            (n1, n2), nbg = parse_caption(swapped)  # still grammatical
            assert swapped != caption
            diff = [(a, b) for x, y in ((o1, n1), (o2, n2)) for a, b in zip(x, y, strict=True) if a != b]
            if kind == "background":
                assert nbg != bg and not diff
            elif kind == "bind":
                assert nbg == bg and sorted(diff) == [("blue", "red"), ("red", "blue")]
            else:
                assert nbg == bg and len(diff) == 1
    assert swap_attribute("a small red ring on the left over moon", "bind", rng) is None
    with pytest.raises(ValueError, match="kind"):
        swap_attribute(caption, "texture", rng)


def test_naming_top1_counts_images_closest_to_their_own_name():
    from arvis.models.clip import naming_top1

    names = torch.eye(3)  # three orthonormal name embeddings
    img = torch.nn.functional.normalize(torch.tensor([[1.0, 0.1, 0.0], [0.0, 0.2, 1.0], [0.9, 0.0, 0.1]]), dim=-1)
    assert naming_top1(img, names, torch.tensor([0, 2, 2])) == pytest.approx(2 / 3)  # the third is closest to name 0
    assert naming_top1(img, names, torch.tensor([0, 2, 0])) == 1.0
