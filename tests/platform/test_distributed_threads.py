"""Every rendezvous and collective runs on the rank's own GPU, in whatever thread it runs.

A CUDA/HIP current device belongs to a thread, and a new thread starts on GPU 0. The collectives
run in a helper thread (so that SIGTERM is heard while a peer never comes): when that thread
forgot the rank's device, NCCL saw every rank of a node on GPU 0 and refused the job ("Duplicate
GPU"), on every torchrun launch of 2+ GPUs. CI has no GPU, so these tests give the device layer a
fake GPU runtime that keeps a current device per thread, as the real one does, and a fake
torch.distributed that records which device each call was made on.
"""
import re
import threading
from pathlib import Path

import pytest
import torch

from microbench.platform import devices
from microbench.platform import distributed

RANK_GPU = torch.device("cuda", 1)         # any GPU but 0, where a new thread starts
COLLECTIVES = ("init_process_group", "barrier", "all_gather_object", "gather_object",
               "broadcast_object_list", "all_reduce", "all_gather", "broadcast", "gather",
               "reduce_scatter", "all_to_all", "send", "recv")


class PerThreadGpu:
    """The GPU runtime's current device as CUDA and HIP keep it: one per thread, 0 in a new one."""

    def __init__(self):
        self._local = threading.local()

    def current_device_index(self) -> int:
        return getattr(self._local, "index", 0)

    def set_device_index(self, device) -> None:
        self._local.index = device.index if isinstance(device, torch.device) else int(device)


@pytest.fixture
def gpu(monkeypatch):
    runtime = PerThreadGpu()
    monkeypatch.setattr(devices, "_gpu_api", lambda: runtime)
    monkeypatch.setattr(devices, "_gpu_runtime_started", lambda: True)
    devices.activate(RANK_GPU)                    # what run_worker does for the rank
    return runtime


@pytest.fixture
def calls(monkeypatch, gpu):
    """torch.distributed's entry points replaced by recorders of (name, current GPU, kwargs)."""
    seen = []

    def recorder(name):
        def call(*args, **kwargs):
            seen.append((name, gpu.current_device_index(), kwargs))
            if name == "all_gather_object":
                args[0][:] = [args[1]] * len(args[0])
        return call

    for name in ("init_process_group", "barrier", "all_gather_object", "gather_object",
                 "broadcast_object_list"):
        monkeypatch.setattr(distributed.dist, name, recorder(name))
    monkeypatch.setattr(distributed.dist, "get_world_size", lambda: 2)
    monkeypatch.setattr(distributed.dist, "get_rank", lambda: 0)
    monkeypatch.setattr(distributed.dist, "get_backend", lambda: "nccl")
    return seen


LAUNCH = distributed.Launch(launcher="torchrun", rank=0, world_size=2, init_method="env://",
                            device_index=1)

ENTRY_POINTS = {
    "init_process_group": lambda: distributed.init_process_group(LAUNCH, RANK_GPU, 10.0),
    "init_trial_group": lambda: distributed.init_trial_group(LAUNCH, RANK_GPU, 10.0,
                                                             "tcp://127.0.0.1:1"),
    "agree": lambda: distributed.agree({"batch_size": 2}, None),
    "broadcast_from_main": lambda: distributed.broadcast_from_main([None], RANK_GPU),
    "gather_to_main": lambda: distributed.gather_to_main({"rank": 0}),
    "barrier": lambda: distributed.barrier(RANK_GPU),
}


@pytest.mark.parametrize("entry", sorted(ENTRY_POINTS))
def test_every_collective_runs_on_the_ranks_gpu(calls, entry):
    assert threading.current_thread() is threading.main_thread()   # so a helper thread is used
    ENTRY_POINTS[entry]()
    assert calls, "the entry point made no collective call"
    assert [(name, index) for name, index, _ in calls] == [(name, 1) for name, _, _ in calls]


def test_the_helper_thread_takes_the_callers_gpu(gpu):
    seen = distributed.interruptible(
        lambda: (threading.current_thread().name, gpu.current_device_index()))
    assert seen == ("microbench-collective", 1)
    assert gpu.current_device_index() == 1          # the caller's own device is left alone


@pytest.mark.parametrize("entry", ["init_process_group", "init_trial_group"])
def test_a_gpu_process_group_is_bound_to_the_ranks_gpu(calls, entry):
    ENTRY_POINTS[entry]()
    [(_, _, kwargs)] = calls
    assert kwargs["backend"] == "nccl" and kwargs["device_id"] == RANK_GPU


def test_a_coordinating_or_cpu_group_is_bound_to_no_device(calls):
    distributed.init_process_group(LAUNCH, RANK_GPU, 10.0, coordination_only=True)
    distributed.init_process_group(LAUNCH, torch.device("cpu"), 10.0)
    assert [(kwargs["backend"], "device_id" in kwargs) for _, _, kwargs in calls] == [
        ("gloo", False), ("gloo", False)]


