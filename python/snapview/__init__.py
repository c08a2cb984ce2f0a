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

from snapview._binary import SnapviewError, binary_path, run_binary
from snapview._record import record
from snapview._show import show

__all__ = ["SnapviewError", "binary_path", "record", "show", "summary", "upload", "__version__"]


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

    `roles` names a role rules file (TOML or JSON, docs/roles.md) to give this snapshot in place
    of the server's; it is sent after the upload (`PUT /api/snapshots/{id}/rules`).

    The file is streamed, never read into memory whole. `server` defaults to $SNAPVIEW_SERVER
    (else http://127.0.0.1:7878), `token` to $SNAPVIEW_TOKEN (sent as `Authorization: Bearer`).
    Raises SnapviewError with the server's own message when it refuses the file.
    """
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise SnapviewError(f"cannot upload {path}: no such file")
    server = server or os.environ.get("SNAPVIEW_SERVER") or DEFAULT_SERVER
    args = ["upload", path, "--server", server]
    if name is not None:
        args += ["--name", name]
    if group is not None:
        args += ["--group", group]
    # The token travels in the environment, not on the command line other users can read.
    env = dict(os.environ)
    if token is not None:
        env["SNAPVIEW_TOKEN"] = token
    try:
        out = run_binary(args, env=env)
    except SnapviewError as error:
        message = str(error)
        if message.startswith("cannot reach the server"):
            detail = message.split(":", 1)[1].strip() if ":" in message else message
            message = f"cannot reach the snapview server at {server}: {detail}"
        raise SnapviewError(message) from None
    url = out.strip().splitlines()[-1].strip() if out.strip() else ""
    if not url:
        raise SnapviewError(f"the server at {server} accepted {path} but sent no URL")
    if roles is not None:
        _put_rules(server, url.rstrip("/").rsplit("/", 1)[-1], os.fspath(roles), env)
    return url


def _put_rules(server: str, snapshot_id: str, rules_path: str, env: Dict[str, str]) -> None:
    """Gives the snapshot `snapshot_id` the rules file at `rules_path`.

    Raises SnapviewError with the server's message when it refuses the file.
    """
    import urllib.error
    import urllib.request

    with open(rules_path, "rb") as rules_file:
        body = rules_file.read()
    request = urllib.request.Request(
        f"{server.rstrip('/')}/api/snapshots/{snapshot_id}/rules", data=body, method="PUT"
    )
    if env.get("SNAPVIEW_TOKEN"):
        request.add_header("Authorization", f"Bearer {env['SNAPVIEW_TOKEN']}")
    try:
        urllib.request.urlopen(request, timeout=300).close()
    except urllib.error.HTTPError as error:
        detail = error.read().decode("utf-8", "replace")
        try:
            detail = json.loads(detail)["error"]["message"]
        except (ValueError, KeyError, TypeError):
            pass
        raise SnapviewError(f"the server refused the role rules {rules_path}: {detail}") from None
    except urllib.error.URLError as error:
        raise SnapviewError(
            f"cannot reach the snapview server at {server}: {error.reason}"
        ) from None


def summary(path: PathLike) -> Dict[str, Any]:
    """The snapshot's summary, as `snapview summary --json` prints it: peaks per device, the
    stacks live at the peak, OOM events, findings. Raises SnapviewError for a file that is not
    a snapshot."""
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise SnapviewError(f"cannot summarise {path}: no such file")
    return json.loads(run_binary(["summary", "--json", path]))
