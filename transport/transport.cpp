#include "transport/transport.hpp"

namespace pgw {

call_handle::~call_handle() {
  // nop
}

transport::~transport() {
  // nop
}

} // namespace pgw
