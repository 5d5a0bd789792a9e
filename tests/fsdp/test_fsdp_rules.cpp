// FSDP's rules are the same at every world size (issue #28): a mistake that fails at two
// ranks fails at one, with the same error and the way out in its message. One rank's shard
// is the whole flat parameter, but its parameters are shown only while their unit is
// "gathered", as at N ranks. Run alone, and under mpirun at 1 to 4 ranks.
#include <doctest/doctest.h>

#include <string>

#include "../dist/dist_test_support.h"
#include "tiny_gpt.h"

namespace ts = tessera;
namespace fsdp = tessera::fsdp;
using test_support::contains;
using ts::DType;
using ts::Tensor;

namespace {

struct Block : ts::nn::Module {
  ts::nn::Linear fc{8, 8};
  Block() { register_module("fc", fc); }
  Tensor forward(Tensor x) override { return ts::relu(fc(x)) + x; }
};

// A root with a parameter of its own (a learned input scale) and two Block units.
struct ScaledNet : ts::nn::Module {
  Tensor scale;
  Block a, b;
  ScaledNet() {
    scale = ts::ones({8}, {.dtype = DType::f64});
    register_parameter("scale", scale);
    register_modules({{"a", a}, {"b", b}});
    to(DType::f64);
    reset_parameters(3);
  }
  Tensor forward(Tensor x) override { return b(a(x * scale)); }
  // A method other than forward that runs the units directly (as a generate() would).
  Tensor encode_twice(Tensor x) { return a(a(x * scale)); }
};

// A root without parameters: its units are all there is.
struct PlainNet : ts::nn::Module {
  Block a, b;
  PlainNet() {
    register_modules({{"a", a}, {"b", b}});
    to(DType::f64);
  }
  Tensor forward(Tensor x) override { return b(a(x)); }
};

// A head that reads the embedding's weight (a tie by reference, as GPT-2's lm_head).
struct TiedHead : ts::nn::Module {
  ts::nn::Embedding& embedding;
  explicit TiedHead(ts::nn::Embedding& tied) : embedding(tied) {}
  Tensor forward(Tensor x) override { return ts::linear(x, embedding.weight); }
};

struct TiedNet : ts::nn::Module {
  ts::nn::Embedding wte{11, 8};
  ts::nn::Linear mix{8, 8};
  TiedHead head{wte};
  TiedNet() {
    register_modules({{"wte", wte}, {"mix", mix}, {"head", head}});
    to(DType::f64);
  }
  Tensor forward(Tensor ids) override { return head(mix(wte(ids))); }
};

Tensor input_rows() {
  ts::Generator gen(7);
  return ts::randn({4, 8}, gen, {.dtype = DType::f64});
}

}  // namespace

TEST_CASE("one rank fails where N ranks fail: a parameter read outside its unit") {
  const auto& world = dist_test::world();
  ScaledNet model;
  fsdp::fully_shard(model, world, {.wrap_policy = fsdp::WrapPolicy::module_type({"Block"})});
  auto read = [&] { return dist_test::error_of([&] { model.a.fc.weight.to_vector<double>(); }); };
  const std::string before = read();
  CHECK(contains(before, "it is a parameter of FSDP unit 'a' (a.fc.weight [8, 8], a.fc.bias [8])"));
  CHECK(contains(before, "call model(x), not model.forward(x)"));
  CHECK(contains(before, "read them elsewhere inside fsdp::SummonFullParams"));
  // After a step too; the root's own parameter is released once its gradient is reduced.
  model(input_rows()).sum().backward();
  CHECK(contains(read(), "it is a parameter of FSDP unit 'a'"));
  CHECK(contains(dist_test::error_of([&] { model.scale.to_vector<double>(); }), "FSDP unit '(root)'"));
  // Where the message sends the reader, the values are there, at every world size.
  fsdp::SummonFullParams full(model, false);
  CHECK(model.a.fc.weight.to_vector<double>().size() == 64);
  CHECK(model.scale.to_vector<double>() == std::vector<double>(8, 1.0));
  full.end();
  // NO_SHARD keeps every parameter whole on every rank: readable at any time, at any N.
  ScaledNet whole;
  fsdp::fully_shard(whole, world, {.strategy = fsdp::ShardingStrategy::no_shard});
  CHECK(whole.a.fc.weight.to_vector<double>().size() == 64);
}

TEST_CASE("one rank fails where N ranks fail: model.forward(x) instead of model(x)") {
  const auto& world = dist_test::world();
  const Tensor x = input_rows();
  // The root's own parameter is read first: it was never gathered (no model(x) gathered it).
  ScaledNet scaled;
  fsdp::fully_shard(scaled, world, {.wrap_policy = fsdp::WrapPolicy::module_type({"Block"})});
  const std::string read_first = dist_test::error_of([&] { scaled.forward(x); });
  CHECK(contains(read_first, "it is a parameter of FSDP unit '(root)' (scale [8])"));
  CHECK(contains(read_first, "call model(x), not model.forward(x)"));
  // A root without parameters: the first unit refuses to run outside the model's call.
  PlainNet plain;
  fsdp::fully_shard(plain, world);
  const std::string unit_first = dist_test::error_of([&] { plain.forward(x); });
  CHECK(contains(unit_first, "FSDP unit 'a.fc' ran outside a call of the sharded PlainNet"));
  CHECK(contains(unit_first, "call model(x), not model.forward(x)"));
  CHECK(contains(unit_first, "fsdp::register_fsdp_forward_method(model, &PlainNet::method)"));
  // A submodule called on its own, after a whole step: the same.
  plain(x).sum().backward();
  CHECK(contains(dist_test::error_of([&] { plain.b(x); }), "FSDP unit 'b.fc' ran outside a call"));
  // And model(x) still works after the refusals.
  CHECK(plain(x).sizes() == ts::Shape{4, 8});
}

