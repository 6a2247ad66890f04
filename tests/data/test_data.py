"""Tests for arvis.data: photo registry, class-conditional crops, captioned scenes, motion clips."""

from __future__ import annotations

import numpy as np
import pytest

from arvis.data import cache, crops, photos, scenes, video
from arvis.data.crops import photo_regions, sample_crop_specs
from arvis.data.photos import PHOTO_CLASSES

EXPECTED_CLASSES = (
    "astronaut", "brick", "camera", "cell", "chelsea", "china", "clock", "coffee", "coins", "colorwheel",
    "flower", "grass", "gravel", "hubble_deep_field", "immunohistochemistry", "logo", "moon", "motorcycle",
    "page", "retina", "rocket", "text",
)


# ---------------------------------------------------------------------------------------------- photos
def test_class_list_is_stable() -> None:
    assert PHOTO_CLASSES == EXPECTED_CLASSES
    assert photos.photo_label("grass") == EXPECTED_CLASSES.index("grass")
    with pytest.raises(ValueError, match="name must be one of"):
        photos.photo_label("horse")


def test_photos_load_as_rgb_uint8_read_only() -> None:
    for name in PHOTO_CLASSES:
        image = photos.load_photo(name)
        assert image.dtype == np.uint8 and image.ndim == 3 and image.shape[2] == 3, name
        assert not image.flags.writeable
        assert image.std() > 10, name  # not degenerate
    assert np.array_equal(photos.load_photo("camera")[..., 0], photos.load_photo("camera")[..., 2])
    with pytest.raises(ValueError, match="name must be one of"):
        photos.load_photo("cat")  # duplicate of chelsea, excluded


def test_regions_are_disjoint_and_large_enough() -> None:
    for name in PHOTO_CLASSES:
        h, w = photos.load_photo(name).shape[:2]
        reg = photo_regions(name)
        tr, ho = reg["train"], reg["heldout"]
        assert min(tr.height, tr.width) >= 128 and min(ho.height, ho.width) >= 128, name
        assert tr.left + tr.width == ho.left and ho.left + ho.width == w, name  # a partition of the columns
        assert tr.height == ho.height == h
        assert not tr.overlaps(ho.top, ho.left, ho.height, ho.width)
        assert ho.width >= 0.25 * w


# ---------------------------------------------------------------------------------------------- crops
def test_crop_specs_stay_in_their_region() -> None:
    """Held-out crops never touch a training pixel (checked on the construction coordinates)."""
    for split, other in (("train", "heldout"), ("heldout", "train")):
        specs = sample_crop_specs(3000, split, seed=3)
        assert set(np.unique(specs.labels)) == set(range(len(PHOTO_CLASSES)))  # every class drawn
        for i in range(len(specs)):
            reg = photo_regions(PHOTO_CLASSES[specs.labels[i]])
            box = (int(specs.top[i]), int(specs.left[i]), int(specs.side[i]), int(specs.side[i]))
            assert reg[split].contains(*box)
            assert not reg[other].overlaps(*box)
        short = np.array([min(photo_regions(PHOTO_CLASSES[k])[split].height,
                              photo_regions(PHOTO_CLASSES[k])[split].width) for k in specs.labels])
        ratio = specs.side / short
        assert ratio.min() >= 0.24 and ratio.max() <= 1.0
        assert 0.4 < specs.flip.mean() < 0.6


def test_crops_are_deterministic_with_shapes() -> None:
    a, la = crops.train_crops(24, resolution=32, seed=11)
    b, lb = crops.train_crops(24, resolution=32, seed=11)
    c, _ = crops.train_crops(24, resolution=32, seed=12)
    h, lh = crops.heldout_crops(24, resolution=32, seed=11)
    assert a.shape == (24, 32, 32, 3) and a.dtype == np.uint8
    assert la.shape == (24,) and la.dtype == np.int64
    assert np.array_equal(a, b) and np.array_equal(la, lb)
    assert not np.array_equal(a, c)
    assert not np.array_equal(a, h)  # the held-out stream is a different stream
    assert lh.min() >= 0 and lh.max() < len(PHOTO_CLASSES)


