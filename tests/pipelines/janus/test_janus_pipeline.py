"""JanusPipeline: loads an official-layout folder written here, matches transformers' generate(), the memory estimate,
the hub and command line on a Janus folder. The diffusers conventions every pipeline keeps are in
tests/pipelines/test_contract.py."""

from __future__ import annotations

import json

import pytest
import torch

from arvis.pipelines import JanusPipeline, JanusPipelineOutput
from tests.janus_fixtures import tiny_janus, transformers_generate

CHAT_TEMPLATE = ("{% for message in messages %}<|User|>: {{ message['content'][0]['text'] }}\n\n{% endfor %}"
                 "{% if add_generation_prompt %}<|Assistant|>:{% endif %}")


@pytest.fixture(scope="module")
def tiny():
    return tiny_janus(num_codes=16, grid=3)


@pytest.fixture(scope="module")
def official_folder(tiny, tmp_path_factory):
    """A ``deepseek-community/Janus-Pro-1B``-style folder: config.json (model_type janus, text, vision and VQ
    configs), generation_config.json (BOS, PAD, boi_token_id), safetensors weights, tokenizer and processor
    files with a chat template."""
    from transformers import JanusImageProcessor, JanusProcessor

    model, tok = tiny
    folder = tmp_path_factory.mktemp("janus-official")
    model.save_pretrained(folder)
    JanusProcessor(JanusImageProcessor(), tok, chat_template=CHAT_TEMPLATE, num_image_tokens=9).save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def pipe(official_folder):
    p = JanusPipeline.from_pretrained(official_folder)
    p.set_progress_bar_config(disable=True)
    return p


def gens(*seeds):
    return [torch.Generator().manual_seed(s) for s in seeds]


def test_official_folder_loads_and_generates(official_folder, pipe):
    files = {p.name for p in official_folder.iterdir()}
    assert {"config.json", "generation_config.json", "model.safetensors", "tokenizer.json"} <= files
    assert json.loads((official_folder / "config.json").read_text())["model_type"] == "janus"
    out = pipe("red apple", generator=gens(0))
    assert isinstance(out, JanusPipelineOutput)
    assert out.images[0].size == (6, 6)  # 3 x 3 tokens, VQ factor 2
    assert out.tokens.shape == (1, 3, 3) and 0 <= out.tokens.min() and out.tokens.max() < 16
    assert out.stats.summary()["target_forwards"] == 9
    assert pipe.sampling_defaults == {"guidance_scale": 5.0, "top_k": 0}  # Janus-Pro's recipe


def test_prompts_use_the_processors_chat_template(official_folder, pipe):
    """The official recipe: the chat template with a generation prompt, then JanusProcessor(generation_mode="image")."""
    from transformers import AutoProcessor

    processor = AutoProcessor.from_pretrained(official_folder)
    messages = [{"role": "user", "content": [{"type": "text", "text": "red apple"}]}]
    text = processor.apply_chat_template(messages, add_generation_prompt=True)
    ref = processor(text=[text], generation_mode="image").input_ids
    ids, mask = pipe.prompt_ids(["red apple"])
    assert ids[0].tolist() == ref[0].tolist() and bool(mask.all())
    assert "Assistant" in pipe.tokenizer.decode(ids[0])


def test_greedy_pipeline_equals_transformers_generate_on_the_official_folder(pipe):
    """What a user of the official checkpoint gets from transformers, through the pipeline (CFG 5, greedy)."""
    out = pipe(["rocket", "grinning face with big eyes"], guidance_scale=5.0, temperature=0.0, output_type="latent")
    target, _, condition = pipe.backbones(["rocket", "grinning face with big eyes"])
    ref = transformers_generate(pipe.transformer, condition, 5.0, do_sample=False)
    assert torch.equal(out.tokens.reshape(2, -1), ref)


