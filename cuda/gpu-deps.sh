#!/usr/bin/env bash
# cuda/gpu-deps.sh — the build's system libraries for a GPU machine that lacks them (its image has
# CUDA, meson and ninja but no registry: openblas, jansson, pcre2, libmicrohttpd and zlib headers may be
# missing, and then `meson setup` fails before any GPU work).
#   cuda/gpu-deps.sh fetch [DIR]    here: apt-get download the -dev packages and the libraries their
#                                   .so links point to into DIR (default build-gpudeps, git-ignored);
#                                   the device tool's `run` must then carry DIR (carry: ["build-gpudeps"]).
#   cuda/gpu-deps.sh unpack [DIR]   there (cuda/check.sh's deps step does it): dpkg -x every .deb into
#                                   DIR-root/root (never into /; DIR itself stays only .debs, ~15 MB to
#                                   carry), copies their .pc files into DIR-root/pkgconfig with the paths
#                                   moved under it, writes DIR-root/env.sh (PKG_CONFIG_PATH, LD_LIBRARY_PATH,
#                                   C/LIBRARY paths; pkg-config itself if the machine has none).
# The packages are Debian's (this machine); their libraries need only glibc (plus libgfortran, carried).
set -euo pipefail
cd "$(dirname "$0")/.."
CMD=${1:-}
DIR=${2:-build-gpudeps}
PKGS="libopenblas-pthread-dev libopenblas0-pthread libgfortran5 libquadmath0 libjansson-dev libjansson4
      libpcre2-dev libpcre2-8-0 libmicrohttpd-dev libmicrohttpd12 zlib1g-dev zlib1g pkgconf pkgconf-bin libpkgconf3"
case "$CMD" in
fetch)
    mkdir -p "$DIR"
    # shellcheck disable=SC2086
    (cd "$DIR" && apt-get download $PKGS)
    ls -la "$DIR"/*.deb
    du -sh "$DIR"
    ;;
unpack)
    U=$(realpath -m "$DIR-root")
    ROOT=$U/root
    rm -rf "$U"
    mkdir -p "$ROOT" "$U/pkgconfig"
    for f in "$DIR"/*.deb; do dpkg -x "$f" "$ROOT"; done
    # absolute links (zlib1g-dev's libz.so -> /lib/...) point into ROOT instead
    find "$ROOT" -type l | while read -r l; do
        t=$(readlink "$l")
        case $t in /*) ln -sfn "$ROOT$t" "$l" ;; esac
    done
    # .pc files with every /usr path moved under ROOT (openblas's lives in its openblas-pthread folder),
    # without Requires.private (static linking only; libmicrohttpd's names gnutls, which is not carried)
    find "$ROOT" -name '*.pc' | while read -r pc; do
        sed -e "s|=/usr|=$ROOT/usr|g" -e "s| /usr/| $ROOT/usr/|g" -e '/^Requires.private:/d' "$pc" \
            >"$U/pkgconfig/$(basename "$pc")"
    done
    LIBS="$ROOT/usr/lib/x86_64-linux-gnu:$ROOT/usr/lib/x86_64-linux-gnu/openblas-pthread"
    # at run time the system's libz.so.1 (every image has one) is kept: ROOT/lib only for linking
    {
        echo "# written by cuda/gpu-deps.sh unpack: source it before meson setup"
        echo "export PKG_CONFIG_PATH=$U/pkgconfig\${PKG_CONFIG_PATH:+:\$PKG_CONFIG_PATH}"
        echo "export LD_LIBRARY_PATH=$LIBS\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
        echo "export LIBRARY_PATH=$LIBS:$ROOT/lib/x86_64-linux-gnu\${LIBRARY_PATH:+:\$LIBRARY_PATH}"
        echo "export C_INCLUDE_PATH=$ROOT/usr/include\${C_INCLUDE_PATH:+:\$C_INCLUDE_PATH}"
        if ! command -v pkg-config >/dev/null; then
            echo "export PATH=$ROOT/usr/bin:\$PATH"
            echo "export PKG_CONFIG=$ROOT/usr/bin/pkgconf"
        fi
    } >"$U/env.sh"
    # shellcheck disable=SC1091
    . "$U/env.sh"
    for p in openblas jansson libpcre2-8 libmicrohttpd zlib; do
        printf '%s: %s\n' "$p" "$(${PKG_CONFIG:-pkg-config} --modversion "$p" 2>&1)"
    done
    ;;
*)
    echo "usage: cuda/gpu-deps.sh fetch|unpack [DIR]" >&2
    exit 2
    ;;
esac
