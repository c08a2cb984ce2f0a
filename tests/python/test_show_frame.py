"""`snapview.show()`'s local server lets the notebook frame its pages; a plain `serve` does not."""

from __future__ import annotations

import urllib.request

import snapview
from conftest import FIXTURES, Server


def frame_headers(url: str) -> tuple:
    with urllib.request.urlopen(url) as page:
        assert page.status == 200
        return page.headers.get("Content-Security-Policy", ""), page.headers.get("X-Frame-Options")


def test_the_local_server_of_show_may_be_framed_by_a_notebook_on_this_machine() -> None:
    from snapview import _show

    # The server show() uploads to and frames (show itself returns an IFrame where IPython is).
    url = snapview.upload(str(FIXTURES / "oom.pickle"), server=_show.local_server().url)
    policy, x_frame_options = frame_headers(url)
    ancestors = next(d for d in policy.split("; ") if d.startswith("frame-ancestors "))
    for origin in ("http://localhost:*", "http://127.0.0.1:*", "vscode-webview:"):
        assert origin in ancestors.split(), policy
    # X-Frame-Options cannot name origins: with it, browsers would refuse the frame.
    assert x_frame_options is None


def test_a_plain_server_cannot_be_framed(server: Server) -> None:
    url = snapview.upload(str(FIXTURES / "oom.pickle"), server=server.url)
    policy, x_frame_options = frame_headers(url)
    assert "frame-ancestors 'none'" in policy
    assert x_frame_options == "DENY"
