"""`snapview.record`: PyTorch's CUDA memory history around a block or a function.

torch is imported when recording starts, never at module load, so `import snapview` works where
torch is not installed (CI, a laptop that only views snapshots).
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from typing import Any, List, Optional, Union

from snapview._binary import SnapviewError


def _torch() -> Any:
    try:
        import torch
    except ImportError as error:
        raise SnapviewError(
            "snapview.record needs PyTorch, which is not installed in this Python "
            f"({sys.executable}): `pip install torch` (snapview itself needs no torch to "
            "read, summarise, upload or show snapshots)"
        ) from error
    if not torch.cuda.is_available():
        raise SnapviewError(
            "snapview.record records the CUDA allocator, and torch sees no CUDA device here "
            f"(torch {torch.__version__}, torch.version.cuda={torch.version.cuda})"
        )
    return torch


def _rank(torch: Any) -> Optional[int]:
    """This process's rank: torch.distributed's when initialised, else $RANK (torchrun sets it)."""
    try:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            return int(dist.get_rank())
    except Exception:  # a broken distributed setup must not stop the recording
        pass
    rank = os.environ.get("RANK")
    return int(rank) if rank is not None and rank.strip().isdigit() else None


def _with_rank(path: str, rank: Optional[int]) -> str:
    """`path` with `-rank<R>` before its extension, unless the rank is already in the name."""
    if rank is None or f"rank{rank}" in os.path.basename(path):
        return path
    stem, dot, ext = path.partition(".pickle") if ".pickle" in path else (path, "", "")
    return f"{stem}-rank{rank}{dot}{ext}"


# torch can attach an OOM observer but never detach one, so snapview attaches one per process
# and points it at whichever recorders are active.
_observer_lock = threading.Lock()
_observer_attached = False
_active: List["record"] = []


def _on_out_of_memory(device: int, alloc: int, device_allocated: int, device_free: int) -> None:
    # Runs inside the allocator's OOM path, before torch raises OutOfMemoryError: the history
    # still holds the `oom` event and everything live at that moment.
    for recorder in list(_active):
        recorder._dump_at_oom(device, alloc, device_allocated, device_free)


def _attach_observer(torch: Any) -> None:
    global _observer_attached
    with _observer_lock:
        if not _observer_attached:
            torch._C._cuda_attach_out_of_memory_observer(_on_out_of_memory)
            _observer_attached = True


class record(contextlib.ContextDecorator):
    """Records PyTorch's CUDA memory history while the block (or decorated function) runs.

        with snapview.record("step.pickle", upload="http://gpu-box:7878"):
            train_a_few_steps()

    On exit the snapshot is dumped to `path` (default `snapshot-<time>[-rank<R>].pickle` in the
    working folder) and recording stops. `upload` (a server URL, or True for $SNAPVIEW_SERVER)
    uploads it and prints its URL. With `on_oom`, an out-of-memory error inside the block dumps
    (and uploads) the snapshot at that moment, per rank, to `<path>-oom[-rank<R>].pickle`; the
    exception then goes on as usual. After the block, `.path`, `.url`, `.oom_paths` and
    `.oom_urls` say what was written and where it went.
    """

    def __init__(
        self,
        path: Optional[Union[str, "os.PathLike[str]"]] = None,
        *,
        upload: Union[None, bool, str] = None,
        name: Optional[str] = None,
        group: Optional[str] = None,
        token: Optional[str] = None,
        max_entries: int = 100_000,
        stacks: str = "python",
        on_oom: bool = True,
    ) -> None:
        if stacks not in ("python", "all"):
            raise ValueError(f"stacks must be 'python' or 'all', not {stacks!r}")
        if max_entries <= 0:
            raise ValueError("max_entries must be positive")
        self.requested_path = os.fspath(path) if path is not None else None
        self.upload_to = upload
        self.name = name
        self.group = group
        self.token = token
        self.max_entries = max_entries
        self.stacks = stacks
        self.on_oom = on_oom
        self.path: Optional[str] = None
        self.url: Optional[str] = None
        self.oom_paths: List[str] = []
        self.oom_urls: List[str] = []
        self._torch: Any = None
        self._rank: Optional[int] = None

    # --- the context manager ---

    def __enter__(self) -> "record":
        torch = _torch()
        self._torch = torch
        self._rank = _rank(torch)
        stamp = time.strftime("%Y%m%d-%H%M%S")
        self.path = _with_rank(self.requested_path or f"snapshot-{stamp}.pickle", self._rank)
        self.url = None
        self.oom_paths, self.oom_urls = [], []
        torch.cuda.memory._record_memory_history(max_entries=self.max_entries, stacks=self.stacks)
        if self.on_oom:
            _attach_observer(torch)
            _active.append(self)
        return self

    def __exit__(self, exc_type: Any, exc: Any, traceback: Any) -> bool:
        torch = self._torch
        if self in _active:
            _active.remove(self)
        try:
            if self.path is not None:
                torch.cuda.memory._dump_snapshot(self.path)
        finally:
            torch.cuda.memory._record_memory_history(enabled=None)
        if self.path is not None and self.upload_to:
            self.url = self._upload(self.path, self._display_name(self.path))
        return False  # the block's own exception, if any, goes on

    # --- helpers ---

    def _display_name(self, path: str) -> str:
        base = self.name or os.path.basename(path)
        if self.name and self._rank is not None:
            base = f"{base} rank {self._rank}"
        return base

    def _upload_group(self) -> Optional[str]:
        if self.group is not None:
            return self.group
        # The ranks of one job land in one group (one row each on /g/<group>) when they share
        # a name, or torchrun's run id.
        if self._rank is not None:
            return self.name or os.environ.get("TORCHELASTIC_RUN_ID")
        return None

    def _upload(self, path: str, name: str) -> Optional[str]:
        from snapview import upload

        server = self.upload_to if isinstance(self.upload_to, str) else None
        try:
            url = upload(
                path, server=server, name=name, group=self._upload_group(), token=self.token
            )
        except SnapviewError as error:
            # The snapshot is safe on disk; a failed upload must not hide the training's own
            # outcome behind an exception from the exit of a `with`.
            print(
                f"snapview: the snapshot is at {path}, but its upload failed: {error}",
                file=sys.stderr,
            )
            return None
        print(f"snapview: memory snapshot: {url}", flush=True)
        return url

    def _dump_at_oom(
        self, device: int, alloc: int, device_allocated: int, device_free: int
    ) -> None:
        try:
            base = self.path or "snapshot.pickle"
            stem, dot, ext = base.partition(".pickle") if ".pickle" in base else (base, "", "")
            rank_part = f"-rank{self._rank}" if self._rank is not None else ""
            stem = stem.replace(rank_part, "") if rank_part else stem
            path = f"{stem}-oom{len(self.oom_paths) or ''}{rank_part}{dot}{ext}"
            self._torch.cuda.memory._dump_snapshot(path)
            self.oom_paths.append(path)
            print(
                f"snapview: out of memory on cuda:{device} asking for {alloc} bytes "
                f"({device_free} free): snapshot at {path}",
                file=sys.stderr,
                flush=True,
            )
            if self.upload_to:
                # Named apart from the exit snapshot, which the same block may upload too.
                name = self._display_name(path)
                url = self._upload(path, f"{name} (OOM)" if self.name else name)
                if url:
                    self.oom_urls.append(url)
        except Exception as error:  # an exception here would replace torch's own OOM error
            print(f"snapview: could not dump the snapshot at the OOM: {error}", file=sys.stderr)
