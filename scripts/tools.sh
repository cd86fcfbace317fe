# Sourced by build.sh and test.sh: the build tools are Debian's, by absolute path.
# A machine may put other copies first on PATH (pyenv shims of PyPI's cmake and ninja, say);
# the build would then read CMake modules no Debian package holds, and a fresh machine that
# has only what scripts/deps.sh installs would build differently. scripts/check_deps.py fails
# such a build.
CMAKE=/usr/bin/cmake
CTEST=/usr/bin/ctest
NINJA=/usr/bin/ninja
# Every compile goes through ccache: a build folder made again at the same path (CI's fresh
# checkout) compiles only what changed since the last build there (unity batches hold absolute
# paths, so another folder's objects do not match). Debug line tables keep the path of the
# folder that compiled first (CCACHE_NOHASHDIR: the build folder is not part of the key).
CCACHE=/usr/bin/ccache
if [[ ! -x $CCACHE ]]; then
  echo "error: $CCACHE is missing: run scripts/deps.sh" >&2
  exit 1
fi
export CCACHE_NOHASHDIR=1

# A build folder configured by another cmake is configured afresh (its cache names that cmake,
# and every re-run would go back to it).
pt_configure() {
  local dir=$1
  shift
  if [[ -f "$dir/CMakeCache.txt" ]] && ! grep -qx "CMAKE_COMMAND:INTERNAL=$CMAKE" "$dir/CMakeCache.txt"; then
    echo "$dir was configured by another cmake: configuring it afresh with $CMAKE"
    rm -rf "$dir/CMakeCache.txt" "$dir/CMakeFiles"
  fi
  "$CMAKE" -S . -B "$dir" -G Ninja -DCMAKE_MAKE_PROGRAM="$NINJA" \
    -DCMAKE_C_COMPILER_LAUNCHER="$CCACHE" -DCMAKE_CXX_COMPILER_LAUNCHER="$CCACHE" "$@" >/dev/null
}
