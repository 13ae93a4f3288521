"""The static gate for Triton candidates: reads the source as a syntax tree and refuses what an honest kernel never
needs. It runs before any of the candidate's code does, in the evaluator's trusted step, on machines with or without
a GPU (only the standard library is used).

What it cannot see (work done by PyTorch through a path it misses, a kernel defined and not used for the output) is
caught at run time: the worker counts GPU time by kernel name, and the evaluator checks every output itself.

Usage: python3 gate.py CANDIDATE.py [--dtypes float32,float16] -> one JSON object on stdout:
  {"refusals": [{"code": ..., "detail": ...}], "kernels": [names of @triton.jit functions], "entry_point": bool}
"""
import ast
import json
import sys

# Modules a candidate may import, and the names it may bind them to.
ALLOWED_IMPORTS = {"torch", "triton", "triton.language", "math"}

# torch.<name> a candidate may use: allocation and metadata, never compute.
TORCH_ALLOWED = {
    "empty", "empty_like", "empty_strided", "float32", "float16", "bfloat16", "float64", "int8", "int16", "int32",
    "int64", "uint8", "bool", "float", "half", "long", "int", "Tensor", "Size", "dtype", "device", "finfo", "iinfo",
}
# triton.<name> a candidate may use.
TRITON_ALLOWED = {"jit", "autotune", "Config", "cdiv", "next_power_of_2", "heuristics", "language"}
# Builtins that reach the interpreter's machinery, read files or build code.
FORBIDDEN_BUILTINS = {
    "__import__", "eval", "exec", "compile", "open", "globals", "locals", "vars", "getattr", "setattr", "delattr",
    "breakpoint", "input", "memoryview", "type", "super", "object", "classmethod", "staticmethod", "property", "id",
    "hash", "dir", "help", "exit", "quit",
}
# Tensor methods that compute (their result is PyTorch's work, not the candidate's kernels) or move data between
# devices and dtypes.
TENSOR_COMPUTE_METHODS = {
    "matmul", "mm", "bmm", "addmm", "baddbmm", "einsum", "sum", "mean", "max", "min", "amax", "amin", "softmax",
    "log_softmax", "relu", "exp", "log", "sigmoid", "tanh", "mul", "add", "sub", "div", "pow", "sqrt", "rsqrt",
    "copy_", "fill_", "zero_", "clone", "contiguous", "cumsum", "sort", "topk", "argmax", "argmin", "norm", "var",
    "std", "abs", "clamp", "where", "masked_fill", "cpu", "cuda", "to", "half", "bfloat16", "float", "double",
    "numpy", "tolist", "item", "add_", "mul_", "sub_", "div_", "copy", "conv2d", "linear", "layer_norm", "gelu",
    "transpose", "permute", "t", "T", "mT", "flip", "roll", "repeat", "expand", "index_select", "gather", "scatter",
    "scatter_", "masked_scatter_", "new_zeros", "new_ones", "new_full", "new_tensor", "sigmoid_", "relu_", "exp_",
}
LOW_PRECISION = {"float16", "bfloat16", "half", "float8e4nv", "float8e5", "float8e4b15", "float8_e4m3fn",
                 "float8_e5m2", "fp16", "bf16"}



# The profiler knows a candidate's own kernels by name: a @triton.jit function named as a library's kernel (a mangled
# C++ name, cuBLAS's or cuDNN's) would have that library's time counted as the candidate's.
LIBRARY_KERNEL_PREFIXES = ("_Z", "sm80_", "sm86_", "sm89_", "sm90_", "sm100_", "ampere_", "hopper_", "volta_",
                           "turing_", "nvjet", "cutlass", "cublas", "cudnn", "xmma")


def spoofs_library_kernel(name):
    return name.startswith(LIBRARY_KERNEL_PREFIXES)


