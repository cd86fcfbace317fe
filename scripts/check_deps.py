#!/usr/bin/env python3
"""Proves that scripts/deps.sh installs everything the build and the tests use.

A fresh Debian 12 machine has its required packages and whatever deps.sh installs, nothing
more; the machine this runs on may have more (installed by hand, or by an earlier task). So this
check looks at what was actually used and asks Debian which package each piece came from:

  - every system header the compilers read (ninja's dependency log, `ninja -t deps`);
  - every library on a link line and the sanitizer/libFuzzer runtimes (build.ninja);
  - every CMake package file the configure read (build.ninja's re-run dependencies);
  - the programs the build ran (compilers, cmake, ninja, protoc, grpc_cpp_plugin, python);
  - every Python module the tests, the examples and the worker package import, resolved by both
    interpreters the tests use: Debian's /usr/bin/python3 (torch 1.13) and the virtual
    environment .venv that deps.sh makes (torch 2.13); and every program the tests run
    (subprocess calls).

Each file is mapped to its package with `dpkg -S`; the package must be listed in deps.sh, be
pulled in by one listed (`apt-cache depends --recurse` without recommends, as deps.sh installs),
or be part of every Debian system (Essential or Priority required). Anything else fails, naming
the package and what used it. A file that belongs to no package fails too: deps.sh cannot
install it. Files inside .venv come from pip, not Debian: each must belong to a distribution
that scripts/requirements.txt pins, at the pinned version. A module must resolve in at least
one of the two interpreters (the test drivers run on /usr/bin/python3, the torch jobs on
either).

  scripts/check_deps.py [--deps scripts/deps.sh] [--build build] [--build build-fuzz]
                        [--venv .venv] [--requirements scripts/requirements.txt]

Exit 0 when everything is covered, 1 naming what is not, 2 when it cannot check (no build).
"""
import argparse
import ast
import glob
import json
import os
import re
import shlex
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# dpkg -S takes many paths at once; this keeps each command line well under the kernel's limit.
DPKG_BATCH = 500
# Python files whose imports count: what the tests run, directly or in the ranks they launch.
PY_SOURCES = ["tests/*.py", "examples/*.py", "python/perftracker/*.py", "scripts/*.py"]
# CMake cache entries that name programs the build ran.
CACHE_PROGRAMS = ["CMAKE_CXX_COMPILER", "CMAKE_MAKE_PROGRAM", "CMAKE_COMMAND", "CMAKE_AR",
                  "CMAKE_RANLIB", "CMAKE_LINKER", "Protobuf_PROTOC_EXECUTABLE", "PT_GRPC_CPP_PLUGIN",
                  "Python3_EXECUTABLE", "PKG_CONFIG_EXECUTABLE", "PT_CLANGXX"]
# Run by the configure itself, whether or not the ninja files name them.
ALWAYS_RUN = {"CMAKE_CXX_COMPILER", "CMAKE_MAKE_PROGRAM", "CMAKE_COMMAND", "Python3_EXECUTABLE",
              "PKG_CONFIG_EXECUTABLE", "PT_CLANGXX"}


def fail_usage(msg):
    print(f"check_deps: {msg}", file=sys.stderr)
    sys.exit(2)


def listed_packages(deps_path):
    """The pkgs=( ... ) array of a deps script, read as text (running it would install)."""
    try:
        text = open(deps_path).read()
    except OSError as e:
        fail_usage(f"{deps_path}: {e.strerror}")
    m = re.search(r"^pkgs=\((.*?)\)", text, re.S | re.M)
    if not m:
        fail_usage(f"{deps_path}: no pkgs=( ... ) array")
    words = []
    for line in m.group(1).splitlines():
        words += line.split("#", 1)[0].split()
    return words


def closure(packages):
    """Every package that installing PACKAGES without recommends may bring, plus the packages
    every Debian system has."""
    out = subprocess.run(["apt-cache", "depends", "--recurse", "--no-recommends", "--no-suggests",
                          "--no-conflicts", "--no-breaks", "--no-replaces", "--no-enhances",
                          *packages], capture_output=True, text=True)
    if out.returncode != 0:
        fail_usage(f"apt-cache depends failed: {out.stderr.strip()}")
    names = set(packages)
    for line in out.stdout.splitlines():
        if line and not line[0].isspace():
            names.add(line.strip().strip("<>").split(":")[0])
    base = subprocess.run(["dpkg-query", "-W", "-f=${Package}\t${Essential}\t${Priority}\n"],
                          capture_output=True, text=True).stdout
    for line in base.splitlines():
        pkg, essential, priority = (line.split("\t") + ["", ""])[:3]
        if essential == "yes" or priority == "required":
            names.add(pkg)
    return names


