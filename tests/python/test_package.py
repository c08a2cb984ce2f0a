"""The installed package against a real `snapview serve`: the binary on PATH and through
`python -m`, upload round trips, summary equal to the CLI's, clear errors, show(), and record()
where torch is missing (record() on a GPU is tests/gpu/record_on_gpu.py)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import types
import urllib.request
from pathlib import Path

import pytest
import snapview
from conftest import FIXTURES, REPO, WRITE_TOKEN, free_port, python_snippet

SMALL = FIXTURES / "mlp_small.pickle"
OOM = FIXTURES / "oom.pickle"


def cargo_version() -> str:
    text = (REPO / "Cargo.toml").read_text()
    match = re.search(r'^version = "([^"]+)"', text, re.M)
    assert match
    return match.group(1)


def get_json(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=30) as response:
        return json.load(response)


def snapshot_id(url: str) -> str:
    return url.rstrip("/").rsplit("/", 1)[-1]


# --- the binary ---


def test_the_binary_is_installed_beside_this_python_and_on_path() -> None:
    scripts = sysconfig.get_path("scripts")
    assert snapview.binary_path() == os.path.join(scripts, "snapview")
    assert shutil.which("snapview") == os.path.join(scripts, "snapview")
    out = subprocess.run(["snapview", "--version"], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == f"snapview {cargo_version()}"


def test_the_installed_package_is_under_test_not_the_checkout() -> None:
    assert (
        Path(snapview.__file__)
        .resolve()
        .is_relative_to(Path(sysconfig.get_path("purelib")).resolve())
    )


def test_python_dash_m_runs_the_same_binary() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "snapview", "--version"], capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == f"snapview {cargo_version()}"
    # Its exit status and error are the binary's.
    bad = subprocess.run(
        [sys.executable, "-m", "snapview", "summary", str(REPO / "Cargo.toml")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert bad.returncode == 2
    assert "Cargo.toml" in bad.stderr


def test_the_package_version_is_cargo_toml_s() -> None:
    assert snapview.__version__ == cargo_version()


def test_import_loads_neither_torch_nor_ipython() -> None:
    done = python_snippet(
        "import sys, snapview; print(sorted(m for m in ('torch', 'IPython') if m in sys.modules))"
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_a_missing_binary_is_named_clearly(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("SNAPVIEW_BINARY", str(tmp_path / "nowhere"))
    with pytest.raises(snapview.SnapviewError, match="SNAPVIEW_BINARY=.*not an executable"):
        snapview.summary(SMALL)


# --- upload ---


def test_upload_round_trips_through_a_real_server(server) -> None:
    url = snapview.upload(SMALL, server=server.url, name="run 42", group="job7")
    assert url.startswith(server.url + "/s/")
    stored = get_json(f"{server.url}/api/snapshots/{snapshot_id(url)}")
    assert stored["name"] == "run 42" and stored["group"] == "job7"
    with urllib.request.urlopen(f"{server.url}/api/snapshots/{snapshot_id(url)}/raw") as raw:
        assert raw.read() == SMALL.read_bytes()
    with urllib.request.urlopen(url) as page:
        assert page.status == 200


def test_upload_takes_server_and_token_from_the_environment(
    token_server, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SNAPVIEW_SERVER", token_server.url)
    monkeypatch.setenv("SNAPVIEW_TOKEN", WRITE_TOKEN)
    url = snapview.upload(str(SMALL))
    assert url.startswith(token_server.url + "/s/")
    # The file name is the default display name.
    assert get_json(f"{token_server.url}/api/snapshots/{snapshot_id(url)}")["name"] == SMALL.stem


def test_upload_without_the_token_says_to_set_it(token_server) -> None:
    with pytest.raises(
        snapview.SnapviewError, match="the server needs a token: set SNAPVIEW_TOKEN"
    ):
        snapview.upload(SMALL, server=token_server.url)
    with pytest.raises(snapview.SnapviewError, match="refused the token") as error:
        snapview.upload(SMALL, server=token_server.url, token="wrong-token-0123456789abcdef")
    assert error.value.exit_status == snapview.EXIT_REFUSED
    # The right one, as an argument, goes through; nothing was stored by the refusals.
    assert snapview.upload(SMALL, server=token_server.url, token=WRITE_TOKEN)
    assert len(get_json(f"{token_server.url}/api/snapshots")["snapshots"]) == 1


def test_upload_to_a_server_that_is_down_says_so() -> None:
    down = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(
        snapview.SnapviewError, match=f"cannot reach the snapview server at {down}"
    ) as error:
        snapview.upload(SMALL, server=down)
    # Told apart by the binary's exit status, not by its words.
    assert error.value.exit_status == snapview.EXIT_UNREACHABLE


def test_upload_of_a_file_that_is_not_a_snapshot_gives_the_server_s_reason(
    server, tmp_path: Path
) -> None:
    not_a_snapshot = tmp_path / "notes.pickle"
    not_a_snapshot.write_text("these are my notes, not a memory snapshot\n")
    with pytest.raises(snapview.SnapviewError) as error:
        snapview.upload(not_a_snapshot, server=server.url)
    message = str(error.value)
    assert "pickle" in message.lower() or "snapshot" in message.lower(), message
    assert "Traceback" not in message and len(message) < 500
    assert get_json(f"{server.url}/api/snapshots")["snapshots"] == []


def test_upload_over_the_server_s_limit_is_refused_clearly(small_upload_server) -> None:
    assert SMALL.stat().st_size > 10 * 1024
    # Sent without a Content-Length, the refusal raced the body and was often lost in a broken
    # pipe; a few tries make that race show.
    for _ in range(5):
        with pytest.raises(snapview.SnapviewError) as error:
            snapview.upload(SMALL, server=small_upload_server.url)
        assert "larger than" in str(error.value) or "too large" in str(error.value), error.value


def test_upload_behind_a_redirect_that_drops_the_file_raises(server) -> None:
    """A 302 (an http -> https redirect, a proxy) would turn the upload into a GET that stores
    nothing: the binary exits non-zero naming the status and where it points, and the package
    raises that, instead of returning an empty URL as a success."""
    import http.server
    import threading

    class Redirect(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.send_response(302)
            self.send_header("Location", f"{server.url}{self.path}")
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    redirecting = http.server.HTTPServer(("127.0.0.1", 0), Redirect)
    thread = threading.Thread(target=redirecting.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{redirecting.server_address[1]}"
        with pytest.raises(snapview.SnapviewError, match="302") as error:
            snapview.upload(SMALL, server=url)
        assert server.url in str(error.value), error.value
    finally:
        redirecting.shutdown()
        redirecting.server_close()
    assert get_json(f"{server.url}/api/snapshots")["snapshots"] == []


def test_upload_of_a_missing_file() -> None:
    with pytest.raises(snapview.SnapviewError, match="no such file"):
        snapview.upload("/nonexistent/snapshot.pickle", server="http://127.0.0.1:9")


# --- summary ---


@pytest.mark.parametrize("fixture", ["mlp_small.pickle", "oom.pickle", "multi_device.pickle"])
def test_summary_is_the_cli_s_json(fixture: str) -> None:
    path = FIXTURES / fixture
    cli = subprocess.run(
        ["snapview", "summary", "--json", str(path)], capture_output=True, text=True, check=True
    )
    assert snapview.summary(path) == json.loads(cli.stdout)


def test_summary_answers_what_a_notebook_asks() -> None:
    oom = snapview.summary(OOM)
    device = oom["devices"][0]
    assert device["peak_allocated_bytes"] > 0
    assert len(device["oom_events"]) == 1
    assert device["oom_events"][0]["requested_bytes"] > 0


def test_summary_of_a_file_that_is_not_a_snapshot_is_a_clear_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.pickle"
    bad.write_bytes(b"\x80\x04not really")
    with pytest.raises(snapview.SnapviewError) as error:
        snapview.summary(bad)
    assert "bad.pickle" in str(error.value)
    assert not str(error.value).startswith("snapview:")


# --- show ---


def test_show_serves_a_file_from_one_local_server_and_passes_urls_through() -> None:
    from snapview import _show

    first = snapview.show(SMALL)
    second = snapview.show(OOM)
    # Without IPython, show returns the URL; both went to the same (reused) local server.
    assert isinstance(first, str) and isinstance(second, str)
    base = _show.local_server().url
    assert first.startswith(base + "/s/") and second.startswith(base + "/s/")
    for url in (first, second):
        with urllib.request.urlopen(url) as page:
            assert page.status == 200
    assert snapview.show("https://gpu-box:7878/s/abc") == "https://gpu-box:7878/s/abc"


def test_show_returns_an_iframe_in_a_notebook(monkeypatch: pytest.MonkeyPatch) -> None:
    # Stands in for IPython (not installed in CI); IFrame only records what it was given.
    class IFrame:
        def __init__(self, src: str, width: object, height: object) -> None:
            self.src, self.width, self.height = src, width, height

    ipython = types.ModuleType("IPython")
    display = types.ModuleType("IPython.display")
    display.IFrame = IFrame  # type: ignore[attr-defined]
    ipython.display = display  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "IPython", ipython)
    monkeypatch.setitem(sys.modules, "IPython.display", display)
    frame = snapview.show(SMALL, height=600)
    assert isinstance(frame, IFrame) and frame.height == 600
    with urllib.request.urlopen(frame.src) as page:
        assert page.status == 200


def test_the_local_server_stops_when_the_interpreter_exits() -> None:
    done = python_snippet(
        "import snapview, snapview._show as s\n"
        f"snapview.show(r'{SMALL}')\n"
        "print(s.local_server().process.pid)"
    )
    assert done.returncode == 0, done.stderr
    pid = int(done.stdout.strip())
    # The child was terminated and reaped by the atexit hook, so the pid no longer exists.
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


# --- record without torch (CI has none; the GPU test covers the rest) ---


def test_record_without_torch_says_what_is_missing() -> None:
    # torch set to None in sys.modules makes `import torch` fail as if it were not installed.
    done = python_snippet(
        "import sys; sys.modules['torch'] = None\n"
        "import snapview\n"
        "try:\n"
        "    with snapview.record('x.pickle'):\n"
        "        pass\n"
        "except snapview.SnapviewError as e:\n"
        "    print('ERR', e)\n"
        "@snapview.record()\n"
        "def step(): return 1\n"
        "try:\n"
        "    step()\n"
        "except snapview.SnapviewError as e:\n"
        "    print('ERR', e)\n"
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.strip().splitlines()
    assert len(lines) == 2, done.stdout
    for line in lines:
        assert line.startswith("ERR snapview.record needs PyTorch"), line
        assert "pip install torch" in line


def test_record_checks_its_arguments_before_torch() -> None:
    with pytest.raises(ValueError, match="stacks"):
        snapview.record(stacks="cpp")
    with pytest.raises(ValueError, match="max_entries"):
        snapview.record(max_entries=0)


def test_record_puts_the_rank_in_file_names() -> None:
    from snapview._record import _with_rank

    assert _with_rank("snapshot.pickle", None) == "snapshot.pickle"
    assert _with_rank("snapshot.pickle", 3) == "snapshot-rank3.pickle"
    assert _with_rank("out/step.pickle.gz", 0) == "out/step-rank0.pickle.gz"
    assert _with_rank("run_rank1.pickle", 1) == "run_rank1.pickle"
    assert _with_rank("dump", 2) == "dump-rank2"


def test_upload_with_role_rules_gives_the_snapshot_its_own(server, tmp_path) -> None:
    rules = tmp_path / "rules.toml"
    rules.write_text('[[rule]]\nframe = "."\nrole = "everything"\n')
    url = snapview.upload(SMALL, server=server.url, roles=rules)
    with urllib.request.urlopen(f"{server.url}/api/snapshots/{snapshot_id(url)}/rules") as answer:
        assert answer.read().decode() == rules.read_text()
    rules.write_text('[[rule]]\nframe = "(unclosed"\nrole = "x"\n')
    with pytest.raises(snapview.SnapviewError, match="rule 1") as error:
        snapview.upload(SMALL, server=server.url, roles=rules)
    assert error.value.exit_status == snapview.EXIT_REFUSED
    # The refused file changed nothing: the first rules are still the snapshot's.
    with urllib.request.urlopen(f"{server.url}/api/snapshots/{snapshot_id(url)}/rules") as answer:
        assert "everything" in answer.read().decode()
