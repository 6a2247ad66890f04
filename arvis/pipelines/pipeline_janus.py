"""Diffusers-style text-to-image pipeline for Janus / Janus-Pro (DeepSeek) and Janus-architecture models.

The same conventions as :class:`~arvis.pipelines.Emu3Pipeline` — ``generator`` (one, or one per image),
``num_images_per_prompt``, ``output_type``, ``return_dict``, ``callback_on_step_end``, a progress bar, the same
statistics object, and ``method=`` with its options — over transformers' Janus classes:

- ``transformer``: ``JanusForConditionalGeneration`` (Llama decoder, generation embeddings and head, VQ decoder);
- ``tokenizer``: its tokenizer (BOS, PAD and ``<begin_of_image>``; a chat template when the checkpoint has one);
- ``draft_transformer`` (optional): a smaller ``JanusForConditionalGeneration`` with the same tokenizer and
  codebook size, for draft-model speculative decoding.

Classifier-free guidance is Janus's own: the unconditional rows are each prompt with every token but BOS and BOI
replaced by PAD (transformers' ``generate(generation_mode="image")`` does the same), so there is no negative
prompt. The image size is the model's (``num_image_tokens``: Janus-Pro 24 × 24 tokens, 384 px).

Loads a diffusers folder written by ``save_pretrained`` or an official-layout folder
(``deepseek-community/Janus-Pro-1B`` style: ``config.json`` with ``model_type: janus``, safetensors, tokenizer
and processor files), from a local path; nothing is downloaded.

Example:
    >>> from arvis.pipelines import JanusPipeline
    >>> pipe = JanusPipeline.from_pretrained("janus")  # doctest: +SKIP
    >>> out = pipe("red apple", generator=torch.Generator().manual_seed(0), method="mc-sjd", window=32)
    >>> out.images[0].save("apple.png"); print(out.stats.format())
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from diffusers import DiffusionPipeline

from arvis.models.janus import JanusBackbone, JanusPromptTokens, generation_parts, janus_grid, janus_layout
from arvis.models.protocol import Condition, TokenLayout
from arvis.pipelines.common import (
    CALLBACK_TENSOR_INPUTS,
    callback_tensor_inputs,
    check_output_type,
)
from arvis.pipelines.interface import BenchInputs
from arvis.pipelines.pipeline_llamagen import LlamaGenPipelineOutput
from arvis.pipelines.prompt_tokens import PromptTokenPipeline
from arvis.tokenizers.janus_text import prompt_batch
from arvis.tokenizers.janus_vq import JanusImageTokenizer
from arvis.utils.random import GeneratorArg

# Prompt slots assumed by the memory estimate, which is asked before any prompt is known (Janus-Pro's chat-wrapped
# prompts are a few dozen tokens).
PROMPT_SLOTS_ESTIMATE = 128
_CHAT_TEMPLATE_FILES = ("chat_template.jinja", "chat_template.json")


class JanusPipelineOutput(LlamaGenPipelineOutput):
    """Output of :class:`JanusPipeline`: ``images``, ``tokens`` (VQ code grids ``[B, h, w]``) and ``stats``."""


class JanusPipeline(PromptTokenPipeline, DiffusionPipeline):
    """Text-to-image generation with a Janus model, through arvis's decoding methods.

    Args:
        transformer: ``transformers.JanusForConditionalGeneration``.
        tokenizer: the model's tokenizer.
        draft_transformer: optional smaller Janus model (same tokenizer, same codebook size) for
            ``method="speculative"``.
    """

    model_cpu_offload_seq = "transformer"
    _optional_components = ["draft_transformer"]
    _callback_tensor_inputs = list(CALLBACK_TENSOR_INPUTS)

    def __init__(self, transformer: Any, tokenizer: Any, draft_transformer: Any = None):
        super().__init__()
        generation_parts(transformer)  # TypeError naming the class when it is not a Janus model
        self.register_modules(transformer=transformer, tokenizer=tokenizer, draft_transformer=draft_transformer)
        self.prompt_tokens = JanusPromptTokens.from_tokenizer(tokenizer)
        side, K = janus_grid(transformer), self.num_codes
        if int(transformer.config.text_config.vocab_size) < len(tokenizer):
            raise ValueError(f"tokenizer: {len(tokenizer)} tokens, more than the model's text vocabulary "
                             f"({transformer.config.text_config.vocab_size}); use the model's own tokenizer")
        if draft_transformer is not None:
            generation_parts(draft_transformer)
            if janus_grid(draft_transformer) != side or \
                    int(draft_transformer.config.vq_config.num_embeddings) != K or \
                    int(draft_transformer.config.text_config.vocab_size) < len(tokenizer):
                raise ValueError("draft_transformer: its grid, codebook or text vocabulary differs from the "
                                 "transformer's")

    # ------------------------------------------------------------------ loading
    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path: str | Path, **kwargs: Any) -> JanusPipeline:
        """A diffusers folder (``model_index.json``), a shipped model's name, or an official Janus folder
        (``config.json`` with ``model_type: janus``)."""
        path = Path(pretrained_model_name_or_path)
        if (path / "model_index.json").is_file() or not (path / "config.json").is_file():
            return super().from_pretrained(pretrained_model_name_or_path, **kwargs)
        return cls.from_janus_checkpoint(path, dtype=kwargs.get("dtype", kwargs.get("torch_dtype")))

    @classmethod
    def from_janus_checkpoint(cls, path: str | Path, dtype: torch.dtype | None = None) -> JanusPipeline:
        """Load an official-layout folder (``deepseek-community/Janus-Pro-1B`` style) from a local path.

        Args:
            path: folder with ``config.json`` (``model_type: janus``), the safetensors weights, the tokenizer
                files and, when the checkpoint has one, the processor's chat template (used for prompts, as the
                official recipe does).
            dtype: weights dtype (default: as stored).
        """
        from transformers import AutoTokenizer, JanusForConditionalGeneration

        path = Path(path)
        model_type = json.loads((path / "config.json").read_text()).get("model_type")
        if model_type != "janus":
            raise ValueError(f"pretrained_model_name_or_path: {path} holds a {model_type!r} model, not a Janus one")
        model = JanusForConditionalGeneration.from_pretrained(path, dtype=dtype or "auto").eval()
        tokenizer = AutoTokenizer.from_pretrained(path)
        if not getattr(tokenizer, "chat_template", None):
            tokenizer.chat_template = _read_chat_template(path)
        return cls(model, tokenizer)

    # ------------------------------------------------------------------ the family seam
    # Janus-Pro's published recipe (CFG weight 5, temperature 1), for folders without a sampling_defaults.json.
    fallback_sampling_defaults = {"guidance_scale": 5.0, "top_k": 0}
    sampling_fields = ("guidance_scale", "top_k", "top_p", "temperature")

    @property
    def num_codes(self) -> int:
        return int(self.transformer.config.vq_config.num_embeddings)

    @property
    def token_layout(self) -> TokenLayout:
        """The token layout (grid, vocabulary). Its ``condition_length`` is a placeholder (1): each call sets the
        prompts' own."""
        return janus_layout(janus_grid(self.transformer), self.num_codes, 1)

    def decode_memory_bytes(self, batch_size: int, uses_cfg: bool) -> int | None:
        """The slot cache of a call (keys and values of every layer over the prompt and the image tokens; two rows
        per image under CFG), with a :data:`PROMPT_SLOTS_ESTIMATE`-token prompt."""
        backbone = JanusBackbone(self.transformer, self.prompt_tokens, PROMPT_SLOTS_ESTIMATE)
        return batch_size * (2 if uses_cfg else 1) * backbone.cache_bytes_per_row()

    # ------------------------------------------------------------------ pieces
    @property
    def vqvae(self) -> JanusImageTokenizer:
        """The VQ tokenizer (the transformer's ``JanusVQVAE``) as an arvis image tokenizer."""
        return JanusImageTokenizer(self.transformer.model.vqmodel)

    def codebook_neighbours(self, k: int) -> torch.Tensor:
        """``[K, k]`` latent neighbourhoods of the normalised VQ codebook (LANTERN)."""
        from arvis.methods.relaxation import codebook_neighbourhoods

        return codebook_neighbourhoods(self.vqvae.codebook_embeddings(), k)

    def prompt_ids(self, prompts: Sequence[str], length: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Left-padded image-generation prompts ``[B, C]`` and their mask (``JanusProcessor``'s, tokenised)."""
        return prompt_batch(self.tokenizer, list(prompts), length)

    def backbones(self, prompts: Sequence[str]) -> tuple[JanusBackbone, JanusBackbone | None, Condition]:
        """The target (and draft) backbones for one call, and the prompts' condition."""
        ids, mask = self.prompt_ids(prompts)
        device = self.transformer.device
        condition = Condition(token_ids=ids.to(device), mask=mask.to(device))
        C = ids.shape[1]
        target = JanusBackbone(self.transformer, self.prompt_tokens, C)
        limit = int(self.transformer.config.text_config.max_position_embeddings)
        if C + target.layout.num_tokens > limit:
            raise ValueError(f"prompt: {C} prompt tokens and {target.layout.num_tokens} image tokens need "
                             f"{C + target.layout.num_tokens} positions; the model supports {limit}")
        draft = None
        if self.draft_transformer is not None:
            draft = JanusBackbone(self.draft_transformer, self.prompt_tokens, C)
        return target, draft, condition

    def bench_inputs(self, conditions: Sequence[int | str] | None, samples: int, batch_size: int) -> BenchInputs:
        """What ``arvis bench`` times: one backbone (every prompt left-padded to one length), the condition batches
        (sample ``i`` gets ``conditions[i % len]``, ``batch_size`` samples per decode call) and methods built with
        the draft backbone of those prompts."""
        return self.prompt_bench_inputs(self.condition_batches(conditions, samples, batch_size))

    # ------------------------------------------------------------------ call
    @torch.no_grad()
    def __call__(
        self,
        prompt: str | Sequence[str],
        guidance_scale: float | None = None,
        top_k: int | None = None,
        top_p: float | None = None,
        temperature: float | None = None,
        num_images_per_prompt: int = 1,
        generator: GeneratorArg = None,
        output_type: str = "pil",
        return_dict: bool = True,
        callback_on_step_end: Callable[[JanusPipeline, int, torch.Tensor, dict], Any] | None = None,
        callback_on_step_end_tensor_inputs: Sequence[str] = ("tokens", "known"),
        method: str = "ar",
        **method_options: Any,
    ) -> JanusPipelineOutput | tuple:
        """Generate images from text.

        Args:
            prompt: text prompt(s).
            guidance_scale: classifier-free guidance (>= 0; 1 disables it; the unconditional rows are the masked
                prompts). top_k, top_p, temperature: as usual (0 = off for top-k; temperature 0 = greedy). Settings
                left ``None`` come from :attr:`sampling_defaults` (the folder's ``sampling_defaults.json``; official
                folders: CFG 5, top-k off, Janus-Pro's recipe), then from :class:`~arvis.engine.SamplingConfig`.
            num_images_per_prompt: images per prompt (>= 1; Janus's own default is 16, which at Janus-Pro's size
                needs :meth:`decode_memory_bytes` of cache).
            generator: a ``torch.Generator``, or one per image (``B * num_images_per_prompt``).
            output_type: ``"pil"``, ``"np"``, ``"pt"`` or ``"latent"`` (code grids).
            return_dict: return a :class:`JanusPipelineOutput` (else ``(images, tokens, stats)``).
            callback_on_step_end: ``f(pipe, forward_index, committed_per_sample, callback_kwargs)`` after every
                target forward that committed tokens (diffusers' contract, as :class:`~arvis.pipelines.Emu3Pipeline`).
            method: decoding method name (:meth:`methods` lists them); **method_options its options.

        Returns:
            :class:`JanusPipelineOutput` with images, code grids ``[B, h, w]`` and decode statistics.
        """
        check_output_type(output_type)
        if not isinstance(num_images_per_prompt, int) or isinstance(num_images_per_prompt, bool) \
                or num_images_per_prompt < 1:
            raise ValueError(f"num_images_per_prompt must be an integer >= 1, got {num_images_per_prompt!r}")
        tensor_inputs = callback_tensor_inputs(callback_on_step_end, callback_on_step_end_tensor_inputs)
        prompts = [prompt] if isinstance(prompt, str) else list(prompt)
        if not prompts:
            raise ValueError("prompt: empty")
        sampling = self.sampling_config(temperature=temperature, top_k=top_k, top_p=top_p,
                                        guidance_scale=guidance_scale)
        if isinstance(method, str):
            self.check_method(method, method_options)  # refused before any backbone is built
        backbones = self.backbones([p for p in prompts for _ in range(num_images_per_prompt)])
        grid = backbones[0].layout.grid
        images, codes, stats = self.decode_call(backbones, sampling, method, method_options, generator,
                                                callback_on_step_end, tensor_inputs,
                                                lambda tokens: tokens.reshape(tokens.shape[0], *grid), output_type)
        if not return_dict:
            return images, codes, stats
        return JanusPipelineOutput(images=images, tokens=codes, stats=stats)


def _read_chat_template(folder: Path) -> str | None:
    """The processor's chat template of an official folder (``chat_template.jinja``, or ``chat_template.json``'s
    ``chat_template``), if it has one."""
    for name in _CHAT_TEMPLATE_FILES:
        file = folder / name
        if file.is_file():
            text = file.read_text()
            return text if name.endswith(".jinja") else json.loads(text).get("chat_template")
    return None


__all__ = ["JanusPipeline", "JanusPipelineOutput", "PROMPT_SLOTS_ESTIMATE"]
