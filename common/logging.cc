#include "common/logging.h"

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <string_view>

#include "common/printable.h"

namespace ztune {
namespace {

class EscapingSink final : public spdlog::sinks::sink {
 public:
  explicit EscapingSink(std::shared_ptr<spdlog::sinks::sink> inner) : inner_(std::move(inner)) {}

  void log(const spdlog::details::log_msg& msg) override {
    const std::string_view text(msg.payload.data(), msg.payload.size());
    const std::string escaped = EscapeForLog(text);
    // Every escape lengthens the text: the same size means nothing changed.
    if (escaped.size() == text.size()) {
      inner_->log(msg);
      return;
    }
    spdlog::details::log_msg copy = msg;
    copy.payload = spdlog::string_view_t(escaped.data(), escaped.size());
    inner_->log(copy);
  }
  void flush() override { inner_->flush(); }
  void set_pattern(const std::string& pattern) override { inner_->set_pattern(pattern); }
  void set_formatter(std::unique_ptr<spdlog::formatter> formatter) override {
    inner_->set_formatter(std::move(formatter));
  }

 private:
  std::shared_ptr<spdlog::sinks::sink> inner_;
};

}  // namespace

std::shared_ptr<spdlog::sinks::sink> MakeEscapingSink(std::shared_ptr<spdlog::sinks::sink> inner) {
  return std::make_shared<EscapingSink>(std::move(inner));
}

Status InitLogging(const std::string& level, const std::string& name) {
  auto lvl = spdlog::level::from_str(level);
  if (lvl == spdlog::level::off && level != "off") {
    return Status::InvalidArgument("unknown log level '" + level +
                                   "' (trace, debug, info, warn, error, critical, off)");
  }
  auto logger = std::make_shared<spdlog::logger>(
      name, MakeEscapingSink(std::make_shared<spdlog::sinks::stderr_color_sink_mt>()));
  logger->set_pattern("%Y-%m-%d %H:%M:%S.%e %^%l%$ [%n] %v");
  logger->set_level(lvl);
  logger->flush_on(spdlog::level::warn);
  spdlog::set_default_logger(logger);
  return Status::Ok();
}

}  // namespace ztune
