"""The learner's Adam against torch's."""

import copy
import math

import pytest
import torch

from asyncrl.algo.optimizer import Adam, clip_gradient_norm


def test_adam_takes_torch_adams_steps_bit_for_bit_and_loads_either_ones_state():
    """asyncrl's Adam (no torch._dynamo) against torch.optim.Adam's fused kernel: the same weights after every
    step, where the learning rate changes and some steps give only the last layer gradients (so the
    parameters' steps differ); then each one's state_dict loads into the other, and the two go on in
    step."""
    torch.manual_seed(0)
    models = [torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))]
    models.append(copy.deepcopy(models[0]))
    hyperparameters = dict(lr=1e-2, betas=(0.9, 0.99), eps=1e-6)
    optimizers = [
        Adam(models[0].parameters(), **hyperparameters),
        torch.optim.Adam(models[1].parameters(), **hyperparameters, fused=True),
    ]

    def steps(first: int, last: int) -> None:
        for k in range(first, last):
            x = torch.randn(16, 4)
            for model, optimizer in zip(models, optimizers):
                optimizer.param_groups[0]["lr"] = 1e-2 / (1 + k)
                optimizer.zero_grad()
                out = model[2](x.repeat(1, 2)) if k % 3 == 1 else model(x)
                out.square().mean().backward()
                optimizer.step()
            assert all(
                torch.equal(a, b) for a, b in zip(models[0].parameters(), models[1].parameters())
            ), k

    steps(0, 8)
    # steps 1 and 4 left the first layer alone
    assert float(optimizers[0].state[models[0][0].weight]["step"]) == 5
    saved = [optimizer.state_dict() for optimizer in optimizers]
    optimizers = [
        Adam(models[0].parameters(), **hyperparameters),
        torch.optim.Adam(models[1].parameters(), **hyperparameters, fused=True),
    ]
    optimizers[0].load_state_dict(saved[1])
    optimizers[1].load_state_dict(saved[0])
    steps(8, 12)


@pytest.mark.parametrize("max_norm", [0.5, 100.0, math.inf])
def test_gradient_clipping_is_torchs_bit_for_bit(max_norm):
    """clip_gradient_norm against torch.nn.utils.clip_grad_norm_: the same norm, the same scaled
    gradients (a parameter without a gradient is left alone)."""
    torch.manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(shape)) for shape in ((8, 4), (8,), (3, 8), (3,))]
    for p in params[:3]:
        p.grad = torch.randn_like(p)
    copies = [torch.nn.Parameter(p.detach().clone()) for p in params]
    for p, copy_ in zip(params, copies):
        copy_.grad = None if p.grad is None else p.grad.clone()
    norm = clip_gradient_norm(params, max_norm)
    expected = torch.nn.utils.clip_grad_norm_(copies, max_norm)
    assert torch.equal(norm, expected)
    assert (norm > 0.5) and (norm < 100.0)
    for p, copy_ in zip(params, copies):
        assert (p.grad is None and copy_.grad is None) or torch.equal(p.grad, copy_.grad)
