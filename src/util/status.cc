#include "util/status.h"

namespace tessera {

const std::string& Status::message() const {
  static const std::string kEmpty;
  return rep_ ? rep_->message : kEmpty;
}

int Status::exit_code() const {
  switch (code()) {
    case ErrorCode::kOk:
      return 0;
    case ErrorCode::kInvalidModel:
    case ErrorCode::kInvalidInput:
    case ErrorCode::kUnsupported:
    case ErrorCode::kIo:
      return 2;
    default:
      return 1;
  }
}

Status Status::with_context(const std::string& prefix) const {
  if (ok()) return *this;
  return Status(code(), prefix + message());
}

}  // namespace tessera
