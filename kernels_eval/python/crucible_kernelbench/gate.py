"""The static gate for KernelBench-format candidates (one file defining `class ModelNew(nn.Module)`, its kernels from
load_inline or @triton.jit). It reads the syntax tree before any of the candidate runs, with the standard library
only, and refuses what KernelBench's answers are known to cheat with:
  - exception_fallback: try/except (a fallback to PyTorch when the kernel fails);
  - forbidden_import: modules beyond torch, torch.nn(.functional), torch.utils.cpp_extension's load_inline, triton,
    triton.language and math (threads, processes, files, sockets, ctypes, time...);
  - side_stream: torch.cuda's streams, events and synchronisation, and `with` blocks other than torch.no_grad();
  - forward_state: writes to self, module state or containers outside __init__, global/nonlocal, mutable default
    arguments (result reuse keyed on data_ptr or content);
  - monkeypatch: assignments to attributes of anything but self in __init__ (timers, torch, the harness);
  - reference_model: the reference `Model` named, subclassed or called;
  - foreign_class: classes other than nn.Module subclasses (tensor subclasses, __torch_function__, autograd tricks);
  - dynamic_code / harness_reach: torch.compile, torch.jit, eval/exec, getattr, open, private attributes...;
  - precision_downgrade: float16/bfloat16 on a float32 task;
  - torch_compute (only with torch_ops = "forbid"): PyTorch compute in forward, submodule calls;
  - missing_model_new, no_custom_kernel (no load_inline and no @triton.jit), syntax_error.
What it cannot see (the extension called on a decoy while PyTorch does the work) is the worker's to count.
"""
import ast
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from crucible_triton.gate import FORBIDDEN_BUILTINS, LOW_PRECISION, TENSOR_COMPUTE_METHODS, TORCH_ALLOWED  # noqa
from crucible_triton.gate import spoofs_library_kernel  # noqa

ALLOWED_MODULES = {"torch", "torch.nn", "torch.nn.functional", "torch.utils.cpp_extension", "triton",
                   "triton.language", "math"}
# What may be imported by name from an allowed module (anything else from it is refused).
ALLOWED_FROM = {"torch.utils.cpp_extension": {"load_inline"}, "torch": {"nn"}, "torch.nn": {"functional", "Module"},
                "triton": {"jit", "cdiv", "language", "autotune", "Config", "next_power_of_2", "heuristics"},
                "triton.language": None, "math": None, "torch.nn.functional": None}
MUTATING_METHODS = {"append", "extend", "insert", "pop", "popitem", "clear", "update", "setdefault", "add",
                    "discard", "remove", "__setitem__", "copy_", "fill_", "zero_", "set_", "resize_", "data_ptr"}
BUILTINS_ALLOWED_HERE = {"super"}
TORCH_CUDA_ALLOWED = {"torch.cuda.is_available", "torch.cuda.current_device"}
MODULE_BASES = {"torch.nn.Module", "nn.Module", "Module"}


def refusal(code, node, detail):
    return {"code": code, "detail": f"line {getattr(node, 'lineno', 0)}: {detail}"}


