#!/usr/bin/env bash
# scripts/make-corpus.sh — the plain-text English corpus for the small looping qwen35 model,
# from Debian's fortunes-min package (/usr/share/games/fortunes: fortunes, literature, riddles).
#
#   scripts/make-corpus.sh [OUT.txt]          (default: data/corpus/fortunes.txt)
#   scripts/make-corpus.sh --extra OUT.txt    text the model never saw, for validation and the tether
#                                             (scripts/make-val-data.sh): Debian's fortunes package, files
#                                             wisdom, platitudes, miscellaneous
#   scripts/make-corpus.sh --questions OUT.txt  the fortunes package's other files (art … zippy), from which
#                                             scripts/make-val-data.sh draws the question-style validation prompts
#
# Source: $FORTUNE_DIR (default /usr/share/games/fortunes). When it is missing the script installs
# fortunes-min with apt-get (as root), or else fetches the .deb with `apt-get download` and unpacks
# it with `dpkg-deb -x` into a temporary folder (no root needed).
# Output (deterministic for a given package version): the entries of each file in file order,
# overstrike sequences ("X<backspace>") removed, CR dropped, trailing blanks stripped, each entry
# followed by one blank line; the "%" separators and the .dat index files are not included.
# The package's copyright file (BSD) is copied next to OUT as COPYRIGHT.fortunes-min.
# A line "corpus: N entries, B bytes, sha256 H, fortunes-min V" is printed at the end.
#
# Next steps (see data/corpus/README.md):
#   bonsai-train-lm --train-vocab 1024 OUT.txt -o VOCAB.gguf
#   bonsai-mkmodel INIT.gguf --preset tiny --vocab VOCAB.gguf --logit-scale 0.5
#   bonsai-train-lm --tokenize OUT.txt -m VOCAB.gguf -o tokens.bin
#   bonsai-train-lm -m INIT.gguf --data tokens.bin -o MODEL.gguf --steps N --ctx N --batch N --lr X
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
pkg=fortunes-min
files=(fortunes literature riddles)
if [ "${1:-}" = --extra ] || [ "${1:-}" = --questions ]; then
    pkg=fortunes
    files=(wisdom platitudes miscellaneous)
    # --questions: every other file of the package (the question-style validation prompts are drawn from them)
    [ "$1" = --questions ] && files=(art ascii-art computers cookie debian definitions disclaimer drugs education ethnic
        food goedel humorists kids knghtbrd law linux linuxcookie love magic medicine men-women news paradoxum people
        perl pets politics pratchett science songs-poems sports startrek tao translate-me work zippy)
    [ $# = 2 ] || { echo "usage: $0 $1 OUT.txt" >&2; exit 2; }
    shift
fi
out=${1:-$root/data/corpus/fortunes.txt}
src=${FORTUNE_DIR:-/usr/share/games/fortunes}
tmp=""
cleanup() { [ -n "$tmp" ] && rm -rf "$tmp"; return 0; }
trap cleanup EXIT

if [ ! -f "$src/${files[0]}" ]; then
    if [ "$(id -u)" = 0 ]; then
        echo "make-corpus: installing $pkg" >&2
        apt-get install -y -qq "$pkg" >&2 || { apt-get update -qq >&2 && apt-get install -y -qq "$pkg" >&2; }
    else
        tmp=$(mktemp -d)
        echo "make-corpus: fetching $pkg into $tmp" >&2
        (cd "$tmp" && apt-get download "$pkg" >&2)
        dpkg-deb -x "$tmp"/"$pkg"_*.deb "$tmp/x"
        src="$tmp/x/usr/share/games/fortunes"
    fi
fi
for f in "${files[@]}"; do
    [ -f "$src/$f" ] || { echo "make-corpus: $src/$f not found" >&2; exit 1; }
done

mkdir -p "$(dirname "$out")"
part="$out.tmp.$$"
# awk: entries are separated by lines that are exactly "%"; empty entries are skipped.
for f in "${files[@]}"; do
    sed -e ':a' -e 's/[^\x08]\x08//' -e 'ta' -e 's/\r$//' -e 's/[ \t]*$//' "$src/$f"
    printf '%%\n'
done | awk '
    /^%$/ { if (n > 0) { for (i = 1; i <= n; i++) print buf[i]; print ""; entries++ } n = 0; next }
    { if (n == 0 && $0 == "") next; buf[++n] = $0 }
    END { printf "%d\n", entries > "/dev/stderr" }
' > "$part" 2> "$part.count"
entries=$(cat "$part.count")
rm -f "$part.count"
mv "$part" "$out"
# the package's BSD copyright notice travels with the text
for c in "$src/../../doc/$pkg/copyright" "/usr/share/doc/$pkg/copyright"; do
    if [ -f "$c" ]; then cp "$c" "$(dirname "$out")/COPYRIGHT.$pkg"; break; fi
done
version=$(dpkg-query -W -f='${Version}' "$pkg" 2>/dev/null || echo unknown)
echo "corpus: $entries entries, $(wc -c < "$out") bytes, sha256 $(sha256sum "$out" | cut -d' ' -f1), $pkg $version -> $out"
