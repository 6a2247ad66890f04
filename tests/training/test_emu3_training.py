"""train_emu3: the three stages run end to end on a tiny config, resume, and train exactly what decoding uses."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
from pathlib import Path

import pytest
import torch

from arvis.engine.engine import DecodeEngine
from arvis.engine.sampling import SamplingConfig
from arvis.models.emu3 import Emu3Backbone
from arvis.models.protocol import Condition
from arvis.pipelines import Emu3Pipeline
from arvis.training import train_emu3
from arvis.training.train_emu3 import SequenceBuilder, lm_loss
from tests.emu3_fixtures import tiny_emu3


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    root = tmp_path_factory.mktemp("emu3-train")
    vq = train_emu3.main(["vq", "--smoke", "--out", str(root / "vq"), "--scratch", str(root / "vq-run")])
    lm = train_emu3.main(["lm", "--smoke", "--vq", str(root / "vq"), "--out", str(root / "lm"),
                          "--scratch", str(root / "lm-run")])
    train_emu3.main(["assemble", "--vq", str(root / "vq"), "--lm", str(root / "lm"), "--out", str(root / "pipe")])
    return root, vq, lm


def test_stages_export_a_loadable_pipeline(trained):
    root, vq, lm = trained
    assert vq["steps"] == 4 and 0 <= vq["usage"] <= 1 and "psnr" in vq
    assert lm["steps"] == 3 and lm["validation_loss"] > 0
    pipe = Emu3Pipeline.from_pretrained(root / "pipe")
    pipe.set_progress_bar_config(disable=True)
    assert pipe.config.default_height == 16 and pipe.config.default_negative_prompt == ""  # 32 px, VQ factor 2
    out = pipe("red apple", generator=torch.Generator().manual_seed(0), output_type="np")
    assert out.images.shape[1:] == (32, 32, 3) and out.tokens.shape == (1, 16, 16)
    assert json.loads((root / "pipe" / "sampling_defaults.json").read_text()) == {"guidance_scale": 3.0, "top_k": 0}
    assert (root / "pipe" / "training" / "lm_training_metrics.json").is_file()


def test_rerun_resumes_instead_of_restarting(trained):
    root, _, _ = trained
    log = (root / "lm-run" / "train.log").read_text()
    metrics = train_emu3.main(["lm", "--smoke", "--vq", str(root / "vq"), "--out", str(root / "lm2"),
                               "--scratch", str(root / "lm-run")])
    assert metrics["steps"] == 3
    assert "resumed from" in (root / "lm-run" / "train.log").read_text()[len(log):]


def test_a_draft_shares_the_targets_tokenizer_and_ships_in_the_pipeline(trained):
    """``lm --tokenizer`` copies the target's tokenizer (the draft must speak its ids); ``assemble --draft-lm``
    ships it as the pipeline's draft_transformer, which speculative decoding then uses."""
    root, _, _ = trained
    draft = train_emu3.main(["lm", "--smoke", "--vq", str(root / "vq"), "--out", str(root / "draft"),
                             "--scratch", str(root / "draft-run"), "--tokenizer", str(root / "lm" / "tokenizer"),
                             "--hidden-size", "16", "--heads", "2", "--kv-heads", "1", "--intermediate-size", "32"])
    assert draft["config"]["hidden_size"] == 16
    train_emu3.main(["assemble", "--vq", str(root / "vq"), "--lm", str(root / "lm"), "--out", str(root / "pipe-d"),
                     "--draft-lm", str(root / "draft")])
    pipe = Emu3Pipeline.from_pretrained(root / "pipe-d")
    pipe.set_progress_bar_config(disable=True)
    assert type(pipe.draft_transformer).__name__ == "Emu3ForCausalLM"
    assert pipe.draft_transformer.config.hidden_size == 16
    out = pipe("red apple", generator=torch.Generator().manual_seed(0), method="speculative", window=2,
               output_type="np")
    assert out.stats.summary()["draft_forwards"] > 0 and out.tokens.shape == (1, 16, 16)
    assert (root / "pipe-d" / "training" / "draft_training_metrics.json").is_file()
    # A draft whose tokenizer differs is refused: its ids would not be the target's.
    from transformers import AutoTokenizer

    shutil.copytree(root / "draft", root / "alien")
    alien = AutoTokenizer.from_pretrained(root / "alien" / "tokenizer")
    alien.add_tokens(["<not-the-targets>"])
    alien.save_pretrained(root / "alien" / "tokenizer")
    with pytest.raises(ValueError, match="another tokenizer"):
        train_emu3.main(["assemble", "--vq", str(root / "vq"), "--lm", str(root / "lm"),
                         "--out", str(root / "pipe-x"), "--draft-lm", str(root / "alien")])
    assert not (root / "pipe-x").exists()


