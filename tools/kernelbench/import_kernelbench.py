#!/usr/bin/python3
"""Import KernelBench problem files as Crucible tasks.

    /usr/bin/python3 tools/kernelbench/import_kernelbench.py --out DIR --report FILE [--levels 1,2,3] PATH...

PATH is a directory (searched recursively for level<N>/<id>_<Name>.py) or one such file. For each problem this
writes into DIR:

  kb_l<N>_<id>.cpu.pt  a TorchScript trace made at reduced CPU sizes whose forward takes every candidate input
                       positionally: the tensors of get_inputs() in order, then the module's parameters
                       (named_parameters() order), then its buffers (named_buffers() order);
  kb_l<N>_<id>.toml    the Crucible task: inputs with their init distributions, outputs, tolerance, the CPU sizes,
                       the written (CUDA) sizes where they could be computed, and where the task came from.

FILE receives one JSON line, {"imported": [...], "refused": [{"problem": ..., "reason": ...}]}, once every problem
is done; with --cuda also "without_cuda_reference": [{"task": ..., "reason": ...}] (imported tasks whose written
sizes could not be traced on the GPU). It is not stdout: whatever the problems' own code prints is log text, and goes to stderr with the
diagnostics. Exit status 0 when the import ran (refusals included), 2 for bad arguments or when the paths hold no
problem file. A problem file whose path is not UTF-8 is refused by name; the report shows its other bytes as \\xNN.

Needs Debian's python3-torch 1.13 (CPU): the traces must load in the LibTorch 1.13 that Crucible links. Problem
files are trusted code (this is the trusted import step). Each problem runs in its own forked process, so that an
exception, a crash or a hang in one problem becomes that problem's refusal and never stops the run.
"""
import argparse
import ast
import contextlib
import ctypes
import dataclasses
import fcntl
import importlib.util
import inspect
import json
import math
import multiprocessing
import multiprocessing.connection
import os
import re
import signal
import sys
import time
import traceback
import types
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import torch
import torch.nn as nn
from torch.overrides import TorchFunctionMode

# ---------------------------------------------------------------------------------------------------------------
# Limits and policies

ELEMENT_BUDGET = 4_000_000      # inputs + parameters + buffers + outputs at the CPU sizes
TIME_TARGET_MS = 10.0           # one eager forward at the CPU sizes ("well under 20 ms")
ELEMENT_HARD_LIMIT = 256_000_000  # above this (1 GiB of float32) at the smallest valid sizes: refuse
TIME_HARD_LIMIT_MS = 5_000.0    # likewise for one eager forward
WRITTEN_CPU_FALLBACK_BYTES = 512 * 2**20  # written sizes may run on the CPU once when the meta device cannot
BATCH_FLOOR = 2                 # batch-like constants shrink to 2, not 1: BatchNorm needs more than one sample
DIM_FLOOR = 8                   # other constants never shrink below 8 (small values are structure, not cost)
MIN_NORM_GROUP = 16             # a norm layer must keep averaging over at least this many values (or as written)
MAX_PROBES = 80                 # bound on the size search per problem
VERIFY_DRAWS = 3
RANDOM_SCALE_LOW = 1e-3         # torch.rand(()) as a per-draw factor: Crucible's `scale` needs a positive low end
# Outputs that concentrate (a loss averaged over many elements) are near-equal for every draw, so one draw's answer
# could pass another's tolerance and a constant would be judged correct (the evaluator refuses such a task). When
# every draw's answer is within SPREAD_MARGIN tolerances of every other's, the floating inputs get a per-draw factor
# from SPREAD_SCALE, and the problem is refused if that does not spread them.
SPREAD_SCALE = (0.25, 1.0)
SPREAD_MARGIN = 2.0
# Small outputs (losses, scalars) can still agree by chance: the chance that one draw's answer passes another draw
# is measured over CHANCE_DRAWS draws, and the task needs enough correctness trials that a fixed answer passes all
# of them with probability at most FIXED_ANSWER_RISK.
SMALL_OUTPUT_ELEMENTS = 1024
CHANCE_DRAWS = 24
FIXED_ANSWER_RISK = 1e-4
MAX_CORRECTNESS_TRIALS = 20
PROBLEM_TIMEOUT_S = 180.0        # per problem; the whole of KernelBench imports in ~5 min on a 2-core machine
PR_SET_PDEATHSIG = 1

TOLERANCES = {  # dtype -> (atol, rtol)
    "float32": (1e-4, 1e-4),
    "float16": (1e-2, 1e-2),
    "bfloat16": (1e-2, 1e-2),
    "float64": (1e-4, 1e-4),
}
DTYPE_NAMES = {
    torch.float32: "float32", torch.float16: "float16", torch.bfloat16: "bfloat16", torch.float64: "float64",
    torch.int32: "int32", torch.int64: "int64", torch.bool: "bool",
}

PROBLEM_FILE_RE = re.compile(r"^(\d+)_(.+)\.py$")
LEVEL_DIR_RE = re.compile(r"^level(\d+)$")
# Constants that are shapes of the computation rather than its size: kept as written when shrinking.
STRUCTURAL_NAME_RE = re.compile(
    r"kernel|stride|pad|dilation|groups?$|pool|^layers$|num_layers|n_layers|block_len|heads?$|n_head|patch|window|shift",
    re.IGNORECASE)
BATCH_NAME_RE = re.compile(r"batch", re.IGNORECASE)


class Refused(Exception):
    """A problem that cannot become a task; the message is the reason the report gives."""


class Unexpressible(Exception):
    """An expression that Crucible's init distributions cannot reproduce; the message names the transform."""


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------------------------
# Finding problems


@dataclass
class Problem:
    path: Path          # as found (what the report names)
    level: int
    id: int
    title: str          # the <Name> part of <id>_<Name>.py

    @property
    def task_name(self) -> str:
        return f"kb_l{self.level}_{self.id}"

    @property
    def relative_path(self) -> str:
        """The path relative to the directory that holds level1/, level2/, ..."""
        return f"level{self.level}/{self.path.name}"


def problem_from_file(path: Path) -> Optional[Problem]:
    file_match = PROBLEM_FILE_RE.match(path.name)
    level_match = LEVEL_DIR_RE.match(path.parent.name)
    if not file_match or not level_match:
        return None
    return Problem(path, int(level_match.group(1)), int(file_match.group(1)), file_match.group(2))


def display_path(path: Path) -> str:
    """The path as report text: a byte that is not UTF-8 shows as \\xNN (JSON and TOML carry only Unicode)."""
    return os.fsencode(path).decode("utf-8", "backslashreplace")


def utf8_path_error(path: Path) -> Optional[str]:
    """Why this problem's path cannot be imported, or None. TorchScript and the task file record the path and
    accept only UTF-8, so a file name with other bytes is refused by name rather than failing later."""
    try:
        str(path).encode("utf-8")
    except UnicodeEncodeError:
        return "its path is not valid UTF-8 (TorchScript and the task file record it as text); rename the file"
    return None


@dataclass
class Found:
    problems: List[Problem]     # sorted by level and id
    refusals: List[dict]        # problem files that cannot become tasks
    not_problems: List[dict]    # named files that are not problem files at all


def find_problems(paths: List[Path], levels: Optional[set]) -> Found:
    """Problems under the given paths, problem files refused before any of their code runs, and named files that
    are not problems."""
    found: Dict[Path, Problem] = {}
    not_problems = []
    for path in paths:
        if path.is_dir():
            candidates = sorted(p for p in path.rglob("*.py") if p.is_file())
            for file in candidates:
                problem = problem_from_file(file)
                if problem:
                    found.setdefault(file.resolve(), problem)
        else:
            problem = problem_from_file(path)
            if problem:
                found.setdefault(path.resolve(), problem)
            else:
                not_problems.append({"problem": display_path(path),
                                     "reason": "not a KernelBench problem file (expected level<N>/<id>_<Name>.py)"})
    problems, refusals = [], []
    names = set()
    for problem in sorted(found.values(), key=lambda p: (p.level, p.id, str(p.path))):
        if levels is not None and problem.level not in levels:
            continue
        reason = utf8_path_error(problem.path)
        if reason is None and problem.task_name in names:
            reason = f"another problem file already gives the task name {problem.task_name}"
        if reason:
            refusals.append({"problem": display_path(problem.path), "reason": reason})
            continue
        names.add(problem.task_name)
        problems.append(problem)
    return Found(problems, refusals, not_problems)


# ---------------------------------------------------------------------------------------------------------------
# The problem's source: its size knobs, and compiling it with some of them changed


def node_key(node: ast.AST) -> tuple:
    """Identifies an expression node across fresh parses of the same text."""
    return (type(node).__name__, node.lineno, node.col_offset, node.end_lineno, node.end_col_offset)


def int_literal_value(node: ast.AST) -> Optional[int]:
    """The int an expression made only of int literals and arithmetic evaluates to (`1024 * 2`), else None."""
    if isinstance(node, ast.Constant):
        return node.value if type(node.value) is int else None
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        value = int_literal_value(node.operand)
        if value is None:
            return None
        return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub, ast.Mult, ast.FloorDiv, ast.Pow)):
        left, right = int_literal_value(node.left), int_literal_value(node.right)
        if left is None or right is None:
            return None
        if isinstance(node.op, ast.Add):
            return left + right
        if isinstance(node.op, ast.Sub):
            return left - right
        if isinstance(node.op, ast.Mult):
            return left * right
        if isinstance(node.op, ast.FloorDiv):
            return left // right if right else None
        return left ** right if 0 <= right <= 64 else None
    return None


@dataclass
class Knob:
    """An int literal of the problem file that the CPU sizes may change."""
    key: tuple          # node_key of the literal expression
    name: str           # the module-level constant it belongs to; "" for a literal inside get_inputs
    label: str          # how [kernelbench].cpu_scale names it
    value: int          # as written

    @property
    def batch_like(self) -> bool:
        return bool(BATCH_NAME_RE.search(self.name))

    @property
    def structural(self) -> bool:
        return bool(self.name) and bool(STRUCTURAL_NAME_RE.search(self.name))

    @property
    def floor(self) -> int:
        return BATCH_FLOOR if self.batch_like else DIM_FLOOR


def assignment_pairs(stmt: ast.Assign) -> List[Tuple[List[str], ast.expr]]:
    """(names, value) for `a = 1`, `height = width = 256` (one literal, two names) and `a, b = 1, 2`."""
    if all(isinstance(t, ast.Name) for t in stmt.targets):
        return [([t.id for t in stmt.targets], stmt.value)]
    target = stmt.targets[0]
    if (len(stmt.targets) == 1 and isinstance(target, ast.Tuple) and isinstance(stmt.value, ast.Tuple)
            and len(target.elts) == len(stmt.value.elts) and all(isinstance(t, ast.Name) for t in target.elts)):
        return [([t.id], v) for t, v in zip(target.elts, stmt.value.elts)]
    return []


def knobs_in_constant(name: str, value: ast.expr) -> List[Knob]:
    """`n = 4096`, `M = 1024 * 2`, `input_shape = (32768,)`, `sizes = [1024] * 16`."""
    whole = int_literal_value(value)
    if whole is not None:
        return [Knob(node_key(value), name, name, whole)]
    if isinstance(value, ast.BinOp) and isinstance(value.op, ast.Mult) and isinstance(value.left, (ast.List, ast.Tuple)):
        value = value.left  # a repeated list: its elements are the sizes, the repeat count is structure
    if isinstance(value, (ast.List, ast.Tuple)):
        knobs = []
        for i, element in enumerate(value.elts):
            v = int_literal_value(element)
            if v is not None:
                knobs.append(Knob(node_key(element), name, f"{name}[{i}]", v))
        return knobs
    return []


TORCH_SIZE_FACTORIES = {"rand", "randn", "zeros", "ones", "empty", "randint", "full"}


def size_argument_nodes(call: ast.Call) -> List[ast.expr]:
    """The argument nodes of a torch factory call that give the tensor's size."""
    name = call.func.attr if isinstance(call.func, ast.Attribute) else ""
    size_kw = [k.value for k in call.keywords if k.arg == "size"]
    if size_kw:
        nodes = size_kw
    elif name == "randint":
        nodes = call.args[-1:] if len(call.args) >= 2 else []
    elif name == "full":
        nodes = call.args[:1]
    else:
        nodes = list(call.args)
    flat = []
    for node in nodes:
        flat.extend(node.elts if isinstance(node, (ast.Tuple, ast.List)) else [node])
    return flat


def knobs_in_get_inputs(function: ast.FunctionDef) -> List[Knob]:
    """Int literals written straight into get_inputs' tensor sizes (`torch.rand(batch_size, 3, 224, 224)`)."""
    knobs = []
    for call in ast.walk(function):
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
                and call.func.attr in TORCH_SIZE_FACTORIES):
            continue
        for node in size_argument_nodes(call):
            v = int_literal_value(node)
            if v is not None:
                label = f"get_inputs literal {v} (line {node.lineno} col {node.col_offset})"
                knobs.append(Knob(node_key(node), "", label, v))
    return knobs


class _ReplaceLiterals(ast.NodeTransformer):
    def __init__(self, values: Dict[tuple, int]):
        self.values = values

    def visit(self, node):
        if isinstance(node, ast.expr) and hasattr(node, "lineno") and node_key(node) in self.values:
            return ast.copy_location(ast.Constant(self.values[node_key(node)]), node)
        return super().visit(node)


