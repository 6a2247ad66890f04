"""Emu3Pipeline: loads an official-layout folder written here, diffusers conventions, methods, errors."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from arvis.pipelines import Emu3Pipeline, Emu3PipelineOutput
from tests.emu3_fixtures import tiny_emu3

SIZE = dict(height=3, width=4)


@pytest.fixture(scope="module")
def official_folder(tmp_path_factory):
    """A ``BAAI/Emu3-Gen-hf``-style folder: config.json (model_type emu3, vocabulary map, text + VQ configs),
    safetensors weights, tokenizer files and the processor files."""
    from transformers import Emu3ImageProcessor, Emu3Processor

    model, tok = tiny_emu3()
    folder = tmp_path_factory.mktemp("emu3-official")
    model.save_pretrained(folder)
    Emu3Processor(Emu3ImageProcessor(), tok).save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def pipe(official_folder):
    p = Emu3Pipeline.from_pretrained(official_folder, default_height=3, default_width=4, default_negative_prompt="")
    p.set_progress_bar_config(disable=True)
    return p


def gens(*seeds):
    return [torch.Generator().manual_seed(s) for s in seeds]


def test_official_folder_loads_and_generates(official_folder, pipe):
    files = {p.name for p in official_folder.iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json", "processor_config.json"} <= files
    out = pipe("red apple", generator=gens(0))
    assert isinstance(out, Emu3PipelineOutput)
    assert out.images[0].size == (8, 6)  # 4 x 3 tokens, VQ factor 2
    assert out.tokens.shape == (1, 3, 4) and 0 <= out.tokens.min() and out.tokens.max() < 16
    s = out.stats.summary()
    assert s["target_forwards"] == 3 * 5 + 2 and s["tokens"] == 17


def test_prompt_ids_equal_emu3_processor(official_folder, pipe):
    from transformers import AutoProcessor

    processor = AutoProcessor.from_pretrained(official_folder)
    ids, mask = pipe.prompt_ids(["red apple"], 16, 16)
    ref = processor(text=["red apple"], return_for_image_generation=True, image_area=128 * 128).input_ids
    assert ids[0].tolist() == list(ref[0]) and bool(mask.all())


def test_save_load_round_trip_and_seeds(pipe, tmp_path):
    a = pipe(["red apple", "rocket"], generator=gens(1, 2), output_type="latent")
    pipe.save_pretrained(tmp_path / "saved")
    loaded = Emu3Pipeline.from_pretrained(tmp_path / "saved")
    loaded.set_progress_bar_config(disable=True)
    assert loaded.config.default_height == 3 and loaded.config.default_negative_prompt == ""
    b = loaded(["red apple", "rocket"], generator=gens(1, 2), output_type="latent")
    c = pipe(["red apple", "rocket"], generator=gens(3, 4), output_type="latent")
    assert torch.equal(a.tokens, b.tokens) and not torch.equal(a.tokens, c.tokens)


def test_batch_equals_single_with_per_image_generators(pipe):
    batch = pipe(["grinning face with big eyes", "rocket"], generator=gens(5, 6), guidance_scale=2.0).tokens
    for b, (prompt, seed) in enumerate([("grinning face with big eyes", 5), ("rocket", 6)]):
        single = pipe(prompt, generator=gens(seed), guidance_scale=2.0).tokens
        assert torch.equal(batch[b], single[0])


def test_output_types_return_tuple_and_images_per_prompt(pipe):
    kw = dict(prompt="dog face", generator=gens(7))
    pt = pipe(**kw, output_type="pt").images
    kw["generator"] = gens(7)
    arr = pipe(**kw, output_type="np").images
    assert pt.shape == (1, 3, 6, 8) and 0 <= pt.min() and pt.max() <= 1
    np.testing.assert_allclose(arr, pt.permute(0, 2, 3, 1).numpy())
    images, tokens, stats = pipe("dog face", num_images_per_prompt=2, generator=gens(1, 2), output_type="latent",
                                 return_dict=False)
    assert torch.equal(images, tokens) and tokens.shape == (2, 3, 4) and stats.summary()["samples"] == 2


def test_lossless_methods_reproduce_ar_with_gumbel_coupling(pipe):
    """With per-image generators, Gumbel-coupled MC-SJD commits exactly plain AR's tokens (its
    documented property) — on the Emu3 layout, structural tokens included."""
    ar = pipe(["red apple", "blue car"], generator=gens(3, 4), guidance_scale=3.0, top_k=8, output_type="latent")
    for shape in ("contiguous", "staircase"):
        mc = pipe(["red apple", "blue car"], generator=gens(3, 4), guidance_scale=3.0, top_k=8, output_type="latent",
                  method="mc-sjd", coupling="gumbel", window=4, window_shape=shape, staircase_rows=1, staircase_step=2)
        assert torch.equal(ar.tokens, mc.tokens), shape
        assert mc.stats.summary()["target_forwards"] < ar.stats.summary()["target_forwards"]


def test_callback_sees_progress(pipe):
    seen = []
    pipe("rocket", generator=gens(0), callback_on_step_end=lambda p, i, done, state: seen.append(int(done.sum())))
    assert seen == sorted(seen) and seen[-1] == 17


def test_callback_gets_the_named_tensors_as_copies(pipe):
    """The same step-callback contract as LlamaGen's (arvis.pipelines.common.decode_with_progress)."""
    seen = []

    def callback(p, step, committed, kwargs):
        seen.append(sorted(kwargs))
        kwargs["known"].fill_(False)  # a copy: the decode is unaffected

    out = pipe("rocket", generator=gens(0), output_type="latent", callback_on_step_end=callback,
               callback_on_step_end_tensor_inputs=["known"])
    assert seen and all(s == ["known"] for s in seen)
    assert torch.equal(out.tokens, pipe("rocket", generator=gens(0), output_type="latent").tokens)
    with pytest.raises(ValueError, match=r"callback_on_step_end_tensor_inputs: \['latents'\]"):
        pipe("rocket", callback_on_step_end=callback, callback_on_step_end_tensor_inputs=["latents"])