TEST_CASE("one rank fails where N ranks fail: a weight tied across two units") {
  const auto& world = dist_test::world();
  ts::Tensor ids = ts::tensor<int64_t>({1, 2, 3, 4});
  // By reference (the head reads the embedding's weight): released after wte's own unit.
  TiedNet by_reference;
  fsdp::fully_shard(by_reference, world);  // wte, mix and head's nothing: wte is a unit of its own
  const std::string read = dist_test::error_of([&] { by_reference(ids); });
  CHECK(contains(read, "it is a parameter of FSDP unit 'wte' (wte.weight [11, 8])"));
  CHECK(contains(read, "a weight another module uses too (tied) must be in one unit with it"));
  // The way out: the embedding with the root, which stays gathered across both uses.
  TiedNet in_root;
  fsdp::fully_shard(in_root, world, {.wrap_policy = fsdp::WrapPolicy::module_type({"Linear"})});
  CHECK(in_root(ids).sizes() == ts::Shape{4, 11});
  // The same tensor registered by two modules that land in two units: refused when sharding.
  struct SharedNet : ts::nn::Module {
    ts::nn::Linear first{8, 8}, second{8, 8};
    SharedNet() {
      second.weight = first.weight;  // one tensor, two registrations
      register_modules({{"first", first}, {"second", second}});
    }
    Tensor forward(Tensor x) override { return second(first(x)); }
  } shared;
  const std::string tied = dist_test::error_of([&] { fsdp::fully_shard(shared, world); });
  CHECK(contains(tied, "'second.weight' is the same tensor as 'first.weight' (a tied weight), but they fall in two "
                       "units ('second' and 'first')"));
}

TEST_CASE("a wrap policy naming a type no module has is an error naming the types there are") {
  fsdp_test::TinyGPT model({.vocab = 11, .width = 8, .tokens = 5, .layers = 2, .seed = 5});
  const std::string message = dist_test::error_of(
      [&] { fsdp::fully_shard(model, dist_test::world(), {.wrap_policy = fsdp::WrapPolicy::module_type({"block"})}); });
  CHECK(contains(message, "fully_shard: WrapPolicy::module_type names 'block', which is the type_name() of no module "
                          "of this model; its types are: Block, Dropout, Embedding, GELU, LayerNorm, Linear, ModuleDict, "
                          "ModuleList, TinyGPT"));
  CHECK_FALSE(fsdp::is_sharded(model));
}

TEST_CASE("register_fsdp_forward_method runs a method other than forward as the sharded model's forward") {
  const auto& world = dist_test::world();
  const Tensor x = input_rows();
  ScaledNet reference;
  const std::vector<double> expected = reference.encode_twice(x).to_vector<double>();
  ScaledNet model;
  fsdp::fully_shard(model, world, {.wrap_policy = fsdp::WrapPolicy::module_type({"Block"})});
  // Unregistered, the method's units refuse to run (the root's scale is read first here).
  CHECK(contains(dist_test::error_of([&] { model.encode_twice(x); }), "call model(x), not model.forward(x)"));
  auto encode_twice = fsdp::register_fsdp_forward_method(model, &ScaledNet::encode_twice);
  const fsdp::MemoryReport before = fsdp::memory_report(model);
  const Tensor got = encode_twice(x);
  const fsdp::MemoryReport after = fsdp::memory_report(model);
  CHECK(got.to_vector<double>() == expected);  // the same ops on the same values: the same bits
  // The root once, unit 'a' twice (it reshards after each call); 'b' is never gathered.
  int64_t root_bytes = 0, a_bytes = 0;
  for (const fsdp::UnitInfo& unit : fsdp::units(model)) {
    const int64_t bytes = unit.layout.padded_numel() * 8;
    if (unit.name == "(root)") root_bytes = bytes;
    if (unit.name == "a") a_bytes = bytes;
  }
  const bool sends = world->size() > 1;
  CHECK(after.all_gathers - before.all_gathers == (sends ? 3 : 0));
  CHECK(after.all_gathered_bytes - before.all_gathered_bytes == (sends ? root_bytes + 2 * a_bytes : 0));
  // The scope form, and a forward method that calls model(x) inside, then a unit.
  {
    fsdp::ForwardMethodScope scope(model);
    Tensor y = model.a(model(x));
    CHECK(y.sizes() == ts::Shape{4, 8});
  }
  CHECK(contains(dist_test::error_of([&] { model.a(x); }), "ran outside a call"));  // the scope has ended
}
