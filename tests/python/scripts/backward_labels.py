"""Gradients are labelled with the module whose forward made the autograd node computing them.

A parent module with a child; the parent's own op (exp) reaches the child by keyword. Prints,
for each op of backward that makes a storage, `op label` (label: the module path adprof was told,
`-` for none), then `sequence numbers: yes|no` (PyTorch 2.x numbers autograd nodes; 1.13 does
not, and there the walk that finds a module's nodes stops only at its positional inputs).
Run under `adprof run --torch`; exit status 1 when not instrumented."""
import sys

import torch

import adprof.torch as adprof_torch


class Child(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(16, 16)

    def forward(self, x, extra=None):
        return self.fc(x) * extra


class Parent(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.pre = torch.nn.Linear(16, 16)
        self.child = Child()

    def forward(self, x):
        b = self.pre(x).exp()  # the parent's own op
        return self.child(x, extra=b)


def main():
    ins = adprof_torch.instrumentation()
    if ins is None:
        print("backward_labels: not instrumented")
        return 1
    seen = []
    recorded = ins._outputs

    def outputs(info, phase, args, out, th):
        if phase == 2:  # backward
            seen.append((info[1], th.node_label))
        return recorded(info, phase, args, out, th)
    ins._outputs = outputs
    model = Parent()
    model(torch.randn(4, 16)).sum().backward()
    names = {ident: text for text, ident in ins.ctx._names.items()}
    for op, label in seen:
        print(op, names.get(label, "-"))
    print("sequence numbers:", "yes" if hasattr(torch._C._autograd, "_get_sequence_nr") else "no")
    return 0


if __name__ == "__main__":
    sys.exit(main())
