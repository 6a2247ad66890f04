"""The model card of a shipped emoji class-conditional pipeline, built from its records (a kind of ``eval/cards.py``).

    python eval/cards.py --model arvis/weights/llamagen-c2i-emoji \
        [--training <scratch>/export-c2i/training_metrics.json --draft-training <scratch>/export-draft/training_metrics.json] \
        [--record docs/figures/emoji/model_card_emoji.json] [--photo-record docs/figures/model_card_c2i.json] \
        [--earlier-training <scratch>/export-c2i-short/training_metrics.json]

``--earlier-training`` (repeatable, in order) names shorter runs that ``--training``'s run resumed from their
checkpoints with a longer schedule: their commands are printed first, and the card says how the steps were run.
A transformer warm-started from an earlier shipped one (``train_gpt --init-from``) needs the commit whose shipped
transformer it started from (``--init-revision``, or ``init_revision`` in its shipped training record): the card
prints how to take those weights out of git and where their own card is.

The model folder's data set (``evaluation.json``) picks the text: ``emoji`` (52 classes of emoji, judged on
emoji it never saw) or ``emoji-names`` (one class per emoji, judged by whether the emoji CLIP names its samples).

Every figure comes from a JSON record: the two trainers' ``training_metrics.json`` (steps, wall time, losses,
command; by default the copies ``arvis.training.assemble`` keeps in the model folder), the ``eval/model_card.py``
record (FID with floor, class consistency, latency, next-token statistics, grid) and, for the side-by-side
predictability table, the photo model's record. Paths of this machine are written as ``<scratch>/``.
"""

from __future__ import annotations

import argparse
import json
import math
import re
from pathlib import Path
from typing import Any

from arvis.training.common import command_option
from arvis.utils.model_card import ModelCard, Section, Training, table


def _clean(text: str) -> str:
    """Paths outside the repository (absolute, or climbing out of it) are this machine's: ``<scratch>/<last>``."""
    return re.sub(r"(?<![\w<>])(?:/|\.\./)\S*/([^/\s]+)", r"<scratch>/\1", text)


def _out(m: dict[str, Any]) -> str:
    """The export folder a trainer's command wrote (its ``--out``), as the card prints paths."""
    return _clean(command_option(m["command"], "--out", "<scratch>/export"))


def _arch(m: dict[str, Any]) -> str:
    c = m["preset_config"]
    return f"{c['n_layer']} / {c['n_head']} / {c['dim']}"


def _stats_rows(emoji: dict[str, Any], photo: dict[str, Any] | None) -> list[tuple[str, str, str]]:
    rows = [("entropy (nats)", "entropy", "{:.2f}"), ("top-1 probability", "top1", "{:.3f}"),
            ("top-10 mass", "top10_mass", "{:.3f}"),
            ("positions with top-1 > 0.9", "fraction_positions_top1_over_0.9", "{:.1%}"),
            ("acceptance of a uniform random draft", "accept_uniform_draft", "{:.3f}"),
            ("acceptance of the upper neighbour's distribution", "accept_upper_neighbour", "{:.3f}"),
            ("probability of repeating the left token", "repeat_left_prob", "{:.3f}")]

    def cell(record: dict[str, Any] | None, key: str, fmt: str) -> str:
        value = record.get(key) if record else None
        return fmt.format(value) if value is not None else "–"

    return [(label, cell(emoji, key, fmt), cell(photo, key, fmt)) for label, key, fmt in rows]


#: What differs between the cards of the two emoji data sets (the rest of the card is shared).
TEXT = {
    "emoji": dict(
        title="class-conditional emoji model",
        classes='the 52 emoji classes of `arvis.data.emoji.EMOJI_CLASSES` ("happy face", "fruit", "mammal", "flag"…)',
        example='["fruit", "mammal"]', samples="samples-emoji-ar", record="model_card_emoji.json",
        validation="views of held-out emoji (seed 1)", grid_note="2 samples per class, captioned with the class name",
        val_row="held-out-emoji validation loss", fid_reference="held-out emoji views",
        val_note="The validation loss is measured on emoji the model never saw; it is high by construction (a new "
                 "emoji is not\npredictable from the others of its class), so it measures generalisation, not fit."),
    "emoji-names": dict(
        title="emoji model, one class per emoji",
        classes='123 single emoji, one class each (`arvis.data.emoji.named_emoji`: "red apple", "penguin", "dog '
                'face"…), so a reader can check a sample by naming it',
        example='["red apple", "penguin"]', samples="samples-emoji-names-ar", record="model_card_emoji_names.json",
        validation="other views of the same emoji (seed 1)", grid_note="one sample per class, captioned with its name",
        val_row="validation loss (unseen views of the same emoji)", fid_reference="unseen views of the 123 emoji",
        val_note="A class is one emoji, so there is no unseen-emoji split: the validation views are new zooms and "
                 "shifts of the\ntraining emoji, and the loss measures how well the model draws what it is asked "
                 "for, not generalisation."),
}


