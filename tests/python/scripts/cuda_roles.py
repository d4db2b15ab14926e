"""A small MLP trained with Adam on CUDA, for the device-roles test (needs a GPU).

Writes PyTorch's own numbers to the side file given on the command line: the parameters' bytes,
the optimizer state's bytes after the last step, torch.cuda.max_memory_allocated() and
max_memory_reserved() (the caching allocator's segments at their most).
Exit status: 0 trained, 3 no CUDA device here.
Usage: cuda_roles.py SIDE_FILE"""
import json
import sys

import torch


def storage_bytes(t):
    s = t.untyped_storage() if hasattr(t, "untyped_storage") else t.storage()
    return s.nbytes()


def main():
    if not torch.cuda.is_available():
        print("cuda_roles: no CUDA device")
        return 3
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(1024, 2048), torch.nn.ReLU(),
                                torch.nn.Linear(2048, 2048), torch.nn.ReLU(),
                                torch.nn.Linear(2048, 10)).cuda()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x = torch.randn(512, 1024, device="cuda")
    y = torch.randint(0, 10, (512,), device="cuda")
    for _ in range(3):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    torch.cuda.synchronize()
    state = sum(storage_bytes(v) for s in opt.state.values() for v in s.values()
                if isinstance(v, torch.Tensor) and v.is_cuda)
    with open(sys.argv[1], "w") as f:
        json.dump({"parameter": sum(storage_bytes(p) for p in model.parameters()),
                   "optimizer_state": state,
                   "max_allocated": torch.cuda.max_memory_allocated(),
                   "max_reserved": torch.cuda.max_memory_reserved(),
                   "torch": torch.__version__}, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
