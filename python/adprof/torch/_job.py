"""What this process is in a training job, said through the context API as engine-neutral
facts (profiler/include/adprof/job_facts.h; docs/PYTORCH.md, "Training jobs").

"job.process" {pid, parent pid} when the instrumentation starts; "job.rank" {rank, world size,
local rank, local world size, node, host, job} when the process knows its rank: from the
environment a launcher gives its ranks (torchrun: RANK, WORLD_SIZE, LOCAL_RANK,
LOCAL_WORLD_SIZE, GROUP_RANK), and again once it joins a process group
(torch.distributed.init_process_group, which a script started by torch.multiprocessing.spawn
calls with its rank). The analysis finds the launcher and the workers from the parents.
"""

import functools
import os
import sys

# job_facts.h
JOB_PROCESS = "job.process"
JOB_RANK = "job.rank"
JOB_UNKNOWN = (1 << 64) - 1


def _env_int(name):
    text = os.environ.get(name)
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def _value(number):
    return JOB_UNKNOWN if number is None or number < 0 else number


def _started_by_multiprocessing():
    """A child multiprocessing started (spawn, forkserver: a DataLoader's worker, a pool's
    process), while it unpickles its task or after."""
    if "--multiprocessing-fork" in sys.argv:
        return True
    process = sys.modules.get("multiprocessing.process")
    if process is None:
        return False
    current = process.current_process()
    parent = getattr(process, "parent_process", lambda: None)()
    return bool(getattr(current, "_inheriting", False)) or parent is not None


def say_rank(ctx, rank, world_size):
    """The "job.rank" fact; the local rank, the node and the host from the environment."""
    node = _env_int("GROUP_RANK")
    if node is None:
        node = _env_int("NODE_RANK")
    job = _job_identity()
    ctx.annotate(JOB_RANK, [_value(rank), _value(world_size), _value(_env_int("LOCAL_RANK")),
                            _value(_env_int("LOCAL_WORLD_SIZE")), _value(node),
                            ctx.name(os.uname().nodename),
                            ctx.name(job) if job else JOB_UNKNOWN])


def _job_identity():
    """What every rank of this job shares: the rendezvous' id (torchrun's, unless "none") and
    the address the ranks meet at (MASTER_ADDR:MASTER_PORT); "" when neither is known."""
    parts = []
    run_id = os.environ.get("TORCHELASTIC_RUN_ID")
    if run_id and run_id != "none":
        parts.append(run_id)
    addr, port = os.environ.get("MASTER_ADDR"), os.environ.get("MASTER_PORT")
    if addr and port:
        parts.append(f"{addr}:{port}")
    return "/".join(parts)


def announce(ins, torch):
    """Says what this process is (Instrumentation `ins` just installed), and follows
    init_process_group so that a rank the environment does not name is said when it is known."""
    ctx = ins.ctx
    ctx.annotate(JOB_PROCESS, [os.getpid(), os.getppid()])
    rank, world_size = _env_int("RANK"), _env_int("WORLD_SIZE")
    if _started_by_multiprocessing():
        rank = world_size = None  # a rank's worker inherits its RANK: not a rank itself
    if rank is not None and world_size is not None:
        say_rank(ctx, rank, world_size)
    dist = getattr(torch, "distributed", None)
    if dist is None or not dist.is_available() or not hasattr(dist, "init_process_group"):
        return
    original = dist.init_process_group

    @functools.wraps(original)
    def init_process_group(*args, **kwargs):
        result = original(*args, **kwargs)
        try:
            said = (dist.get_rank(), dist.get_world_size())
        except Exception:  # noqa: BLE001 (the program's call succeeded: that is what counts)
            return result
        if said != (rank, world_size):
            say_rank(ctx, *said)
        return result
    ins._patch(dist, "init_process_group", init_process_group)
