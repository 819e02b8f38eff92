"""mstar_c.graphs — the reference's graph-runner module (mstar.engine.accelerator_graph_runner)
for PyTorch modules, over the C runner.

Also importable as ``mstar_c.engine.accelerator_graph_runner``. Buckets, leases, slots, padding
rows, dummy rows, staging, capture, planning, dropping and rank agreement are the C runner's
(libmstar, mstar/graphs.h and mstar/planner.h); this module gives it a torch.nn.Module as its
submodule and converts names and types:

    sr = StepRunner("cpu")                            # a device's step runner and resources
    runner = AcceleratorGraphRunner("mlp", module, None, sr, "cpu", None, None, 1,
                                    configs=[AcceleratorGraphConfig("decode", seq_len=1,
                                             make_node_input=lambda n: {"x": torch.zeros(n, 64)})])
    runner.capture()                                  # prepare, size, plan, capture, agree
    out = runner.run([NodeInputs(1, {"x": x0}), NodeInputs(1, {"x": x1})])

The module's config capture method (forward_batched by default, else forward) is called with the
static inputs as keyword arguments and returns a tensor (output "output") or a dict of tensors.
Static inputs are the runner's buffers, allocated once per config at the largest bucket and
narrowed per bucket (torch tensors viewing them through DLPack); static outputs are the slot's.

On the host backend (CPU) a capture records the forward as a step of the graph that re-enters
Python on every replay and runs the module again over the static tensors; on CUDA the module's
kernels are captured into the C graph on the runner's compute stream and a replay runs no Python
(docs/design.md, "Graph runner for PyTorch modules").
"""
from __future__ import annotations

import contextlib
import contextvars
import os
import sys
import types
import weakref
from dataclasses import dataclass, field
from typing import Any, Callable, Collection, Mapping, NamedTuple, Optional, Sequence

from . import _mstar
from ._errors import Error

__all__ = [
    "AcceleratorGraphBucket", "AcceleratorGraphConfig", "AcceleratorGraphRunner",
    "AcceleratorGraphSlot", "BucketKey", "CGSlotSpec", "CaptureCost", "CapturePlan",
    "CurrentForwardPassInfo", "DummyRowPool", "ExecutableMemory", "GraphMemory", "GraphPool",
    "NodeInputs", "PiecewiseAcceleratorGraphRunner", "PiecewiseGraphData", "PiecewiseGraphKey",
    "PiecewiseOutput", "PiecewiseCallInputs", "PiecewiseCaptureShape", "PiecewiseConfig",
    "RankGroup", "SlotLease", "StepRunner", "SubmoduleStep", "WarmedRegion",
    "WarmedSpec", "agree_across_ranks", "autocast_scope", "blocked_capture_resources",
    "capture_into_graph", "capture_with_static_outputs", "compile_kwargs", "current_step",
    "dummy_metadata", "dummy_rid_handle", "dummy_rid_name", "fail_if_graphs_required",
    "plan_captures",
]


def _torch():
    import torch
    return torch


def _tensor(cap):
    return _torch().utils.dlpack.from_dlpack(cap)


# ---- plain data ------------------------------------------------------------------------------

class BucketKey(NamedTuple):
    """One captured shape: the C runner's mstar_bucket_key."""
    graph_walk: str
    bs: int
    num_tokens: int
    cg_key_info: Optional[str] = None

    def __str__(self):
        return _mstar._bucket_name(tuple(self))


class SlotLease(NamedTuple):
    """Which bucket and double-buffer slot a step replays on (the bucket names the capture walk)."""
    slot: int
    bucket: BucketKey

    def _c(self):
        return (self.slot, *self.bucket)


def _lease(t) -> Optional[SlotLease]:
    return t if t is None or isinstance(t, SlotLease) else SlotLease(t[0], BucketKey(*t[1:]))


# The C runners' lease_slot hands out these types, made in C (no Python frame per step).
_mstar._register_lease_types(SlotLease, BucketKey)


class CGSlotSpec(NamedTuple):
    bucket: BucketKey
    slot: int
    config_idx: int


@dataclass
class NodeInputs:
    """One request's inputs to a node for one step: its token count and its tensors."""
    seq_len: int
    tensors: dict = field(default_factory=dict)


def _rows(rows) -> list:
    out = []
    for n, d in rows:
        out.append(NodeInputs(n, {k: _tensor(v) for k, v in (d or {}).items()}))
    return out


@dataclass
class CurrentForwardPassInfo:
    graph_walk: str
    requires_cfg: bool = False
    fwd_index: int = 0
    random_seed: int = 0
    max_tokens: int = 1


_COMPILE_MODES = {None: 0, "default": 1, "max-autotune-no-cudagraphs": 2}


@dataclass
class AcceleratorGraphConfig:
    """What a runner captures for one walk (the reference's AcceleratorGraphConfig).

    kind "batched" (bs rows of seq_len tokens) or "packed" (capture_token_lengths total tokens);
    make_node_input(length) -> {name: tensor}: one template row of `length` tokens (default: the
    module's make_node_input(graph_walk, length)); seq_dims: the seq dim of each input key.
    """
    capture_graph_walk: str
    capture_batch_sizes: Optional[Sequence[int]] = None
    replay_graph_walks: Optional[Sequence[str]] = None
    additional_key_info: Optional[str] = None
    kind: str = "batched"
    seq_len: int = 1
    capture_token_lengths: Optional[Sequence[int]] = None
    caps_eager_batch_size: bool = True
    plan_tokens_per_input_token: int = 1
    seq_dims: Optional[Mapping[str, int]] = None
    compile_mode: Optional[str] = None
    capture_forward_method: str = "forward_batched"
    make_node_input: Optional[Callable[[int], dict]] = None

    def _c_dict(self) -> dict:
        if self.compile_mode not in _COMPILE_MODES:
            raise ValueError(f"compile_mode {self.compile_mode!r}: one of {list(_COMPILE_MODES)}")
        return {
            "kind": self.kind, "capture_graph_walk": self.capture_graph_walk,
            "replay_graph_walks": list(self.replay_graph_walks or []) or None,
            "cg_key_info": self.additional_key_info,
            "capture_batch_sizes": None if self.capture_batch_sizes is None
            else list(self.capture_batch_sizes),
            "capture_token_lengths": None if self.capture_token_lengths is None
            else list(self.capture_token_lengths),
            "caps_eager_batch_size": self.caps_eager_batch_size,
            "plan_tokens_per_input_token": self.plan_tokens_per_input_token,
            "seq_len": self.seq_len, "seq_dims": dict(self.seq_dims or {}),
            "compile_mode": _COMPILE_MODES[self.compile_mode],
        }


