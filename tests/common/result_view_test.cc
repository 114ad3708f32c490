// ResultView and the codec's normal form of results: what the head stores for
// a result must read back as JSON byte for byte what it stored when it built
// a DOM (decode to JSON, set trial_id and done, dump()), for any bytes a
// worker can send.
#include "common/protocol/result_view.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "common/protocol/codec.h"
#include "common/protocol/messages.h"

namespace ztune::protocol {
namespace {

// The head's decode of `wire` (one msgpack value, as a worker's bytes).
Result<RawResult> DecodeAtHead(const std::string& wire) {
  ResultBatch b;
  b.rid = 1;
  b.trial_id = "t";
  b.attempt = 1;
  b.results.push_back({1, RawResult(wire)});
  ASSIGN_OR_RETURN(Message m, Decode(Encode(b)));
  return std::get<ResultBatch>(m.body).results.at(0).result;
}

// What the head stored before results were kept as bytes.
std::string DomPath(const std::string& wire, const std::string& trial_id, bool done) {
  Json j = MsgpackToJson(wire).value();
  j["trial_id"] = trial_id;
  j["done"] = done;
  return j.dump();
}

void ExpectSameAsDomPath(const std::string& wire, const std::string& what) {
  auto raw = DecodeAtHead(wire);
  ASSERT_TRUE(raw.ok()) << what << ": " << raw.status().ToString();
  const ResultView view(raw->bytes);
  ASSERT_TRUE(view.is_object()) << what;
  for (bool done : {false, true}) {
    // What the store keeps reads back as the text schema 2 stored (the DOM
    // path's), and as the same values when read in place.
    const std::string dom = DomPath(wire, "e0001_00007", done);
    const std::string stored = view.StampedMsgpack("e0001_00007", done);
    const ResultView back(stored);
    ASSERT_TRUE(back.is_object()) << what;
    EXPECT_EQ(back.JsonText(), dom) << what;
    EXPECT_EQ(back.Find("trial_id")->str, "e0001_00007") << what;
    EXPECT_EQ(back.Find("done")->boolean, done) << what;
    EXPECT_EQ(back.StampedMsgpack("e0001_00007", done), stored) << what << ": stamped once";
  }
  EXPECT_EQ(view.JsonText(), MsgpackToJson(raw->bytes).value().dump()) << what;
}

// A random JSON value of the kinds results hold.
Json RandomJson(std::mt19937_64& rng, int depth) {
  std::uniform_int_distribution<int> kind(0, depth >= 4 ? 6 : 8);
  static const std::vector<std::string> kStrings = {
      "",         "loss",    "a\"b",      "back\\slash", "tab\there", "nl\nx", "\x01\x1f\x7f",
      "é ü 日本", "emoji 😀", "</script>", "ctl\b\f\r"};
  switch (kind(rng)) {
    case 0: return nullptr;
    case 1: return rng() % 2 == 0;
    case 2: return static_cast<int64_t>(rng() % 2000) - 1000;
    case 3: return static_cast<uint64_t>(rng());
    case 4: {
      static const std::vector<double> kDoubles = {0.5,
                                                   -0.0,
                                                   1e-300,
                                                   1.7976931348623157e308,
                                                   3.0,
                                                   1e21,
                                                   0.1 + 0.2,
                                                   -2.5e-7,
                                                   std::numeric_limits<double>::quiet_NaN(),
                                                   std::numeric_limits<double>::infinity()};
      if (rng() % 2 == 0) return kDoubles[rng() % kDoubles.size()];
      return std::uniform_real_distribution<double>(-1e6, 1e6)(rng);
    }
    case 5:
    case 6: return kStrings[rng() % kStrings.size()];
    case 7: {
      Json a = Json::array();
      const int n = static_cast<int>(rng() % 4);
      for (int k = 0; k < n; ++k) a.push_back(RandomJson(rng, depth + 1));
      return a;
    }
    default: {
      Json o = Json::object();
      const int n = static_cast<int>(rng() % 5);
      for (int k = 0; k < n; ++k) o[kStrings[rng() % kStrings.size()]] = RandomJson(rng, depth + 1);
      return o;
    }
  }
}

TEST(ResultViewTest, StoredBytesReadAsTheDomPathsTextForRandomResults) {
  std::mt19937_64 rng(20261203);
  for (int round = 0; round < 2000; ++round) {
    Json r = Json::object();
    r["training_iteration"] = round + 1;
    const int extra = static_cast<int>(rng() % 8);
    for (int k = 0; k < extra; ++k) r["m" + std::to_string(rng() % 20)] = RandomJson(rng, 1);
    if (round % 50 == 0) {  // wider than ResultView indexes
      for (int k = 0; k < 40; ++k) r["wide" + std::to_string(k)] = k;
    }
    if (rng() % 4 == 0) r["trial_id"] = "the worker's own";
    if (rng() % 4 == 0) r["done"] = rng() % 2 == 0;
    ExpectSameAsDomPath(JsonToMsgpack(r), r.dump());
  }
}

// msgpack written by hand: what no Json packs but a hostile or foreign worker
// may send.
std::string Str(std::string_view s) {
  std::string out(1, static_cast<char>(0xa0 | s.size()));
  return out + std::string(s);
}

TEST(ResultViewTest, StoredBytesReadAsTheDomPathsTextForHandWrittenBytes) {
  const std::string it = Str("training_iteration") + "\x01";
  struct Case {
    const char* what;
    std::string wire;
  };
  const std::vector<Case> cases = {
      {"repeated keys: the last wins", "\x83" + it + Str("a") + "\x01" + Str("a") + "\x02"},
      {"unsorted keys", "\x83" + Str("z") + "\x01" + it + Str("b") + "\xc3"},
      {"invalid UTF-8 keys that collide once replaced",
       "\x83" + it + Str("k\xff") + "\x01" + Str("k\xfe") + "\x02"},
      {"invalid UTF-8 in a value", "\x82" + it + Str("s") + Str("x\xc3")},
      {"a float32", "\x82" + it + Str("f") + std::string("\xca\x3f\xc0\x00\x00", 5)},
      {"an integral float64", "\x82" + it + Str("f") + std::string("\xcb\x40\x08\0\0\0\0\0\0", 9)},
      {"a positive int8 and a negative int16",
       "\x83" + it + Str("p") + "\xd0\x05" + Str("n") + std::string("\xd1\xff\x00", 3)},
      {"a uint64 above INT64_MAX", "\x82" + it + Str("u") + "\xcf\xff\xff\xff\xff\xff\xff\xff\xff"},
      {"binary", "\x82" + it + Str("b") + std::string("\xc4\x03\x00\x7f\xff", 5)},
      {"empty binary", "\x82" + it + Str("b") + std::string("\xc4\x00", 2)},
      {"nested map with repeats",
       "\x82" + it + Str("m") + "\x82" + Str("x") + "\x01" + Str("x") + "\xc0"},
      {"a done and trial_id of its own",
       "\x83" + it + Str("done") + "\xc3" + Str("trial_id") + "\x07"},
      {"map16 and str8", std::string("\xde\x00\x01\xd9\x12", 5) + "training_iteration\x01"},
  };
  for (const Case& c : cases) ExpectSameAsDomPath(c.wire, c.what);
}

TEST(ResultViewTest, AResultThatHoldsItsStampsIsStoredAsItCame) {
  Json r = {
      {"training_iteration", 3}, {"loss", 0.25}, {"trial_id", "e0001_00007"}, {"done", false}};
  const std::string wire = JsonToMsgpack(r);
  EXPECT_EQ(ResultView(wire).StampedMsgpack("e0001_00007", false), wire);
  // The head ended the trial: done changes, the rest keeps its bytes.
  const std::string ended = ResultView(wire).StampedMsgpack("e0001_00007", true);
  r["done"] = true;
  EXPECT_EQ(ended, JsonToMsgpack(r));
  // Neither field: both join in key order ("done" before "loss", "trial_id"
  // after "training_iteration").
  const std::string bare = JsonToMsgpack(Json{{"training_iteration", 3}, {"loss", 0.25}});
  EXPECT_EQ(ResultView(bare).StampedMsgpack("e0001_00007", true), JsonToMsgpack(r));
}

TEST(ResultViewTest, StampedBytesGrowTheirMapHeaderAndStringHeaders) {
  // 15 members + 2 stamps: a fixmap becomes a map16; a trial id of 40 bytes
  // takes a str8 header.
  Json r = Json::object();
  for (int k = 0; k < 15; ++k) r["k" + std::to_string(k)] = k;
  const std::string id(40, 'x');
  const std::string stored = ResultView(JsonToMsgpack(r)).StampedMsgpack(id, false);
  EXPECT_EQ(static_cast<unsigned char>(stored[0]), 0xde);
  r["trial_id"] = id;
  r["done"] = false;
  EXPECT_EQ(stored, JsonToMsgpack(r));
}

TEST(ResultViewTest, JsonTextOfValuesThatAreNotObjects) {
  for (const Json& j : {Json(nullptr), Json(3), Json(-2.5), Json("s\n"), Json::array({1, "a"})}) {
    const std::string wire = JsonToMsgpack(j);
    EXPECT_EQ(ResultView(wire).JsonText(), j.dump());
  }
}

TEST(ResultViewTest, FindReadsTheLastOfRepeatedKeysAndFlatKeys) {
  Json r{{"training_iteration", 3},
         {"eval", {{"acc", 0.5}, {"loss", -2}}},
         {"eval/acc", 0.9},
         {"big", std::numeric_limits<uint64_t>::max()},
         {"flag", true},
         {"name", "x"}};
  auto raw = DecodeAtHead(JsonToMsgpack(r));
  ASSERT_TRUE(raw.ok());
  const ResultView v(raw->bytes);
  ASSERT_TRUE(v.is_object());
  EXPECT_EQ(v.Find("training_iteration")->AsInt64(), 3);
  EXPECT_TRUE(v.Find("training_iteration")->is_integer());
  // The whole key first (FindFlatKey's rule), then the nested one.
  EXPECT_EQ(v.FindFlat("eval/acc")->AsDouble(), 0.9);
  EXPECT_EQ(v.FindFlat("eval/loss")->AsDouble(), -2);
  EXPECT_EQ(v.FindFlat("eval/loss")->kind, ResultView::Kind::kInteger);
  EXPECT_FALSE(v.FindFlat("eval/nope").has_value());
  EXPECT_FALSE(v.FindFlat("name/x").has_value()) << "a string is not an object";
  EXPECT_FALSE(v.Find("eval/loss").has_value()) << "Find is the top level only";
  EXPECT_EQ(v.Find("big")->AsInt64(), -1) << "as nlohmann's get<int64_t>";
  EXPECT_TRUE(v.Find("flag")->boolean);
  EXPECT_STREQ(v.Find("name")->TypeName(), "string");
  EXPECT_STREQ(v.Find("eval")->TypeName(), "object");

  const std::string repeated = "\x82" + Str("a") + "\x01" + Str("a") + "\x02";
  const ResultView r2(repeated);
  ASSERT_TRUE(r2.is_object());
  EXPECT_EQ(r2.Find("a")->AsInt64(), 2);
}

TEST(ResultViewTest, MalformedBytesMakeAnInvalidViewThatFindsNothing) {
  const std::vector<std::string> bad = {
      "",
      "\x82" + Str("a"),                       // an entry missing
      "\x81" + Str("a") + "\xcb\x40",          // a float cut short
      "\x81" + Str("a") + "\xd4\x01\x02",      // an ext type
      "\x81\x01\x02",                          // a key that is not a string
      "\x81" + Str("a") + "\xc1",              // the never-used byte
      "\x81" + Str("a") + "\x01\x02",          // trailing bytes
      std::string("\xdb\xff\xff\xff\xff", 5),  // a string longer than the bytes
  };
  for (const std::string& b : bad) {
    const ResultView v(b);
    EXPECT_FALSE(v.valid()) << testing::PrintToString(b);
    EXPECT_FALSE(v.Find("a").has_value());
    EXPECT_FALSE(v.FindFlat("a").has_value());
  }
  // Nesting: 64 levels below the top are readable, 65 are not.
  auto nested = [](int levels) {
    std::string s;
    for (int k = 0; k < levels; ++k) s += "\x91";  // an array of one
    return s + "\x01";
  };
  EXPECT_TRUE(ResultView(nested(64)).valid());
  EXPECT_FALSE(ResultView(nested(65)).valid());
  EXPECT_FALSE(ResultView("\x91\x01").is_object()) << "an array is valid but not an object";
}

TEST(ResultViewTest, TheHeadRefusesWhatTheDomPathRefused) {
  // The codec's normal form has the DOM path's limits and errors.
  std::string deep;
  for (int k = 0; k < 66; ++k) deep += "\x91";  // within the unpacker's own limit
  deep += "\x01";
  auto d = DecodeAtHead("\x82" + Str("training_iteration") + "\x01" + Str("d") + deep);
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("nested too deeply"), std::string::npos)
      << d.status().ToString();
  EXPECT_FALSE(DecodeAtHead("\x81" + Str("a") + "\xd4\x01\x02").ok());
  auto key = DecodeAtHead(std::string("\x81\x01\x02", 3));
  ASSERT_FALSE(key.ok());
  EXPECT_NE(key.status().message().find("map keys must be strings"), std::string::npos);
}

TEST(ResultViewTest, NormalFormReplacesInvalidUtf8AndKeepsFloatsFloats) {
  auto raw = DecodeAtHead("\x82" + Str("k\xff") + "\x01" + Str("f") +
                          std::string("\xcb\x40\x08\0\0\0\0\0\0", 9));
  ASSERT_TRUE(raw.ok());
  const Json j = raw->ToJson();
  EXPECT_TRUE(j.contains("k\xef\xbf\xbd")) << j.dump();
  EXPECT_TRUE(j["f"].is_number_float()) << "3.0 stays a float, as the DOM path kept it";
  EXPECT_EQ(ResultView(raw->bytes).Find("f")->kind, ResultView::Kind::kFloat);
}

}  // namespace
}  // namespace ztune::protocol
