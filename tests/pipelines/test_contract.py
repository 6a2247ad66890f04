"""The contract every arvis pipeline keeps (after diffusers' ``PipelineTesterMixin``): one test class per
family, the same tests for all (:class:`PipelineContract`). A family's own test file holds only what is
particular to it.

What the contract checks: loading by short name (the shipped model, nothing downloaded), the interface's view
of the model (capabilities equal to its folder's, read without loading), the class vocabulary (``id2label``,
``get_label_ids``), every ``output_type``, ``return_dict=False``, generator lists and their errors, a batch
giving the images of single calls, ``callback_on_step_end`` and interruption, a save/load round trip giving
identical tokens, another dtype, every method that applies running on a tiny model, and every other method
refused before anything decodes — from the folder's metadata alone.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import PIL.Image
import pytest
import torch

from arvis.families import folder_capabilities
from arvis.hub import resolve_model, shipped_names
from arvis.methods.catalog import method_names
from tests.pipelines import tiny


@dataclass(frozen=True)
class Case:
    """One family as the contract sees it."""

    name: str
    build: Callable[[], Any]
    conditions: tuple[Any, ...]  # two conditions: class ids or names, or prompts
    alias: str | None = None  # the shipped model of this family
    condition_kw: str = "class_labels"
    output: str = "images"  # the output field (video: frames)
    per_prompt_kw: str = "num_images_per_prompt"
    continuous: bool = False  # continuous tokens: a batch's matmuls round differently, tokens agree to float precision

    def same(self, a: torch.Tensor, b: torch.Tensor) -> bool:
        """Whether two decodes gave the same tokens (continuous ones: to fp32 rounding)."""
        return torch.allclose(a, b, rtol=1e-4, atol=1e-3) if self.continuous else torch.equal(a, b)

    def call(self, pipe: Any, conditions: Any, **kwargs: Any) -> Any:
        return pipe(**{self.condition_kw: list(conditions)}, **kwargs)


CASES = [
    Case("llamagen-c2i", tiny.llamagen_c2i, ("dog", 3), alias="c2i"),
    Case("llamagen-t2i", tiny.llamagen_t2i, ("a red circle", "blue square on grass"), alias="t2i",
         condition_kw="prompt"),
    Case("emu3", tiny.emu3, ("red apple", "whale"), alias="emu3", condition_kw="prompt"),
    Case("janus", tiny.janus, ("red apple", "whale"), alias="janus", condition_kw="prompt"),
    Case("var", tiny.var, (0, 2), alias="var"),
    Case("video", tiny.video, (0, 5), alias="video", output="frames", per_prompt_kw="num_videos_per_prompt"),
    Case("mar-masked", lambda: tiny.mar(causal=False), (0, 2), alias="mar", continuous=True),
    Case("mar-causal", lambda: tiny.mar(causal=True), (1, 2), alias="mar-causal", continuous=True),
]


def gens(*seeds: int) -> list[torch.Generator]:
    return [torch.Generator().manual_seed(s) for s in seeds]


@pytest.fixture(scope="module", params=CASES, ids=[c.name for c in CASES])
def case(request):
    return request.param


@pytest.fixture(scope="module")
def pipe(case):
    p = case.build()
    p.set_progress_bar_config(disable=True)
    return p


class TestPipelineContract:
    def test_capabilities_describe_the_model(self, case, pipe):
        caps = pipe.capabilities
        assert caps.kind == pipe.decoder_kind and caps.family == type(pipe).family().name
        assert set(pipe.methods()) <= set(method_names(caps.kind)) and "ar" in pipe.methods()
        if caps.conditioning == "class":
            assert pipe.id2label == dict(enumerate(caps.class_names))
            if caps.class_names:
                name = caps.class_names[1]
                assert pipe.get_label_ids([name]) == [1] and pipe.labels[name] == 1
            with pytest.raises(ValueError, match="unknown class name"):
                pipe.class_ids(["no such class"])
        else:
            assert caps.conditioning == "text" and pipe.id2label == {}

    def test_output_types_and_return_dict(self, case, pipe):
        out = case.call(pipe, case.conditions[:1], generator=gens(0), output_type="pt")
        images = getattr(out, case.output)
        assert isinstance(images, torch.Tensor) and 0 <= float(images.min()) and float(images.max()) <= 1
        as_np = getattr(case.call(pipe, case.conditions[:1], generator=gens(0), output_type="np"), case.output)
        assert isinstance(as_np, np.ndarray) and as_np.shape[-1] == 3
        pil = getattr(case.call(pipe, case.conditions[:1], generator=gens(0), output_type="pil"), case.output)
        first = pil[0][0] if case.output == "frames" else pil[0]
        assert isinstance(first, PIL.Image.Image)
        latent = case.call(pipe, case.conditions[:1], generator=gens(0), output_type="latent")
        assert torch.equal(getattr(latent, case.output), latent.tokens)
        as_tuple = case.call(pipe, case.conditions[:1], generator=gens(0), output_type="latent", return_dict=False)
        assert isinstance(as_tuple, tuple) and torch.equal(as_tuple[1], latent.tokens)
        with pytest.raises(ValueError, match="output_type"):
            case.call(pipe, case.conditions[:1], output_type="jpeg")

    def test_statistics_are_attributes(self, case, pipe):
        stats = case.call(pipe, case.conditions[:1], generator=gens(0), output_type="latent").stats
        assert stats.target_forwards > 0 and stats.tokens > 0
        assert stats.step_compression == pytest.approx(stats.tokens / stats.target_forwards)
        assert stats.accepted_per_forward > 0 and stats.draft_forwards == 0

    def test_generator_lists_and_a_batch_equal_single_calls(self, case, pipe):
        both = case.call(pipe, case.conditions, generator=gens(3, 4), output_type="latent").tokens
        one = case.call(pipe, case.conditions[:1], generator=gens(3), output_type="latent").tokens
        two = case.call(pipe, case.conditions[1:], generator=gens(4), output_type="latent").tokens
        assert case.same(both, torch.cat([one, two]))
        with pytest.raises(ValueError, match="generator"):
            case.call(pipe, case.conditions, generator=gens(1), output_type="latent")
        many = case.call(pipe, case.conditions[:1], generator=gens(3, 5), output_type="latent",
                         **{case.per_prompt_kw: 2}).tokens
        assert case.same(many[:1], one)

    def test_callback_sees_every_step_and_can_interrupt(self, case, pipe):
        seen = []

        def record(p, step, committed, kwargs):
            seen.append(int(committed.sum()))
            return None

        full = case.call(pipe, case.conditions[:1], generator=gens(2), output_type="latent", callback_on_step_end=record)
        assert seen == sorted(seen) and seen[-1] == full.stats.tokens  # committed per sample, in sequence units

        def stop(p, step, committed, kwargs):
            p._interrupt = True

        cut = case.call(pipe, case.conditions[:1], generator=gens(2), output_type="latent", callback_on_step_end=stop)
        assert pipe.interrupt and cut.stats.target_forwards < full.stats.target_forwards

    def test_save_and_load_give_identical_tokens(self, case, pipe, tmp_path):
        pipe.save_pretrained(tmp_path / "saved")
        again = type(pipe).from_pretrained(tmp_path / "saved")
        again.set_progress_bar_config(disable=True)
        a = case.call(pipe, case.conditions, generator=gens(7, 8), output_type="latent").tokens
        b = case.call(again, case.conditions, generator=gens(7, 8), output_type="latent").tokens
        assert torch.equal(a, b)
        assert folder_capabilities(tmp_path / "saved") == pipe.capabilities  # the same view, without loading

    def test_another_dtype(self, case, pipe):
        half = case.build().to(dtype=torch.bfloat16)
        half.set_progress_bar_config(disable=True)
        out = case.call(half, case.conditions[:1], generator=gens(0), output_type="pt")
        assert torch.isfinite(getattr(out, case.output)).all()

    def test_every_applicable_method_runs(self, case, pipe):
        ar = case.call(pipe, case.conditions[:1], generator=gens(0), output_type="latent")
        for method in pipe.methods():
            out = case.call(pipe, case.conditions[:1], generator=gens(0), output_type="latent", method=method)
            assert out.tokens.shape == ar.tokens.shape, method
            assert out.stats.tokens == ar.stats.tokens, method

    def test_inapplicable_methods_are_refused_before_decoding(self, case, pipe, tmp_path):
        others = [m for m in method_names() if m not in pipe.methods()]
        assert others  # every family has methods of other kinds that it does not run
        pipe.save_pretrained(tmp_path / "saved")
        caps = folder_capabilities(tmp_path / "saved")
        steps = []
        for method in others:
            with pytest.raises(ValueError, match=f"'{method}'"):
                caps.check(method)
            with pytest.raises(ValueError, match=f"'{method}'"):
                case.call(pipe, case.conditions[:1], method=method,
                          callback_on_step_end=lambda *a: steps.append(1))
        assert not steps

    def test_loads_by_short_name(self, case):
        if case.alias is None or case.alias not in shipped_names():
            pytest.skip(f"no shipped {case.name} model in this installation")
        pipe_cls = type(case.build())
        loaded = pipe_cls.from_pretrained(case.alias)
        assert type(loaded) is pipe_cls
        assert loaded.capabilities == folder_capabilities(resolve_model(case.alias))