class CaptureCost(NamedTuple):
    """What one bucket costs on the device (bytes): its warm-up peak, the pool bytes one capture
    needs (None: no capture could be sized) and keeps, its slots, executable bytes outside the
    allocator, and the walk's ExecutableMemory whose held copies may pay for them."""
    peak: int
    graph: Optional[int]
    kept: int
    slots: int
    outside: int = 0
    executable: Optional["ExecutableMemory"] = None
    config_idx: int = 0


class CapturePlan(NamedTuple):
    """Which buckets each graph pool captures (pool name -> set of BucketKey), the pool bytes and
    executable bytes predicted per pool, and the largest eager step kept free beside them."""
    buckets: dict
    predicted: dict
    outside: dict
    floor: int


class GraphMemory(NamedTuple):
    """What a captured graph holds: in its pool, and outside the allocator."""
    pool: int
    outside: int


class ExecutableMemory:
    """The executable memory a walk's graphs take per node, measured on instantiated copies of
    its first throwaway graph (mstar_exec_memory). The host backend has none: per_node None."""

    def __init__(self, per_node: Optional[float] = None, held: int = 0, _sizing=None, _walk=-1):
        self.per_node = per_node
        self.held = held
        self._sizing = _sizing
        self._walk = _walk

    def measure(self, graph=None, nodes: int = 0) -> None:
        """Re-read the measurement sizing made of this walk (sizing measures on its throwaway
        graph; a graph from Python has no executable to copy on the host)."""
        if self._sizing is not None:
            self.per_node, self.held, _ = self._sizing.executable(self._walk)

    def release(self) -> None:
        if self._sizing is not None:
            self._sizing.release()
        self.held = 0

    def __repr__(self):
        return f"ExecutableMemory(per_node={self.per_node}, held={self.held})"


def _cost_tuple(c: CaptureCost, credits: dict) -> tuple:
    exe = -1
    if c.executable is not None:
        exe = credits.setdefault(id(c.executable), (len(credits), c.executable))[0]
    return (int(c.peak), c.graph is not None, int(c.graph or 0), int(c.kept), int(c.slots),
            int(c.outside), exe)


def _cost_from(t, execs) -> CaptureCost:
    peak, has, graph, kept, slots, outside, exe = t
    return CaptureCost(peak, graph if has else None, kept, slots, outside,
                       execs[exe] if 0 <= exe < len(execs) else None)


# ---- autocast, compile, padding-row names -----------------------------------------------------

def autocast_scope(dtype, device_type: str):
    """A forward's autocast scope; None runs the module in its own dtype and shuts out any ambient
    autocast."""
    torch = _torch()
    if dtype is None:
        return torch.autocast(device_type, enabled=False)
    return torch.autocast(device_type, dtype=dtype)


def compile_kwargs(config_mode: Optional[str]) -> dict:
    """torch.compile's arguments for a config whose compile_mode is config_mode (never a mode that
    builds CUDA graphs itself: the runner captures)."""
    if config_mode not in _COMPILE_MODES:
        raise ValueError(f"compile_mode {config_mode!r}: one of {list(_COMPILE_MODES)}")
    return {} if config_mode is None else {"mode": config_mode, "dynamic": False}


def dummy_rid_handle(name: str) -> int:
    """The negative, stable handle of a padding-row name (process-wide registry)."""
    return _mstar._dummy_rid_handle(name)


def dummy_rid_name(handle: int) -> Optional[str]:
    """The name a padding-row handle was minted from. Debug/logging only."""
    return _mstar._dummy_rid_name(handle)


def dummy_metadata(rids: Sequence[int], graph_walk: str) -> dict:
    """Stand-in request info for padding rows, which have no real request."""
    return {r: CurrentForwardPassInfo(graph_walk) for r in rids}


def fail_if_graphs_required(missing: Sequence[str]) -> None:
    """MSTAR_REQUIRE_CUDA_GRAPHS=1 turns a dropped bucket into a startup failure (raises the
    library's StateError naming them); otherwise the missing buckets are logged."""
    _mstar._fail_if_graphs_required([str(m) for m in missing])


# ---- the device: step runner, steps, pools ----------------------------------------------------

SubmoduleStep = _mstar._Step


class StepRunner(_mstar._StepRunner):
    """A device's step runner (mstar/step.h) and the resources its steps use: a paged KV cache
    (add_kv_cache) and positions (add_positions), both the library's (mstar/resources.h).
    device: "cpu" (the host backend) or "cuda[:N]"."""

    def kv_plan_tensors(self, key: str, slot: int, label: int = 0) -> dict:
        """The KV plan buffers of (slot, label) (slot -1: eager) as int32 torch tensors."""
        d = self.kv_plan(key, slot, label)
        return {k: (_tensor(v) if not isinstance(v, int) else v) for k, v in d.items()}

    def positions_tensor(self, key: str, slot: int):
        return _tensor(self.positions_plan(key, slot))


