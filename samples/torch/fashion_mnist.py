#!/usr/bin/env python3
"""Fashion-MNIST with a small CNN in PyTorch: a plain training script, as users write them.

Nothing in it knows about adprof. Profile it unmodified (docs/PYTORCH.md):

    adprof run --torch -- python3 samples/torch/fashion_mnist.py --steps 50
    adprof run -- python3 -m adprof.torch samples/torch/fashion_mnist.py --steps 50

Data: Debian's dataset-fashion-mnist (/usr/share/datasets/fashion-mnist, the IDX files read
with gzip and numpy; no torchvision). Model: four 3x3 conv blocks (16, 16, 32, 32 channels,
a 2x2 max-pool after the second and the fourth), then a 128-unit MLP head; Adam.

The memory techniques a PyTorch user reaches for, each a flag (docs/PYTORCH.md measures them):
  --checkpoint      activation checkpointing of the conv chain in sqrt(n) segments
                    (torch.utils.checkpoint, non-reentrant: the first segment's parameters get
                    gradients without the input requiring one)
  --set-to-none     optimizer.zero_grad(set_to_none=True): gradients freed, not zeroed
  --fused-step      the optimizer step fused into backward: one Adam per parameter, stepped as
                    soon as its gradient is accumulated, the gradient then dropped
                    (Tensor.register_post_accumulate_grad_hook on PyTorch >= 2.1, the
                    AccumulateGrad node's hook before)
Exit status: 0 trained, 1 unreadable data, 2 bad arguments.
"""
import argparse
import gzip
import math
import os
import statistics
import struct
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

DEFAULT_DATA = "/usr/share/datasets/fashion-mnist"
CLASSES = ("T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker",
           "Bag", "Ankle boot")


class DataError(Exception):
    pass


def read_idx(path, ndims, limit):
    """An IDX file of unsigned bytes (0 0 0x08 ndims, big-endian u32 dimensions, data)."""
    try:
        with gzip.open(path, "rb") as f:
            head = f.read(4 + 4 * ndims)
            if len(head) < 4 + 4 * ndims or head[:3] != b"\0\0\x08" or head[3] != ndims:
                raise DataError("%s: not an IDX file of unsigned bytes with %d dimensions"
                                % (path, ndims))
            dims = list(struct.unpack(">%dI" % ndims, head[4:]))
            dims[0] = min(dims[0], limit)
            count = int(np.prod(dims))
            data = f.read(count)
    except (OSError, EOFError) as e:
        raise DataError("%s: %s" % (path, e.strerror or e)) from None
    if len(data) != count:
        raise DataError("%s: truncated: %d of %d bytes" % (path, len(data), count))
    return np.frombuffer(data, dtype=np.uint8).reshape(dims)


def load(data_dir, split, limit):
    images = read_idx(os.path.join(data_dir, split + "-images-idx3-ubyte.gz"), 3, limit)
    labels = read_idx(os.path.join(data_dir, split + "-labels-idx1-ubyte.gz"), 1, limit)
    if len(images) != len(labels):
        raise DataError("%s: %d images but %d labels" % (data_dir, len(images), len(labels)))
    # Kept as bytes (a quarter of the floats); batches are converted as they are drawn.
    return torch.from_numpy(images.copy()), torch.from_numpy(labels.astype(np.int64))


def to_input(images):
    """A batch of uint8 images as the model's input: [0, 1], centred on the training set's mean
    and spread, one channel."""
    return ((images.float() / 255.0 - 0.286) / 0.353).unsqueeze(1)


def train_step(model, optimizer, x, y, set_to_none=False, fused_step=False):
    """One step: zero the gradients, forward, loss, backward, optimizer step (the fused
    optimizer steps inside backward instead). Returns the loss."""
    if not fused_step:
        optimizer.zero_grad(set_to_none=set_to_none)
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    if not fused_step:
        optimizer.step()
    return loss


def conv_block(cin, cout, pool):
    layers = [nn.Conv2d(cin, cout, 3, padding=1), nn.ReLU()]
    if pool:
        layers.append(nn.MaxPool2d(2))
    return nn.Sequential(*layers)


class FashionCNN(nn.Module):
    def __init__(self, channels=16, hidden=128, checkpointing=False):
        super().__init__()
        c = channels
        self.features = nn.Sequential(
            conv_block(1, c, pool=False),
            conv_block(c, c, pool=True),
            conv_block(c, 2 * c, pool=False),
            conv_block(2 * c, 2 * c, pool=True),
        )
        self.classifier = nn.Sequential(
            nn.Flatten(), nn.Linear(2 * c * 7 * 7, hidden), nn.ReLU(), nn.Linear(hidden, 10))
        self.checkpointing = checkpointing

    def forward(self, x):
        if self.checkpointing and self.training:
            x = self.checkpointed_features(x)
        else:
            x = self.features(x)
        return self.classifier(x)

    def checkpointed_features(self, x):
        # What torch.utils.checkpoint.checkpoint_sequential does (sqrt(n) segments, the last one
        # run normally), with non-reentrant checkpoints: 1.13's checkpoint_sequential is
        # reentrant and would leave the first segment's parameters without gradients.
        blocks = list(self.features)
        segments = max(1, round(math.sqrt(len(blocks))))
        size = len(blocks) // segments
        for start in range(0, size * (segments - 1), size):
            chunk = nn.Sequential(*blocks[start:start + size])
            x = checkpoint(chunk, x, use_reentrant=False)
        for block in blocks[size * (segments - 1):]:
            x = block(x)
        return x


