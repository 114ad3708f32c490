// CHECK: always-on invariant assertion. Logs critical, flushes the log and aborts.
// Never use on peer input (that gets a Status); only on our own invariants.
#pragma once

#include <cstdlib>

#include <spdlog/spdlog.h>

#define CHECK(cond)                                                                  \
  do {                                                                               \
    if (!(cond)) {                                                                   \
      spdlog::critical("CHECK failed: {} at {}:{}", #cond, __FILE__, __LINE__);     \
      spdlog::default_logger()->flush();                                             \
      std::abort();                                                                  \
    }                                                                                \
  } while (0)

#ifdef NDEBUG
#define DCHECK(cond) \
  do {               \
  } while (0)
#else
#define DCHECK(cond) CHECK(cond)
#endif
