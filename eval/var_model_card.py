"""Model cards of the VAR pairs and their multi-scale tokenizers, from the training and evaluation records (card
kinds of ``eval/cards.py``).

    python eval/cards.py --model arvis/weights/var-emoji \\
        [--train-metrics <target export>/training_metrics.json <draft export>/training_metrics.json \\
         --assemble-command "python -m arvis.training.assemble ..."]
    python eval/cards.py --model arvis/weights/var-vq-emoji

A pair's card reads ``arvis/weights/<pipeline>/metrics.json`` (target and draft training; ``--train-metrics``
(re)writes it), the naming record of ``eval/naming_card.py`` (``docs/figures/naming/<pipeline>.json``, with its
captioned grid) and the FID records of ``eval/figures.py --suite var`` (``<records>/fid/``). A tokenizer's card reads its
``metrics.json`` (tokenizer training + held-out reconstruction), the rFID record ``docs/figures/var/vq_rfid.json``
when it names this tokenizer, and the naming record of the pipeline whose ``vqvae`` links to it. Photo-trained
pipelines (no naming record) get an uncaptioned grid with ``--grid``. Nothing is typed in by hand: a missing record
shows as "not measured".
"""

from __future__ import annotations

import argparse
import json
import os
import re
from pathlib import Path
from typing import Any

from arvis.utils.model_card import ModelCard, Section, Training, measured, table

WEIGHTS = Path("arvis/weights")
FIGS = Path("docs/figures/var")
#: The FID records of a pair: docs/figures/var.md measures the `var` alias, var-emoji; no other pair's card may show
#: them, so the others have none until they are measured into their own folder (``--figures``). A card shows only
#: the records measured on its folder's weights now (their ``model_sha256``).
PAIR_RECORDS = {"var-emoji": FIGS}
NO_RECORDS = Path("docs/figures/var-unmeasured")


def portable(command: str) -> str:
    """A recorded command without this machine's absolute paths: ``/any/dir/name`` → ``<scratch>/name``."""
    return re.sub(r"(?<![\w<>])/[\w./-]*/([\w.-]+)", r"<scratch>/\1", command)


def _portable_record(rec: Any) -> Any:
    """A metrics record with its ``command`` fields made :func:`portable` (records of runs that predate portable
    commands)."""
    if isinstance(rec, dict):
        for part in (rec, *(v for v in rec.values() if isinstance(v, dict))):
            for key in ("command", "assemble_command"):
                if isinstance(part.get(key), str):
                    part[key] = portable(part[key])
    return rec


def _load(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _fid(records: Path, spec_method: str, seed: int, sha256: str | None = None) -> dict | None:
    """The FID record of a method and seed under ``records``; with ``sha256``, only one measured on those weights."""
    for path in sorted((records / "fid").glob(f"{spec_method}-seed{seed}-n*.json")):
        rec = _load(path)
        if isinstance(rec, dict) and (sha256 is None or rec.get("model_sha256") == sha256):
            return rec
    return None


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
            f"{measured(tl.get('l1'), 4)}, L2 {measured(tl.get('l2'), 4)}.")
    else:
        steps.append("No pixel-space steps: on the shared CPU of the time a 64 px step at batch 16 took 10–50 s.")
    if c.get("latent_steps") and fit:
        steps.append(f"Last log of the latent fit: codebook loss {measured(fit.get('vq'), 4)}, final-scale latent MSE "
                     f"{measured(fit.get('final_scale_mse'), 4)}, {fit.get('used', '–')} of {c['vocab_size']} entries used.")
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


