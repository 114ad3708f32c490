// PackWithAutoFields must give, byte for byte, what RawResult::FromJson gives
// for the DOM a worker used to build (the trainable's result with each field
// assigned, or set when absent): the head's ResultView and the stored JSON
// text depend on the bytes, not only on the values.
#include "common/protocol/result_fields.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "common/protocol/messages.h"

namespace ztune::protocol {
namespace {

// The reference: the assignments on a DOM.
Json WithFieldsByDom(Json result, const std::vector<AutoField>& fields) {
  for (const AutoField& f : fields) {
    const std::string key(f.key);
    if (f.rule == AutoField::Rule::kSetDefault && result.contains(key)) continue;
    std::visit(
        [&](const auto& v) {
          using T = std::decay_t<decltype(v)>;
          if constexpr (std::is_same_v<T, std::string_view>) {
            result[key] = std::string(v);
          } else {
            result[key] = v;
          }
        },
        f.value);
  }
  return result;
}

void ExpectSameBytes(const Json& result, const std::vector<AutoField>& fields) {
  const RawResult packed = PackWithAutoFields(result, fields);
  const RawResult expected = RawResult::FromJson(WithFieldsByDom(result, fields));
  EXPECT_EQ(packed, expected) << "result " << result.dump()
                              << "\n  packed:   " << packed.ToJson().dump()
                              << "\n  expected: " << expected.ToJson().dump();
}

// A worker's fields, in key order, as ActorRunner::FillResult makes them.
std::vector<AutoField> WorkerFields() {
  using R = AutoField::Rule;
  return {
      {"date", std::string_view("2026-12-06_13-30-00")},
      {"done", false, R::kSetDefault},
      {"hostname", std::string_view("host-1")},
      {"iterations_since_restore", int64_t{3}},
      {"neg_mean_loss", -0.25, R::kSetDefault},
      {"pid", int64_t{4242}},
      {"time_since_restore", 0.125},
      {"time_this_iter_s", 1.0},  // integral: packed as an integer, as a DOM's double is
      {"time_total_s", 3.5},
      {"timestamp", int64_t{1796563800}},
      {"timesteps_total", int64_t{15}, R::kSetDefault},
      {"training_iteration", int64_t{3}},
      {"trial_id", std::string_view("trial_00001")},
  };
}

TEST(ResultFieldsTest, AnEmptyResultGetsEveryField) {
  ExpectSameBytes(Json::object(), WorkerFields());
  const Json j = PackWithAutoFields(Json::object(), WorkerFields()).ToJson();
  EXPECT_EQ(j.size(), WorkerFields().size());
  EXPECT_EQ(j["done"], false);
  EXPECT_EQ(j["trial_id"], "trial_00001");
}

TEST(ResultFieldsTest, ReplacedFieldsWinAndDefaultsYieldToTheTrainable) {
  const Json result = {{"training_iteration", 99},  // replaced
                       {"trial_id", "mine"},        // replaced
                       {"done", "maybe"},           // kept (setdefault)
                       {"timesteps_total", 1000},   // kept
                       {"neg_mean_loss", Json()},   // kept, even null
                       {"mean_loss", 0.25}};
  ExpectSameBytes(result, WorkerFields());
  const Json j = PackWithAutoFields(result, WorkerFields()).ToJson();
  EXPECT_EQ(j["training_iteration"], 3);
  EXPECT_EQ(j["trial_id"], "trial_00001");
  EXPECT_EQ(j["done"], "maybe");
  EXPECT_EQ(j["timesteps_total"], 1000);
  EXPECT_TRUE(j["neg_mean_loss"].is_null());
  EXPECT_EQ(j["mean_loss"], 0.25);
}

TEST(ResultFieldsTest, KeysBeforeBetweenAndAfterTheFieldsKeepTheirPlaces) {
  const Json result = {{"", 1},
                       {"a", {{"nested", {1, 2.5, "x"}}}},
                       {"dat", true},
                       {"datex", nullptr},
                       {"time", "t"},
                       {"time_", -7},
                       {"timestamp2", 1e300},
                       {"trial_id_", "after"},
                       {"zzz", Json::array()},
                       {"\xc3\xa9t\xc3\xa9", "non-ASCII keys sort after ASCII"}};
  ExpectSameBytes(result, WorkerFields());
}

TEST(ResultFieldsTest, ValuesOfEveryKindPackAsTheirJson) {
  using R = AutoField::Rule;
  const double inf = std::numeric_limits<double>::infinity();
  const std::vector<AutoField> fields = {
      {"a_true", true},
      {"b_negative", int64_t{-5}},
      {"c_large", std::numeric_limits<int64_t>::max()},
      {"d_nan", std::nan("")},
      {"e_inf", -inf},
      {"f_two_to_64", 0x1p64},  // msgpack-c's edge: PackDouble writes it by hand
      {"g_integral", -3.0},
      {"h_empty", std::string_view()},
      {"i_default", 1.5, R::kSetDefault},
  };
  ExpectSameBytes(Json::object(), fields);
  ExpectSameBytes(Json{{"i_default", Json::object()}, {"b_negative", 1}}, fields);
  ExpectSameBytes(Json{{"x", Json::binary({1, 2, 3})}}, fields);
  ExpectSameBytes(Json{{"k", 1}}, {});
}

// Random results over a pool of keys that collide with the fields, prefix
// them and fall between them: every merge order, the same bytes.
TEST(ResultFieldsTest, RandomResultsPackAsTheirDom) {
  std::mt19937_64 rng(20261206);
  const std::vector<AutoField> all = WorkerFields();
  std::vector<std::string> pool;
  for (const AutoField& f : all) {
    pool.emplace_back(f.key);
    pool.push_back(std::string(f.key) + "_");
    pool.push_back(std::string(f.key.substr(0, f.key.size() - 1)));
  }
  pool.insert(pool.end(), {"", "0", "a", "loss", "mean_loss", "zz", "\x7f", "\xc3\xa9"});
  auto value = [&](int kind) -> Json {
    switch (kind) {
      case 0: return nullptr;
      case 1: return rng() % 2 == 0;
      case 2: return static_cast<int64_t>(rng()) >> (rng() % 64);
      case 3: return static_cast<uint64_t>(rng());
      case 4: return std::ldexp(static_cast<double>(rng() % 1000000) - 500000, rng() % 80 - 40);
      case 5: return std::string(rng() % 40, 'v');
      default: return Json{{"in", {1, "two", 3.0}}};
    }
  };
  for (int round = 0; round < 2000; ++round) {
    Json result = Json::object();
    const size_t keys = rng() % 12;
    for (size_t k = 0; k < keys; ++k) result[pool[rng() % pool.size()]] = value(rng() % 7);
    std::vector<AutoField> fields;
    for (const AutoField& f : all) {
      if (rng() % 4 != 0) fields.push_back(f);
    }
    for (AutoField& f : fields) {
      if (rng() % 3 == 0) {
        f.rule = f.rule == AutoField::Rule::kReplace ? AutoField::Rule::kSetDefault
                                                     : AutoField::Rule::kReplace;
      }
    }
    ExpectSameBytes(result, fields);
    if (testing::Test::HasFailure()) break;
  }
}

TEST(ResultFieldsDeathTest, FieldsOutOfOrderAreABug) {
  std::vector<AutoField> fields = WorkerFields();
  std::swap(fields[0], fields[1]);
  EXPECT_DEATH(PackWithAutoFields(Json::object(), fields),
               "");  // CHECK aborts (its message goes to the log)
  EXPECT_DEATH(PackWithAutoFields(Json::array(), {}), "");
}

}  // namespace
}  // namespace ztune::protocol
