"""The in-worker package's structure (python/perftracker, issue 27): hooks.py's RankMonitor hands
each part (patches, collectives, window, client, ...) what it works with, and no part reaches back
for the collector. Read with `ast`, not imported: no module other than hooks.py names `RankMonitor`
(a name, an attribute, an imported name, a string annotation) or imports hooks (at any depth,
TYPE_CHECKING blocks included), except the entry points that only call into it from a function;
and the package's import-time imports form no circle. Each check is also run on altered text, to
show that the back-pointer it forbids fails it."""
import ast
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ptest  # noqa: E402

PACKAGE = "perftracker"
PACKAGE_DIR = os.path.join(ptest.SOURCE, "python", PACKAGE)
OWNER = "hooks"  # the one module that holds the RankMonitor
# What starts the collector (the package's enable() and step(), sitecustomize): they call into
# hooks from inside a function, and nothing the collector is made of imports them.
ENTRY_POINTS = {"__init__", "sitecustomize"}


def modules(folder):
    """{module name: its parsed source} of the package's .py files in FOLDER."""
    out = {}
    for name in sorted(os.listdir(folder)):
        if name.endswith(".py"):
            with open(os.path.join(folder, name)) as f:
                out[name[:-3]] = ast.parse(f.read(), filename=name)
    return out


def imported(node, module):
    """The package's modules NODE (an import, or importlib.import_module/__import__ of a literal)
    imports, by name, as MODULE (a module of the package) sees them."""
    def of(dotted):
        parts = dotted.split(".")
        return parts[1] if len(parts) > 1 and parts[0] == PACKAGE else None

    found = []
    if isinstance(node, ast.Import):
        found = [of(a.name) for a in node.names]
    elif isinstance(node, ast.ImportFrom):
        base = node.module or ""
        if node.level:  # relative: inside the package
            base = PACKAGE + ("." + base if base else "")
        if base == PACKAGE:
            found = [a.name for a in node.names]  # from perftracker import hooks
        else:
            found = [of(base)]
    elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant) \
            and isinstance(node.args[0].value, str):
        fn = node.func
        name = fn.attr if isinstance(fn, ast.Attribute) else fn.id if isinstance(fn, ast.Name) else ""
        if name in ("import_module", "__import__"):
            target = node.args[0].value
            found = [target.lstrip(".").split(".")[0] if target.startswith(".") else of(target)]
    return [m for m in found if m and m != module]


def names_of_collector(tree):
    """Where TREE names RankMonitor: line numbers."""
    lines = []
    for node in ast.walk(tree):
        name = (node.id if isinstance(node, ast.Name) else
                node.attr if isinstance(node, ast.Attribute) else None)
        if name == "RankMonitor":
            lines.append(node.lineno)
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            lines += [node.lineno for a in node.names
                      if a.name.split(".")[-1] == "RankMonitor" or a.asname == "RankMonitor"]
        annotations = []
        if isinstance(node, ast.arg) and node.annotation is not None:
            annotations.append(node.annotation)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.returns is not None:
            annotations.append(node.returns)
        elif isinstance(node, ast.AnnAssign):
            annotations.append(node.annotation)
        for a in annotations:  # a forward reference: "RankMonitor", "Optional['RankMonitor']"
            for c in ast.walk(a):
                if isinstance(c, ast.Constant) and isinstance(c.value, str):
                    try:
                        ref = ast.parse(c.value, mode="eval")
                    except SyntaxError:
                        continue
                    if any(isinstance(n, ast.Name) and n.id == "RankMonitor" for n in ast.walk(ref)):
                        lines.append(c.lineno)
    return sorted(set(lines))


def import_time_imports(tree, module):
    """The package's modules TREE imports when it is imported (function bodies left out, where
    an import runs only when called; TYPE_CHECKING blocks kept: a type checker follows them)."""
    out = set()
    todo = list(tree.body)
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            continue
        out.update(imported(node, module))
        todo.extend(ast.iter_child_nodes(node))
    return out


