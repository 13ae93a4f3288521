"""The Triton candidates' static gate: every fixture's first line names its expected verdict; the gate must refuse
the ones it is responsible for, with that code, and pass the rest (they are caught when they run). Runs with any
python3 (the gate needs only the standard library)."""
import os
import sys
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "kernels_eval", "python"))
from crucible_triton import gate  # noqa: E402

FIXTURES = os.path.join(ROOT, "tests", "fixtures", "triton")
CANDIDATES = os.path.join(ROOT, "configs", "candidates", "triton")
GATE_CODES = {"forbidden_import", "torch_compute", "side_stream", "monkeypatch", "cross_call_state",
              "tensor_subclass", "precision_downgrade", "exception_fallback", "harness_reach", "dynamic_code",
              "syntax_error", "missing_entry_point", "unlaunched_kernel", "no_triton_kernel", "forbidden_decorator"}


def codes(source, dtypes=("float32",)):
    return [r["code"] for r in gate.check(source, dtypes)["refusals"]]


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


class Fixtures(unittest.TestCase):
    def test_each_fixture_gets_its_code_or_passes_to_run_time(self):
        names = sorted(n for n in os.listdir(FIXTURES) if n.endswith(".py"))
        self.assertGreaterEqual(len(names), 20)
        for name in names:
            source = read(os.path.join(FIXTURES, name))
            status, reason = source.splitlines()[0].split(":")[1].split()[:2]
            with self.subTest(fixture=name):
                found = codes(source)
                if status == "rejected" and reason in GATE_CODES:
                    self.assertIn(reason, found)
                else:
                    self.assertEqual(found, [], "caught at run time, so the gate must let it through")

    def test_shipped_naive_candidates_pass_and_name_their_kernels(self):
        for name in ("relu", "softmax", "matmul"):
            with self.subTest(candidate=name):
                result = gate.check(read(os.path.join(CANDIDATES, name + ".py")), ["float32"])
                self.assertEqual(result["refusals"], [])
                self.assertEqual(result["kernels"], [name + "_kernel"])
                self.assertTrue(result["entry_point"])


KERNEL = """
import torch
import triton
from triton import language as tl

@triton.jit
def k(x_ptr, n, BLOCK: tl.constexpr):
    o = tl.arange(0, BLOCK)
    tl.store(x_ptr + o, tl.load(x_ptr + o, mask=o < n) * 2, mask=o < n)

def crucible_forward(inputs, outputs):
    k[(1,)](outputs[0], 1, BLOCK=16)
"""


HALF = KERNEL.replace("* 2", ".to(tl.float16).to(tl.float32)")


class Table(unittest.TestCase):
    CASES = [
        # (what, source, task dtypes, expected codes)
        ("an alias of triton.language is resolved: float16 on a float32 task", HALF, ["float32"],
         ["precision_downgrade"]),
        ("float16 is the task's own dtype there", HALF, ["float16"], []),
        ("a module-level tuple of configs is fine", KERNEL + "\nCONFIGS = (1, 2)\n", ["float32"], []),
        ("a module-level list is state", KERNEL + "\nCACHE = []\n", ["float32"], ["cross_call_state"]),
        ("import os", "import os\n" + KERNEL, ["float32"], ["forbidden_import"]),
        ("from torch.nn import functional", "from torch.nn import functional as F\n" + KERNEL, ["float32"],
         ["forbidden_import"]),
        ("torch.matmul", KERNEL + "\ndef g(a, b):\n    return torch.matmul(a, b)\n", ["float32"], ["torch_compute"]),
        ("the @ operator", KERNEL + "\ndef g(a, b):\n    return a @ b\n", ["float32"], ["torch_compute"]),
        ("torch.empty_like is allocation", KERNEL + "\ndef g(a):\n    return torch.empty_like(a)\n", ["float32"], []),
        ("getattr reaches anything", KERNEL + "\ndef g(a):\n    return getattr(a, 'x')\n", ["float32"],
         ["harness_reach"]),
        ("a class", KERNEL + "\nclass A:\n    pass\n", ["float32"], ["tensor_subclass"]),
        ("an arbitrary decorator", KERNEL + "\n@staticmethod\ndef g():\n    pass\n", ["float32"],
         ["forbidden_decorator", "harness_reach"]),
        ("no kernel at all", "def crucible_forward(inputs, outputs):\n    pass\n", ["float32"], ["no_triton_kernel"]),
        ("bytes that are not UTF-8 are read, not trusted", "def crucible_forward(a, b):\n    x = '\ufffd'\n",
         ["float32"], ["no_triton_kernel"]),
    ]

    def test_table(self):
        for what, source, dtypes, expected in self.CASES:
            with self.subTest(case=what):
                self.assertEqual(sorted(set(codes(source, dtypes))), sorted(expected))


if __name__ == "__main__":
    unittest.main(verbosity=1)
