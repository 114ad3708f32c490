// StrongId: ids of different kinds do not mix, a std::string becomes one only
// explicitly, and an id reads as its text in keys, logs and JSON.
#include "common/ids.h"

#include <map>
#include <sstream>
#include <string>
#include <type_traits>
#include <unordered_set>

#include <gtest/gtest.h>

#include "common/json.h"

namespace ztune {
namespace {

using OtherId = StrongId<struct OtherIdTag>;

void TakesWorker(const WorkerId&) {}
template <class T>
constexpr bool kTakesWorker = std::is_invocable_v<decltype(&TakesWorker), const T&>;

TEST(IdsTest, KindsDoNotMixAndTextBecomesAnIdOnlyExplicitly) {
  static_assert(kTakesWorker<WorkerId>);
  static_assert(!kTakesWorker<OtherId>, "another kind of id is not a worker id");
  static_assert(!kTakesWorker<std::string>, "a std::string becomes an id only explicitly");
  static_assert(std::is_constructible_v<WorkerId, std::string>);
  static_assert(std::is_convertible_v<const char*, WorkerId>, "a literal names one kind");
  static_assert(std::is_convertible_v<WorkerId, const std::string&>, "an id reads as text");
}

TEST(IdsTest, AnIdComparesHashesAndReadsAsItsText) {
  const WorkerId a("w1");
  const WorkerId b = "w2";
  EXPECT_EQ(a, WorkerId("w1"));
  EXPECT_NE(a, b);
  EXPECT_LT(a, b);
  std::map<WorkerId, int> ordered{{b, 2}, {a, 1}};
  EXPECT_EQ(ordered.begin()->first, a);
  std::unordered_set<WorkerId> hashed{a, b, WorkerId("w1")};
  EXPECT_EQ(hashed.size(), 2u);
  EXPECT_EQ("worker " + a + "!", "worker w1!");
  EXPECT_EQ(std::string("[") + b + std::string("]"), "[w2]");
  EXPECT_EQ(fmt::format("{} and {:>3}", a, b), "w1 and  w2");
  std::ostringstream os;
  os << a;
  EXPECT_EQ(os.str(), "w1");
  const Json doc{{"worker_id", a}};
  EXPECT_EQ(doc.dump(), R"({"worker_id":"w1"})");
  const std::string& text = a;
  EXPECT_EQ(text, "w1");
  WorkerId c = a;
  c.clear();
  EXPECT_TRUE(c.empty());
  EXPECT_EQ(c, WorkerId());
}

}  // namespace
}  // namespace ztune
