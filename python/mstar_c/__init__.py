"""mstar — the transport and control mesh of mstar-c for PyTorch and NumPy.

Tensors move between the worker processes of one machine (or over UCX) without copies:

    import mstar_c, torch
    with mstar_c.Mesh("worker_0") as mesh, \\
         mstar_c.CommunicationManager("worker_0", transport="arena", send=mesh) as mgr:
        infos = mgr.store_and_return_tensor_info(1, {"x": [torch.randn(4, 8)]})
        mgr.increment_ref(infos["x"][0].uuid)            # one consumer will ACK it
        mgr.register_for_send(1, infos["x"])             # stage; stamps the descriptors
        mesh.send("worker_1", mstar_c.Message("INPUT_SIGNALS", request_id=1,
                  edges=[mstar_c.GraphEdge("node", "x", infos["x"])]))

and in the consumer:

        msg = mesh.recv()
        mgr.start_read_tensors(msg.request_id, msg.edges)
        for rid, edges in mgr.get_ready_tensors().items():      # ACKs go out here
            t = torch.from_dlpack(mgr.get_tensor(rid, edges[0].tensor_info[0].uuid))

Objects: CommunicationManager (the reference's TensorCommunicationManager), Mesh (an
entity's inbox), Tensor (a zero-copy view, DLPack), Completion (a read in flight), the data
classes TensorPointerInfo, GraphEdge, ShardingConfig, Message, StoredOutputs, TxInfo,
RxInfo, ReadFailure, and the exceptions: Error and one subclass per status code.
Documentation: docs/python.md in the mstar-c repository.
"""
from __future__ import annotations

import atexit
import copy
import weakref
from typing import Mapping, Sequence

from ._errors import *  # noqa: F401,F403  (Error and its subclasses)
from ._errors import BY_STATUS as _BY_STATUS
from ._errors import Error
from ._types import (GraphEdge, Message, ReadFailure, Rid, RxInfo, ShardGroup,
                     ShardingConfig, StoredOutputs, TensorPointerInfo, TxInfo)
from ._mstar import (Completion, Loan, Mesh, Tensor, built_with_cuda, dtype_size, entity_index,
                     fanout, set_log_level, status_name, version)
from ._mstar import Comm as _Comm
from . import graphs  # noqa: F401,E402  (also mstar_c.engine.accelerator_graph_runner)
from ._types import ReceivedMessage  # noqa: F401  (an alias of Message, kept for old code)
from ._types import RequestProfile

__version__ = version()

TRANSPORTS = ("default", "local", "files", "arena", "ucx-tcp", "ucx-rdma")


class CommunicationManager(_Comm):
    """One entity's tensor transport (the reference's TensorCommunicationManager).

    CommunicationManager(entity, *, transport="default", shm_dir=None, shm_namespace=None,
                         session_id=None, entity_index=-1, send=None, enable_prof=False,
                         device=None)

    transport: "default" (MSTAR_SHM_ARENA picks files or arena), "local", "files", "arena",
    "ucx-tcp", "ucx-rdma" (or the protocol names "shm", "tcp", "rdma").
    send: where ACKs go — an mstar_c.Mesh, a callable send(peer, Message), or an object with
    such a send method (the reference's communicator); None: nothing can leave the process.
    device: None or "cpu" for host tensors; "cuda" / "cuda:N" gives the manager a CUDA backend
    (CUDA tensors in, CUDA tensors out; NotSupportedError when libmstar has no CUDA).

    Storing takes the producer's tensors without copying them (DLPack): each stays alive until
    the manager lets go. get_tensor returns an mstar_c.Tensor view that torch.from_dlpack and
    numpy.from_dlpack read in place. close(), `with` and garbage collection all release
    everything the manager created (files, segments, mappings).
    """

    # store_and_return_tensor_info, register_for_send, start_read_tensors and get_ready_tensors
    # are the extension's own methods (documented there): they run once or twice per handoff,
    # and a Python frame around each would be a cost of every handoff.

    def __init__(self, entity: str, *, entity_index: int = -1, **kw):
        if entity_index == -1:
            entity_index = _default_entity_index(entity)
        super().__init__(entity, entity_index=entity_index, **kw)
        _live.add(self)

    def store_and_populate_graph_edges(self, request_id: Rid, outputs: Mapping[str, Sequence],
                                       edges: Sequence[GraphEdge], **params) -> None:
        """Store outputs and set each edge's tensor_info to the descriptors of its signal
        (edges whose signal was not output keep theirs)."""
        infos = self.store_and_return_tensor_info(request_id, outputs, **params)
        for edge in edges:
            if edge.name in infos:
                edge.tensor_info = [copy.copy(i) for i in infos[edge.name]]

    @property
    def req_tx_info(self) -> RequestProfile:
        """The reference's req_tx_info: req_tx_info[rid] is {edge_name: TxInfo}."""
        return RequestProfile(self.get_tx_info, lambda i: i.edge_name)

    @property
    def req_rx_info(self) -> RequestProfile:
        """The reference's req_rx_info: req_rx_info[rid] is {(source_entity, edge_name): RxInfo}."""
        return RequestProfile(self.get_rx_info, lambda i: (i.source_entity, i.edge_name))

    def __repr__(self) -> str:
        if self.closed:
            return "<mstar_c.CommunicationManager closed>"
        return (f"<mstar_c.CommunicationManager entity={self.entity!r} "
                f"transport={self.transport!r} tensors={self.num_tensors}>")


