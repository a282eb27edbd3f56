// `pgw-actor serve`: the embeddings and OCR routes (issue 16).

#include "commands.hpp"
#include "serve_app.hpp"
#include "serve_openai.hpp"

#include "config/json_text.hpp"
#include "transport/ocr_codec.hpp"

#include <boost/json.hpp>
#include <fmt/format.h>
#include <httplib.h>

#include <chrono>
#include <functional>
#include <future>
#include <cstring>
#include <string_view>

namespace pgw::serve {

namespace {

namespace json = boost::json;

void send_bad_request(httplib::Response& res, const std::string& message) {
  send_error(res, 400, message, "invalid_request_error", "invalid_request");
}

/// The little-endian float32 bytes of `vec`, base64-encoded (OpenAI's
/// `encoding_format: "base64"`).
std::string base64_floats(const std::vector<float>& vec) {
  std::string bytes;
  bytes.reserve(vec.size() * 4);
  for (auto x : vec) {
    uint32_t bits = 0;
    std::memcpy(&bits, &x, sizeof bits);
    for (int i = 0; i < 4; ++i)
      bytes += static_cast<char>((bits >> (8 * i)) & 0xFF);
  }
  return base64_encode(bytes);
}

/// The served scope named by `model` (`SCOPE` or `SCOPE/source`, which
/// sets `source`) when it serves one of `kinds`; otherwise sends the error
/// (404 unknown scope or source, 400 a scope of another kind) and returns
/// null.
const served_scope* scope_for(context& ctx, const json::object& body,
                              std::initializer_list<source_kind> kinds,
                              const char* what, httplib::Response& res,
                              std::string& model, std::string& source) {
  auto* m = body.if_contains("model");
  if (m == nullptr || !m->is_string() || m->as_string().empty()) {
    send_bad_request(res, "`model` must be a non-empty string (a scope)");
    return nullptr;
  }
  model = std::string(m->as_string());
  auto scope = resolve(ctx, model, source);
  if (scope == nullptr) {
    send_model_not_found(ctx, res, model);
    return nullptr;
  }
  auto kind = scope->config->sources.front().kind;
  bool fits = false;
  for (auto k : kinds)
    fits = fits || kind == k;
  if (!fits) {
    send_bad_request(res, "scope " + scope->config->name + " serves KIND="
                            + to_string(kind) + ", not " + what);
    return nullptr;
  }
  res.set_header("x-pgw-scope", scope->config->name);
  return scope;
}

/// Most inputs of one embeddings request (OpenAI's own limit). The answer
/// holds a vector per input: without it an 8 MiB body of one-letter inputs
/// (two million) would ask for gigabytes of vectors.
constexpr size_t max_embed_inputs = 2048;

/// The inputs of an embeddings body: `input` a string or an array of at
/// most `max_embed_inputs` strings; a message naming the problem otherwise.
std::optional<std::string> embed_inputs(const json::object& body,
                                        std::vector<std::string>& out) {
  auto* in = body.if_contains("input");
  if (in != nullptr && in->is_string()) {
    out.emplace_back(in->as_string());
    return {};
  }
  if (in == nullptr || !in->is_array())
    return std::string{"`input` must be a string or an array of strings"};
  if (auto n = in->as_array().size(); n > max_embed_inputs)
    return "`input` has " + std::to_string(n) + " items; at most "
           + std::to_string(max_embed_inputs)
           + " per request (send the rest in another request)";
  for (auto& v : in->as_array()) {
    if (!v.is_string())
      return std::string{"`input` must be a string or an array of strings "
                         "(token arrays are not supported)"};
    out.emplace_back(v.as_string());
  }
  return {};
}

/// Seconds since `started`.
double seconds_since(std::chrono::steady_clock::time_point started) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now()
                                       - started)
    .count();
}

/// Names the call (`x-pgw-call-id`) and records where it starts.
void begin_side(context& ctx, const served_scope& scope, httplib::Response& res,
                side_start& out) {
  out.scope = &scope;
  out.call_id = ctx.call_prefix + std::to_string(++ctx.next_call);
  res.set_header("x-pgw-call-id", out.call_id);
  out.started = std::chrono::steady_clock::now();
}