def vq_model_card(m: dict, rfid: dict | None, name: str, pipeline: str, naming: dict | None = None) -> ModelCard:
    """The card of the multi-scale tokenizer folder ``name``, shared by the pair ``pipeline``."""
    c = m["config"]
    fit = next((h for h in reversed(m.get("history") or []) if "latent_step" in h), None) or \
        (m.get("final_train_losses") if not c["steps"] else {}) or {}
    emoji = c.get("data", "photos") != "photos"
    held = "held-out emoji (never rendered for training)" if emoji else "held-out crops (never overlapping training pixels)"
    rt = (f"\nThe emoji CLIP names {100 * naming['clip_vq_reconstructions_named']:.1f}% of the "
          f"{round(1 / naming['chance'])} named emoji after a round trip through this tokenizer at {naming['resolution']} px "
          f"({100 * naming['clip_real_renders_named']:.1f}% of the renders themselves; "
          f"`docs/figures/naming/{pipeline}.json`).\n" if naming else "")
    tokens = sum(p * p for p in c["patch_nums"])
    return ModelCard(
        title=f"{name}: arvis's multi-scale VQ tokenizer for VAR",
        summary=f"""A `VARVQModel` (`arvis.tokenizers.var_vq`: VAR's residual multi-scale quantiser with one shared codebook and
partially shared φ convolutions, official key layout) at reduced width. A {c['resolution']}x{c['resolution']} RGB image becomes a
pyramid of token maps of sides {c['patch_nums']} ({tokens} tokens) from a
{c['vocab_size']}-entry codebook of dimension {c['z_channels']}. Shared by the `var` pipeline (`arvis/weights/{pipeline}`,
whose `vqvae` links here).""",
        usage=f"""from arvis.tokenizers.var_vq import VARVQModel
vq = VARVQModel.from_pretrained("arvis/weights/{name}")       # fp16 file, loads as fp32
codes = vq.encode(images)        # [B, 3, {c['resolution']}, {c['resolution']}] in [-1, 1] -> [B, {tokens}] (all scales)
images = vq.decode_codes(codes)  # -> [B, 3, {c['resolution']}, {c['resolution']}] in [-1, 1]""",
        architecture=Section("Architecture", f"""base width {c['ch']}, ch_mult {c['ch_mult']} (down-sampling {2 ** (len(c['ch_mult']) - 1)}), {c['num_res_blocks']} residual blocks per
level (decoder +1), attention at the lowest resolution and in the middle, GroupNorm {c['norm_num_groups']} groups, code
dimension {c['z_channels']}, 3x3 `quant_conv` / `post_quant_conv`, {c['share_quant_resi']} partially shared φ (ratio 0.5).
{m['params']:,} parameters, {m['safetensors_mb']:.1f} MB as fp16 safetensors. Decoding one image: {m['decode_ms']:.0f} ms
(fp32, {m['torch_threads']} thread, median of 10, machine shared)."""),
        data=Section("Data", _vq_data(c)),
        training=Training([m["command"]], f"""
{_vq_steps(c, m, fit)}

Wall time {m['train_hours']:.2f} h (1 thread on a shared 2-core machine)."""),
        evaluation=Section("Evaluation (the shipped fp16 weights)", f"""{m['eval_crops']} {held}, {c['resolution']} px:

{table(("metric", "value"), [
    ("PSNR (mean of per-image, uint8)", f"{m['psnr']:.2f} dB"),
    ("L1 on [-1, 1]", f"{m['l1']:.4f}"),
    ("codebook usage (all scales)", f"{100 * m['usage']:.1f}%"),
    ("usage per scale", ", ".join(f"{100 * u:.0f}%" for u in m["usage_per_scale"])),
    ("code perplexity", f"{m['perplexity']:.0f}"),
    (f"rFID (domain network, {rfid['num'] if rfid else '–'} held-out images)", measured(rfid and rfid["rfid"])),
    ("the originals themselves / real-vs-real floor",
     f"{measured(rfid and rfid['fid_of_the_originals'])} / {measured(rfid and rfid['real_vs_real_floor'])}")])}

`python eval/vq_rfid.py --vq arvis/weights/{name}{' --data emoji' if emoji else ''} --num 1000 --json docs/figures/var/vq_rfid.json`.
{rt}
Reconstructions (originals above): `docs/{name}-reconstructions.png`."""))


