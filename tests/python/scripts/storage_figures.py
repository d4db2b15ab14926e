"""PyTorch's own account of tensors' bytes, for the test scripts that write figures to compare
with adprof's (job_ddp.py, cuda_job.py, cuda_gpt2.py): imported from beside them."""


def storage_bytes(tensors):
    """The bytes of the distinct storages under TENSORS (views of one storage counted once)."""
    seen, total = set(), 0
    for t in tensors:
        try:
            storage = t.untyped_storage()
        except AttributeError:  # 1.13
            storage = t.storage()
        key = storage.data_ptr()
        if key in seen:
            continue
        seen.add(key)
        total += storage.nbytes()
    return total
