"""PJD (Parallel Jacobi Decoding): its row schedule, the row-causal mask, the exact limit (rows that wait for the
row above are SJD with windows ending at rows: lossless by the table-model harness), the lossy regime (the same
harness must reject it), ragged batches and per-sample generators, and the layouts it refuses."""

from __future__ import annotations

import pytest
import torch

from arvis.engine.sampling import SamplingConfig
from arvis.engine.schedules import row_lengths, row_windows
from arvis.methods import build_method, decode, method_info
from arvis.models.protocol import Condition
from tests.conftest import tiny_llamagen
from tests.lossless_harness import TableBackbone, batch_equals_single_runs, check, run_method

N_SAMPLES = 50_000
NO_CFG = SamplingConfig()
CFG = SamplingConfig(guidance_scale=3.0)


def _simulate(lengths, window, row_lag, known_ends, accept_all=True):
    """Run the planner alone, every query committing (the fastest possible progress)."""
    done = [1] + [0] * (len(lengths) - 1)
    settled = [False] * len(lengths)
    forwards = []
    while plan := row_windows(done, lengths, window, row_lag, known_ends, settled):
        forwards.append(plan)
        for seg in plan:
            if seg.decodes:
                if not seg.scratch and seg.row > 0 and done[seg.row] == 0:
                    settled[seg.row - 1] = True
                done[seg.row] += seg.queries
            else:
                settled[seg.row] = True
        assert len(forwards) < 1000
    return forwards, done


def test_row_schedule_keeps_the_staircase():
    lengths = row_lengths(64, 8)
    forwards, done = _simulate(lengths, window=3, row_lag=2, known_ends=False)
    assert done == lengths
    progress = [1] + [0] * 7
    for plan in forwards:
        for seg in plan:
            if seg.decodes:
                r = seg.row
                start = 8 * r
                # every index a row decodes trails the row above by at least row_lag
                last = seg.first_input + seg.queries - start  # the row's last decoded index after this forward
                assert r == 0 or progress[r - 1] == 8 or last <= progress[r - 1] - 2
                if seg.scratch:  # a row start on a proxy: the latest committed token two rows up
                    assert r >= 2 and seg.source == 8 * (r - 2) + progress[r - 2] - 1
        for seg in plan:
            if seg.decodes:
                progress[seg.row] += seg.queries
    assert not any(seg.scratch and seg.row == 1 for plan in forwards for seg in plan)  # row 1 waits for row 0
    # with a row lag of the row length, rows run one after the other: SJD with windows that stop at row ends
    sequential, _ = _simulate(lengths, window=3, row_lag=8, known_ends=False)
    assert all(len(plan) == 1 for plan in sequential)
    # known row ends (an end-of-line token): row 1 starts early, from the end-of-line slot
    early, _ = _simulate(row_lengths(20, 5), window=2, row_lag=2, known_ends=True)
    first = next(seg for plan in early for seg in plan if seg.row == 1)
    assert first.scratch and first.source == first.first_input == 4


@pytest.mark.parametrize("options, sampling", [({"row_lag": 3, "window": 2}, NO_CFG),
                                               ({"row_lag": 3, "window": 4, "coupling": "maximal"}, CFG),
                                               ({"row_lag": 5, "window": 1, "init": "repeat_horizontal"}, CFG)])
def test_rows_that_wait_for_the_row_above_are_lossless(options, sampling):
    table = TableBackbone(seed=0)
    observed = run_method(table, sampling, "pjd", N_SAMPLES, seed=50, **options)
    verdict = check(table.sequence_probabilities(1, sampling), observed, N_SAMPLES)
    assert verdict.passed, str(verdict)


