#pragma once

/// OCR request and answer pieces (issue 16, OCR part): image checks, the
/// vision-chat image part, and the MonkeyOCR-style API's multipart body and
/// answers. Plain functions; the OCR call actor is not built yet.

#include "config/settings.hpp"
#include "messages/chat.hpp"
#include "messages/outcome.hpp"

#include <caf/error.hpp>

#include <cstddef>
#include <cstdint>
#include <string>

namespace pgw {

/// Image types OCR accepts, told from their first bytes.
enum class image_type { png, jpeg, pdf };

/// "image/png", "image/jpeg", "application/pdf".
const char* mime_of(image_type t);

/// The type of `bytes` from its magic bytes (PNG signature, JPEG SOI
/// `FF D8 FF`, `%PDF-`), never from a file name; false when none matches.
bool sniff_image(const std::string& bytes, image_type& out);

/// `invalid_request` when `bytes` is empty, larger than `max_bytes`
/// (MAX_IMAGE_BYTES, default 20 MiB) or not a PNG, JPEG or PDF; the message
/// names the size or says what the first bytes are not. Sets `out` on
/// success.
caf::error check_image(const std::string& bytes, size_t max_bytes,
                       image_type& out);

/// The pages of an image for per-page pricing: 1 for a PNG or JPEG; for a
/// PDF the page objects (`/Type /Page`, not `/Pages`) its bytes hold, at
/// least 1 (a compressed object stream hides them: then 1, a lower bound).
int64_t page_count(const std::string& bytes, image_type t);

/// Standard base64 with padding.
std::string base64_encode(const std::string& bytes);

/// Decodes standard base64 (padding optional); false on any other
/// character or a length no encoder produces.
bool base64_decode(const std::string& text, std::string& out);

/// `data:<mime>;base64,<...>`: the image part of a vision chat request.
std::string image_data_url(const std::string& bytes, image_type t);

/// A `multipart/form-data` body with one part, field `file`, holding the
/// image; `boundary` must not occur in the bytes (pick a random one).
std::string monkey_multipart(const std::string& bytes, image_type t,
                             const std::string& boundary);

/// Decodes a 2xx answer of `POST /ocr/text`: `{success, task_type, content,
/// message}`. `success: true` with a string `content` → `out.kind = ok`,
/// `out.content` the text. `success: false` (the server answers HTTP 200 on
/// failure) is classified from `message`: a message about the input
/// (unsupported, invalid, corrupt, too large, no pages, password) →
/// `request_rejected` (reason `ocr_rejected`), anything else (busy, out of
/// memory, timeout, internal) → `transient` (reason `ocr_failed`), with the
/// message kept. A body that is not such an object → `result_invalid`
/// (`malformed_body`).
void decode_monkey_text(const std::string& body, attempt_result& out);

/// Decodes a 2xx answer of `POST /parse?return_type=content_list_json`:
/// `success` as for text; then `content_list` (an array of `{type, text,
/// bbox?}`) becomes `blocks_json` (normalised: type and text strings, bbox
/// an array of 4 numbers when given) and `out.content` the markdown
/// (`content` when it is a string, else the blocks' texts joined by blank
/// lines). Neither present, or an item of `content_list` that is not an
/// object (the message names its index; the list is never cut there) →
/// `result_invalid` (`malformed_body`).
void decode_monkey_layout(const std::string& body, attempt_result& out,
                          std::string& blocks_json);

/// The instruction sent with the image to a vision model (a source's
/// OCR_PROMPT_TEXT / OCR_PROMPT_LAYOUT when set).
std::string vision_prompt(const source_config& src, bool layout);

/// The vision chat request: one user message with the prompt and the image
/// as a `data:` URL content part.
chat_request vision_request(const source_config& src, const std::string& image,
                            image_type t, bool layout);

/// A vision model's layout answer (`out.content`) must be a JSON object
/// `{markdown, blocks?}`, read as it is first; only when that fails, as the
/// inside of a ```json fence that wraps the whole answer (fences inside the
/// JSON's text are text). Sets `out.content` to the markdown and
/// `blocks_json`, or makes the outcome `result_invalid` with reason
/// `layout_not_json` (also for a `blocks` item that is not an object).
void decode_vision_layout(attempt_result& out, std::string& blocks_json);

} // namespace pgw
