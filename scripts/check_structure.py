#!/usr/bin/env python3
"""Checks the size limits that keep src/ changeable (issue 17).

No source file under src/ may exceed MAX_FILE_LINES lines and no function
MAX_FUNCTION_LINES lines; function extents come from Universal Ctags'
`end:` field. No bare floating-point number in src/diagnose/ outside
diagnose/policy.h (issue 27): a threshold is named there once, with why; a
file's own constant is a named `constexpr` with its comment. Prints every
offender, one line each, and exits 1 if any.

Usage: scripts/check_structure.py [ROOT]   (ROOT defaults to the repo root)
"""
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
SOURCE_SUFFIXES = ('.cc', '.h')
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
    src = os.path.join(root, 'src')
    files = []
    for dirpath, _, names in os.walk(src):
        for name in names:
            if name.endswith(SOURCE_SUFFIXES):
                files.append(os.path.join(dirpath, name))
    files.sort()
    problems = []
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
    for p in problems:
        print(p)
    print('check_structure: %d files, %d over a limit' % (len(files), len(problems)))
    return 1 if problems else 0


if __name__ == '__main__':
    sys.exit(main())
