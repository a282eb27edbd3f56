#include "actors/embed_batches.hpp"
#include "transport/embed_codec.hpp"

#include <doctest/doctest.h>

#include <string>
#include <vector>

using namespace pgw;

namespace {

std::vector<std::string> texts(size_t n, size_t len = 3) {
  std::vector<std::string> out;
  for (size_t i = 0; i < n; ++i)
    out.push_back(std::string(len, 'x'));
  return out;
}

/// The batches cover [0, n) exactly once, in order, none empty.
void check_covers(const std::vector<embed_batch>& bs, size_t n) {
  size_t next = 0;
  for (auto& b : bs) {
    CHECK(b.begin == next);
    CHECK(b.end > b.begin);
    next = b.end;
  }
  CHECK(next == n);
}

} // namespace

TEST_CASE("embed splitter: by input count, order kept") {
  batch_splitter split{2, 1000000};
  auto bs = split.split(texts(5));
  REQUIRE(bs.size() == 3);
  check_covers(bs, 5);
  CHECK(bs[0].end == 2);
  CHECK(bs[1].end == 4);
  CHECK(bs[2].end - bs[2].begin == 1);
  // 3 bytes → 1 token each.
  CHECK(bs[0].est_tokens == 2);
}

TEST_CASE("embed splitter: by estimated tokens") {
  // 40 bytes → 11 tokens; at most 25 tokens: two inputs per batch.
  batch_splitter split{2048, 25};
  auto bs = split.split(texts(7, 40));
  REQUIRE(bs.size() == 4);
  check_covers(bs, 7);
  for (auto& b : bs)
    CHECK(b.est_tokens <= 25);
  CHECK(estimate_embed_tokens(std::string(40, 'x')) == 11);
}

TEST_CASE("embed splitter: both limits, an oversize input travels alone") {
  batch_splitter split{3, 10};
  std::vector<std::string> in = {"a", "b", std::string(100, 'x'), "c", "d",
                                 "e", "f"};
  auto bs = split.split(in);
  check_covers(bs, in.size());
  REQUIRE(bs.size() == 4);
  CHECK(bs[0].end == 2);
  CHECK(bs[1].begin == 2);
  CHECK(bs[1].end == 3); // alone: 26 tokens > 10
  CHECK(bs[2].end == 6); // count limit 3
  CHECK(bs[3].end == 7);
}

TEST_CASE("embed splitter: empty input gives no batch, limits below 1 mean 1") {
  CHECK(batch_splitter{10, 10}.split({}).empty());
  auto bs = batch_splitter{0, 0}.split(texts(3));
  CHECK(bs.size() == 3);
  check_covers(bs, 3);
}