class GraphPool(_mstar._GraphPool):
    """A node's graph pool: captures allocate from it; shared by the node's runners."""


def blocked_capture_resources(step, resources) -> list:
    """Keys of the resources in `step` that prevent capturing it (resources: the StepRunner)."""
    return resources.blocked_capture_resources(step)


# ---- the step context a module may read (slot, lease), also while a host graph replays ----------

_CURRENT = contextvars.ContextVar("mstar_step_context", default=None)


def current_step() -> Optional[dict]:
    """The step context of the forward running now: request_ids, graph_walk, slot, capture (a
    warm-up or a capture), capturing (the capture itself), replaying, lease... While a host graph replays, the context it was captured under (so a module reading
    per-slot plan buffers reads the ones its graph was captured over, as a CUDA graph would)."""
    return _CURRENT.get()


def _outputs_dict(res) -> dict:
    torch = _torch()
    if isinstance(res, torch.Tensor):
        res = {"output": res}
    elif isinstance(res, (tuple, list)):
        res = {f"output{i}": t for i, t in enumerate(res)}
    elif not isinstance(res, Mapping):
        raise TypeError(f"the captured method returned {type(res).__name__}: expected a tensor, "
                        "a sequence or a dict of tensors")
    # anything not a tensor is refused by the C side, naming the output
    return {k: v.contiguous() if isinstance(v, torch.Tensor) else v for k, v in res.items()}


class _Submodule:
    """The callbacks the C runner calls (runner_graph.c): the module's declare_step, preprocess,
    capture method and template rows."""

    def __init__(self, runner: "AcceleratorGraphRunner"):
        # weak: the C runner holds these callbacks, and the runner's cached rows hold the C
        # runner through DLPack, a link the collector cannot see
        self._r = weakref.ref(runner)

    @property
    def r(self) -> "AcceleratorGraphRunner":
        r = self._r()
        if r is None:
            raise Error("the AcceleratorGraphRunner is gone")
        return r

    def declare_step(self, walk, ids, rows, step):
        fn = getattr(self.r.submodule, "declare_step", None)
        if fn is None:
            return False
        return bool(fn(walk, list(ids), _rows(rows), step))

    def preprocess(self, step, rows):
        rows = _rows(rows)
        fn = getattr(self.r.submodule, "preprocess", None)
        if fn is not None:
            return dict(fn(step, rows))
        return _default_preprocess(rows)

    def _method(self, cfg: int):
        name = self.r.configs[cfg].capture_forward_method
        fn = getattr(self.r.submodule, name, None)
        return fn if fn is not None else self.r.submodule

    def _call(self, cfg, ctx, inputs):
        token = _CURRENT.set(ctx)
        try:
            with _torch().no_grad(), autocast_scope(self.r.autocast_dtype, self.r._device_type):
                return _outputs_dict(self._method(cfg)(**inputs))
        finally:
            _CURRENT.reset(token)

    def forward(self, cfg, step, inputs, mode):
        ins = {k: _tensor(v) for k, v in inputs.items()}
        ctx = dict(step.context, capturing=mode != 0, replaying=False)
        if self.r._cuda:  # on the runner's stream; a capture (mode 2) puts the kernels in its graph
            with self.r._on_device_stream(capturing=mode == 2):
                return self._call(cfg, ctx, ins)
        return self._call(cfg, ctx, ins)

    def replay_record(self, cfg, step, inputs, outputs):
        """What a host replay runs: the module again over the static inputs, into the static
        outputs."""
        ins = {k: _tensor(v) for k, v in inputs.items()}
        outs = {k: _tensor(v) for k, v in outputs.items()}
        ctx = dict(step.context, capturing=False, replaying=True)

        def replay():
            for k, v in self._call(cfg, ctx, ins).items():
                outs[k].copy_(v)
        return replay

    def make_node_input(self, cfg, length):
        c = self.r.configs[cfg]
        if c.make_node_input is not None:
            return dict(c.make_node_input(length))
        fn = getattr(self.r.submodule, "make_node_input", None)
        if fn is None:
            raise TypeError(f"config {cfg} ({c.capture_graph_walk}) has no make_node_input and "
                            "the module none either")
        return dict(fn(c.capture_graph_walk, length))


def _default_preprocess(rows: Sequence[NodeInputs]) -> dict:
    """Every key of the rows concatenated on dim 0, each row cut to its seq_len."""
    torch = _torch()
    keys = [k for k in (rows[0].tensors if rows else {})]
    return {k: torch.cat([r.tensors[k][: r.seq_len] if r.tensors[k].dim() else r.tensors[k]
                          for r in rows]) for k in keys}


# ---- the whole-forward runner -------------------------------------------------------------------

@dataclass
class AcceleratorGraphSlot:
    """One captured graph + the buffers its replay reads and writes."""
    graph: Any
    static_inputs: dict
    static_input_keys: tuple
    static_outputs: dict
    dummy_rids: list
    dummy_metadata: dict
    config_idx: int


@dataclass
class AcceleratorGraphBucket:
    """The captured slots for one (walk, cg_key_info, bs, num_tokens)."""
    config: AcceleratorGraphConfig
    config_idx: int
    slots: list = field(default_factory=list)


class _CRunner:
    """What both runners read alike from their C object (self._c)."""

    @property
    def any_graphs(self) -> bool:
        return self._c.any_graphs()

    @property
    def num_slots(self) -> int:
        return self._c.num_slots()

    def buckets(self) -> list:
        return [BucketKey(*k) for k in self._c.buckets()]


