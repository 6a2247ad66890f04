"""CLIP score (arvis.eval.clip_score, `arvis clip-score`) on a tiny open_clip model built here, offline."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

open_clip = pytest.importorskip("open_clip")

from arvis.cli import main  # noqa: E402
from arvis.eval.clip_score import CONFIG_FILE, WEIGHTS_FILE, load_clip, save_clip_folder  # noqa: E402

TINY_CFG = {
    "embed_dim": 16,
    "vision_cfg": {"image_size": 32, "layers": 1, "width": 32, "patch_size": 8, "head_width": 16},
    "text_cfg": {"context_length": 16, "vocab_size": 49408, "width": 32, "heads": 2, "layers": 1},
}
PROMPTS = ["a photo of the moon", "red bricks", "a cat on a sofa"]


def tiny_clip() -> torch.nn.Module:
    model = open_clip.model.CLIP(**TINY_CFG)
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.05)
    return model.eval()


@pytest.fixture(scope="module")
def clip_dir(tmp_path_factory) -> Path:
    return save_clip_folder(tiny_clip(), TINY_CFG, tmp_path_factory.mktemp("clip") / "clip-scenes")


def pictures(n: int) -> list[Image.Image]:
    rng = np.random.default_rng(0)
    return [Image.fromarray(rng.integers(0, 256, (40, 48, 3), dtype=np.uint8)) for _ in range(n)]


def test_folder_format_round_trip_and_score_definition(clip_dir):
    assert sorted(p.name for p in clip_dir.iterdir()) == [CONFIG_FILE, WEIGHTS_FILE]
    scorer = load_clip(clip_dir)
    model = tiny_clip()
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), scorer.model.state_dict().values(),
                                                 strict=True))
    imgs = pictures(3)
    result = scorer.score(imgs, PROMPTS, batch_size=2)
    # The definition, by hand: 100 * cosine of normalised embeddings, mean over pairs, clipped at 0.
    tok = open_clip.tokenizer.SimpleTokenizer(context_length=16)
    with torch.no_grad():
        img = model.encode_image(torch.stack([scorer.preprocess(i) for i in imgs]), normalize=True)
        txt = model.encode_text(tok(PROMPTS), normalize=True)
    per_pair = 100 * (img * txt).sum(-1)
    np.testing.assert_allclose(result.per_pair, per_pair.numpy(), rtol=1e-5, atol=1e-5)
    assert result.score == pytest.approx(max(float(per_pair.mean()), 0.0), abs=1e-5)
    assert 0.0 <= result.score <= 100.0


def test_config_dict_plus_weights_file_loads_the_same_model(clip_dir):
    a = load_clip(clip_dir)
    b = load_clip(TINY_CFG, weights=clip_dir / WEIGHTS_FILE)
    imgs = pictures(2)
    assert np.allclose(a.score(imgs, PROMPTS[:2]).per_pair, b.score(imgs, PROMPTS[:2]).per_pair, atol=1e-5)


def test_registered_architecture_plus_local_weights_file(clip_dir, tmp_path):
    """The path official weights take: an open_clip architecture name + a local weights file."""
    config = tmp_path / "arvis-tiny-test.json"
    config.write_text(json.dumps(TINY_CFG))
    open_clip.add_model_config(config)
    a = load_clip(clip_dir)
    b = load_clip("arvis-tiny-test", weights=clip_dir / WEIGHTS_FILE)
    assert b.name == f"open_clip:arvis-tiny-test+{WEIGHTS_FILE}"
    imgs = pictures(2)
    assert np.allclose(a.score(imgs, PROMPTS[:2]).per_pair, b.score(imgs, PROMPTS[:2]).per_pair, atol=1e-5)


def test_bad_input(clip_dir, tmp_path):
    scorer = load_clip(clip_dir)
    with pytest.raises(ValueError, match="2 captions for 3 images"):
        scorer.score(pictures(3), PROMPTS[:2])
    with pytest.raises(ValueError, match="weights: required"):
        load_clip(TINY_CFG)
    with pytest.raises(ValueError, match="neither a folder nor an open_clip architecture"):
        load_clip(tmp_path / "nowhere")
    with pytest.raises(ValueError, match="pass the local weights file"):
        load_clip("ViT-B-32")
    with pytest.raises(ValueError, match="vocab_size is 1000"):
        save_clip_folder(tiny_clip(), {**TINY_CFG, "text_cfg": {**TINY_CFG["text_cfg"], "vocab_size": 1000}},
                         tmp_path / "x")
    assert not (tmp_path / "x").exists()


def test_clip_score_command_reads_prompts_from_the_manifest(clip_dir, tmp_path, capsys):
    folder = tmp_path / "samples"
    folder.mkdir()
    records = []
    for i, (im, prompt) in enumerate(zip(pictures(3), PROMPTS, strict=True)):
        im.save(folder / f"{i:06d}.png")
        records.append({"index": i, "file": f"{i:06d}.png", "prompt": prompt})
    (folder / "manifest.json").write_text(json.dumps({"job": {}, "complete": True, "images": records}))
    out = tmp_path / "clip.json"
    assert main(["clip-score", "--folder", str(folder), "--clip-model", str(clip_dir), "--json", str(out),
                 "--no-progress"]) == 0
    record = json.loads(out.read_text())
    expected = load_clip(clip_dir).score(pictures(3), PROMPTS).score
    assert record["num_pairs"] == 3 and record["clip_score"] == pytest.approx(expected, abs=1e-4)
    assert "CLIP score" in capsys.readouterr().out

    (folder / "000003.png").write_bytes((folder / "000000.png").read_bytes())  # an image without caption
    bad = tmp_path / "bad.json"
    assert main(["clip-score", "--folder", str(folder), "--clip-model", str(clip_dir), "--json", str(bad)]) == 2
    assert "no caption for 1 images (e.g. 000003.png)" in capsys.readouterr().err and not bad.exists()
