"""Real snapshots for issue 20's allocation-level views, made on a CUDA machine:

    python3 gen_alloc_detail.py OUT_DIR      (run from a neutral folder, e.g. /home/ml/train)

1. `side_stream_frees.pickle`: a small training loop whose inputs are also read on a side stream
   (`record_stream`) that is kept busy with `torch.cuda._sleep`, so their frees are requested on
   one event and completed many events later (`free_requested` ... `free_completed`), and the
   snapshot is taken while some of them still wait: its blocks include `active_pending_free`.
2. `pinned_host.pickle`: the same loop feeding batches through pinned host buffers, recorded with
   `record_pinned_host_memory=True` where this torch has it, so the file carries `host_segments`
   and `host_traces` beside the device's.

Each writes a `.json` beside it with what the script knows (counts of actions, which keys the
file has), and summary.json lists both. Nothing is downloaded.
"""

from __future__ import annotations

import collections
import inspect
import json
import os
import pickle
import sys
import traceback

import torch

OUT = sys.argv[1] if len(sys.argv) > 1 else "alloc-detail-out"
MiB = 1 << 20


def model_and_optimizer():
    model = torch.nn.Sequential(
        torch.nn.Linear(1024, 2048), torch.nn.GELU(), torch.nn.Linear(2048, 1024)
    ).cuda()
    return model, torch.optim.AdamW(model.parameters(), lr=1e-3)


def describe(path: str) -> dict:
    with open(path, "rb") as f:
        snap = pickle.load(f)
    actions = collections.Counter(
        e["action"] for trace in snap.get("device_traces", []) for e in trace
    )
    states = collections.Counter(
        b["state"] for s in snap.get("segments", []) for b in s.get("blocks", [])
    )
    streams = sorted({s["stream"] for s in snap.get("segments", [])})
    info = {
        "keys": sorted(snap.keys()),
        "actions": dict(actions),
        "block_states": dict(states),
        "segment_streams": streams,
        "bytes": os.path.getsize(path),
    }
    if "host_segments" in snap:
        info["host_segments"] = len(snap["host_segments"])
        host_traces = snap.get("host_traces", [])
        info["host_trace_shape"] = type(host_traces).__name__
        flat = host_traces
        if flat and isinstance(flat[0], list):
            flat = [e for t in flat for e in t]
        info["host_actions"] = dict(collections.Counter(e.get("action") for e in flat))
        if snap["host_segments"]:
            seg = snap["host_segments"][0]
            info["host_segment_keys"] = sorted(seg.keys())
            if seg.get("blocks"):
                info["host_block_keys"] = sorted(seg["blocks"][0].keys())
        if flat:
            info["host_trace_keys"] = sorted(flat[0].keys())
    return info


def side_stream_frees(path: str) -> None:
    torch.cuda.memory._record_memory_history(max_entries=200_000)
    model, optimizer = model_and_optimizer()
    side = torch.cuda.Stream()
    checksums = []
    for _step in range(6):
        x = torch.randn(2048, 1024, device="cuda")
        target = torch.randn(2048, 1024, device="cuda")
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            # The side stream is busy for a while, then reads the batch: until it is done, the
            # batch's blocks cannot go back to the pool, whatever the main stream does.
            torch.cuda._sleep(50_000_000)
            checksums.append(x.float().sum())
        x.record_stream(side)
        loss = torch.nn.functional.mse_loss(model(x), target)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        del x, target, loss
    # The last batch: read on the side stream after a long sleep, freed at once, and the snapshot
    # is taken before the side stream is done, so its blocks are still pending.
    staged = [torch.randn(4 * MiB // 4, device="cuda") for _ in range(3)]
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        torch.cuda._sleep(2_000_000_000)
        for t in staged:
            checksums.append(t.sum())
    for t in staged:
        t.record_stream(side)
    del staged
    # One more allocation on the main stream so the allocator looks at its pending frees.
    keep = torch.empty(1 * MiB, dtype=torch.uint8, device="cuda")
    torch.cuda.memory._dump_snapshot(path)
    torch.cuda.memory._record_memory_history(enabled=None)
    torch.cuda.synchronize()
    del keep, checksums, model, optimizer
    torch.cuda.empty_cache()


def pinned_host(path: str) -> dict:
    record = torch.cuda.memory._record_memory_history
    params = inspect.signature(record).parameters
    notes = {"record_memory_history_params": list(params)}
    if "record_pinned_host_memory" not in params:
        notes["pinned"] = "this torch has no record_pinned_host_memory"
        return notes
    record(max_entries=200_000, record_pinned_host_memory=True)
    model, optimizer = model_and_optimizer()
    host_batches = [torch.randn(1024, 1024).pin_memory() for _ in range(4)]
    for step in range(6):
        host = host_batches[step % len(host_batches)]
        x = host.to("cuda", non_blocking=True)
        staging = torch.empty(512, 1024, pin_memory=True)
        staging.copy_(host[:512])
        loss = model(x).pow(2).mean()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        result = loss.detach().to("cpu", non_blocking=True)
        del x, staging
    torch.cuda.synchronize()
    del host_batches[0]
    torch.cuda.memory._dump_snapshot(path)
    record(enabled=None)
    del model, optimizer, result
    torch.cuda.empty_cache()
    return notes


def main() -> None:
    os.makedirs(OUT, exist_ok=True)
    summary: dict = {"torch": torch.__version__, "device": torch.cuda.get_device_name()}
    for name, make in [("side_stream_frees", side_stream_frees), ("pinned_host", pinned_host)]:
        path = os.path.join(OUT, f"{name}.pickle")
        try:
            notes = make(path) or {}
            if os.path.exists(path):
                notes.update(describe(path))
            summary[name] = notes
        except Exception:  # noqa: BLE001 - one set-up failing must not lose the other
            summary[name] = {"error": traceback.format_exc()}
        print(name, json.dumps(summary[name], indent=1), flush=True)
    with open(os.path.join(OUT, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)


if __name__ == "__main__":
    main()
