// ClosestName / DidYouMean: typos of short names are caught, other words not.
#include "common/did_you_mean.h"

#include <gtest/gtest.h>

namespace ztune {
namespace {

const std::vector<std::string> kSamplers = {"grid_search", "choice",  "uniform", "quniform",
                                            "loguniform",  "randint", "normal"};

TEST(DidYouMeanTest, CaseUnderscoresAndDashesAreIgnored) {
  EXPECT_EQ(ClosestName("log_uniform", kSamplers), "loguniform");
  EXPECT_EQ(ClosestName("GridSearch", kSamplers), "grid_search");
  EXPECT_EQ(ClosestName("rand-int", kSamplers), "randint");
}

TEST(DidYouMeanTest, SmallEditsAreTyposLargeOnesAreNot) {
  EXPECT_EQ(ClosestName("unifrom", kSamplers), "uniform") << "a transposition";
  EXPECT_EQ(ClosestName("choise", kSamplers), "choice");
  EXPECT_EQ(ClosestName("normall", kSamplers), "normal");
  EXPECT_EQ(ClosestName("layers", kSamplers), std::nullopt);
  EXPECT_EQ(ClosestName("lr", kSamplers), std::nullopt);
  // Short words allow one edit only.
  const std::vector<std::string> commands = {"stop", "wait", "logs", "trial", "status"};
  EXPECT_EQ(ClosestName("wiat", commands), "wait");
  EXPECT_EQ(ClosestName("sotp", commands), "stop");
  EXPECT_EQ(ClosestName("xy", commands), std::nullopt);
  EXPECT_EQ(ClosestName("stauts", commands), "status");
}

TEST(DidYouMeanTest, ANameItselfOrNothingCloseGetsNoSuggestion) {
  EXPECT_EQ(ClosestName("uniform", kSamplers), std::nullopt);
  EXPECT_EQ(DidYouMean("uniform", kSamplers), "");
  EXPECT_EQ(DidYouMean("", kSamplers), "");
  EXPECT_EQ(DidYouMean(std::string(1000, 'u'), kSamplers), "");
  EXPECT_EQ(DidYouMean("unifrom", kSamplers), " (did you mean 'uniform'?)");
}

}  // namespace
}  // namespace ztune
