#include "common/status.h"

#include <sstream>

namespace monarch {

namespace {

struct KindNames {
  const char* name;
  const char* pythonClass;
};

KindNames namesOf(ErrorKind kind) {
  switch (kind) {
#define MONARCH_ERROR_KIND_NAMES(kind, value, name, pythonClass) \
  case ErrorKind::kind:                                          \
    return {name, pythonClass};
    MONARCH_ERROR_KINDS(MONARCH_ERROR_KIND_NAMES)
#undef MONARCH_ERROR_KIND_NAMES
  }
  return {"unknown", "MonarchError"};
}

} // namespace

const char* errorKindName(ErrorKind kind) {
  return namesOf(kind).name;
}

const char* errorClassName(ErrorKind kind) {
  return namesOf(kind).pythonClass;
}

bool isFailureKind(uint8_t value) {
  switch (value) {
#define MONARCH_ERROR_KIND_VALUE(kind, value, name, pythonClass) case value:
    MONARCH_ERROR_KINDS(MONARCH_ERROR_KIND_VALUE)
#undef MONARCH_ERROR_KIND_VALUE
    return value != static_cast<uint8_t>(ErrorKind::kNone);
  }
  return false;
}

std::string formatRanks(const std::vector<int>& ranks) {
  std::ostringstream out;
  out << "[";
  for (size_t i = 0; i < ranks.size(); ++i) {
    out << (i ? ", " : "") << ranks[i];
  }
  out << "]";
  return out.str();
}

} // namespace monarch
