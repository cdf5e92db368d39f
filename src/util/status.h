// Status and Expected<T>: the error channel for everything a user can cause
// (bad model, bad input, unsupported op). Assertions are kept for broken
// invariants only. Cheap when OK: an OK Status holds no allocation.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <variant>

namespace tessera {

enum class ErrorCode {
  kOk = 0,
  kInvalidModel,   // malformed or inconsistent model / artifact
  kInvalidInput,   // wrong input name, dtype, shape, missing input, bad flag
  kUnsupported,    // op / opset / domain / dtype not supported
  kIo,             // file cannot be read or written
  kRuntime,        // a kernel failed while running
  kInternal,       // a broken invariant that was caught
  kCancelled,      // the caller cancelled a run
};

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(ErrorCode code, std::string message)
      : rep_(std::make_shared<Rep>(Rep{code, std::move(message)})) {}

  static Status Ok() { return Status(); }
  bool ok() const { return rep_ == nullptr; }
  ErrorCode code() const { return rep_ ? rep_->code : ErrorCode::kOk; }
  const std::string& message() const;
  // Exit code for the CLI: 2 for anything the user can fix, 1 otherwise.
  int exit_code() const;
  // Prepends context ("node 'conv1' (Conv): ") to the message.
  Status with_context(const std::string& prefix) const;

 private:
  struct Rep {
    ErrorCode code;
    std::string message;
  };
  std::shared_ptr<const Rep> rep_;
};

inline Status InvalidModel(std::string m) { return Status(ErrorCode::kInvalidModel, std::move(m)); }
inline Status InvalidInput(std::string m) { return Status(ErrorCode::kInvalidInput, std::move(m)); }
inline Status Unsupported(std::string m) { return Status(ErrorCode::kUnsupported, std::move(m)); }
inline Status IoError(std::string m) { return Status(ErrorCode::kIo, std::move(m)); }
inline Status RuntimeError(std::string m) { return Status(ErrorCode::kRuntime, std::move(m)); }
inline Status InternalError(std::string m) { return Status(ErrorCode::kInternal, std::move(m)); }
inline Status Cancelled(std::string m) { return Status(ErrorCode::kCancelled, std::move(m)); }

template <class T>
class [[nodiscard]] Expected {
 public:
  Expected(T value) : v_(std::move(value)) {}  // NOLINT: implicit by design
  Expected(Status status) : v_(std::move(status)) {}  // NOLINT
  bool ok() const { return std::holds_alternative<T>(v_); }
  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<Status>(v_);
  }
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace tessera

#define TSR_CONCAT_INNER(a, b) a##b
#define TSR_CONCAT(a, b) TSR_CONCAT_INNER(a, b)

#define TSR_RETURN_IF_ERROR(expr)                   \
  do {                                              \
    ::tessera::Status _tsr_st = (expr);             \
    if (!_tsr_st.ok()) return _tsr_st;              \
  } while (0)

#define TSR_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                              \
  if (!tmp.ok()) return tmp.status();             \
  lhs = std::move(tmp).value()

#define TSR_ASSIGN_OR_RETURN(lhs, expr) \
  TSR_ASSIGN_OR_RETURN_IMPL(TSR_CONCAT(_tsr_exp_, __LINE__), lhs, expr)
