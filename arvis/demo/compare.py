"""Several decoding methods on the same images, side by side: the images, a table, and whether they match AR.

Every method decodes the same images: image ``i`` gets condition ``i mod len(conditions)`` and its own
generator ``seed_for(seed, i)`` (:func:`arvis.utils.random.seed_for`), in batches of ``batch_size``
(a batch never changes an image). So a lossless method samples the same distribution as plain AR, and
MC-SJD with Gumbel coupling reproduces AR's very tokens (checked here, image by image).

Timing: ``latency_s`` is the decode wall time the pipeline's statistics report (``stats.latency_s``:
tokens only; the VQ decoder and PNG writing are outside it), summed over an image set's batches. With
``rounds > 1`` the methods run in interleaved rounds (``ar, m1, m2, ar, m1, m2…``, so that noise from
other work on the machine falls on every method alike) and the median round is reported; ``warmup``
runs one untimed image per method first. ``speedup`` = AR latency / method latency.

:func:`write_comparison` writes the images (a folder per method when there are several), their
parameters in each PNG's metadata, ``stats.json``, and ``side_by_side.png``.

Video pipelines (``pipe.num_frames``) go the same way: an "image" is a clip (a list of PIL frames), written
as a GIF (or an MP4) per clip; ``side_by_side.gif`` plays the methods' clips next to each other, frame by
frame. Image-to-video: :class:`ImageSet`'s ``first_frames`` give each clip its first frame.
"""

from __future__ import annotations

import json
import re
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import PIL.Image
import PIL.ImageDraw
import PIL.ImageFont
import PIL.PngImagePlugin
import torch

from arvis.utils.random import image_generators, seed_for

STATS_FILE = "stats.json"
SHEET_FILE = "side_by_side.png"
SHEET_STEM = "side_by_side"
CLIP_FORMATS = ("gif", "mp4")


