#!/usr/bin/env python3
"""A training script whose run is its start-up: import torch, a 2-layer MLP, three Adam steps
(torch.optim's first step imports torch._dynamo on 2.x). What `adprof run --torch` adds to a
process's start (docs/PERFORMANCE.md, "Start-up under --torch"):

  bench/paired.sh -n 5 'adprof run --torch --no-report -o /tmp/s.$$.adtrace -- PY bench/torch/startup.py; rm -f /tmp/s.*' \\
      'PY bench/torch/startup.py'
"""
import torch

model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
optimizer = torch.optim.Adam(model.parameters())
for _ in range(3):
    optimizer.zero_grad()
    model(torch.randn(32, 64)).sum().backward()
    optimizer.step()
