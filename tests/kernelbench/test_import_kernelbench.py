#!/usr/bin/python3
"""Tests for tools/kernelbench/import_kernelbench.py.

    /usr/bin/python3 tests/kernelbench/test_import_kernelbench.py

Writes problem files in KernelBench's format into a temporary directory, imports them, and checks the JSON report,
the task files, and that each trace, loaded with torch.jit.load, matches eager execution of the problem on inputs
drawn afresh from the declared distributions in the declared order. When the KernelBench problems are beside this
checkout (shared/kernelbench), a handful of real ones are imported too. Needs Debian's python3-torch.
"""
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
import tomllib
import unittest
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import torch

REPO = Path(__file__).resolve().parents[2]
IMPORTER = REPO / "tools" / "kernelbench" / "import_kernelbench.py"
KERNELBENCH_CANDIDATES = [REPO.parent / "shared" / "kernelbench" / "KernelBench",
                          Path("/work/shared/kernelbench/KernelBench")]

HEADER = "import torch\nimport torch.nn as nn\n\n"

# name -> (level, file text). Written sizes are small (so CPU sizes equal them) except in 7_Big_ReLU.
PROBLEMS = {
    "1_GELU.py": (1, HEADER + '''class Model(nn.Module):
    \'\'\'A docstring in triple single quotes: the task file must then escape the source.\'\'\'
    def __init__(self):
        super(Model, self).__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.gelu(x)

batch_size = 16
dim = 4096

def get_inputs():
    x = torch.randn(batch_size, dim)
    return [x]

def get_init_inputs():
    return []
'''),
    "2_Sum_over_a_dimension.py": (1, HEADER + '''class Model(nn.Module):
    def __init__(self, dim: int):
        super(Model, self).__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sum(x, dim=self.dim, keepdim=True)

batch_size = 16
dim1 = 256
dim2 = 128
reduce_dim = 1

def get_inputs():
    return [torch.rand(batch_size, dim1, dim2)]

def get_init_inputs():
    return [reduce_dim]
'''),
    "3_Gemm_ReLU.py": (2, HEADER + '''class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super(Model, self).__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        return torch.relu(self.linear(x))

batch_size = 64
in_features = 512
out_features = 256

def get_inputs():
    return [torch.rand(batch_size, in_features)]

def get_init_inputs():
    return [in_features, out_features]
'''),
    "4_Conv2d_BatchNorm.py": (1, HEADER + '''class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size):
        super(Model, self).__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.bn = nn.BatchNorm2d(out_channels)

    def forward(self, x):
        return self.bn(self.conv(x))

batch_size = 4
in_channels = 3
out_channels = 16
kernel_size = 3
height = 32
width = 24

def get_inputs():
    return [torch.rand(batch_size, in_channels, height, width)]

def get_init_inputs():
    return [in_channels, out_channels, kernel_size]
'''),
    "5_Dropout.py": (2, HEADER + '''class Model(nn.Module):
    def __init__(self, p):
        super(Model, self).__init__()
        self.dropout = nn.Dropout(p)

    def forward(self, x):
        return self.dropout(x) * 2.0

batch_size = 64
dim = 1024

def get_inputs():
    return [torch.randn(batch_size, dim)]

def get_init_inputs():
    return [0.5]
'''),
    "6_Matmul_upper_triangular.py": (1, HEADER + '''class Model(nn.Module):
    def __init__(self):
        super(Model, self).__init__()

    def forward(self, A, B):
        return torch.triu(torch.matmul(A, B))

N = 128

def get_inputs():
    A = torch.triu(torch.rand(N, N))
    B = torch.triu(torch.rand(N, N))
    return [A, B]

def get_init_inputs():
    return []
'''),
    "7_Big_ReLU.py": (1, HEADER + '''class Model(nn.Module):
    def __init__(self):
        super(Model, self).__init__()

    def forward(self, x):
        return torch.relu(x)

batch_size = 4096
dim = 393216

def get_inputs():
    x = torch.rand(batch_size, dim)
    return [x]

def get_init_inputs():
    return []
'''),
    "8_HingeLoss.py": (1, HEADER + '''class Model(nn.Module):
    def __init__(self):
        super(Model, self).__init__()

    def forward(self, predictions, targets):
        return torch.mean(torch.clamp(1 - predictions * targets, min=0))

batch_size = 256
input_shape = (256,)

def get_inputs():
    return [torch.rand(batch_size, *input_shape), torch.randint(0, 2, (batch_size,)).float() * 2 - 1]

def get_init_inputs():
    return []
'''),
    "9_Matmul_symmetric.py": (1, HEADER + '''class Model(nn.Module):
    def __init__(self):
        super(Model, self).__init__()

    def forward(self, A, B):
        return torch.matmul(A, B)

N = 96

def get_inputs():
    A = torch.rand(N, N)
    A = (A + A.T) / 2
    B = torch.rand(N, N)
    B = 0.5 * (B.t() + B)
    return [A, B]

def get_init_inputs():
    return []
'''),
    "10_KLDivLoss.py": (1, HEADER + '''class Model(nn.Module):
    def __init__(self):
        super(Model, self).__init__()

    def forward(self, predictions, targets):
        return torch.nn.functional.kl_div(torch.log(predictions), targets, reduction='batchmean')

batch_size = 64
input_shape = (512,)

def get_inputs():
    scale = torch.rand(())
    return [(torch.rand(batch_size, *input_shape)*scale).softmax(dim=-1), torch.rand(batch_size, *input_shape).softmax(dim=-1)]

def get_init_inputs():
    return []
'''),
    "11_Gemm_Max_Subtract.py": (2, HEADER + '''class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super(Model, self).__init__()
        self.gemm = nn.Linear(in_features, out_features)

    def forward(self, x):
        x = self.gemm(x)
        x = torch.max(x, dim=1, keepdim=True).values
        return x - x.mean(dim=1, keepdim=True)

batch_size = 32
in_features = 64
out_features = 64

def get_inputs():
    return [torch.rand(batch_size, in_features)]

def get_init_inputs():
    return [in_features, out_features]
'''),
    "12_Exp_input.py": (1, HEADER + '''class Model(nn.Module):
    def __init__(self):
        super(Model, self).__init__()

    def forward(self, x):
        return torch.log(x)

N = 128

def get_inputs():
    return [torch.rand(N, N).exp()]

def get_init_inputs():
    return []
'''),
    "13_Mean_near_one.py": (1, HEADER + '''class Model(nn.Module):
    """Every draw's mean is 1 within ~1e-5: one answer would pass them all unless the draws are spread."""
    def __init__(self):
        super(Model, self).__init__()

    def forward(self, x):
        return torch.mean(x)

batch_size = 64
dim = 256

def get_inputs():
    return [torch.randn(batch_size, dim) * 1e-3 + 1.0]

def get_init_inputs():
    return []
'''),
    "14_Flat_answer.py": (1, HEADER + '''class Model(nn.Module):
    def __init__(self):
        super(Model, self).__init__()

    def forward(self, x):
        """Near 1.0057 for every draw, and a factor on x does not move it."""
        return 1.0 + 0.01 * (x.std() / x.mean())

def get_inputs():
    return [torch.rand(64, 256)]

def get_init_inputs():
    return []
'''),
}
# Small problems for the cases below, each importing in a few seconds.
RELU = HEADER + '''class Model(nn.Module):
    def __init__(self):
        super(Model, self).__init__()

    def forward(self, x):
        return torch.relu(x)

def get_inputs():
    return [torch.randn(4, 64)]

def get_init_inputs():
    return []
'''
FAKE_REPORT = '{"imported": ["kb_l1_7"], "refused": []}'
# A ReLU whose code prints a report of its own on every channel it has: print, fd 1, fd 2, and a process of its
# own that writes once the importer has exited (so its line comes last in any stream it shares with the importer).
RELU_PRINTING_A_REPORT = HEADER + '''import os, sys, time
FAKE = '<FAKE>'
print(FAKE, flush=True)
os.write(1, (FAKE + "\\n").encode())
sys.stderr.write(FAKE + "\\n")


def running(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


if not os.environ.get("REPORT_WRITER_STARTED"):
    os.environ["REPORT_WRITER_STARTED"] = "1"
    importer = os.getppid()
    if os.fork() == 0:  # writes once the import program has exited
        while running(importer):
            time.sleep(0.05)
        os.write(1, (FAKE + "\\n").encode())
        os.write(2, (FAKE + "\\n").encode())
        os._exit(0)

'''.replace("<FAKE>", FAKE_REPORT) + RELU.split(HEADER, 1)[1]
SCALES_ITS_INPUT = HEADER + '''class Model(nn.Module):
    def __init__(self):
        super(Model, self).__init__()

    def forward(self, x):
        x.mul_(2)
        return x

def get_inputs():
    return [torch.randn(4, 64)]

def get_init_inputs():
    return []
'''
BUMPS_ITS_PARAMETER = HEADER + '''class Model(nn.Module):
    def __init__(self):
        super(Model, self).__init__()
        self.scale = nn.Parameter(torch.rand(64) + 0.5)

    def forward(self, x):
        self.scale.data.add_(1)
        return x * self.scale

def get_inputs():
    return [torch.randn(4, 64)]

def get_init_inputs():
    return []
'''
SCALES_A_COPY = HEADER + '''class Model(nn.Module):
    def __init__(self):
        super(Model, self).__init__()

    def forward(self, x, y):
        z = x * 2
        z.add_(y)
        return z

def get_inputs():
    return [torch.randn(4, 64), torch.randn(4, 64)]

def get_init_inputs():
    return []
'''
SCALES_ITS_SECOND_INPUT = SCALES_A_COPY.replace("z = x * 2\n        z.add_(y)", "y.mul_(2)\n        z = x + y")