def fuse_step_into_backward(model, lr):
    """One Adam per parameter, stepped when the parameter's gradient is complete; the gradient
    is then dropped, so no gradient waits for the end of backward."""
    optimizers = {p: torch.optim.Adam([p], lr=lr) for p in model.parameters()}

    def step(p):
        optimizers[p].step()
        optimizers[p].zero_grad(set_to_none=True)

    hooks = []
    for p in model.parameters():
        if hasattr(p, "register_post_accumulate_grad_hook"):  # PyTorch >= 2.1
            hooks.append(p.register_post_accumulate_grad_hook(step))
        else:  # the AccumulateGrad node, reached through a view of the leaf
            node = p.expand_as(p).grad_fn.next_functions[0][0]
            node.register_hook(lambda grad_inputs, grad_outputs, p=p: step(p))
            hooks.append(node)  # the node must stay alive for its hook to run
    return optimizers, hooks


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data-dir", default=DEFAULT_DATA)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--channels", type=int, default=16)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--train-images", type=int, default=12000)
    ap.add_argument("--test-images", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--log-every", type=int, default=50)
    ap.add_argument("--checkpoint", action="store_true")
    ap.add_argument("--set-to-none", action="store_true")
    ap.add_argument("--fused-step", action="store_true")
    ap.add_argument("-q", "--quiet", action="store_true", help="no per-step log")
    a = ap.parse_args(argv)
    for name in ("batch", "steps", "channels", "hidden", "train_images", "log_every"):
        if getattr(a, name) < 1:
            ap.error("--%s must be at least 1" % name.replace("_", "-"))
    if a.test_images < 0:
        ap.error("--test-images must not be negative")
    return a


def main(argv):
    a = parse_args(argv)
    torch.manual_seed(a.seed)
    try:
        x_train, y_train = load(a.data_dir, "train", a.train_images)
        x_test, y_test = load(a.data_dir, "t10k", a.test_images) if a.test_images else (None, None)
    except DataError as e:
        print("fashion_mnist: %s (Debian: apt install dataset-fashion-mnist, or --data-dir)" % e,
              file=sys.stderr)
        return 1

    model = FashionCNN(a.channels, a.hidden, checkpointing=a.checkpoint)
    if a.fused_step:
        optimizer, hooks = fuse_step_into_backward(model, a.lr)
    else:
        optimizer = torch.optim.Adam(model.parameters(), lr=a.lr)
    parameters = sum(p.numel() for p in model.parameters())
    print("fashion_mnist: %d parameters, batch %d, %d steps, %d training images, torch %s%s%s%s"
          % (parameters, a.batch, a.steps, len(x_train), torch.__version__,
             ", checkpointing" if a.checkpoint else "", ", set_to_none" if a.set_to_none else "",
             ", fused step" if a.fused_step else ""))

    model.train()
    generator = torch.Generator().manual_seed(a.seed)
    losses, step_times, step_cpu = [], [], []
    start = time.perf_counter()
    for step in range(a.steps):
        t0, c0 = time.perf_counter(), time.process_time()
        idx = torch.randint(0, len(x_train), (a.batch,), generator=generator)
        x, y = to_input(x_train[idx]), y_train[idx]
        loss = train_step(model, optimizer, x, y, a.set_to_none, a.fused_step)
        losses.append(loss.item())
        step_times.append(time.perf_counter() - t0)
        step_cpu.append(time.process_time() - c0)  # the whole process's CPU, every thread
        if not a.quiet and (step + 1) % a.log_every == 0:
            recent = losses[-a.log_every:]
            print("step %d loss %.4f (mean of last %d)" % (step + 1, sum(recent) / len(recent),
                                                           len(recent)))
    elapsed = time.perf_counter() - start
    # The first steps warm up (allocator, kernels): the median of the rest is a step's cost.
    warm = min(5, a.steps - 1)
    print("train: %d steps in %.2f s (%.1f steps/s), step median %.2f ms wall, %.2f ms CPU"
          % (a.steps, elapsed, a.steps / elapsed, 1e3 * statistics.median(step_times[warm:]),
             1e3 * statistics.median(step_cpu[warm:])))
    print("first loss %.4f, final loss %.4f (mean of the last %d)"
          % (losses[0], sum(losses[-50:]) / len(losses[-50:]), len(losses[-50:])))

    if x_test is not None:
        model.eval()
        correct = 0
        with torch.no_grad():
            for i in range(0, len(x_test), 500):
                scores = model(to_input(x_test[i:i + 500]))
                correct += (scores.argmax(1) == y_test[i:i + 500]).sum().item()
        print("test accuracy %.1f %% on %d test images (chance 10 %%)"
              % (100.0 * correct / len(x_test), len(x_test)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
