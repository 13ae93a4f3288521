#!/usr/bin/python3
"""Tests for what a KernelBench answer's forward returns, before it is delivered into the evaluator's buffers
(kernels_eval/python/crucible_kernelbench/model.py): results made dense inside the call, and the checks and the copy
of delivery.

    /usr/bin/python3 tests/kernelbench/test_model_delivery.py

Needs Debian's python3-torch (CPU tensors stand in for the GPU's: what is checked is layout and type, not device).
"""
import sys
import unittest
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "kernels_eval" / "python"))
from crucible_kernelbench.model import LoadedModel, Refused  # noqa: E402


def bare_model():
    """A LoadedModel's result handling alone (no plan, no extensions)."""
    m = LoadedModel.__new__(LoadedModel)
    m.torch = torch
    return m


class DenseResults(unittest.TestCase):
    def test_views_that_would_leave_work_to_the_copy_are_materialised(self):
        m = bare_model()
        x = torch.arange(12.0).view(3, 4)
        views = {
            "transposed": x.t(),
            "broadcast": torch.arange(4.0).expand(3, 4),
            "zero strides": torch.empty_strided((3, 4), (0, 1)).fill_(2.0),
            "negated": x._neg_view(),  # the neg bit: -x, read through a flag the copy would apply
        }
        self.assertTrue(views["negated"].is_neg())
        for name, view in views.items():
            with self.subTest(name):
                dense = m.dense(view)
                self.assertTrue(dense.is_contiguous())
                self.assertFalse(dense.is_neg())
                self.assertTrue(torch.equal(dense, view))

    def test_a_dense_result_is_the_same_object(self):
        m = bare_model()
        x = torch.randn(5, 6)
        self.assertIs(m.dense(x), x)
        self.assertEqual(m.dense(3), 3)  # not a tensor: delivery refuses it, with its type in the reason


class Delivery(unittest.TestCase):
    def test_the_given_copy_is_used_and_the_outputs_filled(self):
        m = bare_model()
        out = [torch.zeros(2, 3)]
        used = []
        m.deliver(torch.ones(2, 3), out, copy=lambda o, r: (used.append(1), o.copy_(r)))
        self.assertEqual(used, [1])
        self.assertTrue(torch.equal(out[0], torch.ones(2, 3)))

    def test_refusals_by_code(self):
        m = bare_model()

        class Sneaky(torch.Tensor):
            pass

        cases = {
            "output_count": (torch.ones(2, 3), [torch.zeros(2, 3), torch.zeros(2, 3)]),
            "output_type": (torch.ones(2, 3).as_subclass(Sneaky), [torch.zeros(2, 3)]),
            "output_shape": (torch.ones(3, 2), [torch.zeros(2, 3)]),
        }
        for code, (result, outputs) in cases.items():
            with self.subTest(code):
                with self.assertRaises(Refused) as raised:
                    m.deliver(result, outputs)
                self.assertEqual(raised.exception.code, code)
        with self.assertRaises(Refused) as raised:
            m.deliver(3, [torch.zeros(1)])
        self.assertEqual(raised.exception.code, "output_type")


if __name__ == "__main__":
    unittest.main()