def _tokenizer_row(rec: dict[str, Any]) -> str:
    if "clip_vq_reconstructions_named" not in rec:  # records measured before this row existed
        return ""
    return (f"\n| the same CLIP on those renders tokenised and decoded by the model's VQ (the tokenizer's reference: "
            f"samples are decoded by the same VQ) | {100 * rec['clip_vq_reconstructions_named']:.1f}% |")


def _consistency_rows(rec: dict[str, Any]) -> str:
    if "clip_real_renders_named" in rec:  # one class per emoji: the emoji CLIP names the samples
        return (f"| class consistency: the emoji CLIP names the sample's own emoji among all "
                f"{round(1 / rec['chance'])} class names | **{100 * rec['class_consistency']:.1f}%** |\n"
                f"| the same CLIP on the real renders of those emoji (its ceiling; chance {100 * rec['chance']:.1f}%) "
                f"| {100 * rec['clip_real_renders_named']:.1f}% |" + _tokenizer_row(rec))
    return (f"| class consistency: emoji domain classifier top-1 on the samples | "
            f"**{100 * rec.get('class_consistency', float('nan')):.1f}%** |\n"
            f"| the same classifier on held-out *real* emoji | "
            f"{100 * rec.get('classifier_heldout_real_accuracy', float('nan')):.1f}% |")


