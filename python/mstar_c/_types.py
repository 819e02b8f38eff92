"""Plain data objects that cross the C boundary of the mstar_c package.

The extension (_mstar) reads and writes these by attribute name, so the field names are the
reference system's (TensorPointerInfo, GraphEdge, ShardingConfig, StoredOutputs) and the
control messages carry the names of docs/wire-format.md. They are dataclasses: build them,
copy them (copy.deepcopy), print them. TensorPointerInfo, GraphEdge and Message keep their
fields in the extension's _InfoBase, _EdgeBase and _MsgBase (no instance __dict__) so that
descriptors, edges and received messages cross the C boundary without conversion.
"""
from __future__ import annotations

import inspect
import sys

from dataclasses import MISSING, dataclass, field, fields
from typing import Dict, List, NamedTuple, Optional, Union

from . import _mstar
from ._mstar import _EdgeBase, _InfoBase, _MsgBase

Rid = Union[int, str]


class _Factory:
    """A default made by a factory, as a signature shows it."""

    def __repr__(self):
        return "<factory>"


def _keep_defaults_in_fields(cls):
    """The decorator left each plain default as a class attribute, which would hide the
    extension's field descriptors: the defaults live on in fields(), where the extension's
    __init__ takes them, and in the signature that help() and inspect show for it."""
    params = []
    for f in fields(cls):
        if f.name in cls.__dict__:
            delattr(cls, f.name)
        dflt = f.default if f.default_factory is MISSING else _Factory()
        params.append(inspect.Parameter(f.name, inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                        default=dflt, annotation=f.type))
    cls.__signature__ = inspect.Signature(params)


def _reduce(self):
    # The fields by position (a dataclass subclass's own ones included), then what a subclass
    # keeps in its __dict__.
    return (type(self), tuple(getattr(self, f.name) for f in fields(self)),
            getattr(self, "__dict__", None) or None)


@dataclass(init=False)
class TensorPointerInfo(_InfoBase):
    """One tensor's descriptor: what a consumer needs to find and read it.

    dtype is the torch name ("float32", "bfloat16"); a torch.dtype is accepted on input.
    dims are in canonical layout (the shard dim first when the signal is sharded).

    A dataclass whose storage is the library's own descriptor (the extension's _InfoBase): it
    has no instance __dict__, so vars() does not apply (use dataclasses.asdict). Built by
    position or keyword with the defaults below; any value may be assigned, and a bad one is
    refused (InvalidArgumentError) when the descriptor is used.
    """

    __slots__ = ("__weakref__",)

    dims: tuple = ()
    dtype: str = "float32"
    stride: tuple = ()
    nbytes: int = 0
    address: int = 0
    uuid: int = 0
    source_session_id: str = ""
    source_entity: str = ""
    offset: int = 0
    source_tp_size: int = 1
    source_tp_rank: int = 0
    shm_segment: Optional[str] = None
    shm_offset: int = 0
    source_node_name: Optional[str] = None
    source_graph_walk: Optional[str] = None
    remote_key: Optional[bytes] = None

    __reduce__ = _reduce


_keep_defaults_in_fields(TensorPointerInfo)


@dataclass(init=False)
class GraphEdge(_EdgeBase):
    """A signal travelling to a node, with the descriptors of its tensors.

    shard_dim None is a replicated signal; total_fanin is the number of source ranks whose
    shards the destination gathers. (The reference spells the last two _total_fanin and
    _shard_dim; the wire format does too.)

    A dataclass whose storage is the extension's _EdgeBase: the scalars live in the library's
    edge struct (no instance __dict__, so vars() does not apply: use dataclasses.asdict), and
    tensor_info is a plain list of TensorPointerInfo that may be changed in place. Any value
    may be assigned; a bad one is refused (InvalidArgumentError) when the edge is used.
    """

    __slots__ = ("__weakref__",)

    next_node: str = ""
    name: str = ""
    tensor_info: List[TensorPointerInfo] = field(default_factory=list)
    persist: bool = False
    is_streaming: bool = False
    persist_for_loop: bool = False
    total_fanin: int = 1
    shard_dim: Optional[int] = None

    __reduce__ = _reduce


_keep_defaults_in_fields(GraphEdge)


