"""What the text-to-image families' suites (Emu3, Janus) share: their records (one JSON file per stage in the
suite's folder), timing prompt by prompt, sampling, the emoji CLIP, the captioned sample grid and the model card
written beside the page."""

from __future__ import annotations

import argparse
import io
import json
import statistics
import textwrap
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from figure_runner import Page, current_model_sha256, record_model_sha256

REPO_ROOT = Path(__file__).resolve().parents[1]
#: Means over the prompts of a bench (a backbone is built for one prompt length: every prompt is timed alone).
MEAN_OVER_PROMPTS = ("target_forwards", "draft_forwards", "tokens", "step_compression", "accepted_per_forward",
                     "latency_s", "speedup")


def records(args: argparse.Namespace) -> Path:
    """The suite's records folder, ``<out>/<suite>``."""
    return args.out / args.suite


def write_record(folder: Path, name: str, data: Any) -> Path:
    from arvis.eval.files import write_json_atomic

    path = folder / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(path, data)
    print(f"wrote {path}")
    return path


def read_record(folder: Path, name: str) -> Any:
    path = folder / f"{name}.json"
    return json.loads(path.read_text()) if path.is_file() else None


def guidance_sentence(record: dict[str, Any] | None, defaults: dict[str, Any], model: str, path: str) -> str:
    """How the emoji CLIP's naming of the samples moves with guidance (and temperature):
    ``eval/emoji_names_guidance.py``'s record (seeds other than the evaluation's), when that record exists. It says
    the default scale was chosen by it only where the default is the record's best at the default temperature."""
    if not record:
        return ""
    temperature = float(defaults.get("temperature", 1.0))
    temperatures = sorted({float(r["temperature"]) for r in record["rows"]})

    def scales(t: float) -> str:
        return ", ".join(f"{r['guidance_scale']:g}: {100 * r['named_right']:.1f}%" for r in record["rows"]
                         if float(r["temperature"]) == t)

    rows = (scales(temperatures[0]) if len(temperatures) == 1
            else "; ".join(f"temperature {t:g}: {scales(t)}" for t in temperatures))
    scale_list = ",".join(f"{g:g}" for g in sorted({float(r["guidance_scale"]) for r in record["rows"]}))
    command = (f"`python eval/emoji_names_guidance.py --model {model} --scales {scale_list}"
               + (f" --temperatures {','.join(f'{t:g}' for t in temperatures)}" if len(temperatures) > 1 else "")
               + f" --seed {record['seed']} --json {path}`")
    at_default = [r for r in record["rows"] if float(r["temperature"]) == temperature]
    best = max(at_default, key=lambda r: r["named_right"], default=None)
    if best is not None and float(best["guidance_scale"]) == float(defaults.get("guidance_scale", -1)):
        lead = (f"The guidance scale is the one whose samples the emoji CLIP named most often among the "
                f"{record['classes']} names on seeds {record['seed']}+")
    else:
        lead = f"How often the emoji CLIP names the samples among the {record['classes']} names on seeds {record['seed']}+"
    rates = [100 * r["named_right"] for r in record["rows"]]
    return f" {lead} ({command}): {rows} (every setting tried: {min(rates):.1f}–{max(rates):.1f}%)."


def model_context(model: str) -> dict[str, Any]:
    """What every record of a stage says about its model (its name and its weights' content hash) and machine."""
    import torch

    from arvis.eval.provenance import provenance

    return {"model": model, "model_sha256": current_model_sha256(model), **provenance("cpu", torch.float32)}


def weights_sentence(folder: Path, names: Sequence[str], model: str) -> str:
    """Which weights the page's records were measured on: the content hash each record names (``model_context``)
    against the one ``model`` has now; records measured on other weights, or naming none, are listed."""
    now = current_model_sha256(model)
    present = {name: read_record(folder, name) for name in names}
    present = {name: record for name, record in present.items() if isinstance(record, dict)}
    other = [name for name, record in present.items() if record_model_sha256(record) not in (None, now)]
    unnamed = [name for name, record in present.items() if record_model_sha256(record) is None]
    words = f"The shipped weights' content hash is `{now}`"
    if not other and not unnamed:
        return words + f": every record of the shipped model here ({', '.join(f'`{n}`' for n in present)}) was measured on them."
    if other:
        words += f"; measured on other weights (rerun with `--force`): {', '.join(f'`{n}`' for n in other)}"
    if unnamed:
        words += f"; records that predate the hash: {', '.join(f'`{n}`' for n in unnamed)}"
    return words + "."


