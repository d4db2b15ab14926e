"""A training script whose report gives every finding PyTorch describes a fix for, for
TorchAdvice.EveryPrintedFixRuns (torch_test.cpp): the test pastes each printed fix into a copy
of this script, as a user would, runs it and compares the peak with the prediction.

  zero_grad(set_to_none=False)   gradients zeroed in place and kept (policy.free_gradients)
  AdamW stepped after backward   every gradient alive at the step (policy.fused_optimizer)
  a stack of blocks              forward caches of each block (policy.checkpointing)
  int32 indices .long()          an int64 copy saved for backward (policy.no_index_widening)
  --leak                         each step's output kept (growth)
  lossf                          a loss module: the checkpointing code still names the model

Usage: advice_train.py [--leak] [--steps N]  (2 steps by default: the peak is in the second)
"""
import sys

import torch
import torch.nn as nn

torch.manual_seed(0)
torch.set_num_threads(1)  # the same allocations in every run


class Block(nn.Sequential):
    def __init__(self, d):
        super().__init__(nn.Linear(d, 2 * d), nn.ReLU(), nn.Linear(2 * d, d))


class Tagger(nn.Module):
    """Characters embedded, every 64 of them read as one token by a stack of blocks."""

    def __init__(self, vocab=256, chars=64, d=512, depth=4):
        super().__init__()
        self.chars = chars
        self.embed = nn.Embedding(vocab, d // chars)
        self.blocks = nn.Sequential(*[Block(d) for _ in range(depth)])
        self.head = nn.Linear(d, vocab)

    def forward(self, ids):
        x = self.embed(ids.long())  # (the int32 codes widened: an int64 copy kept for backward)
        return self.head(self.blocks(x.view(ids.shape[0], -1, x.shape[-1] * self.chars)))


model = Tagger()
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
lossf = nn.CrossEntropyLoss()  # a module called at the top level too: no model of its own
ids = torch.randint(0, 256, (8, 64 * 256), dtype=torch.int32)
targets = torch.randint(0, 256, (8 * 256,))
steps = int(sys.argv[sys.argv.index("--steps") + 1]) if "--steps" in sys.argv else 2
losses, kept = [], []
for step in range(steps):
    opt.zero_grad(set_to_none=False)
    out = model(ids)
    loss = lossf(out.view(-1, 256), targets)
    loss.backward()
    opt.step()
    losses.append(loss.item())
    if "--leak" in sys.argv:
        kept.append(out)
print("loss %.4f" % float(losses[-1]))