def model_card(model: Path, c2i: dict[str, Any], draft: dict[str, Any], rec: dict[str, Any],
               photo: dict[str, Any] | None, earlier: list[dict[str, Any]] | None = None,
               init_revision: str | None = None) -> ModelCard:
    """The card of the emoji pipeline folder ``model`` from its two trainers' records (``c2i``: the transformer,
    ``draft``), its ``eval/model_card.py`` record ``rec`` and the photo model's (``photo``, for the side-by-side
    statistics); ``earlier``: shorter runs the transformer's run resumed; ``init_revision``: the commit whose
    shipped transformer a warm-started run began from."""
    from arvis.data.sources import class_names, data_recipe, model_data

    data = model_data(model)
    t = TEXT[data]
    ts = rec.get("token_stats", {})
    pts = photo.get("token_stats") if photo else None
    size = {p.parent.name: p.stat().st_size / 1e6 for p in model.glob("*/diffusion_pytorch_model.safetensors")}
    num_classes = len(class_names(data))
    guidance = rec.get("sampling_defaults", {}).get("guidance_scale", 3.0)
    warm_commands, warm_text = _warm_start(model, c2i, init_revision)
    training = table(("", "transformer", "draft"), [
        (f"steps (batch {c2i['preset_config']['batch_size']})", c2i["steps"], draft["steps"]),
        ("wall time (CPU threads, on a 2-core machine)", f"{c2i['train_hours']:.2f} h ({_threads(c2i)})",
         f"{draft['train_hours']:.2f} h ({_threads(draft)})"),
        ("final training loss", f"{c2i['final_train_loss']:.3f}", f"{draft['final_train_loss']:.3f}"),
        (f"{t['val_row']} (raw / EMA; exported: the better)",
         f"{c2i['validation_loss_raw']:.3f} / {c2i['validation_loss_ema']:.3f}",
         f"{draft['validation_loss_raw']:.3f} / {draft['validation_loss_ema']:.3f}"),
        ("validation perplexity", f"{c2i['validation_perplexity']:.1f}", f"{draft['validation_perplexity']:.1f}")])
    metrics = "\n".join([
        table((f"metric (plain AR, CFG {rec.get('sampling_defaults', {}).get('guidance_scale')}, top-k off)", "value"),
              [(f"FID, emoji domain network, N = {rec.get('fid_num')} vs 5000 {t['fid_reference']}",
                f"**{rec.get('fid', float('nan')):.2f}**"),
               ("real-vs-real floor at the same N", f"{rec.get('real_vs_real_floor') or float('nan'):.2f}")]),
        _consistency_rows(rec),
        f"| one 16x16 image with CFG by plain AR, fp32, incl. VQ decode | {rec.get('one_image_ar_cfg_s', float('nan')):.2f} s |"])
    return ModelCard(
        title=f"{model.name}: arvis's {t['title']}",
        summary=f"""A `LlamaGenPipeline` folder: a class-conditional GPT in LlamaGen's architecture (`transformer`) over
{t['classes']}, a smaller
draft GPT (`draft_transformer`, for draft-model speculative decoding and LANTERN) and the emoji VQ tokenizer
(`vqvae`, a relative link to `../vq-emoji`). `evaluation.json` says it is judged on emoji: `arvis fid`
compares it with held-out emoji in the emoji domain network's space.""",
        licence="**Credit: All emojis designed by OpenMoji – the open-source emoji and icon project. License: CC BY-SA 4.0.**",
        usage=f"""from arvis import LlamaGenPipeline
pipe = LlamaGenPipeline.from_pretrained("{model.as_posix()}")
out = pipe(class_labels={t['example']}, guidance_scale={guidance}, method="mc-sjd", window=64)""",
        architecture=Section("Architecture", table(("", "transformer", "draft_transformer"), [
            ("layers / heads / dim", _arch(c2i), _arch(draft)),
            ("parameters", f"{c2i['params']:,}", f"{draft['params']:,}"),
            ("fp16 safetensors", f"{size.get('transformer', float('nan')):.1f} MB",
             f"{size.get('draft_transformer', float('nan')):.1f} MB")])
            + f"\n\n16x16 = 256 image tokens of the 1024-entry `vq-emoji` codebook, {num_classes} classes + the null "
              "class for CFG."),
        data=Section("Data", f"""{data_recipe(data, 128)} The GPTs see {c2i['preset_config']['num_train']:,} augmented training views (seed 0),
tokenised once by `vq-emoji`; validation: {c2i['preset_config']['num_val']} {t['validation']}."""),
        training=Training(
            [*warm_commands, *(_clean(m["command"]) for m in [*(earlier or []), c2i]), _clean(draft["command"]),
             f"python -m arvis.training.assemble --transformer {_out(c2i)}/transformer --draft {_out(draft)}/transformer "
             f"--vq arvis/weights/vq-emoji --out {model.as_posix()} --guidance-scale {guidance} --top-k 0 --data {data}"],
            f"\n{training}\n\n{_segments(c2i, earlier or [])}{warm_text}{t['val_note']}"),
        evaluation=Section("Evaluation (the shipped fp16 folder)", f"""`python eval/model_card.py --model {model.as_posix()} --samples-dir <scratch>/{t['samples']} --num {rec['num']}
--json docs/figures/emoji/{t['record']} --grid docs/{model.name}-samples.png`

{metrics}

Sample grid ({t['grid_note']}): `docs/{model.name}-samples.png`."""),
        more=(Section("Next-token statistics beside the photo model's", f"""`arvis.eval.token_stats` over 64 AR samples (CFG as above), beside the photo model's (`llamagen-c2i-photos`):

{table(("statistic (mean over positions)", "emoji", "photos"), _stats_rows(ts, pts))}

{_predictability(ts, pts)}"""),))


def _threads(m: dict[str, Any]) -> str:
    n = int(command_option(m["command"], "--threads", "1"))
    return f"{n} thread{'s' if n > 1 else ''}"


def _warm_start(model: Path, c2i: dict[str, Any], init_revision: str | None) -> tuple[list[str], str]:
    """For a transformer warm-started from shipped weights (``train_gpt --init-from``): the command that takes
    those weights out of git, and how the run got its steps (nothing for a run from scratch)."""
    if not c2i.get("init_from"):
        return [], ""
    if not init_revision:
        raise ValueError(f"the transformer was warm-started from {_clean(c2i['init_from'])}: name the commit whose "
                         f"shipped transformer that was (--init-revision)")
    shipped, init = (model / "transformer").as_posix(), _clean(c2i["init_from"])
    command = (f"mkdir -p {init} && git archive {init_revision} {shipped} | tar -x --strip-components="
               f"{len(Path(shipped).parts)} -C {init}")
    text = (f"The transformer was warm-started from the weights shipped at commit {init_revision} (the first command "
            f"takes them out of git; how they were trained: `git show {init_revision}:{model.as_posix()}/README.md`) "
            f"and trained {c2i['steps']:,} more steps with a fresh optimiser and its own warm-up and cosine schedule "
            f"(peak learning rate {c2i['preset_config']['lr']:.2g}). The steps and wall time in the table are this "
            f"run's only.\n\n")
    return [command], text