def test_a_process_without_a_gpu_runtime_never_starts_one(monkeypatch):
    """A process that only coordinates its trial workers has not started the GPU runtime: the
    helper thread must not start it either (asking for a current device would)."""
    monkeypatch.setattr(devices, "_gpu_runtime_started", lambda: False)
    monkeypatch.setattr(devices, "_gpu_api", lambda: pytest.fail("GPU runtime touched"))
    assert distributed.interruptible(lambda: 7) == 7


def test_no_collective_is_called_outside_the_distributed_module():
    """The class, not the instance: every collective goes through platform/distributed.py, whose
    entry points are checked above (the single-rank FSDP group in steps/sharding.py binds its
    device where it forms)."""
    package = Path(distributed.__file__).resolve().parent.parent
    pattern = re.compile(r"\bdist\.(" + "|".join(COLLECTIVES) + r")\(")
    callers = {str(path.relative_to(package)) for path in package.rglob("*.py")
               if pattern.search(path.read_text())}
    assert callers <= {"platform/distributed.py", "steps/sharding.py"}, callers
    sharding = (package / "steps" / "sharding.py").read_text()
    assert "device_id" in sharding


def test_every_collective_in_the_distributed_module_runs_through_interruptible():
    source = Path(distributed.__file__).read_text()
    pattern = re.compile(r"^(?P<line>.*)\bdist\.(" + "|".join(COLLECTIVES) + r")\(", re.M)
    for match in pattern.finditer(source):
        assert "interruptible(" in match.group("line"), match.group(0)


# ------------------------------------------------------------------ the line a failure prints

NCCL_DUPLICATE = (
    "NCCL error in: /pytorch/torch/csrc/distributed/c10d/NCCLUtils.cpp:93, invalid usage (run "
    "with NCCL_DEBUG=WARN for details), NCCL version 2.28.9\nncclInvalidUsage: This usually "
    "reflects invalid usage of NCCL library.\nLast error:\nDuplicate GPU detected : rank 1 and "
    "rank 0 both on CUDA device 1b000")
NCCL_SYSTEM = ("NCCL error in: ProcessGroupNCCL.cpp:2046, unhandled system error (run with "
               "NCCL_DEBUG=INFO for details), NCCL version 2.28.9")


def _line(error, phase="rendezvous"):
    with pytest.raises(distributed.DistributedFailure) as failure:
        with distributed.failures_reported(LAUNCH, 600.0, phase):
            raise error
    return str(failure.value)


def test_a_duplicate_gpu_names_the_gpus_not_the_ports():
    line = _line(torch.distributed.DistBackendError(NCCL_DUPLICATE))
    assert line.startswith("rendezvous failed: NCCL says 'Duplicate GPU detected : rank 1 and "
                           "rank 0 both on CUDA device 1b000'")
    assert "same GPU" in line and "CUDA_VISIBLE_DEVICES" in line
    assert "port" not in line and "world size" not in line and "\n" not in line


def test_a_backend_reason_without_a_last_error_line_is_given_with_its_advice():
    line = _line(torch.distributed.DistBackendError(NCCL_SYSTEM), phase="run")
    assert line.startswith("lost the other ranks: NCCL says 'unhandled system error' "
                           "(DistBackendError)")
    assert "/dev/shm" in line and "port" not in line


def test_only_an_unreached_rendezvous_gets_the_address_advice():
    timeout = _line(torch.distributed.DistStoreError("Timed out after 601 seconds waiting for "
                                                     "clients. 1/2 clients joined."))
    assert "rendezvous address" in timeout and "port is reachable" in timeout
    closed = _line(RuntimeError("Connection closed by peer"))
    assert "port" not in closed and "another rank failed" in closed


# ------------------------------------------------------------------ leaving the process group

@pytest.fixture
def teardown(monkeypatch):
    """A formed NCCL group whose destroy and abort are recorded."""
    seen = []
    monkeypatch.setattr(distributed.dist, "is_initialized", lambda: True)
    monkeypatch.setattr(distributed.dist, "get_backend", lambda: "nccl")
    monkeypatch.setattr(distributed.dist, "destroy_process_group", lambda: seen.append("destroy"))
    monkeypatch.setattr(distributed.dist.distributed_c10d, "_abort_process_group",
                        lambda: seen.append("abort"), raising=False)
    return seen


def test_a_rank_that_succeeded_destroys_its_group(teardown):
    with distributed.leaving_group():
        pass
    assert teardown == ["destroy"]


@pytest.mark.parametrize("error", [KeyboardInterrupt(), RuntimeError("lost a peer")])
def test_a_rank_that_fails_aborts_its_group_instead_of_waiting_for_its_peers(teardown, error):
    """Destroying an NCCL communicator can wait for peers still inside the collective this rank
    left: on a GPU, SIGTERM to one rank then ended neither it nor the job."""
    with pytest.raises(type(error)):
        with distributed.leaving_group():
            raise error
    assert teardown == ["abort"]