def test_decoded_images_are_transformers_decode(pipe):
    """The pipeline's pictures are ``decode_image_tokens`` + the processor's ``postprocess`` (the official
    checkpoints' image processor: mean and std 0.5, pixels in [-1, 1])."""
    from transformers import JanusImageProcessor

    out = pipe("dog face", generator=gens(3), output_type="pt")
    pixels = pipe.transformer.decode_image_tokens(out.tokens.reshape(1, -1))  # [B, H, W, 3] in [-1, 1]
    ref = JanusImageProcessor(image_mean=[0.5] * 3, image_std=[0.5] * 3).postprocess(list(pixels.permute(0, 3, 1, 2).float()), return_tensors="pt")
    torch.testing.assert_close(out.images, ref["pixel_values"].float() / 255, atol=1 / 255 + 1e-6, rtol=0)


def test_memory_estimate_counts_the_cfg_pair(pipe):
    one = pipe.decode_memory_bytes(1, uses_cfg=False)
    assert pipe.decode_memory_bytes(16, uses_cfg=True) == 32 * one > 0
    target, _, _ = pipe.backbones(["rocket"])
    cache = target.allocate_cache(1)
    assert one >= cache.nbytes()  # the estimate assumes a longer prompt than this one


def test_errors_name_the_argument(pipe):
    with pytest.raises(ValueError, match="output_type"):
        pipe("rocket", output_type="jpeg")
    with pytest.raises(ValueError, match="num_images_per_prompt"):
        pipe("rocket", num_images_per_prompt=0)
    with pytest.raises(ValueError, match="prompt"):
        pipe([])
    with pytest.raises(ValueError, match="positions"):
        pipe("rocket " * 300)  # beyond the tiny model's 512 positions
    with pytest.raises(TypeError, match="JanusForConditionalGeneration"):
        JanusPipeline(torch.nn.Linear(2, 2), pipe.tokenizer)


def test_hub_resolves_the_official_layout_to_the_janus_pipeline(official_folder, tmp_path):
    from arvis.families import folder_capabilities
    from arvis.hub import pipeline_class, resolve_model

    assert resolve_model(str(official_folder)) == official_folder
    assert pipeline_class(official_folder) is JanusPipeline
    caps = folder_capabilities(official_folder)
    assert caps.family == "janus" and caps.num_tokens == 9 and caps.conditioning == "text"
    assert "speculative" not in caps.methods() and "mc-sjd" in caps.methods()
    (tmp_path / "config.json").write_text('{"model_type": "llama"}')
    with pytest.raises(ValueError, match="model_index.json"):
        resolve_model(str(tmp_path))


def test_cli_generate_and_bench_on_a_janus_folder(pipe, tmp_path, capsys):
    from arvis.cli import main

    folder = tmp_path / "janus-pipeline"
    pipe.save_pretrained(folder)
    out = tmp_path / "out"
    assert main(["generate", "--model", str(folder), "--prompt", "red apple", "--num-images", "2",
                 "--method", "mc-sjd:window=4", "--output", str(out), "--top-k", "8"]) == 0
    record = json.loads((out / "stats.json").read_text())
    for run in ("ar", "mc-sjd_window-4"):  # plain AR is the baseline of every generate
        assert sorted(p.name for p in (out / run).glob("*.png")) == ["0000.png", "0001.png"]
    assert [i["method"] for i in record["images"]] == ["ar", "ar", "mc-sjd", "mc-sjd"]
    assert main(["generate", "--model", str(folder), "--prompt", "x", "--method", "speculative",
                 "--output", str(tmp_path / "o2")]) == 2
    assert "draft" in capsys.readouterr().err  # refused from the folder's metadata: this folder has no draft
    records = tmp_path / "bench.json"
    assert main(["bench", "--model", str(folder), "--prompt", "rocket", "--method", "ar", "--method",
                 "mc-sjd:window=4", "--num-images", "1", "--repeats", "5", "--threads", "1", "--no-forward-cost",
                 "--no-progress", "--json", str(records)]) == 0
    rows = {r["spec"]: r for r in json.loads(records.read_text())}
    assert rows["ar"]["target_forwards"] == 9 and rows["mc-sjd:window=4"]["step_compression"] > 1
