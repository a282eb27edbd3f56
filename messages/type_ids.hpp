#pragma once

/// The project's CAF type-ID block and atoms. Every type that travels in a
/// message is listed here; a system that exchanges pgw messages with another
/// node must call `pgw::add_message_types(cfg)` (see messages/registry.hpp).

#include <caf/type_id.hpp>

#include <cstdint>

namespace pgw {

struct chat_request;
struct chat_response;
struct error_detail;
struct attempt_result;
struct admit_request;
struct admit_result;
struct attempt_report;
struct gateway_status;
enum class outcome : uint8_t;
struct permit;
struct attempt_row;
struct call_row;
struct terminal_failure_row;
struct telemetry_status;
struct acquire_result;
struct limiter_status;
struct breaker_entry;
struct breaker_status;
struct embed_request;
struct embed_response;
struct ocr_request;
struct ocr_response;
struct cache_lookup;
struct cache_verdict;
struct cache_status;
struct stream_delta;
enum class timer_kind : uint8_t;

} // namespace pgw

CAF_BEGIN_TYPE_ID_BLOCK(pgw, caf::first_custom_type_id)

  CAF_ADD_TYPE_ID(pgw, (pgw::chat_request))
  CAF_ADD_TYPE_ID(pgw, (pgw::chat_response))
  CAF_ADD_TYPE_ID(pgw, (pgw::error_detail))
  CAF_ADD_TYPE_ID(pgw, (pgw::attempt_result))
  CAF_ADD_TYPE_ID(pgw, (pgw::admit_request))
  CAF_ADD_TYPE_ID(pgw, (pgw::admit_result))
  CAF_ADD_TYPE_ID(pgw, (pgw::attempt_report))
  CAF_ADD_TYPE_ID(pgw, (pgw::gateway_status))
  CAF_ADD_TYPE_ID(pgw, (pgw::outcome))
  CAF_ADD_TYPE_ID(pgw, (pgw::permit))
  CAF_ADD_TYPE_ID(pgw, (pgw::attempt_row))
  CAF_ADD_TYPE_ID(pgw, (pgw::call_row))
  CAF_ADD_TYPE_ID(pgw, (pgw::terminal_failure_row))
  CAF_ADD_TYPE_ID(pgw, (pgw::telemetry_status))
  CAF_ADD_TYPE_ID(pgw, (pgw::acquire_result))
  CAF_ADD_TYPE_ID(pgw, (pgw::limiter_status))
  CAF_ADD_TYPE_ID(pgw, (pgw::breaker_entry))
  CAF_ADD_TYPE_ID(pgw, (pgw::breaker_status))
  CAF_ADD_TYPE_ID(pgw, (pgw::cache_lookup))
  CAF_ADD_TYPE_ID(pgw, (pgw::cache_verdict))
  CAF_ADD_TYPE_ID(pgw, (pgw::cache_status))

  // Atom texts are at most 10 characters of [A-Za-z0-9_ ].
  CAF_ADD_ATOM(pgw, pgw::atom, chat, "chat")
  CAF_ADD_ATOM(pgw, pgw::atom, status, "status")
  CAF_ADD_ATOM(pgw, pgw::atom, cancel, "cancel")
  CAF_ADD_ATOM(pgw, pgw::atom, admit, "admit")
  CAF_ADD_ATOM(pgw, pgw::atom, report, "report")
  CAF_ADD_ATOM(pgw, pgw::atom, first_token, "first_tok")
  CAF_ADD_ATOM(pgw, pgw::atom, done, "done")
  CAF_ADD_ATOM(pgw, pgw::atom, start, "start")
  CAF_ADD_ATOM(pgw, pgw::atom, timer, "timer")
  CAF_ADD_ATOM(pgw, pgw::atom, acquire, "acquire")
  CAF_ADD_ATOM(pgw, pgw::atom, settle, "settle")
  CAF_ADD_ATOM(pgw, pgw::atom, release, "release")
  CAF_ADD_ATOM(pgw, pgw::atom, enter, "enter")
  CAF_ADD_ATOM(pgw, pgw::atom, record, "record")
  CAF_ADD_ATOM(pgw, pgw::atom, abandon, "abandon")
  CAF_ADD_ATOM(pgw, pgw::atom, decide, "decide")
  CAF_ADD_ATOM(pgw, pgw::atom, cache_get, "cache_get")
  CAF_ADD_ATOM(pgw, pgw::atom, cache_put, "cache_put")

  // Embeddings (issue 16).
  CAF_ADD_TYPE_ID(pgw, (pgw::embed_request))
  CAF_ADD_TYPE_ID(pgw, (pgw::embed_response))
  CAF_ADD_ATOM(pgw, pgw::atom, embed, "embed")

  // OCR (issue 16).
  CAF_ADD_TYPE_ID(pgw, (pgw::ocr_request))
  CAF_ADD_TYPE_ID(pgw, (pgw::ocr_response))
  CAF_ADD_ATOM(pgw, pgw::atom, ocr, "ocr")

  // Live streaming (issue 13).
  CAF_ADD_TYPE_ID(pgw, (pgw::stream_delta))
  CAF_ADD_ATOM(pgw, pgw::atom, delta, "delta")

  // Call timers (issue 10): the kind travels as a value, not as tag bits.
  CAF_ADD_TYPE_ID(pgw, (pgw::timer_kind))

  // One meaning per atom (issue 10): `cancel` is the caller's, `stop` the
  // supervisor's to an attempt, `done` an attempt's or a transport request's
  // end, `stream_end` a live call's terminal to its sink, `internal` an
  // actor's message to itself (never part of its protocol to others).
  CAF_ADD_ATOM(pgw, pgw::atom, stop, "stop")
  CAF_ADD_ATOM(pgw, pgw::atom, stream_end, "stream_end")
  CAF_ADD_ATOM(pgw, pgw::atom, internal, "internal")

  // Response cache (issue 14): a hit its caller could not use. Last, so the
  // IDs above keep their values.
  CAF_ADD_ATOM(pgw, pgw::atom, unfit, "unfit")

CAF_END_TYPE_ID_BLOCK(pgw)
