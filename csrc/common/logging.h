#pragma once

#include <sstream>
#include <string>

namespace monarch {

enum class LogLevel : int { kError = 0, kWarn = 1, kInfo = 2, kDebug = 3 };

// Parsed once from MONARCH_LOG_LEVEL (ERROR, WARN, INFO, DEBUG; default WARN).
LogLevel logThreshold();

// Accumulates one log line and writes it to stderr on destruction.
class LogLine {
 public:
  LogLine(LogLevel level, const char* file, int line);
  ~LogLine();
  std::ostream& stream() {
    return stream_;
  }

 private:
  LogLevel level_;
  std::ostringstream stream_;
};

} // namespace monarch

// The one logging macro of the C++ code: MONARCH_LOG(kInfo) << "text";
#define MONARCH_LOG(level)                                    \
  if (::monarch::LogLevel::level > ::monarch::logThreshold()) \
    ;                                                         \
  else                                                        \
    ::monarch::LogLine(::monarch::LogLevel::level, __FILE__, __LINE__).stream()