# ----------------------------------------------------------------------------- what to generate
@dataclass(frozen=True)
class ImageSet:
    """The images of a run.

    Attributes:
        conditions: class ids (class-conditional) or prompts (text-conditional), cycled over images.
        num_images: how many images in all.
        seed: image ``i`` uses the generator ``seed_for(seed, i)``.
        batch_size: images per pipeline call.
        first_frames: image-to-video (video pipelines): first frames (PIL or ``uint8 [H, W, 3]``), one for
            every clip or one per condition (clip ``i`` gets frame ``i mod len(first_frames)``).
    """

    conditions: tuple[int | str, ...]
    num_images: int
    seed: int = 0
    batch_size: int = 8
    first_frames: tuple[Any, ...] = ()

    def __post_init__(self) -> None:
        if not self.conditions:
            raise ValueError("conditions: give at least one class id or prompt")
        for name in ("num_images", "batch_size"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
        seed_for(self.seed, 0)  # validates the seed
        if self.first_frames and len(self.first_frames) not in (1, len(self.conditions)):
            raise ValueError(f"first_frames: give one first frame for every clip or one per condition "
                             f"({len(self.conditions)}), got {len(self.first_frames)}")

    @property
    def text(self) -> bool:
        return isinstance(self.conditions[0], str)

    def condition(self, index: int) -> int | str:
        return self.conditions[index % len(self.conditions)]

    def batches(self) -> list[list[int]]:
        return [list(range(s, min(s + self.batch_size, self.num_images)))
                for s in range(0, self.num_images, self.batch_size)]

    def call_kwargs(self, indices: Sequence[int]) -> dict[str, Any]:
        values = [self.condition(i) for i in indices]
        kwargs: dict[str, Any] = {"prompt": values} if self.text else {"class_labels": values}
        if self.first_frames:
            kwargs["image"] = [self.first_frames[i % len(self.first_frames)] for i in indices]
        return kwargs


# ----------------------------------------------------------------------------- results
@dataclass
class MethodResult:
    """One method's images (or clips: lists of frames) and figures (statistics from the first round; latency
    over all rounds)."""

    spec: Any  # arvis.eval.bench.MethodSpec
    lossless: bool
    images: list[PIL.Image.Image] | list[list[PIL.Image.Image]]
    tokens: torch.Tensor  # [num_images, h, w] (clips: [num_images, T, h, w])
    stats: list[Any]  # DecodeStats per image
    batch_latency_s: list[float]  # first round, per batch
    latencies_s: list[float] = field(default_factory=list)  # per timed round, the whole image set

    @property
    def latency_s(self) -> float:
        return statistics.median(self.latencies_s)

    def mean(self, figure: str) -> float:
        values = [getattr(s, figure) for s in self.stats]
        return sum(values) / len(values)


@dataclass
class Comparison:
    """Methods side by side on one :class:`ImageSet` (AR first when it is among them)."""

    results: list[MethodResult]
    images: ImageSet
    sampling: dict[str, Any]
    rounds: int
    warmup: bool

    @property
    def clips(self) -> bool:
        """Whether the "images" are clips (lists of frames, from a video pipeline)."""
        first = self.results[0].images
        return bool(first) and isinstance(first[0], list | tuple)

    @property
    def unit(self) -> str:
        return "clip" if self.clips else "image"

    @property
    def baseline(self) -> MethodResult | None:
        first = self.results[0]
        return first if first.spec.name == "ar" and not first.spec.options else None

    def speedup(self, result: MethodResult) -> float | None:
        base = self.baseline
        return None if base is None else base.latency_s / result.latency_s

    def forwards_vs_ar(self, result: MethodResult) -> float | None:
        """AR's target forwards per image over ``result``'s (the ratio of forwards against the same AR run; the
        step compression is one only for token models, whose AR commits one token per forward)."""
        base = self.baseline
        return None if base is None else base.mean("target_forwards") / max(result.mean("target_forwards"), 1e-12)

    def identical_to_ar(self, result: MethodResult) -> bool | None:
        """Whether ``result`` decoded exactly AR's tokens, image by image (``None`` for AR itself / no AR)."""
        base = self.baseline
        return None if base is None or result is base else bool(torch.equal(base.tokens, result.tokens))

    def timing_note(self) -> str:
        how = (f"median of {self.rounds} interleaved rounds" if self.rounds > 1 else
               "a single run per method (not a benchmark: `arvis bench` reports medians over repeats)")
        batch = min(self.images.batch_size, self.images.num_images)
        return (f"decode latency of {self.images.num_images} {self.unit}(s), batch {batch}: {how}"
                f"{', after a warm-up' if self.warmup else ''}")

    def rows(self) -> list[dict[str, Any]]:
        """One JSON-ready row per method."""
        out = []
        for r in self.results:
            out.append({
                "spec": r.spec.label, "method": r.spec.name, "options": r.spec.options_dict, "lossless": r.lossless,
                "target_forwards": r.mean("target_forwards"), "draft_forwards": r.mean("draft_forwards"),
                "step_compression": r.mean("step_compression"), "forwards_vs_ar": self.forwards_vs_ar(r),
                "accepted_per_forward": r.mean("mean_accepted_per_forward"),
                "latency_s": r.latency_s, "latency_rounds_s": list(r.latencies_s), "speedup": self.speedup(r),
                "identical_to_ar": self.identical_to_ar(r),
            })
        return out

    def table(self) -> tuple[list[str], list[list[str]]]:
        # Tokens per forward as a count: a next-scale AR commits a whole scale per forward, so only the columns
        # against AR (fewer forwards, speedup) are ratios.
        header = ["method", "lossless", f"forwards/{self.unit}", "tokens/forward", "fewer forwards than AR", "latency",
                  "speedup", "identical to AR"]
        body = []
        for row in self.rows():
            same = row["identical_to_ar"]
            body.append([row["spec"], "yes" if row["lossless"] else "no (lossy)", f"{row['target_forwards']:.1f}",
                         f"{row['step_compression']:.2f}",
                         "-" if row["forwards_vs_ar"] is None else f"{row['forwards_vs_ar']:.2f}x",
                         f"{row['latency_s']:.2f} s",
                         "-" if row["speedup"] is None else f"{row['speedup']:.2f}x",
                         "-" if same is None else ("yes" if same else "no")])
        return header, body

    def format_text(self) -> str:
        header, body = self.table()
        widths = [max(len(h), *(len(r[i]) for r in body)) for i, h in enumerate(header)]
        lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)),
                 "  ".join("-" * w for w in widths)]
        lines += ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True)))
                  for r in body]
        return "\n".join(lines + [f"({self.timing_note()})"])

    def format_markdown(self) -> str:
        header, body = self.table()
        lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        lines += ["| " + " | ".join(f"`{c}`" if i == 0 else c for i, c in enumerate(r)) + " |" for r in body]
        return "\n".join(lines + ["", f"({self.timing_note()})"])


