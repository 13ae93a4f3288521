"""The Triton worker's file confinement (Landlock), entered just before the candidate's module runs.

The interpreter imports modules lazily, so the Python's own trees stay readable; everything else the candidate could
open is closed: /etc beyond the linker's cache, /home, /root, /tmp, other processes' /proc, and every other build in
the compile cache. Writing is closed everywhere but the GPU's device files and /dev/null (the seccomp load filter also
opens files read-only).
"""
import ctypes
import os
import site
import sys


def python_trees(package_dir):
    """The directories this interpreter may import from: its prefixes, site-packages, every sys.path entry and
    Crucible's package, each also as its resolved path (Landlock judges the file actually opened)."""
    trees = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix, package_dir}
    trees.update(site.getsitepackages())
    trees.update(p for p in sys.path if p)
    resolved = {os.path.realpath(p) for p in trees}
    return sorted(p for p in trees | resolved if os.path.isdir(p))


def worker_paths(package_dir, candidate_dir, warm_cache):
    """What the worker may read once the candidate is known: the Python's trees, the candidate's own build
    directory (its source, gate report and Triton cache) and the trusted warm-up kernel's cache."""
    paths = python_trees(package_dir) + [candidate_dir]
    if warm_cache:
        paths.append(warm_cache)
    return paths


def confine(support, paths):
    """Confines the calling thread (the candidate runs in it) to `paths`, read-only, beside the system's and the GPU
    driver's files. Returns "" when confined or when this kernel has no Landlock (as for the CUDA worker, the
    seccomp filters are then what holds), else the reason it failed."""
    encoded = [p.encode() for p in paths]
    array = (ctypes.c_char_p * max(len(encoded), 1))(*encoded)
    error = ctypes.create_string_buffer(512)
    support.crucible_confine_files.argtypes = [ctypes.POINTER(ctypes.c_char_p), ctypes.c_int, ctypes.c_char_p,
                                               ctypes.c_int]
    rc = support.crucible_confine_files(array, len(encoded), error, len(error))
    return "" if rc >= 0 else error.value.decode(errors="replace") or "Landlock refused the rule set"
