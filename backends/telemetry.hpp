#pragma once

/// The telemetry sink (SPEC §10): batched, off CAF's scheduler threads, never
/// failing a call. backends/sqlite/ implements it on SQLite.

#include "messages/telemetry.hpp"

#include <caf/expected.hpp>

#include <chrono>
#include <memory>
#include <string>

namespace pgw {

class telemetry_sink {
public:
  virtual ~telemetry_sink();

  /// Queue one row; never blocks on I/O. Returns false when the row was
  /// dropped (queue full); the drop is counted.
  virtual bool write(attempt_row row) = 0;
  virtual bool write(call_row row) = 0;
  virtual bool write(terminal_failure_row row) = 0;

  /// Blocks until every row queued before the call is committed or dropped,
  /// at most `timeout`. For tests and orderly shutdown.
  virtual bool flush(std::chrono::milliseconds timeout) = 0;

  virtual telemetry_status status() const = 0;
};

using telemetry_sink_ptr = std::shared_ptr<telemetry_sink>;

struct sqlite_sink_options {
  size_t max_queue = 100000;  ///< rows waiting; more are dropped (counted)
  size_t max_batch = 500;     ///< rows per transaction
  std::chrono::milliseconds max_delay{200}; ///< a partial batch waits this long
  /// After a failure (unwritable, disk full), retry opening/writing this often.
  std::chrono::milliseconds retry_every{1000};
};

/// Opens (or creates, with the schema and its migrations) the SQLite
/// database at `path` in WAL mode and starts the writer thread. An
/// unwritable path is not an error here: the sink reports it (warning, rate
/// limited; `status().healthy == false`), drops rows, and starts writing
/// when the path becomes writable.
telemetry_sink_ptr make_sqlite_sink(const std::string& path,
                                    sqlite_sink_options opts = {});

} // namespace pgw
