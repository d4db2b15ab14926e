"""Models that were not written here, trained as their users train them (tests/python/models_test.cpp).

Usage: model_zoo.py MODEL FEATURE [--steps N] [--oracle SIDE_FILE] [--figures FILE]
                    [--large] [--apply FILE]

MODEL    gpt2 (a decoder), bert (an encoder), vit (an image transformer): Hugging Face
         transformers models built from small configs (random weights, nothing downloaded);
         resnet: torchvision's resnet18.
FEATURE  plain                 AdamW (PyTorch's default implementation for the device)
         hf_checkpointing      model.gradient_checkpointing_enable() (transformers' own switch)
         checkpoint            torch.utils.checkpoint.checkpoint on each block, non-reentrant
         checkpoint_reentrant  the same, use_reentrant=True
         compile               torch.compile(model) (inductor)
         autocast_bf16         the forward under torch.autocast("cpu", dtype=torch.bfloat16)
         fused_adamw           AdamW(fused=True)
         foreach_adamw         AdamW(foreach=True)
         accumulation          gradient accumulation over 2 micro-batches a step

The program prints each step's loss (float.hex: bit-exact) and a checksum of the parameters
after training: the same with and without adprof, or adprof changed the program. --figures
writes PyTorch's own figures (parameter and optimizer-state bytes: unique storages).
--oracle (under adprof only) records PyTorch's account of every role before each op of the
backward pass and the step (tests/python/scripts/roles_oracle.py).
--large: wider and deeper models with a larger batch, whose activations outweigh the process's
start-up memory (the what-if checks). --apply FILE: runs the code in FILE right after the model
is built, as if pasted into the script there (the model is the global `model`): a fix adprof
printed."""
import argparse
import contextlib
import json
import os
import sys

import torch
import torch.utils.checkpoint

MODELS = ("gpt2", "bert", "vit", "resnet")
FEATURES = ("plain", "hf_checkpointing", "checkpoint", "checkpoint_reentrant", "compile",
            "autocast_bf16", "fused_adamw", "foreach_adamw", "accumulation")
BATCH, SEQ, VOCAB, IMAGE, WIDTH, DEPTH = 4, 32, 256, 32, 64, 2


def scale_up():
    global BATCH, SEQ, WIDTH, DEPTH, IMAGE
    BATCH, SEQ, WIDTH, DEPTH, IMAGE = 16, 128, 128, 4, 64


def repeated_blocks(model):
    """The model's stack of blocks: its largest ModuleList of modules of one class (found, not
    named: transformers renames its attributes between releases)."""
    best = []
    for m in model.modules():
        if isinstance(m, torch.nn.ModuleList) and len(m) > len(best) and \
                len({type(b) for b in m}) == 1:
            best = list(m)
    if not best:
        sys.exit(f"model_zoo: no stack of blocks in {type(model).__name__}")
    return best


