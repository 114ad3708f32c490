#include "common/did_you_mean.h"

#include <algorithm>
#include <cctype>
#include <cstddef>

namespace ztune {
namespace {

std::string Folded(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (c == '_' || c == '-') continue;
    out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  return out;
}

// Optimal string alignment distance (Damerau-Levenshtein without repeated
// edits of a substring), capped: names are short.
size_t EditDistance(std::string_view a, std::string_view b) {
  const size_t n = a.size(), m = b.size();
  std::vector<std::vector<size_t>> d(n + 1, std::vector<size_t>(m + 1, 0));
  for (size_t i = 0; i <= n; ++i) d[i][0] = i;
  for (size_t j = 0; j <= m; ++j) d[0][j] = j;
  for (size_t i = 1; i <= n; ++i) {
    for (size_t j = 1; j <= m; ++j) {
      const size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
      }
    }
  }
  return d[n][m];
}

}  // namespace

std::optional<std::string> ClosestName(std::string_view word,
                                       const std::vector<std::string>& candidates) {
  // Names are short; a long word is no typo of one (and bounds the table).
  if (word.empty() || word.size() > 64) return std::nullopt;
  if (std::find(candidates.begin(), candidates.end(), word) != candidates.end()) {
    return std::nullopt;
  }
  const std::string folded = Folded(word);
  for (const auto& c : candidates) {
    if (!folded.empty() && Folded(c) == folded) return c;
  }
  const size_t limit = word.size() <= 4 ? 1 : 2;
  std::optional<std::string> best;
  size_t best_distance = limit + 1;
  for (const auto& c : candidates) {
    if (c.size() > 64) continue;
    const size_t dist = EditDistance(folded, Folded(c));
    if (dist < best_distance) {
      best_distance = dist;
      best = c;
    }
  }
  return best;
}

std::string DidYouMean(std::string_view word, const std::vector<std::string>& candidates) {
  auto c = ClosestName(word, candidates);
  return c ? " (did you mean '" + *c + "'?)" : "";
}

}  // namespace ztune