class AcceleratorGraphRunner(_CRunner):
    """Captures a torch.nn.Module's forward per bucket and replays it (the reference's
    AcceleratorGraphRunner), over mstar_graph_runner.

    AcceleratorGraphRunner(submodule_name, submodule, resources, step_runner, device,
                           autocast_dtype, joint_comm_group, num_slots, enable_nvtx=False,
                           device_capability=None, *, configs=None, pool=None)

    resources: the StepRunner whose resources the steps use (or None: step_runner's);
    step_runner: a StepRunner (None: a new one on `device`); configs: AcceleratorGraphConfigs
    (None: submodule.cuda_graph_configs); pool: the node's GraphPool (None: a new one);
    joint_comm_group: None, a RankGroup or a torch.distributed process group; num_slots 0 or
    None: MSTAR_NUM_SLOTS when a resource pre-plans, else 1.
    """

    CAPTURE_BATCH_SIZES = [1, 2, 4, 8, 16, 32, 64]
    NUM_WARMUP = 2

    def __init__(self, submodule_name, submodule, resources, step_runner, device, autocast_dtype,
                 joint_comm_group, num_slots, enable_nvtx=False, device_capability=None, *,
                 configs=None, pool=None):
        dev = str(device) if device is not None else "cpu"
        if step_runner is None:
            step_runner = resources if isinstance(resources, StepRunner) else StepRunner(dev)
        self.step_runner = step_runner
        self.resources = resources if resources is not None else step_runner
        self.submodule_name = submodule_name
        self.submodule = submodule
        self.device = step_runner.device
        self._device_type = "cuda" if self.device.startswith("cuda") else "cpu"
        self.autocast_dtype = autocast_dtype
        self.joint_comm_group = joint_comm_group
        self.enable_nvtx = enable_nvtx
        self.device_capability = device_capability
        if configs is None:
            configs = getattr(submodule, "cuda_graph_configs", None)
        if not configs:
            raise ValueError(f"{submodule_name}: no capture configs (pass configs= or give the "
                             "module cuda_graph_configs)")
        self.configs = list(configs)
        self.pool = pool if pool is not None else GraphPool(step_runner, submodule_name)
        self._mempool = None
        self._cuda = self._device_type == "cuda"
        self._c = _mstar._GraphRunner(submodule_name, step_runner, self.pool,
                                      [c._c_dict() for c in self.configs], _Submodule(self),
                                      int(num_slots or 0), autocast_dtype)
        self._executables: list = []
        self._sizing = None
        self._declare_cache: dict = {}
        # A step's calls go straight to C: a replay runs no Python frame (docs/python.md, "A step
        # from Python"). Bound on the instance, so a subclass's own override still wins.
        for name in ("lease_slot", "run_forward", "release"):
            if getattr(type(self), name) is getattr(AcceleratorGraphRunner, name):
                setattr(self, name, getattr(self._c, name))

    # lookups
    @property
    def dropped_buckets(self) -> list:
        return [BucketKey(*k) for k in self._c.dropped_buckets()]

    def can_run(self, graph_walk, bs, num_tokens, cg_key_info=None) -> bool:
        return self._c.can_run(graph_walk, bs, num_tokens, cg_key_info)

    def captures_walk(self, graph_walk) -> bool:
        return self._c.captures_walk(graph_walk)

    def max_batch_size_for(self, graph_walk) -> Optional[int]:
        return self._c.max_batch_size_for(graph_walk)

    def select_bucket(self, graph_walk, bs, num_tokens, cg_key_info=None) -> Optional[BucketKey]:
        k = self._c.select_bucket(graph_walk, bs, num_tokens, cg_key_info)
        return None if k is None else BucketKey(*k)

    def select_batched_bucket(self, graph_walk, bs, cg_key_info=None) -> Optional[BucketKey]:
        k = self._c.select_bucket(graph_walk, bs, None, cg_key_info)
        return None if k is None else BucketKey(*k)

    def lease_slot(self, graph_walk, bs, slot=None, num_tokens=None,
                   cg_key_info=None) -> Optional[SlotLease]:
        return self._c.lease_slot(graph_walk, bs, slot, num_tokens, cg_key_info)

    def config_for(self, lease: SlotLease) -> AcceleratorGraphConfig:
        return self.configs[self._c.config_idx_for(lease._c())]

    def is_packed(self, lease: SlotLease) -> bool:
        return self._c.is_packed(lease._c())

    def slot_for(self, lease: SlotLease) -> Optional[AcceleratorGraphSlot]:
        s = self._c.slot_for(lease._c())
        if s is None:
            return None
        ins, outs, rids = s
        ins = {k: _tensor(v) for k, v in ins.items()}
        return AcceleratorGraphSlot(lease, ins, tuple(ins), {k: _tensor(v) for k, v in
                                                            outs.items()}, rids,
                                    dummy_metadata(rids, lease.bucket.graph_walk),
                                    self._c.config_idx_for(lease._c()))

    def plan_stream(self):
        """The dedicated pre-plan stream: the step runner's (not a Python object; None here)."""
        return None

    # the step around a replay
    def pad_inputs(self, lease: SlotLease, inputs: Sequence[NodeInputs]) -> list:
        """Real inputs plus the zero-length rows that bring the batch to the bucket's size."""
        return list(inputs) + _rows(self._c.pad_inputs(lease._c(), len(inputs)))

    def step_ids(self, lease: SlotLease, request_ids: Sequence[int]) -> list:
        return self._c.step_ids(lease._c(), list(request_ids))

    def step_metadata(self, lease: SlotLease, request_ids, per_request_info) -> dict:
        ids = self.step_ids(lease, request_ids)
        out = {r: per_request_info[r] for r in request_ids}
        out.update(dummy_metadata(ids[len(request_ids):], lease.bucket.graph_walk))
        return out

    def declare_inputs_for(self, lease: SlotLease) -> list:
        """Template rows for a declare-only call, cached per bucket: shared, never mutate them."""
        key = lease.bucket
        if key not in self._declare_cache:
            self._declare_cache[key] = _rows(self._c.declare_inputs_for(lease._c()))
        return self._declare_cache[key]

    def release(self, lease: SlotLease, real_bs: int) -> None:
        self._c.release(lease, real_bs)

    def static_input(self, lease: SlotLease, key: str, length: int):
        """The slot's static input `key` narrowed to `length` (write a step's value here and
        staging copies nothing)."""
        return _tensor(self._c.static_input(lease._c(), key, length))

    def run_forward(self, lease: SlotLease, preprocessed: Mapping, plan_done_event=None,
                    launch_started_event=None) -> dict:
        """Stage this step's inputs into the slot and replay it: the slot's static outputs (views,
        valid until the slot's next replay). On CUDA the replay waits for torch's current stream
        and torch's stream for the replay. launch_started_event is set on every path."""
        return self._c.run_forward(lease, dict(preprocessed), plan_done_event,
                                   launch_started_event)

    def run(self, inputs: Sequence[NodeInputs], request_ids: Optional[Sequence[int]] = None,
            graph_walk: Optional[str] = None, slot=None) -> dict:
        """One step the way the engine drives it: lease, pad, preprocess, replay, release; eager
        when no bucket fits. Returns the outputs cut to the real rows (copies)."""
        walk = graph_walk or self.configs[0].capture_graph_walk
        n = len(inputs)
        ntok = sum(r.seq_len for r in inputs)
        lease = self.lease_slot(walk, n, slot, ntok)
        if lease is None:
            return self.run_eager(inputs)
        try:
            padded = self.pad_inputs(lease, inputs)
            pre = self._preprocess(padded)
            outs = self.run_forward(lease, pre)
            return {k: v[:n].clone() for k, v in outs.items()}
        finally:
            self.release(lease, n)

    def _preprocess(self, rows):
        fn = getattr(self.submodule, "preprocess", None)
        return dict(fn(None, rows)) if fn is not None else _default_preprocess(rows)

    def run_eager(self, inputs: Sequence[NodeInputs], config_idx: int = 0) -> dict:
        """The module without any graph (what a dropped bucket serves)."""
        pre = self._preprocess(list(inputs))
        return _Submodule(self)._call(config_idx, None, pre)

    # capture
    def prepare_for_capture(self) -> list:
        """Claim the static buffers this runner's captures read (then the step runner's one
        build_graph_buffers)."""
        return [CGSlotSpec(BucketKey(*k), s, c) for k, s, c in self._c.prepare_for_capture()]

    def warmup_and_capture(self, planned: Optional[Collection] = None) -> None:
        """Capture the planned buckets (None: every bucket), each warmed up first."""
        self._declare_cache.clear()
        self._c.warmup_and_capture(None if planned is None else [tuple(k) for k in planned])

    def drop_bucket(self, key) -> None:
        self._c.drop_bucket(tuple(key))

    def size_captures(self) -> dict:
        """Warm every bucket and slot up for its peak and capture each walk's largest bucket once,
        thrown away: {BucketKey: CaptureCost} (mstar_size_captures)."""
        self._sizing = _mstar._size_captures(self._c, _rank_group(self.joint_comm_group))
        return self._costs()

    def size_lent_captures(self, wanted: bool) -> dict:
        """Capture every other sized bucket once, thrown away, if wanted (agree `wanted` with max
        across ranks first)."""
        if self._sizing is None:
            raise Error("size_lent_captures before size_captures")
        self._sizing.size_lent(bool(wanted))
        return self._costs()

    def _costs(self) -> dict:
        s = self._sizing
        self._executables = [ExecutableMemory(*s.executable(w)[:2], _sizing=s, _walk=w)
                             for w in range(s.walks())]
        return {BucketKey(*k): _cost_from(c, self._executables)._replace(config_idx=i)
                for k, i, c in s.costs()}

    def capture(self, joint_comm_group=None, reusable: Optional[int] = None) -> dict:
        """The whole startup of this runner's device (mstar_capture_startup_run): prepare and
        build, size, agree, plan under free memory, capture the planned buckets, agree on what
        every rank captured and drop the rest, fail_if_graphs_required. Returns the report."""
        return capture_startup(self.step_runner, [self],
                               joint_comm_group if joint_comm_group is not None
                               else self.joint_comm_group, reusable)

    def _on_device_stream(self, capturing: bool):
        """Where torch runs on CUDA: the runner's compute stream, and while C captures, with its
        allocations from the runner's pool (docs/design.md, "Graph runner for PyTorch modules")."""
        from . import _cuda_capture
        return _cuda_capture.capture_context(self, capturing)

    def close(self) -> None:
        self._sizing = None
        self._executables = []
        self._declare_cache.clear()
        self._c.close()


