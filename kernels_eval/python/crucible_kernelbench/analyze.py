"""The evaluator's trusted look at a KernelBench-format candidate, before any of it runs: the gate (gate.py), then
the inline sources (extract.py), written out as the translation units load_inline would have built, for Crucible's
compiler. Standard library only; nothing of the candidate is executed.

Usage: python3 -I analyze.py CANDIDATE.py [--dtypes float32,...] [--torch-ops allow|forbid] [--out DIR]
One JSON object on stdout: {"refusals": [...], "kernels": [...], "extensions": [{"name", "functions", "cuda",
"file", "lean_file"}]}; with --out, each extension's translation unit is written to DIR/<name>.cpp (or .cu), and
its unit with Crucible's lean bindings to DIR/<name>.lean.cpp (.lean.cu).
"""
import ast
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from crucible_kernelbench import extract, gate  # noqa: E402

CANDIDATE_NAME = "candidate.py"  # the name compiler messages give the candidate's own lines


def with_lines(source):
    """A source's text with #line directives wherever one of its pieces starts a line, so the compiler's messages
    name the candidate's lines. A piece that continues a line (after a `+`) keeps the numbering it falls in."""
    out, at_line_start = [], True
    for piece in source:
        if at_line_start and piece.line:
            out.append(f'\n#line {piece.line} "{CANDIDATE_NAME}"\n')
        out.append(piece.text)
        at_line_start = piece.text.endswith("\n") or (at_line_start and not piece.text)
    return "".join(out)


def translation_unit(ext, lean=False):
    """What load_inline builds, in one file: torch's extension header, the C++ sources, the CUDA sources (when any,
    the whole unit is CUDA C++), and the Python bindings of `functions`: pybind11's, as load_inline writes them, or
    (lean) Crucible's on Python's C API (kernels_eval/include/crucible/kernelbench/bindings.h), which build in a
    fraction of the time."""
    parts = ["#include <torch/extension.h>\n"]
    if ext["cuda_sources"]:
        parts.append("#include <cuda.h>\n#include <cuda_runtime.h>\n")
    for source in ext["cpp_sources"] + ext["cuda_sources"]:
        parts.append(with_lines(source) + "\n")
    parts.append('\n#line 1 "crucible-bindings"\n')
    parts.append(lean_bindings(ext) if lean else pybind11_bindings(ext))
    return "".join(parts)


def pybind11_bindings(ext):
    lines = [f"PYBIND11_MODULE({ext['name']}, m) {{\n"]
    lines += [f'  m.def("{f}", &{f}, "{f}");\n' for f in ext["functions"]]
    return "".join(lines) + "}\n"


def lean_bindings(ext):
    """Everything in the module's init function: a split CUDA build keeps namespace-scope variables in the device half
    too, and NVRTC knows nothing of Python."""
    name = ext["name"]
    lines = ["#include <crucible_bindings.h>\n",
             f'extern "C" __attribute__((visibility("default"))) PyObject* PyInit_{name}() {{\n',
             "  static PyMethodDef methods[] = {\n"]
    lines += [f'      crucible_bindings::method<&{f}>("{f}"),\n' for f in ext["functions"]]
    lines.append("      {nullptr, nullptr, 0, nullptr}};\n")
    lines.append(f'  static PyModuleDef module = {{PyModuleDef_HEAD_INIT, "{name}", nullptr, -1, methods}};\n')
    lines.append("  return crucible_bindings::make_module(&module);\n}\n")
    return "".join(lines)


def analyze(source, dtypes=(), forbid_torch_ops=False):
    try:
        tree = ast.parse(source)
    except SyntaxError as e:
        return {"refusals": [{"code": "syntax_error", "detail": f"line {e.lineno}: {e.msg}"}], "kernels": [],
                "extensions": []}
    except (ValueError, RecursionError) as e:
        return {"refusals": [{"code": "syntax_error", "detail": str(e)[:200]}], "kernels": [], "extensions": []}
    refusals, kernels = gate.check(tree, dtypes, forbid_torch_ops)
    extensions, unresolved = extract.extract(tree)
    refusals += unresolved
    for ext in extensions:
        if not ext["functions"]:
            refusals.append({"code": "dynamic_source", "detail": f"line {ext['line']}: load_inline('{ext['name']}') "
                             "binds no functions"})
    return {"refusals": refusals[:20], "kernels": kernels, "extensions": [
        {"name": e["name"], "functions": e["functions"], "cuda": bool(e["cuda_sources"]),
         "unit": translation_unit(e), "lean_unit": translation_unit(e, lean=True)} for e in extensions]}


def main(argv):
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    option = lambda name, default: argv[argv.index(name) + 1] if name in argv else default  # noqa: E731
    dtypes = [d for d in option("--dtypes", "").split(",") if d]
    with open(argv[1], "rb") as f:
        source = f.read().decode("utf-8", errors="replace")
    result = analyze(source, dtypes, option("--torch-ops", "allow") == "forbid")
    out = option("--out", None)
    for ext in result["extensions"]:
        units = {"file": ext.pop("unit"), "lean_file": ext.pop("lean_unit")}
        if out and not result["refusals"]:
            suffix = ".cu" if ext["cuda"] else ".cpp"
            for key, unit in units.items():
                ext[key] = os.path.join(out, ext["name"] + (".lean" if key == "lean_file" else "") + suffix)
                with open(ext[key], "w") as f:
                    f.write(unit)
        elif "--units" in argv:
            ext["unit"] = units["file"]
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
