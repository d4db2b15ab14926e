"""Exactness test script 1: an MLP trained with Adam (tests/python/torch_test.cpp).

Parameter-heavy on purpose (1.6 MB of weights, a batch of 64): the peak of the run is in the
first optimizer step, where Adam creates its state while every gradient is alive.
Usage: exact_mlp.py SIDE_FILE (the oracle's views, roles_oracle.py)."""
import sys

import torch

from roles_oracle import RolesOracle

torch.manual_seed(0)
torch.set_num_threads(1)
model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(),
                            torch.nn.Linear(512, 512), torch.nn.ReLU(),
                            torch.nn.Linear(512, 10))
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
oracle = RolesOracle(model, optimizer, sys.argv[1])
with oracle:
    for step in range(3):
        x = torch.randn(64, 256)
        target = torch.randint(0, 10, (64,))
        optimizer.zero_grad()
        oracle.forward_input(x)
        loss = torch.nn.functional.cross_entropy(model(x), target)
        oracle.begin_backward(loss)
        loss.backward()
        oracle.end_phase()
        oracle.begin_step()
        optimizer.step()
        oracle.end_phase()
        print(f"step {step} loss {loss.item():.4f}")
oracle.write()
