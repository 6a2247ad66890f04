"""The training helpers every trainer shares (``arvis.training.common``)."""

from __future__ import annotations

import torch

from arvis.training.common import EMA, reseed_rows


def test_reseed_rows_replaces_rows_and_leaves_no_stale_state():
    """The VQ trainers restart dead codebook rows through ``reseed_rows``: the rows take the new values, their
    Adam moments restart from zero and their EMA copies follow; every other row keeps its state."""
    torch.manual_seed(0)
    codebook = torch.nn.Parameter(torch.randn(6, 3))
    other = torch.nn.Parameter(torch.randn(2))
    params = [other, codebook]
    opt = torch.optim.Adam(params, lr=0.1)
    ema = EMA(params, 0.9)
    for _ in range(2):
        opt.zero_grad()
        ((codebook ** 2).sum() + other.sum()).backward()
        opt.step()
        ema.update(params)
    before = {k: v.clone() for k, v in opt.state[codebook].items() if k in ("exp_avg", "exp_avg_sq")}
    weight_before, shadow_before = codebook.detach().clone(), ema.shadow[1].clone()
    rows, values = torch.tensor([1, 4]), torch.full((2, 3), 7.0)

    assert reseed_rows(codebook, rows, values, opt, ema, params) == 2
    keep = torch.tensor([0, 2, 3, 5])
    assert torch.equal(codebook.detach()[rows], values) and torch.equal(codebook.detach()[keep], weight_before[keep])
    assert torch.equal(ema.shadow[1][rows], values) and torch.equal(ema.shadow[1][keep], shadow_before[keep])
    for key, moment in before.items():
        assert (opt.state[codebook][key][rows] == 0).all() and torch.equal(opt.state[codebook][key][keep], moment[keep])
        assert (moment[rows] != 0).any()  # the zeroing did something
    # Without an EMA only the weights and the moments change.
    reseed_rows(codebook, torch.tensor([0]), torch.zeros(1, 3), opt)
    assert torch.equal(codebook.detach()[0], torch.zeros(3)) and not torch.equal(ema.shadow[1][0], torch.zeros(3))
