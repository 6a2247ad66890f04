#!/usr/bin/env python
"""Write the model card (``README.md``) of a shipped model folder from the records it and ``docs/figures/`` keep.

    python eval/cards.py --model arvis/weights/NAME                # (re)write the card
    python eval/cards.py --model arvis/weights/NAME --check        # render it; differences from the committed card
    python eval/cards.py --model arvis/weights/NAME --help         # the options of that folder's card kind

The folder's metadata picks the kind of card: the class in its ``config.json`` (a tokenizer, a feature network, a
VAE, an up-sampler), the pipeline class in its ``model_index.json`` (with ``evaluation.json``'s data set), or an
``open_clip_config.json``. Nothing is retrained: a trainer's card is rebuilt from the ``metrics.json`` /
``training_metrics.json`` its export wrote into the folder; the cards built from evaluation records read them
from ``docs/figures/`` (a missing record shows as "not measured"). Some kinds first (re)make a record with an
option: ``--evaluate`` (domain and video feature networks: reload the shipped weights and evaluate them),
``--train-metrics`` (VAR and MAR pairs: merge the two runs' training records into the folder's ``metrics.json``).
Every card is rendered by :mod:`arvis.utils.model_card`.
"""

from __future__ import annotations

import argparse
import difflib
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

HERE = Path(__file__).resolve().parent
for path in (HERE, HERE.parent):  # the sibling card modules, and arvis from a checkout
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

from arvis.utils.model_card import ModelCard, write_card  # noqa: E402


def _record(folder: Path, name: str = "metrics.json") -> dict[str, Any]:
    path = folder / name
    if not path.is_file():
        raise SystemExit(f"{folder}: no {name} (the record its card is built from)")
    return json.loads(path.read_text())


def _class_name(folder: Path, name: str) -> str | None:
    path = folder / name
    return json.loads(path.read_text()).get("_class_name") if path.is_file() else None


def _no_options(parser: argparse.ArgumentParser) -> None:
    del parser


# ---------------------------------------------------------------------------------------------- trainer cards
# The trainers write these cards at export; here they are rebuilt from the record that export kept in the folder.
def clip_card(folder: Path, args: argparse.Namespace) -> ModelCard:
    from arvis.training.common import config_from_record
    from arvis.training.train_clip import ClipTrainConfig, emoji_model_card, model_card

    m = _record(folder)
    cfg = config_from_record(ClipTrainConfig, m["config"])
    return model_card(cfg, m) if cfg.data == "scenes" else emoji_model_card(cfg, m, folder.name)


def mar_vae_card(folder: Path, args: argparse.Namespace) -> ModelCard:
    from arvis.training.common import config_from_record
    from arvis.training.train_mar_vae import MARVAETrainConfig, model_card

    m = _record(folder)
    naming = HERE.parent / "docs" / "figures" / "naming" / f"{folder.name}.json"  # eval/tokenizer_naming.py
    return model_card(config_from_record(MARVAETrainConfig, m["config"]), m, folder.name,
                      json.loads(naming.read_text()) if naming.is_file() else None)


def upsampler_card(folder: Path, args: argparse.Namespace) -> ModelCard:
    from arvis.training.common import config_from_record
    from arvis.training.train_upsampler import UpsamplerTrainConfig, model_card

    m = _record(folder)
    return model_card(config_from_record(UpsamplerTrainConfig, m["config"]), m)


def vq_card(folder: Path, args: argparse.Namespace) -> ModelCard:
    from arvis.training.common import config_from_record
    from arvis.training.train_vq import VQTrainConfig, model_card

    m = _record(folder)
    if "config" not in m or "command" not in m:
        raise SystemExit(f"{folder}/metrics.json predates recorded configs and commands: its card is rebuilt by "
                         f"re-exporting (python -m arvis.training.train_vq --export-only ...)")
    return model_card(config_from_record(VQTrainConfig, m["config"]), m, m["command"], folder.name, m.get("grid_png"))


def _video_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--records", type=Path, default=Path("docs/figures/video"),
                        help="the records of eval/figures.py --suite video the card reads")
    parser.add_argument("--train-log", type=Path, default=None,
                        help="video: the run's scratch train.log: its starts and resumes are written into the "
                             "folder's training_metrics.json (``runs``) and the card says them")


def video_card(folder: Path, args: argparse.Namespace) -> ModelCard:
    import dataclasses

    from var_model_card import history_text, run_history

    from arvis.eval.files import write_json_atomic
    from arvis.training.train_video import model_card

    metrics_path = folder / "training_metrics.json"
    if getattr(args, "train_log", None):
        m = json.loads(metrics_path.read_text())
        m["runs"] = run_history(args.train_log.read_text(), int(m["preset_config"]["steps"]))
        write_json_atomic(metrics_path, m)
    card = model_card(folder, args.records)
    runs = json.loads(metrics_path.read_text()).get("runs")
    if runs and len(runs) > 1:
        history = f"\n\nRun history: {history_text({'runs': runs}, 'the schedule was changed to fit a session')}."
        card = dataclasses.replace(card, training=dataclasses.replace(card.training,
                                                                      text=card.training.text + history))
    return card


