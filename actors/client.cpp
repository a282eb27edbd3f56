#include "actors/client.hpp"

#include "config/support/log.hpp"
#include "messages/errors.hpp"

#include <caf/event_based_actor.hpp>
#include <caf/exit_reason.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/send.hpp>

#include <fmt/format.h>

#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>

namespace pgw {

namespace {

/// Runs a caller's callback `what` on a CAF thread: an exception it throws
/// is logged and goes no further (it would end the actor that runs it, and
/// with it every other call that actor carries). Says what was thrown, if
/// anything.
template <class F>
std::optional<std::string> contained(const char* what, F&& fn) {
  std::string threw;
  try {
    fn();
    return std::nullopt;
  } catch (const std::exception& e) {
    threw = fmt::format("{} threw: {}", what, e.what());
  } catch (...) {
    threw = fmt::format("{} threw a non-standard exception", what);
  }
  log::error("client", "{}", threw);
  return threw;
}

/// `err` in pgw's category: CAF's own errors (a request to a gateway that
/// has stopped) become `cancelled` or `internal` with CAF's words.
caf::error pgw_error(caf::error err) {
  if (!err || code_of(err))
    return err;
  auto words = to_string(err);
  if (err == caf::sec::request_receiver_down)
    return make_error(error_code::cancelled,
                      "the gateway is not running (" + words + ")");
  return make_error(error_code::internal,
                    "the gateway did not answer (" + words + ")");
}

/// A callback called once: with the answer (`set`), or with an `internal`
/// error naming `why` when it is dropped unanswered (the actor that was to
/// answer stopped first).
template <class Response>
struct once_callback {
  std::function<void(caf::expected<Response>)> fn;
  const char* why;
  bool called = false;

  once_callback(std::function<void(caf::expected<Response>)> f, const char* w)
    : fn(std::move(f)), why(w) {
    // nop
  }
  once_callback(const once_callback&) = delete;
  once_callback& operator=(const once_callback&) = delete;

  void set(caf::expected<Response> r) {
    called = true;
    contained("a callback", [&] { fn(std::move(r)); });
  }

  ~once_callback() {
    if (!called)
      contained("a callback", [&] { fn(make_error(error_code::internal, why)); });
  }
};

} // namespace

// -- the requester: one actor per client, not one per call --------------------

/// The calls a client hands its requester actor. The client thread queues a
/// call and wakes the actor with `start`; the actor takes every queued call
/// and sends it to the gateway, each answer going to its call's promise.
struct client::requester {
  using chat_promise = std::promise<caf::expected<chat_response>>;

  /// A blocking call's answer: set once by the requester actor, waited for
  /// by the calling thread. Not a std::promise: its set_value makes two
  /// futex calls on the actor's thread (the once flag's wake, always made,
  /// and the state's); setting a slot makes one (issue 17).
  struct answer_slot {
    std::mutex mtx;
    std::condition_variable cv;
    std::optional<caf::expected<chat_response>> value;

    /// The first answer counts.
    void set(caf::expected<chat_response> v) {
      {
        std::lock_guard<std::mutex> guard{mtx};
        if (value)
          return;
        value.emplace(std::move(v));
      }
      cv.notify_one(); // the slot outlives this: the actor holds it
    }

    caf::expected<chat_response> wait() {
      std::unique_lock<std::mutex> guard{mtx};
      cv.wait(guard, [this] { return value.has_value(); });
      return std::move(*value);
    }
  };

  /// The actor's side of a slot: when the call's handlers go without
  /// answering (the actor system stopping), the caller still gets one
  /// answer, as a std::promise would have broken.
  struct slot_guard {
    std::shared_ptr<answer_slot> slot;
    explicit slot_guard(std::shared_ptr<answer_slot> s) : slot(std::move(s)) {
      // nop
    }
    slot_guard(const slot_guard&) = delete;
    slot_guard& operator=(const slot_guard&) = delete;
    ~slot_guard() {
      slot->set(make_error(error_code::internal,
                           "the client's requester stopped before the "
                           "call's answer"));
    }
  };

  using then_guard = once_callback<chat_response>;

