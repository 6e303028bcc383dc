"""Adam as torch.optim.Adam computes it, without torch._dynamo.

torch.optim.Adam imports torch._dynamo the first time its methods run, and again through the wrapper of every step:
2-3 s of CPU (sympy, the compiler's tables) that a run's fork server had to import before any child could start,
for a compiler the learner never uses. This Adam keeps torch's state per parameter (step, exp_avg, exp_avg_sq) and
updates it with torch's own functional adam(), the function torch.optim.Adam.step calls, with its fused kernel: every
parameter in one op (two with the step count), where the per-parameter path dispatches a dozen ops per parameter and
the foreach path a dozen in all plus a host sync per parameter. The same computation as torch.optim.Adam(fused=True),
bit for bit (tests/algo/test_optimizer.py checks it). Its state_dict has torch.optim.Adam's layout, so checkpoints
load into either.
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.optim.adam import adam

from asyncrl.core.weights import flat_state, num_state_floats, state_tensors, unflatten

# the hyperparameters torch.optim.Adam's state_dict lists beside ours, at the values this Adam
# always has
FIXED_HYPERPARAMETERS = {
    "weight_decay": 0.0,
    "amsgrad": False,
    "maximize": False,
    "foreach": None,
    "capturable": False,
    "differentiable": False,
    "fused": None,
    "decoupled_weight_decay": False,
}


class Adam:
    def __init__(self, params, lr: float, betas: tuple[float, float], eps: float):
        self.params = list(params)
        # one group, as torch's: the learner sets its "lr" before each batch
        self.param_groups = [{"params": self.params, "lr": lr, "betas": tuple(betas), "eps": eps}]
        # per parameter, once it has had a gradient
        self.state: dict[torch.Tensor, dict[str, torch.Tensor]] = {}

    def zero_grad(self) -> None:
        """Drop the gradients (as torch's zero_grad(set_to_none=True))."""
        for p in self.params:
            p.grad = None

    @torch.no_grad()
    def step(self) -> None:
        """One Adam update of every parameter that has a gradient."""
        group = self.param_groups[0]
        params = [p for p in self.params if p.grad is not None]
        for p in params:
            # as torch.optim.Adam(fused=True) starts a parameter's state: the step on its device
            if p not in self.state:
                self.state[p] = {
                    "step": torch.tensor(0.0, device=p.device),
                    "exp_avg": torch.zeros_like(p, memory_format=torch.preserve_format),
                    "exp_avg_sq": torch.zeros_like(p, memory_format=torch.preserve_format),
                }
        states = [self.state[p] for p in params]
        beta1, beta2 = group["betas"]
        adam(
            params,
            [p.grad for p in params],
            [s["exp_avg"] for s in states],
            [s["exp_avg_sq"] for s in states],
            [],
            [s["step"] for s in states],
            amsgrad=False,
            beta1=beta1,
            beta2=beta2,
            lr=group["lr"],
            weight_decay=0.0,
            eps=group["eps"],
            maximize=False,
            fused=True,
        )

    def state_dict(self) -> dict:
        """torch.optim.Adam's layout: the state by parameter index, and the group's
        hyperparameters."""
        index = {p: i for i, p in enumerate(self.params)}
        group = {key: value for key, value in self.param_groups[0].items() if key != "params"}
        return {
            "state": {index[p]: dict(state) for p, state in self.state.items()},
            "param_groups": [
                {**group, **FIXED_HYPERPARAMETERS, "params": list(range(len(self.params)))}
            ],
        }

    def load_state_dict(self, saved: dict) -> None:
        """The moments and steps of a state_dict (ours or torch.optim.Adam's, one group over these
        parameters). The hyperparameters stay this run's: the config's, not the checkpoint's."""
        indices = [i for group in saved["param_groups"] for i in group["params"]]
        if len(indices) != len(self.params):
            raise ValueError(
                f"the saved optimizer state is of {len(indices)} parameters, this model has {len(self.params)}"
            )
        self.state = {}
        for p, i in zip(self.params, indices):
            if i in saved["state"]:
                state = saved["state"][i]
                self.state[p] = {
                    "step": state["step"].detach().to(p.device, torch.float32, copy=True),
                    "exp_avg": state["exp_avg"].to(p.device, p.dtype, copy=True),
                    "exp_avg_sq": state["exp_avg_sq"].to(p.device, p.dtype, copy=True),
                }


def clip_gradient_norm(params: list[torch.Tensor], max_norm: float) -> torch.Tensor:
    """The L2 norm of all the parameters' gradients together, and the gradients scaled by
    max_norm / (norm + 1e-6) where that is below 1: torch.nn.utils.clip_grad_norm_'s rule and ops,
    without its grouping of the tensors by device and dtype (a learner's are on one device, in
    float32), which took 0.2 ms a step."""
    grads = [p.grad for p in params if p.grad is not None]
    norm = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads)))
    if max_norm < math.inf:
        torch._foreach_mul_(grads, (max_norm / (norm + 1e-6)).clamp(max=1.0))
    return norm


def learner_state_floats(model: nn.Module) -> int:
    """Floats of a learner's state as pack_state writes it: weights and buffers, Adam's two moments,
    Adam's step."""
    return num_state_floats(model) + 2 * sum(p.numel() for p in model.parameters()) + 1


def pack_state(model: nn.Module, optimizer: Adam, out: torch.Tensor) -> None:
    """Write the model's state tensors and the Adam state of its parameters into the flat tensor
    `out` (a parameter Adam has not stepped yet counts as zero moments)."""
    params = list(model.parameters())
    moments = [optimizer.state.get(p, {}) for p in params]
    parts = [flat_state(model)]
    for key in ("exp_avg", "exp_avg_sq"):
        parts += [
            m[key].reshape(-1).float().cpu() if key in m else torch.zeros(p.numel())
            for p, m in zip(params, moments)
        ]
    step = max([float(m["step"]) for m in moments if "step" in m], default=0.0)
    out.copy_(torch.cat([*parts, torch.tensor([step])]))


def unpack_state(model: nn.Module, optimizer: Adam, flat: torch.Tensor) -> None:
    """The inverse of pack_state: load weights, buffers and Adam state from `flat`."""
    tensors = state_tensors(model)
    params = list(model.parameters())
    pieces = unflatten(flat[:-1], tensors + params + params)
    with torch.no_grad():
        for t, piece in zip(tensors, pieces):
            t.copy_(piece)
    exp_avg = pieces[len(tensors) : len(tensors) + len(params)]
    exp_avg_sq = pieces[len(tensors) + len(params) :]
    step = float(flat[-1])
    for p, avg, avg_sq in zip(params, exp_avg, exp_avg_sq):
        optimizer.state[p] = {
            "step": torch.tensor(step, device=p.device),
            "exp_avg": avg.to(p.device, p.dtype, copy=True),
            "exp_avg_sq": avg_sq.to(p.device, p.dtype, copy=True),
        }
