// safetensors writer/reader and atomic file output: round trips on exact bytes, and every corrupt
// input the reader must refuse with a message that names the file, the tensor and the mismatch.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include <unistd.h>

#include "io/atomic_file.h"
#include "io/safetensors.h"
#include "looplm/error.h"

namespace fs = std::filesystem;
using namespace looplm::io;

namespace {

class SafetensorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::path("/tmp/looplm_test_st_" + std::to_string(::getpid())) / info->name();
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    fs::remove_all(dir_);
    std::error_code ec;
    fs::remove(dir_.parent_path(), ec);  // only succeeds once the last test's folder is gone
  }
  std::string p(const std::string& name) const { return (dir_ / name).string(); }

  fs::path dir_;
};

uint64_t header_len(const std::string& bytes) {
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(static_cast<uint8_t>(bytes[i])) << (8 * i);
  return n;
}

std::string le64(uint64_t n) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>(n >> (8 * i));
  return s;
}

// A file built by hand: length + header + data (no padding, as another writer might produce).
std::string raw_file(const std::string& header, const std::string& data) { return le64(header.size()) + header + data; }

// Expect SafetensorsFile::open(path) to throw looplm::Error whose message contains every needle.
void expect_open_error(const std::string& path, const std::vector<std::string>& needles) {
  try {
    SafetensorsFile::open(path);
    FAIL() << "no error opening " << path;
  } catch (const looplm::Error& e) {
    std::string msg = e.what();
    EXPECT_EQ(e.exit_code(), 1);
    for (const auto& n : needles) EXPECT_NE(msg.find(n), std::string::npos) << "'" << n << "' not in: " << msg;
  }
}

void expect_bytes_error(const std::string& dir_path, const std::string& bytes,
                        const std::vector<std::string>& needles) {
  write_file_atomic(dir_path, bytes);
  expect_open_error(dir_path, needles);
}

template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const looplm::Error& e) {
    return e.what();
  }
  return "(no error)";
}

std::vector<std::string> dir_entries(const fs::path& d) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(d)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

// ---------------------------------------------------------------------------------------- round trip

