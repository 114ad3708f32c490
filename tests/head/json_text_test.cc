// Reading JSON text without nlohmann's lexer (head/json_text.h): ReadDom
// builds the DOM nlohmann builds, types included, or leaves the text to it.
#include "head/json_text.h"

#include <cmath>
#include <optional>
#include <random>
#include <string>

#include <gtest/gtest.h>

#include "common/json.h"
#include "tests/fakes/same_dom.h"

namespace ztune::head::json_text {
namespace {

using ztune::testing::SameDom;

Json RandomValue(std::mt19937_64& rng, int depth) {
  switch (rng() % (depth > 3 ? 7 : 9)) {
    case 0: return nullptr;
    case 1: return rng() % 2 == 0;
    case 2: return static_cast<int64_t>(rng()) >> (rng() % 64);
    case 3: return rng() >> (rng() % 64);
    case 4:
      return std::ldexp(static_cast<double>(rng() % 100000) - 50000.0,
                        static_cast<int>(rng() % 200) - 100);
    case 5: {
      const char* texts[] = {"",
                             "plain",
                             "caf\u00e9",
                             "tab\tnew\nline",
                             "quote\" back\\",
                             "\u00f0\u009f\u0098\u0080",
                             "\x7f",
                             "slash/"};
      return texts[rng() % 8];
    }
    case 6: return "k" + std::to_string(rng() % 1000);
    case 7: {
      Json o = Json::object();
      for (uint64_t k = 0, n = rng() % 5; k < n; ++k) {
        o["key" + std::to_string(rng() % 6)] = RandomValue(rng, depth + 1);
      }
      return o;
    }
    default: {
      Json a = Json::array();
      for (uint64_t k = 0, n = rng() % 5; k < n; ++k) a.push_back(RandomValue(rng, depth + 1));
      return a;
    }
  }
}

void ExpectAsNlohmann(const std::string& text) {
  const Json expected = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  const std::optional<Json> got = ReadDom(text);
  if (expected.is_discarded()) {
    EXPECT_FALSE(got.has_value()) << "took what nlohmann refuses: " << text;
    return;
  }
  if (got) {
    EXPECT_TRUE(SameDom(*got, expected)) << text << "\n" << got->dump();
  }
}

TEST(ReadDomTest, BuildsTheDomNlohmannBuildsTypesIncluded) {
  std::mt19937_64 rng(5);
  int read = 0;
  for (int n = 0; n < 5000; ++n) {
    const Json v = RandomValue(rng, 0);
    for (const std::string& text : {v.dump(), v.dump(1), v.dump(-1, ' ', true)}) {
      ExpectAsNlohmann(text);
      read += ReadDom(text).has_value() ? 1 : 0;
    }
  }
  EXPECT_GT(read, 5000) << "most values are plain enough to be read";
}

TEST(ReadDomTest, ReadsNumbersAndKeysAsNlohmannDoes) {
  for (const char* text : {"0",
                           "-0",
                           "1",
                           "-1",
                           "18446744073709551615",
                           "18446744073709551616",
                           "-9223372036854775808",
                           "-9223372036854775809",
                           "1.5",
                           "-0.0",
                           "1e2",
                           "1E+2",
                           "2.5e-3",
                           "123456789012345678901234567890",
                           "1e299",
                           R"({"a":1,"a":2.5})",
                           R"({"a":{"b":[1,"x",null,true,false,{}]}})",
                           " [ 1 , 2 ] ",
                           "\"\\u00e9\"",
                           R"({"\u0061":1})",
                           "\"\xc3\xa9\""}) {
    SCOPED_TRACE(text);
    const std::optional<Json> got = ReadDom(text);
    ASSERT_TRUE(got.has_value());
    EXPECT_TRUE(SameDom(*got, Json::parse(text))) << got->dump();
  }
  EXPECT_TRUE(ReadDom("18446744073709551615")->is_number_unsigned());
  EXPECT_TRUE(ReadDom("-1")->is_number_integer());
  EXPECT_TRUE(ReadDom("18446744073709551616")->is_number_float());
  // Finite, but near enough to overflowing that nlohmann decides.
  EXPECT_FALSE(ReadDom("1e308").has_value());
}

TEST(ReadDomTest, RefusesWhatIsNotOneJsonValue) {
  for (const char* text : {"",         " ",     "{",    "[1,]", "{\"a\":1,}", "{\"a\" 1}",
                           "{a:1}",    "[1 2]", "01",   "1.",   ".5",         "+1",
                           "-",        "1e",    "tru",  "nul",  "\"open",     "\"tab\there\"",
                           "\"\xff\"", "1 2",   "{} x", "[]]",  "{\"a\":1}}", "1e400",
                           "-1e400"}) {
    EXPECT_FALSE(ReadDom(text).has_value()) << text;
  }
  // Deeper than kMaxDomDepth: nlohmann's to read.
  const std::string deep = std::string(kMaxDomDepth + 1, '[') + std::string(kMaxDomDepth + 1, ']');
  EXPECT_FALSE(ReadDom(deep).has_value());
  const std::string fits = std::string(kMaxDomDepth, '[') + std::string(kMaxDomDepth, ']');
  EXPECT_TRUE(ReadDom(fits).has_value());
}

TEST(ReadDomTest, WhatItTakesOfDamagedTextNlohmannReadsTheSame) {
  std::mt19937_64 rng(9);
  const std::string alphabet = "{}[]\":,\\ 0123456789.eE-+tfnul\x80\xc3\xa9x";
  for (int n = 0; n < 20000; ++n) {
    std::string text = RandomValue(rng, 0).dump();
    for (uint64_t k = 0, edits = 1 + rng() % 3; k < edits && !text.empty(); ++k) {
      const size_t at = rng() % text.size();
      switch (rng() % 3) {
        case 0: text[at] = alphabet[rng() % alphabet.size()]; break;
        case 1: text.erase(at, 1 + rng() % 3); break;
        case 2: text.insert(at, 1, alphabet[rng() % alphabet.size()]); break;
      }
    }
    ExpectAsNlohmann(text);
    if (HasFailure()) return;
  }
}

}  // namespace
}  // namespace ztune::head::json_text
