"""GPU-only checks; each skips cleanly on a machine without a GPU."""
import json

import pytest
import torch
from torch import nn

import fp16util
from conftest import TINY, requires_gpu

pytestmark = [requires_gpu, pytest.mark.gpu]


def test_gpu_run_uses_device_events_and_tracks_memory(cli):
    process, out_dir = cli("--network", "resnet18", "--device", "cuda", *TINY)
    assert process.returncode == 0, process.stderr
    doc = json.loads(next(out_dir.glob("*.json")).read_text())
    assert doc["timing"]["clock"] in ("CUDA events", "HIP events")
    assert doc["memory"]["peak_allocated_mb"] > 0
    runtime = "ROCm" if torch.version.hip else "CUDA"
    assert doc["env"]["gpu_runtime"] == runtime


def test_fp16_network_with_fp32_norms_runs_on_the_gpu():
    net = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.GroupNorm(2, 8), nn.Flatten(),
                        nn.LayerNorm(8 * 6 * 6), nn.Linear(8 * 6 * 6, 4)).cuda()
    fp16util.network_to_half(net)
    out = net(torch.randn(2, 3, 8, 8, device="cuda", dtype=torch.float16))
    out.float().sum().backward()
    assert out.dtype == torch.float16 and net[1].weight.grad.dtype == torch.float32