/// The upstream work of a call split by source: an embedding call's
/// sub-batches may land on several; an OCR call has one source (null).
const embed_response* split_by_source(const embed_response& r) {
  return &r;
}

const embed_response* split_by_source(const ocr_response&) {
  return nullptr;
}

/// Counts a finished side call and answers: the error (499 when `gone`),
/// or `ok(result)`.
template <class Response, class Ok>
void finish_side(context& ctx, const served_scope& scope, double total_s,
                 const caf::expected<Response>& result, bool gone,
                 httplib::Response& res, Ok ok) {
  const auto& scope_name = scope.config->name;
  if (!result) {
    // Sub-batches answered before the failure count their reported tokens.
    ctx.stats.record_failure(scope_name, result.error(), total_s);
    return send_call_error(res, result.error(), gone);
  }
  // The call is counted against the first source that answered; its tokens
  // and cost against the source that did the work: the tokens reported in
  // pgw_tokens_total, an embedding's unreported usage (an estimate) in
  // pgw_tokens_estimated_total.
  auto& stats = result->stats;
  auto first = stats.source.substr(0, stats.source.find(','));
  chat_response counted;
  counted.stats = stats;
  const auto* split = split_by_source(*result);
  if (split != nullptr) {
    counted.stats.cost_usd = caf::none; // counted by source below
  } else if (usage_known(counted)) {
    counted.usage.prompt_tokens = stats.prompt_tokens;
    counted.usage.completion_tokens = stats.completion_tokens;
  } else {
    counted.usage.prompt_tokens = stats.reported_prompt_tokens;
  }
  ctx.stats.record_call(scope_name, first, "ok", total_s, &counted);
  if (split != nullptr) {
    std::map<std::string, spent_work> work;
    for (auto& [name, n] : split->reported_tokens_by_source)
      work[name].prompt_tokens = n;
    for (auto& [name, n] : split->estimated_tokens_by_source)
      work[name].estimated_tokens = n;
    if (stats.cost_usd)
      for (auto& [name, usd] : split->cost_by_source)
        work[name].cost_usd = usd;
    for (auto& [name, w] : work)
      ctx.stats.record_usage(scope_name, name, w);
  }
  res.set_header("x-pgw-source", first);
  ok(*result);
}

/// A side call's `launch`: starts `call` with `(cl.*then)(call, callback)`
/// (`client::embed_then` / `ocr_then`); the callback hands `done` the
/// answer's writer, which counts the call in the metrics and, on success,
/// calls `write(res, answer)`.
template <class Response, class Call, class Then, class Write>
std::function<void(client&, std::function<void(side_answer)>)>
side_launcher(context& ctx, const side_start& st, Call call, Then then,
              Write write) {
  auto scope = st.scope;
  auto started = st.started;
  call.call_id = st.call_id;
  return [&ctx, scope, started, call = std::move(call), then,
          write](client& cl, std::function<void(side_answer)> done) mutable {
    (cl.*then)(std::move(call),
               [&ctx, scope, started, write,
                done = std::move(done)](caf::expected<Response> result) {
                 double total_s = seconds_since(started);
                 done([&ctx, scope, total_s, write, r = std::move(result)](
                        httplib::Response& res, bool gone) {
                   finish_side(ctx, *scope, total_s, r, gone, res,
                               [&](const Response& resp) { write(res, resp); });
                 });
               });
  };
}

/// The bytes of a `data:...;base64,...` URL; a message otherwise.
std::optional<std::string> data_url_bytes(const std::string& url,
                                          std::string& out) {
  if (url.rfind("data:", 0) != 0)
    return std::string{"only data: URLs are accepted (pgw never fetches a "
                       "URL for the caller)"};
  auto comma = url.find(',');
  if (comma == std::string::npos || comma < 12
      || url.compare(comma - 7, 7, ";base64") != 0)
    return std::string{"the data: URL must be base64 (data:TYPE;base64,...)"};
  if (!base64_decode(url.substr(comma + 1), out))
    return std::string{"the data: URL's base64 is malformed"};
  return {};
}

