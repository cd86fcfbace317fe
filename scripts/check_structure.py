#!/usr/bin/env python3
"""Checks the size limits that keep src/ changeable (issue 17).

No source file under src/ may exceed MAX_FILE_LINES lines and no function
MAX_FUNCTION_LINES lines; function extents come from Universal Ctags'
`end:` field. Prints every offender, one line each, and exits 1 if any.

Usage: scripts/check_structure.py [ROOT]   (ROOT defaults to the repo root)
"""
import os
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