class Gate(ast.NodeVisitor):
    def __init__(self, fp32_only, forbid_torch_ops):
        self.refusals = []
        self.fp32_only = fp32_only
        self.forbid_torch_ops = forbid_torch_ops
        self.aliases = {}
        self.method = None       # the method being read ("__init__", "forward", ...), None outside classes
        self.locals = set()      # names bound in the current function
        self.kernels = []
        self.model_new = False
        self.load_inline = False

    def refuse(self, code, node, detail):
        self.refusals.append(refusal(code, node, detail))

    def dotted(self, node):
        parts = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if not isinstance(node, ast.Name):
            return ""
        return ".".join([self.aliases.get(node.id, node.id)] + list(reversed(parts)))

    # ---- imports -------------------------------------------------------------------------------------------------
    def visit_Import(self, node):
        for a in node.names:
            if a.name not in ALLOWED_MODULES:
                self.refuse("forbidden_import", node, f"import {a.name}: a KernelBench candidate may import torch, "
                            "torch.nn, torch.nn.functional, load_inline, triton, triton.language and math only")
            self.aliases[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]

    def visit_ImportFrom(self, node):
        module = node.module or ""
        allowed = ALLOWED_FROM.get(module, set())
        for a in node.names:
            if node.level or module not in ALLOWED_FROM or (allowed is not None and a.name not in allowed):
                self.refuse("forbidden_import", node, f"from {module} import {a.name}: not for candidates")
            self.aliases[a.asname or a.name] = f"{module}.{a.name}"
            if f"{module}.{a.name}" == "torch.utils.cpp_extension.load_inline":
                self.load_inline = True

    # ---- definitions ---------------------------------------------------------------------------------------------
    def visit_ClassDef(self, node):
        bases = [self.dotted(b) for b in node.bases]
        if node.name == "Model" or "Model" in bases or "__main__.Model" in bases:
            self.refuse("reference_model", node, f"class {node.name}: the reference Model is the evaluator's")
        elif not bases or any(b not in MODULE_BASES and b != "torch.nn.Module" for b in bases) or node.keywords:
            self.refuse("foreign_class", node, f"class {node.name}: only nn.Module subclasses (tensor subclasses, "
                        "__torch_function__ and autograd functions can defer or fake the work)")
        if node.name == "ModelNew" and node in self.top_level:
            self.model_new = True
        outer = self.method
        for stmt in node.body:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                self.method = stmt.name
                self.visit(stmt)
            elif not isinstance(stmt, (ast.Pass, ast.Expr)):
                self.refuse("forward_state", stmt, f"class {node.name}: class-level state is shared by every call")
        self.method = outer

    def visit_FunctionDef(self, node):
        decorators = [self.dotted(d.func if isinstance(d, ast.Call) else d) for d in node.decorator_list]
        if "triton.jit" in decorators:
            self.kernels.append(node.name)
            if spoofs_library_kernel(node.name):
                self.refuse("harness_reach", node, f"{node.name}: named as a library's kernel, which the profiler "
                            "would count as the answer's own")
        elif any(d not in ("triton.autotune", "triton.heuristics") for d in decorators):
            self.refuse("forbidden_decorator", node, f"{node.name}: only Triton's decorators")
        if node.name.startswith("__") and node.name != "__init__":
            self.refuse("harness_reach", node, f"def {node.name}: dunder methods hook the interpreter and PyTorch")
        for default in node.args.defaults + node.args.kw_defaults:
            if isinstance(default, (ast.List, ast.Dict, ast.Set, ast.Call)):
                self.refuse("forward_state", default, f"{node.name}: a mutable default argument keeps state")
        saved = self.locals
        self.locals = {a.arg for a in node.args.args + node.args.kwonlyargs} | {
            n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
        self.generic_visit(node)
        self.locals = saved

    visit_AsyncFunctionDef = visit_FunctionDef

    # ---- statements ----------------------------------------------------------------------------------------------
    def visit_Try(self, node):
        self.refuse("exception_fallback", node, "try/except: a fallback would hide a failing kernel")
        self.generic_visit(node)

    visit_TryStar = visit_Try

    def visit_Global(self, node):
        self.refuse("forward_state", node, "global: state kept between calls can replay earlier results")

    visit_Nonlocal = visit_Global

    def visit_With(self, node):
        for item in node.items:
            e = item.context_expr
            if not (isinstance(e, ast.Call) and self.dotted(e.func) == "torch.no_grad"):
                self.refuse("side_stream", node, "with: streams, devices and contexts are the harness's")
        self.generic_visit(node)

    visit_AsyncWith = visit_With

    def visit_Assign(self, node):
        for t in node.targets:
            self.check_target(t, node)
        self.generic_visit(node)

    def visit_AugAssign(self, node):
        self.check_target(node.target, node)
        self.generic_visit(node)

    def visit_AnnAssign(self, node):
        self.check_target(node.target, node)
        self.generic_visit(node)

    def visit_Delete(self, node):
        for t in node.targets:
            self.check_target(t, node)

    def check_target(self, target, node):
        if isinstance(target, (ast.Tuple, ast.List)):
            for t in target.elts:
                self.check_target(t, node)
        elif isinstance(target, ast.Attribute):
            root = target.value
            while isinstance(root, ast.Attribute):
                root = root.value
            on_self = isinstance(root, ast.Name) and root.id == "self"
            if on_self and self.method == "__init__":
                return  # building the module: self.conv.weight = nn.Parameter(...) included
            code = "forward_state" if on_self else "monkeypatch"
            self.refuse(code, node, f"assignment to .{target.attr}: only __init__ may set the module's attributes")
        elif isinstance(target, ast.Subscript) and self.method not in (None, "__init__"):
            root = target.value
            while isinstance(root, (ast.Subscript, ast.Attribute)):
                root = root.value
            if not (isinstance(root, ast.Name) and root.id in self.locals and root.id != "self"):
                self.refuse("forward_state", node, "a write into state outside the call (results kept between calls)")

    # ---- expressions ---------------------------------------------------------------------------------------------
    def visit_Name(self, node):
        if node.id in FORBIDDEN_BUILTINS and node.id not in BUILTINS_ALLOWED_HERE:
            self.refuse("dynamic_code" if node.id in ("eval", "exec", "compile", "__import__") else "harness_reach",
                        node, f"{node.id}: reaches the interpreter's machinery")
        elif node.id == "Model":
            self.refuse("reference_model", node, "Model: the reference is the evaluator's, not the candidate's")
        elif node.id.startswith("__"):
            self.refuse("harness_reach", node, f"{node.id}: dunder names reach the interpreter's machinery")

    def visit_Attribute(self, node):
        if node.attr.startswith("_") and not (node.attr == "__init__" or self.on_self(node)):
            self.refuse("harness_reach", node, f".{node.attr}: private and dunder attributes reach the harness")
        name = self.dotted(node)
        if name.startswith("torch."):
            self.check_torch_name(name, node)
            return
        if name.split(".")[-1] in LOW_PRECISION and self.fp32_only and name.startswith("triton.language."):
            self.refuse("precision_downgrade", node, f"{name}: this task is float32")
        self.generic_visit(node)

    def on_self(self, node):
        return isinstance(node.value, ast.Name) and node.value.id == "self" and not node.attr.startswith("__")

    def check_torch_name(self, name, node):
        head = name.split(".")[1]
        if head == "cuda" and name not in TORCH_CUDA_ALLOWED:
            self.refuse("side_stream", node, f"{name}: streams, events and synchronisation are the harness's")
        elif head in ("compile", "jit", "_dynamo", "_C", "ops", "library", "overrides", "fx", "autograd",
                      "backends", "cuda"):
            if name not in TORCH_CUDA_ALLOWED:
                self.refuse("dynamic_code", node, f"{name}: compilers, tracers and PyTorch internals")
        elif head == "utils" and name != "torch.utils.cpp_extension.load_inline":
            self.refuse("dynamic_code", node, f"{name}: only load_inline builds extensions")
        if head in LOW_PRECISION and self.fp32_only:
            self.refuse("precision_downgrade", node, f"{name}: this task is float32")

    def visit_Call(self, node):
        func = node.func
        name = self.dotted(func)
        if name == "torch.utils.cpp_extension.load_inline":
            self.load_inline = True
        if isinstance(func, ast.Attribute) and self.method not in (None, "__init__"):
            self.check_call_in_forward(node, func, name)
        if isinstance(func, ast.Attribute) and func.attr in ("half", "bfloat16") and self.fp32_only:
            self.refuse("precision_downgrade", node, f".{func.attr}(): this task is float32")
        self.generic_visit(node)

    def check_call_in_forward(self, node, func, name):
        root = func.value
        while isinstance(root, (ast.Attribute, ast.Subscript)):
            root = root.value
        outside = isinstance(root, ast.Name) and (root.id == "self" or root.id not in self.locals)
        if func.attr in MUTATING_METHODS and outside and not name.startswith(("torch.", "math.", "triton.")):
            self.refuse("forward_state", node, f".{func.attr}(): a write into state kept between calls")
        if not self.forbid_torch_ops:
            return
        if name.startswith("torch.") and name.split(".")[1] not in TORCH_ALLOWED or \
                name.startswith(("torch.nn.functional.", "torch.nn.")):
            self.refuse("torch_compute", node, f"{name}(): torch_ops = \"forbid\": the candidate's kernels compute")
        elif not name.startswith(("torch.", "triton.", "math.")) and func.attr in TENSOR_COMPUTE_METHODS:
            self.refuse("torch_compute", node, f".{func.attr}(): torch_ops = \"forbid\"")
        elif isinstance(func.value, ast.Name) and func.value.id == "self":
            self.refuse("torch_compute", node, f"self.{func.attr}(...): torch_ops = \"forbid\" (a submodule "
                        "computes with PyTorch)")

    def visit_BinOp(self, node):
        if isinstance(node.op, ast.MatMult) and self.forbid_torch_ops:
            self.refuse("torch_compute", node, "the @ operator: torch_ops = \"forbid\"")
        self.generic_visit(node)

    def run(self, tree):
        self.top_level = set(tree.body)
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                self.visit(node)
        self.refusals.clear()
        self.visit(tree)
        if not self.model_new:
            self.refusals.append({"code": "missing_model_new", "detail": "no module-level class ModelNew"})
        if not self.load_inline and not self.kernels:
            self.refusals.append({"code": "no_custom_kernel", "detail": "neither load_inline nor a @triton.jit "
                                  "kernel: the answer must bring its own kernels"})


def check(tree, dtypes=(), forbid_torch_ops=False):
    fp32_only = bool(dtypes) and all(d in ("float32", "float64", "int32", "int64", "bool") for d in dtypes)
    gate = Gate(fp32_only, forbid_torch_ops)
    gate.run(tree)
    seen, refusals = set(), []
    for r in gate.refusals:
        if (r["code"], r["detail"]) not in seen:
            seen.add((r["code"], r["detail"]))
            refusals.append(r)
    return refusals[:20], gate.kernels
