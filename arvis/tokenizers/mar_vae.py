"""MAR's KL-16 VAE tokenizer (LTH14/mar ``models/vae.py``, the LDM ``AutoencoderKL``) as diffusers' ``AutoencoderKL``.

The official tokenizer is the latent-diffusion KL autoencoder: 128 base channels, channel multipliers
``(1, 1, 2, 2, 4)`` (stride 16), two residual blocks per level, self-attention in the encoder's 16×16
level and in both middle blocks (none in the decoder's levels), 16 latent channels (``embed_dim``),
``quant_conv`` ``32 → 32`` and ``post_quant_conv`` ``16 → 16``; MAR scales latents by ``0.2325``.
diffusers' ``AutoencoderKL`` holds exactly these weights (312 tensors, 66,456,019 values) when the
encoder's last level is an ``AttnDownEncoderBlock2D``; :func:`official_to_diffusers` renames the keys
(and turns the attention's 1×1 convolutions into linear weights), :func:`diffusers_to_official` goes back.

``kl16.ckpt`` is a ``torch.save`` pickle ``{"model": state_dict}`` (read with ``weights_only=True``); the
training loss's weights some such files carry (``loss.*``) are skipped, as the official loader does
(``strict=False``); any other unknown key is an error.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

import torch
from diffusers import AutoencoderKL

from arvis.errors import CheckpointError
from arvis.utils.config_check import Bound, FolderSpec

MAR_LATENT_SCALE = 0.2325  # engine_mar.py: latents = posterior.sample() * 0.2325
KL16_CHANNELS = (128, 128, 256, 256, 512)  # ch=128 × ch_mult (1, 1, 2, 2, 4)
IGNORED_PREFIXES = ("loss.",)  # the training loss (LPIPS, discriminator) saved next to the model


# What a KL-VAE folder's config.json may hold (diffusers' AutoencoderKL arguments), checked before anything is
# allocated. Generous: the official KL-16 has 5 levels up to 512 channels, 2 blocks per level, 16 latent channels.
# MAR decodes latents / scaling_factor only: a shift or a latent mean / std would be silently ignored, so they
# must be null.
KL_VAE_CONFIG_BOUNDS: dict[str, Bound] = {
    "in_channels": Bound.choice(3),
    "out_channels": Bound.choice(3),
    "down_block_types": Bound.strings(16),
    "up_block_types": Bound.strings(16),
    "block_out_channels": Bound.integers(1, 4096, max_items=16),
    "layers_per_block": Bound.integer(1, 64),
    "act_fn": Bound.choice("silu"),
    "latent_channels": Bound.integer(1, 4096),
    "norm_num_groups": Bound.integer(1, 4096),
    "sample_size": Bound.integer(1, 1 << 14),
    "scaling_factor": Bound.number(0.0, 1e6, open_low=True),
    "shift_factor": Bound.null(note="MAR's decoder does not shift latents"),
    "latents_mean": Bound.null(note="MAR's decoder does not normalise latents"),
    "latents_std": Bound.null(note="MAR's decoder does not normalise latents"),
    "force_upcast": Bound.boolean(),
    "use_quant_conv": Bound.boolean(),
    "use_post_quant_conv": Bound.boolean(),
    "mid_block_add_attention": Bound.boolean(),
}
# How a pipeline checks a KL-VAE component folder (arvis.utils.config_check.check_pipeline_folder).
KL_VAE_FOLDER = FolderSpec("AutoencoderKL", KL_VAE_CONFIG_BOUNDS, AutoencoderKL)


def build_kl_vae(block_out_channels: Sequence[int] = KL16_CHANNELS, latent_channels: int = 16, resolution: int = 256,
                 attn_resolutions: Sequence[int] = (16,), layers_per_block: int = 2, norm_num_groups: int = 32,
                 scaling_factor: float = MAR_LATENT_SCALE) -> AutoencoderKL:
    """A diffusers ``AutoencoderKL`` with the official LDM/MAR architecture (defaults: KL-16 at 256 px).

    ``attn_resolutions``: feature-map sizes (at ``resolution`` input) whose encoder level has attention
    after each residual block (the official ``attn_resolutions=(16,)``).
    """
    levels = len(block_out_channels)
    down = tuple("AttnDownEncoderBlock2D" if resolution // 2 ** i in attn_resolutions else "DownEncoderBlock2D"
                 for i in range(levels))
    return AutoencoderKL(in_channels=3, out_channels=3, down_block_types=down,
                         up_block_types=("UpDecoderBlock2D",) * levels, block_out_channels=tuple(block_out_channels),
                         layers_per_block=layers_per_block, latent_channels=latent_channels,
                         norm_num_groups=norm_num_groups, sample_size=resolution, scaling_factor=scaling_factor)


# ----------------------------------------------------------------------------- key mapping
_ATTN = {"norm": "group_norm", "q": "to_q", "k": "to_k", "v": "to_v", "proj_out": "to_out.0"}
_RESNET = {"nin_shortcut": "conv_shortcut"}


def _rename(key: str, levels: int) -> tuple[str, bool]:
    """One official key → (diffusers key, whether it is an attention 1×1 conv weight to squeeze)."""
    parts = key.split(".")
    side = parts[0]
    rest = parts[1:]
    attn = False
    if rest[0] == "norm_out":
        rest = ["conv_norm_out"] + rest[1:]
    elif rest[0] == "mid":
        sub = rest[1]
        if sub.startswith("block_"):
            rest = ["mid_block", "resnets", str(int(sub[-1]) - 1)] + [_RESNET.get(rest[2], rest[2])] + rest[3:]
        elif sub == "attn_1":
            rest = ["mid_block", "attentions", "0", _ATTN[rest[2]]] + rest[3:]
            attn = True
        else:
            raise KeyError(key)
    elif rest[0] in ("down", "up"):
        level = int(rest[1])
        name = "down_blocks" if rest[0] == "down" else "up_blocks"
        index = level if rest[0] == "down" else levels - 1 - level
        kind = rest[2]
        if kind == "block":
            rest = [name, str(index), "resnets", rest[3], _RESNET.get(rest[4], rest[4])] + rest[5:]
        elif kind == "attn":
            rest = [name, str(index), "attentions", rest[3], _ATTN[rest[4]]] + rest[5:]
            attn = True
        elif kind in ("downsample", "upsample"):
            rest = [name, str(index), kind + "rs", "0"] + rest[3:]
        else:
            raise KeyError(key)
    elif rest[0] not in ("conv_in", "conv_out"):
        raise KeyError(key)
    conv_weight = attn and key.endswith(".weight") and "group_norm" not in rest  # q/k/v/proj_out: 1×1 convs
    return ".".join([side] + rest), conv_weight


def official_to_diffusers(state_dict: Mapping[str, torch.Tensor], source: str = "state dict"
                          ) -> dict[str, torch.Tensor]:
    """An official (LDM) KL-VAE state dict → diffusers ``AutoencoderKL`` keys (``loss.*`` dropped)."""
    levels = 1 + max((int(m.group(1)) for k in state_dict if (m := re.match(r"encoder\.down\.(\d+)\.", k))), default=0)
    out: dict[str, torch.Tensor] = {}
    for key, value in state_dict.items():
        if key.startswith(IGNORED_PREFIXES):
            continue
        if key.split(".")[0] in ("quant_conv", "post_quant_conv"):
            out[key] = value
            continue
        if key.split(".")[0] not in ("encoder", "decoder"):
            raise CheckpointError(f"{source}: unexpected key {key!r} (not a KL-VAE weight)")
        try:
            new, squeeze = _rename(key, levels)
        except (KeyError, IndexError, ValueError):
            raise CheckpointError(f"{source}: unexpected key {key!r} (not a KL-VAE weight)") from None
        out[new] = value[:, :, 0, 0] if squeeze and value.ndim == 4 else value
    return out


def diffusers_to_official(vae: AutoencoderKL) -> dict[str, torch.Tensor]:
    """``vae``'s weights under the official LDM keys (attention weights as 1×1 convolutions)."""
    levels = len(vae.config.block_out_channels)
    names: dict[str, tuple[str, bool]] = {}
    # Enumerate the official names this architecture has and map each one forward: one mapping, used both ways.
    for key in _official_keys(vae):
        names[key] = _rename(key, levels) if key.split(".")[0] in ("encoder", "decoder") else (key, False)
    sd = vae.state_dict()
    out = {}
    for key, (new, squeeze) in names.items():
        value = sd[new].detach().clone()
        out[key] = value[:, :, None, None] if squeeze else value
    return out