@dataclass
class ProblemSource:
    problem: Problem
    text: str
    tree: ast.Module
    knobs: List[Knob]
    constant_names: List[str]   # module-level assigned names, in order

    @staticmethod
    def read(problem: Problem) -> "ProblemSource":
        text = problem.path.read_text(encoding="utf-8")
        try:
            tree = ast.parse(text, filename=str(problem.path))
        except SyntaxError as e:
            raise Refused(f"the problem file does not parse: {e}")
        knobs, names = [], []
        for stmt in tree.body:
            if isinstance(stmt, ast.Assign):
                for targets, value in assignment_pairs(stmt):
                    names.extend(targets)
                    knobs.extend(knobs_in_constant(" = ".join(targets), value))
            elif isinstance(stmt, ast.FunctionDef) and stmt.name == "get_inputs":
                knobs.extend(knobs_in_get_inputs(stmt))
        unique = {k.key: k for k in knobs}
        return ProblemSource(problem, text, tree, list(unique.values()), names)

    def function(self, name: str) -> Optional[ast.FunctionDef]:
        for stmt in self.tree.body:
            if isinstance(stmt, ast.FunctionDef) and stmt.name == name:
                return stmt
        return None

    def function_at_line(self, lineno: int) -> Optional[ast.FunctionDef]:
        for node in ast.walk(self.tree):
            if isinstance(node, ast.FunctionDef):
                if node.lineno == lineno or any(d.lineno == lineno for d in node.decorator_list):
                    return node
        return None

    def compile(self, overrides: Dict[tuple, int]):
        tree = ast.parse(self.text, filename=str(self.problem.path))
        if overrides:
            tree = ast.fix_missing_locations(_ReplaceLiterals(overrides).visit(tree))
        return compile(tree, str(self.problem.path), "exec")


# ---------------------------------------------------------------------------------------------------------------
# Building a problem: on the meta device (shapes only) or on the CPU


META_FACTORIES = {
    torch.empty, torch.zeros, torch.ones, torch.full, torch.rand, torch.randn, torch.randint, torch.randperm,
    torch.tensor, torch.arange, torch.linspace, torch.logspace, torch.eye, torch.empty_strided, torch.normal,
}


class MetaFactories(TorchFunctionMode):
    """Sends tensor factories that name no device to the meta device, so that a model and its inputs at the
    written sizes (often many GB) get shapes and dtypes but no memory."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        if func in META_FACTORIES and kwargs.get("device") is None:
            kwargs["device"] = "meta"
        return func(*args, **kwargs)


@dataclass
class Instance:
    namespace: dict
    model: nn.Module
    raw_inputs: list            # what get_inputs() returned
    init_inputs: list           # what get_init_inputs() returned

    def int_constants(self, source: ProblemSource) -> Dict[str, int]:
        return {n: self.namespace[n] for n in source.constant_names if type(self.namespace.get(n)) is int}


def instantiate(source: ProblemSource, overrides: Dict[tuple, int], *, meta: bool, seed: int,
                context=None) -> Instance:
    """Runs the problem file with some size literals changed, then builds Model and its inputs as KernelBench does:
    Model(*get_init_inputs()) and get_inputs(). The module stays in training mode (KernelBench never calls eval)."""
    code = source.compile(overrides)
    namespace = {"__name__": "kernelbench_problem", "__file__": str(source.problem.path)}
    with (MetaFactories() if meta else contextlib.nullcontext()), (context or contextlib.nullcontext()):
        exec(code, namespace)
        for required in ("Model", "get_inputs", "get_init_inputs"):
            if not callable(namespace.get(required)):
                raise Refused(f"the problem file defines no {required}")
        torch.manual_seed(seed)
        init_inputs = namespace["get_init_inputs"]()
        if not isinstance(init_inputs, (list, tuple)):
            raise Refused(f"get_init_inputs returns a {type(init_inputs).__name__}, not a list")
        model = namespace["Model"](*init_inputs)
        if not isinstance(model, nn.Module):
            raise Refused("Model is not an nn.Module")
        torch.manual_seed(seed + 1)
        raw_inputs = namespace["get_inputs"]()
    if not isinstance(raw_inputs, (list, tuple)):
        raise Refused(f"get_inputs returns a {type(raw_inputs).__name__}, not a list")
    return Instance(namespace, model, list(raw_inputs), list(init_inputs))


def output_list(result) -> List[torch.Tensor]:
    """The forward's result as a list of tensors: a tensor, or a tuple/list of tensors."""
    if isinstance(result, torch.Tensor):
        return [result]
    if isinstance(result, (tuple, list)) and result and all(isinstance(t, torch.Tensor) for t in result):
        return list(result)
    raise Refused(f"forward returns {type(result).__name__}; only a tensor or a tuple of tensors can be an output")


def state_tensors(model: nn.Module) -> List[Tuple[str, torch.Tensor, bool]]:
    """(name, tensor, is_buffer) for every parameter, then every buffer, in named_parameters/named_buffers order."""
    params = [(n, t, False) for n, t in model.named_parameters()]
    buffers = [(n, t, True) for n, t in model.named_buffers() if t is not None]
    return params + buffers


def call_arguments(template: list, tensors: List[torch.Tensor]) -> list:
    """get_inputs' list with its tensor slots filled from `tensors` and its other values kept."""
    filled = iter(tensors)
    return [next(filled) if slot is TENSOR_SLOT else slot for slot in template]


TENSOR_SLOT = object()  # marks where get_inputs returned a tensor


def input_template(raw_inputs: list) -> list:
    return [TENSOR_SLOT if isinstance(v, torch.Tensor) else v for v in raw_inputs]


def eager_forward(instance: Instance, tensors: Optional[List[torch.Tensor]] = None) -> List[torch.Tensor]:
    template = input_template(instance.raw_inputs)
    if tensors is None:
        tensors = [v for v in instance.raw_inputs if isinstance(v, torch.Tensor)]
    with torch.no_grad():
        return output_list(instance.model(*call_arguments(template, tensors)))


# ---------------------------------------------------------------------------------------------------------------
# Choosing the CPU sizes


def norm_group_size(module: nn.Module, x: torch.Tensor) -> Optional[int]:
    """How many values one normalisation group of this layer averages over, for this input."""
    if isinstance(module, nn.modules.batchnorm._BatchNorm) and module.training and x.dim() >= 2:
        return x.numel() // max(1, x.shape[1])
    if isinstance(module, nn.modules.instancenorm._InstanceNorm) and x.dim() >= 3:
        return math.prod(x.shape[2:])
    if isinstance(module, nn.GroupNorm) and x.dim() >= 2:
        return x.numel() // max(1, x.shape[0] * module.num_groups)
    if isinstance(module, nn.LayerNorm):
        return math.prod(module.normalized_shape)
    return None


class NormGroupWatch:
    """The smallest normalisation group seen during one forward. Shrinking a network until a BatchNorm averages two
    values leaves outputs that hardly depend on the inputs (DenseNet201 at 56x56: 1x1 maps, batch 2)."""

    def __enter__(self):
        self.smallest = None
        self.handle = nn.modules.module.register_module_forward_pre_hook(self._hook)
        return self

    def _hook(self, module, args):
        if args and isinstance(args[0], torch.Tensor):
            n = norm_group_size(module, args[0])
            if n is not None:
                self.smallest = n if self.smallest is None else min(self.smallest, n)

    def __exit__(self, *exc):
        self.handle.remove()


@dataclass
class Probe:
    """What one set of sizes costs and produces."""
    error: Optional[str] = None           # why these sizes do not work
    input_elements: int = 0               # get_inputs tensors + parameters + buffers
    elements: Optional[int] = None        # ... + outputs; None while the outputs are unknown
    signature: Optional[tuple] = None     # (dtype, rank) of each output
    state_signature: tuple = ()           # (name, rank) of each parameter and buffer
    norm_group: Optional[int] = None
    cpu_ms: Optional[float] = None        # one eager forward on the CPU, once small enough to run it
    meta_error: Optional[str] = None      # why the forward failed on the meta device (a missing meta kernel, or a
                                          # shape mismatch these sizes cause)


def time_forward(instance: Instance) -> Tuple[float, List[torch.Tensor]]:
    """Best of a few eager forwards after a warm-up, in ms (a single timed run when one takes long)."""
    outputs = eager_forward(instance)
    times = []
    for _ in range(3):
        start = time.perf_counter()
        eager_forward(instance)
        times.append((time.perf_counter() - start) * 1e3)
        if times[-1] > 200:
            break
    return min(times), outputs


def signature_of(outputs: List[torch.Tensor]) -> tuple:
    return tuple((o.dtype, o.dim()) for o in outputs)


def short_error(e: BaseException) -> str:
    """The first sentence of an exception, bounded: dispatcher errors go on to list every backend."""
    first = (str(e).strip().splitlines() or [""])[0].split(". ")[0]
    return f"{type(e).__name__}: {first[:240]}"


def probe(source: ProblemSource, overrides: Dict[tuple, int], cpu_limit: int = ELEMENT_BUDGET) -> Probe:
    """Costs one size set on the meta device; runs it on the CPU (timing it) once it holds at most cpu_limit
    elements. A model that cannot even be built on the meta device is built on the CPU."""
    result = Probe()
    built_on_cpu = None
    try:
        instance = instantiate(source, overrides, meta=True, seed=0)
    except Refused:
        raise
    except Exception:
        try:
            instance = built_on_cpu = instantiate(source, overrides, meta=False, seed=0)
        except Refused:
            raise
        except Exception as e:
            return Probe(error=f"building it fails: {short_error(e)}")
    inputs = [v for v in instance.raw_inputs if isinstance(v, torch.Tensor)]
    state = state_tensors(instance.model)
    result.input_elements = sum(t.numel() for t in inputs) + sum(t.numel() for _, t, _ in state)
    result.state_signature = tuple((name, t.dim()) for name, t, _ in state)
    if built_on_cpu is None:
        try:
            with NormGroupWatch() as watch:
                outputs = eager_forward(instance)
            result.elements = result.input_elements + sum(o.numel() for o in outputs)
            result.signature, result.norm_group = signature_of(outputs), watch.smallest
        except Refused:
            raise
        except Exception as e:  # an operator without a meta kernel, or broken shapes: the CPU run below tells
            result.meta_error = f"it fails on the meta device: {short_error(e)}"
    if built_on_cpu is not None:
        cpu_limit = ELEMENT_HARD_LIMIT  # no meta forward checked these sizes: the CPU must
    if (result.elements or result.input_elements) > cpu_limit:
        return result
    try:
        cpu = built_on_cpu or instantiate(source, overrides, meta=False, seed=0)
        with NormGroupWatch() as watch:
            result.cpu_ms, outputs = time_forward(cpu)
    except Refused:
        raise
    except Exception as e:
        return Probe(error=f"it fails on the CPU: {short_error(e)}")
    result.elements = result.input_elements + sum(o.numel() for o in outputs)
    result.signature, result.norm_group = signature_of(outputs), watch.smallest
    return result


def halve(knob: Knob, value: int) -> int:
    """Half; a size that is odd stays odd (KernelBench's irregular shapes stay irregular), a batch need not."""
    half = value // 2
    if value % 2 and half % 2 == 0 and not knob.batch_like:
        half += 1
    return half


def shrinkable(knob: Knob, values: Dict[tuple, int]) -> bool:
    half = halve(knob, values[knob.key])
    return not knob.structural and knob.floor <= half < values[knob.key]


def next_knob(knobs: List[Knob], values: Dict[tuple, int], frozen: Dict[str, str]) -> Optional[Knob]:
    """Batch-like constants first, then the largest remaining size."""
    eligible = [k for k in knobs if k.label not in frozen and shrinkable(k, values)]
    if not eligible:
        return None
    return max(eligible, key=lambda k: (k.batch_like, values[k.key]))


def partners(knob: Knob, knobs: List[Knob], values: Dict[tuple, int]) -> List[Knob]:
    """Knobs to halve together with one that cannot shrink alone: equal values first (batch_size and a feature
    size that must match), then the largest."""
    others = [k for k in knobs if k.key != knob.key and shrinkable(k, values)]
    return sorted(others, key=lambda k: (values[k.key] != values[knob.key], -values[k.key]))


def fits(p: Probe) -> bool:
    return p.cpu_ms is not None and p.elements is not None and p.elements <= ELEMENT_BUDGET \
        and p.cpu_ms <= TIME_TARGET_MS


def rejection(current: Probe, trial: Probe, norm_floor: int) -> Optional[str]:
    """Why a smaller size set is not the same problem, or None when it is."""
    if trial.error:
        return trial.error
    if trial.meta_error and not current.meta_error:  # what ran before fails now: the new sizes broke it
        return trial.meta_error
    if current.signature and trial.signature and current.signature != trial.signature:
        return "it changes the outputs' number, ranks or dtypes"
    if current.state_signature != trial.state_signature:  # ShuffleNetUnit drops its shortcut conv when in == out
        return "it changes the model's parameters"
    if trial.norm_group is not None and trial.norm_group < norm_floor:
        return f"a normalisation layer would average over only {trial.norm_group} values"
    return None


@dataclass
class SizeChoice:
    overrides: Dict[tuple, int]     # knob key -> CPU value, for the knobs that changed
    probe: Probe
    description: str                # [kernelbench].cpu_scale


