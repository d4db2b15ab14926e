"""Checkpointing and per-parameter optimizers (tests/python/torch_test.cpp, TorchRecording).

Two checkpointed segments: `seg1` non-reentrant (saved_tensors_hooks recompute it inside
backward), `seg2` reentrant (its Function's backward runs the modules again). Their forward,
run again inside backward, is forward work: phase forward, role activation, and what it saves
forward_cache. One SGD per parameter, stepped from the gradient hooks where PyTorch has them
(2.1+: the fused-step recipe) or one after another after backward: each training step is one
adprof step. The loss is scaled by a Python number (a "wrapped number" autograd saves).
Usage: checkpoint_steps.py [STEPS]"""
import sys

import torch
import torch.utils.checkpoint as checkpoint

torch.manual_seed(0)
torch.set_num_threads(1)


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.seg1 = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(),
                                        torch.nn.Linear(64, 64), torch.nn.ReLU())
        self.seg2 = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU())
        self.head = torch.nn.Linear(64, 4)

    def forward(self, x):
        x = checkpoint.checkpoint(self.seg1, x, use_reentrant=False)
        x = checkpoint.checkpoint(self.seg2, x, use_reentrant=True)
        return self.head(x)


model = Net()
optimizers = {p: torch.optim.SGD([p], lr=0.01) for p in model.parameters()}
fused = hasattr(torch.Tensor, "register_post_accumulate_grad_hook")
if fused:
    def step_now(p):
        optimizers[p].step()
        optimizers[p].zero_grad()
    for p in model.parameters():
        p.register_post_accumulate_grad_hook(step_now)
steps = int(sys.argv[1]) if len(sys.argv) > 1 else 3
for step in range(steps):
    loss = model(torch.randn(16, 32)).square().mean() * 0.5
    loss.backward()
    if not fused:
        for opt in optimizers.values():
            opt.step()
            opt.zero_grad()
    print(f"step {step} loss {loss.item():.4f}")
