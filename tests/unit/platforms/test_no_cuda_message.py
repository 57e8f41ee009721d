"""`--device cuda` where torch sees no GPU stops with one line that says why and what to do (the CUDA image's
default device on a host or container without GPUs), never a traceback."""

from __future__ import annotations

import pytest
import torch

from server import cli
from wde.platforms import get_platform, no_cuda_message


def test_a_cpu_only_torch_says_to_install_the_cuda_build() -> None:
    message = no_cuda_message("2.13.0+cpu", None)
    assert "CPU-only build" in message and "--device cpu" in message


def test_a_cuda_torch_without_a_visible_gpu_names_docker_gpus_and_device_cpu() -> None:
    message = no_cuda_message("2.13.0", "13.0")
    assert "no CUDA device is visible" in message
    assert "docker run --gpus all" in message and "--device cpu" in message


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device is visible here")
def test_get_platform_raises_the_message() -> None:
    with pytest.raises(ValueError) as raised:
        get_platform("cuda")
    assert str(raised.value) == no_cuda_message(torch.__version__, torch.version.cuda)


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device is visible here")
def test_serve_exits_2_with_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["serve", "--device", "cuda"]) == 2
    err = capsys.readouterr().err
    expected = no_cuda_message(torch.__version__, torch.version.cuda)
    assert err.splitlines() == [f"wde serve: error: {expected}"]
