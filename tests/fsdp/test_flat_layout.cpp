// FSDP shard math: flat layout, alignment, padding and shard ranges, exhaustively for
// small sizes (numel 1..37 x world 1..8).
#include <doctest/doctest.h>

#include <tessera/fsdp/flat_layout.h>

namespace ts = tessera;
using ts::DType;
using ts::fsdp::ElementRange;
using ts::fsdp::FlatEntry;
using ts::fsdp::FlatLayout;

TEST_CASE("shard ranges tile the padded vector exactly") {
  for (int64_t numel = 1; numel <= 37; ++numel) {
    for (int world = 1; world <= 8; ++world) {
      CAPTURE(numel);
      CAPTURE(world);
      FlatLayout layout({{"w", {numel}, 0, 0}}, DType::f32, world);
      CHECK(layout.flat_numel() == numel);
      CHECK(layout.padded_numel() % world == 0);
      CHECK(layout.padded_numel() >= numel);
      CHECK(layout.padded_numel() - numel < world);  // padding is the minimum
      int64_t covered = 0;
      for (int r = 0; r < world; ++r) {
        ElementRange range = layout.shard_range(r);
        CHECK(range.begin == covered);
        CHECK(range.size() == layout.shard_numel());
        covered = range.end;
        // The parameter's part on this rank is the intersection with [0, numel).
        ElementRange part = layout.overlap(0, range);
        int64_t expected = std::max<int64_t>(0, std::min(range.end, numel) - range.begin);
        CHECK(part.size() == expected);
        if (expected > 0) CHECK(part.begin == range.begin);
      }
      CHECK(covered == layout.padded_numel());
    }
  }
}

TEST_CASE("parameters start at 16-byte boundaries and keep registration order") {
  // Two equal-size parameters: a layout that swapped them would put b first.
  FlatLayout f32({{"a", {3}, 0, 0}, {"b", {3}, 0, 0}, {"c", {2, 2}, 0, 0}}, DType::f32, 3);
  CHECK(f32.entries()[0].name == "a");
  CHECK(f32.entries()[0].offset == 0);
  CHECK(f32.entries()[1].name == "b");
  CHECK(f32.entries()[1].offset == 4);   // 3 floats, then 16-byte alignment
  CHECK(f32.entries()[2].offset == 8);
  CHECK(f32.flat_numel() == 12);
  CHECK(f32.padded_numel() == 12);
  FlatLayout f64({{"a", {3}, 0, 0}, {"b", {1}, 0, 0}}, DType::f64, 4);
  CHECK(f64.entries()[1].offset == 4);   // 2 doubles per 16 bytes
  CHECK(f64.flat_numel() == 5);
  CHECK(f64.padded_numel() == 8);
  CHECK(ts::fsdp::align_offset(5, DType::u8) == 16);
}

TEST_CASE("the unpadded flat vector does not depend on the world size") {
  std::vector<FlatEntry> entries = {{"w", {5, 7}, 0, 0}, {"b", {5}, 0, 0}, {"v", {13}, 0, 0}};
  FlatLayout one(entries, DType::f32, 1);
  for (int world = 2; world <= 8; ++world) {
    FlatLayout many(entries, DType::f32, world);
    CHECK(many.flat_numel() == one.flat_numel());
    for (size_t i = 0; i < entries.size(); ++i) CHECK(many.entries()[i].offset == one.entries()[i].offset);
  }
}

TEST_CASE("bad world sizes and ranks are clear errors") {
  CHECK_THROWS_AS(FlatLayout({{"w", {4}, 0, 0}}, DType::f32, 0), ts::ValueError);
  FlatLayout layout({{"w", {4}, 0, 0}}, DType::f32, 2);
  CHECK_THROWS_AS(layout.shard_range(2), ts::IndexError);
}