TEST_F(SafetensorsTest, RoundTripSeveralDTypes) {
  std::vector<float> w(24 * 5);
  for (size_t i = 0; i < w.size(); ++i) w[i] = 0.25f * static_cast<float>(i) - 3.0f;
  std::vector<double> d = {1.5, -2.25, 1e-300};
  std::vector<int32_t> i32 = {7, -8, 2147483647};
  std::vector<int64_t> i64 = {-5, 6, 1LL << 40};
  std::vector<int64_t> i64_small = {-5, 6, 7};
  std::vector<uint8_t> u8 = {0, 1, 255};
  std::vector<uint16_t> u16 = {0, 65535};
  std::vector<uint16_t> bf16 = {0x3f80, 0xc040, 0x0000};  // 1.0, -3.0, 0.0
  float scalar = 42.5f;
  const std::string config_json = R"({"d_model": 24, "name": "a \"quoted\" name", "list": [1, 2]})";

  const std::string path = p("model.safetensors");
  write_safetensors(path,
                    {{"tok_emb.weight", DType::F32, {24, 5}, w.data()},
                     {"loop.alpha", DType::F32, {}, &scalar},  // 0-d
                     {"empty", DType::F32, {0, 5}, nullptr},
                     {"doubles", DType::F64, {3}, d.data()},
                     {"ints", DType::I32, {3}, i32.data()},
                     {"longs", DType::I64, {3}, i64.data()},
                     {"small_longs", DType::I64, {3}, i64_small.data()},
                     {"bytes", DType::U8, {3}, u8.data()},
                     {"shorts", DType::U16, {2}, u16.data()},
                     {"halves", DType::BF16, {3}, bf16.data()}},
                    {{"format", "pt"}, {"config", config_json}});

  // Byte layout: u64 LE header length, a multiple of 8, space padded so that the data section right
  // after starts at a multiple of 64 bytes (a cache line: mapped tensors are read in place).
  const std::string bytes = read_file(path);
  const uint64_t n = header_len(bytes);
  EXPECT_EQ(n % 8, 0u);
  EXPECT_EQ((8 + n) % 64, 0u);
  const std::string header = bytes.substr(8, n);
  EXPECT_EQ(header.front(), '{');
  const size_t close = header.find_last_of('}');
  EXPECT_EQ(header.find_first_not_of(' ', close + 1), std::string::npos) << "padding must be spaces";
  EXPECT_LT(header.size() - close - 1, 64u);
  const size_t data_bytes = w.size() * 4 + 4 + 0 + 3 * 8 + 3 * 4 + 3 * 8 + 3 * 8 + 3 + 2 * 2 + 3 * 2;
  EXPECT_EQ(bytes.size(), 8 + n + data_bytes);
  // Data in the given order: the first tensor's bytes start the data section.
  EXPECT_EQ(std::memcmp(bytes.data() + 8 + n, w.data(), w.size() * 4), 0);

  SafetensorsFile f = SafetensorsFile::open(path);
  EXPECT_EQ(f.metadata().at("format"), "pt");
  EXPECT_EQ(f.metadata().at("config"), config_json);
  EXPECT_EQ(f.metadata().size(), 2u);
  const std::vector<std::string> order = {"tok_emb.weight", "loop.alpha", "empty", "doubles", "ints",
                                          "longs", "small_longs", "bytes", "shorts", "halves"};
  EXPECT_EQ(f.names(), order);
  EXPECT_TRUE(f.has("ints"));
  EXPECT_FALSE(f.has("nope"));

  EXPECT_EQ(f.read_f32("tok_emb.weight", {24, 5}), w);
  EXPECT_EQ(f.read_f32("loop.alpha", {}), std::vector<float>{42.5f});
  const auto& sc = f.get("loop.alpha");
  EXPECT_TRUE(sc.shape.empty());
  EXPECT_EQ(sc.nbytes, 4u);
  const auto& em = f.get("empty");
  EXPECT_EQ(em.shape, (std::vector<int64_t>{0, 5}));
  EXPECT_EQ(em.nbytes, 0u);
  EXPECT_TRUE(f.read_f32("empty", {0, 5}).empty());
  EXPECT_EQ(f.read_f32("doubles", {3}), (std::vector<float>{1.5f, -2.25f, 0.0f}));
  EXPECT_EQ(f.read_f32("halves", {3}), (std::vector<float>{1.0f, -3.0f, 0.0f}));
  EXPECT_EQ(f.read_i32("ints"), i32);
  EXPECT_EQ(f.read_i32("small_longs"), (std::vector<int32_t>{-5, 6, 7}));
  EXPECT_NE(error_of([&] { f.read_i32("longs"); }).find("does not fit in int32"), std::string::npos);
  const auto& b = f.get("bytes");
  EXPECT_EQ(b.dtype, DType::U8);
  EXPECT_EQ(std::memcmp(b.data, u8.data(), 3), 0);
  const auto& s = f.get("shorts");
  EXPECT_EQ(s.dtype, DType::U16);
  EXPECT_EQ(std::memcmp(s.data, u16.data(), 4), 0);

  // Copies share the buffer; data stays valid after the original is gone.
  SafetensorsFile copy = f;
  { SafetensorsFile moved = std::move(f); }
  EXPECT_EQ(copy.read_f32("tok_emb.weight", {24, 5}), w);
}

// Bytes::release drops a mapped file's whole pages in the range from the resident set (an
// inference load copies a quantized checkpoint's matrices out, then releases them): what is read
// afterwards, inside the range and on the partial pages at its edges, is still the file.
TEST_F(SafetensorsTest, ReleasedPagesOfAMappedFileReadBackTheFile) {
  const size_t page = (size_t)::sysconf(_SC_PAGESIZE), n = 5 * page + 123;
  std::string content(n, '\0');
  for (size_t i = 0; i < n; ++i) content[i] = (char)(i * 131 + i / 7);
  write_file_atomic(p("bytes.bin"), content);
  for (auto bytes : {map_file(p("bytes.bin")), hold_bytes(content)}) {
    ASSERT_EQ(bytes->size(), n);
    ASSERT_EQ(std::memcmp(bytes->data(), content.data(), n), 0);
    bytes->release(bytes->data() + page / 2, 3 * page);  // 2 whole pages and 2 partial ones
    bytes->release(bytes->data() + 4 * page, n - 4 * page);
    EXPECT_EQ(std::memcmp(bytes->data(), content.data(), n), 0);
  }
}

