"""A training script for the PyTorch what-if test (tests/torch_whatif): a stem, a stack of
identical MLP blocks (Linear, ReLU, Linear) and a head, trained with Adam on CPU for a few
steps. Run as is, it is the "unmodified script" that adprof records; --technique applies one of
the memory techniques the what-if predicts, the way a PyTorch user writes it:

  checkpoint    each block of model.layers checkpointed on its own, as adprof's fix prints
                it (its forward wrapped in torch.utils.checkpoint.checkpoint, non-reentrant)
  fused         the optimizer step fused into backward: one Adam per parameter, stepped and
                zero_grad(set_to_none=True) in a hook when the parameter's gradient is ready
                (register_post_accumulate_grad_hook on 2.1+, else a hook on the parameter's
                AccumulateGrad node), no optimizer.step() after backward
  set_to_none   optimizer.zero_grad(set_to_none=True) instead of zero_grad() (1.13's default
                zeroes the gradients in place and keeps them)
"""
import argparse
import functools

import torch
import torch.nn as nn
import torch.utils.checkpoint

parser = argparse.ArgumentParser()
parser.add_argument("--technique", choices=["none", "checkpoint", "fused", "set_to_none"],
                    default="none")
parser.add_argument("--blocks", type=int, default=9)
parser.add_argument("--width", type=int, default=256)
parser.add_argument("--batch", type=int, default=512)
parser.add_argument("--steps", type=int, default=3)
args = parser.parse_args()

torch.manual_seed(0)
torch.set_num_threads(1)  # the same allocations in every run (no per-thread scratch)


class Block(nn.Sequential):
    def __init__(self, d):
        super().__init__(nn.Linear(d, 4 * d), nn.ReLU(), nn.Linear(4 * d, d))


class Model(nn.Module):
    def __init__(self, d, n):
        super().__init__()
        self.stem = nn.Linear(d, d)
        self.layers = nn.Sequential(*[Block(d) for _ in range(n)])
        self.head = nn.Linear(d, 1)

    def forward(self, x):
        return self.head(self.layers(self.stem(x)))


model = Model(args.width, args.blocks)
if args.technique == "checkpoint":
    for block in model.layers:
        block.forward = functools.partial(torch.utils.checkpoint.checkpoint, block.forward,
                                          use_reentrant=False)
x = torch.randn(args.batch, args.width)
y = torch.randn(args.batch, 1)

if args.technique == "fused":
    optimizers = {p: torch.optim.Adam([p], lr=1e-3) for p in model.parameters()}

    def step_now(p):
        optimizers[p].step()
        optimizers[p].zero_grad(set_to_none=True)

    hooks = []  # the AccumulateGrad nodes must stay alive on 1.13
    for p in model.parameters():
        if hasattr(p, "register_post_accumulate_grad_hook"):
            p.register_post_accumulate_grad_hook(step_now)
        else:
            node = p.expand_as(p).grad_fn.next_functions[0][0]
            node.register_hook(lambda *_, p=p: step_now(p))
            hooks.append(node)
else:
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)

for step in range(args.steps):
    if args.technique == "set_to_none":
        optimizer.zero_grad(set_to_none=True)
    elif args.technique != "fused":
        optimizer.zero_grad()
    loss = ((model(x) - y) ** 2).mean()
    loss.backward()
    if args.technique != "fused":
        optimizer.step()
print("loss %.6f" % loss.item())
