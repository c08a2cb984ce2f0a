"""`snapview.show`: a snapshot's page inline in a notebook.

A path is uploaded to a snapview server (a local `snapview serve --addr 127.0.0.1:0` started the
first time, on the free port the system gives it, which it prints; reused for the kernel's life
and stopped at exit) and its page shown in an IFrame.

A snapview server refuses to be framed unless `--frame-ancestors` says by whom, so the local
server allows the origins a notebook on this machine is served from: Jupyter on localhost or
127.0.0.1 at any port, and VS Code's notebook webviews. It listens on loopback only and holds
only the files this kernel uploaded. `SNAPVIEW_FRAME_ANCESTORS` in the kernel's environment
replaces that list (a notebook served under another name, say).
"""

from __future__ import annotations

import atexit
import os
import queue
import shutil
import subprocess
import tempfile
import threading
from typing import Any, Optional, Union

from snapview._binary import SnapviewError, binary_path

_SERVING = "snapview is serving at "

# Where a notebook on this machine is served from: any port of localhost or 127.0.0.1 (CSP
# allows `host:*`), and VS Code's webviews, which render notebook outputs.
LOCAL_FRAME_ANCESTORS = (
    "http://localhost:* http://127.0.0.1:* https://localhost:* https://127.0.0.1:* vscode-webview:"
)


class LocalServer:
    """A `snapview serve` child process on 127.0.0.1 with its own temporary data folder."""

    def __init__(self, process: subprocess.Popen, url: str, data_dir: str, log_path: str) -> None:
        self.process = process
        self.url = url
        self.data_dir = data_dir
        self.log_path = log_path

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        shutil.rmtree(self.data_dir, ignore_errors=True)


_server: Optional[LocalServer] = None
_server_lock = threading.Lock()


def _start_server(timeout: float = 60.0) -> LocalServer:
    binary = binary_path()
    data_dir = tempfile.mkdtemp(prefix="snapview-show-")
    log_path = os.path.join(data_dir, "serve.log")
    env = dict(os.environ)
    env.setdefault("SNAPVIEW_FRAME_ANCESTORS", LOCAL_FRAME_ANCESTORS)
    with open(log_path, "wb") as log:
        # Port 0: the system gives the server a free port as it binds, and the server's
        # "serving at" line names it, so no other process can take it in between.
        process = subprocess.Popen(
            [
                binary,
                "serve",
                "--addr",
                "127.0.0.1:0",
                "--data-dir",
                os.path.join(data_dir, "store"),
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=log,
            env=env,
        )
    lines: "queue.Queue[Optional[bytes]]" = queue.Queue()

    def pump(stream: Any = process.stdout) -> None:
        # Drains stdout for the server's whole life so it can never block on a full pipe.
        for line in iter(stream.readline, b""):
            lines.put(line)
        lines.put(None)

    threading.Thread(target=pump, daemon=True).start()
    try:
        while True:
            line = lines.get(timeout=timeout)
            if line is None:
                break
            text = line.decode("utf-8", "replace").strip()
            if text.startswith(_SERVING):
                return LocalServer(process, text[len(_SERVING) :].rstrip("/"), data_dir, log_path)
    except queue.Empty:
        pass
    process.kill()
    process.wait()
    with open(log_path, "rb") as log:
        error = log.read().decode("utf-8", "replace").strip()[-2000:]
    shutil.rmtree(data_dir, ignore_errors=True)
    raise SnapviewError(f"the local snapview server did not start: {error or 'no output'}")


def local_server() -> LocalServer:
    """The kernel's local `snapview serve`, started on first use and stopped at interpreter exit."""
    global _server
    with _server_lock:
        if _server is None or _server.process.poll() is not None:
            _server = _start_server()
            atexit.register(_server.stop)
        return _server


def show(
    path_or_url: Union[str, "os.PathLike[str]"],
    server: Optional[str] = None,
    width: Union[int, str] = "100%",
    height: int = 800,
    name: Optional[str] = None,
) -> Any:
    """Shows a snapshot's page inline: an `IPython.display.IFrame` when IPython is there (a
    notebook displays it), else the page's URL.

    A URL (http:// or https://) is shown as it is; a file is uploaded to `server` when given,
    else to a local `snapview serve` this function starts on a free port (once per kernel).
    """
    target = os.fspath(path_or_url)
    if target.startswith(("http://", "https://")):
        url = target
    else:
        from snapview import upload

        base = server if server is not None else local_server().url
        url = upload(target, server=base, name=name)
    try:
        from IPython.display import IFrame
    except ImportError:
        return url
    return IFrame(url, width=width, height=height)