# ----------------------------------------------------------------------------- running
def run_images(pipe: Any, spec: Any, images: ImageSet, sampling: dict[str, Any], output_type: str = "pil",
               indices: Sequence[int] | None = None) -> tuple[list[Any], torch.Tensor, list[Any], list[float]]:
    """Decode ``images`` (or only ``indices``) with one method: ``(images, tokens, stats, batch latencies)``.

    Token grids become pixels one image at a time: the VQ decoder's batched convolutions differ in the
    last float bits with the batch size, which could flip a rounded pixel, so a PNG never depends on the
    batch it was drawn in.
    """
    device = pipe.transformer.device
    batches = images.batches() if indices is None else [list(indices)]
    out_images: list[Any] = []
    tokens, stats, latencies = [], [], []
    for idx in batches:
        out = pipe(**images.call_kwargs(idx), generator=image_generators(images.seed, idx, device),
                   output_type="latent", method=spec.name, **spec.options_dict, **sampling)
        if output_type != "latent":
            out_images.extend(pipe.decode_tokens(out.tokens[k:k + 1], output_type)[0] for k in range(len(idx)))
        tokens.append(out.tokens.cpu())
        stats.extend(out.stats.samples)
        latencies.append(out.stats.latency_s)
    return out_images, torch.cat(tokens), stats, latencies


def compare_methods(pipe: Any, specs: Sequence[Any], images: ImageSet, sampling: dict[str, Any] | None = None, *,
                    rounds: int = 1, warmup: bool = False, progress: bool = True) -> Comparison:
    """Run ``specs`` on the same images (module docstring); plain AR is added first (the baseline, for every family) unless it is given.

    Args:
        pipe: an arvis pipeline (:class:`arvis.pipelines.interface.ArvisPipeline`).
        specs: method specs (:func:`arvis.eval.bench.parse_method_specs`).
        images: which images.
        sampling: ``guidance_scale``, ``top_k``… (``None`` values: the model's defaults).
        rounds: timed rounds (>= 1); the first also produces the images.
        warmup: one untimed single-image run per method first.
        progress: show a progress bar over runs.

    Returns:
        The :class:`Comparison`.
    """
    from tqdm.auto import tqdm

    from arvis.methods.spec import MethodSpec

    if isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 1:
        raise ValueError(f"rounds must be an integer >= 1, got {rounds!r}")
    specs = list(specs)
    if not any(s.name == "ar" and not s.options for s in specs):  # plain AR is the baseline of every family
        specs.insert(0, MethodSpec("ar"))
    specs.sort(key=lambda s: not (s.name == "ar" and not s.options))  # AR first: the baseline of every ratio
    sampling = {k: v for k, v in (sampling or {}).items() if v is not None}
    for spec in specs:  # every method applies to this model (refused before anything runs)
        pipe.check_method(spec.name, spec.options_dict)
    pipe.set_progress_bar_config(disable=not progress, leave=False)  # the tokens of each run, under the runs' bar
    bar = tqdm(total=len(specs) * (rounds + int(warmup)), desc="methods", unit="run", disable=not progress)
    if warmup:
        for spec in specs:
            run_images(pipe, spec, images, sampling, "latent", indices=[0])
            bar.update(1)
    results: dict[str, MethodResult] = {}
    for r in range(rounds):
        for spec in specs:
            imgs, tokens, stats, latencies = run_images(pipe, spec, images, sampling, "pil" if r == 0 else "latent")
            if r == 0:
                results[spec.label] = MethodResult(spec, pipe.is_lossless(spec.name, spec.options_dict), imgs,
                                                   tokens, stats, latencies)
            results[spec.label].latencies_s.append(sum(latencies))
            bar.update(1)
    bar.close()
    resolved = asdict(pipe.sampling_config(**sampling))
    return Comparison([results[s.label] for s in specs], images, resolved, rounds, warmup)


