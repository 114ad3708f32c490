// Base64 (RFC 4648, standard alphabet, padded): binary inside the JSON of the
// client protocol (checkpoint bytes). Plain functions; thread-safe.
#pragma once

#include <string>
#include <string_view>

#include "common/status.h"

namespace ztune {

std::string Base64Encode(std::string_view bytes);

// InvalidArgument for a length that is not a multiple of 4, a character
// outside the alphabet, or padding anywhere but at the end.
Result<std::string> Base64Decode(std::string_view text);

}  // namespace ztune
