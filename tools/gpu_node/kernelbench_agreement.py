"""KernelBench's own evaluator and Crucible's, side by side, on the same KernelBench-format answers (GPU node).

For every answer file ANSWERS/<task>/<name>.py (task as `crucible tasks import` names it: kb_l1_19 is level 1,
problem 19), runs KernelBench's eval_kernel_against_ref (from a KernelBench checkout's src/, 5 correctness trials,
100 timed trials, as its scripts do) and `crucible eval --kind kernelbench --json` on the node's GPU at the task's CUDA
sizes, and prints one row per answer: each side's verdict and speedup, and Crucible's reference time beside
KernelBench's published H100 time (timing/H100_Modal). KernelBench's package imports requests and pydantic at module
level; where the node lacks them, pydantic's BaseModel is replaced by a plain class and requests by an empty module,
which eval.py does not call.

KernelBench's backend is chosen per answer: one with @triton.jit kernels is evaluated with backend "triton", which
imports it from a file (Triton reads a kernel's source through inspect, which code exec'd from a string lacks), also
where it has load_inline extensions beside them; any other with "cuda".

KernelBench's side builds each answer with load_inline (about 50 s on an H200): with --prebuild N (default 8) every
answer's extensions are built first by N processes at once, each into a build directory of its own that the
evaluation then finds up to date, so the side-by-side takes minutes rather than most of an hour.

KernelBench's problems draw their inputs with torch.rand on the CPU: a level-1 input (4096 x 393216) takes 16 s on
one core, six draws per answer. Unless --inputs-on-cpu, KernelBench's evaluation runs with the GPU as PyTorch's
default device, so the same calls draw the same distributions there (other values than the CPU's, seeded alike for
the reference and the answer; parameters are made on the GPU too, from the same seed for Model and ModelNew).

Usage: python3 tools/gpu_node/kernelbench_agreement.py --kernelbench KB_CHECKOUT --tasks TASKS_DIR --answers DIR
           [--crucible build/tools/crucible] [--device 0] [--json OUT.json] [--prebuild N] [--build-root DIR]
           [--prebuild-only] [--only TASK,...] [--inputs-on-cpu] [--names FILE,...] [--kernelbench-from JSON...]
           [--repeat N] [--kernelbench-tf32 default|off]
  --prebuild-only builds KernelBench's side into --build-root and stops; a later run with --prebuild 0 and the same
  --build-root finds it built. --only judges the answers of these tasks alone. --repeat N judges each answer N times
  on each side and reports the median speedup (every run's in the JSON): one run of either side can be a few percent
  off its usual time on a busy node. --kernelbench-tf32 off runs KernelBench's side with cuDNN's TF32 switched off, as
  Crucible always runs float32 tasks; KernelBench leaves PyTorch's default (convolutions in TF32), so the two
  evaluators' speedups of an answer that keeps a convolution differ by how much cheaper TF32 makes it.
"""
import argparse
import ast
import concurrent.futures
import json
import multiprocessing
import os
import subprocess
import sys
import tempfile
import types

# KernelBench's evaluation sets CUDA_VISIBLE_DEVICES in this process for Triton answers; `crucible eval` gets the
# environment this script started with, where --device N still names GPU N.
STARTING_ENVIRONMENT = dict(os.environ)

def stub_attribute(name):
    """`from openai import OpenAI` in KernelBench's utils: a class never used (dunder names stay missing)."""
    if name.startswith("__"):
        raise AttributeError(name)
    return type(name, (), {})


def kernelbench_eval_module(checkout):
    """KernelBench's eval.py, importable with only PyTorch and numpy installed."""
    sys.path.insert(0, os.path.join(checkout, "src"))
    try:
        import pydantic  # noqa: F401
    except ImportError:
        fake = types.ModuleType("pydantic")

        class BaseModel:
            def __init__(self, **kwargs):
                for k, v in type(self).__dict__.items():
                    if not k.startswith("_") and not callable(v):
                        setattr(self, k, v)
                for k, v in kwargs.items():
                    setattr(self, k, v)
        fake.BaseModel = BaseModel
        sys.modules["pydantic"] = fake
    for name in ("requests", "dotenv", "tqdm", "openai", "litellm"):
        try:
            __import__(name)
        except ImportError:
            stub = types.ModuleType(name)
            stub.load_dotenv = lambda *a, **k: None
            stub.tqdm = lambda x, *a, **k: x
            stub.__getattr__ = stub_attribute
            sys.modules[name] = stub
    from kernelbench import eval as kb_eval
    return kb_eval


