"""scripts/check_structure.py refuses what it says it refuses: a file, a function or a class over
its limit (a class counted with its members defined in other files, to the line), and a bare number in src/diagnose/. Each on a small tree made here, beside a tree that
passes, so a check that stopped looking would fail this test."""
import os
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ptest  # noqa: E402

SCRIPT = os.path.join(ptest.SOURCE, "scripts", "check_structure.py")
sys.path.insert(0, os.path.dirname(SCRIPT))
import check_structure  # noqa: E402


def run_on(files):
    """Runs the check on a tree of FILES ({path under src/: text}); (exit code, output)."""
    with tempfile.TemporaryDirectory() as root:
        for rel, text in files.items():
            path = os.path.join(root, "src", rel)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w") as f:
                f.write(text)
        p = subprocess.run([sys.executable, SCRIPT, root], capture_output=True, text=True)
        return p.returncode, p.stdout


def body(n):
    return "".join("  int v%d = %d;\n" % (k, k) for k in range(n))


HEADER = ("namespace a {\nclass Big {\n public:\n  void F();\n  void G();\n  void H();\n  void I();\n"
          "};\n}  // namespace a\n")


def members(per_function, functions=("F", "G")):
    return "namespace a {\n" + "".join(
        "void Big::%s() {\n%s}\n" % (f, body(per_function)) for f in functions) + "}\n"


class CheckStructure(unittest.TestCase):
    def test_a_small_tree_passes(self):
        rc, out = run_on({"x/big.h": HEADER, "x/big.cc": members(100)})
        self.assertEqual(rc, 0, out)

    def test_a_class_is_counted_with_its_members_in_other_files(self):
        # Four functions of 142 lines in two files: none over its own limit, the class over.
        rc, out = run_on({"x/big.h": HEADER, "x/big_a.cc": members(140, ["F", "G"]),
                          "x/big_b.cc": members(140, ["H", "I"])})
        self.assertEqual(rc, 1, out)
        self.assertIn("class Big is", out)
        self.assertNotIn("Big::F is", out)

    def test_a_function_over_its_limit(self):
        rc, out = run_on({"x/big.h": HEADER, "x/big.cc": members(check_structure.MAX_FUNCTION_LINES)})
        self.assertEqual(rc, 1, out)
        self.assertIn("Big::F is", out)

    def test_a_class_spread_over_files_is_counted_to_the_line(self):
        # A server's Impl over a header and member functions in two files, at the limit and one
        # line over it.
        held = check_structure.MAX_CLASS_LINES

        def tree(lines):
            functions = ["F%d" % k for k in range(lines // 102)]  # 102 lines each
            header = ("namespace perftracker::server {\nclass Server {\n struct Impl;\n};\n"
                      "struct Server::Impl {\n%s};\n}\n") % body(lines % 102 - 2)
            cc = ["namespace perftracker::server {\n" + "".join(
                "void Server::Impl::%s() {\n%s}\n" % (f, body(100)) for f in part) + "}\n"
                  for part in (functions[::2], functions[1::2])]
            return {"server/s.h": header, "server/s_a.cc": cc[0], "server/s_b.cc": cc[1]}

        rc, out = run_on(tree(held))
        self.assertEqual(rc, 0, out)
        rc, out = run_on(tree(held + 1))
        self.assertEqual(rc, 1, out)
        self.assertIn("Server::Impl is %d lines" % (held + 1), out)

    def test_a_bare_number_in_diagnose(self):
        rc, out = run_on({"diagnose/rule.cc": "double F(double x) { return x > 0.3; }\n"})
        self.assertEqual(rc, 1, out)
        self.assertIn("bare number 0.3", out)
        rc, out = run_on({"diagnose/rule.cc":
                          "constexpr double kShare = 0.3;  // why\ndouble F() { return 1.0; }\n"})
        self.assertEqual(rc, 0, out)

    def test_the_tree_itself_passes(self):
        p = subprocess.run([sys.executable, SCRIPT, ptest.SOURCE], capture_output=True, text=True)
        self.assertEqual(p.returncode, 0, p.stdout)


if __name__ == "__main__":
    ptest.main()