def merged_usr_variants(path):
    """Debian 12 merges /bin, /lib, /sbin into /usr; dpkg records whichever path the package
    shipped, so a file may be known under either."""
    out = [path]
    real = os.path.realpath(path)
    if real != path:
        out.append(real)
    for p in list(out):
        for a, b in (("/usr/lib/", "/lib/"), ("/usr/bin/", "/bin/"), ("/usr/sbin/", "/sbin/")):
            if p.startswith(a):
                out.append(b + p[len(a):])
            elif p.startswith(b):
                out.append(a + p[len(b):])
    return list(dict.fromkeys(out))


def owners(paths):
    """{path: [packages]} for every path dpkg knows (under any merged-/usr spelling)."""
    variants = {}
    for p in paths:
        for v in merged_usr_variants(p):
            variants.setdefault(v, set()).add(p)
    found = {}
    keys = sorted(variants)
    for i in range(0, len(keys), DPKG_BATCH):
        out = subprocess.run(["dpkg", "-S", *keys[i:i + DPKG_BATCH]], capture_output=True,
                             text=True).stdout
        for line in out.splitlines():
            if line.startswith("diversion ") or ": " not in line:
                continue
            pkgs, path = line.split(": ", 1)
            for orig in variants.get(path.strip(), ()):
                found.setdefault(orig, set()).update(
                    x.strip().split(":")[0] for x in pkgs.split(","))
    return found


def is_ours(path, builds, venv=None):
    """A file of this checkout or its builds; the virtual environment's files are not ours
    (pip installed them)."""
    path = os.path.realpath(path)
    if venv and in_venv(path, venv):
        return False
    return path.startswith(ROOT + os.sep) or any(path.startswith(b + os.sep) for b in builds)


def in_venv(path, venv):
    return os.path.abspath(path).startswith(venv + os.sep)


def ninja_deps(build):
    """System headers the compilers read, from ninja's dependency log."""
    out = subprocess.run(["/usr/bin/ninja", "-C", build, "-t", "deps"], capture_output=True, text=True)
    if out.returncode != 0:
        fail_usage(f"{build}: ninja -t deps failed: {out.stderr.strip()}")
    return {line.strip() for line in out.stdout.splitlines()
            if line.startswith("    ") and line.strip().startswith("/")}


def cache(build):
    entries = {}
    try:
        for line in open(os.path.join(build, "CMakeCache.txt")):
            m = re.match(r"^([A-Za-z0-9_.\-]+):[A-Z]+=(.*)$", line.rstrip("\n"))
            if m:
                entries[m.group(1)] = m.group(2)
    except OSError:
        fail_usage(f"{build}: no CMakeCache.txt (build first: scripts/build.sh)")
    return entries


def library_dirs(compiler):
    out = subprocess.run([compiler, "-print-search-dirs"], capture_output=True, text=True).stdout
    for line in out.splitlines():
        if line.startswith("libraries: ="):
            return [os.path.normpath(d) for d in line[len("libraries: ="):].split(":") if d]
    return []


def link_inputs(build, compiler):
    """Libraries on the link lines (absolute paths and -lNAME resolved as the linker would)."""
    text = open(os.path.join(build, "build.ninja")).read()
    files, names = set(), set()
    for m in re.finditer(r"^\s+LINK_LIBRARIES = (.*)$", text, re.M):
        for tok in shlex.split(m.group(1)):
            for part in tok.split(","):  # -Wl,/path/lib.so
                if part.startswith("/") and os.path.exists(part):
                    files.add(part)
            if tok.startswith("-l") and len(tok) > 2:
                names.add(tok[2:])
    dirs = library_dirs(compiler)
    for n in sorted(names):
        for d in dirs:
            hit = next((os.path.join(d, f) for f in (f"lib{n}.so", f"lib{n}.a")
                        if os.path.exists(os.path.join(d, f))), None)
            if hit:
                files.add(hit)
                break
    return files