def test_errors_name_the_argument(pipe):
    with pytest.raises(ValueError, match="output_type"):
        pipe("rocket", output_type="jpeg")
    with pytest.raises(ValueError, match="height"):
        pipe("rocket", height=0)
    with pytest.raises(ValueError, match="height/width"):
        pipe("rocket", height=40, width=40)  # beyond the tiny model's 512 positions
    with pytest.raises(ValueError, match="negative_prompt"):
        pipe(["a", "b"], negative_prompt=["x", "y", "z"])
    with pytest.raises(ValueError, match="generator"):
        pipe(["a", "b"], generator=gens(1, 2, 3))
    with pytest.raises(ValueError, match="prompt"):
        pipe([])
    with pytest.raises(TypeError, match="Emu3ForConditionalGeneration"):
        Emu3Pipeline(torch.nn.Linear(2, 2), pipe.tokenizer)


# ----------------------------------------------------------------------------- the same doors as LlamaGen
@pytest.fixture(scope="module")
def diffusers_folder(pipe, tmp_path_factory):
    """The pipeline as arvis writes it (``save_pretrained``: model_index.json + component folders)."""
    folder = tmp_path_factory.mktemp("emu3-pipeline")
    pipe.save_pretrained(folder)
    return folder


def test_hub_loads_both_layouts_with_the_emu3_pipeline(official_folder, diffusers_folder, tmp_path):
    from arvis.hub import pipeline_class, resolve_model

    for folder in (official_folder, diffusers_folder):
        assert resolve_model(str(folder)) == folder and pipeline_class(folder) is Emu3Pipeline
    (tmp_path / "config.json").write_text('{"model_type": "llama"}')
    with pytest.raises(ValueError, match="model_index.json"):
        resolve_model(str(tmp_path))


def test_cli_generate_and_bench_on_an_emu3_folder(diffusers_folder, tmp_path, capsys):
    import json

    from arvis.cli import main

    out = tmp_path / "out"
    assert main(["generate", "--model", str(diffusers_folder), "--prompt", "red apple", "--num-images", "2",
                 "--method", "mc-sjd:window=4", "--output", str(out), "--top-k", "8"]) == 0
    record = json.loads((out / "stats.json").read_text())
    for run in ("ar", "mc-sjd_window-4"):  # plain AR is the baseline of every generate
        assert sorted(p.name for p in (out / run).glob("*.png")) == ["0000.png", "0001.png"]
    assert [i["method"] for i in record["images"]] == ["ar", "ar", "mc-sjd", "mc-sjd"]
    assert main(["generate", "--model", str(diffusers_folder), "--class-ids", "0", "--output", str(tmp_path / "o2")]) == 2
    assert "text-conditional" in capsys.readouterr().err

    records = tmp_path / "bench.json"
    assert main(["bench", "--model", str(diffusers_folder), "--prompt", "rocket", "--prompt", "dog face",
                 "--method", "ar", "--method", "mc-sjd:window=4", "--method", "zipar:row_lag=2", "--num-images", "2",
                 "--repeats", "5",
                 "--threads", "1", "--no-forward-cost", "--no-progress", "--json", str(records)]) == 0
    rows = {r["spec"]: r for r in json.loads(records.read_text())}
    assert set(rows) == {"ar", "mc-sjd:window=4", "zipar:row_lag=2"}
    assert rows["ar"]["target_forwards"] == 3 * 5 + 2 and rows["mc-sjd:window=4"]["step_compression"] > 1
    assert rows["ar"]["prompts"] == ["rocket", "dog face"]
    assert main(["bench", "--model", str(diffusers_folder), "--num-images", "1", "--no-progress"]) == 2
    assert "prompt" in capsys.readouterr().err


def test_demo_runs_an_emu3_pipeline_side_by_side(pipe):
    """The demo's core (no server): an Emu3 folder's pipeline takes prompts, and AR and a method both finish."""
    pytest.importorskip("gradio")
    from arvis.demo.core import DemoLimits, ModelSet, RunResult, model_info, side_by_side, validate_request

    info = model_info(pipe)
    assert not info["class_conditional"] and info["has_text_encoder"] and info["grid"] == [3, 4]
    models, limits = ModelSet({"emu3-tiny": pipe}), DemoLimits()
    request = validate_request(models, limits, model="emu3-tiny", class_label=None, prompt="red apple",
                               method="mc-sjd", seed=3, num_images=1, guidance_scale=3.0, top_k=8, top_p=1.0,
                               temperature=1.0, live_preview=True, options={"window": 4})
    results = [r for r in side_by_side(models, request, limits) if isinstance(r, RunResult)]
    assert [r.method for r in results] == ["ar", "mc-sjd"]
    assert all(r.tokens.shape == (1, 3, 4) and r.stats.samples[0].tokens == 17 for r in results)