class Gate(ast.NodeVisitor):
    def __init__(self, task_dtypes):
        self.refusals = []
        self.kernels = []
        self.launched = set()
        self.entry_point = False
        self.in_kernel = False
        self.aliases = {}  # local name -> module it names ("tl" -> "triton.language")
        self.fp32_only = bool(task_dtypes) and all(d in ("float32", "float64", "int32", "int64", "bool")
                                                   for d in task_dtypes)

    def refuse(self, code, node, detail):
        line = getattr(node, "lineno", 0)
        self.refusals.append({"code": code, "detail": f"line {line}: {detail}"})

    # ---- imports -------------------------------------------------------------------------------------------------
    def visit_Import(self, node):
        for a in node.names:
            if a.name not in ALLOWED_IMPORTS:
                self.refuse("forbidden_import", node, f"import {a.name}: a candidate may import only "
                            "torch, triton, triton.language and math")
            else:
                self.aliases[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]

    def visit_ImportFrom(self, node):
        module = node.module or ""
        if node.level or module not in ALLOWED_IMPORTS:
            self.refuse("forbidden_import", node, f"from {module} import ...: a candidate may import only "
                        "torch, triton, triton.language and math")
            return
        for a in node.names:
            full = f"{module}.{a.name}"
            if full == "triton.language" or module in ("triton.language", "math"):
                self.aliases[a.asname or a.name] = full
            elif module == "triton" and a.name in TRITON_ALLOWED:
                self.aliases[a.asname or a.name] = full
            else:
                self.refuse("torch_compute" if module == "torch" else "forbidden_import", node,
                            f"from {module} import {a.name}: not allowed in a Triton candidate")

    # ---- definitions ---------------------------------------------------------------------------------------------
    def visit_ClassDef(self, node):
        self.refuse("tensor_subclass", node, f"class {node.name}: a candidate defines functions only (a class can "
                    "subclass torch.Tensor or hook __torch_function__ and defer its work)")

    def visit_FunctionDef(self, node):
        decorators = [self.dotted(d.func if isinstance(d, ast.Call) else d) for d in node.decorator_list]
        if any(d in ("triton.jit", "triton.autotune", "triton.heuristics") for d in decorators):
            if "triton.jit" not in decorators:
                self.refuse("no_triton_kernel", node, f"{node.name} is autotuned but not @triton.jit")
            self.kernels.append(node.name)
            if spoofs_library_kernel(node.name):
                self.refuse("harness_reach", node, f"{node.name}: named as a library's kernel, which the profiler "
                            "would count as the candidate's own")
        elif decorators:
            self.refuse("forbidden_decorator", node, f"{node.name}: only @triton.jit, @triton.autotune and "
                        "@triton.heuristics may decorate a function")
        if node.name == "crucible_forward" and node in self.top_level:
            self.entry_point = len(node.args.args) == 2
        for default in node.args.defaults + node.args.kw_defaults:
            if isinstance(default, (ast.List, ast.Dict, ast.Set, ast.Call)):
                self.refuse("cross_call_state", default, f"{node.name}: a mutable default argument keeps state "
                            "between calls")
        # A kernel's body is Triton's language, compiled for the GPU: tensor-method rules are for host code.
        was_in_kernel = self.in_kernel
        self.in_kernel = was_in_kernel or node.name in self.kernels
        self.generic_visit(node)
        self.in_kernel = was_in_kernel

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Lambda(self, node):
        self.generic_visit(node)

    # ---- statements ----------------------------------------------------------------------------------------------
    def visit_Try(self, node):
        self.refuse("exception_fallback", node, "try/except: a candidate may not catch errors (a fallback path "
                    "would hide a failing kernel)")
        self.generic_visit(node)

    visit_TryStar = visit_Try

    def visit_Global(self, node):
        self.refuse("cross_call_state", node, "global: state kept between calls can replay earlier results")

    def visit_Nonlocal(self, node):
        self.refuse("cross_call_state", node, "nonlocal: state kept between calls can replay earlier results")

    def visit_With(self, node):
        self.refuse("side_stream", node, "with: streams, devices and contexts are the harness's")
        self.generic_visit(node)

    visit_AsyncWith = visit_With

    def visit_Assign(self, node):
        for target in node.targets:
            self.check_target(target)
        if node in self.top_level and isinstance(node.value, (ast.List, ast.Dict, ast.Set, ast.ListComp,
                                                              ast.DictComp, ast.SetComp)):
            self.refuse("cross_call_state", node, "a module-level container keeps state between calls")
        if node in self.top_level and isinstance(node.value, ast.Call):
            name = self.dotted(node.value.func)
            if name not in ("triton.Config",):
                self.refuse("cross_call_state", node, f"module-level {name}(...): objects made at import time can "
                            "keep state between calls")
        self.generic_visit(node)

    def visit_AugAssign(self, node):
        self.check_target(node.target)
        self.generic_visit(node)

    def visit_AnnAssign(self, node):
        self.check_target(node.target)
        self.generic_visit(node)

    def check_target(self, target):
        if isinstance(target, ast.Attribute):
            self.refuse("monkeypatch", target, f"assignment to .{target.attr}: a candidate may not change "
                        "attributes (of modules, timers, tensors or the harness)")
        elif isinstance(target, (ast.Tuple, ast.List)):
            for t in target.elts:
                self.check_target(t)

    # ---- expressions ---------------------------------------------------------------------------------------------
    def visit_Name(self, node):
        if node.id in FORBIDDEN_BUILTINS:
            self.refuse("dynamic_code" if node.id in ("eval", "exec", "compile", "__import__") else "harness_reach",
                        node, f"{node.id}: reaches the interpreter's machinery")
        if node.id.startswith("__"):
            self.refuse("harness_reach", node, f"{node.id}: dunder names reach the interpreter's machinery")

    def visit_Attribute(self, node):
        if node.attr.startswith("_"):
            self.refuse("harness_reach", node, f".{node.attr}: private and dunder attributes reach the harness "
                        "and the interpreter")
        name = self.dotted(node)
        if name and name.startswith("torch."):
            head = name.split(".")[1]
            if head in ("cuda", "backends", "_C", "ops", "library", "utils", "jit", "compile", "_dynamo"):
                code = "side_stream" if head == "cuda" else "torch_compute"
                self.refuse(code, node, f"{name}: streams, events, settings and PyTorch internals are the harness's")
            elif head in ("nn", "linalg", "fft", "special", "sparse"):
                self.refuse("torch_compute", node, f"{name}: the computation must be the candidate's own kernels")
            elif head not in TORCH_ALLOWED:
                self.refuse("torch_compute", node, f"{name}: the computation must be the candidate's own kernels "
                            "(torch may allocate, not compute)")
            if head in LOW_PRECISION and self.fp32_only:
                self.refuse("precision_downgrade", node, f"{name}: this task is float32")
            return  # the rest of the chain is the same name
        if name and name.startswith("triton.language."):
            if name.split(".")[2] in LOW_PRECISION and self.fp32_only:
                self.refuse("precision_downgrade", node, f"{name}: this task is float32")
            return
        if name and name.startswith("triton.") and not name.startswith("triton.language"):
            if name.split(".")[1] not in TRITON_ALLOWED:
                self.refuse("harness_reach", node, f"{name}: only triton.jit, autotune, heuristics, Config, cdiv "
                            "and next_power_of_2 are for candidates")
            return
        if name and name.startswith("math."):
            return
        self.generic_visit(node)

    def visit_Call(self, node):
        func = node.func
        if isinstance(func, ast.Subscript) and isinstance(func.value, ast.Name):
            self.launched.add(func.value.id)  # kernel[grid](...)
        if (isinstance(func, ast.Attribute) and not self.in_kernel and
                not self.dotted(func).startswith(("torch.", "triton.", "math."))):
            if func.attr in TENSOR_COMPUTE_METHODS:
                self.refuse("torch_compute", node, f".{func.attr}(): PyTorch would compute this, not the "
                            "candidate's kernels")
            if func.attr in ("half", "bfloat16") and self.fp32_only:
                self.refuse("precision_downgrade", node, f".{func.attr}(): this task is float32")
        name = self.dotted(func)
        if name in ("triton.language.dot", "triton.language.dot_scaled"):
            for kw in node.keywords:
                if kw.arg == "allow_tf32" and not (isinstance(kw.value, ast.Constant) and kw.value.value is False):
                    self.refuse("precision_downgrade", node, "tl.dot(allow_tf32=...): TF32 is off for these tasks")
                if kw.arg == "input_precision" and not (isinstance(kw.value, ast.Constant) and
                                                        kw.value.value == "ieee"):
                    self.refuse("precision_downgrade", node, "tl.dot(input_precision=...): only \"ieee\" keeps "
                                "float32 precision")
        if name in ("triton.language.inline_asm_elementwise",):
            self.refuse("harness_reach", node, "inline assembly: the candidate's kernels are Triton's")
        self.generic_visit(node)

    def visit_BinOp(self, node):
        if isinstance(node.op, ast.MatMult):
            self.refuse("torch_compute", node, "the @ operator: PyTorch would compute this, not the candidate's "
                        "kernels")
        self.generic_visit(node)

    def dotted(self, node):
        """torch.cuda.Stream -> "torch.cuda.Stream", with import aliases resolved; "" when not a plain chain."""
        parts = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if not isinstance(node, ast.Name):
            return ""
        head = self.aliases.get(node.id, node.id)
        return ".".join([head] + list(reversed(parts)))

    def run(self, tree):
        self.top_level = set(tree.body)
        # Aliases first, wherever the imports are.
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                self.visit(node)
        self.refusals.clear()
        self.visit(tree)
        if not self.entry_point:
            self.refusals.append({"code": "missing_entry_point", "detail": "no module-level "
                                  "`def crucible_forward(inputs, outputs)`"})
        if not self.kernels:
            self.refusals.append({"code": "no_triton_kernel", "detail": "no @triton.jit function: a Triton "
                                  "candidate computes with its own kernels"})
        for k in self.kernels:
            if k not in self.launched:
                self.refusals.append({"code": "unlaunched_kernel", "detail": f"{k} is defined but never launched "
                                      "(kernel[grid](...)): a decoy kernel"})


