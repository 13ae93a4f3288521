"""crucible Triton worker: runs one Triton candidate in a sandboxed process, as crucible-cuda-worker runs a CUDA one.

Started by the evaluator with the node's own Python (PyTorch and Triton installed there; nothing is installed at
run time), its socket on fd 3, stdio on /dev/null. The process model is the CUDA worker's:
  1. trusted start, before the job: PyTorch, Triton and a CUDA context; one trusted Triton kernel compiled and run,
     so everything Triton does once per process (ptxas and driver probes, its launcher library) is done;
  2. the load request: device memory lent by the evaluator (CUDA IPC), null calls served by trusted code;
  3. the load stage, confined by Landlock (the Python's trees and the candidate's build, read-only) and sealed by
     seccomp (read-only files, no processes, no network): the candidate's module runs and
     one warm-up call loads its kernels from the per-candidate cache that the compile step filled (this process
     never compiles: ptxas could not run here);
  4. the run stage, sealed tighter: each doorbell runs one call on the candidate's stream, bracketed by events and
     followed by a device synchronisation.
Timing that counts is the evaluator's own clock; the events here are a hint it never lets make a call look faster.

Usage: python3 -I worker.py --device N --support LIB --warm-cache DIR
"""
import ctypes
import errno
import gc
import json
import linecache
import mmap
import os
import socket
import sys
import time

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
from crucible_triton import confine, protocol  # noqa: E402

SYS = {"read": 0, "write": 1, "open": 2, "openat": 257, "rt_sigaction": 13, "close": 3, "fstat": 5, "newfstatat": 262, "poll": 7, "lseek": 8, "sched_yield": 24, "nanosleep": 35, "getpid": 39,
       "fcntl": 72, "getcwd": 79, "mkdir": 83, "readlink": 89, "getrusage": 98, "sysinfo": 99,
       "sched_getaffinity": 204, "getdents64": 217, "clock_gettime": 228, "clock_nanosleep": 230,
       "epoll_wait": 232, "ppoll": 271, "epoll_pwait": 281, "mkdirat": 258, "readlinkat": 267,
       "futex": 202, "pread64": 17}
CUDA_HOST_REGISTER_MAPPED, CUDA_HOST_REGISTER_READ_ONLY = 2, 8
CU_STREAM_LEGACY, CU_STREAM_PER_THREAD, CU_STREAM_WAIT_VALUE_GEQ = 1, 2, 0
DTYPES = {}  # crucible_dtype -> (torch dtype, typestr of the __cuda_array_interface__, element bytes)


def arg(name, default=None):
    return sys.argv[sys.argv.index(name) + 1] if name in sys.argv else default



def sleep_until_go(control, libc, parent, expected):
    """Sleeps on the control block's futex until the evaluator rings call `expected` (a spinning worker would spend
    the CPU time its calls are timed by); ends the process when the evaluator that started it is gone."""
    address = ctypes.c_void_p(ctypes.addressof(control) + protocol.Control.go.offset)
    second = Timespec(1, 0)
    while control.go != expected:
        control.worker_sleeping = 1
        seen = control.go
        if seen != expected:
            libc.syscall(ctypes.c_long(SYS["futex"]), address, ctypes.c_int(0), ctypes.c_uint32(seen),
                         ctypes.byref(second), None, ctypes.c_int(0))
        control.worker_sleeping = 0
        if os.getppid() != parent:
            os._exit(0)