def choose_cpu_sizes(source: ProblemSource) -> SizeChoice:
    """Halves size knobs until the problem fits the element and time budgets on the CPU, keeping only changes after
    which the problem still builds, runs and keeps its outputs' structure. Knobs written with the same value
    (height, width = 224, 224; M = N = 4096) halve together. A knob that cannot shrink alone is tried with one
    partner (coupled constants: in level2/34 a LayerNorm over out_channels normalises the last axis, 2*W, so the
    two only shrink together); one that cannot shrink with any partner is kept as it is."""
    values = {k.key: k.value for k in source.knobs}
    current = probe(source, {})
    if current.error:
        raise Refused(f"the problem does not run as written: {current.error}")
    norm_floor = min(MIN_NORM_GROUP, current.norm_group or MIN_NORM_GROUP)
    history = [(values, current)]   # accepted states; those checked only on the meta device may fail on the CPU
    frozen: Dict[str, str] = {}
    last_error = None
    probes = 0
    while not fits(current) and probes < MAX_PROBES:
        knob = next_knob(source.knobs, values, frozen)
        if knob is None:
            break
        for group in shrink_groups(knob, source.knobs, values):
            trial_values = dict(values)
            for k in group:
                trial_values[k.key] = halve(k, values[k.key])
            trial = probe(source, changed(source.knobs, trial_values))
            probes += 1
            why = rejection(current, trial, norm_floor)
            if why is None:
                values, current = trial_values, trial
                history.append((values, current))
                break
            last_error = why
            if probes >= MAX_PROBES:
                break
        else:
            frozen[knob.label] = last_error or "it breaks the problem"
    if current.cpu_ms is None:
        values, current = smallest_running_sizes(source, history)
    if current.elements > ELEMENT_HARD_LIMIT or current.cpu_ms > TIME_HARD_LIMIT_MS:
        raise Refused(f"too large for the CPU even at the smallest valid sizes: {current.elements} elements, "
                      f"{current.cpu_ms:.0f} ms per forward")
    return SizeChoice(changed(source.knobs, values), current, describe_scaling(source.knobs, values, frozen, current))


def shrink_groups(knob: Knob, knobs: List[Knob], values: Dict[tuple, int]) -> List[List[Knob]]:
    """The knob with its twins (same written and current value), the knob alone, then the knob with each partner."""
    twins = [k for k in knobs if k.key != knob.key and shrinkable(k, values) and k.value == knob.value
             and values[k.key] == values[knob.key] and k.batch_like == knob.batch_like]
    groups = [[knob] + twins] if twins else []
    return groups + [[knob]] + [[knob, partner] for partner in partners(knob, knobs, values)]


def smallest_running_sizes(source: ProblemSource, history: list) -> Tuple[Dict[tuple, int], Probe]:
    """The smallest accepted sizes that run on the CPU, when no size set fits the budget (the architecture fixes
    its weights: VGG16's classifier). Meta kernels accept some shapes the CPU rejects, so walk back until one runs."""
    first_error = None
    for values, _ in reversed(history):
        final = probe(source, changed(source.knobs, values), cpu_limit=ELEMENT_HARD_LIMIT)
        if final.cpu_ms is not None:
            return values, final
        first_error = first_error or final.error or f"{final.elements or final.input_elements} elements"
    raise Refused(f"it does not run on the CPU at any size tried: {first_error}")


def changed(knobs: List[Knob], values: Dict[tuple, int]) -> Dict[tuple, int]:
    return {k.key: values[k.key] for k in knobs if values[k.key] != k.value}


def describe_scaling(knobs: List[Knob], values: Dict[tuple, int], frozen: Dict[str, str], p: Probe) -> str:
    """[kernelbench].cpu_scale: what changed, what could not, and whether the budgets were reached."""
    parts = [f"{k.label} {k.value}->{values[k.key]}" for k in knobs if values[k.key] != k.value]
    text = ", ".join(parts) if parts else "as written"
    if frozen:
        text += "; could not shrink further: " + ", ".join(frozen)
    if not fits(p):
        text += (f"; still {p.elements} elements and {p.cpu_ms:.1f} ms per eager forward at the smallest valid sizes"
                 f" (budget {ELEMENT_BUDGET} elements, {TIME_TARGET_MS:.0f} ms)")
    return text


# ---------------------------------------------------------------------------------------------------------------
# Written (CUDA) sizes


@dataclass
class Shapes:
    inputs: List[tuple]                 # get_inputs tensors
    state: List[Tuple[str, tuple]]      # parameters then buffers
    outputs: List[tuple]
    constants: Dict[str, int]
    init_inputs: list


def written_shapes(source: ProblemSource) -> Tuple[Optional[Shapes], str]:
    """Every tensor's shape at the sizes the problem file writes, without allocating them where possible: on the
    meta device, or once on the CPU when that fails and the written inputs and weights take at most 512 MB (the
    outputs' size is what is unknown until it runs)."""
    try:
        meta = instantiate(source, {}, meta=True, seed=0)
    except Refused:
        raise
    except Exception as e:
        return None, f"the model cannot be built on the meta device ({short_error(e)})"
    inputs = [tuple(v.shape) for v in meta.raw_inputs if isinstance(v, torch.Tensor)]
    state = [(n, tuple(t.shape)) for n, t, _ in state_tensors(meta.model)]
    try:
        outputs = [tuple(o.shape) for o in eager_forward(meta)]
    except Exception as meta_error:
        tensors = [v for v in meta.raw_inputs if isinstance(v, torch.Tensor)] + \
                  [t for _, t, _ in state_tensors(meta.model)]
        size = sum(t.numel() * t.element_size() for t in tensors)
        if size > WRITTEN_CPU_FALLBACK_BYTES:
            return None, (f"forward fails on the meta device ({type(meta_error).__name__}) and the written inputs "
                          f"take {size / 2**30:.1f} GiB")
        try:
            outputs = [tuple(o.shape) for o in eager_forward(instantiate(source, {}, meta=False, seed=0))]
        except Exception as e:
            return None, f"forward fails at the written sizes ({short_error(e)})"
    return Shapes(inputs, state, outputs, meta.int_constants(source), meta.init_inputs), "written"


# ---------------------------------------------------------------------------------------------------------------
# Init distributions


@dataclass(frozen=True)
class Dist:
    """One of Crucible's init distributions (runtime/tasks/task_loader.cpp: normal, uniform, randint, constant,
    choice), with the transform applied after the draw and its factor (triu, tril, symmetric, softmax)."""
    kind: str
    low: float = 0.0                  # uniform, randint (high exclusive); choice: its two values
    high: float = 1.0
    mean: float = 0.0                 # normal
    std: float = 1.0
    value: float = 0.0                # constant
    high_symbol: Optional[str] = None  # randint's bound when a size constant names it
    scale: Optional[Tuple[float, float]] = None  # a random factor per draw (Crucible's `scale`)
    dtype: Optional[torch.dtype] = None          # what the expression produces, when it says
    zero_dim: bool = False            # torch.rand(()): a random scalar, usable as a per-draw factor
    transform: Optional[str] = None   # applied after the draw and its factor

    @staticmethod
    def uniform(low, high):
        return Dist("uniform", low=float(low), high=float(high)) if high > low else Dist.constant(low)

    @staticmethod
    def normal(mean, std):
        return Dist("normal", mean=float(mean), std=float(std)) if std > 0 else Dist.constant(mean)

    @staticmethod
    def constant(value):
        return Dist("constant", value=float(value))

    def to_toml(self) -> str:
        if self.kind == "uniform":
            text = f'dist = "uniform", low = {toml_float(self.low)}, high = {toml_float(self.high)}'
        elif self.kind == "normal":
            text = f'dist = "normal", mean = {toml_float(self.mean)}, std = {toml_float(self.std)}'
        elif self.kind == "randint":
            high = toml_string(self.high_symbol) if self.high_symbol else str(int(self.high))
            text = f'dist = "randint", low = {int(self.low)}, high = {high}'
        elif self.kind == "choice":
            text = f'dist = "choice", values = [{toml_float(self.low)}, {toml_float(self.high)}]'
        else:
            text = f'dist = "constant", value = {toml_float(self.value)}'
        if self.scale:
            text += f", scale = [{toml_float(self.scale[0])}, {toml_float(self.scale[1])}]"
        if self.transform:
            text += f", transform = {toml_string(self.transform)}"
        return "{ " + text + " }"

    def describe(self) -> str:
        return self.to_toml()[2:-2]


@dataclass
class Scalar:
    """A plain Python value in an init expression (a size, a factor)."""
    value: Any


def affine(dist: Dist, mul: float, add: float, snippet: str) -> Dist:
    """dist * mul + add, where Crucible can express it."""
    if dist.kind == "randint":
        raise Unexpressible(f"arithmetic on integer draws ({snippet})")
    if dist.scale and add:
        raise Unexpressible(f"a shift after a random per-draw factor ({snippet})")
    # Crucible transforms after scaling: arithmetic after a transform is expressible only where they commute.
    if dist.transform == "softmax" or (dist.transform in ("triu", "tril") and add):
        raise Unexpressible(f"arithmetic after {dist.transform} ({snippet})")
    if dist.kind == "choice":
        low, high = sorted((dist.low * mul + add, dist.high * mul + add))
        result = Dist("choice", low=low, high=high) if high > low else Dist.constant(low)
    elif dist.kind == "uniform":
        low, high = sorted((dist.low * mul + add, dist.high * mul + add))
        result = Dist.uniform(low, high)
    elif dist.kind == "normal":
        result = Dist.normal(dist.mean * mul + add, dist.std * abs(mul))
    else:
        result = Dist.constant(dist.value * mul + add)
    return dataclasses.replace(result, scale=dist.scale, dtype=dist.dtype, transform=dist.transform)


def with_transform(dist, transform: str, snippet: str) -> Dist:
    """torch.triu(x), (x + x.T) / 2, x.softmax(dim=-1): one transform after a plain draw."""
    if not isinstance(dist, Dist):
        raise Unexpressible(f"{transform} of a plain value ({snippet})")
    if dist.transform or dist.zero_dim or dist.kind == "randint":
        raise Unexpressible(f"{transform} of {dist.transform or dist.kind} draws ({snippet})")
    return dataclasses.replace(dist, transform=transform)


def last_dim_argument(call: ast.Call, ctx: "ExprContext", position: int) -> bool:
    """dim=-1 (or the dim argument at `position`): the only softmax Crucible draws."""
    node = _keyword(call, "dim") or (call.args[position] if len(call.args) > position else None)
    return literal_number(node) == -1


def literal_number(node: Optional[ast.expr]) -> Optional[float]:
    """2, 0.5, -1 written as literals; anything else (a tensor expression included) is None."""
    if isinstance(node, (ast.Constant, ast.UnaryOp)):
        try:
            value = ast.literal_eval(node)
        except ValueError:
            return None
        return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None
    return None


def transposed_twin(node: ast.expr) -> Optional[str]:
    """x.T, x.t(), x.transpose(-2, -1) / (0, 1) / (1, 0): the name of x, or None."""
    if isinstance(node, ast.Attribute) and node.attr in ("T", "mT") and isinstance(node.value, ast.Name):
        return node.value.id
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and isinstance(node.func.value, ast.Name):
        dims = [literal_number(a) for a in node.args]
        if (node.func.attr == "t" and not dims) or \
                (node.func.attr == "transpose" and sorted(dims, key=str) in ([-2, -1], [0, 1])):
            return node.func.value.id
    return None


def symmetric_sum(node: ast.expr) -> Optional[str]:
    """x + x.T (either order): the name of x, or None."""
    if not (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add)):
        return None
    for plain, twin in ((node.left, node.right), (node.right, node.left)):
        if isinstance(plain, ast.Name) and transposed_twin(twin) == plain.id:
            return plain.id
    return None


def describe_symmetric(node: ast.BinOp, ctx: "ExprContext"):
    """(x + x.T) / 2 or 0.5 * (x + x.T): a symmetric matrix, or None when the expression is not that."""
    if isinstance(node.op, ast.Div):
        half_of = node.left if literal_number(node.right) == 2 else None
    elif isinstance(node.op, ast.Mult):
        half_of = next((a for a, b in ((node.left, node.right), (node.right, node.left))
                        if literal_number(b) == 0.5), None)
    else:
        half_of = None
    name = symmetric_sum(half_of) if half_of is not None else None
    if name is None:
        return None
    return with_transform(describe_expr(ast.Name(id=name, ctx=ast.Load()), ctx), "symmetric", snippet_of(node))


FLOAT_METHODS = {"float": torch.float32, "double": torch.float64, "half": torch.float16, "bfloat16": torch.bfloat16}
INT_METHODS = {"long": torch.int64, "int": torch.int32, "bool": torch.bool}
NEUTRAL_METHODS = {"contiguous", "clone", "detach", "requires_grad_"}


@dataclass
class ExprContext:
    """Where an init expression's names come from."""
    globals: dict                   # the problem module's namespace
    locals: dict = field(default_factory=dict)   # a captured __init__'s locals
    dists: dict = field(default_factory=dict)    # get_inputs locals described so far (Dist or Unexpressible)
    int_constants: set = field(default_factory=set)
    scale_uses: int = 0

    def evaluate(self, node: ast.expr):
        return eval(compile(ast.Expression(node), "<init expression>", "eval"), self.globals, dict(self.locals))

    def mentions_dist(self, node: ast.expr) -> bool:
        return any(isinstance(n, ast.Name) and n.id in self.dists for n in ast.walk(node))


def snippet_of(node: ast.expr, limit: int = 80) -> str:
    text = ast.unparse(node)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def describe_expr(node: ast.expr, ctx: ExprContext):
    """The distribution (or plain value) an expression produces. Raises Unexpressible naming the transform."""
    if isinstance(node, ast.Name) and node.id in ctx.dists:
        known = ctx.dists[node.id]
        if isinstance(known, Unexpressible):
            raise known
        return known
    if isinstance(node, ast.Call):
        if is_method_call(node, ctx):
            return describe_method(node, ctx)
        function = evaluate_or_explain(node.func, ctx)
        if is_torch_callable(function):
            return describe_factory(node, function, ctx)
    if isinstance(node, ast.BinOp):
        return describe_arithmetic(node, ctx)
    if isinstance(node, ast.Compare) and ctx.mentions_dist(node):
        return describe_threshold(node, ctx)
    if ctx.mentions_dist(node):
        raise Unexpressible(snippet_of(node))
    return Scalar(evaluate_or_explain(node, ctx))  # a size, a factor: math.sqrt(d), 1.0 / n, a constant


