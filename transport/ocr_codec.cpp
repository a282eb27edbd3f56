#include "transport/ocr_codec.hpp"

#include "config/json_text.hpp"
#include "config/scrub.hpp"
#include "messages/errors.hpp"

#include <boost/json.hpp>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <initializer_list>
#include <optional>

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

int64_t page_count(const std::string& bytes, image_type t) {
  if (t != image_type::pdf)
    return 1;
  int64_t pages = 0;
  for (auto at = bytes.find("/Type"); at != std::string::npos;
       at = bytes.find("/Type", at + 5)) {
    auto k = at + 5;
    while (k < bytes.size()
           && (bytes[k] == ' ' || bytes[k] == '\r' || bytes[k] == '\n'
               || bytes[k] == '\t'))
      ++k;
    if (bytes.compare(k, 5, "/Page") != 0)
      continue;
    // `/Pages` is the page tree, not a page.
    if (k + 5 < bytes.size() && bytes[k + 5] == 's')
      continue;
    ++pages;
  }
  return std::max<int64_t>(pages, 1);
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

bool base64_decode(const std::string& text, std::string& out) {
  auto end = text.size();
  for (int pad = 0; pad < 2 && end > 0 && text[end - 1] == '='; ++pad)
    --end;
  if (end % 4 == 1)
    return false;
  out.clear();
  out.reserve(end / 4 * 3 + 2);
  uint32_t acc = 0;
  int bits = 0;
  for (size_t i = 0; i < end; ++i) {
    auto c = static_cast<unsigned char>(text[i]);
    uint32_t v;
    if (c >= 'A' && c <= 'Z')
      v = c - 'A';
    else if (c >= 'a' && c <= 'z')
      v = c - 'a' + 26;
    else if (c >= '0' && c <= '9')
      v = c - '0' + 52;
    else if (c == '+' || c == '/')
      v = c == '+' ? 62 : 63;
    else
      return false;
    acc = (acc << 6 | v) & 0xFFFFFF;
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += static_cast<char>((acc >> bits) & 0xFF);
    }
  }
  return true;
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

namespace {

void malformed(attempt_result& out, std::string message) {
  out.kind = outcome::result_invalid;
  out.reason = "malformed_body";
  out.error_message = std::move(message);
}

/// The answer object when it says `success: true`; otherwise classifies the
/// failure into `out` and returns null.
const json::object* monkey_success(const json::value& doc,
                                   attempt_result& out) {
  auto obj = doc.if_object();
  auto success = obj ? obj->if_contains("success") : nullptr;
  if (success == nullptr || !success->is_bool()) {
    malformed(out, "the answer is not an OCR result object");
    return nullptr;
  }
  if (!success->get_bool()) {
    std::string message;
    if (auto m = obj->if_contains("message"); m && m->is_string())
      message = std::string(m->get_string()).substr(0, 500);
    bool rejected = blames_input(message);
    out.kind = rejected ? outcome::request_rejected : outcome::transient;
    out.reason = rejected ? "ocr_rejected" : "ocr_failed";
    out.error_message = scrub(message); // upstream text (SPEC §12)
    return nullptr;
  }
  return obj;
}

/// `{type, text, bbox?}` blocks, normalised into `out`: a missing or
/// non-string type is "text", a missing or non-string text "", a bbox that
/// is not 4 finite numbers is left out. Returns the index of the first item
/// that is not an object (nothing to normalise: the list is unusable), or
/// -1 when every item was taken.
int64_t normalise_blocks(const json::array& items, json::array& out) {
  for (size_t i = 0; i < items.size(); ++i) {
    auto b = items[i].if_object();
    if (b == nullptr)
      return static_cast<int64_t>(i);
    json::object n;
    auto type = b->if_contains("type");
    auto text = b->if_contains("text");
    n["type"] = type && type->is_string() ? type->get_string() : "text";
    n["text"] = text && text->is_string() ? text->get_string() : "";
    if (auto box = b->if_contains("bbox"); box && box->is_array()
                                           && box->get_array().size() == 4) {
      // A coordinate must be a finite number: a literal like 1e999 parses
      // as infinity and would serialise as a token no JSON reader takes.
      json::array coords;
      for (auto& c : box->get_array())
        if (c.is_number() && std::isfinite(c.to_number<double>()))
          coords.emplace_back(c.to_number<double>());
      if (coords.size() == 4)
        n["bbox"] = std::move(coords);
    }
    out.emplace_back(std::move(n));
  }
  return -1;
}

/// Sets `out` ok with `markdown` and `blocks_json` from a layout object
/// holding `content_key` (markdown) and/or `blocks_key` (a list). False
/// when it holds neither, or (`why` set) when the list has an item that is
/// not an object: the whole list is refused, never cut at that item.
bool take_layout(const json::object& obj, const char* content_key,
                 const char* blocks_key, attempt_result& out,
                 std::string& blocks_json, std::string& why) {
  json::array blocks;
  auto list = obj.if_contains(blocks_key);
  bool has_blocks = list != nullptr && list->is_array();
  if (has_blocks) {
    if (auto bad = normalise_blocks(list->get_array(), blocks); bad >= 0) {
      why = std::string{blocks_key} + " item " + std::to_string(bad)
            + " is not an object";
      return false;
    }
  }
  auto content = obj.if_contains(content_key);
  bool has_text = content != nullptr && content->is_string();
  if (!has_blocks && !has_text)
    return false;
  std::string text;
  if (has_text) {
    text = std::string(content->get_string());
  } else {
    for (auto& b : blocks) {
      auto& t = b.at("text").get_string();
      if (t.empty())
        continue;
      if (!text.empty())
        text += "\n\n";
      text.append(t.data(), t.size());
    }
  }
  out.kind = outcome::ok;
  out.reason = "ok";
  out.content = std::move(text);
  blocks_json = json_text(blocks);
  return true;
}

/// The text between a fence that wraps the whole of `text` (surrounding
/// blanks aside): "```" (with an optional info string such as `json`) and
/// a newline at the start, "```" at the end; none otherwise.
std::optional<std::string> fenced_body(const std::string& text) {
  auto first = text.find_first_not_of(" \t\r\n");
  auto last = text.find_last_not_of(" \t\r\n");
  if (first == std::string::npos || text.compare(first, 3, "```") != 0)
    return std::nullopt;
  auto open_end = text.find('\n', first);
  if (open_end == std::string::npos || last < 2 || last - 2 <= open_end
      || text.compare(last - 2, 3, "```") != 0)
    return std::nullopt;
  return text.substr(open_end + 1, last - 2 - (open_end + 1));
}

} // namespace

void decode_monkey_text(const std::string& body, attempt_result& out) {
  boost::system::error_code ec;
  auto doc = parse_json(body, ec);
  if (ec)
    doc = nullptr;
  auto obj = monkey_success(doc, out);
  if (obj == nullptr)
    return;
  auto content = obj->if_contains("content");
  if (content == nullptr || !content->is_string())
    return malformed(out, "the OCR result has no text content");
  out.kind = outcome::ok;
  out.reason = "ok";
  out.content = std::string(content->get_string());
}

void decode_monkey_layout(const std::string& body, attempt_result& out,
                          std::string& blocks_json) {
  boost::system::error_code ec;
  auto doc = parse_json(body, ec);
  if (ec)
    doc = nullptr;
  auto obj = monkey_success(doc, out);
  std::string why;
  if (obj != nullptr
      && !take_layout(*obj, "content", "content_list", out, blocks_json, why))
    malformed(out, !why.empty() ? why
                                : "the layout result has neither content nor "
                                  "content_list");
}

std::string vision_prompt(const source_config& src, bool layout) {
  if (layout)
    return !src.ocr_prompt_layout.empty()
             ? src.ocr_prompt_layout
             : "Read this document. Answer only with a JSON object "
               "{\"markdown\": the whole text as markdown, \"blocks\": "
               "[{\"type\": \"title|text|table|figure|list\", \"text\": "
               "..., \"bbox\": [x0, y0, x1, y1]}]}.";
  return !src.ocr_prompt_text.empty()
           ? src.ocr_prompt_text
           : "Transcribe all text in this image exactly, in reading order. "
             "Answer with the text only.";
}

chat_request vision_request(const source_config& src, const std::string& image,
                            image_type t, bool layout) {
  chat_message msg;
  msg.role = "user";
  msg.parts.push_back({"text", vision_prompt(src, layout), ""});
  msg.parts.push_back({"image_url", "", image_data_url(image, t)});
  chat_request req;
  req.messages.push_back(std::move(msg));
  req.stream = false;
  return req;
}

void decode_vision_layout(attempt_result& out, std::string& blocks_json) {
  // The answer as it is first: a JSON object whose text holds a fence of
  // its own (a code block in the markdown) is still that object.
  boost::system::error_code ec;
  auto doc = parse_json(out.content, ec);
  if (ec)
    if (auto inner = fenced_body(out.content))
      doc = parse_json(*inner, ec);
  auto obj = !ec ? doc.if_object() : nullptr;
  std::string why;
  if (obj == nullptr
      || !take_layout(*obj, "markdown", "blocks", out, blocks_json, why)) {
    out.kind = outcome::result_invalid;
    out.reason = "layout_not_json";
    out.error_message = !why.empty() ? "the layout answer's " + why
                                     : "the layout answer is not a JSON "
                                       "object with markdown or blocks";
  }
}

} // namespace pgw
