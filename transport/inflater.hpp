#pragma once

/// Decodes a gzip or deflate (zlib) encoded body piece by piece (zlib), for
/// a client that does not decode answers itself (beast_transport) when a
/// source's HEADERS asked for an encoding.

#include <functional>
#include <memory>
#include <string>
#include <string_view>

namespace pgw {

class inflater {
public:
  /// For Content-Encoding `encoding`; `supported()` is false for anything
  /// but gzip, x-gzip and deflate.
  explicit inflater(std::string_view encoding);

  ~inflater();

  inflater(const inflater&) = delete;
  inflater& operator=(const inflater&) = delete;

  bool supported() const {
    return state_ != nullptr;
  }

  enum class result { more, stopped, invalid };

  /// Decodes `n` encoded bytes and hands what they decode to to `sink` in
  /// pieces of at most 16 KiB (memory stays bounded whatever the ratio);
  /// `stopped` when the sink returned false, `invalid` when the bytes are
  /// not valid for the encoding.
  result feed(const char* data, size_t n,
              const std::function<bool(const char*, size_t)>& sink);

private:
  struct state;
  std::unique_ptr<state> state_;
};

} // namespace pgw
