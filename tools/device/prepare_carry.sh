#!/usr/bin/env bash
# Fills third_party_cache/device/ (ignored by git) with what the GPU check's build
# needs beyond what the lent GPU machine has: it has a compiler, CMake, ninja, nvcc
# and python3 with torch (so LibTorch), but none of Debian's -dev packages and no
# network. Runs HERE, on the Debian 12 build machine, before the `run` call that
# names third_party_cache/device in `carry` (tools/device/README.md).
#
# Headers and sources only, never a shared library built here (the GPU machine's glibc may
# differ), except SentencePiece's and libcrypto's shared libraries and libwebp's static ones (below):
#   include/CLI, include/nlohmann, include/spdlog, include/fmt, include/stb/stb_image_write.h
#             the headers of libcli11-dev, nlohmann-json3-dev, libspdlog-dev,
#             libfmt-dev and libstb-dev: copied from /usr/include when the package is
#             installed (tools/setup.sh installs them all), else taken from the .deb
#             that `apt-get download` fetches, unpacked with `dpkg-deb -x`;
#   sentencepiece/  include/sentencepiece_processor.h (libsentencepiece-dev) and
#             lib/libsentencepiece.so* (libsentencepiece0): the one compiled library carried,
#             since the T5 tokenizer links it and the machine has no apt;
#   openssl/  include/openssl (libssl-dev) and lib/libcrypto.so* (libssl3), for SHA-256;
#   webp/     include/webp and lib/libwebp.a, libwebpmux.a (libwebp-dev), static, for WebP output;
#   jpeg/     jpeglib.h and lib/libjpeg.a (libjpeg62-turbo-dev), static, for JPEG input images;

#   arrow.tar.xz  Arrow's and Parquet's C++ headers (include/arrow, include/parquet) and
#             libarrow.so.2600 / libparquet.so.2600, from the venv's pinned pyarrow wheel
#             (tools/readers-requirements.txt), for the parquet module (cmake/Arrow.cmake): the
#             machine's own pyarrow is of another version. xz-compressed (62 MB of libraries
#             travel as about 16 MB, inside the call's 64 MiB); gpu_check.sh unpacks it. The
#             libraries are manylinux_2_28 builds, as pip installs them there too;
#   googletest/  the GoogleTest sources of Debian's googletest package
#             (/usr/src/googletest, pulled in by libgtest-dev), without their own tests;
#   wheels/   the pinned diffusers stack of tools/fixtures/requirements.txt as wheels,
#             for tools/bench/diffusers_peer.py (the machine has torch but no diffusers);
#             skipped with --no-wheels, or when pip cannot reach PyPI;
#   MANIFEST.txt  where each part came from, with its version.
# libpng is not carried: without it cmake/CarriedDeps.cmake leaves out the tests that
# read PNGs with libpng (dpinfer_worker_tests), which the GPU check does not run.
#
#   tools/device/prepare_carry.sh [--no-wheels] [--download] [DEST]   (DEST: third_party_cache/device)
#   --download: take every package from apt-get download, even when it is installed
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
wheels=1
download=0
dest=""
for a in "$@"; do
  case "$a" in
    --no-wheels) wheels=0 ;;
    --download) download=1 ;;
    -h|--help) sed -n '2,28p' "$0"; exit 0 ;;
    -*) echo "prepare_carry: unknown option $a" >&2; exit 2 ;;
    *) dest="$a" ;;
  esac
done
dest="${dest:-$root/third_party_cache/device}"

say() { printf 'prepare_carry: %s\n' "$*" >&2; }

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
rm -rf "$dest"
mkdir -p "$dest/include"
manifest="$dest/MANIFEST.txt"
{
  echo "# Filled by tools/device/prepare_carry.sh on $(hostname) at $(date -u +%FT%TZ)"
  echo "# from $(. /etc/os-release && echo "$PRETTY_NAME")"
} >"$manifest"

