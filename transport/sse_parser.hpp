#pragma once

/// A plain Server-Sent Events parser (the subset LLM APIs use), fed with the
/// bytes of an HTTP body as they arrive, in pieces of any size.

#include <cstddef>
#include <string>
#include <vector>

namespace pgw {

/// One dispatched SSE event.
struct sse_event {
  std::string event; ///< the `event:` field, empty when absent
  std::string data;  ///< `data:` lines joined with '\n'
};

/// Splits a byte stream into events. Lines end with "\n", "\r\n" or "\r";
/// an event is dispatched at a blank line; `:` lines are comments
/// (keep-alives) and counted; a field without a colon is a field name with an
/// empty value; one leading space after the colon is dropped; unknown fields
/// (`id:`, `retry:`, ...) are ignored. Lines split across `feed` calls are
/// joined. A UTF-8 byte order mark at the very start of the stream is
/// ignored. A line, or the data of one event, longer than `max_line` bytes
/// makes the parser fail (`failed()`), so a hostile upstream cannot grow
/// memory without bound.
class sse_parser {
public:
  explicit sse_parser(size_t max_line = 4 * 1024 * 1024);

  /// Consumes `n` bytes; appends each completed event to `out`.
  void feed(const char* data, size_t n, std::vector<sse_event>& out);

  /// At end of input: a pending event that has data but no terminating blank
  /// line is dispatched (upstreams often omit the last blank line).
  void finish(std::vector<sse_event>& out);

  /// Comment lines seen so far.
  size_t comments() const {
    return comments_;
  }

  /// True after a line exceeded `max_line`; further input is ignored.
  bool failed() const {
    return failed_;
  }

private:
  void line(const std::string& text, std::vector<sse_event>& out);

  size_t max_line_;
  std::string partial_; ///< bytes of the current, unfinished line
  /// Bytes of a possible byte order mark at the very start matched so far;
  /// -1 once the start of the stream is behind us.
  int bom_matched_ = 0;
  bool last_was_cr_ = false;
  sse_event current_;
  bool has_data_ = false;
  size_t comments_ = 0;
  bool failed_ = false;
};

} // namespace pgw
