// Tessera's side of the per-op accuracy table (bench/accuracy runs it beside PyTorch): each
// op of the MNIST network, forward and backward through autograd as training runs it, on
// inputs read from a safetensors file, in the file's dtype; the outputs go to another file.
//
//   build/bench/op_accuracy INPUTS.safetensors OUTPUTS.safetensors
//
// The inputs and outputs are mnist_ops.h's (<op>.x, <op>.weight, <op>.bias, <op>.dy ->
// <op>.y, <op>.dx, <op>.dweight, <op>.dbias; net.* for the whole network).
#include <cstdio>
#include <exception>

#include "mnist_ops.h"
#include "tessera/io/safetensors.h"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: op_accuracy INPUTS.safetensors OUTPUTS.safetensors\n");
    return 2;
  }
  try {
    tessera::io::save(mnist_ops::run_mnist_ops(tessera::io::load(argv[1])), argv[2]);
  } catch (const std::exception& error) {
    std::fprintf(stderr, "op_accuracy: %s\n", error.what());
    return 1;
  }
  return 0;
}