  /// An embedding or OCR call: sends its own request from the actor and
  /// calls `finished` once answered.
  using side_send
    = std::function<void(caf::event_based_actor*, std::function<void()>)>;

  /// A queued call: a chat call whose answer goes to `promise`
  /// (chat_async), `slot` (chat) or `then` (chat_then); an embedding or OCR
  /// call (`side`); or, with none of them, a cancel of the call with id
  /// `cancel_id`, sent after the calls queued before it, so a call is known
  /// to the gateway when its cancel comes.
  struct job {
    chat_request req;
    std::shared_ptr<chat_promise> promise;
    std::shared_ptr<slot_guard> slot;
    std::shared_ptr<then_guard> then = nullptr;
    std::string cancel_id = {};
    side_send side = nullptr;
  };

  struct queue {
    std::mutex mtx;
    std::deque<job> jobs;
    bool retired = false; ///< the client and its copies are gone
  };

  std::shared_ptr<queue> q = std::make_shared<queue>();
  caf::actor actor;

  requester(caf::actor_system& sys, const gateway_actor& gw) {
    actor = sys.spawn([gw, q = q](caf::event_based_actor* self)
                        -> caf::behavior {
      // Calls sent and not answered yet; the actor quits once retired and
      // none is left.
      auto pending = std::make_shared<size_t>(0);
      auto maybe_quit = [self, q, pending] {
        std::lock_guard<std::mutex> guard{q->mtx};
        if (q->retired && q->jobs.empty() && *pending == 0)
          self->quit();
      };
      return {
        [self, gw, q, pending, maybe_quit](atom::start) {
          std::deque<job> taken;
          {
            std::lock_guard<std::mutex> guard{q->mtx};
            taken.swap(q->jobs);
          }
          for (auto& j : taken) {
            if (j.side) {
              ++*pending;
              j.side(self, [pending, maybe_quit] {
                --*pending;
                maybe_quit();
              });
              continue;
            }
            if (!j.promise && !j.slot && !j.then) {
              self->send(gw, atom::cancel_v, std::move(j.cancel_id));
              continue;
            }
            ++*pending;
            auto promise = std::move(j.promise);
            auto slot = std::move(j.slot);
            auto then = std::move(j.then);
            auto answer = [promise, slot,
                           then](caf::expected<chat_response> r) {
              if (then)
                then->set(std::move(r));
              else if (slot)
                slot->slot->set(std::move(r));
              else
                promise->set_value(std::move(r));
            };
            self->request(gw, caf::infinite, atom::chat_v, std::move(j.req))
              .then(
                [answer, pending, maybe_quit](chat_response& resp) {
                  answer(std::move(resp));
                  --*pending;
                  maybe_quit();
                },
                [answer, pending, maybe_quit](caf::error& err) {
                  answer(pgw_error(std::move(err)));
                  --*pending;
                  maybe_quit();
                });
          }
          maybe_quit();
        },
      };
    });
  }

  ~requester() {
    {
      std::lock_guard<std::mutex> guard{q->mtx};
      q->retired = true;
    }
    caf::anon_send(actor, atom::start_v);
  }

  std::future<caf::expected<chat_response>> submit(chat_request req) {
    auto promise = std::make_shared<chat_promise>();
    auto fut = promise->get_future();
    queue_job(job{std::move(req), std::move(promise), nullptr});
    return fut;
  }

  caf::expected<chat_response> call(chat_request req) {
    auto slot = std::make_shared<answer_slot>();
    queue_job(job{std::move(req), nullptr,
                  std::make_shared<slot_guard>(slot)});
    return slot->wait();
  }

