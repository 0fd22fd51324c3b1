#!/usr/bin/env bash
# Builds librdkafka's own integration test suite (tests/test-runner) from
# Debian's source package into DIR (default run/librdkafka), for
# TestLibrdkafkaSuite (make librdkafka-suite; make test runs a handful).
# Idempotent: a tree already built is kept. Needs root or sudo the first
# time: it adds a deb-src entry for the system's own Debian archive (the
# URI of its existing apt source) and installs the build's libraries.
# byzlog copies nothing of librdkafka: the suite is fetched and built here.
set -euo pipefail

dir=$(realpath -m "${1:-run/librdkafka}")
say() { printf 'librdkafka: %s\n' "$*" >&2; }
runner() { ls "$dir"/librdkafka-*/tests/test-runner 2>/dev/null | head -1; }

if [ -n "$(runner)" ]; then
  exit 0
fi
sudo=""
[ "$(id -u)" = 0 ] || sudo=sudo

# Source packages: a deb-src entry beside the system's Debian source.
if ! apt-cache showsrc librdkafka >/dev/null 2>&1 || [ -z "$(apt-cache showsrc librdkafka 2>/dev/null)" ]; then
  . /etc/os-release
  uri=""
  if [ -f /etc/apt/sources.list.d/debian.sources ]; then
    uri=$(awk '/^URIs:/{print $2; exit}' /etc/apt/sources.list.d/debian.sources)
  fi
  if [ -z "$uri" ] && [ -f /etc/apt/sources.list ]; then
    uri=$(awk -v s="$VERSION_CODENAME" '$1=="deb" && $3==s {print $2; exit}' /etc/apt/sources.list)
  fi
  if [ -z "$uri" ]; then
    say "no Debian apt source to derive a deb-src entry from; add one for $VERSION_CODENAME by hand"
    exit 1
  fi
  say "adding a deb-src entry for $VERSION_CODENAME"
  printf 'Types: deb-src\nURIs: %s\nSuites: %s\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
    "$uri" "$VERSION_CODENAME" | $sudo tee /etc/apt/sources.list.d/byzlog-deb-src.sources >/dev/null
  $sudo apt-get update -qq
fi

missing=()
for pkg in dpkg-dev make libssl-dev zlib1g-dev libzstd-dev liblz4-dev libsasl2-dev; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'ok installed' || missing+=("$pkg")
done
if ((${#missing[@]})); then
  say "installing ${missing[*]}"
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

mkdir -p "$dir"
cd "$dir"
if [ -z "$(ls -d librdkafka-*/ 2>/dev/null)" ]; then
  say "fetching librdkafka's source package"
  apt-get source -qq librdkafka >/dev/null 2>&1
fi
src=$(ls -d librdkafka-*/ | head -1)
cd "$src"
start=$SECONDS
say "building ${src%/} and its test suite (about 3 minutes on 2 cores)"
# The logs go beside the tree: mklove, librdkafka's configure, takes a file
# named configure.NAME in the tree for a module of its own.
log="$dir/build.out"
if ! { ./configure --disable-curl --disable-gssapi && make -j"$(nproc)" libs && make -j"$(nproc)" -C tests build; } >"$log" 2>&1; then
  tail -n 30 "$log" >&2
  say "the build failed; its output is in $log"
  exit 1
fi
say "built in $((SECONDS - start)) s: $dir/${src}tests/test-runner"