def problem_file(checkout, task):
    level, problem = task.split("_")[1][1:], task.split("_")[2]
    folder = os.path.join(checkout, "KernelBench", f"level{level}")
    for name in os.listdir(folder):
        if name.split("_")[0] == problem:
            return os.path.join(folder, name)
    raise FileNotFoundError(f"no problem {problem} in {folder}")


def published_time_ms(checkout, task, problem_path):
    level = task.split("_")[1][1:]
    for root, _, files in os.walk(os.path.join(checkout, "timing", "H100_Modal")):
        for f in files:
            if f.endswith(".json") and "baseline_time_torch" in f and "compile" not in f:
                with open(os.path.join(root, f)) as fh:
                    data = json.load(fh)
                entry = data.get(f"level{level}", {}).get(os.path.basename(problem_path))
                if entry:
                    return entry.get("mean")
    return None


def kernelbench_backend(answer_src):
    """"triton" for an answer with a @triton.jit function (a decorator triton.jit or jit, called or not), else
    "cuda"."""
    for node in ast.walk(ast.parse(answer_src)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for d in node.decorator_list:
                name = ast.unparse(d.func if isinstance(d, ast.Call) else d)
                if name in ("triton.jit", "jit"):
                    return "triton"
    return "cuda"


def prebuild_one(checkout, answer_src, build_dir):
    """One answer's load_inline extensions built into build_dir, in a process of its own: "" or what failed (the
    evaluation reports it again)."""
    kb_eval = kernelbench_eval_module(checkout)
    try:
        kb_eval.load_custom_model(answer_src, {}, build_dir)
        return ""
    except Exception as e:
        return f"{type(e).__name__}: {e}"[:200]


def prebuild(checkout, jobs, answers):
    """answers: [(answer_src, build_dir)]. Builds them `jobs` at a time."""
    context = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(max_workers=jobs, mp_context=context) as pool:
        futures = [pool.submit(prebuild_one, checkout, src, build_dir) for src, build_dir in answers]
        for (src, build_dir), f in zip(answers, futures):
            error = f.result()
            print(f"prebuilt {build_dir}{': ' + error if error else ''}", flush=True)


def kernelbench_verdict(kb_eval, problem_src, answer_src, device, build_dir, inputs_on_gpu, tf32):
    import contextlib
    import torch
    torch.backends.cudnn.allow_tf32 = tf32
    where = torch.device("cuda", device) if inputs_on_gpu else contextlib.nullcontext()
    try:
        with where:
            r = kb_eval.eval_kernel_against_ref(problem_src, answer_src, num_correct_trials=5, num_perf_trials=100,
                                                measure_performance=True, device=device, build_dir=build_dir,
                                                backend=kernelbench_backend(answer_src))
    except Exception as e:  # KernelBench raises on some compile failures
        return {"status": "error", "detail": f"{type(e).__name__}: {e}"[:200]}
    if r is None:
        return {"status": "error", "detail": "no result"}
    status = "correct" if r.correctness else ("incorrect" if r.compiled else "compile_error")
    speedup = r.ref_runtime / r.runtime if r.correctness and r.runtime > 0 and r.ref_runtime > 0 else None
    return {"status": status, "speedup": speedup, "runtime_us": r.runtime, "ref_runtime_us": r.ref_runtime}


def crucible_verdict(crucible, tasks, task, answer, device):
    argv = [crucible, "eval", "--kind", "kernelbench", "--tasks-dir", tasks, "--task", task, "--candidate", answer,
            "--device", f"cuda:{device}", "--mode", "full", "--json", "--compile-timeout", "600"]
    r = subprocess.run(argv, capture_output=True, text=True, timeout=1800, env=STARTING_ENVIRONMENT)
    at = r.stdout.find("\n{") + 1 if not r.stdout.startswith("{") else 0  # the verdict: the JSON object it prints
    try:
        v = json.loads(r.stdout[at:]) if (at > 0 or r.stdout.startswith("{")) else None
    except json.JSONDecodeError:
        v = None
    if not isinstance(v, dict) or "status" not in v:
        return {"status": "error", "detail": (r.stderr or r.stdout)[-300:]}
    ref = v.get("reference_time") or {}
    return {"status": v["status"], "speedup": v.get("speedup"), "reasons": [x["code"] for x in v.get("reasons", [])],
            "ref_us": ref.get("median_us"), "coverage": v.get("kernel_coverage")}


def median_of_runs(runs):
    """One side's verdict over repeated runs: the first run's, with the median speedup of the runs that were correct
    and every run's speedup beside it."""
    verdict = dict(runs[0])
    speedups = sorted(r["speedup"] for r in runs if r.get("speedup"))
    if len(runs) > 1:
        verdict["speedups"] = [r.get("speedup") for r in runs]
        verdict["statuses"] = [r["status"] for r in runs]
    if speedups:
        verdict["speedup"] = speedups[len(speedups) // 2]
    return verdict


def read(path):
    with open(path) as f:
        return f.read()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--kernelbench", required=True)
    p.add_argument("--tasks", required=True)
    p.add_argument("--answers", required=True)
    p.add_argument("--crucible", default="build/tools/crucible")
    p.add_argument("--device", type=int, default=0)
    p.add_argument("--json")
    p.add_argument("--prebuild", type=int, default=8)
    p.add_argument("--build-root", default=None)
    p.add_argument("--prebuild-only", action="store_true")
    p.add_argument("--only", default="")
    p.add_argument("--inputs-on-cpu", action="store_true")
    p.add_argument("--names", default="", help="judge only answers of these file names (honest.py,triton.py,...)")
    p.add_argument("--kernelbench-from", nargs="*", default=[],
                   help="earlier --json files: their KernelBench verdicts are reused (same node, same answers), only "
                        "Crucible's side runs again")
    p.add_argument("--repeat", type=int, default=1)
    p.add_argument("--kernelbench-tf32", choices=["default", "off"], default="default")
    a = p.parse_args()
    if a.repeat < 1:
        p.error("--repeat: at least 1 run a side")
    earlier = {}
    for path in a.kernelbench_from:
        with open(path) as f:
            for row in json.load(f):
                earlier[(row["task"], row["answer"])] = row["kernelbench"]
    kb_eval = kernelbench_eval_module(a.kernelbench)
    build_root = a.build_root or tempfile.mkdtemp(prefix="kb-agreement-")
    work = []  # (task, name, answer path, problem path)
    for task in sorted(os.listdir(a.answers)):
        if not os.path.isdir(os.path.join(a.answers, task)):
            continue  # a README beside the task folders
        if a.only and task not in a.only.split(","):
            continue
        problem = problem_file(a.kernelbench, task)
        for name in sorted(n for n in os.listdir(os.path.join(a.answers, task)) if n.endswith(".py")):
            if a.names and name not in a.names.split(","):
                continue
            work.append((task, name, os.path.join(a.answers, task, name), problem))
    build_dir = {w[2]: os.path.join(build_root, f"{w[0]}-{w[1][:-3]}") for w in work}
    if a.prebuild > 0 and not earlier:  # load_inline answers only: Triton compiles when a kernel is first launched
        prebuild(a.kernelbench, a.prebuild,
                 [(read(w[2]), build_dir[w[2]]) for w in work if kernelbench_backend(read(w[2])) == "cuda"])
    if a.prebuild_only:
        return
    rows = []
    fmt = lambda s: f"{s:.3f}x" if s else "-"  # noqa: E731
    for task, name, answer, problem in work:
        kernelbench_runs = [earlier[(task, name)]] if (task, name) in earlier else [
            kernelbench_verdict(kb_eval, read(problem), read(answer), a.device, build_dir[answer],
                                not a.inputs_on_cpu, a.kernelbench_tf32 == "default") for _ in range(a.repeat)]
        crucible_runs = [crucible_verdict(a.crucible, a.tasks, task, answer, a.device) for _ in range(a.repeat)]
        rows.append({"task": task, "answer": name, "kernelbench_tf32": a.kernelbench_tf32,
                     "kernelbench": median_of_runs(kernelbench_runs), "crucible": median_of_runs(crucible_runs),
                     "published_ms": published_time_ms(a.kernelbench, task, problem)})
        r = rows[-1]
        print(f"{task:10} {name:32} {kernelbench_backend(read(answer)):6} KB {r['kernelbench']['status']:13} {fmt(r['kernelbench'].get('speedup')):>8}"
              f"  Crucible {r['crucible']['status']:13} {fmt(r['crucible'].get('speedup')):>8}"
              f"  ref {r['crucible'].get('ref_us') or 0:9.1f} us  published {r['published_ms'] or 0:8.3f} ms"
              f"  {','.join(r['crucible'].get('reasons', []))}", flush=True)
        if a.json:  # after every row, so that a run cut short by its caller keeps what it judged
            with open(a.json, "w") as f:
                json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