def _default_entity_index(entity: str) -> int:
    """The fixed index of a well-known name, else the mesh's rule for other names (1000 +
    the byte sum of the name mod 1000), so managers need no index of their own."""
    try:
        return entity_index(entity)
    except NotFoundError:  # noqa: F405
        return 1000 + sum(entity.encode()) % 1000
    except InvalidArgumentError:  # noqa: F405
        return -1  # let the manager report the bad name


# Managers still open at interpreter exit are closed then, so nothing is left in the shm
# directory even when a module global keeps one alive to the end.
_live: "weakref.WeakSet[CommunicationManager]" = weakref.WeakSet()


@atexit.register
def _close_live_managers() -> None:
    for m in list(_live):
        try:
            m.close()
        except Error:
            pass


def to_torch(t: Tensor):
    """torch.from_dlpack(t), also for bool tensors on torch versions whose DLPack lacks bool."""
    import torch
    if t.dtype == "bool":
        return torch.utils.dlpack.from_dlpack(t.__dlpack__(bool_as_uint8=True)).view(torch.bool)
    return torch.from_dlpack(t)


class _AsUint8:
    """A bool view exported as uint8, for consumers whose DLPack lacks bool."""

    def __init__(self, t: Tensor):
        self._t = t

    def __dlpack__(self, **kw):
        return self._t.__dlpack__(bool_as_uint8=True)

    def __dlpack_device__(self):
        return self._t.__dlpack_device__()


def to_numpy(t: Tensor):
    """numpy.from_dlpack(t), also for bool tensors on NumPy versions whose DLPack lacks bool."""
    import numpy
    if t.dtype == "bool":
        return numpy.from_dlpack(_AsUint8(t)).view(numpy.bool_)
    return numpy.from_dlpack(t)


def create_tensor_communication_manager(protocol="shm", my_entity_id=None, hostname=None,
                                        device=None, communicator=None,
                                        metadata_server="P2PHANDSHAKE", tcp_transfer_device="",
                                        shm_dir=None, enable_prof=False,
                                        **kw) -> CommunicationManager:
    """The reference's factory, with its parameters: protocol "shm" (MSTAR_SHM_ARENA: files or
    arena), "tcp" (ucx-tcp) or "rdma" (ucx-rdma), or an enum whose value or name is one;
    communicator is the manager's send (a Mesh, a callable, or an object with send(peer, msg));
    device None, "cpu" or "cuda:N". hostname is accepted and not needed (UCX finds the host's
    addresses itself). metadata_server: only the reference's default "P2PHANDSHAKE" (UCX
    exchanges its worker addresses in band, in the descriptors); tcp_transfer_device: only ""
    (UCX picks its interfaces from UCX_NET_DEVICES). Other keywords are CommunicationManager's
    (entity for my_entity_id, send for communicator, transport for protocol)."""
    if not isinstance(protocol, str):  # the reference's CommProtocol
        value = getattr(protocol, "value", None)
        protocol = value if isinstance(value, str) else getattr(protocol, "name", "").lower()
    entity = kw.pop("entity", my_entity_id)
    if entity is None:
        raise TypeError("create_tensor_communication_manager() missing required argument "
                        "'my_entity_id'")
    if communicator is not None:
        kw["send"] = communicator
    if metadata_server not in (None, "", "P2PHANDSHAKE"):
        raise NotSupportedError(  # noqa: F405
            f"metadata_server={metadata_server!r}: UCX exchanges its worker addresses in the "
            "descriptors (the P2P handshake); there is no metadata server to name")
    if tcp_transfer_device:
        raise NotSupportedError(  # noqa: F405
            f"tcp_transfer_device={tcp_transfer_device!r}: UCX picks its network interfaces "
            "from the environment; set UCX_NET_DEVICES instead")
    del hostname  # accepted: the transport finds the host's own addresses
    return CommunicationManager(entity, transport=kw.pop("transport", protocol), device=device,
                                shm_dir=shm_dir, enable_prof=enable_prof, **kw)


def error_class(status: int) -> type:
    """The exception class raised for a library status code."""
    return _BY_STATUS.get(status, Error)


__all__ = [
    "CommunicationManager", "Mesh", "Tensor", "Loan", "Completion", "TensorPointerInfo", "GraphEdge",
    "ShardingConfig", "ShardGroup", "StoredOutputs", "Message", "ReceivedMessage", "TxInfo", "RxInfo",
    "ReadFailure", "create_tensor_communication_manager", "fanout", "version",
    "built_with_cuda", "entity_index", "dtype_size", "status_name", "set_log_level",
    "error_class", "TRANSPORTS", "Error", "to_torch", "to_numpy",
] + [cls.__name__ for cls in _BY_STATUS.values()]
