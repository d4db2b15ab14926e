"""A one-rank gloo group that ends right after its last collectives (torch_job_test.cpp,
TorchJob.CollectivesLastWorkReleasedBeforeExit).

PyTorch 2.x copies the calling thread's state (at::ThreadLocalState) into each gloo work; the
backend's thread drops the work after it completes. A long switch interval keeps the main
thread running Python up to finalization, so the backend thread drops the last work after
finalization has begun: any Python object in that state (a dispatch mode, saved-tensor hooks)
must then be released without the GIL, and the process dies of std::terminate (SIGABRT).
Without a profiler the state holds none, and the script exits 0.
"""

import os
import sys
import tempfile

import torch
import torch.distributed as dist

store = os.path.join(tempfile.mkdtemp(), "store")
dist.init_process_group("gloo", init_method="file://" + store, rank=0, world_size=1)
sys.setswitchinterval(5)
x = torch.ones(1 << 16)
dist.all_reduce(x)
dist.barrier()
dist.destroy_process_group()
print("done", float(x[0]))
