"""A KernelBench answer inside a worker: its plan read, its prebuilt extensions imported, ModelNew built and bound to
the task's parameter inputs by name, and one call of forward with its result checked and copied into the
evaluator's buffers. The same on the CPU worker and the GPU worker; what differs there (memory, streams, sandbox,
timing) is the worker's.
"""
import ast
import json


class Refused(Exception):
    """A classified refusal: `code` is the verdict's reason code."""

    def __init__(self, code, detail):
        super().__init__(f"{code}: {detail}")
        self.code, self.detail = code, detail


def read_plan(path):
    """The evaluator's plan for this task (kernelbench_plan.cpp), with the candidate's source."""
    with open(path) as f:
        plan = json.load(f)
    with open(plan["candidate"], "rb") as f:
        plan["source"] = f.read().decode("utf-8", errors="replace")
    plan["init_inputs"] = ast.literal_eval(plan["init_inputs"])  # the importer's record: literals only
    return plan


class Extension:
    """What the candidate's load_inline returns: the prebuilt module, with every call of its functions counted."""

    def __init__(self, module, functions, counter):
        for name in functions:
            setattr(self, name, _counted(getattr(module, name), counter))


def _counted(function, counter):
    def call(*args, **kwargs):
        counter[0] += 1
        return function(*args, **kwargs)
    call.__name__ = getattr(function, "__name__", "extension_function")
    return call


class LoadedModel:
    """ModelNew built from a plan, ready to be called on the evaluator's input sets.

    `sets` is [(inputs, outputs)] of tensor views on the evaluator's memory; `load_module(path, source)` runs the
    candidate's module (the worker's, so that Triton finds its source). With `count_calls`, a call in which none of
    the extensions' functions ran is refused: where no profiler sees the candidate's kernels, the count is how
    custom work is established. On a GPU (`device`), ModelNew is moved there after it is built, as KernelBench does."""

    def __init__(self, torch, plan, sets, load_module, count_calls, device=None):
        import importlib.util
        self.torch = torch
        self.calls_into_extensions = [0]
        prebuilt = {}
        for ext in plan["extensions"]:
            spec = importlib.util.spec_from_file_location(ext["name"], ext["path"])
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            missing = [f for f in ext["functions"] if not hasattr(module, f)]
            if missing:
                raise Refused("dynamic_source", f"the extension '{ext['name']}' does not define {missing[0]}")
            prebuilt[ext["name"]] = Extension(module, ext["functions"], self.calls_into_extensions)
        self.count_calls = count_calls
        torch.utils.cpp_extension.load_inline = lambda name, *args, **kwargs: _prebuilt(prebuilt, name)
        namespace = load_module("candidate.py", plan["source"])
        model_class = namespace.get("ModelNew")
        if model_class is None:
            raise Refused("missing_model_new", "the candidate defines no ModelNew")
        self.model = model_class(*plan["init_inputs"])
        if not isinstance(self.model, torch.nn.Module):
            raise Refused("missing_model_new", "ModelNew(...) is not an nn.Module")
        if device is not None:
            self.model = self.model.to(device)
        self.problem_inputs = plan["problem_inputs"]
        self.sets = sets
        self.bindings = [self.bind_state(plan["state"], inputs) for inputs, _ in sets]

    def bind_state(self, state, inputs):
        """For one input set: (owner module, leaf name, is buffer, value) for every parameter input of the task,
        found in ModelNew by its name (module path with '.' as '_'), the same values the reference gets."""
        own = {}
        for kind, items in (("parameter", self.model.named_parameters()), ("buffer", self.model.named_buffers())):
            for path, tensor in items:
                own.setdefault(path.replace(".", "_"), (path, tensor, kind == "buffer"))
        bound = []
        for index, name in enumerate(state):
            value = inputs[self.problem_inputs + index]
            if name not in own:
                raise Refused("missing_parameter", f"the reference has '{name}' and ModelNew has no parameter or "
                              "buffer of that name (names are module paths, '.' read as '_')")
            path, tensor, is_buffer = own[name]
            if tuple(tensor.shape) != tuple(value.shape) or tensor.dtype != value.dtype:
                raise Refused("parameter_shape", f"ModelNew's '{path}' is {list(tensor.shape)} {tensor.dtype}; "
                              f"the reference's is {list(value.shape)} {value.dtype}")
            owner_path, _, leaf = path.rpartition(".")
            owner = self.model.get_submodule(owner_path) if owner_path else self.model
            bound.append((owner, leaf, is_buffer,
                          value if is_buffer else self.torch.nn.Parameter(value, requires_grad=False)))
        return bound

    def call(self, s):
        """Set s's parameters bound, forward run under no_grad, its result checked and copied into set s's outputs.
        Raises Refused for what the verdict classifies; the candidate's own exceptions pass through."""
        self.deliver(self.compute(s), self.sets[s][1])

    def compute(self, s):
        """What forward returns on set s, not yet delivered (see `call`). A GPU worker delivers it outside the
        forward's events and profile: the copy into the evaluator's buffers is the harness's work, which KernelBench
        does not time (its answers' outputs are allocated inside forward and counted, as they are here)."""
        inputs, outputs = self.sets[s]
        for owner, leaf, is_buffer, value in self.bindings[s]:
            (owner._buffers if is_buffer else owner._parameters)[leaf] = value
        before = self.calls_into_extensions[0]
        with self.torch.no_grad():
            result = self.model(*inputs[:self.problem_inputs])
        if self.count_calls and self.calls_into_extensions[0] == before:
            raise Refused("no_custom_work", "none of the extension's functions ran in this call (PyTorch did the "
                          "work)")
        return [self.dense(r) for r in result] if isinstance(result, (tuple, list)) else self.dense(result)

    def dense(self, r):
        """A result laid out as the delivery copies it, made so here, inside the call: a strided, broadcast, negated or
        conjugated view would otherwise leave its materialisation (a transpose, a broadcast) to the untimed copy."""
        if isinstance(r, self.torch.Tensor) and (not r.is_contiguous() or r.is_neg() or r.is_conj()):
            return r.resolve_conj().resolve_neg().contiguous()
        return r

    def deliver(self, result, outputs, copy=None):
        """Checks what `compute` returned against set s's outputs and copies it there, with `copy(out, r)` where given
        (a GPU worker's copy that no operator registered by an extension can replace) or `out.copy_(r)`."""
        results = list(result) if isinstance(result, (tuple, list)) else [result]
        if len(results) != len(outputs):
            raise Refused("output_count", f"forward returned {len(results)} tensors; the task has {len(outputs)}")
        for k, (r, out) in enumerate(zip(results, outputs)):
            # A plain tensor only: a subclass's __torch_dispatch__ would run the candidate's code inside the copy.
            if type(r) not in (self.torch.Tensor, self.torch.nn.Parameter):
                raise Refused("output_type", f"output {k} is a {type(r).__name__}, not a tensor")
            if tuple(r.shape) != tuple(out.shape) or r.dtype != out.dtype:
                raise Refused("output_shape", f"output {k} is {list(r.shape)} {r.dtype}; the task's is "
                              f"{list(out.shape)} {out.dtype}")
            if r.device != out.device:
                raise Refused("output_type", f"output {k} is on {r.device}; the task's is on {out.device}")
            if copy is not None:
                copy(out, r)
            else:
                out.copy_(r)


def _prebuilt(prebuilt, name):
    if name not in prebuilt:
        raise Refused("dynamic_source", f"load_inline('{name}') was not among the sources read before the run")
    return prebuilt[name]