class Worker:
    def __init__(self):
        self.device = int(arg("--device", "0"))
        self.support = ctypes.CDLL(arg("--support"))
        self.libc = ctypes.CDLL(None, use_errno=True)
        self.parent = os.getppid()
        self.control = None
        self.wait_value = None  # cuStreamWaitValue32, once the release page is mapped (queued launches)
        self.start_error = ""
        try:
            self.start_device()
        except Exception as e:  # reported in the load reply, as the CUDA worker does
            self.start_error = "device: " + one_line(e)

    # ---- 1. trusted start ----------------------------------------------------------------------------------------
    def start_device(self):
        if protocol.layout() != protocol.native_layout(self.support):
            raise RuntimeError("the worker protocol's Python mirror does not match the native layout")
        os.environ["TRITON_CACHE_DIR"] = arg("--warm-cache")
        os.environ["PATH"] = "/usr/local/cuda/bin:/usr/bin:/bin"  # gcc (Triton's driver library) runs `as` from PATH
        os.environ["TRITON_F32_DEFAULT"] = "ieee"  # float32 tasks are evaluated at float32 precision, TF32 off
        global torch, triton
        import torch
        import triton
        import triton.language as tl
        DTYPES.update({0: (torch.float32, "<f4", 4), 1: (torch.float16, "<f2", 2), 2: (torch.bfloat16, "<i2", 2),
                       3: (torch.float64, "<f8", 8), 4: (torch.int32, "<i4", 4), 5: (torch.int64, "<i8", 8),
                       6: (torch.bool, "|b1", 1)})
        torch.cuda.set_device(self.device)
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        self.stream = self.candidate_stream()
        torch.cuda.set_stream(self.stream)
        self.start_event = torch.cuda.Event(enable_timing=True)
        self.end_event = torch.cuda.Event(enable_timing=True)
        self.warm_triton(triton, tl)
        self.coverage = self.support.crucible_coverage_start() == 0
        self.support.crucible_coverage_end.restype = ctypes.c_double
        self.cudart = self.find_cudart()

    def warm_triton(self, triton, tl):
        src = ("import triton\nimport triton.language as tl\n\n\n@triton.jit\ndef crucible_warm_kernel(x, n, "
               "B: tl.constexpr):\n    o = tl.arange(0, B)\n    tl.store(x + o, tl.load(x + o, mask=o < n) + 1, "
               "mask=o < n)\n")
        module = load_module("<crucible-warm>", src)
        x = torch.zeros(16, device=f"cuda:{self.device}")
        module["crucible_warm_kernel"][(1,)](x, 16, B=16)
        torch.cuda.synchronize()
        if float(x.sum()) != 16.0:
            raise RuntimeError("the trusted warm-up kernel gave a wrong result")

    def find_cudart(self):
        with open("/proc/self/maps") as maps:
            for line in maps:
                path = line.split()[-1]
                if "/libcudart.so" in path:
                    lib = ctypes.CDLL(path)
                    lib.cudaIpcOpenMemHandle.argtypes = [ctypes.POINTER(ctypes.c_void_p), IpcHandle, ctypes.c_uint]
                    return lib
        raise RuntimeError("PyTorch's CUDA runtime library is not loaded")

    # ---- 2. the job ----------------------------------------------------------------------------------------------
    def run(self):
        if self.parent == 1:
            return 2
        sock = socket.socket(fileno=protocol.SOCKET_FD)
        self.sock = sock
        hello = protocol.Hello(protocol.MAGIC, os.getpid())
        sock.send(bytes(hello))
        try:
            data, fds, _, _ = socket.recv_fds(sock, ctypes.sizeof(protocol.LoadRequest), 2)
        except OSError:
            return 3
        if len(data) != ctypes.sizeof(protocol.LoadRequest) or len(fds) not in (1, 2):
            return 3
        request = protocol.LoadRequest.from_buffer_copy(data)
        if (request.magic != protocol.MAGIC or request.num_sets > protocol.MAX_SETS or
                request.num_inputs + request.num_outputs > protocol.MAX_TENSORS):
            return 3
        if self.start_error:
            return self.fail(10, self.start_error)
        self.arena = mmap.mmap(fds[0], request.arena_bytes, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        os.close(fds[0])
        self.control = protocol.Control.from_buffer(self.arena)
        self.support.crucible_note_crashes(ctypes.c_void_p(ctypes.addressof(self.control)))
        try:
            base = self.attach(request)
        except Exception as e:
            return self.fail(11, "cudaIpcOpenMemHandle: " + one_line(e))
        if len(fds) == 2:
            self.prepare_hold(fds[1])

        c = self.control
        seq = 1
        tensors = [[self.view(base, request.tensors[s][t]) for t in range(request.num_inputs + request.num_outputs)]
                   for s in range(request.num_sets)]
        ni = request.num_inputs
        self.sets = [(list(ts[:ni]), list(ts[ni:])) for ts in tensors]
        for _ in range(request.null_calls):
            self.wait_for_call(seq)
            self.before_null_call()
            if not self.call(None, None, None):
                return self.fail(12, "device: " + c.cuda_error_text.decode(errors="replace"))
            c.done = seq
            seq += 1

        # The candidate, as the evaluator's compile step left it.
        path = request.so_path.decode()
        candidate_dir = os.path.dirname(path)
        try:
            self.read_candidate(path)
        except (OSError, ValueError, KeyError) as e:
            return self.fail(6, "cannot read the candidate: " + one_line(e))
        for name in self.own_kernels:
            self.support.crucible_coverage_own_kernel(name.encode())
        os.environ["TRITON_CACHE_DIR"] = os.path.join(candidate_dir, "triton-cache")

        # ---- 3. the load stage -----------------------------------------------------------------------------------
        needs, ioctl_fds = self.device_needs()
        why = confine.confine(self.support, self.readable_paths(candidate_dir))
        if why:
            return self.fail(15, "cannot confine the worker's files (Landlock): " + why)
        # Filters stack and the strictest answer wins: a soft refusal must be in every stage's filter.
        soft = [SYS["mkdir"], errno.EROFS, SYS["mkdirat"], errno.EROFS, SYS["rt_sigaction"], errno.EPERM]
        load_extra = needs + [SYS["getcwd"], SYS["getdents64"], SYS["readlink"], SYS["readlinkat"], SYS["fcntl"],
                              SYS["sysinfo"]]
        if self.seal(self.support.crucible_seal_load_stage, protocol.SOCKET_FD, load_extra, ioctl_fds, soft) != 0:
            return self.fail(5, "cannot install the load-stage seccomp filter")
        try:
            self.load_candidate()
        except Exception as e:
            return self.fail(7, self.load_failure(e))
        if not self.reply(True, ""):
            return 8
        sock.close()
        # PyTorch reads files and changes signal handlers while it reports a CUDA error (a lost context): refused with
        # an error, not trapped, so the verdict is the CUDA error and not the sandbox's.
        run_soft = soft + [SYS["open"], errno.EACCES, SYS["openat"], errno.EACCES, SYS["close"], errno.EPERM,
                           SYS["fstat"], errno.EACCES, SYS["newfstatat"], errno.EACCES, SYS["lseek"], errno.EPERM,
                           SYS["getcwd"], errno.EACCES, SYS["readlink"], errno.EACCES, SYS["fcntl"], errno.EPERM]
        if self.seal(self.support.crucible_seal_run_stage, os.getpid(), needs, ioctl_fds, run_soft) != 0:
            return 9

        # ---- 4. the run stage ------------------------------------------------------------------------------------
        # No cyclic garbage collection from here on: a full collection scans every object PyTorch and Triton made,
        # and one that began inside a call would be timed as the candidate's. What the candidate's calls leave in
        # reference cycles stays until the worker ends; it serves one candidate.
        gc.freeze()
        gc.disable()
        sets = request.num_sets
        while True:
            self.wait_for_call(seq)
            s = c.set
            if s == sets:  # a sync: every earlier call has returned
                c.done = seq
            elif s < 0 or s > sets:
                return 0  # the evaluator's way of saying goodbye
            else:
                usable = self.call(self.forward_for(s), *self.sets[s])
                c.done = seq
                if not usable:
                    os._exit(13)  # the CUDA context is lost (the error is in the control block)
            seq += 1

    # ---- the candidate: what a Triton candidate is (a worker for another format overrides these) -----------------
    def candidate_stream(self):
        return torch.cuda.Stream(self.device)

    def read_candidate(self, path):
        """Its source and the names of its kernels, as the compile step wrote them."""
        with open(path, "rb") as f:
            self.source = f.read().decode("utf-8", errors="replace")
        with open(os.path.join(os.path.dirname(path), "gate.json")) as f:
            self.own_kernels = json.load(f)["kernels"]

    def readable_paths(self, candidate_dir):
        return confine.worker_paths(os.path.dirname(HERE), candidate_dir, arg("--warm-cache"))

    def load_candidate(self):
        module = load_module("candidate.py", self.source)  # the name the compile step used, and the user sees
        self.forward = module["crucible_forward"]
        try:
            inputs, outputs = self.sets[0]
            self.forward(inputs, outputs)  # loads the compiled kernels from the cache while files may still be read
            torch.cuda.synchronize()
        except Exception:
            pass  # decided by the calls the evaluator makes, which fail the same way (an error, a lost context)

    def load_failure(self, e):
        return "loading the candidate: " + one_line(e)

    def forward_for(self, s):
        return self.forward

    def call(self, forward, inputs, outputs):
        c = self.control
        profile = forward is not None and c.profile and self.coverage
        if profile:
            self.support.crucible_coverage_begin()
        c.seen_ns = time.monotonic_ns()
        seq = c.go
        rc, error = 0, None
        try:
            held = c.hold and self.wait_value is not None and self.hold_streams(seq)
            self.start_event.record(self.stream)
            try:
                if forward is not None:
                    result = forward(inputs, outputs)
                    rc = result if isinstance(result, int) and not isinstance(result, bool) else 0
            except Exception as e:
                rc, error = 1, e
            self.end_event.record(self.stream)
            c.launched_ns = time.monotonic_ns()
            if held:
                c.launched = seq  # the evaluator releases the GPU from here
                self.wait_for_release(seq)
            torch.cuda.synchronize()
        except Exception as e:  # the context is lost with the error (events and syncs fail from then on)
            error = e
            rc = protocol.DEVICE_ERROR_RC
        c.synced_ns = time.monotonic_ns()
        if error is not None and (rc == protocol.DEVICE_ERROR_RC or "CUDA" in one_line(error)):
            c.cuda_error = 1
            c.cuda_error_text = ("CUDA error: " + one_line(error))[:250].encode()
            c.rc = protocol.DEVICE_ERROR_RC
            return False
        share = self.support.crucible_coverage_end() if profile else -1.0
        # Profiled and nothing ran on the GPU: none of the time was the candidate's own (not "unknown").
        c.own_kernel_share = 0.0 if profile and share < 0 else share
        c.device_ms = self.start_event.elapsed_time(self.end_event)
        if rc == 0:
            try:
                rc = self.deliver()
            except Exception as e:  # a CUDA error while delivering: the context is lost as above
                c.cuda_error = 1
                c.cuda_error_text = ("CUDA error: " + one_line(e))[:250].encode()
                c.rc = protocol.DEVICE_ERROR_RC
                return False
        c.rc = rc if -2**31 <= rc < 2**31 else 1
        return True

    def before_null_call(self):
        """Trusted work a null call does beside nothing, so that the evaluator's measure of a call's fixed cost
        includes it (see deliver)."""

    def deliver(self):
        """After the call's events, profile and synchronisation: the harness's own work on its results, 0 or a
        refusal's return code. A Triton candidate writes into the evaluator's buffers itself: nothing to do."""
        return 0

    # ---- queued launches (eval_settings.h) -----------------------------------------------------------------------
    def prepare_hold(self, fd):
        """Maps the release page for the GPU, read-only from a read-only descriptor (nothing here can release its own
        GPU early), so that a held call's streams wait for the evaluator's release. Without it calls run as launched
        (hold_ready stays 0)."""
        mmap_fn = self.libc.mmap
        mmap_fn.restype = ctypes.c_void_p
        mmap_fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
        page = mmap_fn(None, protocol.RELEASE_BYTES, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        os.close(fd)
        if page in (None, ctypes.c_void_p(-1).value):
            return
        try:
            cuda = ctypes.CDLL("libcuda.so.1")  # loaded by PyTorch already: found without opening a file
            wait = cuda.cuStreamWaitValue32_v2
        except (OSError, AttributeError):
            return
        wait.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint32, ctypes.c_uint]
        wait.restype = ctypes.c_int
        register, device_pointer = self.cudart.cudaHostRegister, self.cudart.cudaHostGetDevicePointer
        register.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint]
        device_pointer.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p, ctypes.c_uint]
        device = ctypes.c_void_p()
        if (register(page, protocol.RELEASE_BYTES, CUDA_HOST_REGISTER_MAPPED | CUDA_HOST_REGISTER_READ_ONLY) != 0 or
                device_pointer(ctypes.byref(device), page, 0) != 0):
            self.cudart.cudaGetLastError()
            return
        self.release_address = device.value
        self.release_word = ctypes.c_uint32.from_address(page)
        self.wait_value = wait
        self.control.hold_ready = 1

    def wait_for_release(self, seq):
        """Until the evaluator releases call `seq` (microseconds): a worker whose evaluator died before releasing ends
        here, instead of waiting for ever on a GPU that never starts."""
        spins = 0
        while (self.release_word.value - seq) & 0xFFFFFFFF >= 0x80000000:
            spins += 1
            if spins % 4096 == 0 and os.getppid() != self.parent:
                os._exit(0)

    def hold_streams(self, seq):
        """The candidate's stream, and the default streams it might name instead, wait for the release of call `seq`."""
        for stream in (self.stream.cuda_stream, CU_STREAM_LEGACY, CU_STREAM_PER_THREAD):
            if self.wait_value(stream, self.release_address, seq, CU_STREAM_WAIT_VALUE_GEQ) != 0:
                return False
        return True

    # ---- helpers -------------------------------------------------------------------------------------------------
    def wait_for_call(self, expected):
        """Spins a quarter second after the last call, then sleeps on the futex; ends with a vanished evaluator."""
        c = self.control
        start = time.monotonic()
        while time.monotonic() - start < 0.25:
            if c.go == expected:
                return
        sleep_until_go(c, self.libc, self.parent, expected)

    def attach(self, request):
        if request.cuda_device < 0:
            raise RuntimeError("a Triton worker needs device memory from the evaluator")
        handle = IpcHandle()
        ctypes.memmove(ctypes.byref(handle), bytes(request.device_arena_handle), protocol.IPC_HANDLE_BYTES)
        base = ctypes.c_void_p()
        err = self.cudart.cudaIpcOpenMemHandle(ctypes.byref(base), handle, 1)  # lazy peer access
        if err != 0:
            raise RuntimeError(f"CUDA error {err}")
        return base.value

    def view(self, base, desc):
        dtype, typestr, size = DTYPES[desc.dtype]
        shape = tuple(desc.shape[i] for i in range(desc.ndim))
        strides = tuple(desc.strides[i] * size for i in range(desc.ndim))
        tensor = torch.as_tensor(ArrayView(base + desc.offset, shape, strides, typestr), device=f"cuda:{self.device}")
        return tensor.view(dtype) if dtype == torch.bfloat16 else tensor

    def device_needs(self):
        needs = [SYS[n] for n in ("sched_yield", "poll", "ppoll", "read", "write", "epoll_wait", "epoll_pwait",
                                  "clock_gettime", "clock_nanosleep", "nanosleep", "sched_getaffinity", "getrusage")]
        fds = []
        for name in os.listdir("/proc/self/fd"):
            try:
                if os.readlink(f"/proc/self/fd/{name}").startswith("/dev/nvidia"):
                    fds.append(int(name))
            except OSError:
                pass
        return needs, fds

    def seal(self, install, first, syscalls, fds, soft):
        return install_filter(install, first, syscalls, fds, soft)

    def reply(self, ok, error):
        return send_load_reply(self.sock, ok, error)

    def fail(self, code, error):
        self.reply(False, error)
        return code


