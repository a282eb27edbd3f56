#include "transport/sse_parser.hpp"

#include <doctest/doctest.h>

#include <random>
#include <string>
#include <vector>

using namespace pgw;

namespace {

/// Feeds `input` whole, then finishes.
std::vector<sse_event> parse_all(const std::string& input,
                                 size_t max_line = 4 * 1024 * 1024) {
  sse_parser p{max_line};
  std::vector<sse_event> out;
  p.feed(input.data(), input.size(), out);
  p.finish(out);
  return out;
}

/// Feeds `input` in pieces of the given sizes (the rest in one last piece).
std::vector<sse_event> parse_chunked(const std::string& input,
                                     const std::vector<size_t>& sizes) {
  sse_parser p;
  std::vector<sse_event> out;
  size_t pos = 0;
  for (auto n : sizes) {
    if (pos >= input.size())
      break;
    n = std::min(n, input.size() - pos);
    p.feed(input.data() + pos, n, out);
    pos += n;
  }
  p.feed(input.data() + pos, input.size() - pos, out);
  p.finish(out);
  return out;
}

void check_same(const std::vector<sse_event>& got,
                const std::vector<sse_event>& want) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    CAPTURE(i);
    CHECK(got[i].event == want[i].event);
    CHECK(got[i].data == want[i].data);
  }
}

// A stream with every feature: BOM, comments, CRLF / CR / LF line ends,
// multi-line data, event names, ignored fields, a field without a colon, no
// blank line at the end.
const std::string rich_stream = "\xEF\xBB\xBF"
                                ": keep-alive\r\n"
                                "\r\n"
                                "event: message\r\n"
                                "data: {\"a\":1}\r\n"
                                "\r\n"
                                "data: line one\n"
                                "data:line two\n"
                                "data:  indented\n"
                                "id: 7\n"
                                "retry: 1000\n"
                                "\n"
                                ":\r"
                                "data: cr only\r"
                                "\r"
                                "data\n"
                                "\n"
                                "event: error\r\n"
                                "data: {\"error\":{}}\r\n"
                                "\r\n"
                                "data: [DONE]";

const std::vector<sse_event> rich_events = {
  {"message", "{\"a\":1}"},
  {"", "line one\nline two\n indented"},
  {"", "cr only"},
  {"", ""},
  {"error", "{\"error\":{}}"},
  {"", "[DONE]"},
};

} // namespace

TEST_CASE("sse: a rich stream fed whole gives its events in order") {
  check_same(parse_all(rich_stream), rich_events);
  sse_parser p;
  std::vector<sse_event> out;
  p.feed(rich_stream.data(), rich_stream.size(), out);
  CHECK(out.size() == rich_events.size() - 1); // last event needs finish()
  p.finish(out);
  CHECK(out.size() == rich_events.size());
  CHECK(p.comments() == 2);
  CHECK_FALSE(p.failed());
}

TEST_CASE("sse: fed one byte at a time, the same events") {
  std::vector<size_t> ones(rich_stream.size(), 1);
  check_same(parse_chunked(rich_stream, ones), rich_events);
}

TEST_CASE("sse: every split into two pieces gives the same events") {
  for (size_t cut = 0; cut <= rich_stream.size(); ++cut) {
    CAPTURE(cut);
    check_same(parse_chunked(rich_stream, {cut}), rich_events);
  }
}

TEST_CASE("sse: random chunkings give the same events") {
  std::mt19937 rng{12345};
  std::uniform_int_distribution<size_t> size_dist{1, 9};
  for (int round = 0; round < 200; ++round) {
    std::vector<size_t> sizes;
    for (size_t total = 0; total < rich_stream.size();) {
      sizes.push_back(size_dist(rng));
      total += sizes.back();
    }
    CAPTURE(round);
    check_same(parse_chunked(rich_stream, sizes), rich_events);
  }
}

TEST_CASE("sse: CRLF split between two feeds is one line end") {
  sse_parser p;
  std::vector<sse_event> out;
  std::string a = "data: a\r";
  std::string b = "\ndata: b\r";
  std::string c = "\n\r";
  std::string d = "\n";
  p.feed(a.data(), a.size(), out);
  p.feed(b.data(), b.size(), out);
  CHECK(out.empty());
  p.feed(c.data(), c.size(), out);
  REQUIRE(out.size() == 1);
  CHECK(out[0].data == "a\nb");
  p.feed(d.data(), d.size(), out);
  p.finish(out);
  CHECK(out.size() == 1);
}

TEST_CASE("sse: a CR alone ends a line, and CR CR is a blank line") {
  check_same(parse_all("data: x\r\rdata: y\r\r"), {{"", "x"}, {"", "y"}});
}