def cycle(graph):
    """One circle in GRAPH ({module: modules it imports}) as a list of names, or None."""
    state = {}

    def visit(m, path):
        state[m] = "open"
        for n in sorted(graph.get(m, ())):
            if n not in graph:
                continue  # not a .py of the package (_worker)
            if state.get(n) == "open":
                return path[path.index(n):] + [n]
            if n not in state:
                found = visit(n, path + [n])
                if found:
                    return found
        state[m] = "done"
        return None

    for m in sorted(graph):
        if m not in state:
            found = visit(m, [m])
            if found:
                return found
    return None


def problems(trees):
    """Every way the modules TREES ({name: parsed source}) let the collector's circle back."""
    out = []
    for module, tree in trees.items():
        if module == OWNER:
            continue
        out += [f"{module}.py:{line}: names RankMonitor (hooks.py's; pass the part what it needs)"
                for line in names_of_collector(tree)]
        if module in ENTRY_POINTS:
            if OWNER in import_time_imports(tree, module):
                out.append(f"{module}.py imports hooks when it is imported (only from a function)")
            continue
        for node in ast.walk(tree):
            if OWNER in imported(node, module):
                out.append(f"{module}.py:{node.lineno}: imports hooks (a part of the collector "
                           f"reaching back for it)")
    graph = {m: import_time_imports(t, m) for m, t in trees.items()}
    circle = cycle(graph)
    if circle:
        out.append("import circle: " + " -> ".join(circle))
    return out


# The back-pointers this test keeps out, as each once was or could come back.
OLD_TYPE_CHECKING = """
from typing import TYPE_CHECKING
if TYPE_CHECKING:
    from perftracker.hooks import RankMonitor

class WindowState:
    def __init__(self, collector: "RankMonitor") -> None:
        self._collector = collector
"""
FORWARD_REFERENCE_ONLY = """
from typing import Optional
def f(c: "Optional[RankMonitor]") -> None:
    pass
"""
LAZY_IMPORT = """
def dump():
    from . import hooks
    hooks._collector.patches.ring.dump(with_torch=True)
"""
ENTRY_AT_IMPORT = """
from perftracker import hooks
"""
CIRCLE = ("from perftracker import b\n", "from perftracker.a import x\n")


class PackageStructure(unittest.TestCase):
    def test_the_parts_do_not_reach_back_for_the_collector(self):
        trees = modules(PACKAGE_DIR)
        self.assertIn(OWNER, trees)
        self.assertGreaterEqual(set(trees), {"client", "collectives", "patches", "window"})
        self.assertEqual(problems(trees), [])
        # And hooks.py does hold the RankMonitor the parts no longer name.
        self.assertTrue(names_of_collector(trees[OWNER]))

    def test_a_back_pointer_fails_it(self):
        def with_module(name, text):
            trees = modules(PACKAGE_DIR)
            trees[name] = ast.parse(text)
            return problems(trees)

        found = with_module("window", OLD_TYPE_CHECKING)
        self.assertTrue(any("window.py:4: imports hooks" in p for p in found), found)
        self.assertTrue(any("window.py:4: names RankMonitor" in p for p in found), found)
        self.assertTrue(any("window.py:7: names RankMonitor" in p for p in found), found)
        self.assertEqual(with_module("client", FORWARD_REFERENCE_ONLY),
                         ["client.py:3: names RankMonitor (hooks.py's; pass the part what it needs)"])
        found = with_module("collectives", LAZY_IMPORT)
        self.assertEqual(len(found), 1, found)
        self.assertIn("collectives.py:3: imports hooks", found[0])
        self.assertEqual(with_module("sitecustomize", ENTRY_AT_IMPORT),
                         ["sitecustomize.py imports hooks when it is imported (only from a function)"])
        self.assertEqual(with_module("protocol", "import importlib\n"
                                     "importlib.import_module('perftracker.hooks')\n"),
                         ["protocol.py:2: imports hooks (a part of the collector reaching back for it)",
                          "import circle: client -> protocol -> hooks -> client"])
        trees = modules(PACKAGE_DIR)
        trees["a"], trees["b"] = ast.parse(CIRCLE[0]), ast.parse(CIRCLE[1])
        self.assertEqual(problems(trees), ["import circle: a -> b -> a"])


if __name__ == "__main__":
    ptest.main()