@dataclass
class ShardingConfig:
    """The shard dim of each signal of a request (None or absent: replicated)."""

    shard_dim: Dict[str, Optional[int]] = field(default_factory=dict)


@dataclass
class ShardGroup:
    """A tensor-parallel group as fan-out sees it: its workers by rank."""

    workers: List[str] = field(default_factory=list)

    @property
    def tp_size(self) -> int:
        return len(self.workers)


class StoredOutputs(NamedTuple):
    """The batch store's columns, as the reference's named tuple: flat_uuids, flat_rids (the
    index of each tensor's request in request_ids) and signal_idxs, one entry per stored
    tensor; num_tensors, one entry per (request, signal), request-major."""

    flat_uuids: List[int]
    flat_rids: List[int]
    signal_idxs: List[int]
    num_tensors: List[int]


@dataclass
class TxInfo:
    edge_name: str = ""
    source_entity: str = ""
    count: int = 0
    num_bytes: int = 0
    time_s: float = 0.0


@dataclass
class RxInfo:
    edge_name: str = ""
    source_entity: str = ""
    dest_entity: str = ""
    count: int = 0
    num_bytes: int = 0
    time_s: float = 0.0


class RequestProfile:
    """req_tx_info / req_rx_info of a manager with enable_prof (the reference's dicts by
    request id): prof[rid] is {edge_name: TxInfo} for tx, {(source_entity, edge_name): RxInfo}
    for rx, read from the library when indexed. libmstar keeps the figures per request and
    lists no requests, so this is indexed, not iterated."""

    def __init__(self, get, key):
        self._get, self._key = get, key

    def __getitem__(self, request_id):
        return {self._key(i): i for i in self._get(request_id)}

    def get(self, request_id, default=None):
        got = self[request_id]
        return got if got else default

    def __contains__(self, request_id):
        return bool(self._get(request_id))

    def __iter__(self):
        raise TypeError("req_tx_info / req_rx_info are indexed by request id, not iterated")


@dataclass
class ReadFailure:
    """A read that failed: its edge was dropped and the failure acknowledged to the producer."""

    rid: Rid = 0
    edge_name: str = ""
    status: int = 0
    message: str = ""


@dataclass(init=False)
class Message(_MsgBase):
    """One control message. type is the wire name ("INPUT_SIGNALS", "TENSOR_RECEIVED", ...);
    sender is the wire's "from" (filled by the mesh on send). Which fields a type uses is listed
    in docs/python.md; the others stay at their defaults.

    A dataclass whose storage is the extension's _MsgBase: it has no instance __dict__, so
    vars() does not apply (use dataclasses.asdict). A received message keeps the library's
    struct and builds each field when first read; the manager's methods and Mesh.send convert
    only the fields written (or lists and dicts read) in Python, and take the rest from that
    struct. Any value may be assigned; a bad one is refused (InvalidArgumentError) when the
    message is used.
    """

    __slots__ = ("__weakref__",)

    type: str = "HELLO"
    sender: str = ""
    request_id: Rid = 0
    graph_walk: str = ""
    text: str = ""
    remove_source: int = 0
    force: bool = False
    is_first_tp_rank: bool = False
    round: int = 0
    rank: int = 0
    world_size: int = 0
    edges: List[GraphEdge] = field(default_factory=list)
    counts: Dict[int, int] = field(default_factory=dict)
    uuids: List[int] = field(default_factory=list)
    names: List[str] = field(default_factory=list)
    rids: List[Rid] = field(default_factory=list)
    ints: List[int] = field(default_factory=list)
    rx: List[RxInfo] = field(default_factory=list)
    tx: List[TxInfo] = field(default_factory=list)
    kv: Dict[str, int] = field(default_factory=dict)

    @property
    def successful_tensors(self) -> Dict[int, int]:
        """TENSOR_RECEIVED's {uuid: count} under the reference's name."""
        return self.counts

    @property
    def failed_tensor_ids(self) -> List[int]:
        return self.uuids

    __reduce__ = _reduce


_keep_defaults_in_fields(Message)

# What Mesh.recv returns was once a subclass decoding its fields lazily; Message itself does
# that now. The name stays for code that spells it.
ReceivedMessage = Message

_mstar._bind_types(sys.modules[__name__])
