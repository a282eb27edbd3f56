#include "config/json_text.hpp"

#include <boost/json.hpp>
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

} // namespace

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
