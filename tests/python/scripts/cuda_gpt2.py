"""A Hugging Face GPT-2 trained as its users train it, for the GPU checks of issue 32
(cuda_model_test.cpp).

    cuda_gpt2.py FIGURES --device cpu|cuda [--size tiny|gpt2] [--steps 3] [--batch B] [--seq T]

Builds transformers' GPT2LMHeadModel from a GPT2Config (random weights: nothing is downloaded;
--size gpt2 is GPT-2 small's shape, 124M parameters; tiny a 2-layer one of 3.7M for a CPU, whose
training still outweighs the process's start-up memory), moves
it to --device and takes a few AdamW steps (PyTorch's default implementation for the device) on
random tokens. Writes PyTorch's own figures to FIGURES (JSON): the bytes of the unique storages
of the parameters and of the optimizer's state on the device, the parameters' bytes by
top-level module path (the labels adprof gives a parameter start with its module's path), and
on CUDA torch.cuda.max_memory_allocated() and max_memory_reserved(). Prints each step's loss.
Exit status: 0 trained, 3 no CUDA device for --device cuda.
"""

import argparse
import json
import sys

import torch

from storage_figures import storage_bytes

SIZES = {  # n_layer, n_head, n_embd, vocab, positions
    "tiny": (2, 4, 256, 8192, 256),
    "gpt2": (12, 12, 768, 50257, 1024),
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("figures")
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("--size", choices=tuple(SIZES), default="tiny")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=64)
    args = ap.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        print("cuda_gpt2: no CUDA device")
        return 3
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    layers, heads, embd, vocab, positions = SIZES[args.size]
    config = GPT2Config(n_layer=layers, n_head=heads, n_embd=embd, vocab_size=vocab,
                        n_positions=positions, bos_token_id=vocab - 1, eos_token_id=vocab - 1,
                        attn_pdrop=0.0, embd_pdrop=0.0, resid_pdrop=0.0)
    device = torch.device(args.device)
    model = GPT2LMHeadModel(config).to(device)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    for step in range(args.steps):
        tokens = torch.randint(0, vocab, (args.batch, args.seq), device=device)
        optimizer.zero_grad(set_to_none=True)
        loss = model(input_ids=tokens, labels=tokens).loss
        loss.backward()
        optimizer.step()
        print(f"step {step} loss {loss.item():.6f}")
    if device.type == "cuda":
        torch.cuda.synchronize()
    # Parameters by top-level module path ("transformer.h.0", "lm_head"): tied weights once,
    # under the first path that names them (model.named_parameters() does the same).
    by_module = {}
    for name, p in model.named_parameters():
        parts = name.split(".")
        module = ".".join(parts[:3] if parts[:2] == ["transformer", "h"] else parts[:2])
        by_module[module] = by_module.get(module, 0) + p.untyped_storage().nbytes()
    figures = {
        "size": args.size,
        "device": args.device,
        "parameters": sum(p.numel() for p in model.parameters()),
        "parameter": storage_bytes(model.parameters()),
        "optimizer_state": storage_bytes(v for s in optimizer.state.values() for v in s.values()
                                         if isinstance(v, torch.Tensor)
                                         and v.device.type == device.type),
        "parameter_by_module": by_module,
        "torch": torch.__version__,
    }
    if device.type == "cuda":
        figures["max_allocated"] = torch.cuda.max_memory_allocated()
        figures["max_reserved"] = torch.cuda.max_memory_reserved()
        figures["device_name"] = torch.cuda.get_device_name()
    with open(args.figures, "w") as f:
        json.dump(figures, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