# ---------------------------------------------------------------------------------------------- the kinds
class CardKind(NamedTuple):  # a NamedTuple, not a dataclass: tests load this script by path, outside sys.modules
    """A kind of card: which folders it is, its options, and how its card is built."""

    name: str
    matches: Callable[[Path], bool]
    build: Callable[[Path, argparse.Namespace], ModelCard]
    add_arguments: Callable[[argparse.ArgumentParser], None] = _no_options


def _data(folder: Path) -> str:
    from arvis.data.sources import model_data

    return model_data(folder)


def _kinds() -> tuple[CardKind, ...]:
    import domain_card
    import emoji_card
    import mar_model_card
    import var_model_card
    import video_features_card

    def config(cls: str) -> Callable[[Path], bool]:
        return lambda folder: _class_name(folder, "config.json") == cls

    def pipeline(cls: str) -> Callable[[Path], bool]:
        return lambda folder: _class_name(folder, "model_index.json") == cls

    return (
        CardKind("clip", lambda folder: (folder / "open_clip_config.json").is_file(), clip_card),
        CardKind("domain network", config("DomainClassifier"), domain_card.card, domain_card.add_arguments),
        CardKind("video feature network", config("VideoFeatureNet"), video_features_card.card,
                 video_features_card.add_arguments),
        CardKind("MAR VAE", config("AutoencoderKL"), mar_vae_card),
        CardKind("token up-sampler", config("TokenUpsampler"), upsampler_card),
        CardKind("VQ tokenizer", config("LlamaGenVQModel"), vq_card),
        CardKind("VAR tokenizer", config("VARVQModel"), var_model_card.vq_card, var_model_card.add_vq_arguments),
        CardKind("VAR pair", pipeline("VARPipeline"), var_model_card.pipeline_card, var_model_card.add_arguments),
        CardKind("MAR pair", pipeline("MARPipeline"), mar_model_card.pipeline_card, mar_model_card.add_arguments),
        CardKind("video model", pipeline("VideoPipeline"), video_card, _video_options),
        CardKind("emoji LlamaGen", lambda folder: pipeline("LlamaGenPipeline")(folder)
                 and _data(folder) in emoji_card.TEXT, emoji_card.card, emoji_card.add_arguments),
    )


def card_kind(folder: Path) -> CardKind:
    """The kind of card of a model folder (SystemExit for a folder no card writer builds)."""
    for kind in _kinds():
        if kind.matches(folder):
            return kind
    raise SystemExit(f"{folder}: no card writer for this folder (cards of the Emu3 and Janus pipelines and of the "
                     f"low-resolution drafter are written by `eval/figures.py --suite emu3`, `--suite janus` and "
                     f"`--suite mulo`; the photo and scene LlamaGen cards are edited by hand)")


def render(folder: str | Path, argv: list[str] | None = None) -> str:
    """The card of ``folder`` as Markdown, built with the kind's options ``argv`` (nothing is written)."""
    folder = Path(folder)
    kind = card_kind(folder)
    parser = argparse.ArgumentParser()
    kind.add_arguments(parser)
    return kind.build(folder, parser.parse_args(argv or [])).render()


def main(argv: list[str] | None = None) -> int:
    first = argparse.ArgumentParser(add_help=False)
    first.add_argument("--model", type=Path)
    known, _ = first.parse_known_args(argv)
    kind = card_kind(known.model) if known.model else None
    p = argparse.ArgumentParser(prog="python eval/cards.py", description=__doc__.split("\n\n")[0],
                                epilog=f"card kind of --model: {kind.name}" if kind else None)
    p.add_argument("--model", type=Path, required=True, help="a model folder, e.g. arvis/weights/var-emoji")
    p.add_argument("--check", action="store_true",
                   help="write nothing: print how the rendered card differs from the folder's README.md (exit 1)")
    if kind:
        kind.add_arguments(p.add_argument_group(f"{kind.name} card"))
    args = p.parse_args(argv)
    card = kind.build(args.model, args)
    if args.check:
        committed = (args.model / "README.md").read_text() if (args.model / "README.md").is_file() else ""
        diff = list(difflib.unified_diff(committed.splitlines(True), card.render().splitlines(True),
                                         "README.md (committed)", "README.md (rendered)"))
        sys.stdout.writelines(diff)
        print(f"{args.model}: {'differs' if diff else 'identical'}")
        return 1 if diff else 0
    print(f"wrote {write_card(args.model, card)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