/// The document bytes of an OCR body (Mistral / LiteLLM shape):
/// `document: {type: image_url, image_url: URL | {url}}` or
/// `{type: document_url, document_url: URL}`.
std::optional<std::string> ocr_document(const json::object& body,
                                        std::string& out) {
  auto* doc = body.if_contains("document");
  if (doc == nullptr || !doc->is_object())
    return std::string{"`document` must be an object {type, image_url | "
                       "document_url}"};
  auto& d = doc->as_object();
  auto* type = d.if_contains("type");
  if (type == nullptr || !type->is_string()
      || (type->as_string() != "image_url"
          && type->as_string() != "document_url"))
    return std::string{"`document.type` must be image_url or document_url"};
  auto field = std::string(type->as_string());
  const json::value* url = d.if_contains(field);
  if (url != nullptr && url->is_object())
    url = url->as_object().if_contains("url");
  if (url == nullptr || !url->is_string())
    return "`document." + field + "` must be a URL string";
  return data_url_bytes(std::string(url->as_string()), out);
}

} // namespace

namespace {

/// Hands `put(text, size)` the `data` items of `resp`, comma-separated,
/// as a json::value of them would serialize (numbers as `plain_number`).
template <class Put>
void embedding_items(const embed_response& resp, bool base64, Put&& put) {
  char num[plain_number_max];
  for (size_t i = 0; i < resp.vectors.size(); ++i) {
    auto head = fmt::format(R"({}{{"object":"embedding","index":{},"embedding":)",
                            i == 0 ? "" : ",", i);
    put(head.data(), head.size());
    if (base64) {
      auto text = json::serialize(json::string(base64_floats(resp.vectors[i])));
      put(text.data(), text.size());
    } else {
      put("[", 1);
      bool first = true;
      for (auto x : resp.vectors[i]) {
        if (!first)
          put(",", 1);
        first = false;
        put(num, plain_number_chars(static_cast<double>(x), num));
      }
      put("]", 1);
    }
    put("}", 1);
  }
}

} // namespace

std::string embeddings_json(const embed_response& resp,
                            const std::string& model, bool base64) {
  // Written straight from the vectors, its size counted first: a json::value
  // of the answer and a growing string held several times its size.
  auto tokens = resp.stats.prompt_tokens;
  json::object rest{
    {"model", model},
    {"usage", json::object{{"prompt_tokens", tokens}, {"total_tokens", tokens}}},
    {"call_id", resp.call_id},
    {"call_stats", json::parse(cli::call_stats_json(resp.stats))},
  };
  auto tail = json_text(rest); // {"model":...}
  static constexpr std::string_view open = R"({"object":"list","data":[)";
  size_t size = open.size() + 2 + tail.size() - 1;
  embedding_items(resp, base64, [&size](const char*, size_t n) { size += n; });
  std::string out;
  out.reserve(size);
  out += open;
  embedding_items(resp, base64,
                  [&out](const char* text, size_t n) { out.append(text, n); });
  out += "],";
  out.append(tail, 1);
  return out;
}

