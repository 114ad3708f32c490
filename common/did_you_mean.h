// "Did you mean ...?" for names users type: spec keys, sampler names, CLI
// commands. Pure; thread-safe.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ztune {

// The candidate closest to `word`, if one is close enough to be a typo of it:
// equal once case, '_' and '-' are ignored ("log_uniform" for "loguniform"),
// or within an edit distance (insertions, deletions, substitutions,
// transpositions) of 1 for words of up to 4 characters and 2 above. On a tie
// the first candidate wins. nullopt when `word` is itself a candidate.
std::optional<std::string> ClosestName(std::string_view word,
                                       const std::vector<std::string>& candidates);

// " (did you mean 'X'?)" or "".
std::string DidYouMean(std::string_view word, const std::vector<std::string>& candidates);

}  // namespace ztune