def cmake_inputs(build):
    """CMake package files the configure read (build.ninja's re-run rule lists them)."""
    text = open(os.path.join(build, "build.ninja")).read()
    files = set()
    for m in re.finditer(r"^build [^\n]*?: RERUN_CMAKE[^\n]*?\|(.*?)$", text, re.M | re.S):
        for tok in m.group(1).replace("$\n", " ").split():
            tok = tok.replace("$:", ":").replace("$ ", " ")
            if tok.startswith("/") and os.path.isfile(tok):
                files.add(tok)
    return files


def sanitizer_runtimes(build, compiler):
    """The fuzz build links libFuzzer and the sanitizers through -fsanitize, not by name."""
    text = open(os.path.join(build, "build.ninja")).read()
    if "-fsanitize=" not in text:
        return set()
    rt = subprocess.run([compiler, "-print-runtime-dir"], capture_output=True, text=True).stdout.strip()
    out = set()
    for kind in ("fuzzer", "asan", "ubsan_standalone"):
        if "fuzzer" in kind and "fuzzer" not in text:
            continue
        out.update(glob.glob(os.path.join(rt, f"libclang_rt.{kind}-*.a")))
    return out


def programs(build, entries):
    """The programs of the cache that the build runs. CMake finds some tools it never runs (with
    clang, CMAKE_LINKER may be ld.lld while the compiler driver links with ld), so a program
    counts only where the configure ran it or the ninja files name it."""
    ninja_text = ""
    for f in (os.path.join(build, "build.ninja"), os.path.join(build, "CMakeFiles", "rules.ninja")):
        if os.path.exists(f):
            ninja_text += open(f, errors="replace").read()
    out = set()
    for key in CACHE_PROGRAMS:
        v = entries.get(key, "")
        if not (v.startswith("/") and os.path.exists(v)):
            continue
        if key in ALWAYS_RUN or v in ninja_text or os.path.realpath(v) in ninja_text:
            out.add(os.path.realpath(v))
    out.update(ninja_programs(ninja_text))
    return out


def ninja_programs(ninja_text):
    """Absolute programs that begin a command of the ninja files: what the build runs, whether or
    not the cache names it (CMake writes the archiver its compiler detection found).
    '  command = $PRE_LINK && /usr/bin/cmake -E rm -f $TARGET_FILE && /usr/bin/llvm-ar qc ...'
    -> {'/usr/bin/cmake', '/usr/lib/llvm-14/bin/llvm-ar'}"""
    out = set()
    for line in ninja_text.splitlines():
        line = line.strip()
        if not line.startswith("command ="):
            continue
        for part in re.split(r"&&|\|\||;", line[len("command ="):]):
            words = part.split()
            if words and words[0].startswith("/") and os.path.isfile(words[0]):
                out.add(os.path.realpath(words[0]))
    return out


def python_imports():
    """{top-level module: first file that imports it}, and {program: file} for the programs the
    tests run through subprocess with a literal argument list."""
    mods, progs = {}, {}
    for pattern in PY_SOURCES:
        for path in sorted(glob.glob(os.path.join(ROOT, pattern))):
            rel = os.path.relpath(path, ROOT)
            try:
                tree = ast.parse(open(path).read(), path)
            except SyntaxError as e:
                fail_usage(f"{rel}: {e}")
            for node in ast.walk(tree):
                if isinstance(node, ast.Import):
                    for a in node.names:
                        mods.setdefault(a.name.split(".")[0], rel)
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    mods.setdefault(node.module.split(".")[0], rel)
                elif isinstance(node, ast.Call):
                    fn = node.func  # subprocess.run([...]) and its siblings
                    if not (isinstance(fn, ast.Attribute) and isinstance(fn.value, ast.Name)
                            and fn.value.id == "subprocess"
                            and fn.attr in ("run", "Popen", "check_call", "check_output", "call")):
                        continue
                    if node.args and isinstance(node.args[0], ast.List) and node.args[0].elts:
                        first = node.args[0].elts[0]
                        if isinstance(first, ast.Constant) and isinstance(first.value, str) \
                                and first.value and "/" not in first.value \
                                and not first.value.startswith("-"):
                            progs.setdefault(first.value, rel)
    return mods, progs


RESOLVE = r"""
import importlib.util, json, sys
sys.path[:0] = sys.argv[2].split(":")
out = {}
for name in sys.argv[1].split(","):
    try:
        spec = importlib.util.find_spec(name)
    except Exception as e:  # a broken package is as good as a missing one
        out[name] = "missing: " + repr(e)
        continue
    if spec is None:
        out[name] = "missing"
    elif spec.origin in (None, "built-in", "frozen"):
        # A namespace package has no origin: where it lies is its search path.
        locs = list(spec.submodule_search_locations or [])
        out[name] = locs[0] if locs else "builtin"
    else:
        out[name] = spec.origin
print(json.dumps(out))
"""

