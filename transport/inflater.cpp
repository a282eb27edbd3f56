#include "transport/inflater.hpp"

#include <zlib.h>

namespace pgw {

struct inflater::state {
  z_stream z{};
  bool ended = false;
};

inflater::inflater(std::string_view encoding) {
  int window = 0;
  if (encoding == "gzip" || encoding == "x-gzip")
    window = 16 + MAX_WBITS;
  else if (encoding == "deflate")
    window = 32 + MAX_WBITS; // zlib header, detected
  else
    return;
  auto st = std::make_unique<state>();
  if (inflateInit2(&st->z, window) != Z_OK)
    return;
  state_ = std::move(st);
}

inflater::~inflater() {
  if (state_)
    inflateEnd(&state_->z);
}

inflater::result
inflater::feed(const char* data, size_t n,
               const std::function<bool(const char*, size_t)>& sink) {
  if (!state_)
    return result::invalid;
  auto& z = state_->z;
  if (state_->ended)
    return n == 0 ? result::more : result::invalid; // bytes after the end
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data));
  z.avail_in = static_cast<uInt>(n);
  char buf[16 * 1024];
  do {
    z.next_out = reinterpret_cast<Bytef*>(buf);
    z.avail_out = sizeof(buf);
    int rc = inflate(&z, Z_NO_FLUSH);
    if (rc != Z_OK && rc != Z_STREAM_END && rc != Z_BUF_ERROR)
      return result::invalid;
    size_t got = sizeof(buf) - z.avail_out;
    if (got > 0 && !sink(buf, got))
      return result::stopped;
    if (rc == Z_STREAM_END) {
      state_->ended = true;
      return z.avail_in == 0 ? result::more : result::invalid;
    }
    if (rc == Z_BUF_ERROR && got == 0)
      break; // needs more input
  } while (z.avail_in > 0 || z.avail_out == 0);
  return result::more;
}

} // namespace pgw
