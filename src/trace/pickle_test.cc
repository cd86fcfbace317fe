#include "trace/pickle.h"

#include <gtest/gtest.h>

#include <string>

namespace perftracker::trace {
namespace {

using Type = PickleNode::Type;

std::string Bytes(const char* s, size_t n) { return std::string(s, n); }
#define PT_BYTES(lit) Bytes(lit, sizeof(lit) - 1)

// pickle.dumps(V, protocol=P) in CPython 3.11 of
// V = {"entries": [{"seq": 1, "sizes": [[33040]], "pg": ("0", "default_pg"), "ok": True,
//                   "t": None, "f": 1.5, "big": 1796331917087413857, "neg": -3, "name": "café"}],
//      "version": "2.10"}
const std::string kProtocol0 = PT_BYTES(
    "(dp0\x0aVentries\x0ap1\x0a(lp2\x0a(dp3\x0aVseq\x0ap4\x0aI1\x0asVsizes\x0ap5\x0a(lp6\x0a("
    "lp7\x0aI33040\x0a"
    "aasVpg\x0ap8\x0a(V0\x0ap9\x0aVdefault_"
    "pg\x0ap10\x0atp11\x0asVok\x0ap12\x0aI01\x0asVt\x0ap13\x0aNsVf\x0ap14\x0a"
    "F1.5\x0asVbig\x0ap15\x0aL1796331917087413857L\x0asVneg\x0ap16\x0aI-"
    "3\x0asVname\x0ap17\x0aVcaf\xe9\x0ap18\x0asasVversion\x0ap19\x0aV2.10\x0ap20\x0as.");
const std::string kProtocol2 = PT_BYTES(
    "\x80\x02}q\x00(X\x07\x00\x00\x00"
    "entriesq\x01]q\x02}q\x03(X\x03\x00\x00\x00seqq\x04K\x01X\x05\x00\x00\x00sizesq\x05]q\x06]"
    "q\x07M\x10\x81"
    "aaX\x02\x00\x00\x00pgq\x08X\x01\x00\x00\x00"
    "0q\x09X\x0a\x00\x00\x00"
    "default_pgq\x0a\x86q\x0bX\x02\x00\x00\x00okq\x0c\x88X\x01\x00\x00\x00tq\x0dNX\x01\x00\x00\x00"
    "fq\x0eG\x3f\xf8\x00\x00\x00\x00\x00\x00X\x03\x00\x00\x00"
    "bigq\x0f\x8a\x08"
    "a\x16\xb1x\x5c\xda\xed\x18X\x03\x00\x00\x00negq\x10J\xfd\xff\xff\xffX\x04\x00\x00\x00nameq\x11"
    "X\x05\x00\x00\x00"
    "caf\xc3\xa9q\x12uaX\x07\x00\x00\x00versionq\x13X\x04\x00\x00\x00"
    "2.10q\x14u.");
const std::string kProtocol4 = PT_BYTES(
    "\x80\x04\x95\x9a\x00\x00\x00\x00\x00\x00\x00}\x94(\x8c\x07"
    "entries\x94]\x94}\x94(\x8c\x03seq\x94K\x01\x8c\x05sizes\x94]\x94]\x94M\x10\x81"
    "aa\x8c\x02pg\x94\x8c\x01"
    "0\x94\x8c\x0a"
    "default_pg\x94\x86\x94\x8c\x02ok\x94\x88\x8c\x01t\x94N\x8c\x01"
    "f\x94G\x3f\xf8\x00\x00\x00\x00\x00\x00\x8c\x03"
    "big\x94\x8a\x08"
    "a\x16\xb1x\x5c\xda\xed\x18\x8c\x03neg\x94J\xfd\xff\xff\xff\x8c\x04name\x94\x8c\x05"
    "caf\xc3\xa9\x94ua\x8c\x07version\x94\x8c\x04"
    "2.10\x94u.");

void ExpectTheDump(const std::string& bytes) {
  auto p = ParsePickle(bytes, "dump");
  ASSERT_TRUE(p.ok()) << p.status().message();
  PickleValue root = p->root();
  ASSERT_TRUE(root.is_dict());
  EXPECT_EQ(root.get("version").str(), "2.10");
  PickleValue e = root.get("entries").at(0);
  ASSERT_TRUE(e.is_dict());
  EXPECT_EQ(e.get("seq").integer(), 1);
  EXPECT_EQ(e.get("sizes").at(0).at(0).integer(), 33040);
  EXPECT_TRUE(e.get("pg").is_sequence());
  EXPECT_EQ(e.get("pg").at(1).str(), "default_pg");
  EXPECT_EQ(e.get("ok").integer(), 1);
  EXPECT_TRUE(e.get("t").is_none());
  EXPECT_DOUBLE_EQ(e.get("f").number(), 1.5);
  EXPECT_EQ(e.get("big").integer(), 1796331917087413857);
  EXPECT_EQ(e.get("neg").integer(), -3);
  EXPECT_EQ(e.get("name").str(), "caf\xc3\xa9");
  // What is not there is None, never an error.
  EXPECT_TRUE(e.get("absent").is_none());
  EXPECT_TRUE(root.get("entries").at(5).is_none());
  EXPECT_TRUE(e.get("seq").get("x").is_none());
}

TEST(PickleTest, ReadsProtocol0) { ExpectTheDump(kProtocol0); }
TEST(PickleTest, ReadsProtocol2AsTorchWritesIt) { ExpectTheDump(kProtocol2); }
TEST(PickleTest, ReadsProtocol4WithFramesAndMemoize) { ExpectTheDump(kProtocol4); }

TEST(PickleTest, AMemoizedObjectIsStoredOnce) {
  // x = [1]; pickle.dumps([x, x], protocol=2)
  auto p = ParsePickle(PT_BYTES("\x80\x02]q\x00(]q\x01K\x01"
                                "ah\x01"
                                "e."),
                       "shared");
  ASSERT_TRUE(p.ok()) << p.status().message();
  EXPECT_EQ(p->root().length(), 2u);
  EXPECT_EQ(p->root().at(1).at(0).integer(), 1);
  EXPECT_EQ(p->size(), 4u);  // None, the outer list, x, 1
}

TEST(PickleTest, RefusesWhatNamesOrCallsPythonObjects) {
  // pickle.dumps(os.system) style: GLOBAL 'os system', then REDUCE.
  auto p = ParsePickle(PT_BYTES("\x80\x02"
                                "cos\nsystem\nq\x00."),
                       "evil.pkl");
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("evil.pkl"), std::string::npos);
  EXPECT_NE(p.status().message().find("GLOBAL at byte 2"), std::string::npos)
      << p.status().message();
  EXPECT_FALSE(ParsePickle(PT_BYTES("\x80\x04\x93."), "x").ok());  // STACK_GLOBAL
  EXPECT_FALSE(ParsePickle(PT_BYTES("NN\x85R."), "x").ok());       // REDUCE
}

TEST(PickleTest, RefusesBrokenInputWithOneLine) {
  for (const std::string& bad : {
           std::string(),            // empty
           PT_BYTES("\x80\x02}"),    // no STOP
           PT_BYTES("\x80\x02}}."),  // two values at STOP
           PT_BYTES("\x80\x02X\xff\xff\xff\x7f"
                    "a."),              // a string longer than the input
           PT_BYTES("\x80\x02h\x05."),  // memo never stored
           PT_BYTES("\x80\x02K\x01"
                    "a."),          // APPEND into an int
           PT_BYTES("\x80\x02e."),  // APPENDS without a MARK
           PT_BYTES("\x80\x02\x8a\x09\x01\x01\x01\x01\x01\x01\x01\x01\x01."),  // > 64 bits
           PT_BYTES("\x80\x09N."),                                             // protocol 9
           PT_BYTES("\xff"),                                                   // not an opcode
           PT_BYTES("(\x86."),  // a tuple that takes a MARK
       }) {
    auto p = ParsePickle(bad, "bad.pkl");
    ASSERT_FALSE(p.ok());
    EXPECT_EQ(p.status().message().find('\n'), std::string::npos);
  }
}

TEST(PickleTest, NegativeLong1AndSelfReference) {
  // LONG1 of -2 (one byte 0xfe); a list appended to itself (DUP) is read, not walked.
  auto p = ParsePickle(PT_BYTES("\x80\x02]q\x00h\x00"
                                "a."),
                       "self");
  ASSERT_TRUE(p.ok()) << p.status().message();
  EXPECT_EQ(p->root().at(0).at(0).type(), Type::kList);
  auto n = ParsePickle(PT_BYTES("\x80\x02\x8a\x01\xfe."), "neg");
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(n->root().integer(), -2);
}

TEST(PickleTest, TheStackIsBoundedWhateverTheFileRepeats) {
  // One None duplicated 5M times: 5 MB that would hold a 40 MB stack (64 MiB of them, 512 MB).
  std::string bytes = "\x80\x02N";
  bytes.append(5'000'000, '2');  // DUP
  bytes += ".";
  auto p = ParsePickle(bytes, "dups");
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("values on the stack"), std::string::npos)
      << p.status().message();
}

}  // namespace
}  // namespace perftracker::trace
