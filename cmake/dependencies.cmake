# Every library and tool the build needs, each found here and named with the Debian package that
# provides it. Nothing is dropped quietly: a missing part is collected by pt_need(), and
# pt_stop_if_missing() ends the configure with one FATAL_ERROR that names every missing package
# and the scripts/deps.sh line that installs it.
#
# PERFTRACKER_ONLINE=OFF is the one way to build less: the offline tool only (analyze, summarize,
# diagnose, diff, show, simulate), without the online path (server, agent, run: gRPC, protobuf,
# SQLite), the in-worker Python extension and the fuzzers' toolchain.

set(PT_MISSING "")

# Records PACKAGE as missing (for WHAT) unless the variable named by FOUND_VAR is true.
function(pt_need found_var package what)
  if(NOT ${found_var})
    set(PT_MISSING "${PT_MISSING};${package}|${what}" PARENT_SCOPE)
  endif()
endfunction()

# The line of scripts/deps.sh that lists PACKAGE, as "scripts/deps.sh:N: <line>", in OUT.
function(pt_deps_line package out)
  execute_process(
    COMMAND grep -n -F -w -- "${package}" "${CMAKE_SOURCE_DIR}/scripts/deps.sh"
    OUTPUT_VARIABLE line OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE rc)
  if(rc EQUAL 0)
    string(REGEX REPLACE "\n.*" "" line "${line}")  # the first such line
    string(REGEX REPLACE "^([0-9]+):[ \t]*" "scripts/deps.sh:\\1: " line "${line}")
    set(${out} "${line}" PARENT_SCOPE)
  else()
    set(${out} "not listed in scripts/deps.sh (a bug: add it there)" PARENT_SCOPE)
  endif()
endfunction()

function(pt_stop_if_missing)
  if(NOT PT_MISSING)
    return()
  endif()
  set(msg "perftracker: missing Debian packages (install them with scripts/deps.sh):\n")
  set(names "")
  foreach(entry ${PT_MISSING})
    string(REPLACE "|" ";" parts "${entry}")
    list(GET parts 0 package)
    list(GET parts 1 what)
    pt_deps_line(${package} line)
    string(APPEND msg "  ${package}: ${what}\n      ${line}\n")
    list(APPEND names ${package})
  endforeach()
  list(REMOVE_DUPLICATES names)
  list(JOIN names " " names)
  string(APPEND msg "  run: sudo apt-get install --no-install-recommends ${names}")
  if(PERFTRACKER_ONLINE)
    string(APPEND msg "\n  (or configure with -DPERFTRACKER_ONLINE=OFF for the offline tool only)")
  endif()
  message(FATAL_ERROR "${msg}")
endfunction()

# --- the offline core: always required ---
find_package(PkgConfig QUIET)
pt_need(PKG_CONFIG_FOUND pkg-config "pkg-config, to find libzstd and libisal")
find_package(simdjson QUIET)
pt_need(simdjson_FOUND libsimdjson-dev "simdjson, the trace reader's JSON parser")
find_package(fmt QUIET)
pt_need(fmt_FOUND libfmt-dev "fmt, text formatting")
find_package(CLI11 QUIET)
pt_need(CLI11_FOUND libcli11-dev "CLI11, the command line")
find_package(ZLIB QUIET)
pt_need(ZLIB_FOUND zlib1g-dev "zlib, v2 summaries and tests")
if(PKG_CONFIG_FOUND)
  pkg_check_modules(ZSTD QUIET IMPORTED_TARGET libzstd)
  pkg_check_modules(ISAL QUIET IMPORTED_TARGET libisal)  # igzip: gzip traces inflate 3x faster
endif()
pt_need(ZSTD_FOUND libzstd-dev "zstd, the summary format")
pt_need(ISAL_FOUND libisal-dev "ISA-L igzip, gzip trace input")
find_package(Threads QUIET)
pt_need(Threads_FOUND build-essential "POSIX threads")
find_package(GTest QUIET)
pt_need(GTest_FOUND libgtest-dev "GoogleTest, the unit tests")
if(GTest_FOUND AND NOT TARGET GTest::gmock)
  set(PT_GMOCK_FOUND OFF)
else()
  set(PT_GMOCK_FOUND ${GTest_FOUND})
endif()
pt_need(PT_GMOCK_FOUND libgmock-dev "GoogleMock, the unit tests")
find_package(benchmark QUIET)
pt_need(benchmark_FOUND libbenchmark-dev "Google Benchmark, bench/*_bench")
find_package(Python3 QUIET COMPONENTS Interpreter)
pt_need(Python3_Interpreter_FOUND python3-dev "python3, the integration tests")

# --- the whole product: online path, Python extension, fuzzers ---
if(PERFTRACKER_ONLINE)
  find_package(Python3 QUIET COMPONENTS Interpreter Development.Module)
  pt_need(Python3_Development.Module_FOUND python3-dev
          "CPython headers for the in-worker collector (perftracker._worker)")
  find_package(Protobuf QUIET)
  if(Protobuf_LIBRARIES AND Protobuf_INCLUDE_DIR)
    set(PT_PROTOBUF_LIB_FOUND ON)
  endif()
  pt_need(PT_PROTOBUF_LIB_FOUND libprotobuf-dev "protobuf headers and library, the online protocol")
  pt_need(Protobuf_PROTOC_EXECUTABLE protobuf-compiler "protoc, compiles proto/perftracker.proto")
  find_package(gRPC CONFIG QUIET)
  if(TARGET gRPC::grpc++)
    set(PT_GRPCPP_FOUND ON)
  endif()
  pt_need(PT_GRPCPP_FOUND libgrpc++-dev "gRPC C++, the server and agent")
  find_program(PT_GRPC_CPP_PLUGIN grpc_cpp_plugin)
  pt_need(PT_GRPC_CPP_PLUGIN protobuf-compiler-grpc "grpc_cpp_plugin, the gRPC service stubs")
  find_package(SQLite3 QUIET)
  pt_need(SQLite3_FOUND libsqlite3-dev "SQLite, the server's store")
  # The fuzzers build in their own folder with clang (scripts/test.sh); their toolchain is part of
  # the product's tests, so its absence is found here, not at test time.
  if(NOT PERFTRACKER_FUZZ)
    find_program(PT_CLANGXX clang++)
    pt_need(PT_CLANGXX clang "clang++, builds the libFuzzer targets")
    if(PT_CLANGXX)
      execute_process(COMMAND ${PT_CLANGXX} -print-runtime-dir
                      OUTPUT_VARIABLE pt_rt_dir OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
      if(EXISTS "${pt_rt_dir}/libclang_rt.fuzzer-${CMAKE_SYSTEM_PROCESSOR}.a")
        set(PT_LIBFUZZER_FOUND ON)
      endif()
      pt_need(PT_LIBFUZZER_FOUND libclang-rt-14-dev "libFuzzer and the sanitizer runtimes")
    endif()
  endif()
endif()

pt_stop_if_missing()
