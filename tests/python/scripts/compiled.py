"""A model trained through torch.compile (tests/python/torch_test.cpp,
TorchRecording.CompiledModelIsCompiledAndLabelledWithItsOwnPaths), then with its optimizer's
step compiled as well, then a whole training step compiled (zero_grad, forward, backward and
an SGD step in one compiled function). Prints each step's loss bit for bit: inductor's fused kernels compute
differently from eager ops, so a run that fell back to eager under adprof would print other
losses. Exits 3 where this PyTorch has no compile."""
import sys

import torch

if not hasattr(torch, "compile"):
    sys.exit(3)
torch.manual_seed(0)
torch.set_num_threads(1)


class Up(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.up = torch.nn.Linear(32, 128)
        self.down = torch.nn.Linear(128, 32)

    def forward(self, x):
        return self.down(torch.nn.functional.gelu(self.up(x)))


model = torch.nn.Sequential(Up(), Up())
cmodel = torch.compile(model)
optimizer = torch.optim.AdamW(model.parameters())
for step in range(3):
    optimizer.zero_grad(set_to_none=True)
    loss = cmodel(torch.randn(64, 32)).square().mean()
    loss.backward()
    optimizer.step()
    print(f"step {step} loss {loss.item().hex()}")

# The optimizer's step compiled too (PyTorch's recipe for a faster optimizer): adprof's step
# hooks then run inside a compiled function.
optimizer = torch.optim.Adam(model.parameters(), lr=0.01)


@torch.compile
def compiled_step():
    optimizer.step()


for step in range(3):
    optimizer.zero_grad(set_to_none=True)
    loss = cmodel(torch.randn(64, 32)).square().mean()
    loss.backward()
    compiled_step()
    print(f"compiled step {step} loss {loss.item().hex()}")
print("weights", sum(p.sum() for p in model.parameters()).item().hex())

# The whole training step compiled: dynamo compiles the optimizer step's frame while the step
# runs (its hooks are graph breaks).
optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)


@torch.compile
def train_step(x):
    optimizer.zero_grad(set_to_none=True)
    loss = model(x).square().mean()
    loss.backward()
    optimizer.step()
    return loss


for step in range(3):
    print(f"whole step {step} loss {train_step(torch.randn(64, 32)).item().hex()}")
print("weights", sum(p.sum() for p in model.parameters()).item().hex())
