#include "config/file.hpp"

#include "messages/errors.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace pgw {

caf::expected<std::string> read_config_file(const std::string& path,
                                            const std::string& what,
                                            size_t max_bytes) {
  auto fail = [&](const std::string& problem) {
    return make_error(error_code::invalid_config,
                      fmt::format("{}: {}", what, problem));
  };
  // O_NONBLOCK: opening a FIFO with no writer must not hang.
  int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0)
    return fail(fmt::format("cannot be read ({})", std::strerror(errno)));
  struct closer {
    int fd;
    ~closer() {
      ::close(fd);
    }
  } close_on_exit{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0)
    return fail(fmt::format("cannot be read ({})", std::strerror(errno)));
  if (S_ISDIR(st.st_mode))
    return fail("is a directory");
  // /dev/null (under any name) reads as empty: `--env-file /dev/null` is
  // how a caller says "no file" (the fleet scenario's nodes do).
  struct stat null_st {};
  if (S_ISCHR(st.st_mode) && ::stat("/dev/null", &null_st) == 0
      && S_ISCHR(null_st.st_mode) && st.st_rdev == null_st.st_rdev)
    return std::string{};
  if (!S_ISREG(st.st_mode))
    return fail("is not a regular file (a FIFO, device or socket)");
  if (static_cast<uint64_t>(st.st_size) > max_bytes)
    return fail(fmt::format("is larger than {} bytes", max_bytes));
  return read_bounded(fd, what, max_bytes);
}

caf::expected<std::string> read_bounded(int fd, const std::string& what,
                                        size_t max_bytes) {
  std::string out;
  char buf[64 * 1024];
  // The size may change while reading (or is unknown: a pipe): never more
  // than max_bytes + 1, which is enough to say it is too large.
  while (out.size() <= max_bytes) {
    auto want = std::min(sizeof buf, max_bytes + 1 - out.size());
    auto n = ::read(fd, buf, want);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0)
      return make_error(error_code::invalid_config,
                        fmt::format("{}: read error ({})", what,
                                    std::strerror(errno)));
    if (n == 0)
      break;
    out.append(buf, static_cast<size_t>(n));
  }
  if (out.size() > max_bytes)
    return make_error(error_code::invalid_config,
                      fmt::format("{}: is larger than {} bytes", what,
                                  max_bytes));
  return out;
}

} // namespace pgw