def check(source, task_dtypes=()):
    try:
        tree = ast.parse(source)
    except SyntaxError as e:
        return {"refusals": [{"code": "syntax_error", "detail": f"line {e.lineno}: {e.msg}"}], "kernels": [],
                "entry_point": False}
    except (ValueError, RecursionError) as e:
        return {"refusals": [{"code": "syntax_error", "detail": str(e)[:200]}], "kernels": [], "entry_point": False}
    gate = Gate(task_dtypes)
    gate.run(tree)
    # One refusal per code and line is enough to act on.
    seen, refusals = set(), []
    for r in gate.refusals:
        key = (r["code"], r["detail"])
        if key not in seen:
            seen.add(key)
            refusals.append(r)
    return {"refusals": refusals[:20], "kernels": gate.kernels, "entry_point": gate.entry_point}


def main(argv):
    if len(argv) < 2:
        print("usage: gate.py CANDIDATE.py [--dtypes float32,...]", file=sys.stderr)
        return 2
    dtypes = []
    if "--dtypes" in argv:
        dtypes = [d for d in argv[argv.index("--dtypes") + 1].split(",") if d]
    with open(argv[1], "rb") as f:
        raw = f.read()
    source = raw.decode("utf-8", errors="replace")
    print(json.dumps(check(source, dtypes)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