def _official_keys(vae: AutoencoderKL) -> list[str]:
    """The official key names of ``vae``'s architecture (derived from its diffusers keys)."""
    levels = len(vae.config.block_out_channels)
    inverse_attn = {v: k for k, v in _ATTN.items()}
    keys = []
    for key in vae.state_dict():
        p = key.split(".")
        if p[0] in ("quant_conv", "post_quant_conv"):
            keys.append(key)
            continue
        side, rest = p[0], p[1:]
        if rest[0] == "conv_norm_out":
            rest = ["norm_out"] + rest[1:]
        elif rest[0] == "mid_block":
            if rest[1] == "resnets":
                rest = ["mid", f"block_{int(rest[2]) + 1}", "nin_shortcut" if rest[3] == "conv_shortcut" else rest[3]] + rest[4:]
            else:
                sub = ".".join(rest[3:-1])
                rest = ["mid", "attn_1", inverse_attn[sub], rest[-1]]
        elif rest[0] in ("down_blocks", "up_blocks"):
            index = int(rest[1])
            level = index if rest[0] == "down_blocks" else levels - 1 - index
            name = "down" if rest[0] == "down_blocks" else "up"
            if rest[2] == "resnets":
                rest = [name, str(level), "block", rest[3], "nin_shortcut" if rest[4] == "conv_shortcut" else rest[4]] + rest[5:]
            elif rest[2] == "attentions":
                rest = [name, str(level), "attn", rest[3], inverse_attn[".".join(rest[4:-1])], rest[-1]]
            else:  # downsamplers.0.conv / upsamplers.0.conv
                rest = [name, str(level), rest[2][:-2]] + rest[4:]
        keys.append(".".join([side] + rest))
    return keys