TEST_CASE("sse: comments are counted and dispatch nothing") {
  sse_parser p;
  std::vector<sse_event> out;
  std::string in = ": ping\n\n:\n\n: OPENROUTER PROCESSING\n\n";
  p.feed(in.data(), in.size(), out);
  p.finish(out);
  CHECK(out.empty());
  CHECK(p.comments() == 3);
}

TEST_CASE("sse: field parsing rules") {
  SUBCASE("one leading space is dropped, not two") {
    check_same(parse_all("data:  two\n\n"), {{"", " two"}});
  }
  SUBCASE("no space after the colon") {
    check_same(parse_all("data:x\n\n"), {{"", "x"}});
  }
  SUBCASE("a colon inside the value is kept") {
    check_same(parse_all("data: a: b\n\n"), {{"", "a: b"}});
  }
  SUBCASE("a field without a colon has an empty value") {
    check_same(parse_all("data\ndata\n\n"), {{"", "\n"}});
  }
  SUBCASE("unknown fields are ignored") {
    check_same(parse_all("id: 1\nretry: 5\nfoo: bar\ndata: x\n\n"),
               {{"", "x"}});
  }
  SUBCASE("field names are case-sensitive") {
    check_same(parse_all("Data: x\n\ndata: y\n\n"), {{"", "y"}});
  }
  SUBCASE("the event name is reset after each dispatch") {
    check_same(parse_all("event: a\ndata: 1\n\ndata: 2\n\n"),
               {{"a", "1"}, {"", "2"}});
  }
  SUBCASE("an event without data is dropped with its name") {
    check_same(parse_all("event: a\n\ndata: 1\n\n"), {{"", "1"}});
  }
}

TEST_CASE("sse: the byte order mark is skipped only at the very start") {
  SUBCASE("at the start") {
    check_same(parse_all("\xEF\xBB\xBF" "data: x\n\n"), {{"", "x"}});
  }
  SUBCASE("split across feeds") {
    std::string in = "\xEF\xBB\xBF" "data: x\n\n";
    check_same(parse_chunked(in, {1, 1, 1}), {{"", "x"}});
    check_same(parse_chunked(in, {2, 5}), {{"", "x"}});
  }
  SUBCASE("later in the stream it is part of the line") {
    // The field name becomes "\xEF\xBB\xBF" "data": an unknown field.
    check_same(parse_all("data: a\n\n\xEF\xBB\xBF" "data: b\n\n"),
               {{"", "a"}});
  }
  SUBCASE("a partial mark is ordinary text") {
    check_same(parse_all("\xEF" "data: b\n\ndata: c\n\n"), {{"", "c"}});
    check_same(parse_all("\xEF\xBB"), {});
  }
}

TEST_CASE("sse: finish dispatches a pending event that has data") {
  SUBCASE("unterminated last line") {
    check_same(parse_all("data: {\"x\":1}"), {{"", "{\"x\":1}"}});
  }
  SUBCASE("terminated line, no blank line") {
    check_same(parse_all("event: e\ndata: a\ndata: b\n"), {{"e", "a\nb"}});
  }
  SUBCASE("no data, nothing to dispatch") {
    check_same(parse_all("event: e\n: comment\n"), {});
  }
  SUBCASE("nothing after the last blank line") {
    check_same(parse_all("data: a\n\n"), {{"", "a"}});
  }
}

TEST_CASE("sse: a line longer than max_line fails the parser") {
  SUBCASE("a line of exactly max_line bytes is fine") {
    auto line = "data: " + std::string(10, 'x'); // 16 bytes
    auto events = parse_all(line + "\n\n", 16);
    REQUIRE(events.size() == 1);
    CHECK(events[0].data == std::string(10, 'x'));
  }
  SUBCASE("one byte more fails, whatever the chunking") {
    sse_parser p{16};
    std::vector<sse_event> out;
    std::string first = "data: ok\n\n";
    std::string line = "data: " + std::string(11, 'x'); // 17 bytes
    p.feed(first.data(), first.size(), out);
    for (char c : line)
      p.feed(&c, 1, out);
    CHECK(p.failed());
    std::string more = "\n\ndata: later\n\n";
    p.feed(more.data(), more.size(), out);
    p.finish(out);
    REQUIRE(out.size() == 1);
    CHECK(out[0].data == "ok");
  }
  SUBCASE("a line that never ends cannot grow without bound") {
    sse_parser p{1024};
    std::vector<sse_event> out;
    std::string chunk(100, 'x');
    for (int i = 0; i < 1000; ++i)
      p.feed(chunk.data(), chunk.size(), out);
    CHECK(p.failed());
    p.finish(out);
    CHECK(out.empty());
  }
  SUBCASE("event data built from many short lines is bounded too") {
    sse_parser p{64};
    std::vector<sse_event> out;
    std::string line = "data: 0123456789\n";
    for (int i = 0; i < 10; ++i)
      p.feed(line.data(), line.size(), out);
    CHECK(p.failed());
    p.finish(out);
    CHECK(out.empty());
  }
}