def _segments(c2i: dict[str, Any], earlier: list[dict[str, Any]]) -> str:
    """How a transformer trained in several runs got its steps, each resuming the previous one's checkpoint
    (empty for a single run)."""
    if not earlier:
        return ""
    lr = {h["step"]: h["lr"] for h in c2i["history"]}
    parts = []
    for m in earlier:
        after = min((k for k in lr if k > m["steps"]), default=None)
        rise = ""
        if after is not None and m["steps"] in lr:
            rise = (f" (learning rate {lr[after]:.2g} at step {after:,} against {lr[m['steps']]:.2g} at the end of the "
                    f"shorter schedule)")
        parts.append(f"the {m['steps']:,}-step run (training loss {m['final_train_loss']:.3f}, validation loss "
                     f"{m['validation_loss']:.3f}) was resumed from its checkpoint with a longer cosine schedule{rise}")
    return (f"The transformer was trained by {len(earlier) + 1} runs, in the order of the commands above, each in "
            f"(a copy of) the previous run's `--scratch`: {'; '.join(parts)}, to {c2i['steps']:,} steps. The wall "
            f"time counts all of them.\n\n")


def _predictability(ts: dict[str, Any], pts: dict[str, Any] | None) -> str:
    """The comparison in words, from the numbers (no claim the numbers do not make)."""
    e = ts.get("entropy", float("nan"))
    head = f"Mean entropy {e:.2f} nats (perplexity ≈ {math.exp(e):.0f})" if e == e else "Entropy not measured"
    if not pts or "entropy" not in pts or e != e:
        return head + "."
    p = pts["entropy"]
    near_e = ts.get("fraction_positions_top1_over_0.9", float("nan"))
    near_p = pts.get("fraction_positions_top1_over_0.9", float("nan"))
    if e < p:
        return (f"{head} against {p:.2f} for photos, and {near_e:.1%} of positions near-deterministic (top-1 > 0.9) "
                f"against {near_p:.1%}: emoji are more predictable token by token (flat white backgrounds and flat "
                f"fills), so step compression measured on this model overstates what the same method gives on "
                f"natural images. Every acceleration figure on it must be read beside the photo model's.")
    return (f"{head} against {p:.2f} for photos: at this sampling setting the emoji model is *not* more "
            f"predictable per token than the photo model; read its acceleration figures beside the photo model's.")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of an emoji pipeline's card (``python eval/cards.py --model FOLDER``)."""
    parser.add_argument("--training", type=Path, default=None,
                        help="the transformer's training_metrics.json (default: the copy assemble shipped in the folder)")
    parser.add_argument("--earlier-training", type=Path, action="append", default=[],
                        help="an earlier, shorter run's training_metrics.json that --training resumed (repeatable, "
                             "in order)")
    parser.add_argument("--init-revision", default=None,
                        help="the commit whose shipped transformer --training's run was warm-started from "
                             "(default: the record's init_revision)")
    parser.add_argument("--draft-training", type=Path, default=None,
                        help="the draft's training_metrics.json (default: the copy assemble shipped in the folder)")
    parser.add_argument("--record", type=Path, default=None,
                        help="the eval/model_card.py record (default: docs/figures/emoji/<the data set's record>)")
    parser.add_argument("--photo-record", type=Path, default=Path("docs/figures/model_card_c2i.json"))


def card(folder: Path, args: argparse.Namespace) -> ModelCard:
    """The card of an emoji pipeline folder from its records (``add_arguments``' options)."""
    from arvis.data.sources import model_data

    def load(path: Path) -> dict[str, Any]:
        if not path.is_file():
            raise SystemExit(f"{folder}: the record {path} its card is built from is missing")
        return json.loads(path.read_text())

    photo = load(args.photo_record) if args.photo_record.is_file() else None
    c2i = load(args.training or folder / "transformer" / "training_metrics.json")
    draft = load(args.draft_training or folder / "draft_transformer" / "training_metrics.json")
    record = load(args.record or Path("docs/figures/emoji") / TEXT[model_data(folder)]["record"])
    return model_card(folder, c2i, draft, record, photo, [load(path) for path in args.earlier_training],
                      args.init_revision or c2i.get("init_revision"))