TEST_F(SafetensorsTest, NoTensorsNoMetadata) {
  write_safetensors(p("e.safetensors"), {}, {});
  const std::string bytes = read_file(p("e.safetensors"));
  EXPECT_EQ(bytes, le64(56) + "{}" + std::string(54, ' '));  // 8 + 56: the data section 64-byte aligned
  SafetensorsFile f = SafetensorsFile::open(p("e.safetensors"));
  EXPECT_TRUE(f.names().empty());
  EXPECT_TRUE(f.metadata().empty());
}

TEST_F(SafetensorsTest, ReadsForeignUnpaddedFileAndF16) {
  // Written as another tool might: header not padded, keys not in data order.
  const uint16_t h[3] = {0x3c00, 0xc000, 0x0001};  // 1.0, -2.0, smallest subnormal
  std::string data(reinterpret_cast<const char*>(h), 6);
  const float one = 1.0f;
  data.append(reinterpret_cast<const char*>(&one), 4);
  write_file_atomic(p("x.safetensors"),
                    raw_file(R"({"b":{"dtype":"F32","shape":[1],"data_offsets":[6,10]},)"
                             R"("a":{"dtype":"F16","shape":[3],"data_offsets":[0,6]}})",
                             data));
  SafetensorsFile f = SafetensorsFile::open(p("x.safetensors"));
  EXPECT_EQ(f.names(), (std::vector<std::string>{"a", "b"}));
  auto a = f.read_f32("a", {3});
  EXPECT_EQ(a[0], 1.0f);
  EXPECT_EQ(a[1], -2.0f);
  EXPECT_EQ(a[2], std::ldexp(1.0f, -24));
  EXPECT_EQ(f.read_f32("b", {1}), std::vector<float>{1.0f});
}

// ---------------------------------------------------------------------------------- corrupt inputs

TEST_F(SafetensorsTest, MissingFile) { expect_open_error(p("nope.safetensors"), {"nope.safetensors", "No such file"}); }

TEST_F(SafetensorsTest, EmptyFile) { expect_bytes_error(p("m.safetensors"), "", {"m.safetensors", "0 bytes", "too short"}); }

TEST_F(SafetensorsTest, FourByteFile) {
  expect_bytes_error(p("m.safetensors"), "abcd", {"m.safetensors", "4 bytes", "too short"});
}

TEST_F(SafetensorsTest, HeaderLengthBeyondFile) {
  expect_bytes_error(p("m.safetensors"), le64(100) + "{}", {"m.safetensors", "header length 100", "past the end"});
}

TEST_F(SafetensorsTest, AbsurdHeaderLength) {
  expect_bytes_error(p("m.safetensors"), le64(~0ULL) + "{}", {"header length", "absurd"});
}

TEST_F(SafetensorsTest, TruncatedDataSection) {
  std::vector<float> a(6, 1.0f), b(24 * 24, 2.0f);
  const std::string path = p("model.safetensors");
  write_safetensors(path, {{"a", DType::F32, {6}, a.data()}, {"core.0.attn.q.weight", DType::F32, {24, 24}, b.data()}},
                    {{"format", "pt"}});
  std::string bytes = read_file(path);
  bytes.resize(bytes.size() - 3);
  expect_bytes_error(path, bytes,
                     {"model.safetensors", "tensor 'core.0.attn.q.weight'", "data_offsets [24, 2328]",
                      "past the data section", "2325 bytes"});
}

TEST_F(SafetensorsTest, InvalidJson) {
  expect_bytes_error(p("m.safetensors"), raw_file(R"({"a": {"dtype": "F32",)", ""),
                     {"m.safetensors", "header is not valid JSON"});
}

TEST_F(SafetensorsTest, HeaderNotAnObject) {
  expect_bytes_error(p("m.safetensors"), raw_file("[1, 2]  ", ""), {"m.safetensors", "array", "expected an object"});
}

TEST_F(SafetensorsTest, DuplicateTensorName) {
  expect_bytes_error(p("m.safetensors"),
                     raw_file(R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},)"
                              R"("a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}})",
                              "xy"),
                     {"m.safetensors", "'a' twice"});
}

