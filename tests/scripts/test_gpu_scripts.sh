#!/usr/bin/env bash
# The GPU scripts' logic, on a machine without a GPU:
#  - gpu-check's steps (run_limited, kill_session) end at their limit with every process
#    they started, also without ps (slim images lack it: /proc is read) and with neither ps
#    nor /proc (the step's process group is killed), and never hang in the `wait` after
#    (the old kill_session did without ps: meson's timeout would end this test);
#  - gpu-check's MNIST comparison (accuracy_agrees) and its collective timeout, which must
#    stay below the gpu suite's cap;
#  - check-bundle-libraries refuses a binary that loads a library outside its list and one
#    that needs a newer libstdc++ than the one found, and passes once the newer one is first
#    on LD_LIBRARY_PATH (gpu-check's fallback-lib order).
set -uo pipefail
source_dir="${TESSERA_SOURCE_DIR:?the meson test sets TESSERA_SOURCE_DIR}"
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
failures=0
check() {  # description, command...
  local what="$1"
  shift
  if "$@"; then echo "ok: $what"; else echo "FAILED: $what"; failures=$((failures + 1)); fi
}
refuses() { ! "$@"; }

# gpu-check defines its step machinery before a guard that returns when it is sourced.
# shellcheck source=../../scripts/gpu-check
source "$source_dir/scripts/gpu-check"
set +e
started=$(date +%s)

# The processes still alive (not zombies) in session `1`, read from /proc directly.
alive_in_session() {
  local stat line fields
  for stat in /proc/[0-9]*/stat; do
    { read -r line < "$stat"; } 2> /dev/null || continue
    read -r -a fields <<< "${line##*) }"
    [[ "${fields[3]:-}" == "$1" && "${fields[0]}" != Z ]] && echo "${line%% *}"
  done
}

# A PATH with what run_limited needs but no ps.
bin="$scratch/bin"
mkdir -p "$bin"
for tool in setsid sleep seq bash cat; do ln -s "$(command -v "$tool")" "$bin/$tool"; done
saved_path="$PATH"

# A step that ignores SIGTERM, with children that ignore it too, one of them in a process
# group of its own (as mpirun's ranks may be): only SIGKILL to each process of the session ends it.
stubborn='trap "" TERM; set -m; sleep 300 & set +m; sleep 300 & echo $$ > "$0"; wait'

PATH="$bin"
check "ps is hidden from PATH" bash -c '! command -v ps'
t0=$SECONDS
run_limited 1 "$scratch/step.log" bash -c "$stubborn" "$scratch/leader"
status=$?
PATH="$saved_path"
check "a step past its limit returns 124 without ps (got $status, after $((SECONDS - t0)) s)" test "$status" == 124
leader="$(cat "$scratch/leader")"
check "no process of its session is left (/proc read instead of ps): $(alive_in_session "$leader" | tr '\n' ' ')" \
  test -z "$(alive_in_session "$leader")"
check "the log says why it ended" grep -q "killed after 1 s" "$scratch/step.log"

# Neither ps nor /proc: the step's process group is what can be reached.
proc_root="$scratch/no-proc"
PATH="$bin"
t0=$SECONDS
run_limited 1 "$scratch/group.log" bash -c 'trap "" TERM; sleep 300 & echo $$ > "$0"; wait' "$scratch/leader"
status=$?
PATH="$saved_path"
proc_root=/proc
leader="$(cat "$scratch/leader")"
check "without ps or /proc a step past its limit still returns 124 (got $status, after $((SECONDS - t0)) s)" test "$status" == 124
check "its process group is gone: $(alive_in_session "$leader" | tr '\n' ' ')" test -z "$(alive_in_session "$leader")"

# A step that finishes keeps its exit status; what it left behind goes with its session
# (listed by ps where there is one).
run_limited 30 "$scratch/done.log" bash -c 'sleep 300 & echo $$ > "$0"; exit 3' "$scratch/leader"
status=$?
leader="$(cat "$scratch/leader")"
check "a finished step's status is its command's (got $status)" test "$status" == 3
check "and the daemon it left is killed ($(command -v ps > /dev/null && echo "ps" || echo "/proc"))" \
  test -z "$(alive_in_session "$leader")"