def bench_prompt_by_prompt(pipe: Any, prompts: Sequence[str], methods: list[str], sampling: Any,
                           inputs: Callable[[str], Any], args: argparse.Namespace) -> tuple[list[dict], list, list]:
    """``run_bench`` on each prompt alone (seed ``args.seed + i``, ``args.repeats`` interleaved rounds, the
    forward-cost curve on the first), then per method the means over prompts: (merged rows, forward-cost curve,
    the per-prompt records)."""
    from arvis.eval.bench import parse_method_specs, run_bench

    per_prompt, curve = [], []
    for i, prompt in enumerate(prompts):
        result = run_bench(inputs(prompt), parse_method_specs(methods), sampling, seed=args.seed + i,
                           repeats=args.repeats, forward_cost_sizes=(1, 2, 4, 8, 16, 32, 64) if i == 0 else (),
                           context={**model_context(args.model), "prompt": prompt}, progress=True)
        per_prompt.append(result.records)
        curve = curve or result.forward_cost
    merged = []
    for j, first in enumerate(per_prompt[0]):
        rows = [r[j] for r in per_prompt]
        merged.append({"spec": first["spec"], "method": first["method"], "lossless": first["lossless"],
                       "options": first["options"], **{k: statistics.mean(r[k] for r in rows) for k in MEAN_OVER_PROMPTS},
                       "peak_memory_mb": max(r["peak_memory_mb"] for r in rows),
                       "deterministic": all(r["deterministic"] for r in rows)})
    return merged, curve, per_prompt


def lossless_record(harness: Any, backbone: Any, condition: Any, exact: Any, draft: Any, draft_label: str,
                    broken: Any, bug: str) -> dict[str, Any]:
    """The statistical test of a family's lossless test module (``harness``: its methods, sample count, layout and
    ``draw``) with its numbers: every method against the exact distribution, draft-model speculative decoding with
    ``draft`` (shown as ``draft_label``), and the planted bug (``broken``, described by ``bug``) that must fail."""
    from tests.lossless_harness import ALPHA, check

    n = harness.N_SAMPLES
    cases = [(*param.values, 1) for param in harness.METHODS] + [("speculative", {"draft_model": draft, "window": 2}, 2)]
    rows = []
    for method, options, seed in cases:
        verdict = check(exact, harness.draw(backbone, condition, method, seed=seed, **options), n)
        shown = {k: (draft_label if k == "draft_model" else v) for k, v in options.items()}
        rows.append({"method": method, "options": shown, "tv": verdict.tv, "tv_bound": verdict.tv_bound,
                     "chi2_p": verdict.p_value, "passes": verdict.passed})
        print(method, shown, verdict)
    caught = check(exact, harness.draw(broken, condition, "sjd", seed=1, window=3), n)
    return {"samples": n, "codes": harness.K, "guidance_scale": harness.GUIDANCE, "top_k": harness.TOP_K,
            "alpha": ALPHA, "methods": rows,
            "planted_bug": {"what": bug, "method": "sjd:window=3", "tv": caught.tv, "tv_bound": caught.tv_bound,
                            "chi2_p": caught.p_value, "fails": not caught.passed}}


def load_shipped(pipeline_class: Any, model: str) -> Any:
    """The pipeline folder ``model`` names (alias or folder), fp32, without progress bars."""
    import torch

    from arvis.hub import resolve_model

    pipe = pipeline_class.from_pretrained(str(resolve_model(model)), dtype=torch.float32)
    pipe.set_progress_bar_config(disable=True)
    return pipe


def sample_images(pipe: Any, prompts: list[str], seed: int, batch_size: int, **call: Any) -> Any:
    """``uint8 [N, H, W, 3]`` samples of ``prompts``, ``batch_size`` per call; image ``i`` draws from
    ``image_generator(seed, i)`` whatever the batching."""
    import numpy as np

    from arvis.eval.jobs import image_generator

    images = []
    for start in range(0, len(prompts), batch_size):
        batch = prompts[start:start + batch_size]
        out = pipe(batch, generator=[image_generator(seed, start + i) for i in range(len(batch))], output_type="np",
                   **call)
        images.append((out.images * 255).round().astype(np.uint8))
    return np.concatenate(images)