# {distribution: version} of what pip installed in a virtual environment, and {file: its
# distribution} for every file a distribution's RECORD lists.
DISTRIBUTIONS = r"""
import importlib.metadata as md, json, os
dists, files = {}, {}
for d in md.distributions():
    name = d.metadata["Name"]
    dists[name] = d.version
    for f in d.files or ():
        files[os.path.normpath(str(d.locate_file(f)))] = name
print(json.dumps({"dists": dists, "files": files}))
"""


def resolve_modules(python, mods, builds):
    local = [os.path.join(ROOT, d) for d in ("tests", "python", "scripts", "examples")] + \
        [os.path.join(b, "python") for b in builds]
    out = subprocess.run([python, "-c", RESOLVE, ",".join(sorted(mods)), ":".join(local)],
                         capture_output=True, text=True)
    if out.returncode != 0:
        fail_usage(f"{python} cannot resolve modules: {out.stderr.strip()[-500:]}")
    return json.loads(out.stdout)


def canonical(dist):
    """A distribution's name as pip compares them (PEP 503)."""
    return re.sub(r"[-_.]+", "-", dist).lower()


def pinned(req_path):
    """{canonical name: version} of a requirements file's `name==version` lines."""
    out = {}
    try:
        lines = open(req_path).read().splitlines()
    except OSError as e:
        fail_usage(f"{req_path}: {e.strerror}")
    for line in lines:
        line = line.split("#", 1)[0].strip()
        m = re.match(r"^([A-Za-z0-9][A-Za-z0-9._-]*)\s*==\s*([^\s;]+)", line)
        if m:
            out[canonical(m.group(1))] = m.group(2)
    return out


def venv_problems(venv, req_path, venv_files):
    """The files used from the virtual environment, each checked against the pinned set: its
    distribution must be pinned, at the installed version (a local label such as +cpu aside)."""
    python = os.path.join(venv, "bin", "python")
    out = subprocess.run([python, "-c", DISTRIBUTIONS], capture_output=True, text=True)
    if out.returncode != 0:
        fail_usage(f"{python} cannot list its distributions: {out.stderr.strip()[-500:]}")
    inst = json.loads(out.stdout)
    pins = pinned(req_path)
    # A package's folder (a module's search path) belongs to the distribution of its files.
    owner_of = dict(inst["files"])
    for f, d in inst["files"].items():
        owner_of.setdefault(os.path.dirname(f), d)
    problems, dists = [], set()
    for f, why in sorted(venv_files.items()):
        dist = owner_of.get(os.path.normpath(f))
        if dist is None:
            problems.append(f"{f} ({why}) belongs to no distribution pip installed in {shown(venv)}")
            continue
        version = inst["dists"].get(dist, "")
        want = pins.get(canonical(dist))
        if want is None:
            problems.append(f"distribution {dist} {version} is used from {shown(venv)} but "
                            f"{shown(req_path)} does not pin it: {f} ({why})")
        elif version.split("+")[0] != want.split("+")[0]:
            problems.append(f"{shown(venv)} has {dist} {version}, {shown(req_path)} pins {want}: "
                            f"{f} ({why}); run scripts/deps.sh")
        else:
            dists.add(dist)
    return problems, dists


