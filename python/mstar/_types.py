"""Plain data objects that cross the C boundary of the mstar package.

The extension (_mstar) reads and writes these by attribute name, so the field names are the
reference system's (TensorPointerInfo, GraphEdge, ShardingConfig, StoredOutputs) and the
control messages carry the names of docs/wire-format.md. They are ordinary dataclasses: build
them, copy them (copy.deepcopy), print them.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional, Union

Rid = Union[int, str]


@dataclass
class TensorPointerInfo:
    """One tensor's descriptor: what a consumer needs to find and read it.

    dtype is the torch name ("float32", "bfloat16"); a torch.dtype is accepted on input.
    dims are in canonical layout (the shard dim first when the signal is sharded).
    """

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


@dataclass
class GraphEdge:
    """A signal travelling to a node, with the descriptors of its tensors.

    shard_dim None is a replicated signal; total_fanin is the number of source ranks whose
    shards the destination gathers. (The reference spells the last two _total_fanin and
    _shard_dim; the wire format does too.)
    """

    next_node: str = ""
    name: str = ""
    tensor_info: List[TensorPointerInfo] = field(default_factory=list)
    persist: bool = False
    is_streaming: bool = False
    persist_for_loop: bool = False
    total_fanin: int = 1
    shard_dim: Optional[int] = None


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


@dataclass
class StoredOutputs:
    """The batch store's index-parallel columns, one entry per stored tensor."""

    flat_uuids: List[int] = field(default_factory=list)
    flat_rids: List[int] = field(default_factory=list)
    signal_idxs: List[int] = field(default_factory=list)
    num_tensors: List[List[int]] = field(default_factory=list)


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


@dataclass
class ReadFailure:
    """A read that failed: its edge was dropped and the failure acknowledged to the producer."""

    rid: Rid = 0
    edge_name: str = ""
    status: int = 0
    message: str = ""


@dataclass
class Message:
    """One control message. type is the wire name ("INPUT_SIGNALS", "TENSOR_RECEIVED", ...);
    sender is the wire's "from" (filled by the mesh on send). Which fields a type uses is listed
    in docs/python.md; the others stay at their defaults.
    """

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