// A header of 50,000 tensors (and a key twice deep inside one): read in data order, the repeat
// named. (Its time is linear now: 0.3 s where a parser that rescanned each object took 17-39 s;
// measured, not asserted.)
TEST_F(SafetensorsTest, ManyTensors) {
  const int n = 50000;
  std::string h = "{";
  for (int i = n - 1; i >= 0; --i)  // the header lists them backwards; the data order rules
    h += "\"t" + std::to_string(i) + "\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[" + std::to_string(i) + "," +
         std::to_string(i + 1) + "]},";
  h.back() = '}';
  write_file_atomic(p("many.safetensors"), raw_file(h, std::string(n, 'x')));
  auto f = looplm::io::SafetensorsFile::open(p("many.safetensors"));
  ASSERT_EQ(f.names().size(), (size_t)n);
  EXPECT_EQ(f.names()[0], "t0");
  EXPECT_EQ(f.names()[n - 1], "t" + std::to_string(n - 1));
  std::string dup = h;
  dup.insert(dup.find("\"dtype\""), "\"shape\":[2],");
  expect_bytes_error(p("dup.safetensors"), raw_file(dup, std::string(n, 'x')), {"dup.safetensors", "'shape' twice"});
}

TEST_F(SafetensorsTest, UnknownDType) {
  expect_bytes_error(p("m.safetensors"), raw_file(R"({"w":{"dtype":"F33","shape":[1],"data_offsets":[0,4]}})", "abcd"),
                     {"m.safetensors", "tensor 'w'", "unknown dtype 'F33'", "F32"});
}

TEST_F(SafetensorsTest, MissingField) {
  expect_bytes_error(p("m.safetensors"), raw_file(R"({"w":{"dtype":"F32","shape":[1]}})", "abcd"),
                     {"tensor 'w'", "no \"data_offsets\""});
}

TEST_F(SafetensorsTest, NegativeOrFractionalShape) {
  expect_bytes_error(p("m.safetensors"), raw_file(R"({"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", "abcd"),
                     {"tensor 'w'", "shape [-1]", "non-negative integers"});
  expect_bytes_error(p("m.safetensors"), raw_file(R"({"w":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}})", "abcd"),
                     {"tensor 'w'", "1.5", "non-negative integers"});
}

TEST_F(SafetensorsTest, OffsetsBeginAfterEnd) {
  expect_bytes_error(p("m.safetensors"), raw_file(R"({"w":{"dtype":"U8","shape":[0],"data_offsets":[4,0]}})", "abcd"),
                     {"tensor 'w'", "[4, 0]", "begin > end"});
}

TEST_F(SafetensorsTest, ShapeOffsetMismatch) {
  std::string data(400, '\0');
  expect_bytes_error(
      p("model.safetensors"),
      raw_file(R"({"core.0.attn.q.weight":{"dtype":"F32","shape":[24,24],"data_offsets":[0,400]}})", data),
      {"model.safetensors: tensor 'core.0.attn.q.weight': data_offsets [0, 400] hold 400 bytes but shape [24, 24] "
       "of F32 needs 2304"});
}

TEST_F(SafetensorsTest, OverlappingOffsets) {
  expect_bytes_error(p("m.safetensors"),
                     raw_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                              R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                              std::string(12, '\0')),
                     {"m.safetensors", "tensor 'b'", "[4, 12]", "overlap tensor 'a'", "[0, 8]"});
}

TEST_F(SafetensorsTest, MetadataValueNotString) {
  expect_bytes_error(p("m.safetensors"), raw_file(R"({"__metadata__":{"step":3}})", ""),
                     {"m.safetensors", "__metadata__ key 'step'", "number", "expected a string"});
}