def shown(path):
    rel = os.path.relpath(path, ROOT)
    return path if rel.startswith("..") else rel


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--deps", default=os.path.join(ROOT, "scripts", "deps.sh"))
    ap.add_argument("--build", action="append", help="build folder(s) (default: build, build-fuzz)")
    ap.add_argument("--python", default="/usr/bin/python3", help="the interpreter the tests use")
    ap.add_argument("--venv", default=os.path.join(ROOT, ".venv"),
                    help="the virtual environment deps.sh makes (torch 2.13)")
    ap.add_argument("--requirements", default=os.path.join(ROOT, "scripts", "requirements.txt"),
                    help="the packages pinned for the virtual environment")
    ap.add_argument("-v", "--verbose", action="store_true", help="list every package used")
    args = ap.parse_args()
    builds = [os.path.realpath(b) for b in (args.build or [os.path.join(ROOT, "build"),
                                                          os.path.join(ROOT, "build-fuzz")])]
    builds = [b for b in builds if os.path.isdir(b) or fail_usage(f"{b}: no such build folder")]

    listed = listed_packages(args.deps)
    allowed = closure(listed)

    used = {}  # file -> what used it
    venv_dir = os.path.abspath(args.venv)
    for b in builds:
        entries = cache(b)
        compiler = entries.get("CMAKE_CXX_COMPILER", "c++")
        name = os.path.basename(b)
        for f in ninja_deps(b):
            if not is_ours(f, builds, venv_dir):
                used.setdefault(os.path.normpath(f), f"{name}: a header the compiler read")
        for f in link_inputs(b, compiler):
            if not is_ours(f, builds, venv_dir):
                used.setdefault(os.path.normpath(f), f"{name}: a library on a link line")
        for f in cmake_inputs(b):
            if not is_ours(f, builds, venv_dir):
                used.setdefault(os.path.normpath(f), f"{name}: a file the configure read")
        for f in sanitizer_runtimes(b, compiler):
            used.setdefault(f, f"{name}: a sanitizer or libFuzzer runtime")
        for f in programs(b, entries):
            used.setdefault(f, f"{name}: a program the build ran")

    problems = []
    venv = os.path.abspath(args.venv)
    venv_python = os.path.join(venv, "bin", "python")
    if not os.path.exists(venv_python):
        fail_usage(f"{venv_python} not found (scripts/deps.sh makes {shown(venv)})")
    # The venv's interpreter is Debian's python3, run through a link.
    used.setdefault(os.path.realpath(venv_python), f"the interpreter of {shown(venv)}")
    mods, progs = python_imports()
    venv_files = {}
    resolved = [(py, resolve_modules(py, mods, builds)) for py in (args.python, venv_python)]
    for name in sorted(mods):
        origins = [(py, r[name]) for py, r in resolved]
        if all(o.startswith("missing") for _, o in origins):
            problems.append(f"python module '{name}' (imported by {mods[name]}) is not installed "
                            f"for {args.python} nor in {shown(venv)}")
            continue
        for py, origin in origins:
            why = f"python module '{name}', imported by {mods[name]}, for {shown(py)}"
            if origin.startswith("missing") or origin == "builtin" or is_ours(origin, builds, venv):
                continue
            if in_venv(origin, venv):
                venv_files.setdefault(os.path.normpath(origin), why)
            else:
                used.setdefault(origin, why)
    more, venv_dists = venv_problems(venv, args.requirements, venv_files)
    problems += more
    for prog, where in sorted(progs.items()):
        path = shutil.which(prog, path="/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
        if path is None:
            problems.append(f"program '{prog}' (run by {where}) is not installed")
        else:
            used.setdefault(os.path.realpath(path), f"program '{prog}', run by {where}")

    owned = owners(list(used))
    by_package = {}
    for f, why in sorted(used.items()):
        pkgs = owned.get(f)
        if not pkgs:
            problems.append(f"{f} ({why}) belongs to no Debian package: deps.sh cannot install it")
            continue
        if pkgs & allowed:
            for p in pkgs & allowed:
                by_package.setdefault(p, []).append(f)
            continue
        for p in sorted(pkgs):
            by_package.setdefault(("MISSING", p), []).append((f, why))
    for key, files in sorted(by_package.items(), key=lambda kv: str(kv[0])):
        if isinstance(key, tuple):
            f, why = files[0]
            more = f" and {len(files) - 1} more file(s)" if len(files) > 1 else ""
            problems.append(f"package {key[1]} is used but {shown(args.deps)} "
                            f"neither lists nor pulls it in: {f} ({why}){more}")
    if args.verbose:
        for p, files in sorted((k, v) for k, v in by_package.items() if not isinstance(k, tuple)):
            print(f"  {p}: {len(files)} file(s)")
    if problems:
        for p in problems:
            print(f"check_deps: {p}", file=sys.stderr)
        missing = sorted({k[1] for k in by_package if isinstance(k, tuple)})
        if missing:
            print(f"check_deps: add to {shown(args.deps)}: {' '.join(missing)}",
                  file=sys.stderr)
        return 1
    n_pkgs = len([k for k in by_package if not isinstance(k, tuple)])
    print(f"check_deps: {len(used)} files, programs and modules from {n_pkgs} packages, all "
          f"installed by {shown(args.deps)} ({len(listed)} listed) or the base "
          f"system; {len(venv_files)} modules from {len(venv_dists)} distributions in "
          f"{shown(venv)}, all pinned by {shown(args.requirements)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