def capture_startup(step_runner, runners, joint_comm_group=None, reusable=None) -> dict:
    """Bring every runner of a device from configured to captured, every rank together: its
    AcceleratorGraphRunners and PiecewiseAcceleratorGraphRunners (each kind in one order on every
    rank)."""
    group = _rank_group(joint_comm_group)
    for r in runners:
        if isinstance(r, AcceleratorGraphRunner):
            r._declare_cache.clear()
    return _mstar._capture_startup(step_runner, [r._c for r in runners], group, reusable)


# ---- planning ----------------------------------------------------------------------------------

def plan_captures(pools: Mapping, free: int, reusable: Optional[int] = None) -> CapturePlan:
    """The cheapest buckets across every pool on a device, added while the largest eager step still
    fits in `free` beside them (mstar_plan_captures).

    pools: {pool name: {BucketKey: CaptureCost}}; reusable bounds the executable reuse summed over
    all buckets (None: no bound)."""
    credits: dict = {}
    c_pools = []
    keys = {}
    for name, costs in pools.items():
        ks = list(costs)
        keys[name] = ks
        c_pools.append((name, [(tuple(k), int(costs[k].config_idx), _cost_tuple(costs[k], credits))
                               for k in ks]))
    held = [0] * len(credits)
    for idx, em in credits.values():
        held[idx] = int(em.held)
    floor, per_pool = _mstar._plan_captures(c_pools, int(free), held, reusable)
    buckets, predicted, outside = {}, {}, {}
    for (name, _), (pred, out, planned) in zip(c_pools, per_pool):
        buckets[name] = {BucketKey(*k) for k, p in zip(keys[name], planned) if p}
        predicted[name] = pred
        outside[name] = out
    return CapturePlan(buckets, predicted, outside, floor)


