#!/usr/bin/env python3
"""Checks the size limits that keep the code changeable (issue 17; issue 41: bench/, fuzz/ and
the Python of python/ and bench/ too).

No source file under src/, bench/ or fuzz/ may exceed MAX_FILE_LINES lines, no function
MAX_FUNCTION_LINES lines and no class MAX_CLASS_LINES lines (its definition
and its members defined outside it, in any file: an Impl spread over five
files is one class); extents come from Universal Ctags' `end:` field. No bare floating-point number in src/diagnose/ outside
diagnose/policy.h (issue 27): a threshold is named there once, with why; a
file's own constant is a named `constexpr` with its comment. Prints every
offender, one line each, and exits 1 if any.

Usage: scripts/check_structure.py [ROOT]   (ROOT defaults to the repo root)
"""
import ast
import os
import re
import shutil
import subprocess
import sys

# A file a newcomer can read in one sitting; the biggest units in the tree
# (reader orchestration, the simulator's timing) fit under it once split.
MAX_FILE_LINES = 900
# A function that fits on two screens; longer ones mix steps that deserve
# names and tests of their own.
MAX_FUNCTION_LINES = 150
# A class one person can hold in mind: its state and every method that touches it. Past it, a
# class owns several things that deserve names and tests of their own (issue 27: the server's
# agents, windows and hangs were such parts of one Impl).
MAX_CLASS_LINES = 500
SOURCE_SUFFIXES = ('.cc', '.h')
# What the limits cover: the product's C++ and the benchmarks' and fuzzers' beside it, the
# in-worker Python package and the benchmarks' Python (issue 41).
CXX_DIRS = ('src', 'bench', 'fuzz')
PYTHON_DIRS = ('python', 'bench')
# Where every number that decides a diagnosis is named (diagnose/policy.h), and the files the
# literal check leaves alone: the policy table itself and the tests' fixtures.
POLICY_DIR = os.path.join('src', 'diagnose')
POLICY_EXEMPT = ('policy.h', 'testing.h')
# 0 and 1 are identities (an empty sum, a certainty, max(x, 0.0)), not thresholds.
NEUTRAL_LITERALS = {'0.0', '1.0', '0.', '1.'}
FLOAT_LITERAL = re.compile(
    r"(?<![\w.'])(?:\d+\.\d*(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?|\d+[eE][-+]?\d+)[fFlL]?(?![\w.'])")
# A file's own named constant: `constexpr double kTieBreakUs = 1e-9;`.
NAMED_CONSTANT = re.compile(r'^\s*(?:inline\s+)?(?:static\s+)?constexpr\s+\w+\s+k[A-Z]\w*\s*=')


def code_only(text):
    """TEXT with comments and string/char literals blanked, line breaks kept.

    'x = 0.5;  // 0.25' -> 'x = 0.5;          '; 'f("1.5")' -> 'f("   ")'
    """
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith('//', i):
            j = text.find('\n', i)
            j = n if j < 0 else j
            out.append(' ' * (j - i))
            i = j
        elif text.startswith('/*', i):
            j = text.find('*/', i + 2)
            j = n if j < 0 else j + 2
            out.append(''.join(ch if ch == '\n' else ' ' for ch in text[i:j]))
            i = j
        elif c in '"\'':
            j = i + 1
            while j < n and text[j] != c and text[j] != '\n':
                j += 2 if text[j] == '\\' else 1
            out.append(c + ' ' * (min(j, n) - i - 1) + (c if j < n else ''))
            i = j + 1
        else:
            out.append(c)
            i += 1
    return ''.join(out)


def bare_literals(path, root):
    """'FILE:LINE: bare number N' for each unnamed floating-point literal in PATH."""
    with open(path, encoding='utf-8', errors='replace') as f:
        lines = code_only(f.read()).split('\n')
    found = []
    for k, line in enumerate(lines, 1):
        if NAMED_CONSTANT.match(line):
            continue
        for m in FLOAT_LITERAL.finditer(line):
            if m.group(0).rstrip('fFlL') not in NEUTRAL_LITERALS:
                found.append('%s:%d: bare number %s (name it in diagnose/policy.h)' %
                             (os.path.relpath(path, root), k, m.group(0)))
    return found


def scope_name(scope):
    """A ctags scope without its kind and anonymous namespaces.

    'class:perftracker::trace::internal::__anon456c8c260111::TraceScanner'
    -> 'perftracker::trace::internal::TraceScanner'
    """
    name = scope.split(':', 1)[1] if ':' in scope else scope
    return '::'.join(p for p in name.split('::') if not p.startswith('__anon'))


