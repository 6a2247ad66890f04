"""Model cards of the shipped VAR pair, written from the training records and the evaluation records.

    python eval/var_model_card.py --pipeline var-emoji \
        --train-metrics <target export>/training_metrics.json <draft export>/training_metrics.json \
        --assemble-command "python -m arvis.training.assemble ..."

Reads ``arvis/weights/<tokenizer>/metrics.json`` (tokenizer training + held-out reconstruction; the tokenizer is
the folder the pipeline's ``vqvae`` links to), ``arvis/weights/<pipeline>/metrics.json`` (target and draft
training), ``docs/figures/var/vq_rfid.json`` (rFID), the naming record of ``eval/naming_card.py``
(``docs/figures/naming/<pipeline>.json``, with its captioned grid) and the FID records of ``eval/var_figures.py``
(``docs/figures/var/fid/``); writes both folders' ``README.md``. Photo-trained pipelines (no naming record) get
an uncaptioned grid with ``--grid``. Nothing is typed in by hand: a missing record shows as "not measured".
"""

from __future__ import annotations

import argparse
import json
import os
import re
from pathlib import Path
from typing import Any

WEIGHTS = Path("arvis/weights")
FIGS = Path("docs/figures/var")


def portable(command: str) -> str:
    """A recorded command without this machine's absolute paths: ``/any/dir/name`` → ``<scratch>/name``."""
    return re.sub(r"(?<![\w<>])/[\w./-]*/([\w.-]+)", r"<scratch>/\1", command)


def _sanitize(path: Path) -> dict | None:
    """Rewrite the ``command`` fields of a committed metrics file with :func:`portable` (in place)."""
    rec = _load(path)
    if not isinstance(rec, dict):
        return rec
    for part in (rec, *(v for v in rec.values() if isinstance(v, dict))):
        for key in ("command", "assemble_command"):
            if isinstance(part.get(key), str):
                part[key] = portable(part[key])
    path.write_text(json.dumps(rec, indent=2) + "\n")
    return rec


