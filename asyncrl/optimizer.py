"""Adam as torch.optim.Adam computes it, without torch._dynamo.

torch.optim.Adam imports torch._dynamo the first time its methods run, and again through the wrapper of every step:
2-3 s of CPU (sympy, the compiler's tables) that a run's fork server had to import before any child could start,
for a compiler the learner never uses. This Adam keeps torch's state per parameter (step, exp_avg, exp_avg_sq) and
updates it with torch's own functional adam(), the function torch.optim.Adam.step calls: the same computation, bit
for bit (tests/test_components.py checks it). Its state_dict has torch.optim.Adam's layout, so checkpoints load
into either.
"""

from __future__ import annotations

import torch
from torch.optim.adam import adam

# the hyperparameters torch.optim.Adam's state_dict lists beside ours, at the values this Adam always has
FIXED_HYPERPARAMETERS = {"weight_decay": 0.0, "amsgrad": False, "maximize": False, "foreach": None, "capturable": False,
                         "differentiable": False, "fused": None, "decoupled_weight_decay": False}


class Adam:
    def __init__(self, params, lr: float, betas: tuple[float, float], eps: float):
        self.params = list(params)
        # one group, as torch's: the learner sets its "lr" before each batch
        self.param_groups = [{"params": self.params, "lr": lr, "betas": tuple(betas), "eps": eps}]
        self.state: dict[torch.Tensor, dict[str, torch.Tensor]] = {}  # per parameter, once it has had a gradient

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
            if p not in self.state:  # as torch.optim.Adam starts a parameter's state (without capturable or fused)
                self.state[p] = {"step": torch.tensor(0.0),
                                 "exp_avg": torch.zeros_like(p, memory_format=torch.preserve_format),
                                 "exp_avg_sq": torch.zeros_like(p, memory_format=torch.preserve_format)}
        states = [self.state[p] for p in params]
        beta1, beta2 = group["betas"]
        adam(params, [p.grad for p in params], [s["exp_avg"] for s in states], [s["exp_avg_sq"] for s in states], [],
             [s["step"] for s in states], amsgrad=False, beta1=beta1, beta2=beta2, lr=group["lr"], weight_decay=0.0,
             eps=group["eps"], maximize=False)

    def state_dict(self) -> dict:
        """torch.optim.Adam's layout: the state by parameter index, and the group's hyperparameters."""
        index = {p: i for i, p in enumerate(self.params)}
        group = {key: value for key, value in self.param_groups[0].items() if key != "params"}
        return {"state": {index[p]: dict(state) for p, state in self.state.items()},
                "param_groups": [{**group, **FIXED_HYPERPARAMETERS, "params": list(range(len(self.params)))}]}

    def load_state_dict(self, saved: dict) -> None:
        """The moments and steps of a state_dict (ours or torch.optim.Adam's, one group over these parameters).
        The hyperparameters stay this run's: the config's, not the checkpoint's."""
        indices = [i for group in saved["param_groups"] for i in group["params"]]
        if len(indices) != len(self.params):
            raise ValueError(f"the saved optimizer state is of {len(indices)} parameters, this model has "
                             f"{len(self.params)}")
        self.state = {}
        for p, i in zip(self.params, indices):
            if i in saved["state"]:
                state = saved["state"][i]
                self.state[p] = {"step": state["step"].detach().float().cpu().clone(),
                                 "exp_avg": state["exp_avg"].to(p.device, p.dtype, copy=True),
                                 "exp_avg_sq": state["exp_avg_sq"].to(p.device, p.dtype, copy=True)}
