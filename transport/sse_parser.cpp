#include "transport/sse_parser.hpp"

namespace pgw {

namespace {

constexpr char bom[] = "\xEF\xBB\xBF";
constexpr int bom_size = 3;

} // namespace

sse_parser::sse_parser(size_t max_line) : max_line_(max_line) {
}

void sse_parser::feed(const char* data, size_t n, std::vector<sse_event>& out) {
  size_t i = 0;
  // -- byte order mark at the very start, possibly split across feeds -------
  while (bom_matched_ >= 0 && i < n) {
    if (data[i] == bom[bom_matched_]) {
      ++i;
      if (++bom_matched_ == bom_size)
        bom_matched_ = -1;
    } else {
      // Not a BOM after all: the bytes matched so far are ordinary text.
      partial_.append(bom, static_cast<size_t>(bom_matched_));
      bom_matched_ = -1;
    }
  }
  // -- lines -----------------------------------------------------------------
  while (i < n && !failed_) {
    char c = data[i];
    if (last_was_cr_) {
      last_was_cr_ = false;
      if (c == '\n') {
        // Second half of a CRLF, possibly at the start of a new feed.
        ++i;
        continue;
      }
    }
    if (c == '\r' || c == '\n') {
      last_was_cr_ = c == '\r';
      ++i;
      std::string text;
      text.swap(partial_);
      line(text, out);
      continue;
    }
    // Append everything up to the next line end in one go.
    size_t end = i;
    while (end < n && data[end] != '\r' && data[end] != '\n')
      ++end;
    partial_.append(data + i, end - i);
    i = end;
    if (partial_.size() > max_line_) {
      failed_ = true;
      partial_.clear();
      partial_.shrink_to_fit();
      current_ = sse_event{};
      has_data_ = false;
    }
  }
}

void sse_parser::finish(std::vector<sse_event>& out) {
  if (bom_matched_ > 0)
    partial_.append(bom, static_cast<size_t>(bom_matched_));
  bom_matched_ = -1;
  last_was_cr_ = false;
  if (failed_)
    return;
  if (!partial_.empty()) {
    std::string text;
    text.swap(partial_);
    line(text, out);
  }
  if (!failed_ && has_data_) {
    out.push_back(std::move(current_));
    current_ = sse_event{};
    has_data_ = false;
  }
}

void sse_parser::line(const std::string& text, std::vector<sse_event>& out) {
  if (failed_)
    return;
  if (text.empty()) {
    // Blank line: dispatch. An event without data is dropped, and its
    // `event:` name with it (as browsers do).
    if (has_data_)
      out.push_back(std::move(current_));
    current_ = sse_event{};
    has_data_ = false;
    return;
  }
  if (text[0] == ':') {
    ++comments_;
    return;
  }
  auto colon = text.find(':');
  std::string field;
  std::string value;
  if (colon == std::string::npos) {
    field = text;
  } else {
    field = text.substr(0, colon);
    auto start = colon + 1;
    if (start < text.size() && text[start] == ' ')
      ++start;
    value = text.substr(start);
  }
  if (field == "data") {
    if (has_data_)
      current_.data += '\n';
    current_.data += value;
    has_data_ = true;
    if (current_.data.size() > max_line_) {
      failed_ = true;
      current_ = sse_event{};
      has_data_ = false;
    }
  } else if (field == "event") {
    current_.event = std::move(value);
  }
  // id, retry and unknown fields are ignored.
}

} // namespace pgw
