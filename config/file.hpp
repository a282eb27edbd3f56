#pragma once

/// Reading configuration files (env file, price table, providers table)
/// without trusting the path: only regular files, at most 1 MiB, never
/// blocking on a FIFO or reading a device without bound.

#include <caf/expected.hpp>

#include <cstddef>
#include <string>

namespace pgw {

/// The largest configuration file read.
constexpr size_t max_config_file_bytes = 1024 * 1024;

/// The whole content of `path`. An `invalid_config` error starting with
/// `what` ("env file x", "PGW_PRICING_PATH=x") when it cannot be opened, is
/// not a regular file (directory, FIFO, device, socket) or is larger than
/// `max_bytes`.
caf::expected<std::string> read_config_file(const std::string& path,
                                            const std::string& what,
                                            size_t max_bytes
                                            = max_config_file_bytes);

/// Everything `fd` gives until end of file (a pipe: until the writer closes
/// it), at most `max_bytes`. An `invalid_config` error starting with `what`
/// on a read error or when there is more.
caf::expected<std::string> read_bounded(int fd, const std::string& what,
                                        size_t max_bytes);

} // namespace pgw
