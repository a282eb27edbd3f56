#include "transport/ocr_codec.hpp"

#include "messages/errors.hpp"

#include <boost/json.hpp>

#include <algorithm>
#include <cctype>
#include <initializer_list>

namespace pgw {

namespace {

namespace json = boost::json;

bool starts_with(const std::string& bytes, std::initializer_list<int> magic) {
  if (bytes.size() < magic.size())
    return false;
  size_t i = 0;
  for (auto b : magic)
    if (static_cast<unsigned char>(bytes[i++]) != b)
      return false;
  return true;
}

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char c) { return std::tolower(c); });
  return s;
}

/// True when a failure message blames the input, not the server.
bool blames_input(const std::string& message) {
  auto m = lower(message);
  for (auto* word : {"unsupported", "not supported", "invalid", "corrupt",
                     "too large", "too big", "no pages", "password",
                     "cannot identify", "cannot open", "not an image"})
    if (m.find(word) != std::string::npos)
      return true;
  return false;
}

} // namespace

const char* mime_of(image_type t) {
  switch (t) {
    case image_type::png:
      return "image/png";
    case image_type::jpeg:
      return "image/jpeg";
    case image_type::pdf:
      return "application/pdf";
  }
  return "application/octet-stream";
}

bool sniff_image(const std::string& bytes, image_type& out) {
  if (starts_with(bytes, {0x89, 'P', 'N', 'G', 0x0D, 0x0A, 0x1A, 0x0A}))
    out = image_type::png;
  else if (starts_with(bytes, {0xFF, 0xD8, 0xFF}))
    out = image_type::jpeg;
  else if (starts_with(bytes, {'%', 'P', 'D', 'F', '-'}))
    out = image_type::pdf;
  else
    return false;
  return true;
}

caf::error check_image(const std::string& bytes, size_t max_bytes,
                       image_type& out) {
  if (bytes.empty())
    return make_error(error_code::invalid_request, "the image is empty");
  if (bytes.size() > max_bytes)
    return make_error(error_code::invalid_request,
                      "the image has " + std::to_string(bytes.size())
                        + " bytes, more than MAX_IMAGE_BYTES="
                        + std::to_string(max_bytes));
  if (!sniff_image(bytes, out))
    return make_error(error_code::invalid_request,
                      "the image is not a PNG, JPEG or PDF (by its first "
                      "bytes)");
  return {};
}

std::string base64_encode(const std::string& bytes) {
  static constexpr char table[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  size_t i = 0;
  auto at = [&](size_t k) {
    return static_cast<uint32_t>(static_cast<unsigned char>(bytes[k]));
  };
  for (; i + 2 < bytes.size(); i += 3) {
    auto v = (at(i) << 16) | (at(i + 1) << 8) | at(i + 2);
    out += table[(v >> 18) & 63];
    out += table[(v >> 12) & 63];
    out += table[(v >> 6) & 63];
    out += table[v & 63];
  }
  if (i + 1 == bytes.size()) {
    auto v = at(i) << 16;
    out += table[(v >> 18) & 63];
    out += table[(v >> 12) & 63];
    out += "==";
  } else if (i + 2 == bytes.size()) {
    auto v = (at(i) << 16) | (at(i + 1) << 8);
    out += table[(v >> 18) & 63];
    out += table[(v >> 12) & 63];
    out += table[(v >> 6) & 63];
    out += '=';
  }
  return out;
}

std::string image_data_url(const std::string& bytes, image_type t) {
  return std::string{"data:"} + mime_of(t) + ";base64," + base64_encode(bytes);
}

std::string monkey_multipart(const std::string& bytes, image_type t,
                             const std::string& boundary) {
  static constexpr const char* names[] = {"image.png", "image.jpg",
                                          "document.pdf"};
  std::string out = "--" + boundary + "\r\n";
  out += "Content-Disposition: form-data; name=\"file\"; filename=\"";
  out += names[static_cast<int>(t)];
  out += "\"\r\nContent-Type: ";
  out += mime_of(t);
  out += "\r\n\r\n";
  out += bytes;
  out += "\r\n--" + boundary + "--\r\n";
  return out;
}

void decode_monkey_text(const std::string& body, attempt_result& out) {
  boost::system::error_code ec;
  auto doc = json::parse(body, ec);
  auto obj = !ec ? doc.if_object() : nullptr;
  auto success = obj ? obj->if_contains("success") : nullptr;
  if (success == nullptr || !success->is_bool()) {
    out.kind = outcome::result_invalid;
    out.reason = "malformed_body";
    out.error_message = "the answer is not an OCR result object";
    return;
  }
  if (!success->get_bool()) {
    std::string message;
    if (auto m = obj->if_contains("message"); m && m->is_string())
      message = std::string(m->get_string()).substr(0, 500);
    bool rejected = blames_input(message);
    out.kind = rejected ? outcome::request_rejected : outcome::transient;
    out.reason = rejected ? "ocr_rejected" : "ocr_failed";
    out.error_message = message;
    return;
  }
  auto content = obj->if_contains("content");
  if (content == nullptr || !content->is_string()) {
    out.kind = outcome::result_invalid;
    out.reason = "malformed_body";
    out.error_message = "the OCR result has no text content";
    return;
  }
  out.kind = outcome::ok;
  out.reason = "ok";
  out.content = std::string(content->get_string());
}

} // namespace pgw
