#!/usr/bin/env bash
# get-corpus.sh - at least 1 MB of real English text for the tokenizer oracle
# (tests/oracle_tok.py), from Debian packages that are downloaded and
# unpacked under build/corpus, never installed: the Jargon File, the fortune
# cookies and Bierce's Devil's Dictionary.  Writes build/corpus/english.txt;
# does nothing when that file exists.  Exit 1, with the reason, when the text
# cannot be had (no apt, no network, no mirror).
set -u
cd "$(dirname "$0")/.." || exit 2
out=build/corpus/english.txt
[ -s "$out" ] && exit 0
dir=build/corpus
pkgs=(jargon-text fortunes fortunes-min dict-devil)
mkdir -p "$dir/deb" "$dir/root" || exit 1
fail() { echo "get-corpus: $*" >&2; exit 1; }
command -v apt-get >/dev/null && command -v dpkg-deb >/dev/null ||
	fail "needs apt-get and dpkg-deb (a Debian or Ubuntu machine) to fetch ${pkgs[*]}"
fetch() {
	# apt-get download writes into the current directory; as root it
	# warns that the _apt user cannot write there, which is harmless.
	(cd "$dir/deb" && apt-get download "${pkgs[@]}") >"$dir/apt.log" 2>&1
}
echo "get-corpus: fetching the Debian packages ${pkgs[*]} with apt-get download into $dir/deb" \
	"(unpacked under $dir, nothing installed)" >&2
if ! fetch; then
	# A fresh container has no package lists yet: refresh them once when we may.
	if [ "$(id -u)" -eq 0 ]; then
		apt-get update >>"$dir/apt.log" 2>&1 && fetch
	fi || fail "apt-get download ${pkgs[*]} failed (see $dir/apt.log): the oracle needs the network or a Debian mirror"
fi
for d in "$dir"/deb/*.deb; do
	dpkg-deb -x "$d" "$dir/root" || fail "cannot unpack $d"
done
r=$dir/root/usr/share
tmp=$out.tmp.$$
{
	gzip -dc "$r/doc/jargon-text/jargon.txt.gz"
	# Fortune files: text separated by "%" lines; the .dat files are indexes.
	for f in "$r"/games/fortunes/*; do
		[ -f "$f" ] && [ ! -L "$f" ] && case $f in *.dat|*.u8) ;; *) cat "$f" ;; esac
	done
	# dictd's .dz is gzip with random-access blocks: plain gzip reads it.
	gzip -dc "$r/dictd/devil.dict.dz"
} >"$tmp" 2>"$dir/extract.log" || { rm -f "$tmp"; fail "extracting the text failed (see $dir/extract.log)"; }
size=$(wc -c <"$tmp")
if [ "$size" -lt 1000000 ]; then
	rm -f "$tmp"
	fail "only $size bytes of text in ${pkgs[*]}: want at least 1 MB"
fi
mv "$tmp" "$out" && echo "get-corpus: $out: $size bytes from ${pkgs[*]}" >&2
