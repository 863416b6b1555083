# SPDX-License-Identifier: Apache-2.0
"""A dedicated NCCL communicator per (process group, device) for
SyncBatchNorm: made with ncclGetUniqueId / ncclCommInitRank on the libnccl
the library itself uses (the one already loaded under the soname
libnccl.so.2: the dynamic loader shares one copy per soname), with the
unique id broadcast from the group's first rank through torch.distributed.
Never torch's private communicator. The communicators live until the
process ends.

Under torch.compile, SyncBatchNorm's lookup (comm_of) is not traced: Dynamo
calls it while tracing (torch.compiler.assume_constant_result), so the
communicator is made then, outside the graph, and its handle enters the
graph as a constant. The compiled graph is guarded on the module's
process_group object (and `always_sync`), not on the default group: a
compiled SyncBatchNorm of the default group keeps the handle of the
communicator of the group that was the default when it was traced."""
from __future__ import annotations

import ctypes
import os
import threading

import torch


class _UniqueId(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_char * 128)]


_lock = threading.Lock()
_comms: dict = {}
_lib = None


def libnccl():
    """The libnccl already in the process (libfusednorm's dependency)."""
    global _lib
    if _lib is None:
        try:
            lib = ctypes.CDLL("libnccl.so.2", mode=os.RTLD_NOLOAD | os.RTLD_GLOBAL)
        except OSError:
            paths = sorted({ln.split()[-1] for ln in open("/proc/self/maps") if "libnccl.so" in ln})
            if not paths:
                raise RuntimeError("libnccl is not loaded: libfusednorm was built without NCCL") from None
            lib = ctypes.CDLL(paths[0])
        lib.ncclGetUniqueId.argtypes = [ctypes.POINTER(_UniqueId)]
        lib.ncclCommInitRank.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_int, _UniqueId, ctypes.c_int]
        lib.ncclGetErrorString.restype = ctypes.c_char_p
        _lib = lib
    return _lib


def _check(rc, what):
    if rc != 0:
        raise RuntimeError(f"{what}: {libnccl().ncclGetErrorString(rc).decode()}")


def comm_for(group, device) -> int:
    """The communicator (an ncclComm_t as an int) of `group` on `device`;
    collective the first time (every rank of the group must call it)."""
    import torch
    import torch.distributed as dist
    key = (id(group), device.index)
    with _lock:
        c = _comms.get(key)
        if c is not None:
            return c
        lib = libnccl()
        rank, world = dist.get_rank(group), dist.get_world_size(group)
        uid = _UniqueId()
        if rank == 0:
            _check(lib.ncclGetUniqueId(ctypes.byref(uid)), "ncclGetUniqueId")
        # The id is 128 raw bytes (NULs inside): copied as memory, not as a C string.
        box = [ctypes.string_at(ctypes.addressof(uid), ctypes.sizeof(uid)) if rank == 0 else None]
        dist.broadcast_object_list(box, src=dist.get_global_rank(group, 0), group=group)
        ctypes.memmove(ctypes.addressof(uid), box[0], ctypes.sizeof(uid))
        comm = ctypes.c_void_p()
        with torch.cuda.device(device):
            _check(lib.ncclCommInitRank(ctypes.byref(comm), world, uid, rank), "ncclCommInitRank")
        _comms[key] = comm.value
        return comm.value


@torch.compiler.assume_constant_result
def comm_of(group, device_index: int, always_sync: bool = False) -> int:
    """SyncBatchNorm's communicator on CUDA device `device_index` for
    process group `group` (None: the default group), or 0 where the
    statistics stay local: torch.distributed not initialized, or a group of
    one rank unless `always_sync`. Collective the first time, as comm_for.
    The arguments are what Dynamo can hand over as constants (a
    ProcessGroup, None, an int, a bool)."""
    import torch.distributed as dist
    if not (dist.is_available() and dist.is_initialized()):
        return 0
    if group is None:
        group = dist.group.WORLD
    if dist.get_world_size(group) == 1 and not always_sync:
        return 0
    return comm_for(group, torch.device("cuda", device_index))