EXPECTED_IMPORTED = {"kb_l1_1", "kb_l1_2", "kb_l2_3", "kb_l1_4", "kb_l1_6", "kb_l1_7", "kb_l1_8", "kb_l1_9",
                     "kb_l1_10", "kb_l2_11", "kb_l1_13"}
EXPECTED_REFUSED = {"5_Dropout.py": "random", "12_Exp_input.py": ".exp()", "14_Flat_answer.py": "concentrate"}
KERNELBENCH_KEYS = {"problem", "id", "cpu_scale", "init_inputs", "mode", "cuda_sizes"}


@dataclass
class ImporterRun:
    returncode: int
    stdout: str
    stderr: str
    report: Optional[dict]  # what the importer wrote to --report; None when it wrote nothing


def run_importer(*args: str) -> ImporterRun:
    with tempfile.TemporaryDirectory(prefix="kb-report-") as tmp:
        report = Path(tmp) / "report.json"
        result = subprocess.run([sys.executable, str(IMPORTER), "--report", str(report), *args], capture_output=True,
                                text=True, timeout=1800)
        parsed = json.loads(report.read_bytes().decode("utf-8")) if report.exists() else None
    if parsed is not None:  # every string must be real Unicode: a lone surrogate is no JSON a C++ reader accepts
        json.dumps(parsed, ensure_ascii=False).encode("utf-8")
    return ImporterRun(result.returncode, result.stdout, result.stderr, parsed)


