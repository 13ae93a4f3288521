"""The evaluator-worker protocol (kernels_eval/include/crucible/eval/worker_protocol.h) as ctypes structures. The
worker checks this mirror against the native layout (crucible_protocol_layout in the support library) before it
reads a single field."""
import ctypes

MAGIC = 0x43525543
SOCKET_FD = 3
MAX_DIMS = 8
MAX_TENSORS = 16
MAX_SETS = 8
IPC_HANDLE_BYTES = 64
NULL_CALL = 1000
DEVICE_ERROR_RC = -1000001
REFUSAL_RC = -1000002  # the call was refused; "code: detail" is in the control block's cuda_error_text


class TensorDesc(ctypes.Structure):
    _fields_ = [("dtype", ctypes.c_int32), ("ndim", ctypes.c_int32), ("shape", ctypes.c_int64 * MAX_DIMS),
                ("strides", ctypes.c_int64 * MAX_DIMS), ("offset", ctypes.c_uint64)]


class LoadRequest(ctypes.Structure):
    _fields_ = [("magic", ctypes.c_uint32), ("num_sets", ctypes.c_uint32), ("num_inputs", ctypes.c_uint32),
                ("num_outputs", ctypes.c_uint32), ("arena_bytes", ctypes.c_uint64),
                ("memory_limit_bytes", ctypes.c_uint64), ("cpu_seconds", ctypes.c_uint32),
                ("so_path", ctypes.c_char * 4096), ("cuda_device", ctypes.c_int32), ("null_calls", ctypes.c_uint32),
                ("reusable", ctypes.c_uint32),
                ("device_arena_bytes", ctypes.c_uint64), ("device_arena_handle", ctypes.c_uint8 * IPC_HANDLE_BYTES),
                ("tensors", (TensorDesc * MAX_TENSORS) * MAX_SETS)]


class LoadReply(ctypes.Structure):
    _fields_ = [("magic", ctypes.c_uint32), ("ok", ctypes.c_int32), ("error", ctypes.c_char * 1024)]


class Hello(ctypes.Structure):
    _fields_ = [("magic", ctypes.c_uint32), ("pid", ctypes.c_int32), ("start_us", ctypes.c_uint32),
                ("context_us", ctypes.c_uint32), ("profiler_us", ctypes.c_uint32)]


def _pad(n):
    return ("_pad%d" % n, ctypes.c_uint8 * n)


class Control(ctypes.Structure):
    # The native struct aligns its groups to cache lines (alignas(64)); the padding here reproduces that.
    _fields_ = [("go", ctypes.c_uint32), ("worker_sleeping", ctypes.c_uint32), ("set", ctypes.c_int32),
                ("profile", ctypes.c_int32), _pad(48),
                ("done", ctypes.c_uint32), ("rc", ctypes.c_int32), _pad(56),
                ("crash_signal", ctypes.c_int32), ("crash_code", ctypes.c_int32), ("crash_origin", ctypes.c_int32),
                _pad(4), ("crash_address", ctypes.c_uint64), _pad(40),
                ("device_ms", ctypes.c_float), _pad(4), ("seen_ns", ctypes.c_uint64), ("launched_ns", ctypes.c_uint64),
                ("synced_ns", ctypes.c_uint64), ("own_kernel_share", ctypes.c_float), ("cuda_error", ctypes.c_int32),
                ("cuda_error_text", ctypes.c_char * 256), _pad(24),
                ("launched", ctypes.c_uint32), ("hold", ctypes.c_int32), ("hold_ready", ctypes.c_int32), _pad(52),
                # a reusable worker's reset (CUDA C++ workers only; a Triton worker is single use)
                ("reset_challenge", ctypes.c_uint64), ("reset_checksum", ctypes.c_uint64), ("reset_ok", ctypes.c_int32),
                ("reset_error", ctypes.c_char * 256), _pad(44)]


RELEASE_BYTES = 4096  # the release page: its first word is the sequence number of the call the GPU may start


def layout():
    """The same values, in the same order, as crucible_protocol_layout."""
    c, r = Control, LoadRequest
    return [ctypes.sizeof(c), c.go.offset, c.worker_sleeping.offset, c.set.offset, c.profile.offset, c.done.offset,
            c.rc.offset, c.crash_signal.offset, c.crash_code.offset, c.crash_origin.offset, c.crash_address.offset,
            c.device_ms.offset, c.seen_ns.offset, c.launched_ns.offset, c.synced_ns.offset,
            c.own_kernel_share.offset, c.cuda_error.offset, c.cuda_error_text.offset, c.launched.offset,
            c.hold.offset, c.hold_ready.offset, ctypes.sizeof(r),
            r.so_path.offset, r.cuda_device.offset, r.device_arena_handle.offset, r.tensors.offset,
            ctypes.sizeof(TensorDesc), ctypes.sizeof(LoadReply)]


def native_layout(support):
    out = (ctypes.c_int64 * 64)()
    n = support.crucible_protocol_layout(out, 64)
    return [out[i] for i in range(n)]