# pkg_root PKG: prints a root folder holding PKG's files: / when it is installed,
# else the .deb fetched by apt-get download, unpacked into $tmp.
pkg_root() {
  local pkg="$1" version
  version="$(dpkg-query -W -f='${Version}' "$pkg" 2>/dev/null || true)"
  if [ "$download" = 0 ] && dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
    echo "$pkg $version (installed: copied from /)" >>"$manifest"
    echo /
    return
  fi
  (cd "$tmp" && apt-get download -q "$pkg" >/dev/null)
  local deb
  deb="$(ls "$tmp"/"${pkg}"_*.deb | head -n1)"
  dpkg-deb -x "$deb" "$tmp/$pkg"
  echo "$pkg $(dpkg-deb -f "$deb" Version) (apt-get download: $(basename "$deb"))" >>"$manifest"
  echo "$tmp/$pkg"
}

# Header folders, each exactly as its Debian package installs it.
for spec in libcli11-dev:CLI nlohmann-json3-dev:nlohmann libspdlog-dev:spdlog libfmt-dev:fmt; do
  pkg="${spec%%:*}" sub="${spec#*:}"
  r="$(pkg_root "$pkg")"
  cp -a "$r/usr/include/$sub" "$dest/include/"
done
# stb: only the header the shipped code uses (src/io/stb_image_write.cpp; the worker tests that also read
# JPEGs with stb_image.h are not built there).
r="$(pkg_root libstb-dev)"
mkdir -p "$dest/include/stb"
cp -a "$r/usr/include/stb/stb_image_write.h" "$dest/include/stb/"

# SentencePiece (the T5 tokenizer; cmake/Dependencies.cmake looks in sentencepiece/): the
# headers of libsentencepiece-dev and, the one exception to "headers only", the shared
# library of libsentencepiece0, which the GPU machine cannot build or install (no apt). It
# needs only libc6, libstdc++6 and libgcc-s1 (Debian 12's: glibc 2.36, GLIBCXX_3.4.30); the
# build's RPATH points the binaries at it.
r="$(pkg_root libsentencepiece-dev)"
mkdir -p "$dest/sentencepiece/include" "$dest/sentencepiece/lib"
cp -a "$r/usr/include/sentencepiece_processor.h" "$dest/sentencepiece/include/"
r="$(pkg_root libsentencepiece0)"
# Plain files, no symlinks (a carry may not keep them): the SONAME libsentencepiece.so.0 the
# binaries load, and libsentencepiece.so the linker finds.
cp -L "$r/usr/lib/x86_64-linux-gnu/libsentencepiece.so.0" "$dest/sentencepiece/lib/libsentencepiece.so.0"
cp -L "$r/usr/lib/x86_64-linux-gnu/libsentencepiece.so.0" "$dest/sentencepiece/lib/libsentencepiece.so"