def run_history(log_text: str, final_steps: int) -> list[dict[str, int | None]]:
    """The starts of a training run from its scratch ``train.log``: the first start's cosine schedule length
    (from its logged config) and every resume with the schedule length it continued with, as the shared loop logs
    it (``steps=B (was A)``; ``None`` where an earlier version of it did not). The trainers' own loops before it
    logged ``resumed at step N`` and continued with the final command's ``final_steps`` (the run's exported
    ``preset_config.steps``)."""
    history: list[dict[str, int | None]] = []
    for line in log_text.splitlines():
        if "INFO new run:" in line:
            config = json.loads(line[line.index("{"):])
            history.append({"at_step": 0, "schedule_steps": int(config["steps"])})
        elif match := re.search(r"INFO resumed at step (\d+)", line):  # the trainers' own loops before the shared one
            history.append({"at_step": int(match.group(1)), "schedule_steps": final_steps})
        elif match := re.search(r"INFO resumed from \S+ at step (\d+)", line):
            steps = re.search(r"\bsteps=(\d+)", line)
            history.append({"at_step": int(match.group(1)), "schedule_steps": int(steps.group(1)) if steps else None})
    return history


def history_text(part: dict, why: str = "sessions ended") -> str:
    runs = part.get("runs") or []
    if len(runs) <= 1:
        return "one uninterrupted run"
    first, *resumes = runs
    text = f"started with a {first['schedule_steps']}-step cosine schedule"
    current = first["schedule_steps"]
    for r in resumes:
        steps, schedule = r["schedule_steps"], ""
        if steps and current and steps != current:
            schedule = f", the schedule {'lengthened' if steps > current else 'shortened'} to {steps} steps"
        elif steps:
            schedule = f" with a {steps}-step schedule"
        current = steps or current
        text += f"; resumed from the step-{r['at_step']} checkpoint{schedule}"
    return text + f" ({why}; each resume continues the checkpointed weights, optimiser and EMA)"


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