# MNIST: the device's accuracy against the CPU's, within the stated tolerance.
check "the tolerance is 0.3 points" test "$mnist_tolerance" == 0.003
check "0.9812 agrees with 0.9804" accuracy_agrees 0.9812 0.9804 "$mnist_tolerance"
check "0.9775 agrees with 0.9804 (29 images)" accuracy_agrees 0.9775 0.9804 "$mnist_tolerance"
check "0.9834 agrees with 0.9804 (30 images, the bound)" accuracy_agrees 0.9834 0.9804 "$mnist_tolerance"
check "0.9770 does not (34 images)" refuses accuracy_agrees 0.9770 0.9804 "$mnist_tolerance"
check "0.9850 does not" refuses accuracy_agrees 0.9850 0.9804 "$mnist_tolerance"
check "a missing accuracy does not" refuses accuracy_agrees "" 0.9804 "$mnist_tolerance"

# The collective timeout: 60 s unless set, below the gpu suite's cap.
(unset TESSERA_DIST_TIMEOUT; export_dist_timeout; check "TESSERA_DIST_TIMEOUT defaults to 60 s (got ${TESSERA_DIST_TIMEOUT})" test "$TESSERA_DIST_TIMEOUT" == 60
 check "below the gpu suite's cap of $gpu_suite_cap s" test "$TESSERA_DIST_TIMEOUT" -lt "$gpu_suite_cap")
(export TESSERA_DIST_TIMEOUT=17; export_dist_timeout; check "a value already set is kept" test "$TESSERA_DIST_TIMEOUT" == 17)

# check-bundle-libraries on binaries of our own making.
libraries="$source_dir/scripts/check-bundle-libraries"
if command -v cc > /dev/null && command -v c++ > /dev/null; then
  prebuilt="$scratch/prebuilt"
  mkdir -p "$prebuilt/src" "$prebuilt/examples"
  echo 'int main() { return 0; }' | cc -x c - -o "$prebuilt/examples/plain"
  echo '#include <string>
int main(int argc, char** argv) { std::string s(argv[0]); return static_cast<int>(s.size() % 2); }' |
    c++ -x c++ - -o "$prebuilt/examples/cxx"
  check "binaries loading only the C/C++ runtime pass" "$libraries" "$prebuilt"
  echo 'extern int zlibVersion(); int main() { return zlibVersion() == 0; }' | cc -x c - -o "$prebuilt/examples/zlib" -lz
  report="$("$libraries" "$prebuilt")"
  status=$?
  check "a binary loading libz fails (exit $status)" test "$status" == 1
  check "naming the binary and the library: $report" grep -q "examples/zlib loads libz.so.1" <<< "$report"
  rm "$prebuilt/examples/zlib"
  # An old image: a libstdc++.so.6 that has only GLIBCXX_3.4.
  old="$scratch/old-image"
  mkdir -p "$old"
  echo 'GLIBCXX_3.4 { global: *; };' > "$scratch/old.map"
  echo 'int tessera_old_libstdcxx;' | cc -x c - -shared -fPIC -Wl,--version-script="$scratch/old.map" \
    -Wl,-soname,libstdc++.so.6 -o "$old/libstdc++.so.6"
  report="$(LD_LIBRARY_PATH="$old" "$libraries" "$prebuilt")"
  status=$?
  check "an older libstdc++ first on the path fails (exit $status)" test "$status" == 1
  check "naming the symbol version it lacks: $(head -1 <<< "$report")" grep -q "examples/cxx needs GLIBCXX_3.4" <<< "$report"
  mkdir -p "$prebuilt/fallback-lib"
  cp "$(readlink -f "$(c++ -print-file-name=libstdc++.so.6)")" "$prebuilt/fallback-lib/libstdc++.so.6"
  check "the fallback runtime before it passes (gpu-check's order)" \
    env LD_LIBRARY_PATH="$prebuilt/fallback-lib:$old" "$libraries" "$prebuilt"
else
  echo "skipped: check-bundle-libraries (no C/C++ compiler to make binaries with)"
fi

echo "$failures failed"
(( failures == 0 ))
