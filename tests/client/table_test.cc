#include "client/table.h"

#include <gtest/gtest.h>

#include "client/json_util.h"

namespace ztune::client {
namespace {

TEST(TableTest, AlignsColumns) {
  Table t({"Trial", "status", "loss"});
  t.AddRow({"e0001_00000", "RUNNING", "0.5"});
  t.AddRow({"e1", "PENDING"});
  EXPECT_EQ(t.ToString(),
            "Trial        status   loss\n"
            "-----------  -------  ----\n"
            "e0001_00000  RUNNING  0.5\n"
            "e1           PENDING\n");
}

TEST(TableTest, KeepsMultilineCellsOnOneLine) {
  Table t({"a", "b"});
  t.AddRow({"x\ny", "z"});
  EXPECT_EQ(t.ToString(), "a    b\n---  -\nx y  z\n");
}

TEST(FormatTest, NumbersAreCompact) {
  EXPECT_EQ(FormatNumber(0.00121), "0.00121");
  EXPECT_EQ(FormatNumber(3.0), "3");
  EXPECT_EQ(FormatNumber(123456.0), "1.235e+05");
  EXPECT_EQ(FormatNumber(0.123456), "0.1235");
  EXPECT_EQ(FormatAmount(3.0), "3");
  EXPECT_EQ(FormatAmount(0.5), "0.5");
  EXPECT_EQ(FormatAmount(17179869184.0), "17179869184");
  EXPECT_EQ(FormatCell(Json(7)), "7");
  EXPECT_EQ(FormatCell(Json(nullptr)), "-");
  EXPECT_EQ(FormatCell(Json("s")), "s");
  EXPECT_EQ(FormatCell(Json::array({1, 2})), "[1,2]");
  EXPECT_EQ(FormatCell(Json(true)), "true");
}

TEST(FlattenTest, JoinsNestedKeysWithSlash) {
  Json j{
      {"a", 1}, {"b", {{"c", 2}, {"d", {{"e", "x"}}}}}, {"l", {1, 2}}, {"empty", Json::object()}};
  auto flat = Flatten(j);
  ASSERT_EQ(flat.size(), 5u);
  EXPECT_EQ(flat["a"], 1);
  EXPECT_EQ(flat["b/c"], 2);
  EXPECT_EQ(flat["b/d/e"], "x");
  EXPECT_EQ(flat["l"], Json::array({1, 2}));
  EXPECT_EQ(flat["empty"], Json::object());
  EXPECT_TRUE(Flatten(Json::object()).empty());
  EXPECT_EQ(Flatten(Json(3)).at("value"), 3);
}

TEST(CsvTest, QuotesWhenNeeded) {
  EXPECT_EQ(CsvField("plain"), "plain");
  EXPECT_EQ(CsvField("a,b"), "\"a,b\"");
  EXPECT_EQ(CsvField("say \"hi\""), "\"say \"\"hi\"\"\"");
  EXPECT_EQ(CsvField("two\nlines"), "\"two\nlines\"");
  EXPECT_EQ(CsvField(" pad"), "\" pad\"");
  EXPECT_EQ(CsvLine({"a", "", "c,d"}), "a,,\"c,d\"\n");
  EXPECT_EQ(CsvValue(Json(0.1)), "0.1");
  EXPECT_EQ(CsvValue(Json(1.0 / 3.0)), "0.3333333333333333");
  EXPECT_EQ(CsvValue(Json(nullptr)), "");
  EXPECT_EQ(CsvValue(Json{{"k", 1}}), "{\"k\":1}");
}

TEST(JsonUtilTest, AccessorsTolerateWrongTypes) {
  Json j{{"s", "x"}, {"n", 2.5}, {"i", 7}, {"b", true}, {"o", {{"k", 1}}}};
  EXPECT_EQ(StringField(j, "s"), "x");
  EXPECT_EQ(StringField(j, "n", "fb"), "fb");
  EXPECT_EQ(NumberField(j, "i"), 7.0);
  EXPECT_FALSE(NumberField(j, "s").has_value());
  EXPECT_EQ(IntField(j, "missing", 3), 3);
  EXPECT_TRUE(BoolField(j, "b"));
  EXPECT_TRUE(ObjectField(j, "s").is_object());
  EXPECT_TRUE(ArrayField(j, "o").is_array());
  EXPECT_EQ(FindField(Json(5), "x"), nullptr);
  EXPECT_TRUE(FieldOrNull(Json::array(), "x").is_null());
  EXPECT_FALSE(ParseJson("{").ok());
  EXPECT_EQ(DumpJson(Json("\xff")), "\"\xef\xbf\xbd\"");
}

}  // namespace
}  // namespace ztune::client
