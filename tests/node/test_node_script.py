"""benchmarks/node_check.sh (run by hand on GPUs) parses, and refuses bad arguments in one line
with exit 2 before it starts anything; the NUMA binding it relies on reads the kernel's list."""
from __future__ import annotations

import subprocess

import torch

from conftest import ROOT
from microbench.platform import device as device_layer

SCRIPT = ROOT / "benchmarks" / "node_check.sh"


def test_the_script_parses_and_refuses_bad_arguments(tmp_path):
    assert subprocess.run(["bash", "-n", str(SCRIPT)]).returncode == 0
    for args in ([], ["4"], ["x", str(tmp_path)], ["1", str(tmp_path)]):
        ran = subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True,
                             timeout=30)
        assert ran.returncode == 2 and len(ran.stderr.strip().splitlines()) == 1, ran.stderr
    assert not any(tmp_path.iterdir())


def test_cpu_lists_and_the_gpus_local_cpus(tmp_path, monkeypatch):
    assert device_layer.parse_cpu_list("0-3,8,10-11\n") == {0, 1, 2, 3, 8, 10, 11}
    (tmp_path / "0000:1b:00.0").mkdir()
    (tmp_path / "0000:1b:00.0" / "local_cpulist").write_text("0-1\n")
    identity = device_layer.GpuIdentity(0, None, "0000:1b:00")
    monkeypatch.setattr(device_layer, "gpu_identity", lambda device: identity)
    assert device_layer.local_cpus(torch.device("cuda", 0), str(tmp_path)) == {0, 1}
    assert device_layer.local_cpus(torch.device("cuda", 0), str(tmp_path / "none")) is None
