#!/usr/bin/env bash
# Installs the built library into a scratch folder and builds a user's program against it
# through pkg-config, as the README tells users to; each folder's umbrella header compiles
# alone there. The installed tools must find the
# installed libtessera.so by themselves (their RUNPATH), with no LD_LIBRARY_PATH.
#   check_install.sh BUILD_DIR SOURCE_FILE
set -euo pipefail
build_dir=$1
source_file=$2
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

DESTDIR="$scratch/root" meson install -C "$build_dir" --no-rebuild --quiet
# The internal headers stay out of the installed tree (the kernels', FSDP's units and state,
# the checkpoint metadata's reader), and so does activation checkpointing's old name (now
# nn/activation_checkpoint.h, so that it does not read like checkpoint/).
include_root=$(dirname "$(find "$scratch/root" -name tessera.h -path '*/tessera/tessera.h' | head -n 1)")
for internal in tensor/native.h tensor/kernel_shapes.h tensor/layer_kernel_shapes.h tensor/device_check.h \
                tensor/device_kernels.inc tensor/cpu tensor/cuda fsdp/unit.h fsdp/state.h \
                checkpoint/json_reader.h checkpoint/manifest_reader.h nn/checkpoint.h; do
  if [[ -e "$include_root/$internal" ]]; then
    echo "internal header installed: $include_root/$internal" >&2
    exit 1
  fi
done
pc_file=$(find "$scratch/root" -name tessera.pc | head -n 1)
[[ -n "$pc_file" ]] || { echo "tessera.pc was not installed" >&2; exit 1; }
export PKG_CONFIG_PATH="$(dirname "$pc_file")"
export PKG_CONFIG_SYSROOT_DIR="$scratch/root"
flags=$(pkg-config --cflags --libs tessera)
echo "pkg-config --cflags --libs tessera: $flags"
g++ -std=c++20 -O1 "$source_file" -o "$scratch/user_model" $flags
# Each folder's umbrella header compiles on its own: it includes everything it uses.
for umbrella in tensor/all.h autograd/autograd.h io/io.h data/data.h dist/dist.h text/text.h nn/nn.h \
                models/models.h optim/optim.h fsdp/fsdp.h checkpoint/checkpoint.h; do
  echo "#include <tessera/$umbrella>" | g++ -std=c++20 -fsyntax-only -x c++ - $(pkg-config --cflags tessera) ||
    { echo "<tessera/$umbrella> does not compile on its own" >&2; exit 1; }
done
libdir=$(dirname "$(find "$scratch/root" -name 'libtessera.so' | head -n 1)")
LD_LIBRARY_PATH="$libdir" "$scratch/user_model"

for tool in tessera-checkpoint tessera-tokenize; do
  installed=$(find "$scratch/root" -type f -name "$tool" | head -n 1)
  [[ -n "$installed" ]] || { echo "$tool was not installed" >&2; exit 1; }
  resolved=$(env -u LD_LIBRARY_PATH ldd "$installed" | awk '$1 == "libtessera.so" { print $3 }')
  echo "$tool: libtessera.so => ${resolved:-not found}"
  [[ -n "$resolved" && "$(realpath "$resolved")" == "$(realpath "$libdir/libtessera.so")" ]] || { echo "$tool does not find the installed libtessera.so" >&2; exit 1; }
  env -u LD_LIBRARY_PATH "$installed" --help > /dev/null
done