# ---- ranks -------------------------------------------------------------------------------------

class RankGroup:
    """The library's rank groups: single(), host(name, rank, world_size) over the control mesh
    (one process per rank), or from_torch(process_group) over a torch.distributed group."""

    def __init__(self, c):
        self._c = c

    @classmethod
    def single(cls):
        return cls(_mstar._RankGroup("single"))

    @classmethod
    def host(cls, name: str, rank: int, world_size: int, timeout_ms: int = 0):
        return cls(_mstar._RankGroup("host", name, rank, world_size, timeout_ms))

    @classmethod
    def from_torch(cls, group=None):
        dist = _torch().distributed
        rank = dist.get_rank(group)
        size = dist.get_world_size(group)

        def reduce(values, op):
            torch = _torch()
            t = torch.tensor(values, dtype=torch.int64)
            if _backend_is_nccl(group):
                t = t.cuda()
            dist.all_reduce(t, op=dist.ReduceOp.MIN if op == "min" else dist.ReduceOp.MAX,
                            group=group)
            return t.cpu().tolist()
        return cls(_mstar._RankGroup("custom", rank, size, reduce))

    @property
    def rank(self) -> int:
        return self._c.rank

    @property
    def size(self) -> int:
        return self._c.size

    def agree(self, values: Sequence[int], reduce: str) -> list:
        return self._c.agree(list(values), reduce)

    def close(self) -> None:
        self._c.close()


def _backend_is_nccl(group) -> bool:
    try:
        return _torch().distributed.get_backend(group) == "nccl"
    except Exception:
        return False


def _rank_group(group):
    """None, a RankGroup, a _RankGroup or a torch.distributed group -> the C group or None."""
    if group is None:
        return None
    if isinstance(group, RankGroup):
        return group._c
    if isinstance(group, _mstar._RankGroup):
        return group
    cached = getattr(group, "_mstar_rank_group", None)
    if cached is None:
        cached = RankGroup.from_torch(group)._c
        try:
            group._mstar_rank_group = cached
        except AttributeError:
            pass
    return cached


def _reduce_name(reduce) -> str:
    if isinstance(reduce, str):
        return reduce
    name = getattr(reduce, "__name__", "")
    if name in ("amin", "min"):
        return "min"
    if name in ("amax", "max"):
        return "max"
    raise ValueError(f"reduce {reduce!r}: torch.amin, torch.amax, 'min' or 'max'")


def agree_across_ranks(comm_group, values: Sequence[int], device=None, reduce="min") -> list:
    """Reduce each of values over every rank of the joint group with reduce: torch.amin ANDs
    flags, torch.amax takes the largest. comm_group: None (this rank alone), a RankGroup, or a
    torch.distributed process group."""
    values = [int(v) for v in values]
    group = _rank_group(comm_group)
    if group is None:
        return values
    return group.agree(values, _reduce_name(reduce))


# ---- padding rows, alone -----------------------------------------------------------------------

class DummyRowPool:
    """The padding rows captured replays pad onto: a runner's (mstar_dummy_rows), reached through
    the runner that owns them. DummyRowPool(prefix, step_runner, resources) names the rows
    "__cg_<prefix>_<key>_<i>__" and takes `runner=` for the rows to manage."""

    def __init__(self, prefix, step_runner, resources, *, runner: AcceleratorGraphRunner):
        self.prefix = prefix
        self._r = runner._c

    def ensure(self, key: str, bs: int) -> list:
        return self._r.dummy_rows("ensure", key, bs)

    def handles(self, key: str, bs: int) -> list:
        return self._r.dummy_rows("handles", key, bs)

    def reset(self, rids, free: bool = False) -> None:
        self._r.dummy_rows("reset", None, 0, list(rids), free)

    def release_all(self) -> None:
        self._r.dummy_rows("release_all")


# ---- not reached from Python (see docs/python.md) --------------------------------------------------

def _not_reached(name, why):
    def f(*args, **kwargs):
        raise NotImplementedError(f"{name}: {why} (docs/python.md, graph runner)")
    f.__name__ = name
    return f


# ---- piecewise regions ----------------------------------------------------------------------------

class PiecewiseCaptureShape(NamedTuple):
    """One captured shape of a region: bs rows with these token counts, total_tokens in all."""
    bs: int
    seq_lens: tuple
    total_tokens: int


@dataclass
class PiecewiseCallInputs:
    """What a region's capture_fn is called with (the same for warm-ups and the capture): the
    shape's static buffers, the shape, the region step's context and the config's forward_kwargs.
    Only static_inputs carry data into a replay."""
    static_inputs: dict
    shape: PiecewiseCaptureShape
    context: Optional[dict]
    forward_kwargs: Any = None


