#include "config/json_numbers.hpp"

#include <boost/json/basic_parser_impl.hpp>

#include <cmath>
#include <cstdint>
#include <vector>

namespace pgw {

namespace {

namespace json = boost::json;

/// Tracks where the parser is (object keys, array indices) and stops at
/// the first number it would not carry as written.
struct number_checker {
  static constexpr std::size_t max_array_size = -1;
  static constexpr std::size_t max_object_size = -1;
  static constexpr std::size_t max_string_size = -1;
  static constexpr std::size_t max_key_size = -1;

  struct frame {
    bool array = false;
    std::string key;  ///< in an object: the key of the value to come
    size_t index = 0; ///< in an array: the index of the value to come
  };
  std::vector<frame> frames;
  std::string key_part;
  std::string number_part;
  std::optional<std::string> found;

  std::string path() const {
    std::string out;
    for (auto& f : frames) {
      if (f.array) {
        out += "[" + std::to_string(f.index) + "]";
      } else {
        if (!out.empty())
          out += ".";
        out += f.key;
      }
    }
    return out;
  }

  /// A value ended: the next one in an array has the next index.
  bool value_done() {
    if (!frames.empty() && frames.back().array)
      ++frames.back().index;
    return true;
  }

  bool open(bool array) {
    frames.push_back({array, {}, 0});
    return true;
  }

  bool close() {
    frames.pop_back();
    return value_done();
  }

  bool on_document_begin(json::error_code&) {
    return true;
  }
  bool on_document_end(json::error_code&) {
    return true;
  }
  bool on_array_begin(json::error_code&) {
    return open(true);
  }
  bool on_array_end(std::size_t, json::error_code&) {
    return close();
  }
  bool on_object_begin(json::error_code&) {
    return open(false);
  }
  bool on_object_end(std::size_t, json::error_code&) {
    return close();
  }
  bool on_string_part(json::string_view, std::size_t, json::error_code&) {
    return true;
  }
  bool on_string(json::string_view, std::size_t, json::error_code&) {
    return value_done();
  }
  bool on_key_part(json::string_view s, std::size_t, json::error_code&) {
    key_part.append(s.data(), s.size());
    return true;
  }
  bool on_key(json::string_view s, std::size_t, json::error_code&) {
    key_part.append(s.data(), s.size());
    frames.back().key = std::move(key_part);
    key_part.clear();
    return true;
  }
  bool on_number_part(json::string_view s, json::error_code&) {
    number_part.append(s.data(), s.size());
    return true;
  }
  bool on_int64(int64_t, json::string_view, json::error_code&) {
    number_part.clear();
    return value_done();
  }
  bool on_uint64(uint64_t, json::string_view, json::error_code&) {
    number_part.clear();
    return value_done();
  }
  bool on_double(double d, json::string_view s, json::error_code& ec) {
    number_part.append(s.data(), s.size());
    // An integer literal read as a double: outside int64 and uint64.
    bool integer = number_part.find_first_of(".eE") == std::string::npos;
    number_part.clear();
    if (!integer && std::isfinite(d))
      return value_done();
    found = path() + ": number out of range";
    ec = json::error::extra_data; // stops the parse; the error is ours
    return false;
  }
  bool on_bool(bool, json::error_code&) {
    return value_done();
  }
  bool on_null(json::error_code&) {
    return value_done();
  }
  bool on_comment_part(json::string_view, json::error_code&) {
    return true;
  }
  bool on_comment(json::string_view, json::error_code&) {
    return true;
  }
};

} // namespace

std::optional<std::string> unheld_number(std::string_view text) {
  json::basic_parser<number_checker> p{json::parse_options{}};
  json::error_code ec;
  p.write_some(false, text.data(), text.size(), ec);
  return std::move(p.handler().found);
}

} // namespace pgw
