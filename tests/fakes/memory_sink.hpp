#pragma once

/// A telemetry sink that keeps rows in memory, for actor tests.

#include "backends/telemetry.hpp"

#include <mutex>
#include <vector>

namespace pgw::test {

class memory_sink : public telemetry_sink {
public:
  bool write(attempt_row row) override {
    std::lock_guard<std::mutex> guard{mtx_};
    attempts.push_back(std::move(row));
    return true;
  }

  bool write(call_row row) override {
    std::lock_guard<std::mutex> guard{mtx_};
    calls.push_back(std::move(row));
    return true;
  }

  bool write(terminal_failure_row row) override {
    std::lock_guard<std::mutex> guard{mtx_};
    failures.push_back(std::move(row));
    return true;
  }

  bool flush(std::chrono::milliseconds) override {
    return true;
  }

  telemetry_status status() const override {
    std::lock_guard<std::mutex> guard{mtx_};
    telemetry_status st;
    st.written = attempts.size() + calls.size() + failures.size();
    st.queued = st.written;
    return st;
  }

  std::vector<attempt_row> attempts;
  std::vector<call_row> calls;
  std::vector<terminal_failure_row> failures;

private:
  mutable std::mutex mtx_;
};

} // namespace pgw::test