  void queue_job(job j) {
    bool wake;
    {
      std::lock_guard<std::mutex> guard{q->mtx};
      // One wake for a batch: the actor takes every call queued until it
      // runs.
      wake = q->jobs.empty();
      q->jobs.push_back(std::move(j));
    }
    if (wake)
      caf::anon_send(actor, atom::start_v);
  }
};

client::client(caf::actor_system& sys, gateway_actor gateway)
  : sys_(sys),
    gateway_(std::move(gateway)),
    requester_(std::make_shared<requester>(sys_, gateway_)) {
  // nop
}

caf::expected<chat_response> client::chat(chat_request req) {
  return requester_->call(std::move(req));
}

std::future<caf::expected<chat_response>> client::chat_async(chat_request req) {
  return requester_->submit(std::move(req));
}

void client::chat_then(chat_request req,
                       std::function<void(caf::expected<chat_response>)> done) {
  requester_->queue_job(requester::job{
    std::move(req), nullptr, nullptr,
    std::make_shared<requester::then_guard>(
      std::move(done), "the client's requester stopped before the call's "
                       "answer")});
}

// -- live calls (issue 13) -----------------------------------------------------

live_call::live_call(caf::actor helper,
                     std::future<caf::expected<chat_response>> result)
  : helper_(std::move(helper)), result_(std::move(result)) {
  // nop
}

live_call& live_call::operator=(live_call&& other) noexcept {
  if (this != &other) {
    cancel();
    helper_ = std::move(other.helper_);
    result_ = std::move(other.result_);
    answer_ = std::move(other.answer_);
  }
  return *this;
}

live_call::~live_call() {
  cancel();
}

caf::expected<chat_response> live_call::wait() {
  if (!answer_)
    answer_.emplace(result_.get());
  return *answer_;
}

void live_call::cancel() {
  // The helper answers only once the call has stopped: it stops the call's
  // requester, and the call sends its terminal event after its legs are down.
  if (helper_)
    caf::anon_send(helper_, atom::cancel_v);
}

live_call client::chat_stream(chat_request req,
                              std::function<void(const stream_delta&)> on_delta,
                              std::function<void()> on_end) {
  using result_type = caf::expected<chat_response>;
  auto promise = std::make_shared<std::promise<result_type>>();
  auto fut = promise->get_future();
  auto gw = gateway_;
  // `decided` guards the promise: set once, by the terminal event (which a
  // cancelled call sends too, after its legs are stopped).
  auto helper = sys_.spawn([gw, req = std::move(req), promise,
                            on_delta = std::move(on_delta),
                            on_end = std::move(on_end)](
                             caf::event_based_actor* self) -> caf::behavior {
    auto decided = std::make_shared<bool>(false);
    // Set when `on_delta` threw: the call is cancelled, and its result says
    // why.
    auto sink_failed = std::make_shared<std::string>();
    auto decide = [promise, decided, sink_failed, on_end](result_type r) {
      if (!*decided) {
        *decided = true;
        if (!sink_failed->empty())
          r = make_error(error_code::cancelled,
                         "the call was cancelled: " + *sink_failed);
        promise->set_value(std::move(r));
        if (on_end)
          contained("on_end", on_end);
      }
    };
    // A helper that ends without a terminal event still sets the result
    // once (the waiting caller is woken by `on_end`).
    self->attach_functor([decide] {
      decide(make_error(error_code::cancelled,
                        "the call ended without a terminal event"));
    });
    // The call's requester is a child, not this sink: the gateway cancels
    // a call whose requester goes away, and the call still sends this sink
    // its terminal event once its attempts are stopped and settled. A
    // helper that decided on its own at the cancel raced the caller's
    // shutdown of the gateway and could leave the call running (issue 13).
    auto sink = caf::actor_cast<caf::actor>(self);
    auto requester = self->spawn(
      [gw, req, sink](caf::event_based_actor* requester_self) {
        requester_self->request(gw, caf::infinite, atom::chat_v, req, sink)
          .then([](chat_response&) {},
                [sink](caf::error& err) {
                  // No terminal came (the gateway is gone): the error is.
                  caf::anon_send(sink, atom::stream_end_v,
                                 pgw_error(std::move(err)));
                });
      });
    return {
      [self, decided, sink_failed, requester,
       on_delta](atom::delta, const stream_delta& d) {
        if (*decided || !sink_failed->empty() || !on_delta)
          return;
        if (auto threw = contained("on_delta", [&] { on_delta(d); })) {
          // Cancelled as if the caller had gone: its legs stop, the
          // permits settle, and the terminal event decides the result.
          *sink_failed = std::move(*threw);
          self->send_exit(requester, caf::exit_reason::user_shutdown);
        }
      },
      [self, decide](atom::stream_end, chat_response& resp) {
        decide(std::move(resp));
        self->quit();
      },
      [self, decide](atom::stream_end, caf::error& err) {
        decide(std::move(err));
        self->quit();
      },
      [self, requester](atom::cancel) {
        self->send_exit(requester, caf::exit_reason::user_shutdown);
      },
    };
  });
  return live_call{std::move(helper), std::move(fut)};
}

caf::expected<embed_response> client::embed(std::vector<std::string> inputs) {
  embed_request req;
  req.inputs = std::move(inputs);
  return embed_async(std::move(req)).get();
}

namespace {

/// Sends `(atom, req)` to `gw` through the client's requester, in order
/// with its other calls and cancels (a cancel right after cannot overtake
/// the call); `done` gets the single answer once, on a CAF thread (an
/// `internal` error if the requester stops without one).
template <class Response, class Atom, class Request>
void ask_then(client::requester& rq, const gateway_actor& gw,
              Atom atom_value, Request req,
              std::function<void(caf::expected<Response>)> done) {
  auto once = std::make_shared<once_callback<Response>>(
    std::move(done), "the client's requester stopped before the call's "
                     "answer");
  client::requester::job j;
  j.side = [gw, atom_value, req = std::move(req),
            once](caf::event_based_actor* self,
                  std::function<void()> finished) {
    self->request(gw, caf::infinite, atom_value, req)
      .then(
        [once, finished](Response& resp) {
          once->set(std::move(resp));
          finished();
        },
        [once, finished](caf::error& err) {
          once->set(pgw_error(std::move(err)));
          finished();
        });
  };
  rq.queue_job(std::move(j));
}

/// `ask_then` with the answer in a future.
template <class Response, class Atom, class Request>
std::future<caf::expected<Response>>
ask(client::requester& rq, const gateway_actor& gw, Atom atom_value,
    Request req) {
  auto promise = std::make_shared<std::promise<caf::expected<Response>>>();
  auto fut = promise->get_future();
  ask_then<Response>(rq, gw, atom_value, std::move(req),
                     [promise](caf::expected<Response> r) {
                       promise->set_value(std::move(r));
                     });
  return fut;
}

} // namespace

std::future<caf::expected<embed_response>>
client::embed_async(embed_request req) {
  return ask<embed_response>(*requester_, gateway_, atom::embed_v,
                            std::move(req));
}

caf::expected<ocr_response> client::recognize_text(std::string image) {
  ocr_request req;
  req.image = std::move(image);
  return ocr_async(std::move(req)).get();
}

caf::expected<ocr_response> client::parse_layout(std::string image) {
  ocr_request req;
  req.image = std::move(image);
  req.layout = true;
  return ocr_async(std::move(req)).get();
}

std::future<caf::expected<ocr_response>> client::ocr_async(ocr_request req) {
  return ask<ocr_response>(*requester_, gateway_, atom::ocr_v, std::move(req));
}

void client::embed_then(embed_request req,
                        std::function<void(caf::expected<embed_response>)> done) {
  ask_then<embed_response>(*requester_, gateway_, atom::embed_v,
                           std::move(req), std::move(done));
}

void client::ocr_then(ocr_request req,
                      std::function<void(caf::expected<ocr_response>)> done) {
  ask_then<ocr_response>(*requester_, gateway_, atom::ocr_v, std::move(req),
                         std::move(done));
}

void client::cancel(const std::string& call_id) {
  // Through the requester: a call this client queued before is at the
  // gateway by then (sent straight, the cancel could overtake it).
  requester::job j;
  j.cancel_id = call_id;
  requester_->queue_job(std::move(j));
}

caf::expected<gateway_status> client::status() {
  caf::scoped_actor self{sys_};
  caf::expected<gateway_status> out{caf::error{}};
  self->request(gateway_, caf::infinite, atom::status_v)
    .receive([&](gateway_status& st) { out = std::move(st); },
             [&](caf::error& err) { out = std::move(err); });
  return out;
}

} // namespace pgw