namespace {

bool start_embeddings(context& ctx, json::object& body, httplib::Response& res,
                      side_start& out) {
  bool base64 = false;
  if (auto* f = body.if_contains("encoding_format"); f && !f->is_null()) {
    if (!f->is_string()
        || (f->as_string() != "float" && f->as_string() != "base64")) {
      send_bad_request(res, "`encoding_format` must be float or base64");
      return false;
    }
    base64 = f->as_string() == "base64";
  }
  if (auto* d = body.if_contains("dimensions"); d && !d->is_null()) {
    send_bad_request(res, "`dimensions` is not supported: the vector size is "
                          "the source model's");
    return false;
  }
  embed_request call;
  if (auto problem = embed_inputs(body, call.inputs)) {
    send_bad_request(res, *problem);
    return false;
  }
  std::string model;
  auto scope = scope_for(ctx, body, {source_kind::embedding}, "embeddings", res, model,
                         call.source);
  if (scope == nullptr)
    return false;
  begin_side(ctx, *scope, res, out);
  out.launch = side_launcher<embed_response>(
    ctx, out, std::move(call),
    &client::embed_then,
    [model, base64](httplib::Response& res, const embed_response& resp) {
      // Moved, not copied (set_content copies the body).
      res.body = embeddings_json(resp, model, base64);
      res.set_header("Content-Type", "application/json");
    });
  return true;
}

bool start_ocr(context& ctx, json::object& body, httplib::Response& res,
               side_start& out) {
  ocr_request call;
  if (auto problem = ocr_document(body, call.image)) {
    send_bad_request(res, *problem);
    return false;
  }
  // pgw's extension: `"layout": true` parses the layout (blocks).
  if (auto* l = body.if_contains("layout"); l && !l->is_null()) {
    if (!l->is_bool()) {
      send_bad_request(res, "`layout` must be true or false");
      return false;
    }
    call.layout = l->as_bool();
  }
  std::string model;
  auto scope = scope_for(ctx, body, {source_kind::ocr_vision, source_kind::ocr_monkey}, "OCR", res,
                         model, call.source);
  if (scope == nullptr)
    return false;
  auto size = call.image.size();
  image_type type = image_type::png;
  int64_t pages = sniff_image(call.image, type) ? page_count(call.image, type)
                                                : 1;
  bool layout = call.layout;
  begin_side(ctx, *scope, res, out);
  out.launch = side_launcher<ocr_response>(
    ctx, out, std::move(call),
    &client::ocr_then,
    [model, size, pages, layout](httplib::Response& res,
                                 const ocr_response& resp) {
      json::object page{{"index", 0},
                        {"markdown", resp.text},
                        {"images", json::array{}},
                        {"dimensions", nullptr}};
      if (layout) {
        boost::system::error_code ec;
        auto blocks = parse_json(resp.blocks_json, ec);
        page["blocks"] = ec ? json::value(json::array{}) : std::move(blocks);
      }
      json::object out_body{
        {"pages", json::array{std::move(page)}},
        {"model", model},
        {"usage_info",
         json::object{{"pages_processed", pages}, {"doc_size_bytes", size}}},
        {"pgw", json::object{{"call_id", resp.call_id},
                             {"source", resp.source},
                             {"call_stats",
                              json::parse(cli::call_stats_json(resp.stats))}}},
      };
      res.set_content(json_text(out_body), "application/json");
    });
  return true;
}

/// Both side routes over the httplib thread: counted in flight, started,
/// waited for (a client that hangs up cancels the call), answered.
void handle_side(context& ctx, const httplib::Request& req,
                 httplib::Response& res) {
  in_flight_guard guard{ctx};
  if (guard.overloaded(res))
    return;
  side_start st;
  if (!start_side(ctx, req, res, st))
    return;
  client& cl = *st.scope->chat;
  auto slot = std::make_shared<std::promise<side_answer>>();
  auto pending = slot->get_future();
  st.launch(cl, [slot](side_answer a) { slot->set_value(std::move(a)); });
  bool gone = false;
  auto write = await_call(ctx, cl, st.call_id, pending, gone);
  write(res, gone);
}

} // namespace

bool start_side(context& ctx, const httplib::Request& req,
                httplib::Response& res, side_start& out) {
  json::value doc;
  if (auto problem = parse_body_object(req.body, doc)) {
    send_bad_request(res, *problem);
    return false;
  }
  if (req.path == "/v1/ocr")
    return start_ocr(ctx, doc.as_object(), res, out);
  return start_embeddings(ctx, doc.as_object(), res, out);
}

void handle_embeddings(context& ctx, const httplib::Request& req,
                       httplib::Response& res) {
  handle_side(ctx, req, res);
}

void handle_ocr(context& ctx, const httplib::Request& req,
                httplib::Response& res) {
  handle_side(ctx, req, res);
}

} // namespace pgw::serve