def test_render_crop_flip_and_resize() -> None:
    photo = photos.load_photo("astronaut")
    plain = crops.render_crop(photo, 10, 20, 64, False, 64)
    assert np.array_equal(plain, photo[10:74, 20:84])
    assert np.array_equal(crops.render_crop(photo, 10, 20, 64, True, 64), plain[:, ::-1])
    assert crops.render_crop(photo, 0, 0, 300, False, 48).shape == (48, 48, 3)
    with pytest.raises(ValueError, match="exceeds"):
        crops.render_crop(photo, 500, 0, 64, False, 32)


def test_crop_cache_round_trip(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("ARVIS_CACHE", str(tmp_path))
    assert cache.cache_dir() == tmp_path
    a, la = crops.build_crops(8, "heldout", resolution=16, seed=1, cache=True)
    files = list(tmp_path.iterdir())
    assert len(files) == 1 and files[0].suffix == ".npz"  # no temp file left behind
    b, lb = crops.build_crops(8, "heldout", resolution=16, seed=1, cache=True)
    assert np.array_equal(a, b) and np.array_equal(la, lb)
    crops.build_crops(8, "heldout", resolution=16, seed=2, cache=True)
    assert len(list(tmp_path.iterdir())) == 2  # other parameters -> other file


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(n=4, split="test"), "split must be one of"),
        (dict(n=-1), "n must be an int >= 0"),
        (dict(n=4, scale=(0.0, 1.0)), "scale"),
        (dict(n=4, scale=(0.8, 0.5)), "scale"),
        (dict(n=4, scale=(0.5, 1.5)), "scale"),
        (dict(n=4, resolution=4), "resolution"),
    ],
)
def test_crop_errors(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        crops.build_crops(**kwargs)


# ---------------------------------------------------------------------------------------------- scenes
def test_vocabulary_is_small_and_covers_captions() -> None:
    assert len(scenes.VOCABULARY) < 100 and scenes.VOCABULARY[0] == "<pad>"
    assert len(set(scenes.VOCABULARY)) == len(scenes.VOCABULARY)
    for i in range(200):
        caption = scenes.sample_scene(0, i).caption
        ids = scenes.tokenize(caption)
        assert 0 < min(ids) and max(ids) < len(scenes.VOCABULARY)
        assert len(ids) <= scenes.MAX_CAPTION_WORDS
        assert " ".join(scenes.VOCABULARY[j] for j in ids) == caption
    with pytest.raises(ValueError, match="not in VOCABULARY"):
        scenes.tokenize("a large red dog on the left over grass")


def test_scenes_deterministic_and_prefix_stable() -> None:
    a, ca, _ = scenes.build_scenes(6, resolution=32, seed=4)
    b, cb, _ = scenes.build_scenes(6, resolution=32, seed=4)
    c, cc, _ = scenes.build_scenes(3, resolution=32, seed=4)
    assert a.shape == (6, 32, 32, 3) and a.dtype == np.uint8
    assert np.array_equal(a, b) and ca == cb
    assert np.array_equal(a[:3], c) and ca[:3] == cc
    d, cd, _ = scenes.build_scenes(6, resolution=32, seed=5)
    assert cd != ca


def test_caption_round_trip_matches_drawn_objects() -> None:
    """The caption names exactly the objects drawn, and the last-drawn object shows its colour."""
    images, captions, specs = scenes.build_scenes(40, resolution=96, seed=7)
    n_objects = set()
    for image, caption, spec in zip(images, captions, specs, strict=True):
        parsed, background = scenes.parse_caption(caption)
        assert background == spec.background
        assert parsed == [(o.size, o.colour, o.shape, o.place) for o in spec.objects]
        assert len({o.place for o in spec.objects}) == len(spec.objects)  # distinct places
        n_objects.add(len(spec.objects))
        top = spec.objects[-1]  # drawn last: nothing covers it
        dx = 0.77 * top.radius if top.shape == "ring" else 0.0  # a point inside the ring band
        x, y = int((top.cx + dx) * 96), int(top.cy * 96)
        expected = np.array(scenes.COLOURS[top.colour])
        assert np.abs(image[y, x].astype(int) - expected).max() <= 10, caption
        # the place word agrees with the object's position
        col, row = scenes.PLACES[top.place]
        assert abs(top.cx - (2 * col + 1) / 6) < 0.2 and abs(top.cy - (2 * row + 1) / 6) < 0.2
        assert spec.describe()["caption"] == caption
    assert n_objects == {1, 2, 3}


def test_heldout_scene_backgrounds_come_from_heldout_strip() -> None:
    for i in range(50):
        spec = scenes.sample_scene(0, i, split="heldout")
        top, left, side, _ = spec.background_box
        reg = photo_regions(scenes.BACKGROUNDS[spec.background])
        assert reg["heldout"].contains(top, left, side, side)
        assert not reg["train"].overlaps(top, left, side, side)


def test_scene_errors() -> None:
    with pytest.raises(ValueError, match="over"):
        scenes.parse_caption("a large red circle on the left")
    with pytest.raises(ValueError, match="bad object phrase"):
        scenes.parse_caption("a huge red circle on the left over grass")
    with pytest.raises(ValueError, match="max_objects"):
        scenes.build_scenes(2, max_objects=4)
    with pytest.raises(ValueError, match="split"):
        scenes.build_scenes(2, split="val")
    with pytest.raises(ValueError, match="background"):
        scenes.make_caption([scenes.sample_scene(0, 0).objects[0]], "sky")


# ---------------------------------------------------------------------------------------------- video
def test_clips_deterministic_shapes_and_motion() -> None:
    a, la, ma = video.build_clips(6, num_frames=4, resolution=24, seed=2)
    b, lb, mb = video.build_clips(6, num_frames=4, resolution=24, seed=2)
    assert a.shape == (6, 4, 24, 24, 3) and a.dtype == np.uint8
    assert np.array_equal(a, b) and np.array_equal(la, lb) and np.array_equal(ma, mb)
    assert not np.array_equal(a[:, 0], a[:, -1])  # the camera moves
    seen = set()
    for i in range(120):
        for split, other in (("train", "heldout"), ("heldout", "train")):
            spec = video.sample_clip(9, i, split, num_frames=8)
            seen.add(spec.motion)
            reg = photo_regions(PHOTO_CLASSES[spec.label])
            x0, y0, x1, y1 = spec.boxes[:, 0], spec.boxes[:, 1], spec.boxes[:, 2], spec.boxes[:, 3]
            assert np.allclose(x1 - x0, y1 - y0)  # square views
            assert x0.min() >= reg[split].left - 1e-6 and x1.max() <= reg[split].left + reg[split].width + 1e-6
            assert y0.min() >= -1e-6 and y1.max() <= reg[split].height + 1e-6
            assert x1.max() <= reg[other].left + 1e-6 or x0.min() >= reg[other].left + reg[other].width - 1e-6
            side, dx, dy = x1 - x0, np.diff(x0), np.diff(y0)
            expect = {
                "pan_left": dx < 0, "pan_right": dx > 0, "pan_up": dy < 0, "pan_down": dy > 0,
                "zoom_in": np.diff(side) < 0, "zoom_out": np.diff(side) > 0,
            }[spec.motion]
            assert expect.all(), spec.motion
    assert seen == set(video.MOTIONS)


def test_clip_errors() -> None:
    with pytest.raises(ValueError, match="num_frames"):
        video.build_clips(1, num_frames=1)
    with pytest.raises(ValueError, match="split"):
        video.build_clips(1, split="dev")
    with pytest.raises(ValueError, match="n must be"):
        video.build_clips(-2)
