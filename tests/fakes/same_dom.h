// Equality of two DOMs down to their number types: nlohmann's == compares
// numbers across types (1u == 1.0), so it cannot tell whether a reader typed
// a number as nlohmann's parser does (tests/head/json_text_test.cc,
// tests/fuzz/fuzz_store_records.cc).
#pragma once

#include <cstddef>

#include "common/json.h"

namespace ztune::testing {

inline bool SameDom(const Json& a, const Json& b) {
  if (a.type() != b.type()) return false;
  if (a.is_object()) {
    if (a.size() != b.size()) return false;
    for (auto ia = a.begin(), ib = b.begin(); ia != a.end(); ++ia, ++ib) {
      if (ia.key() != ib.key() || !SameDom(*ia, *ib)) return false;
    }
    return true;
  }
  if (a.is_array()) {
    if (a.size() != b.size()) return false;
    for (size_t k = 0; k < a.size(); ++k) {
      if (!SameDom(a[k], b[k])) return false;
    }
    return true;
  }
  return a == b;
}

}  // namespace ztune::testing
