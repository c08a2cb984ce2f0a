"""Real labelled snapshots of the set-ups teams train with (issue 19; pinned host memory: issue 20).

usage: python3 gen_setups.py OUTDIR [NAME,NAME,...] [--jobs N] [--deadline SECONDS]
       python3 gen_setups.py --list

Needs torch with CUDA and nothing else (bitsandbytes only for `s_8bit_step`, which is skipped
without it); it downloads nothing: every model is built by hand. `tests/gpu/run_setups.sh` is the
whole device run (a neutral folder, every set-up, one archive).

Each set-up is a function `s_<name>` below. It runs in a subprocess of its own (one CUDA context,
one fresh allocator, its own time limit) that records memory history from its first line
(`enabled="all", context="all", stacks="python"`), runs a few small steps and, at one stated
moment, writes OUTDIR/NAME.pickle with `torch.cuda.memory._dump_snapshot` and beside it
OUTDIR/NAME.truth.json: the storages alive then whose role the script knows from its live objects.

    {"moment", "device", "storages": [{"addr", "nbytes", "role"}], ...}

`addr` is the storage's `data_ptr()` (untyped storage: a view and its base are one storage), which
is the start of an `active_allocated` block of the snapshot; entries that are not (none expected)
are moved to `unmatched` instead. A storage seen in several roles takes the first of ROLE_ORDER:

    parameter, buffer, gradient, optimizer_state, comm_buffer, kv_cache, input, output, activation

so a `.grad` that is a view into a DDP bucket is a gradient, a parameter autograd saved is a
parameter, a saved tensor the program also keeps in a list is an output. Roles:

- parameter, buffer: `module.parameters()` / `buffers()`; for FSDP2 the local shard of each
  sharded DTensor parameter (`to_local()`).
- gradient: `.grad` (FSDP2: the local shard of the sharded DTensor grad).
- optimizer_state: every tensor in `optimizer.state` (DTensors: their local tensors).
- comm_buffer: DDP buckets that hold copies of the gradients (`gradient_as_bucket_view=False`),
  seen through a comm hook that notes `bucket.buffer()` and then all-reduces as DDP does; with
  `gradient_as_bucket_view=True` the buckets are the gradients' own storage and are labelled
  gradient. FSDP2: the all-gather outputs (the unsharded parameters) and the reduce-scatter
  input, where FSDP's state still holds them.
- kv_cache: the key/value cache tensors of a generate loop.
- input: the batch (token ids, targets, images).
- output: tensors the program keeps on purpose: logits appended to a list, a summed loss, the
  generated ids.
- activation: tensors autograd saved for backward, from `saved_tensors_hooks` (the pack hook
  saves a detached alias and keeps a weakref to it; weakrefs are kept for every step of a set-up
  that keeps graphs alive), or, under torch.compile (whose compiled region should not be traced
  with Python pack hooks), from walking the autograd graph from the loss.

Storages the script cannot attribute (temporaries, library workspaces, the caching allocator's own
blocks) are left out: the scorer scores labelled storages only. Besides the format above, a truth
file may carry `setup`, `torch`, `role_order`, `bytes_by_role`, `unmatched` (with the block each
falls in), `unlabelled` (live blocks left out: count, bytes, the largest with their innermost
frame), `notes`, `findings_expected` and `findings_forbidden` (finding codes that must / must not
fire on the file), and `host_storages` (pinned host memory, `s_pinned_host`).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import functools
import importlib.util
import json
import os
import pickle
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback
import weakref

import torch
import torch.nn as nn
import torch.nn.functional as F

ROLE_ORDER = [
    "parameter",
    "buffer",
    "gradient",
    "optimizer_state",
    "comm_buffer",
    "kv_cache",
    "input",
    "output",
    "activation",
]

SKIP_EXIT = 3  # a child's exit status for "skipped" (an optional package is missing)
DEFAULT_TIMEOUT = 60  # seconds per set-up
COMPILE_TIMEOUT = 150  # torch.compile set-ups compile forward and backward from a cold cache

# A small GPT-like model: about 5.3M parameters (21 MB), logits of 16 MB per batch.
VOCAB, DIM, HEADS, LAYERS, MAX_LEN = 4096, 256, 4, 4, 256
BATCH, SEQ = 8, 128


class Skip(Exception):
    """The set-up cannot run here (an optional package is missing); the message says why."""


# ---------------------------------------------------------------------------------------------
# Truth: the storages alive at the dump whose role the script knows.


def iter_tensors(value):
    """Every tensor in a tensor, a list/tuple/set of them, or a dict's values (recursively)."""
    if value is None:
        return
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from iter_tensors(item)
    elif isinstance(value, (list, tuple, set)):
        for item in value:
            yield from iter_tensors(item)


def local_tensor(tensor):
    """A DTensor's local shard (FSDP2 parameters, grads, optimizer state); others unchanged."""
    if hasattr(tensor, "device_mesh") and hasattr(tensor, "to_local"):
        with torch.no_grad():
            return tensor.to_local()
    return tensor


class Truth:
    """Storage address -> (bytes, role), where the first role of ROLE_ORDER wins."""

    def __init__(self):
        self.roles = {}
        self.host = {}  # pinned host storages, same shape

    def add_storage(self, addr, nbytes, role, table=None):
        table = self.roles if table is None else table
        if addr == 0 or nbytes == 0:  # freed (FSDP resizes unsharded storages to 0) or empty
            return
        old = table.get(addr)
        if old is None or ROLE_ORDER.index(role) < ROLE_ORDER.index(old[1]):
            table[addr] = (nbytes, role)

    def add(self, value, role):
        for tensor in iter_tensors(value):
            tensor = local_tensor(tensor)
            if tensor.is_cuda:
                storage = tensor.untyped_storage()
                self.add_storage(storage.data_ptr(), storage.nbytes(), role)

    def add_host(self, value, role):
        for tensor in iter_tensors(value):
            if not tensor.is_cuda and tensor.is_pinned():
                storage = tensor.untyped_storage()
                self.add_storage(storage.data_ptr(), storage.nbytes(), role, self.host)

    def add_module(self, model):
        for param in model.parameters():
            self.add(param, "parameter")
            self.add(param.grad, "gradient")
        for buffer in model.buffers():
            self.add(buffer, "buffer")

    def add_optimizer(self, optimizer):
        if optimizer is not None:
            for state in optimizer.state.values():
                self.add(state, "optimizer_state")


