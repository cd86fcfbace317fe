// The opcodes of Python's pickle format, one table for the reader (trace/pickle.h) and the writer
// (trace/pickle_writer.h): an opcode's byte, its name and whether the reader takes it.
#ifndef PERFTRACKER_TRACE_PICKLE_OPCODES_H_
#define PERFTRACKER_TRACE_PICKLE_OPCODES_H_

#include <cstdint>

namespace perftracker::trace::internal {

// The opcodes of pickle protocols 0-5 (CPython's Lib/pickletools.py), one row each: its byte,
// its name, and whether this reader takes it. The ones it refuses name or call Python objects,
// or are out-of-band buffers no dump holds.
// clang-format off
#define PT_PICKLE_OPCODES(X)        \
  X('(', MARK, true)                \
  X('.', STOP, true)                \
  X('0', POP, true)                 \
  X('1', POP_MARK, true)            \
  X('2', DUP, true)                 \
  X('F', FLOAT, true)               \
  X('I', INT, true)                 \
  X('J', BININT, true)              \
  X('K', BININT1, true)             \
  X('L', LONG, true)                \
  X('M', BININT2, true)             \
  X('N', NONE, true)                \
  X('P', PERSID, false)             \
  X('Q', BINPERSID, false)          \
  X('R', REDUCE, false)             \
  X('S', STRING, false)             \
  X('T', BINSTRING, true)           \
  X('U', SHORT_BINSTRING, true)     \
  X('V', UNICODE, true)             \
  X('X', BINUNICODE, true)          \
  X('a', APPEND, true)              \
  X('b', BUILD, false)              \
  X('c', GLOBAL, false)             \
  X('d', DICT, true)                \
  X('}', EMPTY_DICT, true)          \
  X('e', APPENDS, true)             \
  X('g', GET, true)                 \
  X('h', BINGET, true)              \
  X('i', INST, false)               \
  X('j', LONG_BINGET, true)         \
  X('l', LIST, true)                \
  X(']', EMPTY_LIST, true)          \
  X('o', OBJ, false)                \
  X('p', PUT, true)                 \
  X('q', BINPUT, true)              \
  X('r', LONG_BINPUT, true)         \
  X('s', SETITEM, true)             \
  X('t', TUPLE, true)               \
  X(')', EMPTY_TUPLE, true)         \
  X('u', SETITEMS, true)            \
  X('G', BINFLOAT, true)            \
  X('\x80', PROTO, true)            \
  X('\x81', NEWOBJ, false)          \
  X('\x82', EXT1, false)            \
  X('\x83', EXT2, false)            \
  X('\x84', EXT4, false)            \
  X('\x85', TUPLE1, true)           \
  X('\x86', TUPLE2, true)           \
  X('\x87', TUPLE3, true)           \
  X('\x88', NEWTRUE, true)          \
  X('\x89', NEWFALSE, true)         \
  X('\x8a', LONG1, true)            \
  X('\x8b', LONG4, true)            \
  X('B', BINBYTES, true)            \
  X('C', SHORT_BINBYTES, true)      \
  X('\x8c', SHORT_BINUNICODE, true) \
  X('\x8d', BINUNICODE8, true)      \
  X('\x8e', BINBYTES8, true)        \
  X('\x8f', EMPTY_SET, true)        \
  X('\x90', ADDITEMS, true)         \
  X('\x91', FROZENSET, true)        \
  X('\x92', NEWOBJ_EX, false)       \
  X('\x93', STACK_GLOBAL, false)    \
  X('\x94', MEMOIZE, true)          \
  X('\x95', FRAME, true)            \
  X('\x96', BYTEARRAY8, true)       \
  X('\x97', NEXT_BUFFER, false)     \
  X('\x98', READONLY_BUFFER, false)
// clang-format on

enum class Op : uint8_t {
#define PT_OP_ENUM(byte, name, ok) k##name = static_cast<uint8_t>(byte),
  PT_PICKLE_OPCODES(PT_OP_ENUM)
#undef PT_OP_ENUM
};

}  // namespace perftracker::trace::internal

#endif  // PERFTRACKER_TRACE_PICKLE_OPCODES_H_