def evaluate_or_explain(node: ast.expr, ctx: ExprContext):
    try:
        return ctx.evaluate(node)
    except Exception as e:
        raise Unexpressible(f"{snippet_of(node)} (cannot evaluate it: {type(e).__name__})")


def is_method_call(call: ast.Call, ctx: ExprContext) -> bool:
    """x.float(), torch.rand(n).softmax(-1): a call on a value, not a function of a module (torch.rand, nn.X)."""
    if not isinstance(call.func, ast.Attribute):
        return False
    base = call.func.value
    if isinstance(base, (ast.Name, ast.Attribute)) and not ctx.mentions_dist(base):
        try:
            owner = ctx.evaluate(base)
        except Exception:
            return True
        return not (inspect.ismodule(owner) or inspect.isclass(owner))
    return True


def is_torch_callable(function) -> bool:
    """torch.rand, th.randn, torch.triu, F.softmax, nn.Parameter: what an init expression may apply."""
    return function in (nn.Parameter, torch.Tensor) or \
        str(getattr(function, "__module__", None) or "").startswith("torch") or \
        getattr(torch, getattr(function, "__name__", "") or "", None) is function


def _call_name(call: ast.Call) -> str:
    return ast.unparse(call.func)


def _keyword(call: ast.Call, name: str) -> Optional[ast.expr]:
    return next((k.value for k in call.keywords if k.arg == name), None)


def describe_factory(call: ast.Call, function, ctx: ExprContext):
    dtype_node = _keyword(call, "dtype")
    dtype = ctx.evaluate(dtype_node) if dtype_node is not None else None
    if function is nn.Parameter:
        return describe_expr(call.args[0], ctx)
    if function is torch.rand:
        zero_dim = len(call.args) == 1 and isinstance(call.args[0], (ast.Tuple, ast.List)) and not call.args[0].elts
        return dataclasses.replace(Dist.uniform(0.0, 1.0), dtype=dtype, zero_dim=zero_dim)
    if function is torch.randn:
        return dataclasses.replace(Dist.normal(0.0, 1.0), dtype=dtype)
    if function in (torch.zeros, torch.ones):
        return dataclasses.replace(Dist.constant(1.0 if function is torch.ones else 0.0), dtype=dtype)
    if function is torch.randint:
        return describe_randint(call, ctx, dtype)
    if function in (torch.triu, torch.tril) and len(call.args) == 1 and not call.keywords:
        return with_transform(describe_expr(call.args[0], ctx), function.__name__, snippet_of(call))
    if function in (torch.softmax, torch.nn.functional.softmax) and call.args and last_dim_argument(call, ctx, 1):
        return with_transform(describe_expr(call.args[0], ctx), "softmax", snippet_of(call))
    raise Unexpressible(f"{_call_name(call)} ({snippet_of(call)})")


def describe_randint(call: ast.Call, ctx: ExprContext, dtype) -> Dist:
    """torch.randint(high, size) or torch.randint(low, high, size); a bound written as a size constant stays a
    symbol, so the CPU and CUDA sizes each get theirs."""
    args = list(call.args)
    low_node = _keyword(call, "low") or (args[0] if len(args) >= 3 else None)
    high_node = _keyword(call, "high") or (args[1] if len(args) >= 3 else args[0] if args else None)
    if high_node is None:
        raise Unexpressible(f"torch.randint without a bound ({snippet_of(call)})")
    low = int(ctx.evaluate(low_node)) if low_node is not None else 0
    high = int(ctx.evaluate(high_node))
    symbol = high_node.id if isinstance(high_node, ast.Name) and high_node.id in ctx.int_constants else None
    return Dist("randint", low=low, high=high, high_symbol=symbol, dtype=dtype or torch.int64)


def describe_method(call: ast.Call, ctx: ExprContext):
    """x.float(), x.bool(), x.to(dtype), x.contiguous() ...: dtype changes Crucible can draw directly."""
    method = call.func.attr
    inner = describe_expr(call.func.value, ctx)
    if not isinstance(inner, Dist):
        raise Unexpressible(f".{method}() on a plain value ({snippet_of(call)})")
    if method in NEUTRAL_METHODS:
        return inner
    if method in ("triu", "tril") and not call.args and not call.keywords:
        return with_transform(inner, method, snippet_of(call))
    if method == "softmax" and last_dim_argument(call, ctx, 0):
        return with_transform(inner, "softmax", snippet_of(call))
    if method == "to" and call.args:
        target = ctx.evaluate(call.args[0])
        if not isinstance(target, torch.dtype):
            raise Unexpressible(f".to({snippet_of(call.args[0])})")
    elif method in FLOAT_METHODS:
        target = FLOAT_METHODS[method]
    elif method in INT_METHODS:
        target = INT_METHODS[method]
    else:
        raise Unexpressible(f".{method}() ({snippet_of(call)})")
    return with_dtype(inner, target, snippet_of(call))


def with_dtype(dist: Dist, dtype: torch.dtype, snippet: str) -> Dist:
    if dist.transform:
        raise Unexpressible(f"a dtype change after {dist.transform} ({snippet})")
    if dist.kind == "randint" and dtype.is_floating_point and dist.high == dist.low + 2 and not dist.high_symbol:
        return dataclasses.replace(Dist("choice", low=dist.low, high=dist.low + 1), dtype=dtype)  # a coin: +-1 labels
    if dist.kind == "choice" and dtype.is_floating_point:
        return dataclasses.replace(dist, dtype=dtype)
    if dist.kind == "constant" or (dist.kind == "randint") == (not dtype.is_floating_point and dtype != torch.bool):
        return dataclasses.replace(dist, dtype=dtype)
    if dist.kind == "randint" and dtype == torch.bool and dist.low == 0 and dist.high == 2:
        return dataclasses.replace(dist, dtype=dtype)
    if dist.kind == "randint":
        raise Unexpressible(f"integer draws converted to {DTYPE_NAMES.get(dtype, dtype)} ({snippet}); "
                            "Crucible draws randint only as integers")
    raise Unexpressible(f"continuous draws converted to {DTYPE_NAMES.get(dtype, dtype)} ({snippet})")


def describe_arithmetic(node: ast.BinOp, ctx: ExprContext):
    symmetric = describe_symmetric(node, ctx)
    if symmetric is not None:
        return symmetric
    left, right = describe_expr(node.left, ctx), describe_expr(node.right, ctx)
    snippet = snippet_of(node)
    if isinstance(left, Scalar) and isinstance(right, Scalar):
        return Scalar(evaluate_or_explain(node, ctx))
    if isinstance(left, Dist) and isinstance(right, Dist):
        if isinstance(node.op, ast.Mult) and (left.zero_dim or right.zero_dim):
            return random_scale(right if left.zero_dim else left, left if left.zero_dim else right, ctx, snippet)
        raise Unexpressible(f"arithmetic between two random tensors ({snippet})")
    dist, scalar = (left, right) if isinstance(left, Dist) else (right, left)
    if not isinstance(scalar.value, (int, float)) or isinstance(scalar.value, bool):
        raise Unexpressible(f"arithmetic with a {type(scalar.value).__name__} ({snippet})")
    c = float(scalar.value)
    if isinstance(node.op, ast.Mult):
        return affine(dist, c, 0.0, snippet)
    if isinstance(node.op, ast.Div) and dist is left and c != 0:
        return affine(dist, 1.0 / c, 0.0, snippet)
    if isinstance(node.op, ast.Add):
        return affine(dist, 1.0, c, snippet)
    if isinstance(node.op, ast.Sub):
        return affine(dist, 1.0, -c, snippet) if dist is left else affine(dist, -1.0, c, snippet)
    raise Unexpressible(f"{type(node.op).__name__} on a random tensor ({snippet})")


def random_scale(dist: Dist, factor: Dist, ctx: ExprContext, snippet: str) -> Dist:
    """torch.rand(...) * s with s = torch.rand(()): Crucible multiplies each draw by a factor from `scale`."""
    if factor != dataclasses.replace(Dist.uniform(0.0, 1.0), zero_dim=True) or dist.kind not in ("uniform", "normal") \
            or dist.scale or dist.zero_dim or dist.transform:
        raise Unexpressible(f"a product of random tensors ({snippet})")
    ctx.scale_uses += 1
    return dataclasses.replace(dist, scale=(RANDOM_SCALE_LOW, 1.0))


def describe_threshold(node: ast.Compare, ctx: ExprContext) -> Dist:
    """torch.rand(...) > 0.5: a fair coin, which Crucible draws as randint(0, 2) in bool."""
    if len(node.ops) == 1 and isinstance(node.ops[0], (ast.Gt, ast.Lt, ast.GtE, ast.LtE)):
        left, right = describe_expr(node.left, ctx), describe_expr(node.comparators[0], ctx)
        dist, threshold = (left, right) if isinstance(left, Dist) else (right, left)
        if dist == Dist.uniform(0.0, 1.0) and isinstance(threshold, Scalar) and threshold.value == 0.5:
            return Dist("randint", low=0, high=2, dtype=torch.bool)
    raise Unexpressible(f"a threshold Crucible cannot express ({snippet_of(node)})")


# ---------------------------------------------------------------------------------------------------------------
# Inputs: get_inputs() read from its source


@dataclass
class InputSlot:
    """One value get_inputs returns: a tensor with its distribution, or a value baked into the trace."""
    value: Any
    dist: Optional[Dist]


def describe_inputs(source: ProblemSource, instance: Instance, check: bool = True) -> List[InputSlot]:
    """Reads get_inputs statement by statement (straight-line assignments, then the return) and maps each returned
    tensor to a distribution; then (with `check`) checks the values get_inputs actually produced against it."""
    function = source.function("get_inputs")
    if function is None:
        raise Refused("get_inputs is not a plain module-level function")
    ctx = ExprContext(instance.namespace, int_constants=set(instance.int_constants(source)))
    returned = None
    for stmt in function.body:
        if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant):
            continue  # docstring
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
            try:
                ctx.dists[stmt.targets[0].id] = describe_expr(stmt.value, ctx)
            except Unexpressible as e:
                ctx.dists[stmt.targets[0].id] = e  # an error only if a returned input uses it
            continue
        if isinstance(stmt, ast.Return) and stmt.value is not None:
            returned = stmt.value.elts if isinstance(stmt.value, (ast.List, ast.Tuple)) else None
            break
        raise Refused(f"get_inputs has a statement the importer does not follow ({snippet_of(stmt)}); "
                      "only straight-line assignments and a returned list are read")
    if returned is None or len(returned) != len(instance.raw_inputs):
        raise Refused("get_inputs does not end in `return [...]` listing its inputs")
    slots = []
    for index, (node, value) in enumerate(zip(returned, instance.raw_inputs)):
        try:
            described = describe_expr(node, ctx)
        except Unexpressible as e:
            raise Refused(f"input {index} of get_inputs ({snippet_of(node)}) is made by {e}; Crucible's init "
                          "distributions (normal, uniform, randint, constant, choice) and transforms (triu, tril, "
                          "symmetric, softmax) cannot express it")
        slots.append(input_slot(index, node, value, described, check))
    if ctx.scale_uses > 1:
        raise Refused("several inputs of get_inputs share one random factor (torch.rand(())); Crucible draws each "
                      "input's factor independently")
    repeated = [n.id for n in returned if isinstance(n, ast.Name)]
    if len(repeated) != len(set(repeated)):
        raise Refused("get_inputs returns the same tensor twice; Crucible draws every input independently")
    return slots


def input_slot(index: int, node: ast.expr, value, described, check: bool) -> InputSlot:
    if not isinstance(value, torch.Tensor):
        return InputSlot(value, None)  # a plain value: baked into the trace
    if not isinstance(described, Dist):
        raise Refused(f"input {index} of get_inputs ({snippet_of(node)}) is a tensor the importer cannot trace "
                      "back to a random factory")
    if described.dtype is not None and described.dtype != value.dtype:
        raise Refused(f"input {index}: its expression gives {described.dtype} but get_inputs returned {value.dtype}")
    if check:
        check_values(described, value, f"input {index} of get_inputs")
    return InputSlot(value, described)


def early_input_check(source: ProblemSource) -> None:
    """Refuses inputs Crucible cannot draw before searching for sizes: the reason is then the inputs, not some
    size the search could not find (level1/100 couples batch_size and its feature size, and draws +-1 targets)."""
    try:
        meta = instantiate(source, {}, meta=True, seed=0)
    except Refused:
        raise
    except Exception:
        return  # the size search reports why the problem does not build
    describe_inputs(source, meta, check=False)


# ---------------------------------------------------------------------------------------------------------------
# Parameters and buffers


INIT_FUNCTIONS = ("uniform_", "normal_", "constant_", "ones_", "zeros_", "kaiming_uniform_", "kaiming_normal_",
                  "xavier_uniform_", "xavier_normal_", "trunc_normal_", "orthogonal_", "sparse_", "eye_", "dirac_")


def init_call_dist(name: str, a: dict):
    """The distribution a torch.nn.init call draws from, with fans computed by PyTorch's own helpers; the name of
    the function when no Crucible distribution matches it."""
    tensor = a["tensor"]
    init = torch.nn.init
    if name == "uniform_":
        return Dist.uniform(a["a"], a["b"])
    if name == "normal_":
        return Dist.normal(a["mean"], a["std"])
    if name == "constant_":
        return Dist.constant(float(a["val"]))
    if name in ("ones_", "zeros_"):
        return Dist.constant(1.0 if name == "ones_" else 0.0)
    if name in ("kaiming_uniform_", "kaiming_normal_"):
        fan = init._calculate_correct_fan(tensor, a["mode"])
        std = init.calculate_gain(a["nonlinearity"], a["a"]) / math.sqrt(fan)
        return Dist.uniform(-math.sqrt(3.0) * std, math.sqrt(3.0) * std) if name == "kaiming_uniform_" \
            else Dist.normal(0.0, std)
    if name in ("xavier_uniform_", "xavier_normal_"):
        fan_in, fan_out = init._calculate_fan_in_and_fan_out(tensor)
        std = a["gain"] * math.sqrt(2.0 / float(fan_in + fan_out))
        return Dist.uniform(-math.sqrt(3.0) * std, math.sqrt(3.0) * std) if name == "xavier_uniform_" \
            else Dist.normal(0.0, std)
    return f"torch.nn.init.{name}"