class IpcHandle(ctypes.Structure):
    _fields_ = [("reserved", ctypes.c_char * protocol.IPC_HANDLE_BYTES)]


class Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class ArrayView:
    """Device memory described to torch.as_tensor, which wraps it without copying."""

    def __init__(self, pointer, shape, strides, typestr):
        self.__cuda_array_interface__ = {"shape": shape, "strides": strides, "typestr": typestr,
                                         "data": (pointer, False), "version": 2}


def install_filter(install, first, syscalls, fds, soft):
    """Installs a seccomp stage through the support library: the allowed system calls, the GPU's ioctl descriptors,
    and (number, errno) pairs refused softly."""
    s = (ctypes.c_long * max(len(syscalls), 1))(*syscalls)
    f = (ctypes.c_int * max(len(fds), 1))(*fds)
    k = (ctypes.c_long * max(len(soft), 1))(*soft)
    return install(first, s, len(syscalls), f, len(fds), k, len(soft) // 2)


def send_load_reply(sock, ok, error):
    """The load stage's answer to the evaluator; False when it is gone."""
    reply = protocol.LoadReply(protocol.MAGIC, 1 if ok else 0, error.encode("utf-8", errors="replace")[:1023])
    try:
        sock.send(bytes(reply))
        return True
    except OSError:
        return False


def load_module(path, source):
    """Runs a module's source from memory. Triton reads a kernel's source through linecache, which is filled here,
    so nothing is read from disk."""
    lines = source.splitlines(keepends=True)
    linecache.cache[path] = (len(source), None, lines, path)
    namespace = {"__name__": "crucible_candidate", "__file__": path}
    exec(compile(source, path, "exec"), namespace)
    return namespace


def one_line(e):
    text = f"{type(e).__name__}: {e}"
    return " ".join(text.split())[:900]


if __name__ == "__main__":
    sys.exit(Worker().run())
