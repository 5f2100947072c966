"""The CPUs near a GPU (the node check binds each process to its GPU's NUMA node): the
kernel's CPU list read from the GPU's PCI function, unknown where it cannot be read."""
from __future__ import annotations

import torch

from microbench.platform import devices


def test_cpu_lists_and_the_gpus_local_cpus(tmp_path, monkeypatch):
    assert devices.parse_cpu_list("0-3,8,10-11\n") == {0, 1, 2, 3, 8, 10, 11}
    (tmp_path / "0000:1b:00.0").mkdir()
    (tmp_path / "0000:1b:00.0" / "local_cpulist").write_text("0-1\n")
    identity = devices.GpuIdentity(0, None, "0000:1b:00")
    monkeypatch.setattr(devices, "gpu_identity", lambda device: identity)
    assert devices.local_cpus(torch.device("cuda", 0), str(tmp_path)) == {0, 1}
    assert devices.local_cpus(torch.device("cuda", 0), str(tmp_path / "none")) is None