def test_unaugmented_data_pairs_each_emoji_with_every_caption_and_classes_select(trained, tmp_path):
    """--no-augment: one code grid per training emoji, repeated once per caption variant (the variants of that
    emoji, in order); --classes keeps only those classes' emoji and refuses a class that does not exist."""
    from transformers import Emu3VQVAE

    from arvis.data.emoji import EMOJI_CLASSES, captions_of, load_catalog

    root, _, _ = trained
    vq = Emu3VQVAE.from_pretrained(root / "vq")
    emoji = train_emu3._emoji(None, "train", train_emu3.LM_SMOKE.resolution, 0, smoke=True)
    by_code = {e.code: e for e in load_catalog()}
    cfg = dataclasses.replace(train_emu3.LM_SMOKE, augment=False)
    data = train_emu3.lm_dataset(cfg, vq, tmp_path, "train", smoke=True)
    k = len(captions_of(by_code[str(emoji.codes[0])]))
    assert len(data["codes"]) == k * len(emoji)
    for i, code in enumerate(emoji.codes):
        rows = slice(i * k, (i + 1) * k)
        assert list(data["captions"][rows]) == list(captions_of(by_code[str(code)]))
        assert (data["codes"][rows] == data["codes"][i * k]).all()
    wanted = EMOJI_CLASSES[int(emoji.labels[0])]
    subset = train_emu3.lm_dataset(dataclasses.replace(cfg, classes=(wanted,)), vq, tmp_path, "train",
                                   smoke=True)
    names = {c for e in emoji.codes if by_code[str(e)].class_name == wanted for c in captions_of(by_code[str(e)])}
    assert 0 < len(subset["captions"]) < len(data["captions"]) and set(subset["captions"]) == names
    with pytest.raises(ValueError, match="unknown emoji classes"):
        train_emu3.lm_dataset(dataclasses.replace(cfg, classes=("dragons",)), vq, tmp_path, "train", True)


def test_training_loss_is_the_decoders_negative_log_likelihood():
    """The teacher-forced training loss (left-padded batch, 4-D mask, positions from the first real token,
    softmax over the image tokens) equals −log p of the same tokens under arvis's Emu3 decoding (no CFG)."""
    model, tok = tiny_emu3(num_codes=16)
    builder = SequenceBuilder(tok, 2, 3)
    codes = torch.randint(0, 16, (2, 2, 3), generator=torch.Generator().manual_seed(0))
    captions = ["grinning face with big eyes", "rocket"]
    batch = builder.batch(codes, captions)
    with torch.no_grad():
        loss = float(lm_loss(model.model.text_model, model.lm_head, builder.vocab, builder, batch))
    C = int(batch["prompt_length"])
    prompt_ids, mask = batch["ids"][:, :C], batch["valid"][:, :C]
    backbone = Emu3Backbone(model, builder.vocab, 2, 3, C)
    engine = DecodeEngine(backbone, Condition(token_ids=prompt_ids, mask=mask), SamplingConfig())
    p0 = engine.prefill()
    targets = batch["targets"]
    N = targets.shape[1]
    p = torch.cat([p0[:, None], engine.evaluate(targets[:, :-1], torch.arange(N - 1).expand(2, -1))], dim=1)
    nll = -p.gather(-1, targets[..., None])[..., 0].log()[:, builder.free]
    assert abs(float(nll.mean()) - loss) < 1e-4
    with torch.no_grad():  # per token, in raster order (what eval/emu3_caption_binding.py reads)
        per_token = lm_loss(model.model.text_model, model.lm_head, builder.vocab, builder, batch, per_token=True)
    assert per_token.shape == (2, 6) and torch.allclose(per_token, nll, atol=1e-4)


def test_input_noise_changes_what_the_model_reads_not_what_it_must_predict():
    model, tok = tiny_emu3(num_codes=16)
    builder = SequenceBuilder(tok, 2, 3)
    codes = torch.randint(0, 16, (2, 2, 3), generator=torch.Generator().manual_seed(0))
    noisy = (codes + 1) % 16
    captions = ["red apple", "rocket"]
    clean, mixed = builder.batch(codes, captions), builder.batch(codes, captions, noisy)
    assert torch.equal(clean["targets"], mixed["targets"]) and torch.equal(clean["valid"], mixed["valid"])
    C = int(clean["prompt_length"])
    assert torch.equal(mixed["ids"][:, C:], builder.model_ids[builder.layout_tokens(noisy)[:, :-1]])
    assert not torch.equal(clean["ids"], mixed["ids"])
    with torch.no_grad():
        assert float(lm_loss(model.model.text_model, model.lm_head, builder.vocab, builder, clean)) != pytest.approx(
            float(lm_loss(model.model.text_model, model.lm_head, builder.vocab, builder, mixed)))
    with pytest.raises(ValueError, match="input_noise"):
        train_emu3.LMTrainConfig(input_noise=1.0)


