// read_source_file: the one safe way rule text is read from a path.
#include "grammar/source_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

namespace vigil::grammar {

bool read_source_file(const std::string& path, std::string& text, std::string& error,
                      std::uint64_t max_bytes) {
  text.clear();
  // O_NONBLOCK: opening a FIFO for reading must not wait for a writer.
  int fd;
  do fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  while (fd < 0 && errno == EINTR);
  if (fd < 0) {
    error = std::strerror(errno);
    return false;
  }
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st{};
  if (::fstat(fd, &st) != 0) {
    error = std::strerror(errno);
    return false;
  }
  if (S_ISDIR(st.st_mode)) {
    error = "is a directory";
    return false;
  }
  if (!S_ISREG(st.st_mode)) {
    error = "is not a regular file (a device, FIFO or socket)";
    return false;
  }
  // /proc files report size 0: the cap is enforced on what is read, too.
  if (static_cast<std::uint64_t>(st.st_size) > max_bytes) {
    error = fmt::format("is larger than {} bytes", max_bytes);
    return false;
  }
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      error = std::strerror(errno);
      return false;
    }
    if (n == 0) break;
    if (text.size() + static_cast<std::size_t>(n) > max_bytes) {
      error = fmt::format("is larger than {} bytes", max_bytes);
      text.clear();
      return false;
    }
    text.append(buf, static_cast<std::size_t>(n));
  }
  for (std::size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c < 0x20 && c != '\t' && c != '\n' && c != '\r' && c != '\f') {
      error = fmt::format("is not rule text (binary data at byte {})", i);
      text.clear();
      return false;
    }
  }
  return true;
}

}  // namespace vigil::grammar