def pipeline_model_card(m: dict, defaults: dict, name: str, vq_name: str, naming: dict | None = None,
                        records: Path = NO_RECORDS, sha256: str | None = None) -> ModelCard:
    """The card of the VAR pair folder ``name`` (tokenizer ``vq_name``; FID records under ``records``, those measured
    on the weights of content hash ``sha256`` when given)."""
    t, d = m["transformer"], m["draft_transformer"]
    for part in (t, d):
        c = part["preset_config"]
        part["arch"], part["config"] = f"{c['depth']} / {c['num_heads']} / {c['embed_dim']}", c
    ar0, ar1 = _fid(records, "ar", 0, sha256), _fid(records, "ar", 1, sha256)
    noise = abs(ar0["fid"] - ar1["fid"]) if ar0 and ar1 else None
    from arvis.data.sources import class_names

    data = t["config"].get("data", "photos")
    names = class_names(data)
    examples = ", ".join(f'"{n}"' for n in (names[0], names[len(names) // 2]))
    classes = (f"{len(names)} single emoji, one class each" if data == "emoji-names"
               else f"{len(names)} {'photo' if data == 'photos' else 'emoji'} classes")
    reference = ("5,000 held-out crops" if data == "photos" else "5,000 other views of the same emoji") + " at 64 px"

    def row(label: str, key: str, fmt: str = "{}") -> tuple[str, str, str]:
        return label, fmt.format(t[key]), fmt.format(d[key])

    grid = (f"Sample grid (one sample per class, captioned with its name; `eval/naming_card.py`): "
            f"`{naming['grid']}`." if naming and naming.get("grid") else
            f"Samples (plain next-scale decoding, CFG {defaults.get('guidance_scale')}): `docs/{name}-samples.png`.")
    metrics = [table(("metric (plain next-scale decoding, defaults)", "value"), [])]
    if data == "emoji-names":
        metrics.append(naming_rows(naming))
    metrics.append("\n".join([
        f"| FID, N = {ar0['num_generated'] if ar0 else '–'} (seed 0) | {measured(ar0 and ar0['fid'])} |",
        f"| same, seed 1 (seed-to-seed noise {measured(noise)}) | {measured(ar1 and ar1['fid'])} |",
        f"| real-vs-real floor at the same N | {measured(ar0 and ar0.get('real_vs_real_floor'))} |"]))
    return ModelCard(
        title=f"{name}: arvis's VAR pair (next-scale prediction)",
        summary=f"""A `VARPipeline` folder: a class-conditional VAR transformer (`transformer`, the target) over {classes}, a much smaller
VAR on the same tokenizer (`draft_transformer`: CoDe's refiner, and the draft of the acceptance measurement),
and the multi-scale tokenizer (`vqvae`, a relative link to `../{vq_name}`). {_alias_sentence(name)}""",
        usage=f"""from arvis.pipelines import VARPipeline
pipe = VARPipeline.from_pretrained("arvis/weights/{name}")
out = pipe(class_labels=[{examples}], guidance_scale={defaults.get('guidance_scale')})           # plain next-scale decoding
fast = pipe(class_labels=[{examples}], method="code", draft_scales=4)   # CoDe: small model refines""",
        usage_note=f"""Default sampling (`sampling_defaults.json`): VAR CFG {defaults.get('guidance_scale')} with VAR's ramp over scales, top-k
{defaults.get('top_k')} (off), temperature 1.""",
        architecture=Section("Architecture", table(("", "transformer", "draft_transformer"), [
            row("depth / heads / width", "arch"), row("parameters", "params", "{:,}"),
            ("fp16 safetensors", f"{t['mb']:.1f} MB", f"{d['mb']:.1f} MB")]) + f"""

VAR (`arvis.models.var.VARTransformer`, official state-dict keys): AdaLN blocks (per-block `ada_lin`),
l2-normalised attention with a learned scale, GELU MLP ×4, class embedding with a null class ({len(names)}
classes), level and position embeddings, block-causal attention over scales {m['patch_nums']}."""),
        data=Section("Data", _pipeline_data(t, vq_name)),
        training=Training([t["command"], d["command"], m["assemble_command"]], f"""VAR's recipe: teacher forcing with the tokenizer's next-scale inputs, cross-entropy averaged over all tokens,
10% class dropout to the null class, AdamW (0.9, 0.95; weight decay 0.05), clip 2.0, VAR's initialisation;
warm-up + cosine; EMA {t['config']['ema_decay']}; the better of raw and EMA weights on validation loss is shipped.

{table(("", "transformer", "draft_transformer"), [
    row("steps (batch 32)", "steps"),
    row("wall time (h, 1 thread, shared 2-core machine)", "train_hours", "{:.2f}"),
    row("final training loss", "final_train_loss", "{:.3f}"),
    row("validation loss (all scales)", "val_loss", "{:.3f}"),
    row("validation loss (last scale)", "val_loss_last_scale", "{:.3f}"),
    row("exported weights", "exported_weights")])}

Run history — transformer: {history_text(t)}; draft_transformer: {history_text(d)}."""),
        evaluation=Section("Evaluation", f"""Commands: `python eval/figures.py --suite var` (all figures: docs/figures/var.md); FID with the shipped domain network
against {reference}; `python eval/naming_card.py --model var --samples-dir <scratch>/naming-var --json
docs/figures/naming/{name}.json --grid docs/{name}-samples.png` (naming).

{chr(10).join(metrics)}

{grid}"""))


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


# ---------------------------------------------------------------------------------------------- eval/cards.py
def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of a VAR pair's card (``python eval/cards.py --model FOLDER``)."""
    parser.add_argument("--train-metrics", nargs=2, default=None, metavar=("TARGET", "DRAFT"),
                        help="the two runs' training_metrics.json: (re)write the folder's metrics.json first")
    parser.add_argument("--assemble-command", default="", help="recorded in metrics.json with --train-metrics")
    parser.add_argument("--train-logs", nargs=2, default=None, metavar=("TARGET", "DRAFT"),
                        help="the two runs' scratch train.log (with --train-metrics): their starts and resumes")
    parser.add_argument("--figures", default=None, type=Path,
                        help="where the pair's FID records are (default: docs/figures/var for var-emoji, the `var` "
                             "alias whose records they are; none for another pair, so that no other model's records "
                             "reach its card); only records measured on the folder's weights are shown")
    parser.add_argument("--grid", default=None, help="also write an uncaptioned sample grid PNG here (photo models)")


def _merge_training(folder: Path, train_metrics: list[str], assemble_command: str,
                    train_logs: list[str] | None) -> None:
    """Write the pair's ``metrics.json`` from the two runs' training records (their per-step logs stay out)."""
    merged: dict[str, Any] = {"assemble_command": assemble_command}
    for name, path in zip(("transformer", "draft_transformer"), train_metrics, strict=True):
        rec = _load(Path(path))
        if not isinstance(rec, dict):
            raise ValueError(f"--train-metrics: cannot read {path}")
        rec["mb"] = (folder / name / "diffusion_pytorch_model.safetensors").stat().st_size / 1e6
        if train_logs:
            log_path = Path(train_logs[("transformer", "draft_transformer").index(name)])
            rec["runs"] = run_history(log_path.read_text(), int(rec["preset_config"]["steps"]))
        merged[name] = rec
    merged["patch_nums"] = json.loads((folder / "transformer" / "config.json").read_text())["patch_nums"]
    (folder / "metrics.json").write_text(json.dumps(_portable_record(merged), indent=2) + "\n")


def pipeline_card(folder: Path, args: argparse.Namespace) -> ModelCard:
    """The card of a VAR pair folder from its records (``add_arguments``' options)."""
    vq_name = Path(os.readlink(folder / "vqvae")).name if (folder / "vqvae").is_symlink() else f"{folder.name}/vqvae"
    if args.train_metrics:
        _merge_training(folder, args.train_metrics, args.assemble_command, args.train_logs)
    metrics = _portable_record(_load(folder / "metrics.json"))
    if not isinstance(metrics, dict):
        raise SystemExit(f"{folder}/metrics.json: missing; pass --train-metrics first")
    if args.grid:
        write_grid(Path(args.grid), folder.name)
    records = args.figures or PAIR_RECORDS.get(folder.name, NO_RECORDS)
    from arvis.hub import folder_sha256

    return pipeline_model_card(metrics, _load(folder / "sampling_defaults.json") or {}, folder.name, vq_name,
                               _load(Path("docs/figures/naming") / f"{folder.name}.json"), records,
                               folder_sha256(folder))


def add_vq_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of a VAR tokenizer's card (``python eval/cards.py --model FOLDER``)."""
    parser.add_argument("--rfid-record", default=FIGS / "vq_rfid.json", type=Path,
                        help="the eval/vq_rfid.py record (used when it names this tokenizer)")


def vq_card(folder: Path, args: argparse.Namespace) -> ModelCard:
    """The card of a VAR tokenizer folder, with the naming record of the pair whose ``vqvae`` links to it."""
    metrics = _portable_record(_load(folder / "metrics.json"))
    if not isinstance(metrics, dict):
        raise SystemExit(f"{folder}/metrics.json: missing")
    pairs = [p.name for p in sorted(folder.parent.iterdir())
             if (p / "vqvae").is_symlink() and Path(os.readlink(p / "vqvae")).name == folder.name]
    pipeline = pairs[0] if pairs else folder.name
    rfid = _load(args.rfid_record)
    if not rfid or Path(rfid.get("vq", "")).resolve() != folder.resolve():  # another tokenizer's measurement
        rfid = None
    return vq_model_card(metrics, rfid, folder.name, pipeline, _load(Path("docs/figures/naming") / f"{pipeline}.json"))
