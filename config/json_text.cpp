#include "config/json_text.hpp"

#include <boost/json.hpp>
#include <boost/json/basic_parser_impl.hpp>
#include <fmt/format.h>

#include <charconv>
#include <cmath>
#include <cstring>
#include <string_view>

namespace pgw {

namespace json = boost::json;

size_t plain_number_chars(double x, char* buf) {
  if (!std::isfinite(x)) {
    std::memcpy(buf, "null", 4);
    return 4;
  }
  // fmt's shortest round-trip text; rewrite an exponent as plain digits.
  char text[64];
  auto n = static_cast<size_t>(
    fmt::format_to_n(text, sizeof text, "{}", x).out - text);
  std::string_view t(text, n);
  auto e = t.find_first_of("eE");
  if (e == std::string_view::npos) {
    std::memcpy(buf, text, n);
    return n;
  }
  auto exp_text = t.substr(e + 1);
  if (!exp_text.empty() && exp_text[0] == '+')
    exp_text.remove_prefix(1);
  int exponent = 0;
  std::from_chars(exp_text.data(), exp_text.data() + exp_text.size(),
                  exponent);
  size_t len = 0;
  auto put = [&](char c) { buf[len++] = c; };
  auto mantissa = t.substr(0, e);
  if (!mantissa.empty() && mantissa[0] == '-') {
    put('-');
    mantissa.remove_prefix(1);
  }
  char digits[64];
  size_t nd = 0;
  for (char c : mantissa)
    if (c != '.')
      digits[nd++] = c;
  auto dot = mantissa.find('.');
  auto int_digits = static_cast<int>(dot == std::string_view::npos
                                       ? mantissa.size()
                                       : dot);
  auto point = int_digits + exponent; // digits before the decimal point
  if (point <= 0) {
    put('0');
    put('.');
    for (int i = 0; i < -point; ++i)
      put('0');
    for (size_t i = 0; i < nd; ++i)
      put(digits[i]);
  } else if (point >= static_cast<int>(nd)) {
    for (size_t i = 0; i < nd; ++i)
      put(digits[i]);
    for (auto i = static_cast<int>(nd); i < point; ++i)
      put('0');
  } else {
    for (size_t i = 0; i < nd; ++i) {
      if (static_cast<int>(i) == point)
        put('.');
      put(digits[i]);
    }
  }
  return len;
}

std::string plain_number(double x) {
  char buf[plain_number_max];
  return std::string(buf, plain_number_chars(x, buf));
}

namespace {

void write(std::string& out, const json::value& v) {
  switch (v.kind()) {
    case json::kind::double_:
      out += plain_number(v.get_double());
      return;
    case json::kind::object: {
      out += '{';
      bool first = true;
      for (auto& [key, item] : v.get_object()) {
        if (!first)
          out += ',';
        first = false;
        out += json::serialize(json::string(key));
        out += ':';
        write(out, item);
      }
      out += '}';
      return;
    }
    case json::kind::array: {
      out += '[';
      bool first = true;
      for (auto& item : v.get_array()) {
        if (!first)
          out += ',';
        first = false;
        write(out, item);
      }
      out += ']';
      return;
    }
    default:
      out += json::serialize(v);
  }
}

/// Boost.JSON's own value-building handler (json::parser's), but a double
/// is converted from its text by std::from_chars, which rounds correctly.
struct precise_handler {
  static constexpr size_t max_object_size = json::object::max_size();
  static constexpr size_t max_array_size = json::array::max_size();
  static constexpr size_t max_key_size = json::string::max_size();
  static constexpr size_t max_string_size = json::string::max_size();

  json::value_stack st;
  std::string number; ///< a number's text read so far (split writes)

  precise_handler(unsigned char* temp, size_t size) : st({}, temp, size) {}

  bool on_document_begin(json::error_code&) { return true; }
  bool on_document_end(json::error_code&) { return true; }
  bool on_object_begin(json::error_code&) { return true; }
  bool on_object_end(size_t n, json::error_code&) {
    st.push_object(n);
    return true;
  }
  bool on_array_begin(json::error_code&) { return true; }
  bool on_array_end(size_t n, json::error_code&) {
    st.push_array(n);
    return true;
  }
  bool on_key_part(json::string_view s, size_t, json::error_code&) {
    st.push_chars(s);
    return true;
  }
  bool on_key(json::string_view s, size_t, json::error_code&) {
    st.push_key(s);
    return true;
  }
  bool on_string_part(json::string_view s, size_t, json::error_code&) {
    st.push_chars(s);
    return true;
  }
  bool on_string(json::string_view s, size_t, json::error_code&) {
    st.push_string(s);
    return true;
  }
  bool on_number_part(json::string_view s, json::error_code&) {
    number.append(s.data(), s.size());
    return true;
  }
  bool on_int64(int64_t i, json::string_view, json::error_code&) {
    number.clear();
    st.push_int64(i);
    return true;
  }
  bool on_uint64(uint64_t u, json::string_view, json::error_code&) {
    number.clear();
    st.push_uint64(u);
    return true;
  }
  bool on_double(double d, json::string_view s, json::error_code&) {
    std::string_view text{s.data(), s.size()};
    if (!number.empty())
      text = number.append(s.data(), s.size());
    // Out of a double's range, from_chars leaves `d` as Boost read it
    // (infinity, or 0 for an underflow).
    std::from_chars(text.data(), text.data() + text.size(), d);
    number.clear();
    st.push_double(d);
    return true;
  }
  bool on_bool(bool b, json::error_code&) {
    st.push_bool(b);
    return true;
  }
  bool on_null(json::error_code&) {
    st.push_null();
    return true;
  }
  bool on_comment_part(json::string_view, json::error_code&) { return true; }
  bool on_comment(json::string_view, json::error_code&) { return true; }
};

} // namespace

json::value parse_json(std::string_view text, json::error_code& ec,
                       size_t* consumed, const json::parse_options& opts) {
  unsigned char temp[4096]; // the value stack's first buffer
  json::basic_parser<precise_handler> p(opts, temp, sizeof temp);
  p.handler().st.reset();
  auto n = p.write_some(false, text.data(), text.size(), ec);
  if (!ec && n < text.size())
    ec = json::error::extra_data;
  if (consumed != nullptr)
    *consumed = n;
  if (ec)
    return nullptr;
  return p.handler().st.release();
}

std::string json_text(const json::value& v) {
  std::string out;
  write(out, v);
  return out;
}

double round_us(double ms) {
  if (!std::isfinite(ms))
    return ms;
  return std::round(ms * 1000.0) / 1000.0;
}

} // namespace pgw
