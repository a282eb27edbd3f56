#include "actors/admission.hpp"

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
  std::set<std::string> reasons;
};

using admission_ptr = std::shared_ptr<admission>;

void skip(const admission_ptr& a, const std::string& source,
          const std::string& reason, double retry_in) {
  a->out.skipped[source] = reason;
  a->out.retry_in[source] = std::max(0.0, retry_in);
  a->reasons.insert(reason);
  if (!a->out.retry_after_s || retry_in < *a->out.retry_after_s)
    a->out.retry_after_s = std::max(0.0, retry_in);
}

void refuse(const admission_ptr& a) {
  auto& out = a->out;
  if (a->reasons.empty())
    out.refusal = "none";
  else if (a->reasons.size() == 1)
    out.refusal = *a->reasons.begin();
  else
    out.refusal = "mixed";
  a->rp.deliver(std::move(out));
}

void governance_failed(const admission_ptr& a, const caf::error& err) {
  if (code_of(err)) {
    a->rp.deliver(err);
    return;
  }
  a->rp.deliver(make_error(error_code::governance_unavailable,
                           "governance backend failed: " + to_string(err)));
}

void next_candidate(gateway_self self, admission_ptr a);

void try_limiter(gateway_self self, admission_ptr a, size_t i,
                 breaker_entry entry) {
  auto& src = self->state.sources[i];
  auto est = a->req.est > 0 ? a->req.est : src.config->est_tokens;
  self->request(src.limiter, caf::infinite, atom::acquire_v, est)
    .then(
      [self, a, i, entry](acquire_result& res) {
        auto& src = self->state.sources[i];
        if (!res.granted) {
          // Give the breaker entry back: a probe lease must not wait for
          // its expiry (SPEC §6).
          if (entry.probe)
            self->send(src.breaker, atom::release_v, entry.epoch);
          skip(a, src.config->name, "quota", res.retry_after_s);
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
        out.retry_after_s = caf::none;
        a->rp.deliver(std::move(out));
      },
      [self, a, i, entry](caf::error& err) {
        if (entry.probe)
          self->send(self->state.sources[i].breaker, atom::release_v,
                     entry.epoch);
        governance_failed(a, err);
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
      skip(a, name, "cooling",
           std::chrono::duration<double>(src.cool_until - now).count());
      continue;
    }
    self->request(src.breaker, caf::infinite, atom::enter_v)
      .then(
        [self, a, i](breaker_entry& entry) {
          if (!entry.allowed) {
            skip(a, self->state.sources[i].config->name, "circuit_open",
                 entry.retry_after_s);
            next_candidate(self, std::move(a));
            return;
          }
          try_limiter(self, std::move(a), i, entry);
        },
        [a](caf::error& err) { governance_failed(a, err); });
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
  for (size_t i = 0; i < n; ++i) {
    in_flight[i] = st.sources[i].in_flight;
    if (auto f = req.failures.find(st.sources[i].config->name);
        f != req.failures.end())
      failures[i] = f->second;
  }
  auto a = std::make_shared<admission>();
  try {
    a->order = st.picker->order(in_flight, st.rng);
  } catch (...) {
    // An error inside the selector never fails a call (SPEC §7).
    a->order.resize(n);
    std::iota(a->order.begin(), a->order.end(), size_t{0});
  }
  demote_failed(a->order, failures);
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