def test_extract_then_a_named_warm_start_keeps_the_tokenizer_and_starts_from_the_weights(trained, tmp_path):
    """extract: an assembled folder's vq / lm as stage exports (the same weights); lm --named --init-from: the
    named emoji captioned by their names, starting from the extracted weights with the extracted tokenizer."""
    from transformers import AutoTokenizer, Emu3ForCausalLM, Emu3VQVAE

    from arvis.data.sources import class_names

    root, _, _ = trained
    parts = train_emu3.main(["extract", "--folder", str(root / "pipe"), "--out", str(tmp_path / "parts")])
    assert set(parts) == {"vq", "lm"}
    lm, ref = Emu3ForCausalLM.from_pretrained(parts["lm"]), Emu3ForCausalLM.from_pretrained(root / "lm")
    assert all(torch.equal(a, b) for a, b in zip(lm.state_dict().values(), ref.state_dict().values(), strict=True))
    vq, ref_vq = Emu3VQVAE.from_pretrained(parts["vq"]), Emu3VQVAE.from_pretrained(root / "vq")
    assert all(torch.equal(a.half(), b.half()) for a, b in zip(vq.state_dict().values(), ref_vq.state_dict().values(),
                                                                 strict=True))
    cfg = dataclasses.replace(train_emu3.LM_SMOKE, named=True)
    data = train_emu3.lm_dataset(cfg, vq, tmp_path, "train", smoke=True)
    names = class_names("emoji-names")
    assert all(any(n in str(c) for n in names) for c in data["captions"])
    out = tmp_path / "named"
    metrics = train_emu3.main(["lm", "--smoke", "--named", "--init-from", parts["lm"], "--vq", parts["vq"], "--out",
                               str(out), "--scratch", str(tmp_path / "named-run"), "--steps", "1"])
    assert metrics["config"]["named"] and metrics["config"]["init_from"] == parts["lm"]
    assert AutoTokenizer.from_pretrained(out / "tokenizer").get_vocab() == \
        AutoTokenizer.from_pretrained(root / "lm" / "tokenizer").get_vocab()
    assert "warm start from the language model" in (tmp_path / "named-run" / "train.log").read_text()
    # the shipped record names the folder it started from without this machine's absolute path
    train_emu3.main(["assemble", "--vq", parts["vq"], "--lm", str(out), "--out", str(tmp_path / "warm")])
    shipped = json.loads((tmp_path / "warm" / "training" / "lm_training_metrics.json").read_text())
    assert os.path.isabs(parts["lm"]) and shipped["config"]["init_from"] == os.path.relpath(parts["lm"])
    # and the commands that trained the model it started from come before its own
    start = json.loads((Path(parts["lm"]) / "training_metrics.json").read_text())
    assert shipped["init_commands"] == [start["command"]] and "--init-from" in shipped["command"]


def test_an_assembled_named_model_names_its_data_and_the_suite_prompts_it_with_the_named_emoji(trained, tmp_path):
    """assemble writes ``evaluation.json`` from the lm export's config (``emoji-names`` after ``lm --named``, else
    ``emoji``); the Emu3 suite then prompts the named model with the 123 named emoji's names and takes its FID against
    their held-out views, and the other model with the held-out emoji's names. extract keeps what decides it."""
    from arvis.data.sources import MODEL_DATA_FILE, class_names, model_data
    from tests.eval.eval_modules import eval_module

    root, _, _ = trained
    train_emu3.main(["lm", "--smoke", "--named", "--vq", str(root / "vq"), "--out", str(tmp_path / "named-lm"),
                     "--scratch", str(tmp_path / "named-run"), "--steps", "1"])
    train_emu3.main(["assemble", "--vq", str(root / "vq"), "--lm", str(tmp_path / "named-lm"), "--out",
                     str(tmp_path / "named")])
    assert json.loads((tmp_path / "named" / MODEL_DATA_FILE).read_text()) == {"data": "emoji-names"}
    assert json.loads((root / "pipe" / MODEL_DATA_FILE).read_text()) == {"data": "emoji"}
    assert Emu3Pipeline.from_pretrained(tmp_path / "named").config.default_height == 16

    suite = eval_module("suite_emu3")
    named, heldout = suite.prompt_set(tmp_path / "named"), suite.prompt_set(root / "pipe")
    assert (named.name, named.fid_data, len(named.names)) == ("named", "emoji-names", 123)
    assert named.names == class_names("emoji-names") and named.record()["prompt_set"] == "named"
    assert (heldout.name, heldout.fid_data) == ("held-out", "emoji")
    assert list(heldout.names) == suite.heldout_captions() and not set(heldout.names) & set(named.names)

    parts = train_emu3.main(["extract", "--folder", str(tmp_path / "named"), "--out", str(tmp_path / "parts")])
    assert json.loads((tmp_path / "parts" / "lm" / "training_metrics.json").read_text())["config"]["named"]
    train_emu3.main(["assemble", "--vq", parts["vq"], "--lm", parts["lm"], "--out", str(tmp_path / "again")])
    assert model_data(tmp_path / "again") == "emoji-names"