def tensors_saved_by_graph(*roots):
    """The tensors the autograd graph behind `roots` has saved for backward.

    Reads `_saved_*` of built-in nodes and `saved_tensors` of Python function nodes (compiled
    regions are one). Only for graphs without checkpointing: reading a checkpointed tensor would
    recompute it.
    """
    found, seen, kept = [], set(), []
    stack = [root.grad_fn for root in roots if getattr(root, "grad_fn", None) is not None]
    while stack:
        node = stack.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        kept.append(node)  # keeps ids unique while walking
        for name in dir(node):
            if name.startswith("_saved_"):
                try:
                    found.extend(iter_tensors(getattr(node, name)))
                except RuntimeError:  # already freed by a backward
                    pass
        try:
            found.extend(iter_tensors(node.saved_tensors))
        except (AttributeError, RuntimeError):
            pass
        stack.extend(next_node for next_node, _ in node.next_functions)
    return found


# ---------------------------------------------------------------------------------------------
# Recording and dumping.


def unpack_saved(tensor):
    return tensor


class Recorder:
    """One set-up's recording: memory history, saved-tensor weakrefs, and the single dump."""

    def __init__(self, outdir, name):
        self.outdir = outdir
        self.name = name
        self.saved = []  # weakrefs to tensors autograd saved (saved_tensors_hooks)
        self.dumped = False
        self.host_recording = None  # the keyword that turned on pinned host recording, if any

    @property
    def pickle_path(self):
        return os.path.join(self.outdir, self.name + ".pickle")

    def start(self, pinned_host=False):
        """Record every allocation with Python stacks, from here on."""
        options = {"enabled": "all", "context": "all", "stacks": "python"}
        if pinned_host:
            # torch >= 2.14 (pytorch#182407): host_segments and host_traces in the snapshot.
            # Older torch has no such parameter and raises TypeError.
            for keyword in ("record_pinned_host_memory", "record_host_memory"):
                try:
                    torch.cuda.memory._record_memory_history(**options, **{keyword: True})
                except TypeError:
                    continue
                self.host_recording = keyword
                return
        torch.cuda.memory._record_memory_history(**options)

    def pack(self, tensor):
        # Keep a detached alias (same storage), not the tensor itself: a saved tensor can be the
        # output of the node that saves it, and handing it back as is ties node and tensor into
        # a cycle through C++ that Python's gc never frees, so every graph would stay alive.
        saved = tensor.detach()
        self.saved.append(weakref.ref(saved))
        return saved

    def saving(self):
        """Note every tensor autograd saves for backward inside this block."""
        return torch.autograd.graph.saved_tensors_hooks(self.pack, unpack_saved)

    def saved_tensors(self):
        return [tensor for tensor in (ref() for ref in self.saved) if tensor is not None]

    def dump(self, moment, describe, **fields):
        """Write the snapshot now, then the truth that `describe()` (a Truth) gives."""
        if self.dumped:
            return
        self.dumped = True
        torch.cuda.synchronize()
        torch.cuda.memory._dump_snapshot(self.pickle_path)
        write_truth(self, moment, describe(), fields)


def live_blocks(segments):
    return {
        block["address"]: block
        for segment in segments
        for block in segment.get("blocks", [])
        if block.get("state") == "active_allocated"
    }


def innermost_frame(block):
    frames = block.get("frames") or []
    if not frames:
        return "<non-python>"
    frame = frames[0]
    return f"{os.path.basename(frame['filename'])}:{frame['line']}:{frame['name']}"


def where_unmatched(addr, segments):
    """For a storage that starts no live block: the block it falls in, its state and pool.

    (Under CUDA graphs, outputs of a replay live in the graph's private pool, in blocks the
    allocator itself calls inactive.)
    """
    for segment in segments:
        if segment["address"] <= addr < segment["address"] + segment["total_size"]:
            for block in segment.get("blocks", []):
                if block["address"] <= addr < block["address"] + block["size"]:
                    return {
                        "block": block["address"],
                        "block_state": block.get("state"),
                        "offset": addr - block["address"],
                        "segment_pool_id": list(segment.get("segment_pool_id", ())),
                    }
    return {"block": None}


def write_truth(recorder, moment, truth, fields):
    """NAME.truth.json, checked against the blocks of the snapshot just written."""
    with open(recorder.pickle_path, "rb") as f:  # our own file, written a moment ago
        snapshot = pickle.load(f)
    device = torch.cuda.current_device()
    segments = [s for s in snapshot.get("segments", []) if s.get("device") == device]
    live = live_blocks(segments)
    storages, unmatched = [], []
    for addr, (nbytes, role) in sorted(truth.roles.items()):
        entry = {"addr": addr, "nbytes": nbytes, "role": role}
        if addr in live:
            storages.append(entry)
        else:
            unmatched.append(dict(entry, **where_unmatched(addr, segments)))
    labelled = {entry["addr"] for entry in storages}
    rest = sorted(
        (block for addr, block in live.items() if addr not in labelled),
        key=lambda block: -block["size"],
    )
    bytes_by_role = {}
    for entry in storages:
        bytes_by_role[entry["role"]] = bytes_by_role.get(entry["role"], 0) + entry["nbytes"]
    doc = {
        "moment": moment,
        "device": device,
        "storages": storages,
        "setup": recorder.name,
        "torch": torch.__version__,
        "role_order": ROLE_ORDER,
        "bytes_by_role": bytes_by_role,
        "unmatched": unmatched,
        "unlabelled": {
            "blocks": len(rest),
            "bytes": sum(block["size"] for block in rest),
            "largest": [
                {"addr": block["address"], "size": block["size"], "frame": innermost_frame(block)}
                for block in rest[:32]
            ],
        },
    }
    if recorder.host_recording is not None or truth.host:
        host_live = live_blocks(snapshot.get("host_segments", []))
        doc["host_recording"] = recorder.host_recording
        doc["host_storages"] = [
            {"addr": addr, "nbytes": nbytes, "role": role, "in_snapshot": addr in host_live}
            for addr, (nbytes, role) in sorted(truth.host.items())
        ]
        doc["snapshot_keys"] = sorted(snapshot)
    doc.update(fields)
    with open(os.path.join(recorder.outdir, recorder.name + ".truth.json"), "w") as f:
        json.dump(doc, f, indent=1)


