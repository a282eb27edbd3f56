#include "actors/admission.hpp"

#include "actors/backend_call.hpp"

#include <caf/typed_event_based_actor.hpp>

#include <algorithm>
#include <numeric>
#include <set>

namespace pgw::detail {

namespace {

/// One admission in progress: the candidate order and what was skipped.
struct admission {
  admit_request req;
  std::vector<size_t> order;
  size_t next = 0;
  admit_result out;
  caf::typed_response_promise<admit_result> rp;
  std::set<skip_reason> reasons;
};

using admission_ptr = std::shared_ptr<admission>;

void skip(const admission_ptr& a, const std::string& source,
          skip_reason reason, double retry_in) {
  a->out.skipped[source] = reason;
  a->out.retry_in[source] = std::max(0.0, retry_in);
  a->reasons.insert(reason);
  if (!a->out.retry_after_s || retry_in < *a->out.retry_after_s)
    a->out.retry_after_s = std::max(0.0, retry_in);
}

admission_refusal refusal_of(const std::set<skip_reason>& reasons) {
  if (reasons.empty())
    return admission_refusal::none;
  if (reasons.size() > 1)
    return admission_refusal::mixed;
  switch (*reasons.begin()) {
    case skip_reason::cooling:
      return admission_refusal::cooling;
    case skip_reason::circuit_open:
      return admission_refusal::circuit_open;
    case skip_reason::quota:
      return admission_refusal::quota;
  }
  return admission_refusal::mixed;
}

void refuse(const admission_ptr& a) {
  auto& out = a->out;
  out.refusal = refusal_of(a->reasons);
  a->rp.deliver(std::move(out));
}

/// `which` ("limiter", "breaker", "limiter and breaker") failed: "the
/// limiter backend (redis 127.0.0.1:1/0) is unavailable: connect failed".
void governance_failed(const admission_ptr& a, const caf::error& err,
                       const std::string& which) {
  auto e = unavailable(err);
  if (code_of(e) != error_code::governance_unavailable) {
    a->rp.deliver(std::move(e));
    return;
  }
  auto words = words_of(e);
  std::string backend; // the Redis client names its server first
  if (auto colon = words.find(": ");
      words.rfind("redis ", 0) == 0 && colon != std::string::npos) {
    backend = " (" + words.substr(0, colon) + ")";
    words.erase(0, colon + 2);
  }
  auto verb = which.find(" and ") != std::string::npos ? " are" : " is";
  a->rp.deliver(make_error(error_code::governance_unavailable,
                           "the " + which + " backend" + backend + verb
                             + " unavailable: " + words));
}

void next_candidate(gateway_self self, admission_ptr a);

/// Which of the source's limits refused a permit, in plain words (the
/// limiter says `rpm`, `tpm` or `concurrency`).
std::string limit_reached(const source_config& src, const std::string& which) {
  auto n = [](const std::optional<int64_t>& v) {
    return v ? std::to_string(*v) : std::string{"?"};
  };
  if (which == "rpm")
    return "RPM limit reached (RPM=" + n(src.rpm) + ")";
  if (which == "tpm")
    return "TPM limit reached (TPM=" + n(src.tpm) + ")";
  if (which == "concurrency")
    return "concurrency limit reached (MAX_CONCURRENCY="
           + n(src.max_concurrency) + ")";
  return which.empty() ? std::string{"limiter refused"}
                       : "limiter refused (" + which + ")";
}

int64_t estimate(const admission_ptr& a, const source_runtime& src) {
  return a->req.est > 0 ? a->req.est : src.config->est_tokens;
}

/// The breaker refused source `i`: skipped as circuit_open.
void entry_refused(gateway_self self, admission_ptr a, size_t i,
                   const breaker_entry& entry) {
  auto& src = self->state.sources[i];
  if (!src.last_failure.empty())
    a->out.why[src.config->name] = "opened after " + src.last_failure;
  skip(a, src.config->name, skip_reason::circuit_open, entry.retry_after_s);
  next_candidate(self, std::move(a));
}

/// The breaker let the caller in; `res` is the limiter's answer. A refused
/// probe gives its lease back unless `probe_returned` (the pair's script
/// did).
void permit_answered(gateway_self self, admission_ptr a, size_t i,
                     const breaker_entry& entry, acquire_result& res,
                     bool probe_returned) {
  auto& src = self->state.sources[i];
  if (!res.granted) {
    // Give the breaker entry back: a probe lease must not wait for its
    // expiry (SPEC §6).
    if (entry.probe && !probe_returned)
      self->send(src.breaker, atom::release_v, entry.epoch);
    a->out.why[src.config->name] = limit_reached(*src.config, res.reason);
    skip(a, src.config->name, skip_reason::quota, res.retry_after_s);
    next_candidate(self, std::move(a));
    return;
  }
  ++src.in_flight;
  ++src.attempts;
  auto& out = a->out;
  out.admitted = true;
  out.source = src.config->name;
  out.granted_permit = std::move(res.granted_permit);
  out.epoch = entry.epoch;
  out.probe = entry.probe;
  out.skipped.clear();
  out.retry_in.clear();
  out.why.clear();
  out.retry_after_s = caf::none;
  a->rp.deliver(std::move(out));
}

/// Sequential: the limiter is asked once the breaker let the caller in.
void try_limiter(gateway_self self, admission_ptr a, size_t i,
                 breaker_entry entry) {
  auto& src = self->state.sources[i];
  self->request(src.limiter, caf::infinite, atom::acquire_v, estimate(a, src))
    .then(
      [self, a, i, entry](acquire_result& res) {
        permit_answered(self, a, i, entry, res, false);
      },
      [self, a, i, entry](caf::error& err) {
        if (entry.probe)
          self->send(self->state.sources[i].breaker, atom::release_v,
                     entry.epoch);
        governance_failed(a, err, "limiter");
      });
}

void enter_then_acquire(gateway_self self, admission_ptr a, size_t i) {
  self->request(self->state.sources[i].breaker, caf::infinite, atom::enter_v)
    .then(
      [self, a, i](breaker_entry& entry) {
        auto& src = self->state.sources[i];
        src.breaker_closed = entry.allowed && !entry.probe;
        if (!entry.allowed) {
          entry_refused(self, std::move(a), i, entry);
          return;
        }
        try_limiter(self, std::move(a), i, entry);
      },
      [a](caf::error& err) { governance_failed(a, err, "breaker"); });
}

/// A governance pair: one request to the limiter, one backend call.
void enter_and_acquire(gateway_self self, admission_ptr a, size_t i) {
  auto& src = self->state.sources[i];
  self
    ->request(src.limiter, caf::infinite, atom::acquire_v, estimate(a, src),
              atom::enter_v)
    .then(
      [self, a, i](breaker_entry& entry, acquire_result& res) {
        if (!entry.allowed)
          entry_refused(self, std::move(a), i, entry);
        else
          permit_answered(self, std::move(a), i, entry, res, true);
      },
      [a](caf::error& err) {
        governance_failed(a, err, "limiter and breaker");
      });
}

/// What the breaker and the limiter answered when asked at once.
struct both_answers {
  caf::optional<breaker_entry> entry;
  caf::optional<acquire_result> permit;
  caf::error err;
  std::string failed; ///< "limiter", "breaker" or both
  int pending = 2;
};

/// Both answered: a permit the breaker makes useless, or a probe lease
/// when the limiter failed, is given back at once.
void both_answered(gateway_self self, admission_ptr a, size_t i,
                   both_answers& x) {
  auto& src = self->state.sources[i];
  bool granted = x.permit && x.permit->granted;
  if (x.entry)
    src.breaker_closed = x.entry->allowed && !x.entry->probe;
  if (granted && (x.err || !x.entry->allowed))
    self->send(src.limiter, atom::settle_v, x.permit->granted_permit.id,
               int64_t{0}, atom::release_v);
  if (x.err) {
    if (x.entry && x.entry->probe)
      self->send(src.breaker, atom::release_v, x.entry->epoch);
    governance_failed(a, x.err, x.failed);
    return;
  }
  if (!x.entry->allowed)
    entry_refused(self, std::move(a), i, *x.entry);
  else
    permit_answered(self, std::move(a), i, *x.entry, *x.permit, false);
}

/// Without a pair, while the breaker was last seen closed: enter and
/// acquire asked in parallel (issue 17). Should the breaker have opened
/// meanwhile, the permit goes back at once (it used one RPM slot); the
/// next admissions ask the breaker first until it lets callers in again.
void enter_with_acquire(gateway_self self, admission_ptr a, size_t i) {
  auto& src = self->state.sources[i];
  auto x = std::make_shared<both_answers>();
  auto answered = [self, a, i, x] {
    if (--x->pending == 0)
      both_answered(self, a, i, *x);
  };
  self->request(src.breaker, caf::infinite, atom::enter_v)
    .then(
      [x, answered](breaker_entry& entry) {
        x->entry = entry;
        answered();
      },
      [x, answered](caf::error& err) {
        x->err = err;
        x->failed = x->failed.empty() ? "breaker" : "limiter and breaker";
        answered();
      });
  self->request(src.limiter, caf::infinite, atom::acquire_v, estimate(a, src))
    .then(
      [x, answered](acquire_result& res) {
        x->permit = std::move(res);
        answered();
      },
      [x, answered](caf::error& err) {
        x->err = err;
        x->failed = x->failed.empty() ? "limiter" : "limiter and breaker";
        answered();
      });
}

void next_candidate(gateway_self self, admission_ptr a) {
  auto& st = self->state;
  auto now = self->clock().now();
  while (a->next < a->order.size()) {
    auto i = a->order[a->next++];
    auto& src = st.sources[i];
    auto& name = src.config->name;
    auto& exclude = a->req.exclude;
    if (std::find(exclude.begin(), exclude.end(), name) != exclude.end())
      continue;
    if (src.cool_until > now) {
      skip(a, name, skip_reason::cooling,
           std::chrono::duration<double>(src.cool_until - now).count());
      continue;
    }
    if (src.paired)
      enter_and_acquire(self, std::move(a), i);
    else if (src.breaker_closed)
      enter_with_acquire(self, std::move(a), i);
    else
      enter_then_acquire(self, std::move(a), i);
    return;
  }
  refuse(a);
}

} // namespace

void admit(gateway_self self, admit_request req,
           caf::typed_response_promise<admit_result> rp) {
  auto& st = self->state;
  auto n = st.sources.size();
  std::vector<int32_t> in_flight(n), failures(n, 0);
  std::vector<bool> costly(n, false);
  for (size_t i = 0; i < n; ++i) {
    auto& name = st.sources[i].config->name;
    in_flight[i] = st.sources[i].in_flight;
    if (auto f = req.failures.find(name); f != req.failures.end())
      failures[i] = f->second;
    costly[i] = std::find(req.demote.begin(), req.demote.end(), name)
                != req.demote.end();
  }
  auto a = std::make_shared<admission>();
  try {
    a->order = st.picker->order(in_flight, st.rng);
  } catch (...) {
    // An error inside the selector never fails a call (SPEC §7).
    a->order.resize(n);
    std::iota(a->order.begin(), a->order.end(), size_t{0});
  }
  demote_failed(a->order, failures, costly);
  a->req = std::move(req);
  a->rp = std::move(rp);
  next_candidate(self, std::move(a));
}

void abandon(gateway_self self, const admit_result& admitted) {
  auto& st = self->state;
  auto i = st.index.find(admitted.source);
  if (!admitted.admitted || i == st.index.end())
    return;
  auto& src = st.sources[i->second];
  auto& id = admitted.granted_permit.id;
  self->send(src.limiter, atom::settle_v, id, int64_t{0}, atom::release_v);
  if (admitted.probe)
    self->send(src.breaker, atom::release_v, admitted.epoch);
  if (src.in_flight > 0)
    --src.in_flight;
}

} // namespace pgw::detail
