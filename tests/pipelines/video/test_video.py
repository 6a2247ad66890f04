"""The video path: motion clips, the 3-D-RoPE video GPT, image-to-video, the pipeline, exports, the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from arvis.data import video as V
from arvis.engine.sampling import SamplingConfig
from arvis.methods import decode
from arvis.models.protocol import Condition
from arvis.models.video import FramePrefix, VideoTransformer, rope_table_3d
from arvis.pipelines import VideoPipeline, VideoPipelineOutput
from arvis.pipelines.pipeline_video import export_frames
from arvis.tokenizers.llamagen_vq import LlamaGenVQModel
from tests import REPO_ROOT


def tiny_video(frames: int = 3, side: int = 2, vocab: int = 16, classes: int = 3, seed: int = 0,
               head_scale: float = 0.5) -> VideoTransformer:
    model = VideoTransformer(dim=32, n_layer=2, n_head=2, multiple_of=16, vocab_size=vocab, num_frames=frames,
                             frame_size=side, num_classes=classes, class_names=[f"c{i}" for i in range(classes)])
    g = torch.Generator().manual_seed(seed)
    model.init_weights(g)
    with torch.no_grad():  # the init zeroes the head; give the tiny model real logits
        model.output.weight.normal_(0.0, head_scale, generator=g)
    return model.eval()


def tiny_vq(codebook: int = 16) -> LlamaGenVQModel:
    vq = LlamaGenVQModel(codebook_size=codebook, codebook_embed_dim=4, encoder_ch_mult=(1, 2),
                         decoder_ch_mult=(1, 2), z_channels=8, base_channels=8, norm_num_groups=4)
    return vq.init_weights(torch.Generator().manual_seed(0)).eval()


def tiny_pipeline(frames: int = 3, side: int = 2) -> VideoPipeline:
    pipe = VideoPipeline(tiny_video(frames, side), tiny_vq())
    pipe.set_progress_bar_config(disable=True)
    return pipe


def gens(*seeds: int) -> list[torch.Generator]:
    return [torch.Generator().manual_seed(s) for s in seeds]


# ---------------------------------------------------------------------------------------------- data
def test_video_classes_and_kinds() -> None:
    assert len(V.VIDEO_CLASSES) == len(set(V.VIDEO_CLASSES)) == 6 + 8 + 10
    assert [V.video_class_kind(i) for i in (0, 6, 14, 23)] == ["camera", "emoji", "digits", "digits"]
    with pytest.raises(ValueError, match="label"):
        V.video_class_kind(24)


def test_motion_clips_deterministic_and_labelled() -> None:
    a = V.build_video_clips(9, "train", num_frames=4, resolution=16, seed=3)
    b = V.build_video_clips(9, "train", num_frames=4, resolution=16, seed=3)
    assert a.clips.shape == (9, 4, 16, 16, 3) and a.clips.dtype == np.uint8
    assert np.array_equal(a.clips, b.clips) and np.array_equal(a.labels, b.labels)
    assert set(V.video_class_kind(k) for k in a.labels) <= set(V.VIDEO_KINDS)
    digits = V.build_video_clips(4, "heldout", num_frames=3, resolution=16, seed=0, kinds=("digits",))
    assert all(V.video_class_kind(k) == "digits" for k in digits.labels)
    assert not np.array_equal(digits.clips[:, 0], digits.clips[:, -1])  # the digits move


@pytest.mark.parametrize("motion", V.EMOJI_MOTIONS)
def test_emoji_motion_paths(motion: str) -> None:
    """Each emoji motion moves the way its class says (checked on the specs, over many draws)."""
    label = V.VIDEO_CLASSES.index(f"emoji {motion.replace('_', ' ')}")
    seen = 0
    for i in range(400):
        spec = V.sample_motion_clip(1, i, "train", 8, kinds=("emoji",))
        if spec.label != label:
            continue
        seen += 1
        dx, dy, dz = np.diff(spec.shift[:, 0]), np.diff(spec.shift[:, 1]), np.diff(spec.zoom)
        expect = {"slide_left": dx < 0, "slide_right": dx > 0, "slide_up": dy < 0, "slide_down": dy > 0,
                  "grow": dz > 0, "shrink": dz < 0,
                  "orbit": np.isclose(np.hypot(*spec.shift.T), np.hypot(*spec.shift[0])),
                  "morph": np.diff(spec.mix) > 0}[motion]
        assert expect.all(), motion
        assert (len(spec.emoji) == 2) == (motion == "morph")
    assert seen > 0


def test_digit_paths_stay_inside_and_splits_are_disjoint() -> None:
    for i in range(60):
        spec = V.sample_motion_clip(0, i, "train", 8, kinds=("digits",))
        assert (spec.shift >= -1e-9).all() and (spec.shift <= 1 - spec.digit_size + 1e-9).all()
    train_images, _ = V._digits("train")
    held_images, _ = V._digits("heldout")
    assert len(train_images) + len(held_images) == 1797
    flat = {im.tobytes() for im in train_images}
    assert sum(im.tobytes() in flat for im in held_images) < 5  # scikit-learn has a few exact duplicates


def test_motion_clip_errors() -> None:
    with pytest.raises(ValueError, match="kinds"):
        V.build_video_clips(1, kinds=("cartoons",))
    with pytest.raises(ValueError, match="n must be"):
        V.build_video_clips(-1)
    with pytest.raises(ValueError, match="num_frames"):
        V.build_video_clips(1, num_frames=1)


def test_video_clip_cache_round_trip(tmp_path) -> None:
    a = V.build_video_clips(3, "train", 3, 16, seed=5, kinds=("digits", "camera"), cache=True, cache_dir=tmp_path)
    assert len(list(tmp_path.glob("video-*.npz"))) == 1
    b = V.build_video_clips(3, "train", 3, 16, seed=5, kinds=("digits", "camera"), cache=True, cache_dir=tmp_path)
    assert np.array_equal(a.clips, b.clips) and np.array_equal(a.labels, b.labels)


# ---------------------------------------------------------------------------------------------- model
def test_rope_table_3d_positions() -> None:
    table = rope_table_3d(3, 2, 2, head_dim=16, base=100.0, condition_length=1)
    assert table.shape == (1 + 12, 8, 2)
    assert torch.equal(table[0, :, 0], torch.ones(8)) and torch.equal(table[0, :, 1], torch.zeros(8))
    angles = torch.atan2(table[1:, :, 1], table[1:, :, 0]).view(3, 2, 2, 8)
    n_t = 8 - 2 * ((8 - 2) // 2)
    assert torch.allclose(angles[:, 0, 0, :n_t], angles[:, 1, 1, :n_t])  # time pairs ignore space
    assert not torch.allclose(angles[0, 0, 0, :n_t], angles[1, 0, 0, :n_t])  # ... and see time
    assert torch.allclose(angles[0, :, :, n_t:], angles[2, :, :, n_t:])  # space pairs ignore time
    assert len({tuple(r.flatten().tolist()) for r in table[1:]}) == 12  # every cell is distinct


def test_cached_decoding_matches_teacher_forcing() -> None:
    model = tiny_video()
    cond = Condition(class_labels=torch.tensor([0, 2]))
    tokens, _ = decode(model, cond, SamplingConfig(guidance_scale=1.0), "ar", gens(1, 2))
    with torch.no_grad():
        full = model(tokens, cond)
        cache = model.allocate_cache(2)
        first, _ = model.prefill(cond, cache)
        N = tokens.shape[1]
        slots = 1 + torch.arange(N - 1).expand(2, -1)
        mask = torch.arange(cache.slots) <= slots[..., None]
        rest = model.forward_tokens(tokens[:, :-1], slots, cache, mask)
    torch.testing.assert_close(first, full[:, 0], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(rest, full[:, 1:], atol=1e-5, rtol=1e-5)


def test_frame_prefix_conditions_on_the_given_frames() -> None:
    model = tiny_video(frames=3, side=2)
    cond = Condition(class_labels=torch.tensor([1, 1]))
    tokens, _ = decode(model, cond, SamplingConfig(guidance_scale=1.0), "ar", gens(3, 4))
    view = FramePrefix(model, tokens[:, :4])
    assert view.layout.grid == (2, 2, 2) and view.layout.condition_length == 5
    with torch.no_grad():
        full = model(tokens, cond)
        logits, valid = view.prefill(cond, view.allocate_cache(2))
    torch.testing.assert_close(logits, full[:, 4], atol=1e-5, rtol=1e-5)
    assert valid.shape == (2, 5) and bool(valid.all())
    # Greedy AR through the view continues exactly the frames plain AR would.
    greedy = SamplingConfig(temperature=0.0, guidance_scale=1.0)
    whole, _ = decode(model, cond, greedy, "ar")
    rest, _ = decode(FramePrefix(model, whole[:, :4]), cond, greedy, "ar")
    assert torch.equal(rest, whole[:, 4:])
    with pytest.raises(ValueError, match="prefix"):
        FramePrefix(model, tokens[:, :3])
    with pytest.raises(ValueError, match="prefix"):
        FramePrefix(model, torch.full((1, 4), 99))


@pytest.mark.parametrize("method,options", [("sjd", dict(window=5)), ("mc-sjd", dict(window=7)),
                                            ("mc-sjd", dict(window=12, coupling="gumbel"))])
def test_greedy_methods_equal_ar_on_video(method: str, options: dict) -> None:
    model = tiny_video(frames=3, side=3)
    cond = Condition(class_labels=torch.tensor([0, 1, 2]))
    greedy = SamplingConfig(temperature=0.0, guidance_scale=2.0)
    ar, _ = decode(model, cond, greedy, "ar")
    fast, stats = decode(model, cond, greedy, method, **options)
    assert torch.equal(fast, ar)


def test_gumbel_coupling_reproduces_ar_samples_on_video() -> None:
    model = tiny_video(frames=3, side=3)
    cond = Condition(class_labels=torch.tensor([0, 2]))
    sampling = SamplingConfig(guidance_scale=1.5)
    ar, ar_stats = decode(model, cond, sampling, "ar", gens(5, 6))
    fast, stats = decode(model, cond, sampling, "mc-sjd", gens(5, 6), window=9, coupling="gumbel")
    assert torch.equal(fast, ar)
    assert stats.summary()["target_forwards"] < ar_stats.summary()["target_forwards"]


def test_video_config_errors_and_save_load(tmp_path) -> None:
    with pytest.raises(ValueError, match="3-D RoPE"):
        VideoTransformer(dim=12, n_head=2)
    with pytest.raises(ValueError, match="class_names"):
        VideoTransformer(dim=32, n_head=2, num_classes=2, class_names=["a"])
    model = tiny_video()
    model.save_pretrained(tmp_path / "m")
    loaded = VideoTransformer.from_pretrained(tmp_path / "m").eval()
    assert loaded.layout == model.layout
    for a, b in zip(loaded.state_dict().values(), model.state_dict().values(), strict=True):
        assert torch.equal(a, b)


# ---------------------------------------------------------------------------------------------- pipeline
def test_pipeline_outputs_frames_tokens_stats() -> None:
    pipe = tiny_pipeline()
    out = pipe(class_labels=["c0", 2], generator=gens(0, 1))
    assert isinstance(out, VideoPipelineOutput)
    assert len(out.frames) == 2 and len(out.frames[0]) == 3 and out.frames[0][0].size == (4, 4)
    assert out.tokens.shape == (2, 3, 2, 2)
    assert out.stats.summary()["tokens"] == 12
    arr = pipe(class_labels=[1], generator=gens(4), output_type="np").frames
    pt = pipe(class_labels=[1], generator=gens(4), output_type="pt").frames
    latent, tokens, _ = pipe(class_labels=[1], generator=gens(4), output_type="latent", return_dict=False)
    assert arr.shape == (1, 3, 4, 4, 3) and pt.shape == (1, 3, 3, 4, 4)
    np.testing.assert_allclose(arr, pt.permute(0, 1, 3, 4, 2).numpy())
    assert torch.equal(latent, tokens)


def test_pipeline_image_to_video_and_methods() -> None:
    pipe = tiny_pipeline()
    frame = np.full((4, 4, 3), 200, dtype=np.uint8)
    out = pipe(class_labels=[0, 1], image=[frame, frame], num_videos_per_prompt=2, generator=gens(0, 1, 2, 3),
               output_type="latent")
    first = pipe.encode_frames(frame)
    assert out.tokens.shape == (4, 3, 2, 2)
    assert all(torch.equal(out.tokens[i, 0], first[0]) for i in range(4))
    assert out.stats.summary()["tokens"] == 8  # per clip: only the two generated frames are decoded
    greedy = dict(temperature=0.0, output_type="latent")
    a = pipe(class_labels=[2], first_frame_tokens=first, **greedy)
    b = pipe(class_labels=[2], first_frame_tokens=first, method="mc-sjd", window=6, **greedy)
    assert torch.equal(a.frames, b.frames)


def test_pipeline_errors() -> None:
    pipe = tiny_pipeline()
    with pytest.raises(ValueError, match="class_labels"):
        pipe(class_labels=["dog"])
    with pytest.raises(ValueError, match="output_type"):
        pipe(class_labels=[0], output_type="gif")
    with pytest.raises(ValueError, match="first_frame_tokens"):
        pipe(class_labels=[0], first_frame_tokens=torch.zeros(1, 3, 3, dtype=torch.long))
    with pytest.raises(ValueError, match="at most one"):
        pipe(class_labels=[0], image=np.zeros((4, 4, 3), np.uint8), first_frame_tokens=torch.zeros(1, 2, 2))
    with pytest.raises(ValueError, match="vqvae"):
        VideoPipeline(tiny_video(vocab=8), tiny_vq(16))


def test_pipeline_save_load_and_export(tmp_path) -> None:
    import imageio.v3 as iio

    pipe = tiny_pipeline()
    pipe.save_pretrained(tmp_path / "pipe")
    loaded = VideoPipeline.from_pretrained(tmp_path / "pipe")
    loaded.set_progress_bar_config(disable=True)
    a = pipe(class_labels=[1], generator=gens(9), output_type="np").frames
    b = loaded(class_labels=[1], generator=gens(9), output_type="np").frames
    np.testing.assert_allclose(a, b)
    frames = (np.random.default_rng(0).random((4, 16, 16, 3)) * 255).astype(np.uint8)
    export_frames(frames, tmp_path / "clip.gif", fps=2)
    export_frames(frames, tmp_path / "clip.mp4", fps=2)
    assert iio.imread(tmp_path / "clip.gif").shape == (4, 16, 16, 3)
    assert iio.imread(tmp_path / "clip.mp4").shape == (4, 16, 16, 3)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["clip.gif", "clip.mp4", "pipe"]  # no temporaries left
    with pytest.raises(ValueError, match="path"):
        export_frames(frames, tmp_path / "clip.avi")
    with pytest.raises(ValueError, match="fps"):
        export_frames(frames, tmp_path / "clip.gif", fps=0)


def test_mp4_without_the_ffmpeg_plugin_is_a_clear_error(tmp_path, monkeypatch) -> None:
    """Without imageio-ffmpeg, imageio hands a .mp4 to tifffile (a raw TypeError): refuse first, name the extra."""
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "imageio_ffmpeg" else real(name, *a))
    frames = np.zeros((2, 16, 16, 3), np.uint8)
    with pytest.raises(ValueError, match=r"imageio-ffmpeg.*arvis\[video\]"):
        export_frames(frames, tmp_path / "clip.mp4", fps=2)
    assert list(tmp_path.iterdir()) == []


def gif_playback(path: Path, frame_ms: int) -> np.ndarray:
    """The frames a GIF shows, one per ``frame_ms`` (GIF writers store a repeated frame once, for longer)."""
    import PIL.Image
    import PIL.ImageSequence

    frames = []
    with PIL.Image.open(path) as im:
        for frame in PIL.ImageSequence.Iterator(im):
            frames += [np.asarray(frame.convert("RGB"))] * round(frame.info["duration"] / frame_ms)
    return np.stack(frames)


def test_cli_generate_writes_videos(tmp_path, capsys) -> None:
    import PIL.Image

    from arvis.cli import main

    pipe = tiny_pipeline()
    pipe.save_pretrained(tmp_path / "pipe")
    out = tmp_path / "out"
    code = main(["generate", "--model", str(tmp_path / "pipe"), "--class-ids", "c0,c2", "--output", str(out),
                 "--method", "mc-sjd:window=6", "--guidance-scale", "1.0", "--no-progress", "--fps", "2"])
    assert code == 0
    # Plain AR is the baseline of every generate: its clips and the method's, each in their own folder.
    assert sorted(p.name for p in out.iterdir()) == ["ar", "mc-sjd_window-6", "side_by_side.gif", "stats.json"]
    for run in ("ar", "mc-sjd_window-6"):
        assert sorted(p.name for p in (out / run).iterdir()) == ["0000.gif", "0001.gif"]
    record = json.loads((out / "stats.json").read_text())
    assert [m["method"] for m in record["methods"]] == ["ar", "mc-sjd"] and record["video"]["frames"] == 3
    clips = [(c["method"], c["class_name"], c["frames"], c["tokens"]) for c in record["images"]]
    assert clips == [(m, c, 3, 12) for m in ("ar", "mc-sjd") for c in ("c0", "c2")]  # 3 frames of 2 x 2 each
    # Each GIF holds the clip the pipeline draws for that class and seed (same method, same generator).
    from arvis.utils.random import image_generators

    for i, label in enumerate(["c0", "c2"]):
        want = pipe(class_labels=[label], generator=image_generators(0, [i]), guidance_scale=1.0,
                    method="mc-sjd", window=6, output_type="np").frames[0]
        got = gif_playback(out / "mc-sjd_window-6" / f"000{i}.gif", frame_ms=500)  # --fps 2
        assert got.shape == (3, 4, 4, 3)
        assert np.abs(got.astype(int) - (want * 255).round()).max() <= 8  # GIF palette quantisation
    with PIL.Image.open(out / "mc-sjd_window-6" / "0000.gif") as im:
        assert json.loads(im.info["comment"])["method"] == "mc-sjd"
    assert "wrote 4 GIF clips" in capsys.readouterr().out  # AR's two and the method's two


def test_cli_generate_video_side_by_side_mp4_and_image_to_video(tmp_path, capsys) -> None:
    import imageio.v3 as iio
    import PIL.Image

    from arvis.cli import main

    tiny_pipeline().save_pretrained(tmp_path / "pipe")
    PIL.Image.fromarray(np.full((8, 8, 3), 200, np.uint8)).save(tmp_path / "first.png")
    out = tmp_path / "out"
    code = main(["generate", "--model", str(tmp_path / "pipe"), "--class-ids", "c1", "--num-images", "2",
                 "--method", "sjd:window=4", "--method", "mc-sjd:window=6,coupling=gumbel", "--image",
                 str(tmp_path / "first.png"), "--video-format", "mp4", "--output", str(out), "--no-progress"])
    assert code == 0
    folders = ["ar", "mc-sjd_window-6_coupling-gumbel", "sjd_window-4"]
    assert sorted(p.name for p in out.iterdir()) == sorted([*folders, "side_by_side.mp4", "stats.json"])
    for folder in folders:
        assert sorted(p.name for p in (out / folder).iterdir()) == ["0000.mp4", "0001.mp4"]
        assert iio.imread(out / folder / "0000.mp4").shape[0] == 3
    record = json.loads((out / "stats.json").read_text())
    rows = {m["spec"]: m for m in record["methods"]}
    assert list(rows) == ["ar", "sjd:window=4", "mc-sjd:window=6,coupling=gumbel"]
    assert rows["mc-sjd:window=6,coupling=gumbel"]["identical_to_ar"] is True  # Gumbel coupling: AR's very clips
    assert record["video"] == {"format": "mp4", "fps": 4.0, "frames": 3, "image_to_video": True}
    assert {c["tokens"] for c in record["images"]} == {8}  # the given frame is not decoded
    assert "forwards/clip" in capsys.readouterr().out
    assert iio.imread(out / "side_by_side.mp4").shape[0] == 3


def test_cli_generate_video_errors(tmp_path, capsys) -> None:
    from arvis.cli import main

    tiny_pipeline().save_pretrained(tmp_path / "pipe")
    (tmp_path / "notes.txt").write_text("not an image")
    base = ["generate", "--model", str(tmp_path / "pipe"), "--no-progress"]
    cases = [
        (["--image", str(tmp_path / "missing.png")], "--image: no such file"),
        (["--image", str(tmp_path / "notes.txt")], "could not be read as an image"),
        (["--fps", "0"], "--fps must be a number in (0, 240]"),
        (["--class-ids", "c0,c1", "--image", str(tmp_path / "notes.txt")], "could not be read"),
        (["--model", "tiny-random", "--fps", "2"], "generates images, not clips"),
    ]
    for extra, message in cases:
        assert main([*base, *extra, "--output", str(tmp_path / "out")]) == 2
        assert message in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_cli_bench_on_a_video_model(tmp_path, capsys) -> None:
    from arvis.cli import main

    tiny_pipeline().save_pretrained(tmp_path / "pipe")
    code = main(["bench", "--model", str(tmp_path / "pipe"), "--method", "ar", "--method", "mc-sjd:window=8",
                 "--num-images", "1", "--repeats", "5", "--warmup", "1", "--no-forward-cost", "--no-progress",
                 "--json", str(tmp_path / "bench.json")])
    assert code == 0
    records = json.loads((tmp_path / "bench.json").read_text())
    by_spec = {r["spec"]: r for r in records}
    assert set(by_spec) == {"ar", "mc-sjd:window=8"}
    assert by_spec["ar"]["target_forwards"] == 12  # one forward per token of a 3 x 2 x 2 clip
    assert by_spec["mc-sjd:window=8"]["target_forwards"] < 12


# ---------------------------------------------------------------------------------------------- training
def test_train_video_smoke_assemble_and_card(tmp_path) -> None:
    """train_video (train_gpt's loop with the video data and model), assemble, model card: end to end, tiny."""
    from arvis.training import train_video

    metrics = train_video.main(["--preset", "smoke", "--out", str(tmp_path / "out"), "--scratch", str(tmp_path / "s")])
    assert metrics["steps"] == 3 and np.isfinite(metrics["validation_loss"])
    train_video.main(["assemble", "--transformer", str(tmp_path / "out" / "transformer"), "--out", str(tmp_path / "pipe")])
    assert (tmp_path / "pipe" / "vqvae").is_symlink()
    pipe = VideoPipeline.from_pretrained(tmp_path / "pipe")
    assert pipe.transformer.layout.grid == (train_video.NUM_FRAMES, 2, 2)
    import importlib.util

    spec = importlib.util.spec_from_file_location("cards", REPO_ROOT / "eval" / "cards.py")
    cards = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(cards)
    assert cards.main(["--model", str(tmp_path / "pipe"), "--records", str(tmp_path / "none")]) == 0
    card = (tmp_path / "pipe" / "README.md").read_text()
    assert "CC BY-SA 4.0" in card and "| steps | 3 |" in card


def test_video_card_sets_where_the_samples_subject_is_beside_the_real_clips() -> None:
    """The card's subject table: the naming record's samples and real clips, side by side; nothing when either is
    missing (records written before the statistic existed)."""
    from arvis.training.train_video import subject_rows

    stats = {"subject_share": 0.222, "subject_share_spread": 0.17, "subject_share_change": 0.026,
             "border_share": 0.0502, "centre_offset": 6.15}
    real = {**stats, "subject_share": 0.147, "border_share": 0.0003, "subject_share_change": 0.0095}
    assert subject_rows({"real_clips": 3}) == [] and subject_rows({"sample_subject": stats}) == []
    lines = "\n".join(subject_rows({"sample_subject": stats, "real_clip_subject": real, "real_clips": 369}))
    assert "| samples | 22.2% | 2.6 points | 5.02% | 6.2 px |" in lines
    assert "| 369 real clips | 14.7% | 0.9 points | 0.03% | 6.2 px |" in lines
    assert "FID" not in lines  # not measured in this record
    lines = "\n".join(subject_rows({"sample_subject": stats, "real_clip_subject": real, "real_clips": 369, "num": 123,
                                     "sample_per_frame_fid": 3.104}))
    assert "per-frame FID of these 123 clips" in lines and ": 3.10." in lines


def test_train_video_warm_starts_from_a_llamagen_c2i_transformer_of_its_shape(tmp_path) -> None:
    """--init-from: the video GPT shares LlamaGen's blocks, so a c2i transformer of the same width, depth,
    vocabulary and classes seeds every weight (only the rotary positions differ); another shape is an error."""
    from arvis.models.llamagen import LlamaGenTransformer
    from arvis.training import train_gpt, train_video

    cfg = train_video.PRESETS["smoke"]
    video, _ = train_video.build_video_models(cfg, 1024, 2)  # vq-photos: the smoke run's tokenizer
    names = list(video.config.class_names)
    image = LlamaGenTransformer(model_type="c2i", dim=cfg.dim, n_layer=cfg.n_layer, n_head=cfg.n_head,
                                multiple_of=cfg.multiple_of, vocab_size=1024, num_classes=len(names), class_names=names)
    image.save_pretrained(tmp_path / "image")
    assert not torch.equal(video.tok_embeddings.weight, image.tok_embeddings.weight)
    train_gpt.warm_start(video, None, tmp_path / "image")
    for name, tensor in image.state_dict().items():
        assert torch.equal(video.state_dict()[name], tensor), name

    metrics = train_video.main(["--preset", "smoke", "--out", str(tmp_path / "out"), "--scratch", str(tmp_path / "s"),
                                "--init-from", str(tmp_path / "image")])
    assert metrics["steps"] == 3 and metrics["init_from"].endswith("image")
    assert "warm start from the weights in" in (tmp_path / "s" / "train.log").read_text()
    wider = LlamaGenTransformer(model_type="c2i", dim=2 * cfg.dim, n_layer=cfg.n_layer, n_head=cfg.n_head,
                                vocab_size=1024, num_classes=len(names), class_names=names)
    wider.save_pretrained(tmp_path / "wider")
    with pytest.raises(ValueError, match="another architecture"):
        train_gpt.warm_start(video, None, tmp_path / "wider")


def test_train_video_features_smoke(tmp_path) -> None:
    import importlib.util

    from arvis.eval.video_metrics import load_video_features
    from arvis.training import train_video_features

    trained = train_video_features.main(["--preset", "smoke", "--out", str(tmp_path / "out"), "--scratch",
                                         str(tmp_path / "s")])
    assert trained["steps"] == 3 and "fvd_controls" not in trained  # evaluation is the eval layer's
    spec = importlib.util.spec_from_file_location("cards", REPO_ROOT / "eval" / "cards.py")
    cards = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(cards)
    assert cards.main(["--model", str(tmp_path / "out"), "--evaluate", "--eval-clips", "4", "--vq", ""]) == 0
    metrics = json.loads((tmp_path / "out" / "metrics.json").read_text())
    assert metrics["steps"] == 3 and set(metrics["fvd_controls"]) >= {"independent held-out clips (floor)"}
    assert json.loads((tmp_path / "out" / "metrics.json").read_text())["eval_clips"] == 4
    extractor = load_video_features(tmp_path / "out")
    assert extractor.input_size == 16
    assert "domain FVD" in (tmp_path / "out" / "README.md").read_text()


# ---------------------------------------------------------------------------------------------- demo
def test_partial_clips_are_grey_where_nothing_is_committed() -> None:
    pipe = tiny_pipeline()
    tokens = torch.randint(0, 16, (1, 3, 2, 2))
    known = torch.zeros(1, 3, 2, 2, dtype=torch.bool)
    known[0, 0] = True  # the first frame committed, the rest not
    partial = pipe.decode_tokens(tokens, "np", known=known)
    assert np.allclose(partial[0, 1:], 0.5)  # PREVIEW_GREY
    np.testing.assert_allclose(partial[0, 0], pipe.decode_tokens(tokens, "np")[0, 0])


def test_demo_core_runs_a_video_model_side_by_side(tmp_path) -> None:
    """The demo's Gradio-free core on a saved tiny video pipeline: AR and a method on the same seeds, film-strip
    previews while frames fill, the clips, the statistics and plots, and the clips as one GIF per side."""
    from arvis.demo.core import (
        DemoLimits,
        ModelSet,
        Progress,
        RunResult,
        comparison,
        model_info,
        side_by_side,
        stats_markdown,
        stats_plots,
        validate_request,
        write_clips_gif,
    )

    tiny_pipeline().save_pretrained(tmp_path / "pipe")
    pipe = VideoPipeline.from_pretrained(tmp_path / "pipe")
    models = ModelSet({"video": pipe})
    limits = DemoLimits(preview_interval_s=1e-6, display_size=32)
    info = model_info(pipe)
    assert info["video"] and info["grid"] == [3, 2, 2] and info["class_choices"][1] == ("1: c1", 1)
    request = validate_request(models, limits, model="video", class_label="c1", prompt=None, method="mc-sjd", seed=3,
                               num_images=2, guidance_scale=None, top_k=None, top_p=None, temperature=None,
                               live_preview=True, options={"window": 6, "coupling": "gumbel"}, timing_rounds=2)
    items = list(side_by_side(models, request, limits))
    previews = [i for i in items if isinstance(i, Progress) and i.image is not None]
    ar, method = [i for i in items if isinstance(i, RunResult)]
    assert {p.side for p in previews} == {"ar", "method"}
    assert any(p.committed < p.total == 24 for p in previews)  # frames filling: part of the clips committed
    strip = previews[0].image  # two clips, one per row, three frames across
    assert strip.width > strip.height
    assert len(ar.images) == len(method.images) == 2 and all(len(clip) == 3 for clip in ar.images)
    from arvis.utils.random import image_generators

    expected = pipe(class_labels=["c1"], num_videos_per_prompt=2, output_type="latent",
                    generator=image_generators(3, range(2))).tokens  # the seed rule of every arvis command
    assert torch.equal(ar.tokens, expected)
    stats = comparison(request, ar, method, untrained=True)
    assert stats["tokens_identical_to_ar"] is True  # Gumbel coupling reproduces AR's clips
    assert stats["ar"]["target_forwards_per_image"] == 12 and len(ar.latencies_s) == 2
    assert "| step compression |" in stats_markdown(stats)
    histogram, order = stats_plots(ar, method, info["grid"], "video")
    assert histogram.size[0] > 0 and order.size[0] > 0
    gif = write_clips_gif(method.images, tmp_path, limits.display_size, fps=4)
    assert gif.parent == tmp_path and gif_playback(gif, frame_ms=250).shape[0] == 3


def test_demo_video_tab_through_the_api(tmp_path) -> None:
    """The page's Video tab end to end (gradio_client against a server on 127.0.0.1): both sides' clips come
    back as animated GIFs with the statistics; the image endpoint refuses a video model, and bad options are
    named."""
    pytest.importorskip("gradio")
    gradio_client = pytest.importorskip("gradio_client")
    from arvis.demo.core import DemoLimits, DemoModel
    from arvis.demo.page import build_demo, launch
    from arvis.hub import tiny_random_pipeline

    models = {"images": DemoModel(pipeline=tiny_random_pipeline(), untrained=True),
              "video": DemoModel(pipeline=tiny_pipeline(), untrained=True)}
    demo = build_demo(models, DemoLimits(preview_interval_s=0.01, display_size=32))
    launch(demo, port=None, prevent_thread_lock=True, quiet=True)
    try:
        client = gradio_client.Client(demo.local_url, verbose=False, download_files=str(tmp_path))
        ar, method, status, markdown, stats = client.predict(
            model="video", class_label=2, method="mc-sjd", options="window=6,coupling=gumbel", seed=1, num_clips=2,
            guidance_scale=1.0, live_preview=True, timing_rounds=1, api_name="/generate_video")
        assert status.startswith("Done") and stats["tokens_identical_to_ar"] is True
        assert stats["ar"]["target_forwards_per_image"] == 12 and stats["num_images"] == 2
        assert "plain AR" in markdown
        for path in (ar, method):
            assert Path(path).suffix == ".gif" and gif_playback(Path(path), frame_ms=250).shape[0] == 3
        with pytest.raises(Exception, match="Video tab"):
            client.predict(model="video", class_label=0, prompt="", method="sjd", seed=0, num_images=1,
                           live_preview=False, api_name="/generate")
        with pytest.raises(Exception, match="windw"):
            client.predict(model="video", class_label=0, method="sjd", options="windw=4", api_name="/generate_video")
    finally:
        demo.close()


def test_video_quality_report_reads_every_seed_set_against_ars_spread() -> None:
    """The quality section lists each method on every seed set and says whether a lossless method's mean distance
    from AR (paired by seed set) lies inside AR's own seed-to-seed spread."""
    from tests.eval.eval_modules import eval_module

    vf = eval_module("suite_video")

    def row(label, method, base, fid, lossless=True):
        return {"label": label, "method": method, "seed_base": base, "lossless": lossless, "target_forwards": 10.0,
                "per_frame_fid": {"fid": fid, "real_vs_real_floor": 1.0}, "domain_fvd": {"fvd": 2.0,
                                                                                         "real_vs_real_floor": 0.5},
                "temporal": {"frame_change": 0.1, "feature_similarity": 0.9}}

    sets = [1, 2, 3]
    rows = [row("ar", "ar", b, f) for b, f in zip(sets, (10.0, 11.0, 12.0), strict=True)]
    rows += [row("mc-sjd:a", "mc-sjd", b, f) for b, f in zip(sets, (10.5, 11.5, 12.5), strict=True)]  # +0.5: inside
    rows += [row("mc-sjd:b", "mc-sjd", b, f) for b, f in zip(sets, (15.0, 16.0, 17.0), strict=True)]  # +5: outside
    rows += [row("zipar:x", "zipar", b, 20.0, lossless=False) for b in sets]
    q = {"seed_sets": sets, "rows": rows, "num_clips": 4, "sampling": {"guidance_scale": 3.0}, "reference_frames": 8,
         "reference": "held-out clips", "frame_network": "domain", "real": {"temporal": {"frame_change": 0.1,
                                                                                         "feature_similarity": 0.9}}}
    text = "\n".join(vf.quality_lines(q))
    assert "10.00 / 11.00 / 12.00" in text and "11.00 ± 1.00" in text
    assert "AR's seed-to-seed spread of per-frame FID over the 3 seed sets: 2.00" in text
    assert "| `mc-sjd:a` | +0.50 / +0.50 / +0.50 | +0.50 | yes |" in text
    assert "| `mc-sjd:b` | +5.00 / +5.00 / +5.00 | +5.00 | **no** |" in text
    assert "`zipar:x` | +" not in text  # lossy methods are not judged against AR's spread
