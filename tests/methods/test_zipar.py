"""ZipAR: schedule arithmetic, reduction to AR, and masks that never read unwritten slots."""

from __future__ import annotations

import pytest
import torch

from arvis.engine import engine as engine_module
from arvis.engine.sampling import SamplingConfig
from arvis.engine.schedules import zipar_forward_count, zipar_schedule
from arvis.methods import decode
from arvis.models.protocol import Condition
from tests.conftest import tiny_llamagen


@pytest.mark.parametrize("height, width, window, expected", [
    (16, 16, 4, 88), (16, 16, 8, 144), (24, 24, 8, 224), (16, 16, 2, 60), (8, 8, 3, 34), (16, 16, 16, 256),
    (16, 16, 30, 256), (1, 5, 2, 5),
])
def test_schedule_forward_count_matches_formula(height, width, window, expected):
    schedule = zipar_schedule(height, width, window)
    assert len(schedule) + 1 == expected == zipar_forward_count(height, width, window)
    decoded = [q.predicts for f in schedule for q in f.queries if q.predicts is not None]
    assert sorted(decoded) == list(range(1, height * width))  # every token exactly once


def test_sources_are_decoded_before_they_are_fed():
    schedule = zipar_schedule(8, 8, 2)
    known = {0}
    for forward in schedule:
        for q in forward.queries:
            assert q.source_index in known
        known |= {q.predicts for q in forward.queries if q.predicts is not None}


def test_method_forward_count_on_a_16x16_model():
    model = tiny_llamagen("c2i", grid=16, vocab=32)
    _, stats = decode(model, Condition(class_labels=torch.tensor([0, 1])), SamplingConfig(guidance_scale=2.0),
                      "zipar", torch.Generator().manual_seed(0), row_lag=4)
    assert [s.target_forwards for s in stats.samples] == [88, 88]
    assert all(s.tokens == 256 for s in stats.samples)


@pytest.mark.parametrize("sampling", [SamplingConfig(top_k=1, guidance_scale=2.0), SamplingConfig(guidance_scale=2.0)])
def test_window_at_least_width_is_plain_ar(sampling):
    model = tiny_llamagen("c2i", grid=8, vocab=32)
    cond = Condition(class_labels=torch.tensor([0, 2, 4]))
    gens = lambda: [torch.Generator().manual_seed(s) for s in (1, 2, 3)]  # noqa: E731
    ar, _ = decode(model, cond, sampling, "ar", gens())
    for row_lag in (8, 12):
        zipar, stats = decode(model, cond, sampling, "zipar", gens(), row_lag=row_lag)
        assert torch.equal(ar, zipar)
        assert stats.summary()["target_forwards"] == 64


class WriteTrackingBackbone(torch.nn.Module):
    """Wraps a backbone; fails if any query may attend to a slot no forward has written yet."""

    def __init__(self, inner):
        super().__init__()
        self.inner = inner
        self.written = None

    def __getattr__(self, name):
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(self.inner, name)

    def prefill(self, condition, cache):
        logits, valid = self.inner.prefill(condition, cache)
        self.written = torch.zeros(cache.rows, cache.slots, dtype=torch.bool)
        self.written[:, : valid.shape[1]] = True
        return logits, valid

    def forward_tokens(self, tokens, slots, cache, attend_mask):
        now = self.written.clone().scatter_(1, slots, True)
        allowed = now[:, None, :] & (torch.arange(cache.slots) <= slots[..., None])
        if bool((attend_mask & ~allowed[..., : attend_mask.shape[-1]]).any()):  # masks may be narrow
            raise AssertionError("a query attends to a slot that was never written")
        self.written = now
        return self.inner.forward_tokens(tokens, slots, cache, attend_mask)


def test_zipar_never_attends_to_unwritten_slots():
    model = WriteTrackingBackbone(tiny_llamagen("c2i", grid=8, vocab=32))
    tokens, _ = decode(model, Condition(class_labels=torch.tensor([1, 3])), SamplingConfig(guidance_scale=2.0),
                       "zipar", torch.Generator().manual_seed(0), row_lag=2)
    assert ((tokens >= 0) & (tokens < 32)).all()


def test_mask_check_has_teeth(monkeypatch):
    """With a causal-only mask (the reference's zero-K/V holes) the same check fails."""
    original = engine_module.DecodeEngine.evaluate

    def causal_only(self, inputs, input_index, pad=None, extent=None):
        self.slot_valid[:] = True  # pretend every slot were written
        return original(self, inputs, input_index, pad, extent)

    monkeypatch.setattr(engine_module.DecodeEngine, "evaluate", causal_only)
    model = WriteTrackingBackbone(tiny_llamagen("c2i", grid=8, vocab=32))
    with pytest.raises(AssertionError, match="never written"):
        decode(model, Condition(class_labels=torch.tensor([1])), SamplingConfig(), "zipar",
               torch.Generator().manual_seed(0), row_lag=2)


def test_bad_row_lag_raises():
    with pytest.raises(ValueError, match="row_lag"):
        decode(tiny_llamagen("c2i"), Condition(class_labels=torch.tensor([0])), SamplingConfig(), "zipar", None,
               row_lag=0)
    with pytest.raises(ValueError, match="'window' is now called 'row_lag'"):  # `window` means a verified window
        decode(tiny_llamagen("c2i"), Condition(class_labels=torch.tensor([0])), SamplingConfig(), "zipar", None,
               window=4)


def test_video_grid_decodes_as_rows_across_frames():
    """On a (T, H, W) video the staircase runs over T·H rows of W: AR exactly at row_lag >= W, the 2-D
    schedule's forward count otherwise, and no query ever reads a slot that was not written."""
    from tests.pipelines.video.test_video import gens, tiny_video

    model = tiny_video(frames=3, side=4, vocab=16)
    assert model.layout.grid == (3, 4, 4)
    cond = Condition(class_labels=torch.tensor([0, 2]))
    sampling = SamplingConfig(guidance_scale=2.0)
    ar, _ = decode(model, cond, sampling, "ar", gens(1, 2))
    same, stats = decode(model, cond, sampling, "zipar", gens(1, 2), row_lag=4)
    assert torch.equal(ar, same) and stats.summary()["target_forwards"] == 48
    tokens, stats = decode(WriteTrackingBackbone(model), cond, sampling, "zipar", gens(1, 2), row_lag=1)
    assert ((tokens >= 0) & (tokens < 16)).all()
    assert stats.summary()["target_forwards"] == zipar_forward_count(12, 4, 1) < 48
