"""snapview: see where your GPU memory went.

The `snapview` binary (CLI and web app) comes with this package; this module is a small pure-Python
API around it for training scripts and notebooks:

- `upload(path)` sends a snapshot to a snapview server and returns its URL;
- `record(...)` records PyTorch's CUDA allocator history around a block (or a function), dumps the
  snapshot at its end and at an out-of-memory error, and uploads it when asked;
- `summary(path)` is the CLI's `summary --json` as a dict;
- `show(path_or_url)` displays the snapshot's page inline in a notebook.

Importing it imports neither torch nor IPython: `record` imports torch when it starts, `show`
IPython when it displays.
"""

from __future__ import annotations

import json
import os
from typing import Any, Dict, Optional, Union

from snapview._binary import (
    EXIT_NOT_FOUND,
    EXIT_REFUSED,
    EXIT_REGRESSION,
    EXIT_UNREACHABLE,
    SnapviewError,
    binary_path,
    run_binary,
)
from snapview._record import record
from snapview._show import show

__all__ = [
    "EXIT_NOT_FOUND",
    "EXIT_REFUSED",
    "EXIT_REGRESSION",
    "EXIT_UNREACHABLE",
    "SnapviewError",
    "binary_path",
    "record",
    "show",
    "summary",
    "upload",
    "__version__",
]


def _installed_version() -> str:
    try:
        from importlib.metadata import PackageNotFoundError, version
    except ImportError:  # Python 3.7 has no importlib.metadata
        return "unknown"
    try:
        return version("snapview")
    except PackageNotFoundError:
        return "unknown"


# The version is Cargo.toml's: maturin writes it into the wheel's metadata.
__version__ = _installed_version()

PathLike = Union[str, "os.PathLike[str]"]

DEFAULT_SERVER = "http://127.0.0.1:7878"


def upload(
    path: PathLike,
    server: Optional[str] = None,
    name: Optional[str] = None,
    group: Optional[str] = None,
    token: Optional[str] = None,
    roles: Optional[PathLike] = None,
) -> str:
    """Uploads the snapshot at `path` to a snapview server and returns its page's URL.

    `path` may also be `s3://bucket/key`, or an `https://` URL under one of the server's
    `--import-allow` prefixes: then the server fetches the snapshot itself, with its own
    credentials and the same limits as an upload (`snapview upload s3://...`), so a training job
    that wrote it to object storage hands over where it is instead of its bytes.

    `roles` names a role rules file (TOML or JSON, docs/roles.md) to give this snapshot in place
    of the server's; the binary sends it once the upload is stored (`upload --roles`).

    The file is streamed, never read into memory whole. `server` defaults to $SNAPVIEW_SERVER
    (else http://127.0.0.1:7878), `token` to $SNAPVIEW_TOKEN (sent as `Authorization: Bearer`).
    Raises SnapviewError with the server's own message when it refuses the file or the rules;
    its `exit_status` says which kind of failure it was (`EXIT_UNREACHABLE`, `EXIT_REFUSED`).
    """
    path = os.fspath(path)
    if not _is_remote(path) and not os.path.isfile(path):
        raise SnapviewError(f"cannot upload {path}: no such file")
    server = server or os.environ.get("SNAPVIEW_SERVER") or DEFAULT_SERVER
    args = ["upload", path, "--server", server]
    if name is not None:
        args += ["--name", name]
    if group is not None:
        args += ["--group", group]
    if roles is not None:
        args += ["--roles", os.fspath(roles)]
    # The token travels in the environment, not on the command line other users can read.
    env = dict(os.environ)
    if token is not None:
        env["SNAPVIEW_TOKEN"] = token
    out = run_binary(args, env=env)
    url = out.strip().splitlines()[-1].strip() if out.strip() else ""
    if not url:
        raise SnapviewError(f"the server at {server} accepted {path} but sent no URL")
    return url


def _is_remote(path: str) -> bool:
    """Whether `upload`'s path is a URL for the server to import (http:// too, so that the
    server's refusal says why) rather than a local file."""
    return path.lower().startswith(("s3://", "https://", "http://"))


def summary(path: PathLike) -> Dict[str, Any]:
    """The snapshot's summary, as `snapview summary --json` prints it: peaks per device, the
    stacks live at the peak, OOM events, findings. Raises SnapviewError for a file that is not
    a snapshot."""
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise SnapviewError(f"cannot summarise {path}: no such file")
    return json.loads(run_binary(["summary", "--json", path]))
