// The simulator's behaviours: a request's plan (its model's scenario:
// latency, faults, stream cuts, structured answers) carried out on the
// connection, for chat completions, embeddings and OCR.

#include "apps/pgw-upstream-sim/sim_internal.hpp"

namespace pgw::sim {

stream_plan plan_stream(const detail::stream_spec& s, int produced) {
  stream_plan out;
  if (s.cut_after && *s.cut_after <= produced) {
    out.terminal = action::cut;
    out.terminal_at = *s.cut_after;
  }
  if (s.stall_after && *s.stall_after <= produced
      && (out.terminal_at < 0 || *s.stall_after < out.terminal_at)) {
    out.terminal = action::stall;
    out.terminal_at = *s.stall_after;
  }
  if (s.malformed_at && *s.malformed_at <= produced)
    out.malformed_at = *s.malformed_at;
  out.omit_done = s.omit_done;
  return out;
}

action classify(const detail::plan& p, const stream_plan& sp, bool stream) {
  if (p.fault.reset)
    return action::reset;
  if (p.fault.hang_ms)
    return action::hang;
  if (p.fault.status != 0)
    return action::error;
  if (sp.terminal != action::ok)
    return sp.terminal;
  if (sp.malformed_at >= 0)
    return action::malformed;
  if (stream && sp.omit_done)
    return action::nodone;
  return action::ok;
}

namespace {

const char* error_type(int status, const std::optional<std::string>& code) {
  if (code && *code == "insufficient_quota")
    return "insufficient_quota";
  switch (status) {
    case 400: case 404: case 409: case 422: return "invalid_request_error";
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 429: return "rate_limit_error";
    default: return status >= 500 ? "server_error" : "invalid_request_error";
  }
}

} // namespace

std::string error_body(int status, const std::string& message,
                       const std::optional<std::string>& code,
                       const std::optional<std::string>& param) {
  std::string out = R"({"error":{"message":)";
  append_json_string(out, message);
  out += R"(,"type":)";
  append_json_string(out, error_type(status, code));
  out += R"(,"param":)";
  if (param)
    append_json_string(out, *param);
  else
    out += "null";
  out += R"(,"code":)";
  if (code)
    append_json_string(out, *code);
  else
    out += "null";
  out += "}}";
  return out;
}

namespace {

/// A scripted answer cut into stream tokens of up to 8 bytes, never inside
/// a UTF-8 character.
std::vector<std::string> content_tokens(const std::string& text) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i < text.size()) {
    size_t end = std::min(text.size(), i + 8);
    while (end < text.size()
           && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80)
      ++end;
    out.push_back(text.substr(i, end - i));
    i = end;
  }
  return out;
}

} // namespace

/// The answer's tokens: the scripted content, else the generated words.
std::vector<std::string> answer_of(const detail::plan& p,
                                   const std::string& model, uint64_t seed,
                                   int produced) {
  if (!p.b.content)
    return detail::answer_tokens(model, seed, produced, p.b.token_bytes);
  auto tokens = content_tokens(*p.b.content);
  tokens.resize(std::min(tokens.size(), static_cast<size_t>(produced)));
  return tokens;
}