def tensor_key(t: torch.Tensor) -> tuple:
    return (t.data_ptr(), tuple(t.shape), tuple(t.stride()))


class InitRecorder:
    """Records which torch.nn.init function last initialised each tensor while the problem builds its model.
    PyTorch's modules initialise through these functions, so this is each module type's default initialiser:
    Linear/Conv*/ConvTranspose* weights kaiming_uniform_(a=sqrt(5)) = uniform(+-1/sqrt(fan_in)) and biases
    uniform(+-1/sqrt(fan_in)); BatchNorm/LayerNorm/GroupNorm weight ones_, bias zeros_; RNN/LSTM/GRU uniform(
    +-1/sqrt(hidden)); MultiheadAttention xavier_uniform_ and constant_(0); Embedding normal_. A problem that
    re-initialises (MobileNetV2: kaiming_normal_(mode='fan_out')) is recorded the same way."""

    def __enter__(self):
        self.records: Dict[tuple, Tuple[torch.Tensor, Any]] = {}  # holding the tensor keeps its address unique
        self.patched = []   # (module, attribute, original)
        for name in INIT_FUNCTIONS:
            original = getattr(torch.nn.init, name, None)
            if original is None:
                continue
            recording = self._recording(name, original)
            # torch.nn.init itself, and modules that bound the function at import
            # (torch.nn.modules.activation: `from torch.nn.init import xavier_uniform_` for MultiheadAttention)
            for module in list(sys.modules.values()):
                if getattr(module, "__name__", "").startswith("torch") and getattr(module, name, None) is original:
                    self.patched.append((module, name, original))
                    setattr(module, name, recording)
        return self

    def _recording(self, name, original):
        signature = inspect.signature(original)

        def recording(*args, **kwargs):
            result = original(*args, **kwargs)
            bound = signature.bind(*args, **kwargs)
            bound.apply_defaults()
            tensor = bound.arguments["tensor"]
            if isinstance(tensor, torch.Tensor) and tensor.device.type == "cpu":
                self.records[tensor_key(tensor)] = (tensor, init_call_dist(name, bound.arguments))
            return result
        return recording

    def __exit__(self, *exc):
        for module, name, original in self.patched:
            setattr(module, name, original)

    def lookup(self, tensor: torch.Tensor):
        record = self.records.get(tensor_key(tensor))
        if record is None:  # a deep copy of an initialised module (nn.TransformerEncoder clones its layer)
            record = next((r for r in self.records.values()
                           if r[0].shape == tensor.shape and r[0].dtype == tensor.dtype and torch.equal(r[0], tensor)),
                          None)
        return record[1] if record else None


class InitLocals:
    """Keeps the locals of every __init__ in the problem file as it returns, keyed by the module object, so that
    `nn.Parameter(init_sc * th.randn(...))` can be evaluated (init_sc is a local of that __init__)."""

    def __init__(self, filename: str):
        self.filename = filename
        self.by_module: Dict[int, dict] = {}

    def __enter__(self):
        self.previous = sys.getprofile()
        sys.setprofile(self._hook)
        return self

    def _hook(self, frame, event, arg):
        if event == "return" and frame.f_code.co_name == "__init__" and frame.f_code.co_filename == self.filename:
            owner = frame.f_locals.get("self")
            if isinstance(owner, nn.Module):
                self.by_module[id(owner)] = dict(frame.f_locals)

    def __exit__(self, *exc):
        sys.setprofile(self.previous)


@dataclass
class StateInput:
    """A parameter or buffer, as a task input."""
    path: str                   # named_parameters / named_buffers name
    tensor: torch.Tensor
    is_buffer: bool
    dist: Dist

    @property
    def input_name(self) -> str:
        return self.path.replace(".", "_")


def constructor_expressions(source: ProblemSource, module: nn.Module, leaf: str) -> List[ast.expr]:
    """The expressions the problem's own __init__ wraps in nn.Parameter(...) or registers as buffer `leaf`."""
    for cls in type(module).__mro__:
        init = cls.__dict__.get("__init__")
        code = getattr(init, "__code__", None)
        if code is None or code.co_filename != str(source.problem.path):
            continue
        function = source.function_at_line(code.co_firstlineno)
        if function is None:
            continue
        found = []
        for node in ast.walk(function):
            if isinstance(node, ast.Assign) and len(node.targets) == 1:
                target = node.targets[0]
                if isinstance(target, ast.Attribute) and target.attr == leaf and \
                        isinstance(target.value, ast.Name) and target.value.id == "self":
                    found.append(node.value)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                    node.func.attr in ("register_buffer", "register_parameter") and len(node.args) >= 2 and \
                    isinstance(node.args[0], ast.Constant) and node.args[0].value == leaf:
                found.append(node.args[1])
        if found:
            return found
    return []


def state_dist(source: ProblemSource, instance: Instance, path: str, tensor: torch.Tensor, twin: torch.Tensor,
               recorder: InitRecorder, init_locals: InitLocals) -> Dist:
    """How a parameter or buffer is initialised: by a recorded torch.nn.init call; as one fixed value (a tensor
    the same under two seeds whose elements are all equal: norm buffers, torch.ones/zeros/tensor(c) parameters);
    or by the problem's own nn.Parameter(<random expression>) read from its __init__."""
    recorded = recorder.lookup(tensor)
    if isinstance(recorded, str):
        raise Refused(f"parameter {path} is initialised by {recorded}, which no Crucible init distribution expresses")
    if recorded is not None:
        return recorded
    if torch.equal(tensor, twin):
        flat = tensor.detach().reshape(-1)
        if flat.numel() and bool((flat == flat[0]).all()):
            return Dist.constant(float(flat[0].item()))
        raise Refused(f"{path} is a fixed tensor of varying values (e.g. a mask or an index table); no init "
                      "distribution expresses it")
    owner_path, _, leaf = path.rpartition(".")
    owner = instance.model.get_submodule(owner_path)
    expressions = constructor_expressions(source, owner, leaf)
    ctx = ExprContext(instance.namespace, init_locals.by_module.get(id(owner), {}),
                      int_constants=set(instance.int_constants(source)))
    dists = set()
    for expression in expressions:
        try:
            described = describe_expr(expression, ctx)
        except Unexpressible as e:
            raise Refused(f"{path} is initialised by {e}; no Crucible init distribution expresses it")
        if isinstance(described, Dist):
            dists.add(dataclasses.replace(described, dtype=None))
    if len(dists) != 1:
        raise Refused(f"cannot tell how {path} is initialised (no torch.nn.init call and no single "
                      "nn.Parameter(...) expression in its module's __init__)")
    dist = dists.pop()
    if dist.scale or dist.kind == "randint":
        raise Refused(f"{path}: its initialiser ({dist.describe()}) is not a parameter distribution")
    return dist


def describe_state(source: ProblemSource, instance: Instance, twin: Instance, recorder: InitRecorder,
                   init_locals: InitLocals) -> List[StateInput]:
    mine, theirs = state_tensors(instance.model), state_tensors(twin.model)
    if [n for n, _, _ in mine] != [n for n, _, _ in theirs] or \
            any(a.shape != b.shape for (_, a, _), (_, b, _) in zip(mine, theirs)):
        raise Refused("the model's parameters depend on the random seed")
    state = []
    for (path, tensor, is_buffer), (_, twin_tensor, _) in zip(mine, theirs):
        owner = instance.model.get_submodule(path.rpartition(".")[0])
        if isinstance(owner, nn.Embedding) and owner.padding_idx is not None:
            raise Refused(f"{path}: an Embedding with padding_idx has a zero row no distribution expresses")
        dist = state_dist(source, instance, path, tensor, twin_tensor, recorder, init_locals)
        check_values(dist, tensor, path)
        state.append(StateInput(path, tensor, is_buffer, dist))
    names = [s.input_name for s in state]
    if len(set(names)) != len(names):
        raise Refused("two parameters or buffers get the same input name once '.' becomes '_'")
    return state


# ---------------------------------------------------------------------------------------------------------------
# Checking declared distributions against real values, and drawing from them


def scaled_range(dist: Dist, low: float, high: float) -> Tuple[float, float]:
    if not dist.scale:
        return low, high
    corners = [low * s for s in dist.scale] + [high * s for s in dist.scale]
    return min(corners + [0.0]), max(corners + [0.0])


def transformed_structure(dist: Dist, x: torch.Tensor) -> Tuple[bool, Optional[torch.Tensor]]:
    """Whether x has the shape of the transform's results, and the elements that are plain draws (None when no
    element is: a symmetric matrix's entries are averages, a softmax's are probabilities)."""
    if dist.transform in ("triu", "tril"):
        if x.dim() < 2:
            return False, None
        keep = getattr(torch, dist.transform)(torch.ones(x.shape[-2:], dtype=torch.bool)).expand(x.shape)
        return bool((x[~keep] == 0).all()), x[keep]
    if dist.transform == "symmetric":
        return x.dim() >= 2 and x.shape[-1] == x.shape[-2] and torch.allclose(x, x.transpose(-2, -1)), None
    sums = x.sum(dim=-1)
    return bool((x >= 0).all()) and torch.allclose(sums, torch.ones_like(sums), atol=1e-4), None


def check_values(dist: Dist, tensor: torch.Tensor, what: str) -> None:
    """The problem's own values must look like draws from the declared distribution: this catches an expression
    or init call read wrongly, and initialisation the importer did not see."""
    x = tensor.detach().to(torch.float64)
    if x.numel() == 0:
        raise Refused(f"{what} has no elements")
    if dist.transform:
        ok, plain = transformed_structure(dist, x)
        if not ok:
            raise Refused(f"{what}: the problem's own values are not what {dist.transform} gives")
        if plain is None:
            low, high = scaled_range(dist, dist.low, dist.high)
            if dist.transform == "symmetric" and dist.kind == "uniform" and not ((x >= low) & (x <= high)).all():
                raise Refused(f"{what}: the problem's own values do not look like {dist.describe()}")
            return
        x, dist = plain, dataclasses.replace(dist, transform=None)
    x = x.reshape(-1)
    n = x.numel()
    if dist.kind == "choice":
        ok = bool(((x == dist.low) | (x == dist.high)).all())
    elif dist.kind == "constant":
        ok = bool((x == dist.value).all())
    elif dist.kind == "randint":
        high = dist.high
        ok = bool(((x >= dist.low) & (x < high) & (x == x.round())).all())
    elif dist.kind == "uniform":
        low, high = scaled_range(dist, dist.low, dist.high)
        slack = 1e-6 * (high - low)
        ok = bool(((x >= low - slack) & (x <= high + slack)).all())
        if ok and n >= 64 and not dist.scale:
            ok = abs(x.std().item() / ((dist.high - dist.low) / math.sqrt(12.0)) - 1.0) < 0.35
    else:
        ok = bool(torch.isfinite(x).all())
        if ok and n >= 64 and not dist.scale:
            ok = abs(x.std().item() / dist.std - 1.0) < 0.35 and \
                abs(x.mean().item() - dist.mean) < 5 * dist.std / math.sqrt(n) + 0.05 * dist.std
    if not ok:
        raise Refused(f"{what}: the problem's own values do not look like {dist.describe()} (initialised in a way "
                      "the importer did not see?)")


def draw(dist: Dist, shape: tuple, dtype: torch.dtype, generator: torch.Generator) -> torch.Tensor:
    """A draw as Crucible's InputPool makes it: float32 (int64 for randint), cast to the dtype, times the factor,
    then transformed; on the generator's device."""
    device = generator.device
    if dist.kind == "uniform":
        t = torch.empty(shape, device=device).uniform_(dist.low, dist.high, generator=generator)
    elif dist.kind == "normal":
        t = torch.empty(shape, device=device).normal_(dist.mean, dist.std, generator=generator)
    elif dist.kind == "randint":
        t = torch.randint(int(dist.low), int(dist.high), shape, generator=generator, device=device)
    elif dist.kind == "choice":
        t = torch.randint(0, 2, shape, generator=generator, dtype=torch.float64, device=device) * \
            (dist.high - dist.low) + dist.low
    else:
        t = torch.full(shape, dist.value, dtype=torch.float64, device=device)
    t = t.to(dtype)
    if dist.scale:
        low, high = dist.scale
        u = torch.rand((), generator=generator, dtype=torch.float64, device=device).item()
        t = t * (low + (high - low) * u)
    if dist.transform in ("triu", "tril"):
        t = getattr(torch, dist.transform)(t)
    elif dist.transform == "symmetric":
        t = (t + t.transpose(-2, -1)) / 2
    elif dist.transform == "softmax":
        t = t.softmax(dim=-1)
    return t


# ---------------------------------------------------------------------------------------------------------------
# The traced program


