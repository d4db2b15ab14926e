"""A character-level language model, written as a PyTorch user writes one, nothing in it about
adprof: the GNU GPL's text (Debian's /usr/share/common-licenses/GPL-3) as int32 character
codes, windows of --seq characters served by a DataLoader, an embedding, a 2-layer LSTM and a
linear head, cross-entropy, AdamW. docs/PYTORCH.md ("A first hour") profiles it and applies
each finding's fix as adprof prints it.

Usage: lstm_charlm.py [--steps N] [--batch N] [--seq N] [--hidden N] [--text FILE]
"""
import argparse
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=6)
parser.add_argument("--batch", type=int, default=64)
parser.add_argument("--seq", type=int, default=256)
parser.add_argument("--hidden", type=int, default=512)
parser.add_argument("--text", default="/usr/share/common-licenses/GPL-3")
args = parser.parse_args()

torch.manual_seed(0)
try:
    with open(args.text, "rb") as f:
        codes = torch.tensor(list(f.read()), dtype=torch.int32)
except OSError as e:
    sys.exit(f"lstm_charlm: cannot read the text: {e}")


class Windows(Dataset):
    """Every window of seq + 1 characters: the input and, shifted by one, the targets."""

    def __init__(self, codes, seq):
        self.codes, self.seq = codes, seq

    def __len__(self):
        return len(self.codes) - self.seq - 1

    def __getitem__(self, i):
        return self.codes[i:i + self.seq + 1]


class CharLM(nn.Module):
    def __init__(self, vocab=256, width=128, hidden=512):
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.lstm = nn.LSTM(width, hidden, num_layers=2, batch_first=True)
        self.head = nn.Linear(hidden, vocab)

    def forward(self, x):
        out, _ = self.lstm(self.embed(x))
        return self.head(out)


net = CharLM(hidden=args.hidden)
optimizer = torch.optim.AdamW(net.parameters(), lr=2e-3)
loader = DataLoader(Windows(codes, args.seq), batch_size=args.batch, shuffle=True)
batches = iter(loader)
for step in range(args.steps):
    window = next(batches)
    x, y = window[:, :-1], window[:, 1:]
    optimizer.zero_grad()
    logits = net(x.long())
    loss = F.cross_entropy(logits.reshape(-1, 256), y.reshape(-1).long())
    loss.backward()
    optimizer.step()
    print(f"step {step} loss {loss.item():.3f}")