def test_parallel_rows_are_lossy_and_the_harness_sees_it():
    """Row 1 starting after one token of row 0 decodes with a hole where row 0's tail will be (the table reads
    it as token 0): not the model's distribution, and the harness says so."""
    table = TableBackbone(seed=0, grid=(3, 3), vocab=2, allow_holes=True)
    observed = run_method(table, NO_CFG, "pjd", N_SAMPLES, seed=51, row_lag=1, window=2)
    verdict = check(table.sequence_probabilities(1, NO_CFG), observed, N_SAMPLES)
    assert not verdict.passed, str(verdict)


def test_row_causal_mask_reads_only_committed_tokens_of_other_rows(monkeypatch):
    """Before every forward, each cache slot a query may read outside its own row's window holds the committed
    token of its index (never another row's draft, never a stale rejected draft): checked on the table model,
    whose cache stores the token of each slot."""
    from arvis.engine.engine import DecodeEngine

    original = DecodeEngine._evaluate_tree
    checked = []

    def checking(self, inputs, input_index, pad, extent, scratch, ancestors):
        C, N = self.condition_length, self.num_tokens
        valid = self.slot_valid[:, C: C + N - 1]
        stored = self.cache.keys[0][:, 0, C: C + N - 1, 0].round().long()
        committed = self._rows(self.tokens.index_select(0, self.active))[:, : N - 1]
        assert bool((~valid | (stored == committed)).all()), "a readable slot holds a token that is not committed"
        checked.append(int(valid.sum()))
        return original(self, inputs, input_index, pad, extent, scratch, ancestors)

    monkeypatch.setattr(DecodeEngine, "_evaluate_tree", checking)
    table = TableBackbone(seed=0, grid=(4, 4), vocab=3, allow_holes=True)
    tokens, stats = decode(table, Condition(class_labels=torch.tensor([0, 1, 1])), CFG, "pjd",
                           torch.Generator().manual_seed(3), row_lag=1, window=2)
    assert ((tokens >= 0) & (tokens < 3)).all() and len(checked) == max(s.target_forwards for s in stats.samples) - 1
    assert max(checked) > 0


def test_the_mask_check_has_teeth(monkeypatch):
    """Without the invalidation of uncommitted inputs, rejected drafts stay readable: the check above fails."""
    from arvis.engine.engine import DecodeEngine

    monkeypatch.setattr(DecodeEngine, "invalidate", lambda self, index, mask: None)
    with pytest.raises(AssertionError, match="not committed"):
        test_row_causal_mask_reads_only_committed_tokens_of_other_rows(monkeypatch)


def test_greedy_equals_ar_when_rows_wait_and_differs_when_they_overlap():
    model = tiny_llamagen("c2i", grid=4, vocab=32)
    cond = Condition(class_labels=torch.tensor([0, 1, 2, 3]))
    sampling = SamplingConfig(top_k=1, guidance_scale=2.0)
    ar, _ = decode(model, cond, sampling, "ar", torch.Generator().manual_seed(0))
    same, stats = decode(model, cond, sampling, "pjd", torch.Generator().manual_seed(1), row_lag=4, window=3)
    assert torch.equal(ar, same)
    parallel, pstats = decode(model, cond, sampling, "pjd", torch.Generator().manual_seed(1), row_lag=1, window=3)
    assert not torch.equal(ar, parallel)
    for s in pstats.samples:  # every forward commits at least one token and the counts add up
        assert min(s.accepted_per_forward) >= 1 and sum(s.accepted_per_forward) == 16
    assert max(s.target_forwards for s in pstats.samples) < min(s.target_forwards for s in stats.samples)


def test_batch_of_per_sample_generators_equals_single_runs():
    batch_equals_single_runs(tiny_llamagen("c2i", grid=4, vocab=32), CFG, "pjd", [31, 32, 33], row_lag=1, window=2)


def test_declaration_and_refusals():
    info = method_info("pjd")
    assert not info.is_lossless() and [o.name for o in info.options] == ["window", "row_lag", "init", "coupling"]
    with pytest.raises(ValueError, match="coupling"):
        build_method("pjd", coupling="gumbel")
    with pytest.raises(ValueError, match="init"):
        build_method("pjd", init="neighbour_distribution")
