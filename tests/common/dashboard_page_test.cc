// The compiled-in dashboard page and the data written into it.
#include "common/dashboard/dashboard_page.h"

#include <gtest/gtest.h>

#include <string>

namespace ztune::dashboard {
namespace {

TEST(DashboardPageTest, TemplateIsTheSourceFileWithItsPlaceholder) {
  const std::string_view page = PageTemplate();
  EXPECT_EQ(page.substr(0, 15), "<!DOCTYPE html>");
  EXPECT_NE(page.find("const ZTUNE_DATA = /*ZTUNE_DATA*/null;"), std::string_view::npos);
  EXPECT_EQ(page.substr(page.size() - 8), "</html>\n");
  // Self-contained: nothing is loaded from elsewhere.
  for (const char* remote : {"http://", "https://", "src=", "<link"}) {
    if (std::string(remote) == "http://") {
      // The SVG namespace is a name, not a download.
      std::string p(page);
      p.erase(p.find("http://www.w3.org/2000/svg"), 26);
      EXPECT_EQ(p.find(remote), std::string::npos) << remote;
    } else {
      EXPECT_EQ(page.find(remote), std::string_view::npos) << remote;
    }
  }
}

TEST(DashboardPageTest, DataCannotEndTheScript) {
  const Json data{{"trials", {{"e1", Json::array({{{"config", {{"note", "</script><b>x"}}}}})}}},
                  {"line",
                   "a\xE2\x80\xA8"
                   "b\xE2\x80\xA9"
                   "c"},
                  {"bad", std::string("\xff", 1)}};
  const std::string page = Page(data);
  EXPECT_EQ(page.find("/*ZTUNE_DATA*/"), std::string::npos);
  const size_t at = page.find("const ZTUNE_DATA = ");
  ASSERT_NE(at, std::string::npos);
  const std::string line = page.substr(at, page.find('\n', at) - at);
  EXPECT_NE(line.find(R"("note":"\u003c/script>\u003cb>x")"), std::string::npos) << line;
  EXPECT_NE(line.find(R"("line":"a\u2028b\u2029c")"), std::string::npos) << line;
  EXPECT_NE(line.find("\"bad\":\"\xEF\xBF\xBD\""), std::string::npos) << line;  // replaced
  // The one </script> of the page is its own, after the data.
  EXPECT_EQ(page.find("</script>"), page.rfind("</script>"));
  EXPECT_GT(page.find("</script>"), at);
}

}  // namespace
}  // namespace ztune::dashboard
