"""crucible KernelBench worker: runs one KernelBench-format candidate (`class ModelNew(nn.Module)`) in a sandboxed
process, on the CPU, as crucible-worker runs a C++ one. Started by the evaluator with the Python whose PyTorch the
candidate's extensions were built against, its socket on fd 3, stdio on /dev/null.

  1. trusted start: PyTorch imported, one thread (candidates and references are timed on one core);
  2. the load request: the evaluator's shared arena (inputs, outputs, the control block); null calls served by the
     same per-call path as the candidate's, around no model;
  3. the load stage, confined by Landlock (the Python's trees, the candidate's build and its extensions, read-only)
     and limits (memory, CPU time, no files written, no processes), then sealed by seccomp: the prebuilt extensions
     are imported, the candidate's module runs with a load_inline that returns them (this process never compiles),
     ModelNew is built with the problem's get_init_inputs(), and its parameters and buffers are matched BY NAME to
     the task's parameter inputs (missing or of another shape: refused with the reason);
  4. the run stage, sealed tighter: each doorbell binds that input set's parameters, runs forward under no_grad,
     checks what it returned (a tensor or a tuple of them, in the task's shapes and dtypes) and copies it into the
     evaluator's output buffers. A call in which none of the extension's functions ran is refused (no_custom_work):
     on the CPU that count is how custom work is established.
Timing is the evaluator's (the worker's CPU clock, seen from outside): the Python around forward, the returned
tensor's allocation and the copy into the evaluator's buffers are all part of a call's time.

Usage: python3 -I worker.py --support LIB
"""
import ctypes
import errno
import gc
import mmap
import os
import resource
import socket
import sys

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
from crucible_triton import confine, protocol  # noqa: E402
from crucible_triton.worker import (SYS, install_filter, load_module, one_line, send_load_reply,  # noqa: E402
                                    sleep_until_go)
from crucible_kernelbench.model import LoadedModel, Refused, read_plan  # noqa: E402



def arg(name, default=None):
    return sys.argv[sys.argv.index(name) + 1] if name in sys.argv else default


