#!/usr/bin/env bash
# Build llama.cpp's own GGUF reader (gguf_init_from_file, from ggml's gguf.cpp) as
# libggml-base.so, and a tiny timing program around it (gguf-read.c, next to this script),
# for the benchmarks at real sizes (benches/sizes.rs: WI_GGUF_READ; benches/test_sizes.py:
# WI_GGML). Sources come from PyPI (llama-cpp-python's sdist vendors llama.cpp).
#
# Usage: bash benches/llama-gguf-reader.sh DIR
# Everything goes into DIR. Running it again reuses what is already there.
# The last two lines printed are the library's path and the gguf-read binary's.
set -euo pipefail

# llama-cpp-python's source release on PyPI carries llama.cpp in vendor/llama.cpp.
PIN="${LLAMA_CPP_PYTHON_VERSION:-0.3.36}"
DIR="$(mkdir -p "${1:?usage: bash llama-gguf-reader.sh DIR}" && cd "$1" && pwd)"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
SRC="$DIR/llama_cpp_python-$PIN"
GGML="$SRC/vendor/llama.cpp/ggml"
START=$SECONDS

# A private venv supplies pip, plus cmake and ninja when the system has no cmake.
[ -x "$DIR/venv/bin/pip" ] || python3 -m venv "$DIR/venv"
if ! command -v cmake >/dev/null; then
    [ -x "$DIR/venv/bin/cmake" ] || "$DIR/venv/bin/pip" install -q cmake ninja
    export PATH="$DIR/venv/bin:$PATH"
fi

# Download the source release. Only this package is taken as source; letting
# pip build its helper tools (cmake) from source too would take a very long time.
TARBALL="$DIR/llama_cpp_python-$PIN.tar.gz"
[ -f "$TARBALL" ] || "$DIR/venv/bin/pip" download -q --no-deps \
    --no-binary llama-cpp-python -d "$DIR" "llama-cpp-python==$PIN"

# Unpack only ggml and the file that records which llama.cpp commit is vendored.
if [ ! -f "$GGML/CMakeLists.txt" ]; then
    tar -xzf "$TARBALL" -C "$DIR" --wildcards \
        "llama_cpp_python-$PIN/vendor/llama.cpp/ggml/*" \
        "llama_cpp_python-$PIN/.git/modules/vendor/llama.cpp/HEAD"
fi
# The sdist leaves out ggml.pc.in (a pkg-config template we never install),
# but ggml's CMakeLists.txt insists on it, so put an empty one in its place.
[ -f "$GGML/ggml.pc.in" ] || touch "$GGML/ggml.pc.in"

# Say which llama.cpp / ggml is being built.
COMMIT="$(cat "$SRC/.git/modules/vendor/llama.cpp/HEAD" 2>/dev/null || echo unknown)"
GGML_VER="$(sed -n 's/^set(GGML_VERSION_\(MAJOR\|MINOR\|PATCH\) \([0-9]*\)).*/\2/p' "$GGML/CMakeLists.txt" | paste -sd.)"
echo "llama-cpp-python $PIN, llama.cpp commit $COMMIT, ggml $GGML_VER"

# Configure once: shared Release build, no CPU or other backends, no tests or examples.
GEN="Unix Makefiles"; command -v ninja >/dev/null && GEN=Ninja
[ -f "$DIR/build/build.ninja" ] || [ -f "$DIR/build/Makefile" ] || cmake -S "$GGML" -B "$DIR/build" -G "$GEN" \
    -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=ON \
    -DGGML_CPU=OFF -DGGML_OPENMP=OFF -DGGML_NATIVE=OFF -DGGML_ALL_WARNINGS=OFF \
    -DGGML_BUILD_TESTS=OFF -DGGML_BUILD_EXAMPLES=OFF >/dev/null

# Build just the ggml-base library, which contains gguf.cpp (a no-op when up to date).
cmake --build "$DIR/build" --target ggml-base -j "$(nproc)"
LIB="$(find "$DIR/build" -name libggml-base.so | head -n1)"

# Compile the timing program against it (cheap, so always redone).
gcc -O2 -std=c11 -I "$GGML/include" "$HERE/gguf-read.c" "$LIB" \
    -Wl,-rpath,"$(dirname "$LIB")" -lm -o "$DIR/gguf-read"
echo "done in $((SECONDS - START))s"
echo "$LIB"
echo "$DIR/gguf-read"