@dataclass
class PiecewiseConfig:
    """A region: capture_fn(PiecewiseCallInputs) returns a tensor or a dict of tensors (leading
    with the row dim); make_static_inputs(PiecewiseCaptureShape) returns the shape's static
    buffers (dict of tensors leading with the row dim, copied into runner-owned buffers).
    BATCHED when total_tokens is None (bs rows of seq_len tokens), else PACKED (per bs, each
    total in total_tokens). declare_step(request_ids, seq_lens, step) -> bool plans the region's
    step (None: it plans nothing); can_lease(inputs) -> bool (None: every batch may)."""
    capture_fn: Callable
    make_static_inputs: Callable
    declare_step: Optional[Callable] = None
    can_lease: Optional[Callable] = None
    capture_batch_sizes: Optional[Sequence[int]] = None
    seq_len: int = 1
    total_tokens: Optional[Sequence[int]] = None
    lease_before_step: bool = False
    forward_kwargs: Any = None


class PiecewiseOutput:
    """The region's padded static output buffers and how many leading rows are real. [] and get
    return an owned clone of the real rows (safe past the next run); get_view the same rows
    without a copy (overwritten by this runner's next run)."""

    def __init__(self, outputs: Mapping, real_len: int):
        self.outputs = dict(outputs)
        self.real_len = int(real_len)

    def get_view(self, key: str):
        return self.outputs[key][: self.real_len]

    def __getitem__(self, key: str):
        return self.get_view(key).clone()

    def get(self, key: str, default=None):
        return self[key] if key in self.outputs else default

    def keys(self) -> list:
        return list(self.outputs)

    def __contains__(self, key) -> bool:
        return key in self.outputs


@dataclass
class PiecewiseGraphData:
    """One captured region for one shape and slot: its static inputs and outputs, padding rows,
    shape and bucket (the graph itself stays in C: None here)."""
    graph: Any
    static_inputs: dict
    static_outputs: dict
    dummy_rids: list
    shape: Optional[PiecewiseCaptureShape]
    bucket: BucketKey


class _Region:
    """The callbacks the C piecewise runner calls (runner_piecewise.c)."""

    def __init__(self, runner: "PiecewiseAcceleratorGraphRunner"):
        self._r = weakref.ref(runner)  # weak, as _Submodule's

    @property
    def r(self) -> "PiecewiseAcceleratorGraphRunner":
        r = self._r()
        if r is None:
            raise Error("the PiecewiseAcceleratorGraphRunner is gone")
        return r

    @staticmethod
    def _shape(t) -> PiecewiseCaptureShape:
        return PiecewiseCaptureShape(int(t[0]), tuple(t[1]), int(t[2]))

    def make_static_inputs(self, shape):
        return dict(self.r.config.make_static_inputs(self._shape(shape)))

    def declare_step(self, ids, seq_lens, step):
        return bool(self.r.config.declare_step(list(ids), list(seq_lens), step))

    def _call(self, ins, shape, ctx):
        r = self.r
        token = _CURRENT.set(ctx)
        try:
            with _torch().no_grad(), autocast_scope(r.autocast_dtype, r._device_type):
                res = r.config.capture_fn(PiecewiseCallInputs(ins, self._shape(shape), ctx,
                                                               r.config.forward_kwargs))
                # a bare tensor is the region's output "x" (the reference's name)
                return _outputs_dict({"x": res} if isinstance(res, _torch().Tensor) else res)
        finally:
            _CURRENT.reset(token)

    def capture(self, inputs, shape, step, mode):
        ins = {k: _tensor(v) for k, v in inputs.items()}
        ctx = dict(step.context, capturing=mode != 0, replaying=False)
        if self.r._cuda:  # on the runner's stream; a capture (mode 2) puts the kernels in its graph
            from . import _cuda_capture
            with _cuda_capture.capture_context(self.r, capturing=mode == 2):
                return self._call(ins, shape, ctx)
        return self._call(ins, shape, ctx)

    def replay_record(self, inputs, res, shape, step):
        """A host capture: (replay, outputs). The replay runs the region again over the static
        inputs into `outputs`, tensors it owns, which the captured graph copies into the static
        outputs after it."""
        ins = {k: _tensor(v) for k, v in inputs.items()}
        outs = {k: v.clone() for k, v in res.items()}
        ctx = dict(step.context, capturing=False, replaying=True)

        def replay():
            for k, v in self._call(ins, shape, ctx).items():
                outs[k].copy_(v)
        return replay, outs