# ----------------------------------------------------------------------------- files
def load_mar_vae_checkpoint(path: str | os.PathLike, vae: AutoencoderKL | None = None, key: str = "auto",
                            dtype: torch.dtype | None = None) -> AutoencoderKL:
    """Load an official KL-VAE checkpoint (``kl16.ckpt``: ``{"model": state_dict}``; or the flat dict).

    Args:
        path: the file (``.ckpt`` / ``.pth`` pickle read with ``weights_only=True``, or ``.safetensors``).
        vae: the module to load into (default :func:`build_kl_vae`, the KL-16 architecture); a tiny or
            other-size VAE passes its own.
        key: where the weights sit in a pickle (``auto``, ``model``, …).
        dtype: cast after loading.

    Raises:
        CheckpointError: unreadable or unsafe file, unknown keys, missing or mis-shaped weights.
    """
    from arvis.utils.serialization import (
        check_state_dict,
        check_tensor_values,
        extract_state_dict,
        load_state_dict_file,
    )

    source = str(path)
    sd, _ = extract_state_dict(load_state_dict_file(path), key, source=source)
    common = check_tensor_values({k: v for k, v in sd.items() if not k.startswith(IGNORED_PREFIXES)}, source)
    converted = official_to_diffusers(sd, source)
    if vae is None:
        with torch.device("meta"):
            vae = build_kl_vae()
    check_state_dict(vae, converted, source=source)
    vae.load_state_dict({k: v.to(common) for k, v in converted.items()}, strict=True, assign=True)
    vae.eval()
    return vae.to(dtype) if dtype is not None else vae


def export_mar_vae_checkpoint(vae: AutoencoderKL, path: str | os.PathLike) -> None:
    """Write ``vae`` in the official layout (``{"model": state_dict}`` with LDM keys; or flat safetensors)."""
    from arvis.utils.serialization import save_pickle_checkpoint, save_safetensors

    path = Path(path)
    sd = diffusers_to_official(vae)
    if path.suffix == ".safetensors":
        save_safetensors(sd, path)
    elif path.suffix in (".ckpt", ".pth", ".pt"):
        save_pickle_checkpoint({"model": sd}, path)
    else:
        raise ValueError(f"path must end in .ckpt, .pth, .pt or .safetensors, got {path.name!r}")


__all__ = ["KL_VAE_CONFIG_BOUNDS", "KL_VAE_FOLDER", "MAR_LATENT_SCALE", "build_kl_vae", "official_to_diffusers", "diffusers_to_official",
           "load_mar_vae_checkpoint", "export_mar_vae_checkpoint"]