@contextlib.contextmanager
def substituted_state(model: nn.Module, values: Dict[str, torch.Tensor]):
    """Runs the model with these tensors in place of its parameters and buffers (what functional_call does; 1.13's
    functional_call refuses to run under torch.jit.trace and leaves RNNs on their cached _flat_weights, so this
    also refreshes those)."""
    by_identity = {id(t): name for name, t, _ in state_tensors(model)}
    saved = []
    for module in model.modules():
        for store in (module._parameters, module._buffers):
            for leaf, tensor in list(store.items()):
                if tensor is not None and id(tensor) in by_identity:
                    saved.append((store, leaf, tensor))
    rnns = [(m, m._flat_weights) for m in model.modules() if isinstance(m, nn.RNNBase)]
    try:
        for store, leaf, tensor in saved:
            store[leaf] = values[by_identity[id(tensor)]]
        for module, _ in rnns:
            module._flat_weights = [getattr(module, n) for n in module._flat_weights_names]
        yield
    finally:
        for store, leaf, tensor in saved:
            store[leaf] = tensor
        for module, flat in rnns:
            module._flat_weights = flat


class TaskProgram(nn.Module):
    """forward(*get_inputs tensors, *parameters, *buffers) -> the problem's outputs. The model is held outside the
    module tree, so the trace inlines its operations and the saved file carries none of its weights."""

    def __init__(self, model: nn.Module, template: list, state: List[StateInput]):
        super().__init__()
        object.__setattr__(self, "model", model)
        self.template = template
        self.tensor_inputs = sum(1 for slot in template if slot is TENSOR_SLOT)
        self.state_paths = [s.path for s in state]
        self.buffer_paths = {s.path for s in state if s.is_buffer}

    def forward(self, *args):
        values = dict(zip(self.state_paths, args[self.tensor_inputs:]))
        for path in self.buffer_paths:
            values[path] = values[path].clone()  # training-mode running-stat updates stay off the caller's tensors
        with substituted_state(self.model, values):
            result = self.model(*call_arguments(self.template, list(args[:self.tensor_inputs])))
        return tuple(result) if isinstance(result, list) else result


def trace_program(instance: Instance, slots: List[InputSlot], state: List[StateInput]) -> torch.jit.ScriptModule:
    program = TaskProgram(instance.model, input_template(instance.raw_inputs), state)
    example = [s.value.clone() for s in slots if s.dist] + [s.tensor.detach().clone() for s in state]
    with torch.no_grad():
        return torch.jit.trace(program, tuple(example), check_trace=False)


def check_repeatable(instance: Instance) -> None:
    """Dropout in training mode or random numbers drawn in forward make a reference no candidate can match."""
    tensors = [v for v in instance.raw_inputs if isinstance(v, torch.Tensor)]
    first = eager_forward(instance, [t.clone() for t in tensors])
    second = eager_forward(instance, [t.clone() for t in tensors])
    for a, b in zip(first, second):
        if not torch.equal(a, b):  # exact: an LSTM's random h0 fades to ~1e-6 after many steps, yet is random
            raise Refused("forward is random: two eager runs on the same inputs differ (dropout active in training "
                          "mode, or random numbers drawn in forward)")


