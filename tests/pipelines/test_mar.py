"""MAR: official layouts, presets, the diffusion head, the causal variant's cache, the pipeline and the CLI.

The official code is not part of the repository; ``eval/compare_mar_reference.py --reference-repo <LTH14/mar>``
compares z, the head's transitions and sampling, the masked schedule and the VAE with it on exported weights;
the test marked by ``ARVIS_MAR_REFERENCE`` (an LTH14/mar checkout) runs it and is skipped without one.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch

from arvis.engine.continuous import mask_schedule
from arvis.engine.guidance import RULES
from arvis.errors import CheckpointError, ConfigError
from arvis.models.diffusion_head import (
    DDPMTables,
    MARDiffusionHead,
    cosine_betas,
    linear_betas,
    spaced_timesteps,
)
from arvis.models.mar import (
    MAR_PRESETS,
    MARTransformer,
    export_mar_checkpoint,
    load_mar_checkpoint,
    official_state_dict,
)
from arvis.models.protocol import DiffusionHead
from arvis.pipelines import MARPipeline
from arvis.tokenizers.mar_vae import (
    build_kl_vae,
    diffusers_to_official,
    export_mar_vae_checkpoint,
    load_mar_vae_checkpoint,
)
from arvis.utils.serialization import load_pickle_checkpoint, save_pickle_checkpoint

NAMES = ["a", "b", "c"]


def tiny_mar(causal: bool = False, seed: int = 0, width: int = 32, steps: int = 4
             ) -> tuple[MARTransformer, MARDiffusionHead]:
    t = MARTransformer(img_size=64, vae_stride=16, encoder_embed_dim=width, encoder_depth=1, encoder_num_heads=2,
                       decoder_embed_dim=width, decoder_depth=1, decoder_num_heads=2, vae_embed_dim=4, buffer_size=4,
                       num_classes=3, class_names=NAMES, causal=causal)
    t.init_weights(torch.Generator().manual_seed(seed))
    head = t.default_head(width=32, depth=2, sampling_steps=steps)
    head.init_weights(torch.Generator().manual_seed(seed + 2))
    with torch.no_grad():  # the official init leaves the head's output layers at zero: give it real outputs
        for p in head.parameters():
            p.add_(torch.randn(p.shape, generator=torch.Generator().manual_seed(seed + 1)) * 0.05)
    return t.eval(), head.eval()


def close(a: torch.Tensor, b: torch.Tensor, rel: float = 1e-4) -> bool:
    """Equal up to float rounding relative to the largest value (batched matmuls round differently, and the
    untrained tiny head's early DDPM steps amplify it)."""
    return float((a - b).abs().max()) <= rel * float(a.abs().max())


def tiny_vae() -> torch.nn.Module:
    return build_kl_vae(block_out_channels=(8, 8, 8, 8, 8), latent_channels=4, resolution=64, norm_num_groups=4).eval()


def tiny_pipeline(causal: bool = False) -> MARPipeline:
    t, h = tiny_mar(causal)
    pipe = MARPipeline(t, h, tiny_vae())
    pipe.set_progress_bar_config(disable=True)
    return pipe


# ----------------------------------------------------------------------------- official layouts
@pytest.mark.parametrize("name", sorted(MAR_PRESETS))
def test_presets_have_the_official_parameter_counts(name):
    with torch.device("meta"):
        t = MARTransformer.from_preset(name)
        head = t.default_head()
    n = sum(p.numel() for p in t.parameters()) + sum(p.numel() for p in head.parameters())
    assert n == MAR_PRESETS[name].params  # measured on LTH14/mar's MAR with the README's diffloss_d / diffloss_w
    assert abs(n / 1e6 - float(MAR_PRESETS[name].published[:-1])) < 1.0  # the README's 208M / 479M / 943M


def test_official_checkpoint_round_trip(tmp_path):
    t, h = tiny_mar()
    path = tmp_path / "checkpoint-last.pth"
    export_mar_checkpoint(t, h, path)
    raw = load_pickle_checkpoint(path)  # weights_only=True with arvis's allowlist
    assert set(raw) == {"model", "model_ema", "epoch", "args"} and raw["args"].class_num == 3
    keys = set(raw["model_ema"])
    for key in ("class_emb.weight", "fake_latent", "mask_token", "encoder_pos_embed_learned", "z_proj_ln.weight",
                "encoder_blocks.0.attn.qkv.weight", "encoder_blocks.0.mlp.fc2.bias", "decoder_blocks.0.norm1.weight",
                "diffusion_pos_embed_learned", "diffloss.net.time_embed.mlp.0.weight",
                "diffloss.net.res_blocks.1.adaLN_modulation.1.weight", "diffloss.net.final_layer.linear.bias"):
        assert key in keys, key
    assert keys == set(official_state_dict(t, h))
    t2, h2 = load_mar_checkpoint(path)
    tokens, mask = torch.randn(2, 16, 4), torch.zeros(2, 16, dtype=torch.bool)
    mask[:, 5:] = True
    ce = t.class_embedding(torch.tensor([0, 2]))
    with torch.no_grad():
        assert torch.equal(t(tokens, mask, ce), t2(tokens, mask, t2.class_embedding(torch.tensor([0, 2]))))
        x = torch.randn(3, 4)
        z = torch.randn(3, 32)
        assert torch.equal(h.transition(x, 2, z)[0], h2.transition(x, 2, z)[0])
    # The causal variant loads the same file; safetensors holds the same flat keys.
    assert load_mar_checkpoint(path, causal=True)[0].is_causal
    export_mar_checkpoint(t, h, tmp_path / "m.safetensors")
    with pytest.raises(ConfigError, match="head count"):  # no preset, no args: the head count is unknown
        load_mar_checkpoint(tmp_path / "m.safetensors")
    assert load_mar_checkpoint(tmp_path / "m.safetensors", num_heads=2, img_size=64)[0].seq_len == 16


def test_foreign_or_inconsistent_checkpoints_are_refused(tmp_path):
    save_pickle_checkpoint({"model": {"tok_embeddings.weight": torch.zeros(4, 4)}}, tmp_path / "llamagen.pt")
    with pytest.raises(CheckpointError, match="not an official MAR"):
        load_mar_checkpoint(tmp_path / "llamagen.pt")
    t, h = tiny_mar()
    sd = official_state_dict(t, h)
    bad = dict(sd, **{"diffloss.net.extra.weight": torch.zeros(1)})
    save_pickle_checkpoint({"model": bad, "args": None}, tmp_path / "extra.pth")
    with pytest.raises(CheckpointError):
        load_mar_checkpoint(tmp_path / "extra.pth", num_heads=2, img_size=64)
    save_pickle_checkpoint({"model": sd}, tmp_path / "grid.pth")
    with pytest.raises(ConfigError, match="positions"):  # 256 px / 16 = 256 tokens, the weights have 16
        load_mar_checkpoint(tmp_path / "grid.pth", num_heads=2)


def test_kl16_architecture_is_diffusers_autoencoder_kl():
    with torch.device("meta"):
        vae = build_kl_vae()
    assert sum(p.numel() for p in vae.parameters()) == 66_456_019  # LTH14/mar AutoencoderKL(16, (1, 1, 2, 2, 4))
    official = diffusers_to_official(vae)
    assert len(official) == 312 and official["encoder.down.4.attn.1.q.weight"].shape == (512, 512, 1, 1)
    assert "encoder.down.3.attn.0.q.weight" not in official and "decoder.up.4.attn.0.q.weight" not in official
    assert official["quant_conv.weight"].shape == (32, 32, 1, 1) and official["decoder.up.0.block.2.conv2.weight"].shape[0] == 128
    assert vae.config.scaling_factor == 0.2325


def test_vae_checkpoint_in_the_official_layout_loads(tmp_path):
    vae = tiny_vae()
    with torch.no_grad():
        for p in vae.parameters():
            p.add_(torch.randn(p.shape, generator=torch.Generator().manual_seed(3)) * 0.05)
    sd = diffusers_to_official(vae)
    assert "encoder.mid.attn_1.proj_out.weight" in sd and "decoder.up.4.upsample.conv.weight" in sd
    sd["loss.logvar"] = torch.zeros(())  # the training loss's weights ride along in kl16.ckpt
    save_pickle_checkpoint({"model": sd}, tmp_path / "kl.ckpt")
    loaded = load_mar_vae_checkpoint(tmp_path / "kl.ckpt", vae=tiny_vae())
    z = torch.randn(1, 4, 4, 4)
    with torch.no_grad():
        assert torch.equal(loaded.decode(z).sample, vae.decode(z).sample)
    export_mar_vae_checkpoint(vae, tmp_path / "again.ckpt")
    assert set(load_pickle_checkpoint(tmp_path / "again.ckpt")["model"]) == set(sd) - {"loss.logvar"}
    save_pickle_checkpoint({"model": {**sd, "encoder.down.0.extra.weight": torch.zeros(1)}}, tmp_path / "bad.ckpt")
    with pytest.raises(CheckpointError, match="unexpected key"):
        load_mar_vae_checkpoint(tmp_path / "bad.ckpt", vae=tiny_vae())


# ----------------------------------------------------------------------------- the head
def test_schedule_tables_are_iddpms():
    assert spaced_timesteps(1000, 100)[:3] == [0, 10, 20] and spaced_timesteps(1000, 100)[-1] == 999
    full = DDPMTables(1000, 1000)
    assert torch.allclose(full.betas, cosine_betas(1000), rtol=1e-10)  # all steps kept: the schedule itself
    spaced = DDPMTables(1000, 50)
    base = torch.cumprod(1 - cosine_betas(1000), 0)
    assert torch.allclose(spaced.alphas_cumprod, base[spaced.timestep_map], rtol=1e-12)
    assert abs(float(base[-1])) < 1e-4 and float(cosine_betas(1000).max()) == 0.999


def test_linear_sampling_schedule_asks_the_net_at_equal_noise_levels():
    cosine, linear = DDPMTables(1000, 100), DDPMTables(1000, 100, "linear")
    lin_base = torch.cumprod(1 - linear_betas(1000), 0)
    kept = torch.tensor(spaced_timesteps(1000, 100))
    assert torch.allclose(linear.alphas_cumprod, lin_base[kept], rtol=1e-12)
    # the net's (fractional) cosine steps: their interpolated log ᾱ is the linear schedule's
    cos_base = torch.cumprod(1 - cosine_betas(1000), 0).log()
    t = linear.timestep_map.double()
    lo = t.floor().long().clamp_max(998)
    interp = cos_base[lo] + (t - lo) * (cos_base[lo + 1] - cos_base[lo])
    assert torch.allclose(interp, linear.alphas_cumprod.log(), atol=1e-5)
    assert bool((linear.timestep_map[1:] > linear.timestep_map[:-1]).all()) and float(linear.timestep_map[-1]) < 999
    # the reason for the option: the cosine schedule's last jump multiplies an ε error by hundreds
    assert cosine.eps_error_gain() > 300 and linear.eps_error_gain() < 1
    with pytest.raises(ValueError, match="sampling schedule"):
        DDPMTables(1000, 10, "quadratic")


@torch.no_grad()
def test_head_sampling_schedule_is_config_and_survives_reloads(tmp_path):
    _, head = tiny_mar(steps=6)
    linear = MARDiffusionHead(**{**head.config, "sampling_schedule": "linear"})
    linear.load_state_dict(head.state_dict())
    linear.save_pretrained(tmp_path / "head")
    again = MARDiffusionHead.from_pretrained(tmp_path / "head")
    assert again.config.sampling_schedule == "linear" and again._tables.schedule == "linear"
    assert again.with_sampling_steps(4)._tables.schedule == "linear"
    assert again.with_sampling_steps(4, schedule="cosine")._tables.schedule == "cosine"
    z = torch.randn(3, head.config.cond_dim, generator=torch.Generator().manual_seed(1))
    noise = torch.randn(6, 3, head.token_dim, generator=torch.Generator().manual_seed(2))
    a, b = head.sample(z, noise=noise), again.sample(z, noise=noise)
    assert bool(torch.isfinite(b).all()) and not torch.allclose(a, b)  # other noise levels, other samples
    # the same net: at one matched noise level both heads ask it the same question
    assert torch.equal(again.with_sampling_steps(6, schedule="cosine").sample(z, noise=noise), a)
    with pytest.raises(ValueError):
        MARDiffusionHead(**{**head.config, "sampling_schedule": "exotic"})


@torch.no_grad()
def test_head_follows_the_protocol_and_samples_deterministically():
    _, head = tiny_mar(steps=6)
    assert isinstance(head, DiffusionHead) and head.num_sampling_steps() == 6
    z = torch.randn(5, 32, generator=torch.Generator().manual_seed(0))
    a = head.sample(z, torch.Generator().manual_seed(1), 1.0)
    b = head.sample(z, torch.Generator().manual_seed(1), 1.0)
    c = head.sample(z, torch.Generator().manual_seed(2), 1.0)
    assert torch.equal(a, b) and not torch.allclose(a, c)
    x0, traj = head.sample(z, torch.Generator().manual_seed(1), 1.0, return_trajectory=True)
    assert torch.equal(x0, a) and traj.shape == (7, 5, 4) and torch.equal(traj[-1], a)
    mean, std = head.transition(traj[-2], 0, z)
    assert torch.equal(mean, a) and float(std.abs().max()) == 0.0  # the last step is the mean
    # Given noise: x_T = noise[0], then x_{i-1} = mean + temperature · σ · noise[k]; temperature scales the std.
    noise = torch.randn(6, 5, 4, generator=torch.Generator().manual_seed(4))
    x0, traj = head.sample(z, temperature=0.5, noise=noise, return_trajectory=True)
    mean, std = head.transition(noise[0], 5, z, temperature=0.5)
    assert torch.equal(traj[0], noise[0]) and torch.allclose(traj[1], mean + std * noise[1], atol=1e-6)
    assert torch.allclose(std, 0.5 * head.transition(noise[0], 5, z)[1]) and float(std.min()) > 0
    # Guidance with scale 1 is the conditional prediction; another unconditional z changes the mean when s != 1.
    x, zu = torch.randn(5, 4), torch.randn(5, 32)
    assert torch.allclose(head.transition(x, 3, z, z_uncond=zu)[0], head.transition(x, 3, z)[0], atol=1e-5)
    assert not torch.allclose(head.transition(x, 3, z, guidance_scale=3.0, z_uncond=zu)[0], head.transition(x, 3, z)[0])
    with pytest.raises(ValueError, match="temperature"):
        head.sample(z, temperature=float("nan"))


# ----------------------------------------------------------------------------- the causal variant
def test_kv_cached_decode_equals_full_recompute_and_rolls_back():
    t, _ = tiny_mar(causal=True)
    tokens = torch.randn(2, 16, 4, generator=torch.Generator().manual_seed(0))
    ce = t.class_embedding(torch.tensor([0, 1]))
    with torch.no_grad():
        full = t(tokens, None, ce)  # teacher-forced, no cache
        cache = t.allocate_cache(2)
        steps = [t.prefill(ce, cache)] + [t.forward_tokens(tokens[:, j:j + 1], j, cache)[:, 0] for j in range(15)]
        assert torch.allclose(torch.stack(steps, 1), full, atol=1e-5)
        # A window of garbage written at 6..9 is forgotten by writing again from 6 (row 1) / 8 (row 0).
        cache = t.allocate_cache(2)
        t.prefill(ce, cache)
        t.forward_tokens(tokens[:, :6], 0, cache)
        t.forward_tokens(torch.randn(2, 4, 4), 6, cache)
        again = t.forward_tokens(torch.stack([tokens[0, 8:12], tokens[1, 6:10]]), torch.tensor([8, 6]), cache)
        assert not torch.allclose(again[0], full[0, 9:13], atol=1e-3)  # row 0 still sees the garbage at 6, 7
        assert torch.allclose(again[1], full[1, 7:11], atol=1e-5)
        # Changing a later token leaves earlier z alone (causal), changing an earlier one does not.
        changed = tokens.clone()
        changed[:, 10] += 1
        z2 = t(changed, None, ce)
        assert torch.allclose(z2[:, :11], full[:, :11], atol=1e-6) and not torch.allclose(z2[:, 11:], full[:, 11:])


# ----------------------------------------------------------------------------- the pipeline
def test_masked_schedule_is_mars():
    # L = 16, 4 iterations: masked after each = floor(16 cos(π/8 · k)) for k = 1..3 → 14, 11, 6, then all.
    assert mask_schedule(16, 4, 3.0) == [(2, 1 + 2 * 2 / 16), (3, 1 + 2 * 5 / 16), (5, 1 + 2 * 10 / 16),
                                         (6, 1 + 2 * 15 / 16)]
    sched = mask_schedule(16, 64)
    assert sum(n for n, _ in sched) == 16 and min(n for n, _ in sched) == 0  # more iterations than tokens
    assert mask_schedule(16, 4, 3.0, "constant")[0][1] == 3.0
    # The causal variant's strength after token j: 1 + (s − 1)·(j + 1)/L, divided last as the official code does.
    assert RULES["mar"].strength(3.0, 16, "linear", total=16) == 3.0
    assert RULES["mar"].strength(2.9, 7, "linear", total=9) == 1 + (2.9 - 1) * 7 / 9


def test_pipeline_conventions(tmp_path):
    pipe = tiny_pipeline()
    gens = [torch.Generator().manual_seed(i) for i in range(3)]
    out = pipe(class_labels=["a", 1, "c"], num_iter=4, guidance_scale=2.0, generator=gens, output_type="np")
    assert out.images.shape == (3, 64, 64, 3) and out.tokens.shape == (3, 16, 4)
    s = out.stats.samples[0]
    assert (s.tokens, s.target_forwards, s.draft_forwards) == (16, 4, 0) and s.accepted_per_forward == [2, 3, 5, 6]
    assert s.extra["head_steps"] == 16 * 4 and s.extra["head_forwards"] == 4 * 4
    assert sorted(s.commit_forward) == [0] * 2 + [1] * 3 + [2] * 5 + [3] * 6
    # Batch = single with per-image generators (up to batched-matmul rounding); dict = tuple.
    single = pipe(class_labels=[1], num_iter=4, guidance_scale=2.0, generator=torch.Generator().manual_seed(1),
                  output_type="latent").tokens
    assert close(single[0], out.tokens[1])
    images, tokens, _ = pipe(class_labels=["a", 1, "c"], num_iter=4, guidance_scale=2.0,
                             generator=[torch.Generator().manual_seed(i) for i in range(3)], output_type="np",
                             return_dict=False)
    assert torch.equal(tokens, out.tokens) and np.array_equal(images, out.images)
    assert not torch.allclose(out.tokens[0], out.tokens[2])
    pipe.sampling_defaults = {"num_iter": 4, "guidance_scale": 2.0}
    pipe.save_pretrained(tmp_path / "p")
    again = MARPipeline.from_pretrained(tmp_path / "p")
    again.set_progress_bar_config(disable=True)
    assert again.sampling_defaults == {"num_iter": 4, "guidance_scale": 2.0}
    assert torch.equal(again(class_labels=[1], generator=torch.Generator().manual_seed(1), output_type="latent").tokens,
                       single)
    seen = []
    pipe(class_labels=[0], num_iter=4, output_type="latent",
         callback_on_step_end=lambda p, step, committed, d: seen.append((step, int(committed[0]))))
    assert seen == [(0, 2), (1, 5), (2, 10), (3, 16)]
    assert pipe(class_labels=[0], num_iter=2, output_type="pt").images.shape == (1, 3, 64, 64)


def test_causal_pipeline_decodes_one_token_per_forward():
    pipe = tiny_pipeline(causal=True)
    out = pipe(class_labels=[0, 2], guidance_scale=1.5, generator=[torch.Generator().manual_seed(i) for i in range(2)],
               output_type="latent")
    s = out.stats.samples[1]
    assert (s.target_forwards, s.accepted_per_forward, s.commit_forward) == (16, [1] * 16, list(range(16)))
    single = pipe(class_labels=[2], guidance_scale=1.5, generator=torch.Generator().manual_seed(1), output_type="latent")
    assert close(single.tokens[0], out.tokens[1])
    # The tokens are the head's samples given the teacher-forced z: re-run the transformer on them, no cache.
    t = pipe.transformer
    with torch.no_grad():
        z = t(out.tokens, None, t.class_embedding(torch.tensor([0, 2])))
    assert z.shape == (2, 16, 32) and torch.isfinite(z).all()


def test_bad_input_gets_clear_errors(tmp_path):
    pipe = tiny_pipeline()
    with pytest.raises(ValueError, match="unknown class name 'zebra'"):
        pipe(class_labels=["zebra"], num_iter=2)
    with pytest.raises(ValueError, match="class id"):
        pipe(class_labels=[3], num_iter=2)
    for bad in (float("nan"), float("inf"), -1.0):
        with pytest.raises(ValueError, match="guidance_scale"):
            pipe(class_labels=[0], num_iter=2, guidance_scale=bad)
    with pytest.raises(ValueError, match="num_iter"):
        pipe(class_labels=[0], num_iter=0)
    with pytest.raises(ValueError, match="top_k"):
        pipe(class_labels=[0], num_iter=2, top_k=5)
    with pytest.raises(ValueError, match="method"):
        pipe(class_labels=[0], num_iter=2, method="sjd")
    with pytest.raises(ValueError, match="cfg_schedule"):
        pipe(class_labels=[0], num_iter=2, cfg_schedule="cosine")
    with pytest.raises(ValueError, match="final_std: only the causal variant"):
        pipe(class_labels=[0], num_iter=2, final_std=0.1)
    with pytest.raises(ValueError, match="generator"):
        pipe(class_labels=[0, 1], num_iter=2, generator=[torch.Generator()])
    with pytest.raises(CheckpointError, match="does not exist"):
        MARPipeline.from_pretrained(str(tmp_path / "nowhere"))
    t, h = tiny_mar()
    with pytest.raises(ValueError, match="head"):
        MARPipeline(t, MARDiffusionHead(token_dim=4, cond_dim=16, width=8, depth=1), tiny_vae())
    with pytest.raises(ValueError, match="sampling_defaults"):
        pipe.sampling_defaults = {"top_k": 3}
    # A saved folder whose configuration was edited is refused before anything loads, naming the field.
    import json

    pipe.save_pretrained(tmp_path / "edited")
    config = tmp_path / "edited" / "head" / "config.json"
    config.write_text(json.dumps({**json.loads(config.read_text()), "sampling_steps": 0}))
    with pytest.raises(ConfigError, match="sampling_steps"):
        MARPipeline.from_pretrained(tmp_path / "edited")


def test_cli_generate_and_bench_on_a_tiny_folder(tmp_path, capsys):
    from arvis.cli import main

    pipe = tiny_pipeline()
    pipe.sampling_defaults = {"num_iter": 4}
    pipe.save_pretrained(tmp_path / "mar-tiny")
    out = tmp_path / "out"
    assert main(["generate", "--model", str(tmp_path / "mar-tiny"), "--num-images", "2", "--class-ids", "a,2",
                 "--guidance-scale", "2", "--output", str(out), "--no-progress"]) == 0
    assert (out / "0000.png").is_file() and (out / "0001.png").is_file()
    assert "target_forwards/image=4.0" in capsys.readouterr().out
    assert main(["bench", "--model", str(tmp_path / "mar-tiny"), "--method", "ar", "--num-images", "1",
                 "--repeats", "5", "--no-progress"]) == 0
    text = capsys.readouterr().out
    assert "ar" in text and "4.0" in text
    assert main(["generate", "--model", str(tmp_path / "mar-tiny"), "--class-ids", "zebra", "--output",
                 str(tmp_path / "o2"), "--no-progress"]) == 2
    assert "zebra" in capsys.readouterr().err
    assert main(["generate", "--model", str(tmp_path / "mar-tiny"), "--top-k", "5", "--output",
                 str(tmp_path / "o3"), "--no-progress"]) == 2
    assert "top_k" in capsys.readouterr().err


# ----------------------------------------------------------------------------- continuous speculative decoding
def test_speculative_decoding_on_the_causal_variant_commits_windows():
    t, h = tiny_mar(causal=True)
    same = MARPipeline(t, h, tiny_vae(), t, h)  # the draft is the target: every trajectory is accepted
    same.set_progress_bar_config(disable=True)
    out = same(class_labels=[0, 1], method="cspd-exact", window=4, final_std=0.05,
               generator=torch.Generator().manual_seed(0), output_type="latent")
    s = out.stats.samples[0]
    assert s.extra["acceptance_rate"] > 0.9 and s.extra["final_std"] == 0.05
    assert sum(s.accepted_per_forward) == 16 and s.target_forwards == len(s.accepted_per_forward) < 16
    assert sorted(set(s.commit_forward)) == list(range(s.target_forwards)) and torch.isfinite(out.tokens).all()
    # Another draft: fewer accepted, still every token committed once, per-image generators = single calls.
    td, hd = tiny_mar(causal=True, seed=5, width=16)
    pipe = MARPipeline(t, h, tiny_vae(), td, hd)
    pipe.set_progress_bar_config(disable=True)
    kw = dict(method="cspd-exact", window=3, final_std=0.05, guidance_scale=2.0, cfg_schedule="constant",
              output_type="latent")
    # The batch decodes together; an image does not depend on its batch (up to batched-matmul rounding).
    both = pipe(class_labels=[0, 1], generator=[torch.Generator().manual_seed(i) for i in range(2)], **kw)
    one = pipe(class_labels=[1], generator=torch.Generator().manual_seed(1), **kw)
    assert close(one.tokens[0], both.tokens[1]) and both.stats.batch_target_forwards < 2 * 16
    assert one.stats.samples[0].accepted_per_forward == both.stats.samples[1].accepted_per_forward
    for s in both.stats.samples:
        assert sum(s.accepted_per_forward) == 16 and s.extra["fallbacks"] == 0 and -1 not in s.commit_forward
    with pytest.raises(ValueError, match="cfg_schedule"):
        pipe(class_labels=[0], method="cspd-exact", guidance_scale=2.0)
    with pytest.raises(ValueError, match="window"):
        pipe(class_labels=[0], method="cspd-exact", window=0)
    with pytest.raises(ValueError, match="'gamma' is now called 'window'"):
        pipe(class_labels=[0], method="cspd-exact", gamma=2)
    with pytest.raises(ValueError, match="causal"):
        tiny_pipeline()(class_labels=[0], method="cspd-exact", num_iter=2)


def test_every_continuous_method_runs_on_the_continuous_decoder():
    from arvis.engine.continuous import ContinuousDecoder
    from arvis.engine.sampling import SamplingConfig
    from arvis.methods import DecoderKind, MissingResourceError, build_method
    from arvis.methods.registry import available_methods
    from arvis.models.mar import MARModel

    C = DecoderKind.CONTINUOUS
    sampling = SamplingConfig(guidance="mar", guidance_scale=2.0, cfg_schedule="constant")
    labels = torch.tensor([0, 2])
    ran = set()
    for causal in (False, True):
        model, draft = MARModel(*tiny_mar(causal)), MARModel(*tiny_mar(causal, seed=5, width=16))
        for name in available_methods(C):
            if name != "ar" and (name == "cspd-exact") != causal:
                continue
            method = build_method(name, C, {"draft_model": draft})
            decoder = ContinuousDecoder(model, labels, sampling, torch.Generator().manual_seed(0), name, num_iter=4)
            stats = decoder.finish(method.run(decoder))
            s = stats.samples[1]
            assert bool(decoder.known.all()) and (s.method, s.tokens, sum(s.accepted_per_forward)) == (name, 16, 16)
            assert "head_s" in s.extra and torch.isfinite(decoder.tokens).all()
            ran.add(name)
    assert ran == set(available_methods(C)) == {"ar", "cspd", "cspd-exact"}
    # Without its draft a speculative method refuses before any forward, and nothing half-decoded is reported.
    decoder = ContinuousDecoder(MARModel(*tiny_mar(True)), labels, sampling, num_iter=4)
    with pytest.raises(MissingResourceError, match="draft"):
        build_method("cspd-exact", C).run(decoder)
    assert decoder.stats.target_forwards == 0
    with pytest.raises(RuntimeError, match="uncommitted"):
        decoder.finish()
    with pytest.raises(ValueError, match="guidance='mar'"):
        ContinuousDecoder(MARModel(*tiny_mar()), labels, SamplingConfig())


def test_published_cspd_on_masked_mar_is_labelled_lossy_and_commits_every_token():
    from arvis.methods import DecoderKind, build_method, is_lossless

    C = DecoderKind.CONTINUOUS
    assert not is_lossless("cspd", kind=C) and is_lossless("cspd-exact", kind=C)
    assert build_method("cspd", C, verify_every=3).verify_every == 3
    t, h = tiny_mar()
    # The draft is the target and every window is one iteration (same context, same guidance): the published
    # ratio is exactly 1, every draft is accepted.
    same = MARPipeline(t, h, tiny_vae(), t, h)
    same.set_progress_bar_config(disable=True)
    out = same(class_labels=[0, 1], method="cspd", num_iter=8, verify_every=1, prefill_ratio=0.15, guidance_scale=2.0,
               generator=torch.Generator().manual_seed(0), output_type="latent")
    s = out.stats.samples[0]
    assert s.extra["acceptance_rate"] == 1.0 and s.extra["fallbacks"] == 0
    # Schedule of 16 tokens in 8 iterations: 1 1 | 1 2 3 2 3 3; steps 0, 1 by the target, then one verify each.
    assert s.accepted_per_forward == [1, 1, 1, 2, 3, 2, 3, 3] and s.draft_forwards == 6
    td, hd = tiny_mar(seed=5, width=16)
    pipe = MARPipeline(t, h, tiny_vae(), td, hd)
    pipe.set_progress_bar_config(disable=True)
    out = pipe(class_labels=[0, 1], method="cspd", num_iter=8, verify_every=2, guidance_scale=2.0,
               generator=torch.Generator().manual_seed(0), output_type="latent")
    s = out.stats.samples[1]
    assert s.accepted_per_forward == [1, 1, 1, 5, 5, 3] and s.target_forwards == 6 and -1 not in s.commit_forward
    assert torch.isfinite(out.tokens).all() and s.extra["acceptance_rate"] < 1.0
    # Per-image generators: the batch decodes together (6 target forwards in all) and an image does not depend
    # on its batch (up to batched-matmul rounding).
    kw = dict(method="cspd", num_iter=8, verify_every=2, guidance_scale=2.0, output_type="latent")
    both = pipe(class_labels=[0, 1], generator=[torch.Generator().manual_seed(i) for i in (3, 4)], **kw)
    one = pipe(class_labels=[1], generator=torch.Generator().manual_seed(4), **kw)
    assert both.stats.batch_target_forwards == 6 and close(one.tokens[0], both.tokens[1])
    assert not torch.allclose(both.tokens[0], both.tokens[1])
    with pytest.raises(ValueError, match="masked"):
        tiny_pipeline(causal=True)(class_labels=[0], method="cspd")
    with pytest.raises(ValueError, match="'window' is now called 'verify_every'"):
        pipe(class_labels=[0], method="cspd", window=2)


def _scalar_causal_mar(seed: int) -> tuple[MARTransformer, MARDiffusionHead]:
    """A causal MAR of 2x2 one-channel tokens with a 4-step head (distributions cheap to sample at large N)."""
    t = MARTransformer(img_size=32, vae_stride=16, encoder_embed_dim=16, encoder_depth=1, encoder_num_heads=2,
                       decoder_embed_dim=16, decoder_depth=1, decoder_num_heads=2, vae_embed_dim=1, buffer_size=2,
                       num_classes=2, causal=True)
    t.init_weights(torch.Generator().manual_seed(seed))
    h = t.default_head(width=16, depth=1, sampling_steps=4)
    h.init_weights(torch.Generator().manual_seed(seed + 1))
    with torch.no_grad():
        for p in h.parameters():
            p.add_(torch.randn(p.shape, generator=torch.Generator().manual_seed(seed + 2)) * 0.05)
    return t.eval(), h.eval()


def test_exact_speculative_tokens_follow_the_target_and_a_planted_bug_fails(monkeypatch):
    """Two-sample KS tests per position (N = 3000 each, threshold 1e-3 per position: a false alarm has
    probability < 0.4% over the 8 comparisons). Power: the same test tells the draft's own AR samples from the
    target's (p < 1e-6 here), and a loop that commits every draft (no verification) fails it."""
    import copy

    from scipy.stats import ks_2samp

    import arvis.methods.continuous as continuous
    from arvis.acceptance.continuous import ContinuousVerification
    from arvis.engine.sampling import SamplingConfig
    from arvis.methods.continuous import decode_continuous
    from arvis.models.mar import MARModel

    target = MARModel(*_scalar_causal_mar(0))
    far = MARModel(*_scalar_causal_mar(7))  # an unrelated draft: the residual path
    near_h = copy.deepcopy(target.head)  # a close draft: about half the trajectories accepted
    with torch.no_grad():
        near_h.net.final_layer.linear.bias[:1] += 1e-4
    near = MARModel(target.transformer, near_h)
    N, fs = 3000, 0.1
    labels = torch.zeros(N, dtype=torch.long)
    sampling = SamplingConfig(guidance="mar")

    def decode(model: MARModel, seed: int, method: str = "ar", **options):
        return decode_continuous(model, labels, sampling, method, torch.Generator().manual_seed(seed), final_std=fs,
                                 **options)

    ar = decode(target, 1)[0][..., 0]

    def p_values(tokens):
        return [ks_2samp(ar[:, j].numpy(), tokens[:, j, 0].numpy()).pvalue for j in range(4)]

    far_tokens, _ = decode(target, 2, "cspd-exact", window=2, draft_model=far)
    near_tokens, stats = decode(target, 3, "cspd-exact", window=2, draft_model=near)
    rate = sum(s.extra["accepted"] for s in stats.samples) / sum(s.extra["drafted"] for s in stats.samples)
    assert 0.2 < rate < 0.8
    assert min(p_values(far_tokens)) > 1e-3 and min(p_values(near_tokens)) > 1e-3
    draft_ar = decode(far, 4)[0]
    assert max(p_values(draft_ar)) < 1e-6

    def accept_everything(target, draft, drafts, z_target, z_draft, **kw):  # the planted bug
        b, gamma = drafts.token.shape[:2]
        tokens = torch.cat([drafts.token, drafts.token[:, -1:]], 1)
        full = torch.full((b,), gamma, dtype=torch.long)
        return ContinuousVerification(tokens, torch.ones(b, gamma, dtype=torch.bool), full, full,
                                      torch.zeros(b, dtype=torch.bool), torch.zeros_like(full), torch.zeros_like(full))

    monkeypatch.setattr(continuous, "verify_window_exact", accept_everything)
    buggy, _ = decode(target, 2, "cspd-exact", window=2, draft_model=far)
    assert max(p_values(buggy)[1:]) < 1e-6  # token 0 comes from the target's prefill; the rest are the draft's


REFERENCE = os.environ.get("ARVIS_MAR_REFERENCE")


@pytest.mark.skipif(not REFERENCE, reason="set ARVIS_MAR_REFERENCE to an LTH14/mar checkout (its code needs timm)")
def test_same_outputs_as_the_official_code(capsys):
    from eval.compare_mar_reference import main  # noqa: PLC0415

    assert main(["--reference-repo", REFERENCE, "--skip-vae", "--sampling-steps", "5"]) == 0
    out = capsys.readouterr().out
    assert out.count("0.000e+00") == 6 and out.count("tokens per iteration equal: True") == 3, out


@torch.no_grad()
def test_batched_head_equals_the_per_position_loop_for_fixed_noise():
    """The decoder runs the head once per sampling step for every position of every image ([B·k] rows);
    that equals a chain per position driven by the same noise. The noise layout: with one generator per image,
    image b draws ``[S, k, D]`` for :meth:`sample` (row (b, i) gets ``[:, i]``) and ``[k, S+1, D]`` for
    :meth:`trajectories` from its own stream, so the batch never changes an image's noise."""
    from arvis.acceptance.continuous import DiffusionSampler, sample_trajectory
    from arvis.engine.continuous import Conditioning, ContinuousDecoder
    from arvis.engine.sampling import SamplingConfig
    from arvis.models.mar import MARModel

    t, h = tiny_mar(causal=True, steps=5)
    model = MARModel(t, h)
    B, k, S, D, C = 2, 3, 5, t.token_embed_dim, t.config.decoder_embed_dim
    gen = torch.Generator().manual_seed(0)
    z, zu = torch.randn(B, k, C, generator=gen), torch.randn(B, k, C, generator=gen)
    cond = Conditioning(z, zu, 0)
    sampling = SamplingConfig(guidance="mar", guidance_scale=2.0, temperature=0.9, cfg_schedule="constant")
    labels = torch.tensor([0, 1])

    def decoder() -> ContinuousDecoder:
        return ContinuousDecoder(model, labels, sampling, [torch.Generator().manual_seed(10 + b) for b in range(B)])

    def stream(b: int, shape: tuple[int, ...]) -> torch.Tensor:
        return torch.empty(shape).normal_(generator=torch.Generator().manual_seed(10 + b))

    batched = decoder().sample(model, cond, 2.0)  # [B, k, D]
    for b in range(B):
        noise = stream(b, (S, k, D))
        for i in range(k):
            one = h.sample(z[b, i][None], temperature=0.9, guidance_scale=2.0, z_uncond=zu[b, i][None],
                           noise=noise[:, i:i + 1])
            assert close(batched[b, i], one[0], 1e-5)
    traj = decoder().trajectories(model, cond, 2.0, final_std=0.05)  # [B, k]
    sampler = DiffusionSampler(h, 0.9, 2.0)
    for b in range(B):
        noise = stream(b, (k, S + 1, D))
        for i in range(k):
            one = sample_trajectory(sampler, z[b, i][None], noise=noise[i:i + 1], z_uncond=zu[b, i][None],
                                    final_std=0.05)
            assert close(traj.states[b, i], one.states[0], 1e-5) and close(traj.token[b, i], one.token[0], 1e-5)
            torch.testing.assert_close(traj.log_prob[b, i], one.log_prob[0], rtol=1e-5, atol=1e-3)
