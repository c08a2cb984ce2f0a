"""snapview.record() for real on a CUDA machine (run by hand on a GPU box; CI has no GPU).

    pip install target/wheels/snapview-*.whl    # into the environment that has torch
    python3 tests/gpu/record_on_gpu.py OUT_DIR

(or, from a checkout without installing: PYTHONPATH=python SNAPVIEW_BINARY=target/release/snapview).
It passed on an H200 with torch 2.11.0+cu130, the wheel pip-installed into torch's environment.

It starts a local `snapview serve` (the one snapview.show uses), then:
1. a small training loop under `record(upload=server)`: the snapshot uploads and its page and
   API answer 200, and its summary shows the loop's memory;
2. the same as a decorator;
3. a forced out-of-memory error under `record(on_oom=True)` with RANK=3: the observer dumps a
   `-oom-rank3` snapshot with an `oom` event, uploaded into a group;
and writes results.json (and the OOM snapshot) to OUT_DIR. Exits non-zero on any failure.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import urllib.request

import snapview
import torch
from snapview._show import local_server


def get_status(url: str) -> int:
    with urllib.request.urlopen(url, timeout=30) as response:
        return response.status


def train_steps(steps: int = 20) -> float:
    model = torch.nn.Sequential(
        torch.nn.Linear(1024, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 10)
    ).cuda()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loss = torch.zeros(())
    for _ in range(steps):
        x = torch.randn(256, 1024, device="cuda")
        y = torch.randint(0, 10, (256,), device="cuda")
        loss = torch.nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    torch.cuda.synchronize()
    return float(loss)


OUT = sys.argv[1] if len(sys.argv) > 1 else "gpu-out"
results: dict = {}


def main() -> None:
    out = OUT
    os.makedirs(out, exist_ok=True)
    # The snapshots are written in a scratch folder beside OUT; only the OOM one is copied there.
    work = os.path.join(os.path.dirname(os.path.abspath(out)), "record-work")
    os.makedirs(work, exist_ok=True)
    results.update(
        {
            "torch": torch.__version__,
            "cuda": torch.version.cuda,
            "device": torch.cuda.get_device_name(0),
            "observer_doc": (torch._C._cuda_attach_out_of_memory_observer.__doc__ or "").strip(),
        }
    )
    server = local_server().url
    results["server"] = server

    # 1. A training loop under record(upload=...).
    with snapview.record(
        os.path.join(work, "train.pickle"), upload=server, name="gpu train"
    ) as rec:
        results["train_loss"] = train_steps()
    assert rec.url, "the training snapshot was not uploaded"
    snapshot_id = rec.url.rstrip("/").rsplit("/", 1)[-1]
    results["train_url"] = rec.url
    results["train_page_status"] = get_status(rec.url)
    results["train_api_status"] = get_status(f"{server}/api/snapshots/{snapshot_id}")
    train = snapview.summary(rec.path)
    results["train_peak_allocated_bytes"] = train["devices"][0]["peak_allocated_bytes"]
    results["train_trace_entries"] = train["devices"][0]["trace_entries"]
    assert results["train_api_status"] == 200 and results["train_page_status"] == 200
    assert results["train_peak_allocated_bytes"] > 16 << 20, results

    # 2. The same as a decorator.
    @snapview.record(os.path.join(work, "decorated.pickle"), on_oom=False)
    def decorated() -> float:
        return train_steps(3)

    decorated()
    decorated_summary = snapview.summary(os.path.join(work, "decorated.pickle"))
    results["decorated_trace_entries"] = decorated_summary["devices"][0]["trace_entries"]
    assert results["decorated_trace_entries"] > 0

    # 3. A forced OOM: more than the whole GPU, on "rank 3" of a job.
    os.environ["RANK"] = "3"
    total = torch.cuda.get_device_properties(0).total_memory
    caught = None
    with snapview.record(
        os.path.join(work, "job.pickle"), upload=server, name="job7", on_oom=True
    ) as oom_rec:
        keep = torch.empty(64 << 20, dtype=torch.uint8, device="cuda")  # something live at the OOM
        try:
            torch.empty(total * 2, dtype=torch.uint8, device="cuda")
        except torch.OutOfMemoryError as error:
            caught = type(error).__name__
        del keep
    del os.environ["RANK"]
    results["oom_caught"] = caught
    results["oom_paths"] = oom_rec.oom_paths
    results["oom_urls"] = oom_rec.oom_urls
    results["exit_path"] = oom_rec.path
    assert caught == "OutOfMemoryError", results
    assert len(oom_rec.oom_paths) == 1 and "-oom-rank3" in oom_rec.oom_paths[0], results
    assert oom_rec.path.endswith("job-rank3.pickle"), results
    oom_summary = snapview.summary(oom_rec.oom_paths[0])
    results["oom_events"] = [d["oom_events"] for d in oom_summary["devices"]]
    assert any(
        (len(events) if isinstance(events, list) else events) > 0
        for events in results["oom_events"]
    ), results
    assert oom_rec.oom_urls, "the OOM snapshot was not uploaded"
    with urllib.request.urlopen(f"{server}/api/snapshots", timeout=30) as response:
        listed = json.load(response)
    rows = listed if isinstance(listed, list) else listed.get("snapshots", listed)
    results["uploaded"] = [{k: row.get(k) for k in ("name", "group")} for row in rows]
    assert any(row.get("group") == "job7" for row in rows), results["uploaded"]
    shutil.copy(oom_rec.oom_paths[0], os.path.join(out, "oom-rank3.pickle"))

    results["ok"] = True
    print("1 passed, 0 failed")


if __name__ == "__main__":
    try:
        main()
    except BaseException:
        import traceback

        results["error"] = traceback.format_exc()
        traceback.print_exc()
        print("0 passed, 1 failed")
        sys.exit(1)
    finally:
        os.makedirs(OUT, exist_ok=True)
        with open(os.path.join(OUT, "results.json"), "w") as f:
            json.dump(results, f, indent=2, default=str)
        print(json.dumps(results, indent=2, default=str))