def class_sizes(tags):
    """{class: (lines, file, line)} from ctags lines of kinds c, s and f.

    A class's lines are its definition's plus those of its member functions defined outside it.
    """
    defs, members = {}, []
    for line in tags.splitlines():
        parts = line.split('\t')
        if len(parts) < 4:
            continue
        kind = parts[3]
        fields = dict(p.split(':', 1) for p in parts[4:] if ':' in p)
        if 'line' not in fields or 'end' not in fields:
            continue
        first, last = int(fields['line']), int(fields['end'])
        scope = scope_name(fields.get('scope', ''))
        if kind in ('class', 'struct'):
            name = scope + '::' + parts[0] if scope else parts[0]
            defs[name] = (parts[1], first, last)
        elif kind == 'function' and fields.get('scope', '').startswith(('class:', 'struct:')):
            members.append((scope, parts[1], first, last))
    sizes = {name: [last - first + 1, path, first] for name, (path, first, last) in defs.items()}
    for cls, path, first, last in members:
        d = defs.get(cls)
        if d is None or (d[0] == path and d[1] <= first <= d[2]):
            continue  # defined inside the class: counted with it
        sizes[cls][0] += last - first + 1
    return {k: tuple(v) for k, v in sizes.items()}


def sources(root, dirs, suffixes):
    """The files under ROOT's DIRS whose names end in SUFFIXES, sorted."""
    out = []
    for top in dirs:
        for dirpath, _, names in os.walk(os.path.join(root, top)):
            out.extend(os.path.join(dirpath, n) for n in names if n.endswith(suffixes))
    return sorted(out)


def python_problems(root, files):
    """The Python FILES over the same limits as the C++ (file, function, class lines), from
    their syntax trees: a function or class ends where its last statement does."""
    problems = []
    for path in files:
        with open(path, encoding='utf-8', errors='replace') as f:
            text = f.read()
        rel = os.path.relpath(path, root)
        n = text.count('\n')
        if n > MAX_FILE_LINES:
            problems.append('%s: %d lines (limit %d)' % (rel, n, MAX_FILE_LINES))
        try:
            tree = ast.parse(text, filename=rel)
        except SyntaxError as e:
            problems.append('%s:%s: does not parse: %s' % (rel, e.lineno, e.msg))
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                kind, limit = 'class', MAX_CLASS_LINES
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                kind, limit = 'function', MAX_FUNCTION_LINES
            else:
                continue
            length = node.end_lineno - node.lineno + 1
            if length > limit:
                problems.append('%s:%d: %s %s is %d lines (limit %d)' % (
                    rel, node.lineno, kind, node.name, length, limit))
    return problems


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(
        os.path.dirname(os.path.abspath(__file__)))
    # Debian's universal-ctags installs ctags-universal (and ctags as an alternative).
    ctags = shutil.which('ctags-universal') or shutil.which('ctags')
    if ctags is None:
        print('check_structure: ctags not found (Debian package universal-ctags)')
        return 2
    version = subprocess.run([ctags, '--version'], capture_output=True,
                             text=True).stdout
    if 'Universal Ctags' not in version:
        print('check_structure: %s is not Universal Ctags (no end: field)' % ctags)
        return 2
    files = sources(root, CXX_DIRS, SOURCE_SUFFIXES)
    problems = python_problems(root, sources(root, PYTHON_DIRS, ('.py',)))
    for path in files:
        with open(path, encoding='utf-8', errors='replace') as f:
            n = sum(1 for _ in f)
        if n > MAX_FILE_LINES:
            problems.append('%s: %d lines (limit %d)' %
                            (os.path.relpath(path, root), n, MAX_FILE_LINES))
        rel = os.path.relpath(path, root)
        if (os.path.dirname(rel) == POLICY_DIR and not rel.endswith('_test.cc') and
                os.path.basename(rel) not in POLICY_EXEMPT):
            problems.extend(bare_literals(path, root))
    out = subprocess.run(
        [ctags, '--languages=C++', '--map-C++=+.h', '--c++-kinds=f',
         '--fields=+ne', '-o', '-'] + files,
        capture_output=True, text=True, check=True).stdout
    for line in out.splitlines():
        parts = line.split('\t')
        if len(parts) < 4:
            continue
        fields = dict(p.split(':', 1) for p in parts[3:] if ':' in p)
        if 'line' not in fields or 'end' not in fields:
            continue
        length = int(fields['end']) - int(fields['line']) + 1
        if length > MAX_FUNCTION_LINES:
            scope = fields.get('class') or fields.get('struct') or ''
            name = parts[0] if not scope else scope.split('::')[-1] + '::' + parts[0]
            problems.append('%s:%s: %s is %d lines (limit %d)' % (
                os.path.relpath(parts[1], root), fields['line'], name, length,
                MAX_FUNCTION_LINES))
    tags = subprocess.run(
        [ctags, '--languages=C++', '--map-C++=+.h', '--c++-kinds=csf', '--fields=+neKZ', '-o',
         '-'] + [f for f in files if not f.endswith('_test.cc')],
        capture_output=True, text=True, check=True).stdout
    for name, (lines, path, first) in sorted(class_sizes(tags).items()):
        limit = MAX_CLASS_LINES
        if lines > limit:
            problems.append('%s:%d: class %s is %d lines with its members (limit %d)' % (
                os.path.relpath(path, root), first, name.split('::')[-1] if not
                name.endswith('::Impl') else '::'.join(name.split('::')[-2:]), lines, limit))
    for p in problems:
        print(p)
    print('check_structure: %d files, %d over a limit' % (len(files), len(problems)))
    return 1 if problems else 0


if __name__ == '__main__':
    sys.exit(main())