# OpenSSL's libcrypto (SHA-256 of the infotext's Model hash and Lora hashes; cmake/Dependencies.cmake
# points FindOpenSSL at openssl/): the headers of libssl-dev, with its two per-architecture ones
# moved beside the rest, and libssl3's libcrypto.so.3, which the GPU machine may lack as a -dev
# package. Plain files, as for SentencePiece; it needs only libc6.
r="$(pkg_root libssl-dev)"
mkdir -p "$dest/openssl/include" "$dest/openssl/lib"
cp -a "$r/usr/include/openssl" "$dest/openssl/include/"
cp -a "$r"/usr/include/x86_64-linux-gnu/openssl/*.h "$dest/openssl/include/openssl/"
r="$(pkg_root libssl3)"
cp -L "$r/usr/lib/x86_64-linux-gnu/libcrypto.so.3" "$dest/openssl/lib/libcrypto.so.3"
cp -L "$r/usr/lib/x86_64-linux-gnu/libcrypto.so.3" "$dest/openssl/lib/libcrypto.so"

# libwebp and libwebpmux (--image-format webp; cmake/Dependencies.cmake looks in webp/): the
# headers and static libraries of libwebp-dev, which need only libc, libm and pthreads, so
# nothing is loaded at run time.
r="$(pkg_root libwebp-dev)"
mkdir -p "$dest/webp/include" "$dest/webp/lib"
cp -a "$r/usr/include/webp" "$dest/webp/include/"
cp -L "$r/usr/lib/x86_64-linux-gnu/libwebp.a" "$r/usr/lib/x86_64-linux-gnu/libwebpmux.a" "$dest/webp/lib/"

# libjpeg-turbo (JPEG input images; cmake/Dependencies.cmake looks in jpeg/): the headers and
# static library of libjpeg62-turbo-dev, which need only libc.
r="$(pkg_root libjpeg62-turbo-dev)"
mkdir -p "$dest/jpeg/include" "$dest/jpeg/lib"
cp -a "$r"/usr/include/jpeglib.h "$r"/usr/include/jerror.h "$r"/usr/include/jmorecfg.h "$dest/jpeg/include/"
cp -a "$r"/usr/include/x86_64-linux-gnu/jconfig.h "$dest/jpeg/include/"
cp -L "$r/usr/lib/x86_64-linux-gnu/libjpeg.a" "$dest/jpeg/lib/"

# Arrow and Parquet C++ from the venv's pyarrow (the parquet module; cmake/Arrow.cmake). Skipped,
# with a note, where the venv has no pyarrow: the GPU check then builds without parquet.
pyarrow_dir="$("$root/.venv/bin/python" -c 'import pyarrow, os; print(os.path.dirname(pyarrow.__file__))' 2>/dev/null || true)"
if [ -n "$pyarrow_dir" ] && [ -f "$pyarrow_dir/libparquet.so.2600" ]; then
  (cd "$pyarrow_dir" && tar -cf - include/arrow include/parquet libarrow.so.2600 libparquet.so.2600) |
    xz -T0 -6 >"$dest/arrow.tar.xz"
  echo "pyarrow $("$root/.venv/bin/python" -c 'import pyarrow; print(pyarrow.__version__)') (arrow.tar.xz: headers, libarrow, libparquet)" >>"$manifest"
else
  say "no pyarrow 26 in $root/.venv (tools/setup.sh): arrow.tar.xz not carried; the GPU check builds without parquet"
fi

# GoogleTest sources (Debian's googletest package, which libgtest-dev depends on).
r="$(pkg_root googletest)"
cp -a "$r/usr/src/googletest" "$dest/googletest"
rm -rf "$dest"/googletest/{googletest,googlemock}/{test,docs,samples}

# The diffusers peer of the benchmark, as wheels for the GPU machine's Python 3.12
# (the device README's recipe). The pins are tools/fixtures/requirements.txt's, with
# the versions of their dependencies that the fixtures venv resolved; the machine's
# own transformers 5 and huggingface_hub 1.x do not fit diffusers 0.36 and
# transformers 4.57, so these shadow them through PYTHONPATH there.
if [ "$wheels" = 1 ]; then
  py=python3
  [ -x "$root/.venv/bin/python" ] && py="$root/.venv/bin/python"
  pins=(diffusers==0.36.0 transformers==4.57.6 huggingface_hub==0.36.2 tokenizers==0.22.2)
  mkdir -p "$dest/wheels"
  if "$py" -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: \
      --python-version 3.12 --implementation cp \
      --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
      -d "$dest/wheels" "${pins[@]}" >&2; then
    for w in "$dest"/wheels/*.whl; do echo "wheel $(basename "$w")" >>"$manifest"; done
  else
    say "pip download failed: no wheels; the GPU check will skip the diffusers peer"
    rm -rf "$dest/wheels"
  fi
fi

du -sh "$dest" | sed 's/^/prepare_carry: /' >&2
cat "$manifest" >&2
