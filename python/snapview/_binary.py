"""Finding and running the bundled `snapview` binary.

The wheel installs the binary into the environment's scripts folder (the `bin/` of a virtual
environment), which is not always on PATH (a notebook kernel started from an IDE, say), so that
folder is looked at first, then PATH.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from typing import List, Optional, Sequence

# The binary's exit statuses (README, "Exit status"): what kind of failure it was, so that no
# caller has to recognise the binary's English text.
EXIT_REGRESSION = 1
EXIT_REFUSED = 2
EXIT_UNREACHABLE = 3
EXIT_NOT_FOUND = 4


class SnapviewError(RuntimeError):
    """What went wrong, in words a person can act on (the binary's own message when it has one).

    `exit_status` is the binary's exit status when it failed (`EXIT_REFUSED`: a bad file or
    argument, or the server refused the request; `EXIT_UNREACHABLE`: the server could not be
    reached; `EXIT_NOT_FOUND`: it has no such snapshot), None when the binary did not run.
    """

    def __init__(self, message: str, exit_status: Optional[int] = None) -> None:
        super().__init__(message)
        self.exit_status = exit_status


_EXE = "snapview.exe" if os.name == "nt" else "snapview"


def binary_path() -> str:
    """The path of the `snapview` binary; SnapviewError when there is none."""
    override = os.environ.get("SNAPVIEW_BINARY")
    if override:
        if os.path.isfile(override) and os.access(override, os.X_OK):
            return override
        raise SnapviewError(f"SNAPVIEW_BINARY={override} is not an executable file")
    candidates: List[str] = []
    for scheme_dir in (sysconfig.get_path("scripts"), os.path.dirname(sys.executable)):
        if scheme_dir:
            candidates.append(os.path.join(scheme_dir, _EXE))
    user_scripts = _user_scripts_dir()
    if user_scripts:
        candidates.append(os.path.join(user_scripts, _EXE))
    for candidate in candidates:
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    on_path = shutil.which("snapview")
    if on_path:
        return on_path
    raise SnapviewError(
        "the snapview binary was not found next to this Python "
        f"({sysconfig.get_path('scripts')}) nor on PATH: install the package with "
        "`pip install snapview`, or set SNAPVIEW_BINARY to the binary's path"
    )


def _user_scripts_dir() -> Optional[str]:
    # `pip install --user` puts scripts in the user scheme's folder.
    try:
        scheme = "nt_user" if os.name == "nt" else "posix_user"
        return sysconfig.get_path("scripts", scheme)
    except KeyError:
        return None


def run_binary(
    args: Sequence[str], env: Optional[dict] = None, timeout: Optional[float] = None
) -> str:
    """Runs `snapview ARGS` and returns its standard output; on failure, SnapviewError with the
    binary's message."""
    command = [binary_path(), *args]
    try:
        done = subprocess.run(
            command,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired as error:
        raise SnapviewError(f"`snapview {' '.join(args)}` took longer than {timeout} s") from error
    if done.returncode != 0:
        message = _error_message(done.stderr.decode("utf-8", "replace"))
        raise SnapviewError(
            message or f"`snapview {args[0]}` failed with status {done.returncode}",
            exit_status=done.returncode,
        )
    return done.stdout.decode("utf-8", "replace")


def _error_message(stderr: str) -> str:
    # The binary prints "snapview: error: <message>" (after any warnings); the prefix adds
    # nothing in a Python traceback.
    prefix = "snapview: error: "
    errors = [line[len(prefix) :] for line in stderr.splitlines() if line.startswith(prefix)]
    return "\n".join(errors) if errors else stderr.strip()


def main() -> None:
    """`python -m snapview ARGS`: the same as running `snapview ARGS`."""
    try:
        binary = binary_path()
    except SnapviewError as error:
        sys.stderr.write(f"snapview: {error}\n")
        sys.exit(2)
    if os.name == "nt":
        sys.exit(subprocess.call([binary, *sys.argv[1:]]))
    # Replace this process so signals (Ctrl-C to `serve`) and the exit status are the binary's.
    os.execv(binary, [binary, *sys.argv[1:]])