def write_problem(root: Path, level: int, file_name, text: str) -> Path:
    """file_name as str, or as bytes for a name that is not UTF-8."""
    directory = root / f"level{level}"
    directory.mkdir(parents=True, exist_ok=True)
    path = Path(os.fsdecode(os.fsencode(directory) + b"/" + (file_name if isinstance(file_name, bytes)
                                                             else file_name.encode())))
    path.write_text(text)
    return path


def draw(init: dict, shape: list, dtype: str, sizes: dict) -> torch.Tensor:
    """A draw from a task file's init table, written independently of the importer."""
    torch_dtype = getattr(torch, dtype)
    if init["dist"] == "uniform":
        t = torch.rand(shape) * (init["high"] - init["low"]) + init["low"]
    elif init["dist"] == "normal":
        t = torch.randn(shape) * init["std"] + init["mean"]
    elif init["dist"] == "randint":
        high = sizes[init["high"]] if isinstance(init["high"], str) else init["high"]
        t = torch.randint(init["low"], high, shape)
    elif init["dist"] == "constant":
        t = torch.full(shape, float(init["value"]), dtype=torch.float64)
    elif init["dist"] == "choice":
        a, b = init["values"]
        t = torch.where(torch.rand(shape) < 0.5, torch.tensor(a), torch.tensor(b))
    else:
        raise AssertionError(f"unknown dist {init['dist']}")
    t = t.to(torch_dtype)
    if "scale" in init:
        low, high = init["scale"]
        t = t * (low + (high - low) * torch.rand(()).item())
    transform = init.get("transform")
    if transform == "triu":
        t = t.triu()
    elif transform == "tril":
        t = t.tril()
    elif transform == "symmetric":
        t = (t + t.transpose(-1, -2)) / 2
    elif transform == "softmax":
        t = torch.nn.functional.softmax(t, dim=-1)
    else:
        assert transform is None, transform
    return t


def fresh_inputs(task: dict, backend: str = "cpu") -> list:
    sizes = task["sizes"][backend]
    return [draw(i["init"], [sizes[s] for s in i["shape"]], i["dtype"], sizes) for i in task["inputs"]]


