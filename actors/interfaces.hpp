#pragma once

/// Every typed actor interface of the runtime, in one place.

#include "pgw/messages/cache.hpp"
#include "pgw/messages/chat.hpp"
#include "pgw/messages/embed.hpp"
#include "pgw/messages/ocr.hpp"
#include "pgw/messages/errors.hpp"
#include "pgw/messages/gateway.hpp"
#include "pgw/messages/governance.hpp"
#include "pgw/messages/outcome.hpp"
#include "pgw/messages/stream.hpp"
#include "pgw/messages/telemetry.hpp"
#include "pgw/messages/type_ids.hpp"

#include <caf/replies_to.hpp>
#include <caf/typed_actor.hpp>

#include <string>

namespace pgw {

/// The status protocol every long-lived actor (gateway, limiter, breaker,
/// telemetry, cache) speaks, as VAST's `status_client_actor`: `status`
/// answers a snapshot of the actor's own counters and state. Each actor's
/// interface extends this fragment with its own snapshot type; a caller
/// that only reads status holds a `status_client_actor<Status>`.
template <class Status>
using status_client_actor
  = caf::typed_actor<caf::replies_to<atom::status>::with<Status>>;

/// One per scope: takes chat calls, spawns a supervisor per call, admits
/// attempts to sources, keeps the selector state and the 429 cooldown memo.
using gateway_actor = status_client_actor<gateway_status>::extend<
  /// A logical chat call: exactly one response or error per request.
  caf::replies_to<atom::chat, chat_request>::with<chat_response>,
  /// A live chat call (issue 13): as above, and the sink actor receives
  /// `(atom::delta, stream_delta)` messages in order — only from the leg
  /// that produced the first token first — then exactly one terminal
  /// `(atom::stream_end, chat_response)` or `(atom::stream_end, caf::error)`.
  /// A failure after the first delta is `stream_interrupted`, never a
  /// splice of two sources. Structured-output calls deliver the validated
  /// answer as one delta at the end.
  caf::replies_to<atom::chat, chat_request, caf::actor>::with<chat_response>,
  /// A logical embedding call: exactly one response or error per request.
  caf::replies_to<atom::embed, embed_request>::with<embed_response>,
  /// A logical OCR call: exactly one response or error per request.
  caf::replies_to<atom::ocr, ocr_request>::with<ocr_response>,
  /// Admission for the next attempt of a call (supervisors only).
  caf::replies_to<atom::admit, admit_request>::with<admit_result>,
  /// The end of an admitted attempt (attempts only), exactly once each.
  caf::reacts_to<atom::report, attempt_report>,
  /// An admission that will not run (its call ended meanwhile): settle 0,
  /// release, give a probe lease back.
  caf::reacts_to<atom::abandon, admit_result>,
  /// Cancels the call with this id (no-op when unknown or finished).
  caf::reacts_to<atom::cancel, std::string>,
  /// Arms a timer of the calling call (chat, embedding or OCR) to fire
  /// after the delay; the call gets `(atom::timer, kind, id)`. Timers of a
  /// call that ended are dropped. The one timer path of every call actor:
  /// why, in actors/timer_table.hpp.
  caf::reacts_to<atom::timer, timer_kind, uint64_t, caf::timespan>,
  /// The gateway's own timer tick.
  caf::reacts_to<atom::timer>>;

/// What the gateway knows of a call actor that armed a timer (a call
/// supervisor, an embedding or an OCR call).
using timer_owner_actor =
  caf::typed_actor<caf::reacts_to<atom::timer, timer_kind, uint64_t>>;

/// One per logical call: the retry loop, timers, winner choice.
using call_supervisor_actor = caf::typed_actor<
  /// Starts the call; the response goes to the original requester.
  caf::replies_to<atom::start>::with<chat_response>,
  /// An attempt's first token (leg id).
  caf::reacts_to<atom::first_token, uint64_t>,
  /// A live call: a streamed delta of an attempt (leg id).
  caf::reacts_to<atom::delta, uint64_t, stream_delta>,
  /// An attempt's outcome (leg id).
  caf::reacts_to<atom::done, uint64_t, attempt_result>,
  /// A timer armed at the gateway fired: stall window, deadline, retry
  /// (retry generation) or hedge (round).
  caf::reacts_to<atom::timer, timer_kind, uint64_t>,
  /// A hedge leg succeeded; it wins unless the primary's success was
  /// already waiting in the mailbox (leg id).
  caf::reacts_to<atom::decide, uint64_t>,
  /// The caller cancelled the call.
  caf::reacts_to<atom::cancel>,
  /// Structured output: a cache hit's check, finished on the check runner.
  caf::reacts_to<atom::internal, std::shared_ptr<local_task>>>;

/// One per embedding call: sub-batches, their admissions and retries.
using embed_call_actor = caf::typed_actor<
  /// Starts the call; the response goes to the original requester.
  caf::replies_to<atom::start>::with<embed_response>,
  /// From the transport: ignored (embeddings do not stream).
  caf::reacts_to<atom::first_token, uint64_t>,
  /// From the transport: a sub-batch request ended (request tag).
  caf::reacts_to<atom::done, uint64_t, attempt_result>,
  /// A timer armed at the gateway fired: the call deadline, or a
  /// sub-batch's backoff (retry; generation and batch index).
  caf::reacts_to<atom::timer, timer_kind, uint64_t>,
  /// The caller cancelled the call.
  caf::reacts_to<atom::cancel>>;

/// One per OCR call: its admissions, attempts and retries.
using ocr_call_actor = caf::typed_actor<
  caf::replies_to<atom::start>::with<ocr_response>,
  caf::reacts_to<atom::first_token, uint64_t>,
  caf::reacts_to<atom::done, uint64_t, attempt_result>,
  caf::reacts_to<atom::timer, timer_kind, uint64_t>,
  caf::reacts_to<atom::cancel>>;

/// One per source: RPM/TPM/concurrency state and permits (SPEC §5).
using limiter_actor = status_client_actor<limiter_status>::extend<
  /// A permit for `est` tokens, or a refusal with a reason and retry time.
  caf::replies_to<atom::acquire, int64_t>::with<acquire_result>,
  /// Replaces the permit's reservation by the actual amount, once.
  caf::reacts_to<atom::settle, std::string, int64_t>,
  /// Frees the permit's in-flight slot, once.
  caf::reacts_to<atom::release, std::string>,
  /// Both at once (one round trip to Redis): an abandoned admission.
  caf::reacts_to<atom::settle, std::string, int64_t, atom::release>,
  /// The usual end of an attempt: settle and release, and the outcome for
  /// the source's breaker (stamped with the entry's epoch). With a
  /// governance pair one backend call; otherwise the limiter settles and
  /// hands the outcome to its breaker (issue 17).
  caf::reacts_to<atom::settle, std::string, int64_t, atom::release, uint64_t,
                 outcome>,
  /// Enters the source's breaker, then acquires a permit for `est`: one
  /// backend call, on the breaker's behalf, for a source with a governance
  /// pair (`governance_unavailable` without one). The permit is empty when
  /// the breaker refused; a probe that got no permit gave its lease back.
  caf::replies_to<atom::acquire, int64_t, atom::enter>::with<breaker_entry,
                                                             acquire_result>,
  /// Internal: a backend call finished on an I/O thread.
  caf::reacts_to<atom::internal, std::shared_ptr<local_task>>>;

/// One per source: the breaker state machine (SPEC §6).
using breaker_actor = status_client_actor<breaker_status>::extend<
  /// May a caller run an attempt now (and is it the probe)?
  caf::replies_to<atom::enter>::with<breaker_entry>,
  /// An attempt's outcome, stamped with the epoch it entered at.
  caf::reacts_to<atom::record, uint64_t, outcome>,
  /// A probe that was cancelled or lost admission gives its lease back.
  caf::reacts_to<atom::release, uint64_t>,
  /// Internal: a backend call finished on an I/O thread.
  caf::reacts_to<atom::internal, std::shared_ptr<local_task>>>;

/// One per process: batched writes of attempt, call and terminal failure
/// rows (SPEC §10); never slows or fails a call.
using telemetry_actor = status_client_actor<telemetry_status>::extend<
  caf::reacts_to<atom::record, attempt_row>,
  caf::reacts_to<atom::record, call_row>,
  caf::reacts_to<atom::record, terminal_failure_row>>;

/// One per attempt: one upstream request through the transport.
using attempt_actor = caf::typed_actor<
  /// Sent by the supervisor right before it stops the attempt: why
  /// (`hedge_cancelled` or `cancelled`).
  caf::reacts_to<atom::stop, outcome>,
  caf::reacts_to<atom::first_token, uint64_t>,
  /// A live call: a delta from the transport, passed to the supervisor.
  caf::reacts_to<atom::delta, uint64_t, stream_delta>,
  caf::reacts_to<atom::done, uint64_t, attempt_result>,
  /// Structured output: the answer's check, finished on the check runner.
  caf::reacts_to<atom::internal, std::shared_ptr<local_task>>>;

/// One per process: the response cache (issue 14). Owns the backend and
/// the single-flight table: identical cacheable calls in flight at once
/// make one upstream call.
using cache_actor = status_client_actor<cache_status>::extend<
  /// Before admission: a hit, or lead (call upstream; identical calls wait
  /// for this one), or pass. A call that waits gets its leader's answer as
  /// a hit, becomes the leader when its leader fails or leaves, or gets
  /// `call_deadline_exceeded` when `wait_s` passes first.
  caf::replies_to<atom::cache_get, cache_lookup>::with<cache_verdict>,
  /// After a complete success: stores the answer when it is cacheable and
  /// the mode writes (for the scope's TTL); serves the lease's waiters
  /// (key, lease, mode, scope, answer).
  caf::reacts_to<atom::cache_put, std::string, uint64_t, std::string,
                 std::string, chat_response>,
  /// A hit the caller could not use (a structured call's schema refused
  /// the stored answer; `coalesced` as its verdict said): counted in
  /// `unfit_hits` instead of a hit.
  caf::reacts_to<atom::unfit, bool>,
  /// The leader's call failed: the next waiter leads (key, lease).
  caf::reacts_to<atom::abandon, std::string, uint64_t>,
  /// Internal: the earliest waiter's wait may have ended (one delayed
  /// message for the earliest, not one per waiter: see `cache_state::dues`).
  caf::reacts_to<atom::timer>,
  /// Internal: a backend call finished on an I/O thread.
  caf::reacts_to<atom::internal, std::shared_ptr<local_task>>>;

} // namespace pgw
