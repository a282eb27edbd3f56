#include "fakes/fake_transport.hpp"

#include "messages/stream.hpp"

#include <caf/actor_system.hpp>
#include <caf/send.hpp>

namespace pgw::test {

fake_step fake_step::ok(std::string content, int64_t prompt,
                        int64_t completion) {
  fake_step s;
  s.result.kind = outcome::ok;
  s.result.reason = "ok";
  s.result.http_status = 200;
  s.result.upstream_reached = true;
  s.result.content = std::move(content);
  s.result.finish_reason = "stop";
  s.result.usage_reported = true;
  s.result.prompt_tokens = prompt;
  s.result.completion_tokens = completion;
  return s;
}

fake_step fake_step::http(int status, outcome kind, std::string code) {
  fake_step s;
  s.result.kind = kind;
  s.result.http_status = status;
  s.result.upstream_reached = true;
  s.result.error_code = code;
  s.result.reason = code.empty() ? "http_" + std::to_string(status) : code;
  return s;
}

fake_step fake_step::unusable(int status, std::string reason) {
  auto s = http(status, outcome::source_rejected);
  s.result.reason = std::move(reason);
  return s;
}

fake_step fake_step::rate_limited(caf::optional<double> retry_after_s) {
  auto s = http(429, outcome::rate_limited);
  s.result.retry_after_s = retry_after_s;
  return s;
}

fake_step fake_step::transient(std::string reason) {
  fake_step s;
  s.result.kind = outcome::transient;
  s.result.reason = std::move(reason);
  s.result.upstream_reached = true;
  return s;
}

fake_step fake_step::never() {
  fake_step s;
  s.hang = true;
  return s;
}

fake_step fake_step::connecting() {
  fake_step s;
  s.hang = true;
  s.unsent = true;
  return s;
}

fake_step& fake_step::after(caf::timespan d) {
  delay = d;
  result.latency_ms = std::chrono::duration<double, std::milli>(d).count();
  return *this;
}

fake_step& fake_step::token_after(caf::timespan d) {
  first_token_after = d;
  return *this;
}

fake_step fake_step::streamed(std::vector<std::string> pieces,
                              caf::timespan first, caf::timespan gap) {
  std::string text;
  for (auto& p : pieces)
    text += p;
  auto s = ok(std::move(text));
  s.chunks = std::move(pieces);
  s.chunk_gap = gap;
  s.token_after(first);
  s.after(first + gap * static_cast<int64_t>(s.chunks.size()));
  return s;
}

fake_step& fake_step::cut() {
  result.kind = outcome::transient;
  result.reason = "stream_cut";
  result.finish_reason.clear();
  result.usage_reported = false;
  return *this;
}

namespace {

class fake_handle : public call_handle {
public:
  fake_handle(fake_transport* owner, size_t index)
    : owner_(owner), index_(index) {
    // nop
  }

  void cancel() override {
    owner_->mark_cancelled(index_);
  }

private:
  fake_transport* owner_;
  size_t index_;
};

} // namespace

void fake_transport::script(const std::string& source,
                            std::vector<fake_step> steps) {
  std::lock_guard<std::mutex> guard{mtx_};
  scripts_[source] = std::move(steps);
  next_[source] = 0;
}

std::shared_ptr<call_handle>
fake_transport::start(upstream_call call, caf::actor sink, uint64_t tag) {
  fake_step step;
  size_t index;
  {
    std::lock_guard<std::mutex> guard{mtx_};
    auto& name = call.source->name;
    auto& script = scripts_[name];
    if (script.empty()) {
      step = fake_step::ok();
    } else {
      auto& n = next_[name];
      step = script[std::min(n, script.size() - 1)];
      ++n;
    }
    fake_call rec;
    rec.source = name;
    rec.body = call.body;
    rec.stream = call.stream;
    rec.kind = call.kind;
    rec.tag = tag;
    rec.forward_deltas = call.forward_deltas;
    rec.sink = sink.address();
    rec.started = sink->home_system().clock().now();
    index = calls_.size();
    calls_.push_back(std::move(rec));
  }
  auto handle = std::make_shared<fake_handle>(this, index);
  if (step.unsent)
    return handle;
  // The request leaves now, unless the call was stopped first.
  if (call.gate && !call.gate->pass()) {
    mark_cancelled(index);
    return handle;
  }
  step.result.stream = call.stream;
  if (step.respond)
    step.respond(call.body, step.result);
  if (step.first_token_after) {
    caf::delayed_anon_send(sink, *step.first_token_after,
                           atom::first_token_v, tag);
    // Deltas follow the first token (the same instant keeps send order).
    if (call.forward_deltas && call.stream)
      for (size_t i = 0; i < step.chunks.size(); ++i) {
        stream_delta d;
        d.content = step.chunks[i];
        caf::delayed_anon_send(sink,
                               *step.first_token_after
                                 + step.chunk_gap * static_cast<int64_t>(i),
                               atom::delta_v, tag, std::move(d));
      }
  }
  if (!step.hang) {
    if (step.delay.count() == 0)
      caf::anon_send(sink, atom::done_v, tag, step.result);
    else
      caf::delayed_anon_send(sink, step.delay, atom::done_v, tag, step.result);
  }
  return handle;
}

std::vector<fake_call> fake_transport::calls() const {
  std::lock_guard<std::mutex> guard{mtx_};
  return calls_;
}

std::vector<std::string> fake_transport::sources_called() const {
  std::vector<std::string> out;
  for (auto& c : calls())
    out.push_back(c.source);
  return out;
}

size_t fake_transport::count(const std::string& source) const {
  std::lock_guard<std::mutex> guard{mtx_};
  size_t n = 0;
  for (auto& c : calls_)
    if (c.source == source)
      ++n;
  return n;
}

void fake_transport::mark_cancelled(size_t index) {
  std::lock_guard<std::mutex> guard{mtx_};
  if (index < calls_.size())
    calls_[index].cancelled = true;
}

} // namespace pgw::test