def compare(pipe: Any, conditions: Sequence[int | str], methods: str | Sequence[str], *, num_images: int | None = None,
            seed: int = 0, batch_size: int = 8, rounds: int = 1, warmup: bool = False, progress: bool = False,
            **sampling: Any) -> Comparison:
    """Plain AR and ``methods`` on the same images, side by side: the one-call form of :func:`compare_methods`.

    Args:
        pipe: an arvis pipeline.
        conditions: class ids or names (class-conditional models) or prompts, cycled over images.
        methods: method specs (``"mc-sjd:window=16,coupling=gumbel"``; several joined by ``;``).
        num_images: images per method (default: one per condition).
        seed: image ``i`` uses the generator ``seed_for(seed, i)``.
        batch_size, rounds, warmup, progress: as :func:`compare_methods`.
        **sampling: ``guidance_scale``, ``top_k``… (default: the model's own).

    Returns:
        The :class:`Comparison`: ``format_text()`` prints forwards, speed-up and whether each method's tokens are
        AR's; ``results[k].images`` holds each method's images (AR first).

    Example:
        >>> from arvis import LlamaGenPipeline, compare  # doctest: +SKIP
        >>> result = compare(LlamaGenPipeline.from_pretrained("emoji-names"), ["red apple"], "mc-sjd:coupling=gumbel")
        >>> print(result.format_text())
    """
    from arvis.methods.spec import parse_method_specs

    if pipe.capabilities.conditioning == "class":  # names become ids (ImageSet reads strings as prompts)
        conditions = pipe.class_ids(list(conditions))
    images = ImageSet(tuple(conditions), num_images or len(conditions), seed, batch_size)
    specs = parse_method_specs(methods if isinstance(methods, str) else ";".join(methods))
    if not any(s.name == "ar" and not s.options for s in specs):
        from arvis.methods.spec import MethodSpec

        specs.insert(0, MethodSpec("ar"))
    return compare_methods(pipe, specs, images, sampling, rounds=rounds, warmup=warmup, progress=progress)


# ----------------------------------------------------------------------------- writing
def spec_folder(label: str) -> str:
    """A folder name for a method spec: ``mc-sjd:window=16,coupling=gumbel`` → ``mc-sjd_window-16_coupling-gumbel``."""
    return re.sub(r"[^A-Za-z0-9.+-]+", "_", label.replace("=", "-")).strip("_") or "method"


def _image_name(index: int, total: int, suffix: str = "png") -> str:
    return f"{index:0{max(4, len(str(total - 1)))}d}.{suffix}"


def remove_previous_outputs(folder: Path) -> None:
    """What ``--overwrite`` removes: an earlier run's numbered PNGs, GIFs and MP4s (in the folder and its method
    folders), ``stats.json`` and the side-by-side sheet. Anything else stays."""
    numbered = re.compile(r"^\d{4,}\.(png|gif|mp4)$")
    sheets = {SHEET_FILE, *(f"{SHEET_STEM}.{f}" for f in CLIP_FORMATS)}
    for d in [folder, *(p for p in folder.iterdir() if p.is_dir())] if folder.is_dir() else []:
        for f in d.iterdir():
            if f.is_file() and (numbered.match(f.name) or (d == folder and (f.name == STATS_FILE or f.name in sheets))):
                f.unlink()


