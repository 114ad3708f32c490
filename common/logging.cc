#include "common/logging.h"

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

namespace ztune {

Status InitLogging(const std::string& level, const std::string& name) {
  auto lvl = spdlog::level::from_str(level);
  if (lvl == spdlog::level::off && level != "off") {
    return Status::InvalidArgument("unknown log level '" + level +
                                   "' (trace, debug, info, warn, error, critical, off)");
  }
  auto logger = spdlog::stderr_color_mt(name);
  logger->set_pattern("%Y-%m-%d %H:%M:%S.%e %^%l%$ [%n] %v");
  logger->set_level(lvl);
  logger->flush_on(spdlog::level::warn);
  spdlog::set_default_logger(logger);
  return Status::Ok();
}

}  // namespace ztune