def eager_outputs(problem_text: str, task: dict, values: list) -> list:
    """The problem run eagerly as KernelBench runs it (training mode), holding the drawn parameters and buffers."""
    namespace = {"__name__": "problem"}
    exec(compile(problem_text, "problem", "exec"), namespace)
    origin = task["kernelbench"]
    init_inputs = eval(origin.get("cpu_init_inputs", origin["init_inputs"]))
    model = namespace["Model"](*init_inputs)
    state = list(model.named_parameters()) + list(model.named_buffers())
    n_inputs = len(values) - len(state)
    declared = [i["name"] for i in task["inputs"][n_inputs:]]
    assert declared == [name.replace(".", "_") for name, _ in state], (declared, [n for n, _ in state])
    with torch.no_grad():
        for (_, tensor), value in zip(state, values[n_inputs:]):
            tensor.copy_(value)
        result = model(*values[:n_inputs])
    return list(result) if isinstance(result, (tuple, list)) else [result]


def load_importer_module():
    spec = importlib.util.spec_from_file_location("import_kernelbench", IMPORTER)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class ImportedProblems(unittest.TestCase):
    """One import of the problems above, checked from several sides."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="kb-import-test-")
        root = Path(cls.tmp.name)
        cls.problems_dir = root / "KernelBench"
        cls.out = root / "tasks"
        for file_name, (level, text) in PROBLEMS.items():
            path = cls.problems_dir / f"level{level}" / file_name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        cls.result = run_importer("--out", str(cls.out), str(cls.problems_dir))
        cls.report = cls.result.report

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def task(self, name: str) -> dict:
        with open(self.out / f"{name}.toml", "rb") as f:
            return tomllib.load(f)

    def test_report_lists_every_problem(self):
        self.assertEqual(self.result.returncode, 0, self.result.stderr[-3000:])
        self.assertEqual(set(self.report["imported"]), EXPECTED_IMPORTED)
        refused = {Path(r["problem"]).name: r["reason"] for r in self.report["refused"]}
        self.assertEqual(set(refused), set(EXPECTED_REFUSED))
        for file_name, word in EXPECTED_REFUSED.items():
            self.assertIn(word, refused[file_name])

    def test_refused_problems_leave_no_files(self):
        self.assertFalse(list(self.out.glob("kb_l2_5*")))
        self.assertFalse(list(self.out.glob("kb_l1_12*")))
        self.assertFalse(list(self.out.glob(".*tmp")))

    def test_task_files_have_the_loader_keys(self):
        for name in EXPECTED_IMPORTED:
            task = self.task(name)
            level, problem_id = int(name.split("_")[1][1:]), int(name.split("_")[2])
            file_name = next(f for f in PROBLEMS if f.startswith(f"{problem_id}_"))
            self.assertEqual(task["name"], name)
            self.assertEqual(task["level"], level)
            self.assertEqual(task["family"], "kernelbench")
            self.assertEqual(task["description"],
                             f"KernelBench level {level} problem {problem_id}: {file_name[:-3].split('_', 1)[1]}")
            self.assertEqual(task["reference"], "torchscript")
            self.assertEqual(task["reference_source"], PROBLEMS[file_name][1])
            self.assertEqual(task["reference_files"], {"cpu": f"{name}.cpu.pt"})
            self.assertEqual(task["tolerance"]["float32"], {"atol": 1e-4, "rtol": 1e-4})
            self.assertTrue(KERNELBENCH_KEYS <= set(task["kernelbench"]), task["kernelbench"])
            self.assertEqual(task["kernelbench"]["problem"], f"level{level}/{file_name}")
            self.assertEqual(task["kernelbench"]["id"], problem_id)
            self.assertEqual(task["kernelbench"]["mode"], "train")
            for tensor in task["inputs"] + task["outputs"]:
                for symbol in tensor["shape"]:
                    self.assertIn(symbol, task["sizes"]["cpu"])
                    self.assertIn(symbol, task["sizes"]["cuda"])
            for tensor in task["inputs"]:
                self.assertIn(tensor["init"]["dist"], {"uniform", "normal", "randint", "constant", "choice"})

    def test_parameters_and_buffers_follow_the_inputs(self):
        names = [i["name"] for i in self.task("kb_l1_4")["inputs"]]
        self.assertEqual(names, ["x0", "conv_weight", "conv_bias", "bn_weight", "bn_bias", "bn_running_mean",
                                 "bn_running_var", "bn_num_batches_tracked"])
        inits = {i["name"]: i["init"] for i in self.task("kb_l1_4")["inputs"]}
        bound = 1 / (3 * 3 * 3) ** 0.5  # 1/sqrt(fan_in), fan_in = in_channels * kernel area
        self.assertAlmostEqual(inits["conv_weight"]["high"], bound)
        self.assertAlmostEqual(inits["conv_bias"]["low"], -bound)
        self.assertEqual(inits["bn_weight"], {"dist": "constant", "value": 1.0})
        self.assertEqual(inits["bn_running_var"], {"dist": "constant", "value": 1.0})
        self.assertEqual(self.task("kb_l1_4")["inputs"][-1]["dtype"], "int64")
        gemm = {i["name"]: i for i in self.task("kb_l2_3")["inputs"]}
        self.assertEqual(gemm["linear_weight"]["shape"], ["out_features", "in_features"])
        self.assertEqual(self.task("kb_l1_1")["inputs"][0]["init"], {"dist": "normal", "mean": 0.0, "std": 1.0})

    def test_written_sizes_become_cuda_sizes_and_cpu_sizes_shrink(self):
        task = self.task("kb_l1_7")
        self.assertEqual(task["sizes"]["cuda"], {"batch_size": 4096, "dim": 393216})
        cpu = task["sizes"]["cpu"]
        self.assertLessEqual(cpu["batch_size"] * cpu["dim"] * 2, 4_000_000)
        self.assertIn("batch_size 4096->", task["kernelbench"]["cpu_scale"])
        self.assertEqual(task["kernelbench"]["cuda_sizes"], "written")
        self.assertEqual(self.task("kb_l1_2")["kernelbench"]["cpu_scale"], "as written")

    def test_traces_match_eager_on_fresh_draws(self):
        for name in EXPECTED_IMPORTED:
            task = self.task(name)
            program = torch.jit.load(str(self.out / task["reference_files"]["cpu"]))
            text = next(t for f, (_, t) in PROBLEMS.items() if f.startswith(f"{task['kernelbench']['id']}_"))
            for _ in range(2):
                values = fresh_inputs(task)
                with torch.no_grad():
                    got = program(*[v.clone() for v in values])
                got = list(got) if isinstance(got, tuple) else [got]
                want = eager_outputs(text, task, [v.clone() for v in values])
                self.assertEqual(len(got), len(task["outputs"]))
                for g, w, declared in zip(got, want, task["outputs"]):
                    sizes = task["sizes"]["cpu"]
                    self.assertEqual(list(g.shape), [sizes[s] for s in declared["shape"]], name)
                    self.assertTrue(torch.allclose(g, w, atol=1e-4, rtol=1e-4), name)

    def test_convolutions_are_traced_with_tf32_off(self):
        # The trace keeps the TF32 switch as the convolution's last argument; PyTorch's default (on) would make a
        # reference compute in TF32 on a GPU, outside float32's tolerance.
        program = torch.jit.load(str(self.out / self.task("kb_l1_4")["reference_files"]["cpu"]))
        convolutions = [n for n in program.inlined_graph.nodes() if n.kind() == "aten::_convolution"]
        self.assertEqual(len(convolutions), 1)
        self.assertFalse(list(convolutions[0].inputs())[-1].toIValue())

    def test_input_transforms_are_declared(self):
        inits = {name: [i["init"] for i in self.task(name)["inputs"]] for name in ("kb_l1_6", "kb_l1_8", "kb_l1_9",
                                                                                   "kb_l1_10")}
        self.assertEqual([i.get("transform") for i in inits["kb_l1_6"]], ["triu", "triu"])
        self.assertEqual(inits["kb_l1_8"][1], {"dist": "choice", "values": [-1.0, 1.0]})
        self.assertEqual([i.get("transform") for i in inits["kb_l1_9"]], ["symmetric", "symmetric"])
        self.assertEqual([i.get("transform") for i in inits["kb_l1_10"]], ["softmax", "softmax"])
        self.assertEqual(inits["kb_l1_10"][0]["scale"][1], 1.0)  # the per-draw factor, applied before the softmax
        self.assertNotIn("scale", inits["kb_l1_10"][1])

    def test_a_problem_whose_output_ignores_its_inputs_is_marked(self):
        task = self.task("kb_l2_11")
        self.assertIs(task.get("constant_output"), True)
        self.assertIn("constant_output", task["kernelbench"])
        self.assertEqual(task["tolerance"]["float32"], {"atol": 1e-4, "rtol": 1e-4})
        for name in EXPECTED_IMPORTED - {"kb_l2_11"}:
            self.assertNotIn("constant_output", self.task(name), name)

    def test_outputs_that_concentrate_get_a_per_draw_factor(self):
        task = self.task("kb_l1_13")
        self.assertEqual(task["inputs"][0]["init"]["scale"], [0.25, 1.0])
        self.assertIn("get_inputs()[0]", task["kernelbench"]["input_scale"])
        for name in EXPECTED_IMPORTED - {"kb_l1_13"}:
            self.assertNotIn("input_scale", self.task(name)["kernelbench"], name)
        torch.manual_seed(5)
        answers = [eager_outputs(PROBLEMS["13_Mean_near_one.py"][1], task, fresh_inputs(task))[0] for _ in range(4)]
        self.assertGreater(max(answers) - min(answers), 1e-3)

    def test_importing_again_is_idempotent(self):
        again = run_importer("--out", str(self.out), "--levels", "2", str(self.problems_dir))
        self.assertEqual(again.returncode, 0, again.stderr[-2000:])
        self.assertEqual(again.report["imported"], ["kb_l2_3", "kb_l2_11"])


class BadArguments(unittest.TestCase):
    def test_bad_arguments_exit_2(self):
        with tempfile.TemporaryDirectory() as tmp:
            self.assertEqual(run_importer("--out", tmp, str(Path(tmp) / "nowhere")).returncode, 2)
            self.assertEqual(run_importer("--out", tmp, "--levels", "one", tmp).returncode, 2)
            self.assertEqual(run_importer(tmp).returncode, 2)

    def test_a_file_that_is_no_problem_is_named_in_the_error(self):
        with tempfile.TemporaryDirectory() as tmp:
            stray = Path(tmp) / "notes.py"
            stray.write_text("x = 1\n")
            result = run_importer("--out", str(Path(tmp) / "out"), str(stray))
            self.assertEqual(result.returncode, 2)
            self.assertIsNone(result.report)
            self.assertIn(f"{stray}: not a KernelBench problem file", result.stderr)

    def test_a_file_that_is_no_problem_beside_a_problem_is_refused(self):
        with tempfile.TemporaryDirectory() as tmp:
            stray = Path(tmp) / "notes.py"
            stray.write_text("x = 1\n")
            problem = write_problem(Path(tmp), 1, "1_Broken.py", "import torch\nclass Model(:\n")
            result = run_importer("--out", str(Path(tmp) / "out"), str(stray), str(problem))
            self.assertEqual(result.returncode, 0, result.stderr[-2000:])
            self.assertEqual(result.report["imported"], [])
            self.assertEqual({r["problem"] for r in result.report["refused"]}, {str(stray), str(problem)})

    def test_paths_without_problem_files_are_an_error(self):
        with tempfile.TemporaryDirectory() as tmp:
            (Path(tmp) / "README.md").write_text("no problems here\n")
            result = run_importer("--out", str(Path(tmp) / "out"), tmp)
            self.assertEqual(result.returncode, 2)
            self.assertIsNone(result.report)
            self.assertIn(f"no KernelBench problem files (level<N>/<id>_<Name>.py) in {tmp}", result.stderr)
            self.assertFalse((Path(tmp) / "out").exists())
            write_problem(Path(tmp), 1, "1_ReLU.py", RELU)
            result = run_importer("--out", str(Path(tmp) / "out"), "--levels", "2,3", tmp)
            self.assertEqual(result.returncode, 2)
            self.assertIn("no KernelBench problem files (level<N>/<id>_<Name>.py) of level 2,3", result.stderr)

    def test_a_malformed_problem_is_refused(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "level1" / "1_Broken.py"
            path.parent.mkdir()
            path.write_text("import torch\nclass Model(:\n")
            result = run_importer("--out", str(Path(tmp) / "out"), tmp)
            self.assertEqual(result.returncode, 0)
            self.assertEqual(result.report["refused"][0]["problem"], str(path))


class UntrustedProblems(unittest.TestCase):
    """Problem files whose names, output or forward would otherwise break the import or its tasks."""

    def test_a_file_name_that_is_not_utf8_is_refused_by_name_and_the_rest_imported(self):
        with tempfile.TemporaryDirectory(prefix="kb-utf8-test-") as tmp:
            write_problem(Path(tmp), 1, "1_ReLU.py", RELU)
            write_problem(Path(tmp), 1, b"2_Bad\xffName.py", RELU)
            result = run_importer("--out", str(Path(tmp) / "out"), tmp)
            self.assertEqual(result.returncode, 0, result.stderr[-3000:])
            self.assertEqual(result.report["imported"], ["kb_l1_1"])
            self.assertEqual(result.report["refused"], [{
                "problem": f"{tmp}/level1/2_Bad\\xffName.py",
                "reason": "its path is not valid UTF-8 (TorchScript and the task file record it as text); "
                          "rename the file"}])
            self.assertEqual(sorted(p.name for p in (Path(tmp) / "out").iterdir()), ["kb_l1_1.cpu.pt", "kb_l1_1.toml"])

    def test_what_a_problem_prints_is_log_and_never_the_report(self):
        with tempfile.TemporaryDirectory(prefix="kb-print-test-") as tmp:
            write_problem(Path(tmp), 1, "1_ReLU_printing_a_report.py", RELU_PRINTING_A_REPORT)
            result = run_importer("--out", str(Path(tmp) / "out"), tmp)
            self.assertEqual(result.returncode, 0, result.stderr[-3000:])
            self.assertEqual(result.report, {"imported": ["kb_l1_1"], "refused": []})
            self.assertIn(FAKE_REPORT, result.stderr)  # logged where diagnostics go, not lost

    def test_a_forward_that_modifies_its_inputs_is_refused(self):
        with tempfile.TemporaryDirectory(prefix="kb-mutate-test-") as tmp:
            write_problem(Path(tmp), 1, "1_Scales_its_input.py", SCALES_ITS_INPUT)
            write_problem(Path(tmp), 1, "2_Bumps_its_parameter.py", BUMPS_ITS_PARAMETER)
            write_problem(Path(tmp), 1, "3_Scales_a_copy.py", SCALES_A_COPY)
            write_problem(Path(tmp), 1, "4_Scales_its_second_input.py", SCALES_ITS_SECOND_INPUT)
            result = run_importer("--out", str(Path(tmp) / "out"), tmp)
            self.assertEqual(result.returncode, 0, result.stderr[-3000:])
            self.assertEqual(result.report["imported"], ["kb_l1_3"])
            refused = {Path(r["problem"]).name: r["reason"] for r in result.report["refused"]}
            self.assertEqual(set(refused), {"1_Scales_its_input.py", "2_Bumps_its_parameter.py",
                                            "4_Scales_its_second_input.py"})
            self.assertIn("forward modifies its input in place (get_inputs()[0])", refused["1_Scales_its_input.py"])
            self.assertIn("(parameter scale)", refused["2_Bumps_its_parameter.py"])
            self.assertIn("(get_inputs()[1])", refused["4_Scales_its_second_input.py"])
            for reason in refused.values():
                self.assertIn("no correct kernel could pass", reason)
            self.assertFalse(list((Path(tmp) / "out").glob("kb_l1_[124]*")))


class KilledImport(unittest.TestCase):
    def test_killing_the_importer_leaves_no_problem_process(self):
        """A problem whose constructor never returns, and the importer killed with SIGKILL meanwhile: the process
        importing that problem must die too (it would otherwise live on, holding a core)."""
        with tempfile.TemporaryDirectory(prefix="kb-kill-test-") as tmp:
            level1 = Path(tmp) / "level1"
            level1.mkdir()
            (level1 / "1_Hang.py").write_text(HEADER + '''import time
class Model(nn.Module):
    def __init__(self):
        super(Model, self).__init__()
        while True:
            time.sleep(0.05)

    def forward(self, x):
        return x

def get_inputs():
    return [torch.rand(8, 8)]

def get_init_inputs():
    return []
''')
            importer = subprocess.Popen([sys.executable, str(IMPORTER), "--out", str(Path(tmp) / "out"),
                                         "--report", str(Path(tmp) / "report.json"), tmp],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            marker = str(Path(tmp) / "out")
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline and len(processes_naming(marker)) < 2:
                time.sleep(0.1)  # the importer and its forked per-problem process
            self.assertGreaterEqual(len(processes_naming(marker)), 2, "the per-problem process never started")
            importer.kill()
            importer.wait()
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and processes_naming(marker):
                time.sleep(0.1)
            self.assertEqual(processes_naming(marker), [])


def processes_naming(text: str) -> list:
    """Live (not zombie) processes whose command line contains text."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if text in (proc / "cmdline").read_bytes().decode(errors="replace") and \
                    (proc / "stat").read_text().split(") ")[-1][0] != "Z":
                found.append(int(proc.name))
        except OSError:
            continue
    return found


