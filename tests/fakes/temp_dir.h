// A unique, empty directory under /tmp for one test, removed with everything
// in it when the object dies. Test-thread only.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <string>
#include <system_error>

namespace ztune::testing {

class TempDir {
 public:
  // The directory is /tmp/<prefix>XXXXXX (mkdtemp adds letters and digits
  // only, so a Z85-safe prefix gives a Z85-safe path).
  explicit TempDir(const std::string& prefix = "ztune_test.") {
    std::string tmpl = "/tmp/" + prefix + "XXXXXX";
    const char* made = ::mkdtemp(tmpl.data());
    if (made == nullptr) std::abort();  // no /tmp: nothing sensible to test
    path_ = made;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  // A path inside the directory (which need not exist).
  std::string Sub(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

}  // namespace ztune::testing