/// Returns an error message, or empty when `body` is a usable chat request.
std::string parse_chat(const std::string& body, chat_request& out) {
  json::value doc;
  if (auto err = detail::parse_request_head(body, doc, out.model); !err.empty())
    return err;
  auto& obj = doc.get_object();
  auto* messages = obj.if_contains("messages");
  if (!messages || !messages->is_array() || messages->get_array().empty())
    return "'messages' must be a non-empty array";
  size_t chars = 0;
  for (auto& m : messages->get_array()) {
    if (!m.is_object())
      return "each message must be an object";
    auto* content = m.get_object().if_contains("content");
    if (!content)
      continue;
    if (content->is_string()) {
      chars += content->get_string().size();
    } else if (content->is_array()) {
      for (auto& part : content->get_array()) {
        if (!part.is_object())
          continue;
        if (auto* text = part.get_object().if_contains("text");
            text && text->is_string())
          chars += text->get_string().size();
        std::string bytes;
        if (auto* image = part.get_object().if_contains("image_url");
            image && image->is_object())
          if (auto* url = image->get_object().if_contains("url");
              url && url->is_string()
              && detail::data_url_bytes(std::string(url->get_string()), bytes))
            out.image_text = detail::ocr_text_of(bytes);
      }
    }
  }
  out.prompt_tokens = static_cast<int>(std::max<size_t>(1, chars / 4));
  if (auto* s = obj.if_contains("stream"); s && !s->is_null()) {
    if (!s->is_bool())
      return "'stream' must be a boolean";
    out.stream = s->get_bool();
  }
  if (auto* rf = obj.if_contains("response_format"); rf && rf->is_object())
    if (auto* type = rf->get_object().if_contains("type");
        type && type->is_string())
      out.response_format = std::string(type->get_string());
  if (auto* so = obj.if_contains("stream_options"); so && so->is_object())
    if (auto* iu = so->get_object().if_contains("include_usage");
        iu && iu->is_bool())
      out.include_usage = iu->get_bool();
  for (auto* key : {"max_tokens", "max_completion_tokens"}) {
    auto* mt = obj.if_contains(key);
    if (!mt || mt->is_null())
      continue;
    if (!mt->is_int64() || mt->get_int64() < 0)
      return fmt::format("'{}' must be a non-negative integer", key);
    if (!out.max_tokens || mt->get_int64() < *out.max_tokens)
      out.max_tokens = mt->get_int64();
  }
  return {};
}

namespace {

/// `{"id":ID,"object":OBJECT,"created":N,"model":MODEL` — the opening of
/// a chat answer and of each of its stream chunks.
std::string answer_head(const std::string& id, const char* object,
                        long long created, const std::string& model) {
  std::string out = R"({"id":")" + id + R"(","object":")" + object
                    + R"(","created":)" + std::to_string(created)
                    + R"(,"model":)";
  append_json_string(out, model);
  return out;
}

/// Structured output: a model that rejects the request's response format
/// answers a 400 naming the param; one that honours JSON mode answers its
/// `json_content`; scripted content sets the answer's token count.
void apply_response_format(const chat_request& req, detail::plan& p) {
  auto& rf = req.response_format;
  auto& rejected = p.b.reject_formats;
  if (!rf.empty() && !p.fault.active()
      && std::find(rejected.begin(), rejected.end(), rf) != rejected.end()) {
    p.fault.status = 400;
    p.fault.message = fmt::format("Invalid parameter: 'response_format' of "
                                  "type '{}' is not supported with this "
                                  "model.",
                                  rf.substr(0, 64));
    p.fault.param = "response_format";
  }
  if ((rf == "json_object" || rf == "json_schema") && p.b.json_content)
    p.b.content = p.b.json_content;
  if (p.b.content)
    p.b.tokens = static_cast<int>(content_tokens(*p.b.content).size());
}

} // namespace

ticket server::impl::arrive(size_t slot, const detail::request_head& head,
                            const chat_request& req, detail::plan& p,
                            stream_plan& sp, int& produced, uint64_t& n,
                            clock_type::time_point& arrived) {
  std::lock_guard<std::mutex> guard(log_mu);
  arrived = clock_type::now();
  double since = ms_between(epoch, arrived);
  n = ++counters[slot];
  p = detail::decide(*model_names[slot], *model_specs[slot], opts.seed, n,
                     since, opts.time_scale);
  apply_response_format(req, p);
  produced = p.b.tokens;
  if (req.max_tokens && *req.max_tokens < produced)
    produced = static_cast<int>(*req.max_tokens);
  sp = plan_stream(p.b.stream, produced);
  ticket t{generation, npos};
  if (entries.size() >= opts.log_limit) {
    ++dropped;
    return t;
  }
  t.index = entries.size();
  auto& e = entries.emplace_back();
  e.model = model_names[slot];
  e.n = n;
  e.arrived_ms = since;
  e.act = classify(p, sp, req.stream);
  e.stream = req.stream;
  e.auth = head.has_bearer;
  e.prompt_tokens = static_cast<uint32_t>(req.prompt_tokens);
  return t;
}

