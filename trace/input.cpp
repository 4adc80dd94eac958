// Input: the peekable, close-on-exec byte source of the trace readers.
#include "trace/input.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <fmt/format.h>

namespace vigil::trace_io {

std::unique_ptr<Input> Input::open(const std::string& path, TraceError& error) {
  int fd = -1;
  std::string name = path;
  if (path == "-") {
    name = "<stdin>";
    fd = ::fcntl(STDIN_FILENO, F_DUPFD_CLOEXEC, 3);
  } else {
    // Blocks on a FIFO until a writer opens it, as `cat` would.
    do fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    while (fd < 0 && errno == EINTR);
  }
  if (fd < 0) {
    error = TraceError{name, 0, 0, fmt::format("cannot open: {}", std::strerror(errno))};
    return nullptr;
  }
  struct stat st{};
  if (::fstat(fd, &st) != 0) {
    error = TraceError{name, 0, 0, fmt::format("cannot open: {}", std::strerror(errno))};
    ::close(fd);
    return nullptr;
  }
  if (S_ISDIR(st.st_mode)) {
    error = TraceError{name, 0, 0, "is a directory"};
    ::close(fd);
    return nullptr;
  }
  return std::unique_ptr<Input>(new Input(fd, std::move(name), S_ISREG(st.st_mode)));
}

Input::~Input() {
  if (fd_ >= 0) ::close(fd_);
}

std::size_t Input::read_fd(char* dst, std::size_t n) {
  if (errno_ != 0 || n == 0) return 0;
  if (follow_ && !regular_) {
    // A followed pipe: only what is there now (a blocking read would stall
    // the watch loop until the writer writes again).
    pollfd p{fd_, POLLIN, 0};
    int r;
    do r = ::poll(&p, 1, 0);
    while (r < 0 && errno == EINTR);
    if (r <= 0) return 0;
  }
  for (;;) {
    const ssize_t got = ::read(fd_, dst, n);
    if (got >= 0) return static_cast<std::size_t>(got);
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
    errno_ = errno;
    return 0;
  }
}

std::size_t Input::read(char* dst, std::size_t n) {
  if (peeked_pos_ < peeked_.size()) {
    const std::size_t k = std::min(n, peeked_.size() - peeked_pos_);
    std::memcpy(dst, peeked_.data() + peeked_pos_, k);
    peeked_pos_ += k;
    if (peeked_pos_ == peeked_.size()) {
      peeked_.clear();
      peeked_pos_ = 0;
    }
    return k;
  }
  return read_fd(dst, n);
}

bool Input::peek_more(std::size_t limit) {
  if (peeked_pos_ > 0) {
    peeked_.erase(0, peeked_pos_);
    peeked_pos_ = 0;
  }
  if (peeked_.size() >= limit) return false;
  const std::size_t old = peeked_.size();
  peeked_.resize(limit);
  const std::size_t got = read_fd(peeked_.data() + old, limit - old);
  peeked_.resize(old + got);
  return got > 0;
}

bool Input::read_all(std::string& out, std::uint64_t limit, TraceError& error) {
  out.clear();
  constexpr std::size_t chunk = 1 << 16;
  for (;;) {
    const std::size_t old = out.size();
    out.resize(old + chunk);
    const std::size_t got = read(out.data() + old, chunk);
    out.resize(old + got);
    if (got == 0) break;
    if (out.size() > limit) {
      error = TraceError{name_, 0, limit,
                         fmt::format("file is larger than the limit of {} bytes", limit)};
      return false;
    }
  }
  if (failed()) {
    error = TraceError{name_, 0, out.size(), failure()};
    return false;
  }
  return true;
}

std::string Input::failure() const {
  return fmt::format("read error: {}", std::strerror(errno_));
}

std::uint64_t Input::size() const {
  if (!regular_) return 0;
  struct stat st{};
  if (::fstat(fd_, &st) != 0) return 0;
  return static_cast<std::uint64_t>(st.st_size);
}

}  // namespace vigil::trace_io
