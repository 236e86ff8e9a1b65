#!/usr/bin/env bash
# tool_build.sh - the build and the install, as a user drives them: CFLAGS
# given on the command line add to the flags the build needs, a plain
# `make` uses every core, the C compiles warning-free at -O1, -O3 and -Os (the
# levels GCC 12 sees more at; `make check-opt` does all five in CI), and
# `make install` puts the tools, the man pages and the tiny model where the
# installed tools find it with no -m.  Prints one PASS/FAIL line per check.
set -u
cd "$(dirname "$0")/.." || exit 2
T=$(mktemp -d "${TMPDIR:-/tmp}/x4-tool-build.XXXXXX") || exit 2
trap 'rm -rf "$T"' EXIT
fails=0
ok() { # name, condition-status, why
	if [ "$2" -eq 0 ]; then echo "PASS $1"; else echo "FAIL $1: $3"; fails=$((fails + 1)); fi
}
# A make of our own, not a part of the one running the tests (nor taking its
# command line's CUDA_ARCH, which make exports: `make CUDA_ARCH=90 test`).
mk() { env -u MAKEFLAGS -u MAKELEVEL -u MFLAGS -u CUDA_ARCH make --no-print-directory "$@"; }

# -- make CFLAGS=... adds to the required flags --
line=$(mk -n -B CFLAGS=-O0 build/lib/util/util.o 2>&1 | grep -- ' -c lib/util/util.c')
case $line in
*" -std=c11 "*" -Ilib "*" -O0 "*) r=0 ;;
*) r=1 ;;
esac
[ $r -eq 0 ] && [[ $line == *" -Werror "* ]]
ok build_cflags_add_to_required $? "compile line: $line"

# -- objects are rebuilt when the flags or CUDA_ARCH change (build/flags.txt),
# in a scratch tree so that this tree's build stays as it is --
S=$T/scratch
mkdir -p "$S" && cp Makefile "$S/" && for d in lib cmd kernels tests; do ln -s "$PWD/$d" "$S/$d"; done
(cd "$S" && mk -s build/lib/util/util.o >/dev/null 2>&1)
(cd "$S" && mk -q build/lib/util/util.o); ok build_flags_same_up_to_date $? "util.o out of date with the same flags"
(cd "$S" && mk -q CFLAGS=-O1 build/lib/util/util.o); [ $? -eq 1 ]
ok build_flags_change_rebuilds $? "util.o up to date after CFLAGS changed"
if [ -n "$(mk -s print-nvcc)" ]; then
	(cd "$S" && mk -s build/lib/util/util.o >/dev/null 2>&1)
	(cd "$S" && mk -q CUDA_ARCH=90 build/lib/util/util.o); [ $? -eq 1 ]
	ok build_cuda_arch_change_rebuilds $? "util.o up to date after CUDA_ARCH changed"
else
	echo "SKIP build_cuda_arch_change_rebuilds: no nvcc"
fi
cp "$S/build/flags.txt" "$T/flags.before"
(cd "$S" && mk -n CFLAGS=-O3 build/lib/util/util.o >/dev/null 2>&1)
cmp -s "$S/build/flags.txt" "$T/flags.before"; ok build_dry_run_keeps_flags $? "make -n rewrote build/flags.txt"
# -- a plain make runs as many jobs as there are cores --
n=$(nproc 2>/dev/null || echo 1)
flags=$(mk -pn print-nvcc 2>/dev/null | grep '^MAKEFLAGS = ')
[[ " $flags " == *" -j$n "* ]]; ok build_make_uses_cores $? "want -j$n: $flags"
flags=$(mk -pn -j1 print-nvcc 2>/dev/null | grep '^MAKEFLAGS = ')
[[ " $flags " == *" -j1 "* ]]; ok build_make_j_on_command_line_wins $? "want -j1: $flags"

# -- -Werror at the levels where GCC 12 sees more, on the files it warned
# about (the whole tree at every level is `make check-opt`, in CI) --
mk -s check-opt OPT_LEVELS="-O1 -O3 -Os" OPT_SRC="lib/model/model.c lib/gguf/gguf.c lib/model/layout.c" >"$T/opt.out" 2>&1
ok build_werror_O1_O3_Os $? "$(grep -m 3 'error' "$T/opt.out")"

# -- make install PREFIX=...: the installed tools find the tiny model --
P=$T/prefix
mk -s install PREFIX="$P" >"$T/install.out" 2>&1; rc=$?
ok install_exit $rc "exit $rc: $(tail -c 300 "$T/install.out")"
for f in bin/x4-run bin/x4-synth bin/x4-inspect bin/x4-walk-residual share/man/man1/x4-run.1 \
	share/man/man1/x4-walk-residual.1 share/x4/models/tiny/xing4_0-tiny.gguf \
	share/x4/models/tiny/config.json share/x4/models/tiny/tokenizer.model; do
	[ -f "$P/$f" ] || { ok "install_has[$f]" 1 "missing"; continue; }
done
[ -x "$P/bin/x4-run" ] && [ ! -x "$P/share/man/man1/x4-run.1" ]
ok install_modes $? "$(ls -l "$P/bin/x4-run" "$P/share/man/man1/x4-run.1" 2>&1 | tr '\n' ' ')"
(cd "$T" && "$P/bin/x4-run" -n 4 -s 1 </dev/null >"$T/run.out" 2>"$T/run.err"); rc=$?
[ $rc -eq 0 ] && [ -s "$T/run.out" ]
ok install_run_finds_tiny $? "exit $rc: $(head -c 300 "$T/run.err")"
(cd "$T" && "$P/bin/x4-walk-residual" --tokens 2 --arms f32 >"$T/walk.out" 2>"$T/walk.err"); rc=$?
[ $rc -eq 0 ] && grep -q "^# model $P/share/x4/models/tiny/xing4_0-tiny.gguf " "$T/walk.out"
ok install_walk_finds_tiny $? "exit $rc: $(head -c 300 "$T/walk.err")"
mk -s uninstall PREFIX="$P" >"$T/uninstall.out" 2>&1; rc=$?
left=$(cd "$P" && find . -type f | tr '\n' ' ')
[ $rc -eq 0 ] && [ -z "$left" ]; ok uninstall_removes $? "exit $rc, left: $left"

# -- DESTDIR stages the same tree under another root --
mk -s install DESTDIR="$T/stage" PREFIX=/opt/x4 >"$T/destdir.out" 2>&1; rc=$?
[ $rc -eq 0 ] && [ -x "$T/stage/opt/x4/bin/x4-run" ] &&
	[ -f "$T/stage/opt/x4/share/x4/models/tiny/xing4_0-tiny.gguf" ] && [ ! -e /opt/x4/bin/x4-run ]
ok install_destdir $? "exit $rc: $(tail -c 300 "$T/destdir.out")"

[ $fails -eq 0 ]