bool server::impl::handle_chat(int fd, const detail::request_head& head,
                               const std::string& body, bool& closed,
                               request_kind kind,
                               const std::string& ocr_model) {
  const bool embeddings = kind == request_kind::embeddings;
  const bool ocr = kind == request_kind::ocr_text
                   || kind == request_kind::ocr_parse;
  const bool keep = head.keep_alive;
  auto error_response = [&](int status, const std::string& message,
                            const std::optional<std::string>& code,
                            const std::string& extra) {
    auto content = error_body(status, message, code);
    auto out = response_head(status, "application/json", content.size(),
                             !keep, extra);
    out += content;
    return out;
  };
  chat_request req;
  detail::embed_request ereq;
  std::string file;
  auto problem = embeddings ? detail::parse_embed(body, ereq)
                 : ocr ? (detail::multipart_file(body, file)
                            ? std::string{}
                            : "the body must be multipart/form-data with a "
                              "file part")
                       : parse_chat(body, req);
  if (embeddings) {
    req.model = ereq.model;
    req.prompt_tokens = ereq.prompt_tokens;
  }
  if (ocr)
    req.model = ocr_model;
  if (!problem.empty()) {
    log_rejected(req.model, 400, req.stream, head.has_bearer);
    return send_all(fd, error_response(400, problem, std::nullopt, {}))
           && keep;
  }
  auto it = model_index.find(req.model);
  if (it == model_index.end()) {
    log_rejected(req.model, 404, req.stream, head.has_bearer);
    return send_all(fd, error_response(
                          404,
                          fmt::format("The model '{}' does not exist",
                                      req.model),
                          std::string("model_not_found"), {}))
           && keep;
  }
  if (auto& max = model_specs[it->second]->max_inputs;
      embeddings && max && ereq.inputs.size() > static_cast<size_t>(*max)) {
    log_rejected(req.model, 400, false, head.has_bearer);
    return send_all(fd, error_response(
                          400,
                          fmt::format("at most {} inputs per request, got {}",
                                      *max, ereq.inputs.size()),
                          std::string("too_many_inputs"), {}))
           && keep;
  }
  detail::plan p;
  stream_plan sp;
  int produced = 0;
  uint64_t n = 0;
  clock_type::time_point t0;
  auto t = arrive(it->second, head, req, p, sp, produced, n, t0);
  const double scale = opts.time_scale;
  const auto& f = p.fault;
  auto end_conn = [&](bool rst) {
    close_conn(fd, rst);
    closed = true;
    return false;
  };
  // The last write of a response: the log row is completed first, so a
  // client holding the whole response already finds it in the log.
  auto deliver = [&](const std::string& out, int status, uint32_t tokens,
                     int status_if_failed) {
    finish(t, status, false, tokens);
    if (send_all(fd, out))
      return true;
    finish(t, status_if_failed, true, status_if_failed ? tokens : 0);
    return false;
  };
  // A client that left (or a stop) while we waited: record it and close.
  auto left = [&](waited w, int status_sent, uint32_t tokens) {
    finish(t, status_sent, w == waited::client_left, tokens);
    return end_conn(false);
  };

  if (f.reset) {
    finish(t, 0, false, 0);
    return end_conn(true);
  }
  if (f.hang_ms) {
    auto w = wait_until(fd, after_ms(t0, *f.hang_ms * scale));
    finish(t, 0, w == waited::client_left, 0);
    return end_conn(false);
  }
  if (f.status != 0) {
    if (auto w = wait_until(fd, after_ms(t0, p.latency_ms * scale));
        w != waited::elapsed)
      return left(w, 0, 0);
    std::string extra;
    if (f.retry_after)
      extra += "Retry-After: " + *f.retry_after + "\r\n";
    if (f.retry_after_ms)
      extra += "retry-after-ms: " + *f.retry_after_ms + "\r\n";
    if (f.status < 400) // a redirect (a misconfigured proxy or provider)
      extra += "Location: http://elsewhere.invalid/v1/chat/completions\r\n";
    auto message = f.message ? *f.message
                             : fmt::format("simulated {}", f.status);
    if (f.echo_auth)
      message += " (you sent Authorization: " + head.authorization + ")";
    auto content = error_body(f.status, message, f.code, f.param);
    auto reply = response_head(f.status, "application/json", content.size(),
                               !keep, extra)
                 + content;
    if (!deliver(reply, f.status, 0, 0))
      return end_conn(false);
    return keep;
  }

  if (embeddings || ocr) {
    if (auto w = wait_until(fd, after_ms(t0, p.latency_ms * scale));
        w != waited::elapsed)
      return left(w, 0, 0);
    auto& spec = *model_specs[it->second];
    std::string content;
    if (embeddings)
      content = detail::embeddings_body(ereq, static_cast<size_t>(spec.dim),
                                        p.b.usage);
    else if (spec.ocr_fail
             && detail::draw(opts.seed, req.model, n, 77) < spec.ocr_fail_p)
      content = detail::ocr_failure_body(*spec.ocr_fail);
    else
      content = detail::ocr_body(file, kind == request_kind::ocr_parse);
    auto out = response_head(200, "application/json", content.size(), !keep);
    out += content;
    if (!deliver(out, 200, 0, 0))
      return end_conn(false);
    return keep;
  }

  // A normal answer, possibly with a stream fault.
  const auto& model = req.model;
  const char* finish_reason = produced < p.b.tokens ? "length" : "stop";
  // A tool-call model answers with its calls' deltas instead of tokens.
  const auto& tool_mode = p.b.tool_calls;
  std::vector<std::string> tool_deltas;
  if (!tool_mode.empty()) {
    tool_deltas = detail::tool_call_deltas(tool_mode);
    produced = static_cast<int>(tool_deltas.size());
    finish_reason = detail::tool_calls_finish_reason(tool_mode);
  }
  auto id = fmt::format("chatcmpl-sim-{}", next_id.fetch_add(1));
  auto created = static_cast<long long>(std::time(nullptr));
  std::string usage;
  if (p.b.usage)
    usage = fmt::format(
      R"("usage":{{"prompt_tokens":{},"completion_tokens":{},"total_tokens":{}}})",
      req.prompt_tokens, produced, req.prompt_tokens + produced);

  if (!req.stream) {
    auto total_ms = p.latency_ms + p.b.ttft_ms + produced * p.b.token_ms;
    if (auto w = wait_until(fd, after_ms(t0, total_ms * scale));
        w != waited::elapsed)
      return left(w, 0, 0);
    auto content = answer_head(id, "chat.completion", created, model);
    if (tool_mode.empty()) {
      content += R"(,"choices":[{"index":0,"message":{"role":"assistant","content":)";
      std::string text;
      if (req.image_text)
        text = *req.image_text;
      else
        for (auto& token : answer_of(p, model, opts.seed, produced))
          text += token;
      append_json_string(content, text);
      content += "}";
    } else {
      content += R"(,"choices":[{"index":0,"message":)";
      content += detail::tool_calls_message(tool_mode);
    }
    content += R"(,"finish_reason":")";
    content += finish_reason;
    content += "\"}]";
    if (!usage.empty())
      content += "," + usage;
    content += "}";
    if (sp.terminal != action::ok) {
      // Full Content-Length, half the body, then (after a stall) close.
      auto out = response_head(200, "application/json", content.size(), false);
      out.append(content, 0, content.size() / 2);
      if (!send_all(fd, out))
        return left(waited::client_left, 200, 0);
      waited w = waited::elapsed;
      if (sp.terminal == action::stall)
        w = wait_until(fd, after_ms(clock_type::now(),
                                    p.b.stream.stall_ms * scale));
      finish(t, 200, w == waited::client_left, 0);
      return end_conn(false);
    }
    if (sp.malformed_at >= 0)
      content.resize(content.size() / 2); // valid prefix, invalid JSON
    auto out = response_head(200, "application/json", content.size(), !keep);
    out += content;
    if (!deliver(out, 200,
                 sp.malformed_at < 0 ? static_cast<uint32_t>(produced) : 0, 0))
      return end_conn(false);
    return keep;
  }

  // Streaming.
  if (auto w = wait_until(fd, after_ms(t0, p.latency_ms * scale));
      w != waited::elapsed)
    return left(w, 0, 0);
  auto prefix = answer_head(id, "chat.completion.chunk", created, model);
  prefix += R"(,"choices":)";
  auto event = [&](std::string& out, std::string_view choices_and_rest) {
    std::string payload = "data: " + prefix;
    payload += choices_and_rest;
    payload += "}\n\n";
    append_chunk(out, payload);
  };
  std::string out = response_head(200, "text/event-stream", std::nullopt,
                                  !keep, "Cache-Control: no-cache\r\n");
  event(out, R"([{"index":0,"delta":{"role":"assistant"},"finish_reason":null}])");
  mark_status(t, 200);
  if (!send_all(fd, out))
    return left(waited::client_left, 0, 0);
  auto t1 = clock_type::now();
  auto tokens = answer_of(p, model, opts.seed, produced);
  uint32_t sent = 0;
  for (int i = 0; i <= produced; ++i) {
    out.clear();
    if (i > 0) {
      auto due = p.b.ttft_ms + (i - 1) * p.b.token_ms;
      if (auto w = wait_until(fd, after_ms(t1, due * scale));
          w != waited::elapsed)
        return left(w, 200, sent);
      std::string choice = R"([{"index":0,"delta":)";
      if (tool_mode.empty()) {
        choice += R"({"content":)";
        append_json_string(choice, tokens[static_cast<size_t>(i - 1)]);
        choice += "}";
      } else {
        choice += tool_deltas[static_cast<size_t>(i - 1)];
      }
      choice += R"(,"finish_reason":null}])";
      event(out, choice);
    }
    if (i == sp.malformed_at)
      append_chunk(out, "data: {\"choices\": [\n\n");
    if (!out.empty()) {
      if (!send_all(fd, out))
        return left(waited::client_left, 200, sent);
      if (i > 0)
        sent = static_cast<uint32_t>(i);
    }
    if (i == sp.terminal_at) {
      waited w = waited::elapsed;
      if (sp.terminal == action::stall)
        w = wait_until(fd, after_ms(clock_type::now(),
                                    p.b.stream.stall_ms * scale));
      finish(t, 200, w == waited::client_left, sent);
      return end_conn(false);
    }
  }
  if (produced == 0)
    if (auto w = wait_until(fd, after_ms(t1, p.b.ttft_ms * scale));
        w != waited::elapsed)
      return left(w, 200, sent);
  out.clear();
  event(out, fmt::format(R"([{{"index":0,"delta":{{}},"finish_reason":"{}"}}])",
                         finish_reason));
  // Hostile endings: the answer is complete, the connection is held open
  // until the client leaves.
  auto hold_open = [&] {
    if (!send_all(fd, out))
      return left(waited::client_left, 200, sent);
    return left(wait_until(fd, after_ms(clock_type::now(), 600000 * scale)),
                200, sent);
  };
  if (p.b.stream.hang_after_finish)
    return hold_open();
  if (req.include_usage && !usage.empty())
    event(out, "[]," + usage);
  if (!sp.omit_done)
    append_chunk(out, "data: [DONE]\n\n");
  if (p.b.stream.hang_after_done)
    return hold_open();
  out += "0\r\n\r\n";
  if (!deliver(out, 200, sent, 200))
    return end_conn(false);
  return keep;
}

} // namespace pgw::sim
