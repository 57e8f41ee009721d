"""``TorchIndex``: the TORCH_INDEX_URL an image build uses. For Dockerfile.cpu, PyTorch's CPU index when it
answers; otherwise this machine's own pip (its mirrors and find-links, as `pip config list` shows them)
fetches the CPU wheel of the torch that constraints.txt pins, and a local HTTP server offers it as a
one-package index that the build (on the host's network) reads. For Dockerfile.cuda, PyPI itself: its Linux
x86-64 torch wheel is the CUDA build (``TorchIndex.pypi`` checks that it lists the pinned one)."""

from __future__ import annotations

import functools
import http.server
import re
import subprocess
import sys
import threading
import urllib.request
from pathlib import Path

DEFAULT_URL = "https://download.pytorch.org/whl/cpu"
PYPI_URL = "https://pypi.org/simple"


def reachable(url: str, timeout: float = 10.0) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as answer:
            return bool(answer.status == 200)
    except (OSError, ValueError):
        return False


def pinned_torch(constraints: Path) -> str:
    match = re.search(r"^torch==([^\s;#]+)", constraints.read_text(), re.MULTILINE)
    if match is None:
        raise ValueError(f"{constraints} pins no torch version (torch==X)")
    return match.group(1)


class TorchIndex:
    def __init__(self, url: str, server: http.server.ThreadingHTTPServer | None = None) -> None:
        self.url = url
        self._server = server

    @classmethod
    def open(cls, constraints: Path, folder: Path, python_version: str) -> tuple[TorchIndex, str]:
        """(the index, one line saying which); raises RuntimeError when no CPU wheel can be had."""
        if reachable(f"{DEFAULT_URL}/torch/"):
            return cls(DEFAULT_URL), f"{DEFAULT_URL} (the Dockerfile's default)"
        version = pinned_torch(constraints).split("+")[0] + "+cpu"
        wheels = folder / "torch"
        wheels.mkdir(parents=True, exist_ok=True)
        command = [
            *(sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:"),
            *("--python-version", python_version, "--platform", "manylinux_2_28_x86_64"),
            *("--dest", str(wheels), f"torch=={version}"),
        ]
        done = subprocess.run(command, capture_output=True, text=True)
        found = sorted(wheels.glob("torch-*.whl"))
        if done.returncode != 0 or not found:
            raise RuntimeError(
                f"{DEFAULT_URL} is unreachable and this machine's pip has no torch=={version} wheel for "
                f"Python {python_version}: {done.stderr.strip().splitlines()[-1:] or 'none found'}; pass "
                "TORCH_INDEX_URL=<a mirror of the PyTorch CPU index>"
            )
        links = "".join(f'<a href="{wheel.name}">{wheel.name}</a>\n' for wheel in found)
        (wheels / "index.html").write_text(f"<html><body>\n{links}</body></html>\n")
        handler = functools.partial(_QuietHandler, directory=str(folder))
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=server.serve_forever, name="torch-index", daemon=True).start()
        url = f"http://127.0.0.1:{server.server_address[1]}"
        return cls(url, server), (
            f"{DEFAULT_URL} is unreachable: {found[0].name} from this machine's pip configuration, served "
            f"at {url}"
        )

    @classmethod
    def pypi(cls, constraints: Path, python_version: str) -> tuple[TorchIndex, str]:
        """(PyPI, one line naming the CUDA wheel it lists); raises RuntimeError when it lists none."""
        version = pinned_torch(constraints)
        tag = "cp" + python_version.replace(".", "")
        wheel = f"torch-{version}-{tag}-{tag}-manylinux_2_28_x86_64.whl"
        try:
            with urllib.request.urlopen(f"{PYPI_URL}/torch/", timeout=30) as answer:
                listed = wheel in answer.read().decode(errors="replace")
        except OSError as e:
            raise RuntimeError(
                f"{PYPI_URL} is unreachable ({e}): the CUDA image's torch and its nvidia-* libraries come "
                "from PyPI; build where it answers, or give the Dockerfile a mirror (TORCH_INDEX_URL, "
                "PYPI_INDEX_URL)"
            ) from e
        if not listed:
            raise RuntimeError(f"{PYPI_URL}/torch/ lists no {wheel}: constraints.txt pins torch=={version}")
        return cls(PYPI_URL), f"{PYPI_URL} (the Dockerfile's default): {wheel}, PyPI's CUDA build"

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass
