#include "common/logging.h"

#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <iostream>

namespace monarch {

namespace {

LogLevel parseLevel(const char* text) {
  if (text == nullptr) {
    return LogLevel::kWarn;
  }
  if (strcasecmp(text, "ERROR") == 0) {
    return LogLevel::kError;
  }
  if (strcasecmp(text, "INFO") == 0) {
    return LogLevel::kInfo;
  }
  if (strcasecmp(text, "DEBUG") == 0) {
    return LogLevel::kDebug;
  }
  return LogLevel::kWarn;
}

const char* levelName(LogLevel level) {
  switch (level) {
    case LogLevel::kError:
      return "ERROR";
    case LogLevel::kWarn:
      return "WARN";
    case LogLevel::kInfo:
      return "INFO";
    case LogLevel::kDebug:
      return "DEBUG";
  }
  return "?";
}

} // namespace

LogLevel logThreshold() {
  static const LogLevel threshold = parseLevel(std::getenv("MONARCH_LOG_LEVEL"));
  return threshold;
}

LogLine::LogLine(LogLevel level, const char* file, int line) : level_(level) {
  const char* base = std::strrchr(file, '/');
  stream_ << "[monarch " << levelName(level_) << " pid " << getpid() << " "
          << (base ? base + 1 : file) << ":" << line << "] ";
}

LogLine::~LogLine() {
  stream_ << '\n';
  std::cerr << stream_.str() << std::flush;
}

} // namespace monarch
