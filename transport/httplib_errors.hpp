#pragma once

/// How the cpp-httplib transport's client errors become an attempt's
/// failure (connect, TLS, write/read before a status): the one place that
/// knows `httplib::Error`. Everything after the status line is classified
/// by the exchange both transports share (transport/upstream_exchange.*).

#include "messages/outcome.hpp"
#include "transport/upstream_exchange.hpp"

#include <httplib.h>

namespace pgw {

/// False when `err` says no connection was made (connect refused or timed
/// out, TLS handshake failed).
bool httplib_connected(httplib::Error err);

/// Fills `res`'s reason (and whether the upstream was reached) for a
/// request on `cli` (to `host`) that ended with `err` before a complete
/// answer.
void classify_httplib_error(httplib::Error err, httplib::ClientImpl& cli,
                            const std::string& host, transport_warnings& warn,
                            attempt_result& res);

} // namespace pgw
