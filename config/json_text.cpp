#include "config/json_text.hpp"

#include <boost/json.hpp>
#include <fmt/format.h>

#include <cmath>

namespace pgw {

namespace json = boost::json;

std::string plain_number(double x) {
  if (!std::isfinite(x))
    return "null";
  // fmt's shortest round-trip text; rewrite an exponent as plain digits.
  auto text = fmt::format("{}", x);
  auto e = text.find_first_of("eE");
  if (e == std::string::npos)
    return text;
  auto exponent = std::stoi(text.substr(e + 1));
  auto mantissa = text.substr(0, e);
  std::string sign;
  if (!mantissa.empty() && mantissa[0] == '-') {
    sign = "-";
    mantissa.erase(0, 1);
  }
  auto dot = mantissa.find('.');
  auto int_digits = static_cast<int>(dot == std::string::npos ? mantissa.size()
                                                              : dot);
  if (dot != std::string::npos)
    mantissa.erase(dot, 1);
  auto point = int_digits + exponent; // digits before the decimal point
  std::string out;
  if (point <= 0) {
    out = "0." + std::string(static_cast<size_t>(-point), '0') + mantissa;
  } else if (point >= static_cast<int>(mantissa.size())) {
    out = mantissa
          + std::string(static_cast<size_t>(point) - mantissa.size(), '0');
  } else {
    out = mantissa.substr(0, static_cast<size_t>(point)) + "."
          + mantissa.substr(static_cast<size_t>(point));
  }
  return sign + out;
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