def write_comparison(comparison: Comparison, folder: str | Path, context: dict[str, Any],
                     class_names: Sequence[str] | None = None, *, clip_format: str = "gif",
                     fps: float = 4.0) -> list[Path]:
    """Write the images (or clips), ``stats.json`` and (several methods) the side-by-side sheet into ``folder``.

    Args:
        comparison: the results.
        folder: the output folder (created).
        context: fields recorded with the run and in every PNG / GIF (model name and hash, dtype, threads…);
            never absolute paths.
        class_names: the model's class names (recorded beside each class id).
        clip_format: clips only: ``"gif"`` or ``"mp4"`` (MP4 needs imageio-ffmpeg).
        fps: clips only: frames per second.

    Returns:
        The files written.
    """
    from arvis import __version__
    from arvis.utils.files import atomic_path

    clips = comparison.clips
    if clips:
        from arvis.pipelines.pipeline_video import check_fps, export_frames

        if clip_format not in CLIP_FORMATS:
            raise ValueError(f"clip_format must be one of {CLIP_FORMATS}, got {clip_format!r}")
        check_fps(fps)
    suffix = clip_format if clips else "png"
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    images = comparison.images
    several = len(comparison.results) > 1
    rows = comparison.rows()
    written: list[Path] = []
    per_image: list[dict[str, Any]] = []
    names = list(class_names or [])
    for result, row in zip(comparison.results, rows, strict=True):
        sub = folder / spec_folder(result.spec.label) if several else folder
        sub.mkdir(exist_ok=True)
        row["folder"] = sub.relative_to(folder).as_posix() if several else "."
        batch_of = {i: b for b, idx in enumerate(images.batches()) for i in idx}
        for i, (image, stats) in enumerate(zip(result.images, result.stats, strict=True)):
            condition = images.condition(i)
            entry: dict[str, Any] = {"file": (sub / _image_name(i, images.num_images, suffix)).relative_to(folder)
                                     .as_posix(), "index": i, "spec": result.spec.label}
            if images.text:
                entry["prompt"] = condition
            else:
                entry["class_label"] = condition
                if isinstance(condition, int) and 0 <= condition < len(names):
                    entry["class_name"] = names[condition]
            if clips:
                entry["frames"] = len(image)
                if images.first_frames:
                    entry["first_frame"] = i % len(images.first_frames)  # which given first frame
            entry.update(seed=images.seed, generator_seed=seed_for(images.seed, i), method=result.spec.name,
                         options=result.spec.options_dict, tokens=stats.tokens, target_forwards=stats.target_forwards,
                         draft_forwards=stats.draft_forwards, step_compression=stats.step_compression,
                         accepted_per_forward=stats.mean_accepted_per_forward,
                         batch_latency_s=result.batch_latency_s[batch_of[i]],
                         batch_images=len(images.batches()[batch_of[i]]))
            per_image.append(entry)
            parameters = {"arvis": __version__, **{k: context[k] for k in ("model", "model_sha256") if k in context},
                          **{k: v for k, v in entry.items() if k not in ("file", "spec")},
                          "sampling": comparison.sampling}
            path = folder / entry["file"]
            if clips:
                export_frames(image, path, fps=fps, comment=json.dumps(parameters, sort_keys=True))
            else:
                info = PIL.PngImagePlugin.PngInfo()
                info.add_text("Software", f"arvis {__version__}")
                info.add_text("arvis", json.dumps(parameters, sort_keys=True))
                with atomic_path(path) as tmp:
                    image.save(tmp, format="PNG", pnginfo=info)
            written.append(path)
    if several:
        if clips:  # the methods' clips next to each other, frame by frame
            frames = len(comparison.results[0].images[0])
            path = folder / f"{SHEET_STEM}.{suffix}"
            export_frames([side_by_side_sheet(comparison, frame=t) for t in range(frames)], path, fps=fps)
        else:
            path = folder / SHEET_FILE
            with atomic_path(path) as tmp:
                side_by_side_sheet(comparison).save(tmp, format="PNG")
        written.append(path)
    record = {"arvis": __version__, **context, "seed": images.seed, "num_images": images.num_images,
              "batch_size": images.batch_size, "conditions": list(images.conditions),
              "sampling": comparison.sampling,
              "timing": {"rounds": comparison.rounds, "warmup": comparison.warmup, "note": comparison.timing_note()},
              "methods": rows, "images": per_image}
    if clips:
        record["video"] = {"format": clip_format, "fps": fps, "frames": len(comparison.results[0].images[0]),
                           "image_to_video": bool(images.first_frames)}
    with atomic_path(folder / STATS_FILE) as tmp:
        tmp.write_text(json.dumps(record, indent=2) + "\n")
    written.append(folder / STATS_FILE)
    return written


def side_by_side_sheet(comparison: Comparison, max_rows: int = 4, min_cell: int = 160,
                       frame: int | None = None) -> PIL.Image.Image:
    """A sheet: one column per method (label and figures on top), one row per image (the first ``max_rows``).

    Images are scaled up by an integer factor (nearest neighbour) to at least ``min_cell`` pixels. For clips,
    ``frame`` picks the frame shown of each.
    """
    def picture(result: MethodResult, r: int) -> PIL.Image.Image:
        item = result.images[r]
        if isinstance(item, list | tuple):
            if frame is None:
                raise ValueError("frame: these are clips; say which frame the sheet shows")
            return item[frame]
        return item

    font = PIL.ImageFont.load_default(size=13)
    results, rows = comparison.results, comparison.rows()
    n = min(max_rows, comparison.images.num_images)
    w, h = picture(results[0], 0).size
    factor = max(1, -(-min_cell // max(w, h)))
    cell_w, cell_h = w * factor, h * factor
    gap, header = 8, 58
    col = max(cell_w, 200)
    sheet = PIL.Image.new("RGB", (len(results) * (col + gap) + gap, header + n * (cell_h + gap) + gap), "white")
    draw = PIL.ImageDraw.Draw(sheet)
    for c, (result, row) in enumerate(zip(results, rows, strict=True)):
        x = gap + c * (col + gap)
        name, _, options = row["spec"].partition(":")
        same = row["identical_to_ar"]
        speed = "" if row["speedup"] is None else f"  {row['speedup']:.2f}x"
        lines = [name + ("" if row["lossless"] else " (lossy)"), options[: col // 7],
                 f"{row['target_forwards']:.0f} forwards{speed}" + ("  = AR" if same else "")]
        for k, text in enumerate(lines):
            draw.text((x, 4 + 17 * k), text, fill="black", font=font)
        for r in range(n):
            im = picture(result, r).convert("RGB").resize((cell_w, cell_h), PIL.Image.NEAREST)
            sheet.paste(im, (x, header + r * (cell_h + gap)))
    return sheet