# ---------------------------------------------------------------------------------------------
# Models, built by hand (no downloads, nothing beyond torch).


class KVCache:
    """A preallocated key/value cache: one (batch, heads, max_len, head_dim) pair per layer."""

    def __init__(self, layers, batch, max_len, device):
        shape = (batch, HEADS, max_len, DIM // HEADS)
        self.keys = [torch.zeros(shape, device=device) for _ in range(layers)]
        self.values = [torch.zeros(shape, device=device) for _ in range(layers)]

    def update(self, layer, key, value, pos):
        end = pos + key.shape[2]
        self.keys[layer][:, :, pos:end] = key
        self.values[layer][:, :, pos:end] = value
        return self.keys[layer][:, :, :end], self.values[layer][:, :, :end]

    def tensors(self):
        return self.keys + self.values


class ConcatKVCache:
    """A cache that grows by concatenation (a new, longer tensor every token)."""

    def __init__(self, layers):
        self.keys = [None] * layers
        self.values = [None] * layers

    def update(self, layer, key, value, pos):
        if self.keys[layer] is not None:
            key = torch.cat([self.keys[layer], key], dim=2)
            value = torch.cat([self.values[layer], value], dim=2)
        self.keys[layer], self.values[layer] = key, value
        return key, value

    def tensors(self):
        return [t for t in self.keys + self.values if t is not None]


class Attention(nn.Module):
    def __init__(self, layer):
        super().__init__()
        self.layer = layer
        self.qkv = nn.Linear(DIM, 3 * DIM)
        self.proj = nn.Linear(DIM, DIM)

    def forward(self, x, cache=None, pos=0):
        batch, length, _ = x.shape
        q, k, v = self.qkv(x).split(DIM, dim=2)
        q, k, v = (t.view(batch, length, HEADS, DIM // HEADS).transpose(1, 2) for t in (q, k, v))
        if cache is not None:
            k, v = cache.update(self.layer, k, v, pos)
        # Causal for a whole sequence (training, prefill); one new token sees the whole cache.
        y = F.scaled_dot_product_attention(q, k, v, is_causal=length > 1)
        return self.proj(y.transpose(1, 2).reshape(batch, length, DIM))


class FeedForward(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(DIM, 4 * DIM)
        self.proj = nn.Linear(4 * DIM, DIM)

    def forward(self, x):
        return self.proj(F.gelu(self.fc(x)))


class Block(nn.Module):
    def __init__(self, layer):
        super().__init__()
        self.ln1 = nn.LayerNorm(DIM)
        self.attn = Attention(layer)
        self.ln2 = nn.LayerNorm(DIM)
        self.mlp = FeedForward()

    def forward(self, x, cache=None, pos=0):
        x = x + self.attn(self.ln1(x), cache, pos)
        return x + self.mlp(self.ln2(x))


class TinyGPT(nn.Module):
    """A decoder-only language model; `run_block` (if set) runs each block (checkpointing)."""

    def __init__(self):
        super().__init__()
        self.tok = nn.Embedding(VOCAB, DIM)
        self.pos = nn.Embedding(MAX_LEN, DIM)
        self.blocks = nn.ModuleList(Block(layer) for layer in range(LAYERS))
        self.ln_f = nn.LayerNorm(DIM)
        self.lm_head = nn.Linear(DIM, VOCAB, bias=False)
        self.run_block = None

    def forward(self, idx, cache=None, pos=0):
        positions = torch.arange(pos, pos + idx.shape[1], device=idx.device)
        x = self.tok(idx) + self.pos(positions)
        for block in self.blocks:
            if self.run_block is not None:
                x = self.run_block(block, x)
            else:
                x = block(x, cache, pos)
        return self.lm_head(self.ln_f(x))


class LoRALinear(nn.Module):
    """A frozen Linear plus a trainable low-rank update: base(x) + B(A(x)) * alpha / rank."""

    def __init__(self, base, rank=8, alpha=16):
        super().__init__()
        self.base = base
        self.lora_a = nn.Parameter(torch.randn(rank, base.in_features) * 0.01)
        self.lora_b = nn.Parameter(torch.zeros(base.out_features, rank))
        self.scale = alpha / rank

    def forward(self, x):
        return self.base(x) + F.linear(F.linear(x, self.lora_a), self.lora_b) * self.scale


def add_lora(model):
    """Freeze every weight, then wrap each block's Linear layers with adapters."""
    for param in model.parameters():
        param.requires_grad_(False)
    for block in model.blocks:
        for owner, name in (
            (block.attn, "qkv"),
            (block.attn, "proj"),
            (block.mlp, "fc"),
            (block.mlp, "proj"),
        ):
            setattr(owner, name, LoRALinear(getattr(owner, name)))
    return model


def mlp():
    return nn.Sequential(
        nn.Linear(1024, 4096), nn.GELU(), nn.Linear(4096, 1024), nn.GELU(), nn.Linear(1024, 10)
    )


def token_batch(batch=BATCH, seq=SEQ):
    idx = torch.randint(0, VOCAB, (batch, seq), device="cuda")
    targets = torch.randint(0, VOCAB, (batch, seq), device="cuda")
    return idx, targets


def lm_loss(logits, targets):
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def adamw(params):
    return torch.optim.AdamW(params, lr=1e-4)


# ---------------------------------------------------------------------------------------------
# Training loops.


def training_truth(rec, model, optimizer, batch, walk_from=None):
    """Parameters, gradients, optimizer state, the batch, and what autograd saved."""
    truth = Truth()
    truth.add_module(model)
    truth.add_optimizer(optimizer)
    truth.add(batch, "input")
    truth.add(rec.saved_tensors(), "activation")
    if walk_from is not None:
        truth.add(tensors_saved_by_graph(walk_from), "activation")
    return truth


def dump_in_forward(rec, describe):
    """A forward hook that dumps (once) from inside a module's forward."""

    def hook(module, args, output):
        rec.dump("forward", describe)

    return hook


def train(
    rec,
    model,
    optimizer,
    moment,
    *,
    steps=3,
    forward=None,
    describe=None,
    hook_module=None,
    hooks=True,
    walk_graph=False,
    before_step=None,
    **fields,
):
    """Next-token training for `steps` steps; in the last one, dump at `moment`.

    moment: "forward" (in `hook_module`'s forward, default the LM head), "forward_end" (after
    the loss, before backward), "backward" (after backward, before the step) or "step" (after
    the step, before zero_grad). `forward` is what computes the logits (a compiled or wrapped
    model); `describe(batch, loss)` gives the Truth (default: training_truth). `hooks`: note saved
    tensors with saved_tensors_hooks; `walk_graph`: find them from the loss's graph instead.
    """
    if forward is None:  # (not `or`: a compiled module has no truth value)
        forward = model
    if hook_module is None:
        hook_module = getattr(model, "lm_head", None)
    if describe is None:

        def describe(batch, loss):
            return training_truth(rec, model, optimizer, batch, loss if walk_graph else None)

    for step in range(steps):
        final = step == steps - 1
        rec.saved.clear()
        if before_step is not None:
            before_step()
        batch = token_batch()
        handle = None
        if final and moment == "forward":
            handle = hook_module.register_forward_hook(
                dump_in_forward(rec, functools.partial(describe, batch, None))
            )
        with rec.saving() if hooks else contextlib.nullcontext():
            loss = lm_loss(forward(batch[0]), batch[1])
        if handle is not None:
            handle.remove()
        if final and moment == "forward_end":
            rec.dump(moment, functools.partial(describe, batch, loss), **fields)
        loss.backward()
        if final and moment == "backward":
            rec.dump(moment, functools.partial(describe, batch, None), **fields)
        optimizer.step()
        if final and moment == "step":
            rec.dump(moment, functools.partial(describe, batch, None), **fields)
        optimizer.zero_grad(set_to_none=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def single_process_group():
    """An NCCL process group of world size 1 (rank 0), destroyed on the way out."""
    import torch.distributed as dist

    dist.init_process_group(
        "nccl", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0, world_size=1
    )
    try:
        yield dist
    finally:
        dist.destroy_process_group()


# ---------------------------------------------------------------------------------------------
# Set-ups. Each takes its Recorder, calls rec.start() first and dumps once.

SETUPS = {}


def setup(timeout=DEFAULT_TIMEOUT):
    def register(function):
        SETUPS[function.__name__] = (function, timeout)
        return function

    return register


# DDP, world size 1 -----------------------------------------------------------------------------


class BucketSpy:
    """What the DDP comm hook saw: bucket index -> (storage address, bytes) of `bucket.buffer()`."""

    def __init__(self):
        self.buckets = {}

    def note(self, bucket):
        storage = bucket.buffer().untyped_storage()
        self.buckets[bucket.index()] = (storage.data_ptr(), storage.nbytes())


def spying_allreduce_hook(spy, bucket):
    """DDP's own all-reduce hook, after noting the bucket's storage."""
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

    spy.note(bucket)
    return allreduce_hook(None, bucket)


def ddp_train(rec, moment, bucket_view=False, static_graph=False, micro_steps=1, steps=3):
    """DDP training; each step runs `micro_steps` forward/backward, all but the last in no_sync."""
    from torch.nn.parallel import DistributedDataParallel

    rec.start()
    torch.manual_seed(0)
    with single_process_group():
        model = TinyGPT().cuda()
        ddp = DistributedDataParallel(
            model,
            device_ids=[0],
            gradient_as_bucket_view=bucket_view,
            static_graph=static_graph,
        )
        spy = BucketSpy()
        ddp.register_comm_hook(spy, spying_allreduce_hook)
        optimizer = adamw(ddp.parameters())
        bucket_role = "gradient" if bucket_view else "comm_buffer"

        def describe(batch):
            truth = training_truth(rec, model, optimizer, batch)
            for addr, nbytes in spy.buckets.values():
                truth.add_storage(addr, nbytes, bucket_role)
            return truth

        fields = {
            "notes": {
                "gradient_as_bucket_view": bucket_view,
                "static_graph": static_graph,
                "micro_steps_per_step": micro_steps,
                "buckets_seen_by_comm_hook": 0,
                "bucket_role": bucket_role,
            }
        }
        if not bucket_view:
            fields["findings_expected"] = ["ddp_gradients_copied"]
        else:
            fields["findings_forbidden"] = ["ddp_gradients_copied"]
        for step in range(steps):
            final = step == steps - 1
            rec.saved.clear()
            spy.buckets.clear()  # the buckets of this step (DDP rebuilds them after step 1)
            for micro in range(micro_steps):
                batch = token_batch()
                synced = micro == micro_steps - 1
                with contextlib.nullcontext() if synced else ddp.no_sync():
                    with rec.saving():
                        loss = lm_loss(ddp(batch[0]), batch[1])
                    loss.backward()
            fields["notes"]["buckets_seen_by_comm_hook"] = len(spy.buckets)
            if final and moment == "backward":
                rec.dump(moment, functools.partial(describe, batch), **fields)
            optimizer.step()
            if final and moment == "step":
                rec.dump(moment, functools.partial(describe, batch), **fields)
            optimizer.zero_grad(set_to_none=True)


@setup()
def s_ddp_bucket_view_backward(rec):
    """DDP, gradient_as_bucket_view=True: every .grad is a view into a bucket (after backward)."""
    ddp_train(rec, "backward", bucket_view=True)


@setup()
def s_ddp_copy_backward(rec):
    """DDP, gradient_as_bucket_view=False (default): buckets hold copies of the gradients."""
    ddp_train(rec, "backward", bucket_view=False)


@setup()
def s_ddp_no_sync_accum_backward(rec):
    """DDP gradient accumulation: 2 micro-steps under no_sync, then a synced one (after it)."""
    ddp_train(rec, "backward", micro_steps=3)


@setup()
def s_ddp_static_graph_step(rec):
    """DDP with static_graph=True, dumped after the optimizer step."""
    ddp_train(rec, "step", static_graph=True)


# FSDP2 (fully_shard), world size 1 ------------------------------------------------------------


def add_fsdp(truth, model):
    """FSDP2's own tensors: sharded parameters and grads, all-gather and reduce-scatter buffers."""
    from torch.distributed.fsdp import FSDPModule

    for module in model.modules():
        if not isinstance(module, FSDPModule):
            continue
        group = getattr(module._get_fsdp_state(), "_fsdp_param_group", None)
        if group is None:
            continue
        for param in group.fsdp_params:
            truth.add(param.sharded_param, "parameter")
            truth.add(param.sharded_param.grad, "gradient")
            truth.add(getattr(param, "_sharded_param_data", None), "parameter")
            # At world size 1 the unsharded parameter is a view of its all-gather output.
            truth.add(getattr(param, "all_gather_outputs", None), "comm_buffer")
            unsharded = getattr(param, "_unsharded_param", None)
            truth.add(unsharded, "comm_buffer")
            truth.add(getattr(unsharded, "grad", None), "gradient")
        result = getattr(group, "_all_gather_result", None)
        truth.add(getattr(result, "all_gather_output", None), "comm_buffer")
        comm = getattr(group, "comm_ctx", None)
        all_gather_state = getattr(comm, "all_gather_state", None)
        all_gather_result = getattr(all_gather_state, "all_gather_result", None)
        truth.add(getattr(all_gather_result, "all_gather_output", None), "comm_buffer")
        reduce_scatter_state = getattr(comm, "reduce_scatter_state", None)
        truth.add(getattr(reduce_scatter_state, "reduce_scatter_input", None), "comm_buffer")
    for buffer in model.buffers():
        truth.add(buffer, "buffer")


def fsdp2_train(rec, moment):
    from torch.distributed.fsdp import fully_shard

    rec.start()
    torch.manual_seed(0)
    with single_process_group():
        model = TinyGPT().cuda()
        for block in model.blocks:
            fully_shard(block)
        fully_shard(model)
        optimizer = adamw(model.parameters())

        def describe(batch, loss):
            truth = Truth()
            add_fsdp(truth, model)
            truth.add_optimizer(optimizer)
            truth.add(batch, "input")
            truth.add(rec.saved_tensors(), "activation")
            return truth

        train(
            rec,
            model,
            optimizer,
            moment,
            describe=describe,
            hook_module=model.blocks[-1].mlp,
            notes={"fully_shard": "each block, then the root; world size 1; AdamW"},
        )


@setup()
def s_fsdp2_forward(rec):
    """FSDP2, dumped inside the last block's feed-forward: that block and the root unsharded."""
    fsdp2_train(rec, "forward")


@setup()
def s_fsdp2_step(rec):
    """FSDP2 with AdamW, after the step: sharded parameters, grads and optimizer state."""
    fsdp2_train(rec, "step")


# torch.compile -------------------------------------------------------------------------------


def compile_train(rec, moment, mode=None, steps=3):
    rec.start()
    torch.manual_seed(0)
    model = TinyGPT().cuda()
    compiled = torch.compile(model, mode=mode)
    optimizer = adamw(model.parameters())
    before_step = None
    notes = {"compile_mode": mode or "default", "activations": "walked from the loss's graph"}
    if mode == "reduce-overhead":
        before_step = torch.compiler.cudagraph_mark_step_begin
        notes["cuda_graphs"] = (
            "tensors the graphs output (the gradients) live in the graphs' private pool, in "
            "blocks the allocator marks inactive: they are in unmatched, with their block"
        )
    train(
        rec,
        model,
        optimizer,
        moment,
        steps=steps,
        forward=compiled,
        hooks=False,
        walk_graph=True,
        before_step=before_step,
        notes=notes,
    )


@setup(COMPILE_TIMEOUT)
def s_compile_forward(rec):
    """torch.compile (default mode), after the forward and the loss, before backward."""
    compile_train(rec, "forward_end")


@setup(COMPILE_TIMEOUT)
def s_compile_backward(rec):
    """torch.compile, after backward: gradients written by the compiled backward."""
    compile_train(rec, "backward")


@setup(COMPILE_TIMEOUT)
def s_compile_step(rec):
    """torch.compile + AdamW, after the step."""
    compile_train(rec, "step")


@setup(COMPILE_TIMEOUT)
def s_compile_reduce_overhead_step(rec):
    """torch.compile(mode="reduce-overhead"): CUDA graphs and their private pool; after a step."""
    compile_train(rec, "step", mode="reduce-overhead", steps=4)


# Activation checkpointing --------------------------------------------------------------------


def checkpoint_train(rec, moment, reentrant):
    from torch.utils.checkpoint import checkpoint

    rec.start()
    torch.manual_seed(0)
    model = TinyGPT().cuda()
    optimizer = adamw(model.parameters())

    def run_block(block, x):
        # Autograd saves nothing inside a checkpointed block; the block's input is kept (the
        # reentrant variant saves it for backward; the other keeps it for the recomputation).
        rec.saved.append(weakref.ref(x))
        return checkpoint(block, x, use_reentrant=reentrant)

    model.run_block = run_block
    train(rec, model, optimizer, moment, notes={"use_reentrant": reentrant})


@setup()
def s_ckpt_reentrant_forward(rec):
    """Checkpointed blocks (use_reentrant=True), at the end of forward (after the loss)."""
    checkpoint_train(rec, "forward_end", reentrant=True)


@setup()
def s_ckpt_nonreentrant_forward(rec):
    """Checkpointed blocks (use_reentrant=False), at the end of forward (after the loss)."""
    checkpoint_train(rec, "forward_end", reentrant=False)


@setup()
def s_ckpt_nonreentrant_backward(rec):
    """Checkpointed blocks (use_reentrant=False), after backward (recomputation done)."""
    checkpoint_train(rec, "backward", reentrant=False)


# Retained graphs: the FAQ's `total_loss = total_loss + loss` -----------------------------------


def train_then_validate(rec, model, optimizer):
    """One training step, then the validation loss of one batch (computed with grad on)."""
    with rec.saving():
        idx, targets = token_batch()
        loss = lm_loss(model(idx), targets)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    with rec.saving():
        idx, targets = token_batch()
        return lm_loss(model(idx), targets)


def retained_graph_run(rec, keep_graph, steps=4):
    rec.start()
    torch.manual_seed(0)
    model = TinyGPT().cuda()
    optimizer = adamw(model.parameters())
    total_loss = 0
    for _ in range(steps):
        if keep_graph:
            total_loss = total_loss + train_then_validate(rec, model, optimizer)  # the leak
        else:
            total_loss += train_then_validate(rec, model, optimizer).item()

    def describe():
        truth = Truth()
        truth.add_module(model)
        truth.add_optimizer(optimizer)
        truth.add(total_loss, "output")
        truth.add(rec.saved_tensors(), "activation")  # every step's, never cleared
        return truth

    if keep_graph:
        fields = {
            "findings_expected": ["graph_retained_across_steps"],
            "notes": {
                "leak": "total_loss = total_loss + val_loss keeps each step's validation graph",
                "steps": steps,
            },
        }
    else:
        fields = {
            "findings_forbidden": [
                "graph_retained_across_steps",
                "activations_kept_without_backward",
                "outputs_kept_across_steps",
                "live_memory_grows_per_step",
            ],
            "notes": {"fixed": "total_loss += val_loss.item()", "steps": steps},
        }
    rec.dump("end", describe, **fields)


@setup()
def s_retained_graph_end(rec):
    """4 steps of train + validate summing the validation loss tensor: every graph is kept."""
    retained_graph_run(rec, keep_graph=True)


@setup()
def s_retained_graph_fixed_end(rec):
    """The same loop with `total_loss += loss.item()`: nothing kept (the control file)."""
    retained_graph_run(rec, keep_graph=False)


# LoRA, Adafactor, 8-bit Adam -----------------------------------------------------------------


@setup()
def s_lora_step(rec):
    """Frozen base weights plus rank-8 adapters on every block Linear; AdamW on the adapters."""
    rec.start()
    torch.manual_seed(0)
    model = add_lora(TinyGPT()).cuda()
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = adamw(trainable)
    frozen = sum(p.numel() for p in model.parameters() if not p.requires_grad)
    notes = {"frozen_parameters": frozen, "trainable_parameters": sum(p.numel() for p in trainable)}
    train(rec, model, optimizer, "step", notes=notes)


@setup()
def s_adafactor_step(rec):
    """torch.optim.Adafactor (factored second moments), after the step."""
    rec.start()
    torch.manual_seed(0)
    model = TinyGPT().cuda()
    optimizer = torch.optim.Adafactor(model.parameters(), lr=1e-2)
    train(rec, model, optimizer, "step")


@setup()
def s_8bit_step(rec):
    """bitsandbytes AdamW8bit (skipped when bitsandbytes does not import), after the step."""
    try:
        import bitsandbytes
    except Exception as error:  # ImportError, or a broken CUDA setup inside the package
        raise Skip(f"bitsandbytes does not import: {error!r}") from None
    rec.start()
    torch.manual_seed(0)
    model = TinyGPT().cuda()
    optimizer = bitsandbytes.optim.AdamW8bit(model.parameters(), lr=1e-4)
    train(rec, model, optimizer, "step", notes={"bitsandbytes": bitsandbytes.__version__})


# Inference: KV cache, kept outputs -----------------------------------------------------------


def generate_run(rec, concat, batch=4, prompt_len=32, new_tokens=64, dump_at=32):
    """Greedy generation under inference_mode; dumps from inside the loop at token `dump_at`."""
    rec.start()
    torch.manual_seed(0)
    model = TinyGPT().cuda().eval()
    with torch.inference_mode():
        prompt = torch.randint(0, VOCAB, (batch, prompt_len), device="cuda")
        if concat:
            cache = ConcatKVCache(LAYERS)
            ids = prompt.clone()
        else:
            cache = KVCache(LAYERS, batch, prompt_len + new_tokens, "cuda")
            ids = torch.empty(batch, prompt_len + new_tokens, dtype=torch.long, device="cuda")
            ids[:, :prompt_len] = prompt
        logits = model(prompt, cache, 0)
        for i in range(new_tokens):
            pos = prompt_len + i
            token = logits[:, -1].argmax(dim=-1)
            if concat:
                ids = torch.cat([ids, token[:, None]], dim=1)
            else:
                ids[:, pos] = token
            if i == dump_at:
                rec.dump(
                    "generate",
                    functools.partial(generation_truth, model, cache, ids, prompt),
                    notes={"cache": "concatenated" if concat else "preallocated", "token": i},
                    findings_forbidden=["activations_kept_without_backward"],
                )
            logits = model(ids[:, pos : pos + 1], cache, pos)


def generation_truth(model, cache, ids, prompt):
    truth = Truth()
    truth.add_module(model)
    truth.add(cache.tensors(), "kv_cache")
    truth.add(ids, "output")
    truth.add(prompt, "input")
    return truth


@setup()
def s_kv_cache_generate(rec):
    """64 tokens with a preallocated KV cache under inference_mode, dumped mid-generation."""
    generate_run(rec, concat=False)


@setup()
def s_kv_cache_concat_generate(rec):
    """The same with a cache grown by torch.cat every token (the old tensors freed)."""
    generate_run(rec, concat=True)


def keep_outputs_run(rec, no_grad, batches=4):
    """Inference over `batches` batches that appends each batch's logits to a list."""
    rec.start()
    torch.manual_seed(0)
    model = TinyGPT().cuda().eval()
    outputs = []
    with rec.saving(), torch.no_grad() if no_grad else contextlib.nullcontext():
        for _ in range(batches):
            idx = torch.randint(0, VOCAB, (BATCH, SEQ), device="cuda")
            outputs.append(model(idx))

    def describe():
        truth = Truth()
        truth.add_module(model)
        truth.add(idx, "input")
        truth.add(outputs, "output")
        truth.add(rec.saved_tensors(), "activation")  # every batch's (none under no_grad)
        return truth

    fields = {"notes": {"no_grad": no_grad, "batches": batches}}
    if no_grad:
        fields["findings_expected"] = ["outputs_kept_across_steps"]
        fields["findings_forbidden"] = [
            "activations_kept_without_backward",
            "graph_retained_across_steps",
        ]
    else:
        fields["findings_expected"] = [
            "activations_kept_without_backward",
            "outputs_kept_across_steps",
        ]
    rec.dump("end", describe, **fields)


@setup()
def s_nograd_keep_outputs_end(rec):
    """no_grad inference keeping every batch's logits: outputs, no activations."""
    keep_outputs_run(rec, no_grad=True)


@setup()
def s_grad_keep_outputs_end(rec):
    """The same without no_grad: every batch's activations are kept too (compare the pair)."""
    keep_outputs_run(rec, no_grad=False)


# Library workspaces, pinned host memory ------------------------------------------------------


def allocated_growth(action):
    """Bytes allocated by `action()` that stay allocated, and what it returned."""
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    result = action()
    torch.cuda.synchronize()
    return torch.cuda.memory_allocated() - before, result


def measure_cublas_workspaces():
    """The cuBLAS workspace of the main thread and of autograd's backward thread, in bytes.

    The first matmul of a thread makes that thread's workspace (one per cuBLAS handle and
    stream): measured as the growth of memory_allocated() over a tiny matmul, less its result,
    then over its backward (two matmuls on the backward thread), less the gradient it leaves.
    """
    probe = torch.ones(64, 64, device="cuda", requires_grad=True)
    grown, product = allocated_growth(lambda: probe @ probe)
    main_thread = grown - product.untyped_storage().nbytes()
    grown, _ = allocated_growth(lambda: product.sum().backward())
    backward_thread = grown - probe.grad.untyped_storage().nbytes()
    return main_thread, backward_thread


@setup()
def s_workspace(rec):
    """A plain MLP training step (cuBLAS matmuls); notes say what the cuBLAS workspaces are."""
    rec.start()
    torch.manual_seed(0)
    main_workspace, backward_workspace = measure_cublas_workspaces()
    model = mlp().cuda()
    optimizer = adamw(model.parameters())
    inputs = torch.randn(256, 1024, device="cuda")
    targets = torch.randint(0, 10, (256,), device="cuda")
    for step in range(3):
        loss = F.cross_entropy(model(inputs), targets)
        loss.backward()
        optimizer.step()
        if step < 2:
            optimizer.zero_grad(set_to_none=True)

    def describe():
        truth = Truth()
        truth.add_module(model)
        truth.add_optimizer(optimizer)
        truth.add((inputs, targets), "input")
        return truth

    env_names = (
        "CUBLAS_WORKSPACE_CONFIG",
        "CUBLASLT_WORKSPACE_SIZE",
        "TORCH_CUBLASLT_UNIFIED_WORKSPACE",
    )
    rec.dump(
        "step",
        describe,
        notes={
            "cublas_workspace_main_thread_bytes": main_workspace,
            "cublas_workspace_backward_thread_bytes": backward_workspace,
            "how": "measure_cublas_workspaces(): the main thread's workspace is allocated under "
            "the probe's Python line, the backward thread's has no Python frame",
            "env": {name: os.environ.get(name) for name in env_names},
            "device_capability": list(torch.cuda.get_device_capability()),
            "workspace_blocks": "left out of storages; see unlabelled.largest (32 MiB blocks)",
        },
    )


@setup()
def s_pinned_host(rec):
    """Pinned host batches copied with non_blocking=True, pinned host memory recorded if it can."""
    rec.start(pinned_host=True)
    torch.manual_seed(0)
    model = mlp().cuda()
    optimizer = adamw(model.parameters())
    for step in range(4):
        host_inputs = torch.randn(256, 1024).pin_memory()
        host_targets = torch.randint(0, 10, (256,)).pin_memory()
        inputs = host_inputs.cuda(non_blocking=True)
        targets = host_targets.cuda(non_blocking=True)
        loss = F.cross_entropy(model(inputs), targets)
        loss.backward()
        optimizer.step()
        if step == 3:
            break
        optimizer.zero_grad(set_to_none=True)

    def describe():
        truth = Truth()
        truth.add_module(model)
        truth.add_optimizer(optimizer)
        truth.add((inputs, targets), "input")
        truth.add_host((host_inputs, host_targets), "input")
        return truth

    notes = {
        "host_recording": rec.host_recording
        or "no keyword accepted: this torch cannot record pinned host memory "
        "(record_pinned_host_memory arrived in torch 2.14)",
        "host_memory_stats": torch.cuda.host_memory_stats(),
    }
    rec.dump("step", describe, notes=notes)


# ---------------------------------------------------------------------------------------------
# Running: one subprocess per set-up, a few at a time, each with its own time limit.


def run_one(outdir, name):
    """The child: run one set-up; 0 when it dumped, SKIP_EXIT when skipped."""
    if not torch.cuda.is_available():
        print("SKIP: no CUDA device")
        return SKIP_EXIT
    torch.cuda.set_device(0)
    function, _ = SETUPS[name]
    print(f"{name}: torch {torch.__version__}, {torch.cuda.get_device_name(0)}", flush=True)
    rec = Recorder(outdir, name)
    try:
        function(rec)
    except Skip as reason:
        print(f"SKIP: {reason}", flush=True)
        return SKIP_EXIT
    if not rec.dumped:
        print("FAILED: the set-up ended without dumping a snapshot", flush=True)
        return 2
    with open(os.path.join(outdir, name + ".truth.json")) as f:
        truth = json.load(f)
    print(
        f"dumped {os.path.getsize(rec.pickle_path)} bytes at {truth['moment']}; "
        f"{len(truth['storages'])} storages labelled {truth['bytes_by_role']}, "
        f"{len(truth['unmatched'])} unmatched",
        flush=True,
    )
    return 0


def environment():
    """This machine's Python and torch (the parent imports torch but never touches CUDA)."""
    optional = [
        package
        for package in ("transformers", "torchvision", "bitsandbytes")
        if importlib.util.find_spec(package) is not None
    ]
    return {
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "optional_packages": optional,
        "cwd": os.getcwd(),
    }


def run_child(script, outdir, name, timeout, deadline):
    """Run one set-up in its own process group; kill the whole group when time is up."""
    limit = min(timeout, deadline - time.monotonic())
    if limit < 5:
        return "SKIPPED", 0.0, "no time left before the deadline"
    log_path = os.path.join(outdir, "logs", name + ".log")
    started = time.monotonic()
    with open(log_path, "w") as log:
        child = subprocess.Popen(
            [sys.executable, script, "--one", outdir, name],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=dict(os.environ, PYTHONUNBUFFERED="1"),
        )
        try:
            code = child.wait(timeout=limit)
        except subprocess.TimeoutExpired:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait()
            code = None
    elapsed = time.monotonic() - started
    with open(log_path, errors="replace") as log:
        text = log.read()
    if code == 0:
        return "ok", elapsed, text.strip().splitlines()[-1] if text.strip() else ""
    if code == SKIP_EXIT:
        skip = [line for line in text.splitlines() if line.startswith("SKIP:")]
        return "SKIPPED", elapsed, skip[-1] if skip else text[-300:]
    why = f"timed out after {limit:.0f} s" if code is None else f"exit status {code}"
    return "FAILED", elapsed, f"{why}\n{text[-1500:]}"


def run_all(outdir, names, jobs, deadline_seconds):
    os.makedirs(os.path.join(outdir, "logs"), exist_ok=True)
    env = environment()
    with open(os.path.join(outdir, "environment.json"), "w") as f:
        json.dump(env, f, indent=1)
    print(f"environment: {json.dumps(env)}", flush=True)
    script = os.path.abspath(__file__)
    deadline = time.monotonic() + deadline_seconds
    # The slowest (compile) first, so they overlap the many short ones.
    order = sorted(names, key=lambda name: -SETUPS[name][1])
    results, lock = {}, threading.Lock()

    def task(name):
        status, elapsed, detail = run_child(script, outdir, name, SETUPS[name][1], deadline)
        with lock:
            results[name] = {"status": status, "seconds": round(elapsed, 1), "detail": detail}
            size = ""
            path = os.path.join(outdir, name + ".pickle")
            if status == "ok" and os.path.exists(path):
                size = f", {os.path.getsize(path) / 1e6:.2f} MB"
            first = detail.splitlines()[0] if detail else ""
            print(f"{name} {status} ({elapsed:.1f} s{size}) {first}", flush=True)
            if status == "FAILED":
                print("    " + "\n    ".join(detail.splitlines()[1:]), flush=True)

    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        for future in [pool.submit(task, name) for name in order]:
            future.result()
    with open(os.path.join(outdir, "summary.json"), "w") as f:
        json.dump({"environment": env, "results": results}, f, indent=1)
    counts = {}
    for result in results.values():
        counts[result["status"]] = counts.get(result["status"], 0) + 1
    print("summary: " + ", ".join(f"{n} {status}" for status, n in sorted(counts.items())))
    return 1 if counts.get("FAILED") else 0


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("outdir", nargs="?", help="where NAME.pickle and NAME.truth.json go")
    parser.add_argument("names", nargs="?", help="comma-separated set-up names (default: all)")
    parser.add_argument("--jobs", type=int, default=4, help="set-ups run at once (default 4)")
    parser.add_argument(
        "--deadline", type=float, default=450, help="seconds for all set-ups (default 450)"
    )
    parser.add_argument("--list", action="store_true", help="list the set-ups and exit")
    parser.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.list:
        for name, (function, timeout) in SETUPS.items():
            print(f"{name:34} {timeout:4} s  {function.__doc__}")
        return 0
    if args.outdir is None:
        parser.error("OUTDIR is required")
    if args.one:
        try:
            return run_one(args.outdir, args.names)
        except Exception:
            traceback.print_exc()
            return 1
    names = args.names.split(",") if args.names else list(SETUPS)
    unknown = [name for name in names if name not in SETUPS]
    if unknown:
        parser.error(f"unknown set-ups: {', '.join(unknown)} (see --list)")
    os.makedirs(args.outdir, exist_ok=True)
    return run_all(args.outdir, names, args.jobs, args.deadline)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