TEST_F(SafetensorsTest, ReadF32WrongShapeAndDType) {
  std::vector<float> w(12, 0.5f);
  std::vector<int32_t> ids = {1, 2};
  const std::string path = p("model.safetensors");
  write_safetensors(path, {{"mlp.up.weight", DType::F32, {4, 3}, w.data()}, {"ids", DType::I32, {2}, ids.data()}}, {});
  SafetensorsFile f = SafetensorsFile::open(path);
  std::vector<float> out(12);
  std::string msg = error_of([&] { f.read_f32("mlp.up.weight", {3, 4}, out.data()); });
  EXPECT_NE(msg.find("model.safetensors: tensor 'mlp.up.weight': shape [4, 3] in the file, expected [3, 4]"),
            std::string::npos)
      << msg;
  msg = error_of([&] { f.read_f32("ids", {2}); });
  EXPECT_NE(msg.find("tensor 'ids': dtype I32, expected a float type"), std::string::npos) << msg;
  msg = error_of([&] { f.read_i32("mlp.up.weight"); });
  EXPECT_NE(msg.find("tensor 'mlp.up.weight': dtype F32, expected an integer type"), std::string::npos) << msg;
  msg = error_of([&] { f.get("lm_head.weight"); });
  EXPECT_NE(msg.find("no tensor named 'lm_head.weight' in "), std::string::npos) << msg;
  EXPECT_NE(msg.find("model.safetensors"), std::string::npos) << msg;
}

TEST_F(SafetensorsTest, WriterRejectsBadInput) {
  float x = 1.0f;
  EXPECT_NE(error_of([&] { write_safetensors(p("w.safetensors"), {{"a", DType::F32, {1}, &x}, {"a", DType::F32, {1}, &x}}, {}); })
                .find("tensor 'a' given twice"),
            std::string::npos);
  EXPECT_NE(error_of([&] { write_safetensors(p("w.safetensors"), {{"a", DType::F32, {-2}, &x}}, {}); }).find("bad shape [-2]"),
            std::string::npos);
  EXPECT_NE(error_of([&] { write_safetensors(p("w.safetensors"), {{"a", DType::F32, {3}, nullptr}}, {}); }).find("no data"),
            std::string::npos);
  EXPECT_FALSE(fs::exists(p("w.safetensors")));
  EXPECT_TRUE(dir_entries(dir_).empty()) << "no temp file left behind";
}

// ---------------------------------------------------------------------------------------- atomic file

TEST_F(SafetensorsTest, AtomicWriteReplacesAndLeavesNoTemp) {
  const std::string path = p("state.bin");
  write_file_atomic(path, std::string("old contents, longer than the new ones"));
  EXPECT_EQ(read_file(path), "old contents, longer than the new ones");
  write_file_atomic(path, std::string("new"));
  EXPECT_EQ(read_file(path), "new");
  EXPECT_EQ(dir_entries(dir_), std::vector<std::string>{"state.bin"});

  {
    AtomicWriter w(path);
    w.write("stream", 6);
    w.write("ed", 2);
    EXPECT_TRUE(fs::exists(w.temp_path()));
    EXPECT_EQ(read_file(path), "new") << "target untouched until commit";
    w.commit();
    EXPECT_EQ(w.bytes_written(), 8u);
  }
  EXPECT_EQ(read_file(path), "streamed");
  EXPECT_EQ(dir_entries(dir_), std::vector<std::string>{"state.bin"});

  {  // abandoned writer: the temp file goes, the target stays
    AtomicWriter w(path);
    w.write("partial", 7);
  }
  EXPECT_EQ(read_file(path), "streamed");
  EXPECT_EQ(dir_entries(dir_), std::vector<std::string>{"state.bin"});

  // Overwriting a safetensors file in place.
  float a = 1.0f, b = 2.0f;
  write_safetensors(p("m.safetensors"), {{"x", DType::F32, {1}, &a}}, {});
  write_safetensors(p("m.safetensors"), {{"x", DType::F32, {1}, &b}}, {});
  EXPECT_EQ(SafetensorsFile::open(p("m.safetensors")).read_f32("x", {1}), std::vector<float>{2.0f});
  EXPECT_EQ(dir_entries(dir_), (std::vector<std::string>{"m.safetensors", "state.bin"}));
}

TEST_F(SafetensorsTest, AtomicWriteErrorsNamePath) {
  std::string msg = error_of([&] { write_file_atomic(p("no/such/dir/f.bin"), std::string("x")); });
  EXPECT_NE(msg.find("no/such/dir/f.bin"), std::string::npos) << msg;
  EXPECT_NE(msg.find("No such file or directory"), std::string::npos) << msg;
  msg = error_of([&] { read_file(dir_.string()); });
  EXPECT_NE(msg.find(dir_.string()), std::string::npos) << msg;
  EXPECT_NE(msg.find("Is a directory"), std::string::npos) << msg;
}