class Helpers(unittest.TestCase):
    """Pieces of the importer that are easy to get subtly wrong."""

    @classmethod
    def setUpClass(cls):
        cls.importer = load_importer_module()

    def test_rearrange_fallback_matches_reshape_and_permute(self):
        rearrange = self.importer.rearrange
        x = torch.arange(2 * 6 * 3 * 5).reshape(2, 6, 3, 5)
        self.assertTrue(torch.equal(rearrange(x, "b (c l) h p -> b c l h p", l=2), x.reshape(2, 3, 2, 3, 5)))
        self.assertTrue(torch.equal(rearrange(x, "b (c l) ... -> b c l ...", l=3), x.reshape(2, 2, 3, 3, 5)))
        self.assertTrue(torch.equal(rearrange(x, "b c h p -> b p c h"), x.permute(0, 3, 1, 2)))
        y = x.reshape(2, 3, 2, 3, 5)
        self.assertTrue(torch.equal(rearrange(y, "b c l h p -> b (c l) h p"), x))
        with self.assertRaises(ValueError):
            rearrange(x, "b c h -> b c h")

    def test_source_strings_survive_toml(self):
        for text in ["plain\n", "has ''' inside\n", 'quotes " and \\ back\\slash\n', "ends with '", "tab\there"]:
            document = f"source = {self.importer.toml_multiline(text)}\n"
            self.assertEqual(tomllib.loads(document)["source"], text)
        awkward = 'a "b" \\ c\n\x01'
        self.assertEqual(tomllib.loads("s = " + self.importer.toml_string(awkward))["s"], awkward)

    def test_gpu_turns_never_overlap(self):
        # Processes imported at once take the GPU one at a time: each holds its turn for a while and records when.
        with tempfile.TemporaryDirectory() as d:
            out, log = Path(d), Path(d) / "turns"
            children = []
            for _ in range(3):
                pid = os.fork()
                if pid == 0:
                    with self.importer.gpu_turn(out):
                        start = time.monotonic()
                        time.sleep(0.2)
                        with open(log, "a") as f:
                            f.write(f"{start} {time.monotonic()}\n")
                    os._exit(0)
                children.append(pid)
            for pid in children:
                self.assertEqual(os.waitpid(pid, 0)[1], 0)
            turns = sorted(tuple(map(float, line.split())) for line in log.read_text().splitlines())
            self.assertEqual(len(turns), 3)
            for before, after in zip(turns, turns[1:]):
                self.assertLessEqual(before[1], after[0])

    def test_report_names_tasks_without_a_cuda_reference_only_when_asked(self):
        report = self.importer.report_text
        self.assertNotIn("without_cuda_reference", json.loads(report([], [])))
        missing = [{"task": "kb_l1_19", "reason": "not traced: OutOfMemoryError: CUDA out of memory"}]
        self.assertEqual(json.loads(report([], [], missing))["without_cuda_reference"], missing)