def clip_scorer() -> tuple[Any, str | None]:
    """The emoji CLIP when it is installed (with its name), else ``(None, None)``."""
    from arvis.eval.clip_score import load_clip

    for name in ("clip-emoji", "clip-emoji-captions"):
        folder = REPO_ROOT / "arvis" / "weights" / name
        if (folder / "open_clip_config.json").is_file():
            return load_clip(str(folder)), name
    return None, None


def sample_grid(pipe: Any, prompts: list[str], seed: int, defaults: dict[str, Any], path: Path) -> None:
    """One AR sample per prompt (``image_generator(seed, i)``) in a grid of 8 columns, each captioned, as PNG."""
    from PIL import Image, ImageDraw

    from arvis.eval.files import write_bytes_atomic
    from arvis.eval.jobs import image_generator

    images = pipe(prompts, generator=[image_generator(seed, i) for i in range(len(prompts))], **defaults).images
    cell, label, cols = 128, 30, 8
    grid = Image.new("RGB", (cols * cell, (len(images) + cols - 1) // cols * (cell + label)), "white")
    draw = ImageDraw.Draw(grid)
    for i, (image, caption) in enumerate(zip(images, prompts, strict=True)):
        x, y = (i % cols) * cell, (i // cols) * (cell + label)
        grid.paste(image.resize((cell, cell)), (x, y))
        draw.multiline_text((x + 2, y + cell + 1), "\n".join(textwrap.wrap(caption, 21)[:2]), fill="black", spacing=1)
    grid.save(buffer := io.BytesIO(), format="PNG")
    write_bytes_atomic(path, buffer.getvalue())


def model_card_writer(card: Callable[[Path, Path], str | None]) -> Callable[[Page], list[Path]]:
    """An extra of a suite: the shipped model's README, ``card(model folder, records folder)``, when the model
    exists and has its training records."""

    def write(page: Page) -> list[Path]:
        from arvis.eval.files import write_bytes_atomic
        from arvis.hub import resolve_model

        try:
            folder = resolve_model(page.settings.model)
        except ValueError:
            return []
        text = card(folder, page.out / page.suite)
        return [] if text is None else [write_bytes_atomic(folder / "README.md", text.encode())]

    return write


def forward_cost_lines(curve: list[dict]) -> list[str]:
    """A bench's forward-cost curve as a table, one row per window size (nothing when it has none)."""
    if not curve:
        return []
    return ["Forward cost on this machine (ms per target forward vs positions evaluated):", "",
            "| positions | ms | vs 1 |", "|---|---|---|",
            *(f"| {c['positions']} | {c['ms']:.2f} | {'-' if c['ratio'] is None else format(c['ratio'], '.2f')} |"
              for c in curve), ""]


@dataclass(frozen=True)
class TrainingRecords:
    """What a shipped text-to-image folder says about its training: the trainers' metrics (VQ, language model and
    the draft's when there is one), the transformer's config, its weights' size and its sampling defaults."""

    vq: dict[str, Any]
    lm: dict[str, Any]
    draft: dict[str, Any] | None
    config: dict[str, Any]
    size_mb: float
    defaults: dict[str, Any]


def training_records(folder: Path) -> TrainingRecords | None:
    """The folder's :class:`TrainingRecords`, ``None`` before it is trained (no VQ or language-model metrics)."""
    training = folder / "training"
    vq_file, lm_file, draft_file = (training / f"{part}_training_metrics.json" for part in ("vq", "lm", "draft"))
    if not (vq_file.is_file() and lm_file.is_file()):
        return None
    return TrainingRecords(json.loads(vq_file.read_text()), json.loads(lm_file.read_text()),
                           json.loads(draft_file.read_text()) if draft_file.is_file() else None,
                           json.loads((folder / "transformer" / "config.json").read_text()),
                           sum(f.stat().st_size for f in folder.rglob("*.safetensors")) / 1e6,
                           json.loads((folder / "sampling_defaults.json").read_text()))