def build(name):
    """(model, blocks, make_batch, loss_of): blocks is the ModuleList of the model's repeated
    blocks (what checkpointing wraps)."""
    if name == "resnet":
        import torchvision
        model = torchvision.models.resnet18(num_classes=10)
        blocks = [model.layer1, model.layer2, model.layer3, model.layer4]

        def make_batch(g):
            return (torch.randn(BATCH, 3, IMAGE, IMAGE, generator=g),
                    torch.randint(0, 10, (BATCH,), generator=g))

        def loss_of(m, batch):
            return torch.nn.functional.cross_entropy(m(batch[0]), batch[1])
        return model, blocks, make_batch, loss_of
    import transformers
    transformers.logging.set_verbosity_error()
    common = dict(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    if name == "gpt2":
        config = transformers.GPT2Config(n_layer=DEPTH, n_embd=WIDTH, n_head=4, vocab_size=VOCAB,
                                         n_positions=SEQ, resid_pdrop=0.0, embd_pdrop=0.0,
                                         attn_pdrop=0.0)
        model = transformers.GPT2LMHeadModel(config)
        blocks = repeated_blocks(model)

        def make_batch(g):
            ids = torch.randint(0, VOCAB, (BATCH, SEQ), generator=g)
            return (ids,)

        def loss_of(m, batch):
            return m(input_ids=batch[0], labels=batch[0]).loss
    elif name == "bert":
        config = transformers.BertConfig(vocab_size=VOCAB, hidden_size=WIDTH, num_hidden_layers=DEPTH,
                                         num_attention_heads=4, intermediate_size=2 * WIDTH,
                                         max_position_embeddings=SEQ, num_labels=3, **common)
        model = transformers.BertForSequenceClassification(config)
        blocks = repeated_blocks(model)

        def make_batch(g):
            return (torch.randint(0, VOCAB, (BATCH, SEQ), generator=g),
                    torch.randint(0, 3, (BATCH,), generator=g))

        def loss_of(m, batch):
            return m(input_ids=batch[0], labels=batch[1]).loss
    elif name == "vit":
        config = transformers.ViTConfig(image_size=IMAGE, patch_size=8, hidden_size=WIDTH,
                                        num_hidden_layers=DEPTH, num_attention_heads=4,
                                        intermediate_size=2 * WIDTH, num_labels=10, **common)
        model = transformers.ViTForImageClassification(config)
        blocks = repeated_blocks(model)

        def make_batch(g):
            return (torch.randn(BATCH, 3, IMAGE, IMAGE, generator=g),
                    torch.randint(0, 10, (BATCH,), generator=g))

        def loss_of(m, batch):
            return m(pixel_values=batch[0], labels=batch[1]).loss
    else:
        sys.exit(f"model_zoo: unknown model {name!r} (one of {', '.join(MODELS)})")
    return model, blocks, make_batch, loss_of


def checkpoint_blocks(blocks, reentrant):
    """torch.utils.checkpoint.checkpoint around each block's forward, as a user does by hand."""
    for block in blocks:
        forward = block.forward

        def checkpointed(*args, _forward=forward, **kwargs):
            # (the reentrant variant takes no keyword arguments: bound here)
            return torch.utils.checkpoint.checkpoint(
                lambda *a: _forward(*a, **kwargs), *args, use_reentrant=reentrant)
        block.forward = checkpointed


def unique_bytes(tensors):
    storages = {}
    for t in tensors:
        s = t.untyped_storage()
        storages[s.data_ptr()] = s.nbytes()
    return sum(storages.values())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model", choices=MODELS)
    ap.add_argument("feature", choices=FEATURES)
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--oracle")
    ap.add_argument("--figures")
    ap.add_argument("--large", action="store_true")
    ap.add_argument("--apply")
    a = ap.parse_args()
    if a.large:
        scale_up()

    global model
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model, blocks, make_batch, loss_of = build(a.model)
    model.train()
    if a.apply:
        with open(a.apply) as f:
            exec(compile(f.read(), a.apply, "exec"), globals())
    if a.feature == "hf_checkpointing":
        if not hasattr(model, "gradient_checkpointing_enable"):
            sys.exit(f"model_zoo: {a.model} has no gradient_checkpointing_enable")
        model.gradient_checkpointing_enable()
    elif a.feature in ("checkpoint", "checkpoint_reentrant"):
        checkpoint_blocks(blocks, a.feature == "checkpoint_reentrant")
    options = {"lr": 1e-3}
    if a.feature == "fused_adamw":
        options["fused"] = True
    elif a.feature == "foreach_adamw":
        options["foreach"] = True
    optimizer = torch.optim.AdamW(model.parameters(), **options)
    run = torch.compile(model) if a.feature == "compile" else model
    autocast = (lambda: torch.autocast("cpu", dtype=torch.bfloat16)) \
        if a.feature == "autocast_bf16" else contextlib.nullcontext
    micro = 2 if a.feature == "accumulation" else 1

    oracle = contextlib.nullcontext()
    if a.oracle:
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        from roles_oracle import RolesOracle
        oracle = RolesOracle(model, optimizer, a.oracle)
    tell = oracle if a.oracle else None

    g = torch.Generator().manual_seed(1)
    with oracle:
        for step in range(a.steps):
            optimizer.zero_grad(set_to_none=True)
            losses = []
            for _ in range(micro):
                batch = make_batch(g)
                if tell:
                    tell.forward_input(*batch)
                with autocast():
                    loss = loss_of(run, batch) / micro
                if tell:
                    tell.begin_backward(loss)
                loss.backward()
                if tell:
                    tell.end_phase()
                losses.append(loss.detach().float().item())
            if tell:
                tell.begin_step()
            optimizer.step()
            if tell:
                tell.end_phase()
            print(f"step {step} loss " + " ".join(float(v).hex() for v in losses))
    with torch.no_grad():
        # (each parameter summed in its own dtype: no copy, so the check cannot top the
        # training peak; a float64 sum would cast the largest parameter first)
        checksum = sum(float(p.sum()) for p in model.parameters())
    print(f"parameters {checksum.hex()}")
    if a.oracle:
        oracle.write()
    if a.figures:
        state = [v for s in optimizer.state.values() for v in s.values()
                 if isinstance(v, torch.Tensor)]
        with open(a.figures, "w") as f:
            json.dump({"parameter": unique_bytes(model.parameters()),
                       "optimizer_state": unique_bytes(state),
                       "torch": torch.__version__}, f)


if __name__ == "__main__":
    main()
