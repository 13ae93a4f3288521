"""Static extraction of the sources a KernelBench-format candidate hands to torch.utils.cpp_extension.load_inline,
without running any of it: the candidate's syntax tree (ast.parse executes nothing) is read for every call of
load_inline, and each argument is resolved from what the tree alone says:
  - string constants, and f-strings without substitutions;
  - names bound once, at module level, to something resolvable;
  - `+` between resolvable strings, and lists or tuples of them (load_inline joins a list with newlines).
Anything else (an f-string with values, a call, a file read, a name bound twice or inside a function) cannot be
known before the candidate runs, and is refused with the reason: Crucible compiles what it extracted, not what the
candidate might build at run time.

Every resolved string keeps where its text came from, so the generated translation unit can carry #line directives
and the compiler's messages point at the candidate's own lines.
"""
import ast

ENTRY = "load_inline"
MODULE = "torch.utils.cpp_extension"
# load_inline(name, cpp_sources, cuda_sources=None, functions=None, ...): the positional order.
POSITIONAL = ["name", "cpp_sources", "cuda_sources", "functions"]
# Arguments that change what is built; the rest (verbose, build_directory, flags) are ignored: Crucible's own
# flags build every candidate alike.
SOURCES = ("cpp_sources", "cuda_sources")


class Unresolved(Exception):
    """An argument that only running the candidate could tell."""


class Piece:
    """A piece of source text and the candidate line its first character is on."""

    def __init__(self, text, line):
        self.text, self.line = text, line


def module_bindings(tree):
    """Module-level names bound exactly once by a plain assignment; a name bound twice, or also in a function,
    could hold something else by the time load_inline runs."""
    counts, values = {}, {}
    for node in ast.walk(tree):
        targets = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        for t in targets:
            for name in ast.walk(t):
                if isinstance(name, ast.Name):
                    counts[name.id] = counts.get(name.id, 0) + 1
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            values[node.targets[0].id] = node.value
    return {k: v for k, v in values.items() if counts.get(k) == 1}


class Resolver:
    def __init__(self, bindings):
        self.bindings = bindings
        self.depth = 0

    def pieces(self, node):
        """The pieces of text a string-valued expression is made of."""
        self.depth += 1
        try:
            if self.depth > 50:
                raise Unresolved("names bound to each other too deeply")
            return self._pieces(node)
        finally:
            self.depth -= 1

    def _pieces(self, node):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return [Piece(node.value, node.lineno)]
        if isinstance(node, ast.JoinedStr):
            if all(isinstance(v, ast.Constant) for v in node.values):
                return [Piece("".join(v.value for v in node.values), node.lineno)]
            raise Unresolved(f"line {node.lineno}: an f-string with values is known only when the candidate runs")
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            return self.pieces(node.left) + self.pieces(node.right)
        if isinstance(node, ast.Name):
            if node.id not in self.bindings:
                raise Unresolved(f"line {node.lineno}: '{node.id}' is not bound once, at module level, to a string")
            return self.pieces(self.bindings[node.id])
        raise Unresolved(f"line {getattr(node, 'lineno', 0)}: {type(node).__name__} is known only when the "
                         "candidate runs (Crucible compiles only sources it can read before running anything)")

    def text(self, node):
        return "".join(p.text for p in self.pieces(node))

    def sources(self, node):
        """cpp_sources / cuda_sources: a string, or a list or tuple of strings (joined with newlines)."""
        if isinstance(node, ast.Constant) and node.value is None:
            return []
        if isinstance(node, ast.Name) and node.id in self.bindings and isinstance(self.bindings[node.id],
                                                                                  (ast.List, ast.Tuple)):
            return self.sources(self.bindings[node.id])
        if isinstance(node, (ast.List, ast.Tuple)):
            return [self.pieces(e) for e in node.elts]
        return [self.pieces(node)]

    def names(self, node):
        """functions: a list or tuple of strings (or one string)."""
        if isinstance(node, ast.Constant) and node.value is None:
            return []
        if isinstance(node, ast.Name) and node.id in self.bindings:
            return self.names(self.bindings[node.id])
        if isinstance(node, (ast.List, ast.Tuple)):
            return [self.text(e) for e in node.elts]
        return [self.text(node)]


def is_load_inline(call, aliases):
    f = call.func
    if isinstance(f, ast.Name):
        return aliases.get(f.id) == f"{MODULE}.{ENTRY}"
    if isinstance(f, ast.Attribute) and f.attr == ENTRY:
        return dotted(f.value, aliases) == MODULE
    return False


def dotted(node, aliases):
    """The module an expression like `torch.utils.cpp_extension` or an alias of it names, or None."""
    if isinstance(node, ast.Name):
        return aliases.get(node.id, node.id)
    if isinstance(node, ast.Attribute):
        base = dotted(node.value, aliases)
        return f"{base}.{node.attr}" if base else None
    return None


def import_aliases(tree):
    aliases = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                aliases[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.module:
            for a in node.names:
                aliases[a.asname or a.name] = f"{node.module}.{a.name}"
    return aliases


def call_arguments(call):
    args = {}
    for i, a in enumerate(call.args[:len(POSITIONAL)]):
        args[POSITIONAL[i]] = a
    for k in call.keywords:
        if k.arg is None:
            raise Unresolved(f"line {call.lineno}: **arguments to load_inline are known only when the candidate runs")
        args[k.arg] = k.value
    if len(call.args) > len(POSITIONAL) or any(isinstance(a, ast.Starred) for a in call.args):
        raise Unresolved(f"line {call.lineno}: load_inline's arguments must be written out")
    return args


def extension(call, resolver):
    """One load_inline call's extension: its name, sources (lists of pieces) and functions to bind."""
    args = call_arguments(call)
    if "name" not in args:
        raise Unresolved(f"line {call.lineno}: load_inline without a name")
    ext = {"name": resolver.text(args["name"]), "line": call.lineno,
           "functions": resolver.names(args["functions"]) if "functions" in args else []}
    for key in SOURCES:
        ext[key] = resolver.sources(args[key]) if key in args else []
    if not ext["name"].isidentifier():
        raise Unresolved(f"line {call.lineno}: the extension's name {ext['name']!r} is not an identifier")
    for f in ext["functions"]:
        if not f.isidentifier():
            raise Unresolved(f"line {call.lineno}: {f!r} in functions is not a C++ function name")
    return ext


def extract(tree):
    """(extensions, refusals) for a parsed candidate. Each extension: name, line, functions, cpp_sources and
    cuda_sources (lists of sources, each a list of Pieces)."""
    aliases = import_aliases(tree)
    resolver = Resolver(module_bindings(tree))
    extensions, refusals = [], []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        if is_load_inline(node, aliases):
            try:
                extensions.append(extension(node, resolver))
            except Unresolved as e:
                refusals.append({"code": "dynamic_source", "detail": str(e)})
        elif isinstance(node.func, ast.Attribute) and node.func.attr == "load" and \
                dotted(node.func.value, aliases) == MODULE:
            refusals.append({"code": "dynamic_source", "detail": f"line {node.lineno}: cpp_extension.load builds "
                             "from files; inline the sources with load_inline"})
    names = [e["name"] for e in extensions]
    for n in sorted({n for n in names if names.count(n) > 1}):
        refusals.append({"code": "duplicate_extension", "detail": f"two load_inline calls build '{n}'"})
    return extensions, refusals


def joined(source):
    """A source's text, as load_inline joins a list of them."""
    return "".join(p.text for p in source)