def same_values(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal element for element, a NaN equal to a NaN in the same place."""
    if a.dtype.is_floating_point or a.dtype.is_complex:
        return bool(torch.equal(a.isnan(), b.isnan()) and torch.equal(a.nan_to_num(), b.nan_to_num()))
    return bool(torch.equal(a, b))


def check_leaves_inputs_unchanged(instance: Instance) -> None:
    """The evaluator requires a kernel to leave its inputs (get_inputs' tensors and the parameters) unchanged and
    runs the reference on the same memory, so a forward that writes into one (`x.mul_(2)`) judges every correct
    kernel wrong. Buffers are exempt: the task's program gives the model copies of them (running statistics)."""
    positions = [i for i, v in enumerate(instance.raw_inputs) if isinstance(v, torch.Tensor)]
    tensors = [instance.raw_inputs[i].clone() for i in positions]
    pristine = [t.clone() for t in tensors]
    parameters = [(name, t, t.detach().clone()) for name, t, is_buffer in state_tensors(instance.model)
                  if not is_buffer]
    eager_forward(instance, tensors)
    changed = [f"get_inputs()[{i}]" for i, t, p in zip(positions, tensors, pristine) if not same_values(t, p)]
    changed += [f"parameter {name}" for name, t, p in parameters if not same_values(t.detach(), p)]
    if changed:
        raise Refused(f"forward modifies its input in place ({', '.join(changed)}): a kernel must leave its inputs "
                      "unchanged, so no correct kernel could pass")


def outputs_match(got: torch.Tensor, want: torch.Tensor) -> bool:
    if got.shape != want.shape or got.dtype != want.dtype:
        return False
    if want.dtype.is_floating_point:
        atol, rtol = TOLERANCES.get(DTYPE_NAMES.get(want.dtype, "float32"), TOLERANCES["float32"])
        return torch.allclose(got, want, atol=atol, rtol=rtol, equal_nan=True)
    return torch.equal(got, want)


def eager_with_values(instance: Instance, slots: List[InputSlot], state: List[StateInput],
                      values: List[torch.Tensor]) -> List[torch.Tensor]:
    """The module itself, holding the drawn parameters and buffers: the ground truth the trace must match."""
    n_inputs = sum(1 for s in slots if s.dist)
    with torch.no_grad():
        for s, v in zip(state, values[n_inputs:]):
            s.tensor.copy_(v)
    return eager_forward(instance, values[:n_inputs])


@dataclass
class Verified:
    peaks: Dict[str, float]   # per floating output dtype, the smallest over the draws of the largest magnitude
    constant: bool            # every output is the same for every draw (the problem's answer ignores its inputs)
    concentrated: bool = False  # some output's draws are all within SPREAD_MARGIN tolerances of each other
    fixed_answer_chance: float = 0.0  # the share of draws that one draw's answer passes


def within_margin(a: torch.Tensor, b: torch.Tensor, margin: float,
                  tolerances: Dict[str, Tuple[float, float]]) -> bool:
    """a passes b's tolerance (the task's) even when it is `margin` times tighter: the draws hardly differ."""
    if not b.dtype.is_floating_point or a.shape != b.shape:
        return False
    atol, rtol = tolerances.get(DTYPE_NAMES.get(b.dtype, "float32"), TOLERANCES["float32"])
    difference = (a.double() - b.double()).abs()
    return bool((difference * margin <= atol + rtol * b.double().abs()).all())


def verify(program_path: Path, instance: Instance, slots: List[InputSlot], state: List[StateInput]) -> Verified:
    """The saved trace, loaded back, must match eager execution on fresh draws from the declared distributions.
    Outputs must change from draw to draw, except in a problem whose every output is a constant: a few KernelBench
    problems are written so (level2/80 subtracts a row's only element from itself); they are imported and marked,
    since no check can tell a kernel for them from one that writes the constant."""
    loaded = torch.jit.load(str(program_path))
    declared = [(s.dist, tuple(s.value.shape), s.value.dtype) for s in slots if s.dist] + \
               [(s.dist, tuple(s.tensor.shape), s.tensor.dtype) for s in state]
    per_draw = []
    for index in range(VERIFY_DRAWS):
        generator = torch.Generator().manual_seed(7919 + index)
        values = [draw(dist, shape, dtype, generator) for dist, shape, dtype in declared]
        with torch.no_grad():
            got = output_list(loaded(*[v.clone() for v in values]))
        want = eager_with_values(instance, slots, state, [v.clone() for v in values])
        if len(got) != len(want):
            raise Refused(f"the trace returns {len(got)} outputs, eager {len(want)}")
        for k, (g, w) in enumerate(zip(got, want)):
            if w.dtype.is_floating_point and not bool(torch.isfinite(w).all()):
                raise Refused(f"output {k} holds NaN or inf for inputs drawn from the declared distributions")
            if not outputs_match(g, w):
                detail = f"max abs difference {(g.double() - w.double()).abs().max().item():.3g}" \
                    if g.shape == w.shape else f"shape {tuple(g.shape)} vs {tuple(w.shape)}"
                raise Refused(f"the trace does not match eager execution on draw {index} (output {k}: {detail}); "
                              "the traced control flow or constants depend on the inputs")
        per_draw.append(want)
    fixed = [all(torch.equal(per_draw[0][k], d[k]) for d in per_draw[1:]) for k in range(len(per_draw[0]))]
    if any(fixed) and not all(fixed):
        raise Refused(f"output {fixed.index(True)} is the same for every draw: it does not depend on the inputs")
    peaks: Dict[str, float] = {}
    for outputs in per_draw:
        for o in outputs:
            if o.dtype.is_floating_point and o.numel():
                name = DTYPE_NAMES.get(o.dtype, "float32")
                peaks[name] = min(peaks.get(name, math.inf), float(o.abs().max()))
    tolerances = tolerances_for(peaks)[0]
    concentrated = not all(fixed) and any(
        all(within_margin(per_draw[i][k], per_draw[j][k], SPREAD_MARGIN, tolerances)
            for i in range(len(per_draw)) for j in range(i + 1, len(per_draw)))
        for k in range(len(per_draw[0])))
    return Verified(peaks, constant=all(fixed), concentrated=concentrated)


def fixed_answer_chance(program_path: Path, slots: List[InputSlot], state: List[StateInput],
                        tolerances: Dict[str, Tuple[float, float]]) -> float:
    """The largest share of other draws that one draw's answer passes (0 when outputs are large: a fixed answer
    cannot pass thousands of independent elements by chance)."""
    loaded = torch.jit.load(str(program_path))
    declared = [(s.dist, tuple(s.value.shape), s.value.dtype) for s in slots if s.dist] + \
               [(s.dist, tuple(s.tensor.shape), s.tensor.dtype) for s in state]
    answers = []
    for index in range(CHANCE_DRAWS):
        generator = torch.Generator().manual_seed(104729 + index)
        with torch.no_grad():
            outputs = output_list(loaded(*[draw(d, shape, dtype, generator) for d, shape, dtype in declared]))
        if index == 0 and sum(o.numel() for o in outputs) > SMALL_OUTPUT_ELEMENTS:
            return 0.0
        answers.append(outputs)
    chance = 0.0
    for i, fixed in enumerate(answers):
        passes = sum(all(within_margin(f, o, 1.0, tolerances) if o.dtype.is_floating_point else torch.equal(f, o)
                         for f, o in zip(fixed, other))
                     for j, other in enumerate(answers) if j != i)
        chance = max(chance, passes / (len(answers) - 1))
    return chance


def trials_for(chance: float) -> int:
    """Correctness trials that a fixed answer passing each with `chance` passes all of with FIXED_ANSWER_RISK."""
    if chance <= 0.0:
        return 0
    if chance >= 1.0:
        return MAX_CORRECTNESS_TRIALS + 1
    return max(2, math.ceil(math.log(FIXED_ANSWER_RISK) / math.log(chance)))


def tolerances_for(peaks: Dict[str, float]) -> Tuple[Dict[str, Tuple[float, float]], str]:
    """KernelBench's tolerances, except where outputs are so small that an all-zero answer would pass them (a
    softmax over thousands of classes): there atol is lowered to a thousandth of the outputs' peak, and the note
    says so. The evaluator refuses a task whose zeros pass, so without this such a task could not be used."""
    tolerances, notes = dict(TOLERANCES), []
    for name, peak in sorted(peaks.items()):
        atol, rtol = tolerances.get(name, TOLERANCES["float32"])
        if peak * (1 - rtol) <= 10 * atol and peak > 0:
            tolerances[name] = (peak * 1e-3, rtol)
            notes.append(f"{name} atol {atol:g} -> {peak * 1e-3:.3g}: outputs peak at {peak:.3g}, so all zeros "
                         "would pass KernelBench's tolerance")
    return tolerances, "; ".join(notes)


# ---------------------------------------------------------------------------------------------------------------
# Size symbols


@dataclass
class TensorDecl:
    """An [[inputs]] or [[outputs]] entry."""
    name: str
    dtype: str
    cpu_shape: tuple
    written_shape: Optional[tuple]
    dist: Optional[Dist] = None
    shape: List[str] = field(default_factory=list)


def assign_symbols(decls: List[TensorDecl], cpu_constants: Dict[str, int],
                   written_constants: Optional[Dict[str, int]]) -> Tuple[Dict[str, int], Optional[Dict[str, int]]]:
    """Names every dim: a module-level int constant whose value it equals (uniquely, at both size sets), else
    <tensor>_d<k>. Returns the values of every symbol at the CPU and written sizes."""
    cpu_sizes: Dict[str, int] = {}
    written_sizes: Optional[Dict[str, int]] = {} if written_constants is not None else None

    def only_constant(constants: Dict[str, int], value: int) -> Optional[str]:
        names = [n for n, v in constants.items() if v == value and v != 1]
        return names[0] if len(names) == 1 else None

    for decl in decls:
        decl.shape = []
        for k, cpu_value in enumerate(decl.cpu_shape):
            symbol = only_constant(cpu_constants, cpu_value)
            if symbol and written_constants is not None:
                if only_constant(written_constants, decl.written_shape[k]) != symbol:
                    symbol = None
            symbol = symbol or f"{decl.name}_d{k}"
            decl.shape.append(symbol)
            cpu_sizes[symbol] = cpu_value
            if written_sizes is not None:
                written_sizes[symbol] = decl.written_shape[k]
    for decl in decls:
        if decl.dist and decl.dist.high_symbol:
            symbol = decl.dist.high_symbol
            cpu_sizes[symbol] = cpu_constants[symbol]
            if written_sizes is not None:
                written_sizes[symbol] = written_constants[symbol]
    for sizes in (cpu_sizes, written_sizes or {}):
        for symbol, value in sizes.items():
            if value <= 0:
                raise Refused(f"size {symbol} is {value}; Crucible sizes must be positive")
    return cpu_sizes, written_sizes


def same_structure(cpu: Shapes, written: Shapes) -> Optional[str]:
    """Why the written sizes cannot share the CPU's symbols, or None."""
    if [len(s) for s in cpu.inputs] != [len(s) for s in written.inputs]:
        return "get_inputs returns different tensors at the written sizes"
    if [(n, len(s)) for n, s in cpu.state] != [(n, len(s)) for n, s in written.state]:
        return "the model has different parameters at the written sizes"
    if [len(s) for s in cpu.outputs] != [len(s) for s in written.outputs]:
        return "the outputs differ in number or rank at the written sizes"
    return None


# ---------------------------------------------------------------------------------------------------------------
# TOML


def toml_string(text: str) -> str:
    out = []
    for ch in text:
        if ch == "\\":
            out.append("\\\\")
        elif ch == '"':
            out.append('\\"')
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\t":
            out.append("\\t")
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\u{ord(ch):04X}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def toml_multiline(text: str) -> str:
    """The problem's code exactly: a literal multi-line string, or an escaped basic one when the code holds '''
    (or control characters, or ends in a quote) that a literal string cannot."""
    controls = any((ord(ch) < 0x20 and ch not in "\n\t") or ord(ch) == 0x7F for ch in text)
    if "'''" not in text and not controls and not text.endswith("'"):
        return "'''\n" + text + "'''"
    out = []
    for ch in text:
        if ch == "\\":
            out.append("\\\\")
        elif ch == '"':
            out.append('\\"')
        elif (ord(ch) < 0x20 and ch not in "\n\t") or ord(ch) == 0x7F:
            out.append(f"\\u{ord(ch):04X}")
        else:
            out.append(ch)
    return '"""\n' + "".join(out) + '"""'


def toml_float(x: float) -> str:
    if not math.isfinite(x):
        raise Refused(f"a distribution parameter is {x}")
    return repr(float(x))


def render_task(problem: Problem, source_text: str, inputs: List[TensorDecl], outputs: List[TensorDecl],
                cpu_sizes: Dict[str, int], written_sizes: Optional[Dict[str, int]], origin: Dict[str, Any],
                tolerances: Dict[str, Tuple[float, float]], constant_output: bool,
                cuda_program: Optional[str], min_correctness_trials: int = 0) -> str:
    lines = [
        f"name = {toml_string(problem.task_name)}",
        f"level = {problem.level}",
        'family = "kernelbench"',
        f"description = {toml_string(f'KernelBench level {problem.level} problem {problem.id}: {problem.title}')}",
        'reference = "torchscript"',
        f"reference_source = {toml_multiline(source_text)}",
    ]
    if constant_output:  # the evaluator's constant-output checks cannot apply: the constant is the answer
        lines.append("constant_output = true")
    if min_correctness_trials:
        lines.append(f"min_correctness_trials = {min_correctness_trials}")
    lines += [
        "",
        "[reference_files]",
        f"cpu = {toml_string(problem.task_name + '.cpu.pt')}",
    ]
    if cuda_program:
        lines.append(f"cuda = {toml_string(cuda_program)}")
    for table, decls in (("inputs", inputs), ("outputs", outputs)):
        for decl in decls:
            lines += ["", f"[[{table}]]", f"name = {toml_string(decl.name)}", f"dtype = {toml_string(decl.dtype)}",
                      "shape = [" + ", ".join(toml_string(s) for s in decl.shape) + "]"]
            if decl.dist:
                lines.append(f"init = {decl.dist.to_toml()}")
    lines += ["", "[tolerance]"]
    dtypes = {d.dtype for d in inputs + outputs}
    for dtype, (atol, rtol) in tolerances.items():
        if dtype == "float32" or dtype in dtypes:
            lines.append(f"{dtype} = {{ atol = {toml_float(atol)}, rtol = {toml_float(rtol)} }}")
    for backend, sizes in (("cpu", cpu_sizes), ("cuda", written_sizes)):
        if sizes is not None:
            lines += ["", f"[sizes.{backend}]"] + [f"{symbol} = {value}" for symbol, value in sizes.items()]
    lines += ["", "[kernelbench]"]
    for key, value in origin.items():
        lines.append(f"{key} = {value}" if isinstance(value, int) else f"{key} = {toml_string(str(value))}")
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------------------------------
# einops.rearrange for problems that import einops (level3/48, 49) where it is not installed: Debian ships no
# python3-einops. rearrange is a pure reshape/permute, so the trace holds the same operations as with the package;
# any other einops function stays missing and such a problem is refused.


class EinopsError(ValueError):
    pass


def parse_einops_side(side: str) -> List[List[str]]:
    """'b (c l) ... h' -> [['b'], ['c', 'l'], ['...'], ['h']]; '1' or '()' is a group of no axes."""
    tokens = re.findall(r"\(|\)|\.\.\.|[A-Za-z_][A-Za-z0-9_]*|\d+", side)
    if "".join(tokens) != "".join(side.split()):
        raise EinopsError(f"cannot parse {side.strip()!r}")
    groups: List[List[str]] = []
    group: Optional[List[str]] = None
    for token in tokens:
        if token == "(":
            if group is not None:
                raise EinopsError("nested parentheses")
            group = []
        elif token == ")":
            if group is None:
                raise EinopsError("unbalanced parentheses")
            groups.append(group)
            group = None
        elif token.isdigit():
            if token != "1":
                raise EinopsError("only 1 may be written as a number")
            if group is None:
                groups.append([])
        elif group is not None:
            if token == "...":
                raise EinopsError("an ellipsis inside parentheses")
            group.append(token)
        else:
            groups.append([token])
    if group is not None:
        raise EinopsError("unbalanced parentheses")
    return groups


def rearrange(tensor, pattern: str, **axes_lengths):
    """einops.rearrange: split the input's axes into elementary ones, permute them, group them as the output says."""
    if isinstance(tensor, (list, tuple)):
        tensor = torch.stack(list(tensor))
    left_text, arrow, right_text = pattern.partition("->")
    if not arrow:
        raise EinopsError(f"no '->' in {pattern!r}")
    left, right = parse_einops_side(left_text), parse_einops_side(right_text)
    covered = tensor.dim() - (len(left) - 1)
    if ["..."] in left and covered < 0:
        raise EinopsError(f"{pattern!r} needs more axes than the input's {tensor.dim()}")
    ellipsis = [[f"...{i}"] for i in range(covered)] if ["..."] in left else []

    def expand(groups):
        return [axes for g in groups for axes in (ellipsis if g == ["..."] else [g])]

    left, right = expand(left), expand(right)
    if len(left) != tensor.dim():
        raise EinopsError(f"{pattern!r} names {len(left)} axes, the input has {tensor.dim()}")
    lengths = dict(axes_lengths)
    for group, size in zip(left, tensor.shape):
        unknown = [a for a in group if a not in lengths]
        known = math.prod(lengths[a] for a in group if a in lengths)
        if len(unknown) > 1 or (unknown and size % known) or (not unknown and known != size):
            raise EinopsError(f"cannot split an axis of {size} as {group} in {pattern!r}")
        if unknown:
            lengths[unknown[0]] = size // known
    elementary_left = [a for g in left for a in g]
    elementary_right = [a for g in right for a in g]
    if sorted(elementary_left) != sorted(elementary_right) or len(set(elementary_left)) != len(elementary_left):
        raise EinopsError(f"{pattern!r} does not use the same axes on both sides")
    x = tensor.reshape([lengths[a] for a in elementary_left])
    x = x.permute([elementary_left.index(a) for a in elementary_right])
    return x.reshape([math.prod(lengths[a] for a in g) for g in right])


EINOPS_FALLBACK_NOTE = "rearrange from import_kernelbench.py (einops is not installed)"
einops_fallback_in_use = False


def provide_einops_fallback() -> None:
    global einops_fallback_in_use
    if importlib.util.find_spec("einops") is None:
        module = types.ModuleType("einops")
        module.rearrange, module.EinopsError = rearrange, EinopsError
        sys.modules["einops"] = module
        einops_fallback_in_use = True


# ---------------------------------------------------------------------------------------------------------------
# One problem, end to end


def dtype_name(dtype: torch.dtype, what: str) -> str:
    if dtype not in DTYPE_NAMES:
        raise Refused(f"{what} has dtype {dtype}, which Crucible does not support")
    return DTYPE_NAMES[dtype]


def task_files(out_dir: Path, name: str) -> Tuple[Path, Path]:
    return out_dir / f"{name}.toml", out_dir / f"{name}.cpu.pt"


def trace_on_cuda(source: ProblemSource, slots: List[InputSlot], state: List[StateInput], written: Shapes,
                  program_path: Path) -> str:
    """The problem at its written sizes on the GPU, traced with this PyTorch (the node's own, whose LibTorch the
    node's Crucible links): factories inside forward then name the GPU, as they must. get_inputs and the
    parameters are made on the GPU too (KernelBench's get_inputs draws several GB on the CPU, 10-25 s a problem).
    The trace must match eager execution on one fresh draw from the declared distributions. Returns a note for
    [kernelbench].cuda_reference; raises Refused when the trace cannot be used (the CPU task stands)."""
    device = torch.device("cuda")
    with device:  # factories that name no device make GPU tensors
        instance = instantiate(source, {}, meta=False, seed=0)
    gpu_state = state_tensors(instance.model)
    if [p for p, _, _ in gpu_state] != [s.path for s in state]:
        raise Refused("the model's parameters at the written sizes differ from those at the CPU sizes")
    gpu_state = [StateInput(path, tensor, is_buffer, s.dist) for (path, tensor, is_buffer), s in zip(gpu_state, state)]
    gpu_slots = [InputSlot(value, s.dist) for value, s in zip(instance.raw_inputs, slots)]
    declared = [(s.dist, tuple(s.value.shape), s.value.dtype) for s in gpu_slots if s.dist] + \
               [(s.dist, tuple(s.tensor.shape), s.tensor.dtype) for s in gpu_state]
    if [shape for _, shape, _ in declared[:len(written.inputs)]] != list(written.inputs):
        raise Refused("get_inputs at the written sizes on the GPU gives other shapes than on the meta device")
    generator = torch.Generator(device=device).manual_seed(104729)
    program = TaskProgram(instance.model, input_template(instance.raw_inputs), gpu_state)
    with torch.no_grad():
        example = [draw(dist, shape, dtype, generator) for dist, shape, dtype in declared]
        torch.jit.trace(program, tuple(example), check_trace=False).save(str(program_path))
        del example
        values = [draw(dist, shape, dtype, generator) for dist, shape, dtype in declared]
        got = output_list(torch.jit.load(str(program_path), map_location=device)(*[v.clone() for v in values]))
        want = eager_with_values(instance, gpu_slots, gpu_state, values)
    if len(got) != len(want) or not all(outputs_match(g, w) for g, w in zip(got, want)):
        raise Refused("the GPU trace does not match eager execution on the GPU on a fresh draw")
    return f"traced at the written sizes with torch {torch.__version__} on {torch.cuda.get_device_name(device)}"


def spread_inputs(slots: List[InputSlot]) -> Tuple[List[InputSlot], str]:
    """Gives every floating input drawn from rand/randn a per-draw factor (SPREAD_SCALE), so that outputs which
    concentrate move from draw to draw. Refused when no input can take one."""
    spread, scaled = [], []
    for index, slot in enumerate(slots):
        dist = slot.dist
        if dist and dist.kind in ("uniform", "normal") and not dist.scale and not dist.zero_dim:
            slot = dataclasses.replace(slot, dist=dataclasses.replace(dist, scale=SPREAD_SCALE))
            scaled.append(f"get_inputs()[{index}]")
        spread.append(slot)
    if not scaled:
        raise Refused("outputs concentrate: different input draws give near-equal answers and no input can take a "
                      "per-draw factor, so a constant answer could pass")
    return spread, (f"{', '.join(scaled)} times a per-draw factor in [{SPREAD_SCALE[0]:g}, {SPREAD_SCALE[1]:g}]: "
                    "without it the outputs of different draws are within tolerance of each other, so a constant "
                    "answer could pass")


def import_problem(problem: Problem, out_dir: Path, cuda: bool = False) -> str:
    """Writes the task's .cpu.pt and .toml, or raises Refused before writing either. Returns why the task has no
    CUDA reference when one was asked for and could not be traced (the CPU task stands), else ""."""
    started = time.perf_counter()
    source = ProblemSource.read(problem)
    early_input_check(source)
    written, cuda_note = written_shapes(source)
    choice = choose_cpu_sizes(source)

    recorder, init_locals = InitRecorder(), InitLocals(str(problem.path))
    with recorder, init_locals:
        instance = instantiate(source, choice.overrides, meta=False, seed=0)
    twin = instantiate(source, choice.overrides, meta=False, seed=1)
    state = describe_state(source, instance, twin, recorder, init_locals)  # before any forward moves running stats
    slots = describe_inputs(source, instance)
    check_leaves_inputs_unchanged(instance)
    check_repeatable(instance)
    outputs = eager_forward(instance)

    program = trace_program(instance, slots, state)
    toml_path, program_path = task_files(out_dir, problem.task_name)
    temporary_program = program_path.with_name("." + program_path.name + ".tmp")
    try:
        program.save(str(temporary_program))
        verified = verify(temporary_program, instance, slots, state)
        spread_note = ""
        if verified.concentrated:
            slots, spread_note = spread_inputs(slots)
            verified = verify(temporary_program, instance, slots, state)
            if verified.concentrated:
                raise Refused("outputs concentrate: different input draws give answers within "
                              f"{SPREAD_MARGIN:g} tolerances of each other even with a per-draw input factor, so a "
                              "constant answer could pass")
        if not verified.constant:
            verified.fixed_answer_chance = fixed_answer_chance(temporary_program, slots, state,
                                                               tolerances_for(verified.peaks)[0])
            if trials_for(verified.fixed_answer_chance) > MAX_CORRECTNESS_TRIALS:
                raise Refused(f"outputs concentrate: one draw's answer passes {verified.fixed_answer_chance:.0%} of "
                              "other draws, so a constant answer could pass")
        cpu_shapes = Shapes([tuple(s.value.shape) for s in slots if s.dist], [(s.path, tuple(s.tensor.shape))
                            for s in state], [tuple(o.shape) for o in outputs], instance.int_constants(source),
                            instance.init_inputs)
        if written is not None:
            mismatch = same_structure(cpu_shapes, written)
            if mismatch:
                written, cuda_note = None, mismatch
        cuda_program = None
        if cuda and written is not None:
            cuda_program = program_path.with_name(problem.task_name + ".cuda.pt")
            temporary_cuda = cuda_program.with_name("." + cuda_program.name + ".tmp")
            with gpu_turn(out_dir):
                try:
                    cuda_reference = trace_on_cuda(source, slots, state, written, temporary_cuda)
                    os.replace(temporary_cuda, cuda_program)
                except Exception as e:  # the CPU task stands; on a GPU it is refused with this reason
                    cuda_program, cuda_reference = None, f"not traced: {short_error(e)}"
                finally:
                    if temporary_cuda.exists():
                        temporary_cuda.unlink()
                    torch.cuda.empty_cache()
        elif cuda:
            cuda_reference = "not traced: the written sizes are unknown"
        text = task_text(problem, source, slots, state, outputs, cpu_shapes, written, cuda_note, choice, verified,
                         cuda_reference if cuda else None, cuda_program, spread_note)
        os.replace(temporary_program, program_path)
    finally:
        if temporary_program.exists():
            temporary_program.unlink()
    temporary_toml = toml_path.with_name("." + toml_path.name + ".tmp")
    temporary_toml.write_text(text, encoding="utf-8")
    os.replace(temporary_toml, toml_path)
    log(f"  {problem.task_name}: cpu sizes {choice.description}; {choice.probe.cpu_ms:.1f} ms eager; "
        f"{time.perf_counter() - started:.1f} s")
    return cuda_reference if cuda and cuda_program is None else ""


@contextlib.contextmanager
def gpu_turn(out_dir: Path):
    """One problem at a time on the GPU: problems imported at once share its memory, and at their written sizes
    several together do not fit (eight KernelBench level-1 activations of 6.4 GB inputs each ran out of memory).
    A lock file in the output directory, so it also holds between imports run side by side into one directory."""
    with open(out_dir / ".gpu-turn.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def task_text(problem: Problem, source: ProblemSource, slots: List[InputSlot], state: List[StateInput],
              outputs: List[torch.Tensor], cpu: Shapes, written: Optional[Shapes], cuda_note: str,
              choice: SizeChoice, verified: Verified, cuda_reference: Optional[str] = None,
              cuda_program: Optional[Path] = None, spread_note: str = "") -> str:
    tensor_slots = [s for s in slots if s.dist]
    inputs = [TensorDecl(f"x{i}", dtype_name(s.value.dtype, f"input {i}"), cpu.inputs[i],
                         written.inputs[i] if written else None, s.dist) for i, s in enumerate(tensor_slots)]
    inputs += [TensorDecl(s.input_name, dtype_name(s.tensor.dtype, s.path), cpu.state[i][1],
                          written.state[i][1] if written else None, s.dist) for i, s in enumerate(state)]
    names = ["out"] if len(outputs) == 1 else [f"out{k}" for k in range(len(outputs))]
    output_decls = [TensorDecl(names[k], dtype_name(o.dtype, f"output {k}"), cpu.outputs[k],
                               written.outputs[k] if written else None) for k, o in enumerate(outputs)]
    cpu_sizes, written_sizes = assign_symbols(inputs + output_decls, cpu.constants,
                                              written.constants if written else None)
    origin: Dict[str, Any] = {
        "problem": problem.relative_path,
        "id": problem.id,
        "cpu_scale": choice.description,
        "init_inputs": repr(written.init_inputs if written else cpu.init_inputs),
        "mode": "train",
        "cuda_sizes": "written" if written else f"unknown: {cuda_note}",
    }
    if cuda_reference:
        origin["cuda_reference"] = cuda_reference
    if written and repr(cpu.init_inputs) != repr(written.init_inputs):
        origin["cpu_init_inputs"] = repr(cpu.init_inputs)
    if spread_note:
        origin["input_scale"] = spread_note
    trials = trials_for(verified.fixed_answer_chance)
    if trials > 2:  # the evaluator's fewest
        origin["fixed_answer"] = (f"one draw's answer passes {verified.fixed_answer_chance:.0%} of other draws within "
                                  f"tolerance, so a verdict takes at least {trials} correctness trials")
    if einops_fallback_in_use and "einops" in source.text:
        origin["einops"] = EINOPS_FALLBACK_NOTE
    baked = [(i, s.value) for i, s in enumerate(slots) if not s.dist]
    if baked:
        origin["baked_inputs"] = ", ".join(f"get_inputs()[{i}] = {v!r}" for i, v in baked)
    if verified.constant:
        origin["constant_output"] = ("every output is the same for every input draw, as the problem is written; "
                                     "a kernel that writes that constant is correct")
        tolerances = dict(TOLERANCES)
    else:
        tolerances, tolerance_note = tolerances_for(verified.peaks)
        if tolerance_note:
            origin["tolerance"] = tolerance_note
    return render_task(problem, source.text, inputs, output_decls, cpu_sizes, written_sizes, origin, tolerances,
                       verified.constant, cuda_program.name if cuda_program else None, trials if trials > 2 else 0)


# ---------------------------------------------------------------------------------------------------------------
# Running every problem in its own process


def die_with_parent(parent: int) -> None:
    """Each problem runs in a forked process: if the importer is killed, that process must not live on."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:
        os._exit(1)


def child_main(problem: Problem, out_dir: Path, conn, parent: int, cuda: bool) -> None:
    die_with_parent(parent)
    os.dup2(2, 1)            # what a problem prints is log text, with the diagnostics on stderr
    sys.stdout = sys.stderr
    warnings.simplefilter("ignore")  # tracer warnings: the verification on fresh draws is what decides
    try:
        provide_einops_fallback()
        conn.send(("imported", import_problem(problem, out_dir, cuda)))
    except Refused as e:
        conn.send(("refused", str(e)))
    except BaseException as e:  # any failure of one problem is that problem's refusal
        traceback.print_exc()
        conn.send(("refused", f"importer error: {short_error(e)}"))
    finally:
        conn.close()


@dataclass
class Running:
    problem: Problem
    process: Any
    conn: Any
    started: float


def remove_stale_outputs(out_dir: Path, name: str) -> None:
    """A refused problem leaves no task behind, not even one from an earlier run."""
    for path in task_files(out_dir, name):
        if path.exists():
            path.unlink()


def run_all(problems: List[Problem], out_dir: Path, jobs: int, timeout: float,
            cuda: bool = False) -> Tuple[List[Problem], List[dict], List[dict]]:
    context = multiprocessing.get_context("fork")
    pending, running = list(problems), []
    imported, refused, without_cuda = [], [], []
    done = 0
    while pending or running:
        while pending and len(running) < jobs:
            problem = pending.pop(0)
            receiver, sender = context.Pipe(duplex=False)
            process = context.Process(target=child_main, args=(problem, out_dir, sender, os.getpid(), cuda), daemon=True)
            process.start()
            sender.close()
            running.append(Running(problem, process, receiver, time.monotonic()))
        multiprocessing.connection.wait([r.conn for r in running] + [r.process.sentinel for r in running], 1.0)
        for r in list(running):
            outcome = finished_outcome(r, timeout)
            if outcome is None:
                continue
            running.remove(r)
            done += 1
            kind, detail = outcome
            elapsed = time.monotonic() - r.started
            if kind == "imported":
                imported.append(r.problem)
                if detail:
                    without_cuda.append({"task": r.problem.task_name, "reason": detail})
                log(f"[{done}/{len(problems)}] {r.problem.task_name} imported ({elapsed:.1f} s)"
                    + (f", without a CUDA reference: {detail}" if detail else ""))
            else:
                remove_stale_outputs(out_dir, r.problem.task_name)
                refused.append({"problem": display_path(r.problem.path), "reason": detail})
                log(f"[{done}/{len(problems)}] {r.problem.task_name} refused ({elapsed:.1f} s): {detail}")
    return imported, refused, without_cuda


def finished_outcome(r: Running, timeout: float) -> Optional[Tuple[str, str]]:
    """The child's result once it has one, crashed, or ran out of time; None while it is still working."""
    if r.conn.poll():
        try:
            outcome = r.conn.recv()
        except EOFError:
            outcome = None
        r.process.join(10)
        if r.process.is_alive():
            r.process.kill()
        r.conn.close()
        return outcome or ("refused", f"the importer process died (exit code {r.process.exitcode})")
    if not r.process.is_alive():
        r.process.join()
        r.conn.close()
        return "refused", f"the importer process died (exit code {r.process.exitcode})"
    if time.monotonic() - r.started > timeout:
        r.process.kill()
        r.process.join()
        r.conn.close()
        return "refused", f"timed out after {timeout:.0f} s"
    return None


# ---------------------------------------------------------------------------------------------------------------
# Command line


def parse_levels(text: str) -> set:
    try:
        levels = {int(part) for part in text.split(",") if part.strip()}
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated level numbers, got {text!r}")
    if not levels or any(level < 1 for level in levels):
        raise argparse.ArgumentTypeError(f"expected comma-separated level numbers, got {text!r}")
    return levels


def parse_arguments(argv: Optional[List[str]]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Import KernelBench problems as Crucible tasks.")
    parser.add_argument("--out", required=True, type=Path, help="directory for the task files")
    parser.add_argument("--report", required=True, type=Path,
                        help="file the JSON report is written to once every problem is done (not stdout: the "
                             "problems' own code prints there)")
    parser.add_argument("--levels", type=parse_levels, default=None,
                        help="comma-separated levels to import (default: every level found)")
    parser.add_argument("--jobs", type=int, default=1,
                        help="problems imported at once (default 1: CPU timings steer the sizes)")
    parser.add_argument("--timeout", type=float, default=PROBLEM_TIMEOUT_S, help="seconds per problem")
    parser.add_argument("--cuda", action="store_true",
                        help="also trace each problem at its written sizes on this machine's GPU (reference_files.cuda)")
    parser.add_argument("paths", nargs="+", type=Path, metavar="PATH",
                        help="KernelBench problem files or directories holding level<N>/ folders")
    args = parser.parse_args(argv)
    missing = [str(p) for p in args.paths if not p.exists()]
    if missing:
        parser.error("no such KernelBench problem path: " + ", ".join(missing))
    if args.jobs < 1 or args.timeout <= 0:
        parser.error("--jobs and --timeout must be positive")
    if args.out.exists() and not args.out.is_dir():
        parser.error(f"--out {args.out} is not a directory")
    if args.report.is_dir() or not args.report.parent.is_dir():
        parser.error(f"--report {args.report} must name a file in an existing directory")
    return args


def report_text(imported: List[Problem], refused: List[dict], without_cuda: Optional[List[dict]] = None) -> str:
    """One JSON line. Reasons quote exceptions, which may hold undecodable bytes of paths (as lone surrogates) that
    no JSON reader accepts: those become backslash escapes."""
    def escaped(rows: List[dict]) -> List[dict]:
        return [{k: v.encode("utf-8", "backslashreplace").decode("utf-8") for k, v in r.items()} for r in rows]
    report = {"imported": [p.task_name for p in imported], "refused": escaped(refused)}
    if without_cuda is not None:
        report["without_cuda_reference"] = escaped(without_cuda)
    return json.dumps(report) + "\n"


def write_report(path: Path, text: str) -> None:
    """Written once, at the end, when no problem process is left: whatever problem code wrote to this path before
    is replaced. The path is in the importer's arguments, so problem code could still name it; the import is a
    trusted step run on the user's own KernelBench checkout."""
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


def nothing_to_import(args: argparse.Namespace, found: Found) -> str:
    where = ", ".join(display_path(p) for p in args.paths)
    levels = f" of level {','.join(str(level) for level in sorted(args.levels))}" if args.levels else ""
    message = f"no KernelBench problem files (level<N>/<id>_<Name>.py){levels} in {where}"
    for stray in found.not_problems:
        message += f"; {stray['problem']}: {stray['reason']}"
    return message


def main(argv: Optional[List[str]] = None) -> int:
    args = parse_arguments(argv)
    # The evaluator compares in true float32 (TF32 off); a trace records a convolution's TF32 switch as a constant
    # of the call, so the references are traced with it off too (PyTorch's default lets cuDNN use TF32, whose
    # errors exceed float32's tolerance of 1e-4).
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    if not torch.__version__.startswith("1.13"):
        log(f"warning: torch {torch.__version__}; Crucible's LibTorch is 1.13, which may not load these traces")
    found = find_problems(args.paths, args.levels)
    if not found.problems and not found.refusals:
        log("error: " + nothing_to_import(args, found))
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    # Asked through NVML, so this process never initialises CUDA: the per-problem processes are forked from it.
    os.environ["PYTORCH_NVML_BASED_CUDA_CHECK"] = "1"
    if args.cuda and not torch.cuda.is_available():
        log("error: --cuda needs a PyTorch with a usable GPU")
        return 2
    imported, problem_refusals, without_cuda = run_all(found.problems, args.out, args.jobs, args.timeout, args.cuda)
    imported.sort(key=lambda p: (p.level, p.id))
    refused = found.not_problems + found.refusals + problem_refusals
    log(f"imported {len(imported)}, refused {len(refused)} in {time.monotonic() - started:.0f} s"
        + (f"; {len(without_cuda)} without a CUDA reference (they run at their CPU sizes only)" if without_cuda else ""))
    write_report(args.report, report_text(imported, refused, without_cuda if args.cuda else None))
    return 0


if __name__ == "__main__":
    sys.exit(main())
