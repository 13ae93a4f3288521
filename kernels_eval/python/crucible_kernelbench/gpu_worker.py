"""crucible KernelBench GPU worker: runs one KernelBench-format candidate (`class ModelNew(nn.Module)` with CUDA
extensions) on a GPU, in the Triton worker's process model (crucible_triton/worker.py: trusted start with its own
CUDA context, device memory lent by the evaluator, the load stage confined by Landlock and sealed by seccomp, the run
stage sealed tighter, each call bracketed by events and followed by a device synchronisation). What differs is the
candidate: its plan is read, its prebuilt extensions imported and ModelNew built and bound to the task's parameters
by name (model.py), exactly as on the CPU. An answer's @triton.jit kernels were compiled into its build's
triton-cache by the evaluator's compile step (compile_triton.py), where the Triton worker's TRITON_CACHE_DIR points;
one call in the load stage loads them from there.

Calls run on the device's default stream, as KernelBench runs them: its answers launch their kernels there
(`kernel<<<grid, block>>>` without a stream), and a side stream would race with them. Timing that counts is the
evaluator's own clock.

Usage: python3 -I gpu_worker.py --device N --support LIB --warm-cache DIR
"""
import ctypes
import os
import sys

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
from crucible_kernelbench.model import LoadedModel, Refused, read_plan  # noqa: E402
from crucible_triton import confine, protocol  # noqa: E402
from crucible_triton import worker as triton_worker  # noqa: E402
from crucible_triton.worker import load_module, one_line  # noqa: E402

# What importing a module built for this interpreter asks of the kernel beyond a Triton candidate's: its identity
# (getuid, getgid, geteuid, getegid) and uname, which reveal nothing its own /proc/self would not.
EXTENSION_IMPORT_SYSCALLS = [102, 104, 107, 108, 63]
# What cuDNN asks at its first convolution (seen on an H200 as a kill of the load stage's warm call): the range of
# scheduling priorities, sched_get_priority_max and _min, constants of the kernel.
CUDNN_SYSCALLS = [146, 147]
FILE_READ_SYSCALLS = ["lseek", "fstat", "newfstatat", "pread64", "futex"]


class GpuWorker(triton_worker.Worker):
    def start_device(self):
        super().start_device()
        # Imported here, trusted: on import it looks for a CUDA toolkit (access(2), `which nvcc`), which the load
        # stage's filter refuses.
        import torch.utils.cpp_extension  # noqa: F401

    def candidate_stream(self):
        torch = triton_worker.torch
        return torch.cuda.default_stream(self.device)

    def read_candidate(self, path):
        self.plan = read_plan(path)
        # An extension without kernels of its own (its C++ calls PyTorch's operators) has none here: the profiler
        # then finds no GPU time of its own, as is the case.
        self.own_kernels = list(self.plan.get("kernels", [])) + list(self.plan.get("cuda_kernels", []))

    def readable_paths(self, candidate_dir):
        paths = confine.worker_paths(os.path.dirname(HERE), candidate_dir, triton_worker.arg("--warm-cache"))
        return paths + [os.path.dirname(e["path"]) for e in self.plan["extensions"]]

    def device_needs(self):
        needs, fds = super().device_needs()
        extra = EXTENSION_IMPORT_SYSCALLS + CUDNN_SYSCALLS + [triton_worker.SYS[n] for n in FILE_READ_SYSCALLS]
        return needs + extra, fds

    def load_candidate(self):
        torch = triton_worker.torch
        self.__dict__.pop("null_results", None)  # the null calls are over: an output's worth of memory back
        # Where the answer has extensions, a call must run one of their functions; an answer of Triton kernels
        # alone is seen by the profiler instead.
        self.loaded = LoadedModel(torch, self.plan, self.sets, load_module,
                                  count_calls=bool(self.plan["extensions"]),
                                  device=torch.device("cuda", self.device))
        self.warm_call()

    def warm_call(self):
        """One call while files may still be read: Triton loads the answer's kernels from the cache its compile step
        filled (compile_triton.py; TRITON_CACHE_DIR names it), as the run stage cannot open files and this process
        never compiles, and the libraries behind PyTorch's operators that an answer keeps (cuDNN's convolutions, which
        load parts of themselves at their first call) are loaded. Whether the answer works is decided by the
        evaluator's calls, which fail the same way."""
        torch = triton_worker.torch
        try:
            self.loaded.call(0)
            torch.cuda.synchronize()
        except Exception:
            pass

    def load_failure(self, e):
        return str(e) if isinstance(e, Refused) else "loading the candidate: " + one_line(e)

    def forward_for(self, s):
        return lambda inputs, outputs: self.call_model(s)

    def before_null_call(self):
        """A null call delivers a result of the outputs' shapes as a call does, so that the fixed cost the evaluator
        takes off each sample includes the copy into its buffers, which KernelBench does not time."""
        torch = triton_worker.torch
        outputs = self.sets[0][1]
        if not hasattr(self, "null_results"):
            self.null_results = [torch.empty_like(out) for out in outputs]
        self.pending = lambda: [self.device_copy(out, r) for r, out in zip(self.null_results, outputs)]

    def device_copy(self, out, r):
        """out <- r, both contiguous on this GPU, by the CUDA runtime itself: an operator an extension registered
        (TORCH_LIBRARY_IMPL of aten::copy_) never runs here. The symbol gate refuses such registrations too."""
        if not (out.is_contiguous() and r.is_contiguous()):
            raise Refused("output_type", "a result that is not contiguous after forward")
        rc = self.cudart.cudaMemcpyAsync(ctypes.c_void_p(out.data_ptr()), ctypes.c_void_p(r.data_ptr()),
                                         ctypes.c_size_t(r.numel() * r.element_size()), 3, None)  # device to device
        if rc != 0:
            raise RuntimeError(f"CUDA error {rc} in cudaMemcpyAsync while delivering the result")

    def deliver(self):
        pending, self.pending = getattr(self, "pending", None), None
        if pending is None:
            return 0
        try:
            pending()
        except Refused as e:
            return self.refuse(str(e))
        except Exception as e:  # a CUDA error loses the context (the caller ends the worker); anything else refuses
            if "CUDA" in one_line(e):
                raise
            return self.refuse("python_exception: " + one_line(e))
        triton_worker.torch.cuda.synchronize()
        return 0

    def call_model(self, s):
        """One call, its result kept for `deliver`; a refusal or the candidate's own exception is reported as a
        classified refusal. A CUDA error propagates: the worker's call treats it as the device's (the context is
        lost)."""
        try:
            result, outputs = self.loaded.compute(s), self.sets[s][1]
            self.pending = lambda: self.loaded.deliver(result, outputs, self.device_copy)
            return 0
        except Refused as e:
            return self.refuse(str(e))
        except Exception as e:
            if "CUDA" in one_line(e):
                raise
            return self.refuse("python_exception: " + one_line(e))

    def refuse(self, text):
        self.control.cuda_error_text = text.encode("utf-8", errors="replace")[:250]
        return protocol.REFUSAL_RC


if __name__ == "__main__":
    sys.exit(GpuWorker().run())
