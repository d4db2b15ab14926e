"""Exactness test script 2: token embedding, layer norm and an MLP head, trained with Adam
(tests/python/torch_test.cpp).

Activation-heavy on purpose (64 sequences of 128 tokens, width 128; 0.6 MB of weights): the
peak of the run is early in a backward pass, while the forward caches are alive and the first
gradients are in flight. The token ids are int32, widened to int64 for the embedding (a
duplicate, labelled ad.index_widened).
Usage: exact_embedding.py SIDE_FILE (the oracle's views, roles_oracle.py)."""
import sys

import torch

from roles_oracle import RolesOracle


class TokenModel(torch.nn.Module):
    def __init__(self, vocab=1000, width=128, classes=16):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, width)
        self.norm = torch.nn.LayerNorm(width)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(width, 2 * width), torch.nn.GELU(),
                                       torch.nn.Linear(2 * width, width))
        self.head = torch.nn.Linear(width, classes)

    def forward(self, tokens):
        h = self.mlp(self.norm(self.embed(tokens.long())))
        return self.head(h.mean(dim=1))


torch.manual_seed(0)
torch.set_num_threads(1)
model = TokenModel()
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
oracle = RolesOracle(model, optimizer, sys.argv[1])
with oracle:
    for step in range(3):
        tokens = torch.randint(0, 1000, (64, 128), dtype=torch.int32)
        target = torch.randint(0, 16, (64,))
        optimizer.zero_grad()
        oracle.forward_input(tokens)
        loss = torch.nn.functional.cross_entropy(model(tokens), target)
        oracle.begin_backward(loss)
        loss.backward()
        oracle.end_phase()
        oracle.begin_step()
        optimizer.step()
        oracle.end_phase()
        print(f"step {step} loss {loss.item():.4f}")
oracle.write()