class PiecewiseAcceleratorGraphRunner(_CRunner):
    """Captures one inner region of a submodule's forward per shape and slot, while the preamble
    around it stays eager and calls run itself (the reference's PiecewiseAcceleratorGraphRunner),
    over mstar_piecewise_runner (mstar/piecewise.h).

    PiecewiseAcceleratorGraphRunner(label, config, resources, step_runner, device, autocast_dtype,
                                    num_slots, joint_comm_group=None, node_name=None,
                                    memory_pool=None, device_capability=None)

    config: a PiecewiseConfig; memory_pool: the node's GraphPool, shared with its whole-forward
    runner (None: a new one). Lookups never fall back to a larger bs (G-21)."""

    CAPTURE_BATCH_SIZES = [1, 2, 4, 8, 16, 32, 64]
    NUM_WARMUP = 2

    def __init__(self, label, config: PiecewiseConfig, resources, step_runner, device,
                 autocast_dtype, num_slots, joint_comm_group=None, node_name=None,
                 memory_pool=None, device_capability=None):
        dev = str(device) if device is not None else "cpu"
        if step_runner is None:
            step_runner = resources if isinstance(resources, StepRunner) else StepRunner(dev)
        self.label = label
        self.config = config
        self.step_runner = step_runner
        self.resources = resources if resources is not None else step_runner
        self.device = step_runner.device
        self._device_type = "cuda" if self.device.startswith("cuda") else "cpu"
        self._cuda = self._device_type == "cuda"
        self.autocast_dtype = autocast_dtype
        self.joint_comm_group = joint_comm_group
        self.node_name = node_name
        self.device_capability = device_capability
        self.pool = memory_pool if memory_pool is not None else GraphPool(step_runner, label)
        self._mempool = None
        packed = config.total_tokens is not None
        self._c = _mstar._PiecewiseRunner(
            label, step_runner, self.pool, packed,
            None if config.capture_batch_sizes is None else list(config.capture_batch_sizes),
            int(config.seq_len), None if not packed else list(config.total_tokens),
            bool(config.lease_before_step), config.declare_step is not None, _Region(self),
            int(num_slots or 0), autocast_dtype, node_name)
        self._sizing = None
        self._executables: list = []

    @property
    def lease_before_step(self) -> bool:
        return self._c.lease_before_step()

    @property
    def dropped_shapes(self) -> list:
        """Shapes not captured (planned out, failed or blocked), as (bs, total_tokens)."""
        return [(k[1], k[2]) for k in self._c.dropped_shapes()]

    def can_lease(self, inputs) -> bool:
        fn = self.config.can_lease
        return True if fn is None else bool(fn(inputs))

    def can_run(self, batch_size: int, total_tokens: Optional[int] = None) -> bool:
        return self._c.can_run(int(batch_size), -1 if total_tokens is None else int(total_tokens))

    def lease_slot(self, batch_size: int, total_tokens: Optional[int] = None) -> Optional[SlotLease]:
        return _lease(self._c.lease_slot(int(batch_size),
                                         -1 if total_tokens is None else int(total_tokens)))

    def set_slot(self, slot: int) -> None:
        self._c.set_slot(int(slot))

    def slot_for(self, lease: SlotLease) -> Optional[PiecewiseGraphData]:
        s = self._c.slot_for(lease._c())
        if s is None:
            return None
        ins, outs, rids = s
        return PiecewiseGraphData(None, {k: _tensor(v) for k, v in ins.items()},
                                  {k: _tensor(v) for k, v in outs.items()}, rids, None,
                                  lease.bucket)

    def run(self, static_inputs: Mapping, request_ids: Optional[Sequence[int]] = None,
            seq_lens: Optional[Sequence[int]] = None, real_bs: Optional[int] = None
            ) -> PiecewiseOutput:
        """Copy each real input into the leading rows of the same-named static buffer (the rest
        zeroed), plan the region's step over the padded batch, replay, commit."""
        outs, n = self._c.run(dict(static_inputs),
                              None if request_ids is None else list(request_ids),
                              None if seq_lens is None else list(seq_lens),
                              -1 if real_bs is None else int(real_bs))
        return PiecewiseOutput({k: _tensor(v) for k, v in outs.items()}, n)

    def prepare_for_capture(self) -> list:
        return [CGSlotSpec(BucketKey(*k), s, 0) for k, s in self._c.prepare_for_capture()]

    def warmup_and_capture(self, planned: Optional[Collection] = None) -> None:
        self._c.warmup_and_capture(None if planned is None else [tuple(k) for k in planned])

    def drop_shape(self, key) -> None:
        self._c.drop_shape(tuple(key))

    def size_captures(self) -> dict:
        """Warm every shape up and capture the largest once, thrown away
        (mstar_size_piecewise_captures): {BucketKey: CaptureCost}. Before warmup_and_capture
        only (startup's order): a throwaway capture of a captured shape would take its lease's
        replay record and warm-ups would reset the padding rows its graph holds."""
        if self.any_graphs:
            raise Error(f"{self.label}: size_captures comes before warmup_and_capture")
        self._sizing = _mstar._size_captures(self._c, _rank_group(self.joint_comm_group))
        return self._costs()

    def size_lent_captures(self, wanted: bool) -> dict:
        """Capture every other shape once, thrown away, if wanted (agreed with max first)."""
        return AcceleratorGraphRunner.size_lent_captures(self, wanted)

    _costs = AcceleratorGraphRunner._costs

    def close(self) -> None:
        self._sizing = None
        self._executables = []
        self._c.close()


class PiecewiseGraphKey(NamedTuple):
    bs: int
    seq_len: int
    slot: int


class WarmedSpec(NamedTuple):
    """A spec prepared and run eagerly. The C runner warms and captures in one call, so nothing is
    handed over; kept for the reference's name."""
    run: Callable
    static_inputs: dict
    static_input_keys: tuple
    dummy_rids: list
    dummy_metadata: dict
    peak: int
    returned: int


class WarmedRegion(NamedTuple):
    run: Callable
    static_inputs: dict
    dummy_rids: list
    warm_outputs: dict
    peak: int


capture_into_graph = _not_reached(
    "capture_into_graph", "a capture is made by a runner (warmup_and_capture), whose C capture "
    "owns the pool and the stream")
capture_with_static_outputs = _not_reached(
    "capture_with_static_outputs", "every runner capture already lands its outputs in the slot's "
    "static outputs")


# ---- the reference's module path ------------------------------------------------------------------

def _install_alias():
    pkg = sys.modules[__name__.rsplit(".", 1)[0]]
    engine = sys.modules.get(pkg.__name__ + ".engine")
    if engine is None:
        engine = types.ModuleType(pkg.__name__ + ".engine", "The reference's mstar.engine names.")
        engine.__path__ = []
        sys.modules[engine.__name__] = engine
        setattr(pkg, "engine", engine)
    sys.modules[engine.__name__ + ".accelerator_graph_runner"] = sys.modules[__name__]
    engine.accelerator_graph_runner = sys.modules[__name__]


_install_alias()
