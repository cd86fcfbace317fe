# Sourced by build.sh and test.sh: the build tools are Debian's, by absolute path.
# A machine may put other copies first on PATH (pyenv shims of PyPI's cmake and ninja, say);
# the build would then read CMake modules no Debian package holds, and a fresh machine that
# has only what scripts/deps.sh installs would build differently. scripts/check_deps.py fails
# such a build.
CMAKE=/usr/bin/cmake
CTEST=/usr/bin/ctest
NINJA=/usr/bin/ninja

# A build folder configured by another cmake is configured afresh (its cache names that cmake,
# and every re-run would go back to it).
pt_configure() {
  local dir=$1
  shift
  if [[ -f "$dir/CMakeCache.txt" ]] && ! grep -qx "CMAKE_COMMAND:INTERNAL=$CMAKE" "$dir/CMakeCache.txt"; then
    echo "$dir was configured by another cmake: configuring it afresh with $CMAKE"
    rm -rf "$dir/CMakeCache.txt" "$dir/CMakeFiles"
  fi
  "$CMAKE" -S . -B "$dir" -G Ninja -DCMAKE_MAKE_PROGRAM="$NINJA" "$@" >/dev/null
}
