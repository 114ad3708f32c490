// Process-wide logging setup (spdlog). Call once from main before any thread starts.
#pragma once

#include <spdlog/sinks/sink.h>

#include <memory>
#include <string>

#include "common/status.h"

namespace ztune {

// `level` is one of trace, debug, info, warn, error, critical, off. `name` tags
// every line (e.g. "head", "worker-a"). Every record's text passes through
// EscapeForLog (common/printable.h): names, errors and keys from peers may
// hold any bytes, and a log line must be one line of text.
Status InitLogging(const std::string& level, const std::string& name);

// A sink that forwards each record to `inner` with its text escaped by
// EscapeForLog. Thread-safe when `inner` is.
std::shared_ptr<spdlog::sinks::sink> MakeEscapingSink(std::shared_ptr<spdlog::sinks::sink> inner);

}  // namespace ztune