KERNELBENCH = next((p for p in KERNELBENCH_CANDIDATES if p.is_dir()), None)


@unittest.skipIf(KERNELBENCH is None, "the KernelBench problems (shared/kernelbench) are not here")
class RealProblems(unittest.TestCase):
    PICKED = {"level1": ["19_", "23_", "1_", "54_"], "level2": ["12_"]}

    def test_real_problems_import_and_run(self):
        files = [f for level, prefixes in self.PICKED.items() for prefix in prefixes
                 for f in sorted((KERNELBENCH / level).glob(prefix + "*.py"))]
        self.assertEqual(len(files), 5)
        with tempfile.TemporaryDirectory() as tmp:
            result = run_importer("--out", tmp, *map(str, files))
            self.assertEqual(result.returncode, 0, result.stderr[-3000:])
            report = result.report
            self.assertEqual(report["imported"], ["kb_l1_1", "kb_l1_19", "kb_l1_23", "kb_l1_54", "kb_l2_12"])
            self.assertEqual(report["refused"], [])
            for name in report["imported"]:
                with open(Path(tmp) / f"{name}.toml", "rb") as f:
                    task = tomllib.load(f)
                program = torch.jit.load(str(Path(tmp) / f"{name}.cpu.pt"))
                with torch.no_grad():
                    out = program(*fresh_inputs(task))
                sizes = task["sizes"]["cpu"]
                self.assertEqual(list(out.shape), [sizes[s] for s in task["outputs"][0]["shape"]], name)
                self.assertIn("cuda", task["sizes"], name)


if __name__ == "__main__":
    unittest.main(verbosity=2)