def _load(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _fid(spec_method: str, seed: int) -> dict | None:
    for path in sorted((FIGS / "fid").glob(f"{spec_method}-seed{seed}-n*.json")):
        return _load(path)
    return None


def _f(x: Any, digits: int = 2) -> str:
    return "not measured" if x is None else f"{x:.{digits}f}"


def _vq_data(c: dict) -> str:
    data = c.get("data", "photos")
    if data == "photos":
        return (f"`arvis.data.crops` (the 22 offline scikit-image / scikit-learn photos, train regions only): fresh "
                f"random crops (side {c['crop_scale'][0]}–{c['crop_scale'][1]} of the region's short side, random "
                f"flips) rendered at {c['resolution']} px.")
    from arvis.data.sources import data_recipe

    return data_recipe(data, c["resolution"]) + f" Whole renders at {c['resolution']} px, batch {c['batch_size']}."


def _vq_steps(c: dict, m: dict, fit: dict) -> str:
    """The numbered recipe of a tokenizer run: warm start or fine-tune, latent fit, pixel steps."""
    steps = []
    if c.get("init_from"):
        what = ("only `post_quant_conv` and the decoder trained; the encoder, `quant_conv`, codebook and φ frozen, so "
                "every image keeps its codes" if c.get("decoder_only") else "every weight loaded")
        steps.append(f"Fine-tuned from `{c['init_from']}` ({what}).")
    elif c.get("warm_start"):
        steps.append(
            f"Warm start from the LlamaGen tokenizer `{c['warm_start']}` (same encoder/decoder bodies): "
            f"{m['warm_started_tensors']} tensors copied; the layers next to the latent are LlamaGen's folded together "
            "(`conv_out` ∘ `quant_conv` and `post_quant_conv` ∘ `conv_in` are linear, so they compose exactly), VAR's "
            "`quant_conv` / `post_quant_conv` and φ start as identities, the codebook starts as LlamaGen's "
            "(l2-normalised) and the encoder output is scaled to unit mean norm"
            + ("; the encoder body stays frozen." if c.get("freeze_encoder_body") else "."))
    if c.get("latent_steps"):
        steps.append(
            f"Codebook and φ fitted to the latents of {c['latent_crops']} training images ({c['latent_steps']} Adam "
            f"steps, batch {c['latent_batch']}, lr {c['latent_lr']}, VAR's codebook loss: mean over scales of "
            "‖f̂_s − f‖², unused entries re-seeded from residual vectors), encoder and decoder fixed.")
    if c["steps"]:
        tl = m.get("final_train_losses") or {}
        steps.append(
            f"{c['steps']} pixel-space steps (batch {c['batch_size']}, L1 + L2 + VAR's quantiser losses, AdamW lr "
            f"{c['lr']}, warm-up {c['warmup']}, cosine, EMA {c['ema_decay']} exported); last logging window: L1 "
            f"{_f(tl.get('l1'), 4)}, L2 {_f(tl.get('l2'), 4)}.")
    else:
        steps.append("No pixel-space steps: on the shared CPU of the time a 64 px step at batch 16 took 10–50 s.")
    if c.get("latent_steps") and fit:
        steps.append(f"Last log of the latent fit: codebook loss {_f(fit.get('vq'), 4)}, final-scale latent MSE "
                     f"{_f(fit.get('final_scale_mse'), 4)}, {fit.get('used', '–')} of {c['vocab_size']} entries used.")
    return "\n".join(f"{i}. {t}" for i, t in enumerate(steps, 1))


def naming_rows(naming: dict | None) -> str:
    """The three naming rows of a card (samples, real renders, tokenizer round trip), from a naming record."""
    if not naming:
        return "| the emoji CLIP names the sample's own emoji among the class names | not measured |"
    n = len(naming.get("labels", [])) or naming["images"]
    return (f"| the emoji CLIP names the sample's own emoji among all {round(1 / naming['chance'])} class names "
            f"({n} samples, seed {naming['seed']}) | **{100 * naming['class_consistency']:.1f}%** |\n"
            f"| the same CLIP on the real renders of those emoji at {naming['resolution']} px (its ceiling; chance "
            f"{100 * naming['chance']:.1f}%) | {100 * naming['clip_real_renders_named']:.1f}% |\n"
            f"| the same CLIP on those renders round-tripped through the tokenizer (the decoder's ceiling) | "
            f"{100 * naming['clip_vq_reconstructions_named']:.1f}% |")


def vq_card(m: dict, rfid: dict | None, name: str, pipeline: str, naming: dict | None = None) -> str:
    c = m["config"]
    fit = next((h for h in reversed(m.get("history") or []) if "latent_step" in h), None) or \
        (m.get("final_train_losses") if not c["steps"] else {}) or {}
    emoji = c.get("data", "photos") != "photos"
    held = "held-out emoji (never rendered for training)" if emoji else "held-out crops (never overlapping training pixels)"
    rt = (f"\nThe emoji CLIP names {100 * naming['clip_vq_reconstructions_named']:.1f}% of the "
          f"{round(1 / naming['chance'])} named emoji after a round trip through this tokenizer at {naming['resolution']} px "
          f"({100 * naming['clip_real_renders_named']:.1f}% of the renders themselves; "
          f"`docs/figures/naming/{pipeline}.json`).\n" if naming else "")
    return f"""# {name}: arvis's multi-scale VQ tokenizer for VAR

A `VARVQModel` (`arvis.tokenizers.var_vq`: VAR's residual multi-scale quantiser with one shared codebook and
partially shared φ convolutions, official key layout) at reduced width. A {c['resolution']}x{c['resolution']} RGB image becomes a
pyramid of token maps of sides {c['patch_nums']} ({sum(p * p for p in c['patch_nums'])} tokens) from a
{c['vocab_size']}-entry codebook of dimension {c['z_channels']}. Shared by the `var` pipeline (`arvis/weights/{pipeline}`,
whose `vqvae` links here).

```python
from arvis.tokenizers.var_vq import VARVQModel
vq = VARVQModel.from_pretrained("arvis/weights/{name}")       # fp16 file, loads as fp32
codes = vq.encode(images)        # [B, 3, {c['resolution']}, {c['resolution']}] in [-1, 1] -> [B, {sum(p * p for p in c['patch_nums'])}] (all scales)
images = vq.decode_codes(codes)  # -> [B, 3, {c['resolution']}, {c['resolution']}] in [-1, 1]
```

## Architecture
base width {c['ch']}, ch_mult {c['ch_mult']} (down-sampling {2 ** (len(c['ch_mult']) - 1)}), {c['num_res_blocks']} residual blocks per
level (decoder +1), attention at the lowest resolution and in the middle, GroupNorm {c['norm_num_groups']} groups, code
dimension {c['z_channels']}, 3x3 `quant_conv` / `post_quant_conv`, {c['share_quant_resi']} partially shared φ (ratio 0.5).
{m['params']:,} parameters, {m['safetensors_mb']:.1f} MB as fp16 safetensors. Decoding one image: {m['decode_ms']:.0f} ms
(fp32, {m['torch_threads']} thread, median of 10, machine shared).

## Data
{_vq_data(c)}

## Training
```
{m['command']}
```

{_vq_steps(c, m, fit)}

Wall time {m['train_hours']:.2f} h (1 thread on a shared 2-core machine).

## Evaluation (the shipped fp16 weights)
{m['eval_crops']} {held}, {c['resolution']} px:

| metric | value |
|---|---|
| PSNR (mean of per-image, uint8) | {m['psnr']:.2f} dB |
| L1 on [-1, 1] | {m['l1']:.4f} |
| codebook usage (all scales) | {100 * m['usage']:.1f}% |
| usage per scale | {', '.join(f'{100 * u:.0f}%' for u in m['usage_per_scale'])} |
| code perplexity | {m['perplexity']:.0f} |
| rFID (domain network, {rfid['num'] if rfid else '–'} held-out images) | {_f(rfid and rfid['rfid'])} |
| the originals themselves / real-vs-real floor | {_f(rfid and rfid['fid_of_the_originals'])} / {_f(rfid and rfid['real_vs_real_floor'])} |

`python eval/vq_rfid.py --vq arvis/weights/{name}{' --data emoji' if emoji else ''} --num 1000 --json docs/figures/var/vq_rfid.json`.
{rt}
Reconstructions (originals above): `docs/{name}-reconstructions.png`.
"""


def run_history(log_text: str, final_steps: int) -> list[dict[str, int]]:
    """The starts of a training run from its scratch ``train.log``: the first start's cosine schedule length
    (from its logged config) and every resume; a resume continues with the final command's ``final_steps``
    (its schedule length is the run's exported ``preset_config.steps``)."""
    history = []
    for line in log_text.splitlines():
        if "INFO new run:" in line:
            config = json.loads(line[line.index("{"):])
            history.append({"at_step": 0, "schedule_steps": int(config["steps"])})
        elif match := re.search(r"INFO resumed at step (\d+)", line):
            history.append({"at_step": int(match.group(1)), "schedule_steps": final_steps})
    return history


def _history_text(part: dict) -> str:
    runs = part.get("runs") or []
    if len(runs) <= 1:
        return "one uninterrupted run"
    first, *resumes = runs
    text = f"started with a {first['schedule_steps']}-step cosine schedule"
    for r in resumes:
        text += f"; resumed from the step-{r['at_step']} checkpoint with a {r['schedule_steps']}-step schedule"
    return text + " (sessions ended; each resume continues the checkpointed weights, optimiser and EMA)"


def _pipeline_data(t: dict, vq_name: str) -> str:
    c = t["config"]
    if c.get("data", "photos") == "photos":
        return (f"`arvis.data.crops`: {c['num_train']:,} train crops (seed 0) of the 22 photos' train regions (side "
                f"0.25–1.0 of the short side, random position and flip) at 64 px, tokenised once by `{vq_name}`; "
                f"validation: {c['num_val']} held-out crops (seed 1, disjoint strips).")
    from arvis.data.sources import data_recipe

    return (data_recipe(c["data"], c["resolution"]) + f" The transformers see {c['num_train']:,} augmented training "
            f"views (seed 0), tokenised once by `{vq_name}`; validation: {c['num_val']} other views (seed 1).")


def _alias_sentence(name: str) -> str:
    """Which short name loads this folder (from the hub), or how to load it by folder name."""
    from arvis.hub import SHIPPED_PIPELINES

    alias = next((a for a, folder in SHIPPED_PIPELINES.items() if folder == name), None)
    if alias is None:
        return f"No short name: load it by its folder, `arvis generate --model arvis/weights/{name}`."
    return f"Alias `{alias}` in `arvis generate|bench|fid --model {alias}` and the demo."


def pipeline_card(m: dict, defaults: dict, name: str, vq_name: str, naming: dict | None = None) -> str:
    t, d = m["transformer"], m["draft_transformer"]
    for part in (t, d):
        c = part["preset_config"]
        part["arch"], part["config"] = f"{c['depth']} / {c['num_heads']} / {c['embed_dim']}", c
    ar0, ar1 = _fid("ar", 0), _fid("ar", 1)
    noise = abs(ar0["fid"] - ar1["fid"]) if ar0 and ar1 else None
    from arvis.data.sources import class_names

    data = t["config"].get("data", "photos")
    names = class_names(data)
    examples = ", ".join(f'"{n}"' for n in (names[0], names[len(names) // 2]))
    classes = (f"{len(names)} single emoji, one class each" if data == "emoji-names"
               else f"{len(names)} {'photo' if data == 'photos' else 'emoji'} classes")
    reference = ("5,000 held-out crops" if data == "photos" else "5,000 other views of the same emoji") + " at 64 px"

    def row(label: str, key: str, fmt: str = "{}") -> str:
        return f"| {label} | {fmt.format(t[key])} | {fmt.format(d[key])} |"

    grid = (f"Sample grid (one sample per class, captioned with its name; `eval/naming_card.py`): "
            f"`{naming['grid']}`." if naming and naming.get("grid") else
            f"Samples (plain next-scale decoding, CFG {defaults.get('guidance_scale')}): `docs/{name}-samples.png`.")
    return f"""# {name}: arvis's VAR pair (next-scale prediction)

A `VARPipeline` folder: a class-conditional VAR transformer (`transformer`, the target) over {classes}, a much smaller
VAR on the same tokenizer (`draft_transformer`: CoDe's refiner, and the draft of the acceptance measurement),
and the multi-scale tokenizer (`vqvae`, a relative link to `../{vq_name}`). {_alias_sentence(name)}

```python
from arvis.pipelines import VARPipeline
pipe = VARPipeline.from_pretrained("arvis/weights/{name}")
out = pipe(class_labels=[{examples}], guidance_scale={defaults.get('guidance_scale')})           # plain next-scale decoding
fast = pipe(class_labels=[{examples}], method="code", draft_scales=4)   # CoDe: small model refines
```

Default sampling (`sampling_defaults.json`): VAR CFG {defaults.get('guidance_scale')} with VAR's ramp over scales, top-k
{defaults.get('top_k')} (off), temperature 1.

## Architecture
| | transformer | draft_transformer |
|---|---|---|
{row('depth / heads / width', 'arch')}
{row('parameters', 'params', '{:,}')}
| fp16 safetensors | {t['mb']:.1f} MB | {d['mb']:.1f} MB |

VAR (`arvis.models.var.VARTransformer`, official state-dict keys): AdaLN blocks (per-block `ada_lin`),
l2-normalised attention with a learned scale, GELU MLP ×4, class embedding with a null class ({len(names)}
classes), level and position embeddings, block-causal attention over scales {m['patch_nums']}.

## Data
{_pipeline_data(t, vq_name)}

## Training
```
{t['command']}
{d['command']}
{m['assemble_command']}
```
VAR's recipe: teacher forcing with the tokenizer's next-scale inputs, cross-entropy averaged over all tokens,
10% class dropout to the null class, AdamW (0.9, 0.95; weight decay 0.05), clip 2.0, VAR's initialisation;
warm-up + cosine; EMA {t['config']['ema_decay']}; the better of raw and EMA weights on validation loss is shipped.

| | transformer | draft_transformer |
|---|---|---|
{row('steps (batch 32)', 'steps')}
{row('wall time (h, 1 thread, shared 2-core machine)', 'train_hours', '{:.2f}')}
{row('final training loss', 'final_train_loss', '{:.3f}')}
{row('validation loss (all scales)', 'val_loss', '{:.3f}')}
{row('validation loss (last scale)', 'val_loss_last_scale', '{:.3f}')}
{row('exported weights', 'exported_weights')}

Run history — transformer: {_history_text(t)}; draft_transformer: {_history_text(d)}.

## Evaluation
Commands: `python eval/var_figures.py` (all figures: docs/figures/var.md); FID with the shipped domain network
against {reference}; `python eval/naming_card.py --model var --samples-dir <scratch>/naming-var --json
docs/figures/naming/{name}.json --grid docs/{name}-samples.png` (naming).

| metric (plain next-scale decoding, defaults) | value |
|---|---|
{naming_rows(naming) if data == "emoji-names" else ""}
| FID, N = {ar0['num_generated'] if ar0 else '–'} (seed 0) | {_f(ar0 and ar0['fid'])} |
| same, seed 1 (seed-to-seed noise {_f(noise)}) | {_f(ar1 and ar1['fid'])} |
| real-vs-real floor at the same N | {_f(ar0 and ar0.get('real_vs_real_floor'))} |

{grid}
""".replace("|---|\n\n|", "|---|\n|")


def write_grid(path: Path, pipeline: str, per_class: int = 2) -> None:
    import numpy as np
    import torch
    from PIL import Image

    from arvis.pipelines import VARPipeline

    pipe = VARPipeline.from_pretrained(str(WEIGHTS / pipeline))
    pipe.set_progress_bar_config(disable=True)
    defaults = _load(WEIGHTS / pipeline / "sampling_defaults.json") or {}
    classes = list(range(pipe.transformer.num_classes))
    rows = []
    for k in range(per_class):
        out = pipe(class_labels=classes, generator=[torch.Generator().manual_seed(1000 * k + c) for c in classes],
                   output_type="np", **defaults)
        rows.append(np.concatenate(list((out.images * 255).round().astype(np.uint8)), axis=1))
    Image.fromarray(np.concatenate(rows, axis=0)).save(path)


def main(argv: list[str] | None = None) -> None:
    global FIGS  # --figures: where this pipeline's records are read from
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--pipeline", default="var-emoji", help="the pipeline folder under arvis/weights")
    p.add_argument("--grid", default=None, help="also write an uncaptioned sample grid PNG here (photo models)")
    p.add_argument("--train-metrics", nargs=2, default=None, metavar=("TARGET", "DRAFT"),
                   help="the two runs' training_metrics.json: (re)write arvis/weights/<pipeline>/metrics.json")
    p.add_argument("--assemble-command", default="", help="recorded in metrics.json with --train-metrics")
    p.add_argument("--figures", default=str(FIGS), type=Path,
                   help="where the pipeline's FID and rFID records are (a pipeline that is not the `var` alias: its "
                        "own folder, so that no other model's records reach its card; missing records show as not "
                        "measured)")
    p.add_argument("--train-logs", nargs=2, default=None, metavar=("TARGET", "DRAFT"),
                   help="the two runs' scratch train.log (with --train-metrics): their starts and resumes")
    args = p.parse_args(argv)
    FIGS = args.figures
    folder = WEIGHTS / args.pipeline
    vq_name = Path(os.readlink(folder / "vqvae")).name if (folder / "vqvae").is_symlink() else "var-vq-photos"
    if args.train_metrics:
        merged: dict[str, Any] = {"assemble_command": args.assemble_command}
        for name, path in zip(("transformer", "draft_transformer"), args.train_metrics, strict=True):
            rec = _load(Path(path))
            if not isinstance(rec, dict):
                raise ValueError(f"--train-metrics: cannot read {path}")
            rec["mb"] = (folder / name / "diffusion_pytorch_model.safetensors").stat().st_size / 1e6
            if args.train_logs:
                log_path = Path(args.train_logs[("transformer", "draft_transformer").index(name)])
                rec["runs"] = run_history(log_path.read_text(), int(rec["preset_config"]["steps"]))
            merged[name] = rec
        merged["patch_nums"] = json.loads((folder / "transformer" / "config.json").read_text())["patch_nums"]
        (folder / "metrics.json").write_text(json.dumps(merged, indent=2) + "\n")
    naming = _load(Path("docs/figures/naming") / f"{args.pipeline}.json")
    vq = _sanitize(WEIGHTS / vq_name / "metrics.json")
    if vq:
        (WEIGHTS / vq_name / "README.md").write_text(vq_card(vq, _load(FIGS / "vq_rfid.json"), vq_name, args.pipeline,
                                                             naming))
    pm = _sanitize(folder / "metrics.json") if (folder / "metrics.json").is_file() else None
    if pm:
        defaults = _load(folder / "sampling_defaults.json") or {}
        (folder / "README.md").write_text(pipeline_card(pm, defaults, args.pipeline, vq_name, naming))
    if args.grid:
        write_grid(Path(args.grid), args.pipeline)
    print("wrote the VAR model cards")


if __name__ == "__main__":
    main()
