# Sourced by the device-machine scripts (gpu.sh, gpu_llm.sh, gpu_profile.sh, ...) after they cd
# to the repository root: the build folder, the results folder, and `extra`, the cmake arguments
# that the device image needs.
BUILD=${BUILD:-build/gpu}
RESULTS=${RESULTS:-${OUT:-bench/results/run}}
mkdir -p "$RESULTS"

# The device image has no SQLite headers; if the tree needs SQLite, take the header carried in
# .gpudeps/ and the runtime library the image has.
extra=()
if [[ ! -f /usr/include/sqlite3.h && -f .gpudeps/sqlite3.h ]]; then
  lib=$(ls /usr/lib/x86_64-linux-gnu/libsqlite3.so* 2>/dev/null | head -1 || true)
  [[ -n "$lib" ]] && extra+=(-DSQLite3_INCLUDE_DIR="$PWD/.gpudeps" -DSQLite3_LIBRARY="$lib")
fi
# Nor has it cpp-httplib, which only `yirage serve` needs: take Debian's build of it carried in
# .gpudeps/ (its header, library, brotli and a pkg-config file), else build without the server.
if [[ -f .gpudeps/pkgconfig/cpp-httplib.pc ]] && ! pkg-config --exists cpp-httplib 2>/dev/null
then
  command -v pkg-config > /dev/null || export PATH="$PWD/.gpudeps/bin:$PATH"
  export PKG_CONFIG_PATH="$PWD/.gpudeps/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
  export LD_LIBRARY_PATH="$PWD/.gpudeps/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
if ! pkg-config --exists cpp-httplib 2>/dev/null; then
  extra+=(-DYIRAGE_SERVER=OFF)
fi

# Configures $BUILD as the GPU jobs build it (release, warnings as errors, the image's `extra`);
# on failure prints the log's tail and exits.
configure_gpu_build() {
  cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DYIRAGE_WERROR=ON "${extra[@]}" \
    > "$RESULTS/configure.log" 2>&1 || { tail -30 "$RESULTS/configure.log"; exit 1; }
}
