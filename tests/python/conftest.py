"""Real `snapview serve` processes for the package's tests (the binary the wheel installed)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import threading
from pathlib import Path
from typing import Iterator, List, Optional

import pytest

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures"


class Server:
    def __init__(self, process: subprocess.Popen, url: str) -> None:
        self.process = process
        self.url = url


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def start_server(data_dir: Path, extra: List[str]) -> Server:
    binary = shutil.which("snapview")
    assert binary, "the snapview binary is not on PATH: is the wheel installed in this environment?"
    # Port 0: the server binds a free port and names it on its "serving at" line.
    process = subprocess.Popen(
        [binary, "serve", "--addr", "127.0.0.1:0", "--data-dir", str(data_dir), *extra],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    found: List[Optional[str]] = []

    def wait_for_url() -> None:
        assert process.stdout is not None
        for line in iter(process.stdout.readline, b""):
            text = line.decode().strip()
            if text.startswith("snapview is serving at "):
                found.append(text.rsplit(" ", 1)[-1].rstrip("/"))
                break

    reader = threading.Thread(target=wait_for_url, daemon=True)
    reader.start()
    reader.join(timeout=60)
    if not found:
        process.kill()
        raise RuntimeError("snapview serve did not start within 60 s")
    return Server(process, found[0])


def stop(server: Server) -> None:
    server.process.terminate()
    try:
        server.process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        server.process.kill()


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    running = start_server(tmp_path / "store", [])
    yield running
    stop(running)


WRITE_TOKEN = "pytest-write-token-0123456789abcdef"


@pytest.fixture
def token_server(tmp_path: Path) -> Iterator[Server]:
    running = start_server(tmp_path / "store", ["--write-token", WRITE_TOKEN])
    yield running
    stop(running)


@pytest.fixture
def small_upload_server(tmp_path: Path) -> Iterator[Server]:
    running = start_server(tmp_path / "store", ["--max-upload", "10KiB"])
    yield running
    stop(running)


@pytest.fixture(autouse=True)
def no_ambient_snapview_env(monkeypatch: pytest.MonkeyPatch) -> None:
    # The developer's own SNAPVIEW_SERVER/SNAPVIEW_TOKEN must not leak into what a test sends.
    for name in ("SNAPVIEW_SERVER", "SNAPVIEW_TOKEN", "SNAPVIEW_BINARY"):
        monkeypatch.delenv(name, raising=False)


def python_snippet(code: str, env: Optional[dict] = None) -> subprocess.CompletedProcess:
    """Runs `code` in a fresh interpreter of this environment (a clean sys.modules)."""
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        timeout=120,
        check=False,
    )