class Worker:
    def __init__(self):
        self.support = ctypes.CDLL(arg("--support"))
        self.libc = ctypes.CDLL(None, use_errno=True)
        self.parent = os.getppid()
        self.loaded = None
        global torch
        import torch
        # Imported here, trusted: on import it looks for a CUDA toolkit, running `which nvcc` where it finds none.
        import torch.utils.cpp_extension
        torch.set_num_threads(1)
        self.dtypes = {0: torch.float32, 1: torch.float16, 2: torch.bfloat16, 3: torch.float64, 4: torch.int32,
                       5: torch.int64, 6: torch.bool}

    # ---- the job -------------------------------------------------------------------------------------------------
    def run(self):
        if self.parent == 1:
            return 2
        self.sock = socket.socket(fileno=protocol.SOCKET_FD)
        self.sock.send(bytes(protocol.Hello(protocol.MAGIC, os.getpid())))
        request = self.receive_request()
        if request is None:
            return 3
        self.control = protocol.Control.from_buffer(self.arena)
        self.support.crucible_note_crashes(ctypes.c_void_p(ctypes.addressof(self.control)))
        self.sets = self.tensor_sets(request)
        seq = 1
        for _ in range(request.null_calls):
            self.wait_for_call(seq)
            self.call(None)
            self.control.done = seq
            seq += 1
        try:
            plan = read_plan(request.so_path.decode())
        except (OSError, ValueError, KeyError) as e:
            return self.fail(6, "cannot read the candidate's plan: " + one_line(e))
        why = self.enter_load_stage(request, plan)
        if why:
            return self.fail(5, why)
        try:
            self.loaded = LoadedModel(torch, plan, self.sets, load_module, count_calls=True)
        except Refused as e:
            return self.fail(7, str(e))
        except BaseException as e:  # the candidate's own failure, with its words
            return self.fail(7, "loading the candidate: " + one_line(e))
        if not self.reply(True, ""):
            return 8
        self.sock.close()
        if self.seal_run_stage() != 0:
            return 9
        gc.freeze()  # a collection begun inside a call would be timed as the candidate's
        gc.disable()
        return self.serve(request.num_sets, seq)

    def receive_request(self):
        try:
            data, fds, _, _ = socket.recv_fds(self.sock, ctypes.sizeof(protocol.LoadRequest), 2)
        except OSError:
            return None
        if len(data) != ctypes.sizeof(protocol.LoadRequest) or not fds:
            return None
        for extra in fds[1:]:
            os.close(extra)
        request = protocol.LoadRequest.from_buffer_copy(data)
        if (request.magic != protocol.MAGIC or request.num_sets > protocol.MAX_SETS or
                request.num_inputs + request.num_outputs > protocol.MAX_TENSORS or request.cuda_device >= 0):
            return None
        self.arena = mmap.mmap(fds[0], request.arena_bytes, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        os.close(fds[0])
        return request

    def tensor_sets(self, request):
        ni = request.num_inputs
        sets = []
        for s in range(request.num_sets):
            views = [self.view(request.tensors[s][t]) for t in range(ni + request.num_outputs)]
            sets.append((views[:ni], views[ni:]))
        return sets

    def view(self, desc):
        dtype = self.dtypes[desc.dtype]
        shape = [desc.shape[i] for i in range(desc.ndim)]
        strides = [desc.strides[i] for i in range(desc.ndim)]
        extent = 1 + sum((n - 1) * s for n, s in zip(shape, strides)) if all(shape) else 0
        size = torch.empty((), dtype=dtype).element_size()
        flat = torch.frombuffer(self.arena, dtype=dtype, count=max(extent, 1), offset=desc.offset) \
            if size * max(extent, 1) + desc.offset <= len(self.arena) else None
        if flat is None:
            raise RuntimeError("a tensor lies outside the arena")
        return flat.as_strided(shape, strides)

    # ---- the load stage ------------------------------------------------------------------------------------------
    def enter_load_stage(self, request, plan):
        paths = confine.python_trees(os.path.dirname(HERE)) + [os.path.dirname(plan["candidate"])]
        paths += [e["path"] for e in plan["extensions"]]
        why = confine.confine(self.support, paths)
        if why:
            return "cannot confine the worker's files (Landlock): " + why
        address_space = resource.getrlimit(resource.RLIMIT_AS)[0]
        if request.memory_limit_bytes:
            with open("/proc/self/statm") as f:
                used = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
            address_space = used + request.memory_limit_bytes + (256 << 20)
        for limit, value in ((resource.RLIMIT_AS, address_space), (resource.RLIMIT_FSIZE, 0),
                             (resource.RLIMIT_NPROC, 0), (resource.RLIMIT_CORE, 0),
                             (resource.RLIMIT_CPU, request.cpu_seconds or resource.RLIM_INFINITY)):
            resource.setrlimit(limit, (value, value if limit != resource.RLIMIT_CPU or value < 0 else value + 1))
        soft = [SYS["mkdir"], errno.EROFS, SYS["mkdirat"], errno.EROFS, SYS["rt_sigaction"], errno.EPERM]
        extra = self.needs() + [SYS["getcwd"], SYS["getdents64"], SYS["readlink"], SYS["readlinkat"], SYS["fcntl"],
                                SYS["sysinfo"]]
        if self.seal(self.support.crucible_seal_load_stage, protocol.SOCKET_FD, extra, soft) != 0:
            return "cannot install the load-stage seccomp filter"
        return ""

    # ---- the run stage -------------------------------------------------------------------------------------------
    def serve(self, sets, seq):
        c = self.control
        while True:
            self.wait_for_call(seq)
            s = c.set
            if s == sets:  # a sync: every earlier call has returned
                c.done = seq
            elif s < 0 or s > sets:
                return 0  # the evaluator's way of saying goodbye
            else:
                self.call(s)
                c.done = seq
            seq += 1

    def call(self, s):
        """One call of set s; null calls (s None) take the same path around no model."""
        c = self.control
        try:
            if s is not None:
                self.loaded.call(s)
            c.rc = 0
        except Refused as e:
            self.refuse(str(e))
        except BaseException as e:
            self.refuse("python_exception: " + one_line(e))

    def refuse(self, text):
        c = self.control
        c.cuda_error_text = text.encode("utf-8", errors="replace")[:250]
        c.rc = protocol.REFUSAL_RC

    # ---- helpers -------------------------------------------------------------------------------------------------
    def wait_for_call(self, expected):
        sleep_until_go(self.control, self.libc, self.parent, expected)

    def needs(self):
        # Beyond the Triton worker's: what importing a module built for this interpreter asks of the kernel (its
        # identity: getuid, getgid, geteuid, getegid; uname), which reveals nothing its own /proc/self would not; and
        # the NUMA placement of its own memory that PyTorch's CPU matmul asks for (mbind, get_mempolicy).
        return [SYS[n] for n in ("sched_yield", "poll", "ppoll", "read", "write", "clock_gettime", "clock_nanosleep",
                                 "nanosleep", "sched_getaffinity", "getrusage", "futex", "lseek", "fstat",
                                 "newfstatat", "pread64")] + [102, 104, 107, 108, 63, 237, 239]

    def seal(self, install, first, syscalls, soft):
        return install_filter(install, first, syscalls, [], soft)

    def seal_run_stage(self):
        soft = [SYS["mkdir"], errno.EROFS, SYS["mkdirat"], errno.EROFS, SYS["rt_sigaction"], errno.EPERM,
                SYS["open"], errno.EACCES, SYS["openat"], errno.EACCES, SYS["getcwd"], errno.EACCES,
                SYS["readlink"], errno.EACCES, SYS["fcntl"], errno.EPERM]
        return self.seal(self.support.crucible_seal_run_stage, os.getpid(), self.needs(), soft)

    def reply(self, ok, error):
        return send_load_reply(self.sock, ok, error)

    def fail(self, code, error):
        self.reply(False, error)
        return code


if __name__ == "__main__":
    sys.exit(Worker().run())
