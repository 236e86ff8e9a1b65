# emu_setup.sh - sourced by tests/tool_emu_*.sh: the checks and the steps
# every emulator test shares.  emu_setup NAME: from the tree's root, the
# library present, the CUDA runtime to link it against (else one SKIP line
# and exit 0), a scratch folder $T, the kernel headers prepared into
# $T/kern (bench/emu/prep.py).  emu_build NAME SOURCE OUT [FLAGS...]: the
# emulator driver compiled and linked, or one FAIL line and exit 1.
emu_setup() {
	cd "$(dirname "$0")/.." || exit 2
	lib=build/libx4.a
	[ -f "$lib" ] || { echo "FAIL $1.build: $lib is missing (run make first)"; exit 1; }
	cuda=$(dirname "$(command -v nvcc 2>/dev/null || echo /usr/local/cuda/bin/nvcc)")/../lib64
	if ! ls "$cuda"/libcudart.so* >/dev/null 2>&1; then
		echo "SKIP $1: no CUDA runtime to link the library against ($cuda)"
		exit 0
	fi
	T=$(mktemp -d "${TMPDIR:-/tmp}/x4-emu.XXXXXX") || exit 2
	trap 'rm -rf "$T"' EXIT
	python3 bench/emu/prep.py kernels "$T/kern" >"$T/prep.log" 2>&1 ||
		{ echo "FAIL $1.prep: $(tail -n 3 "$T/prep.log")"; exit 1; }
}

# LDFLAGS: the library's own link flags (make asan's sanitizers, which its objects call)
emu_build() {
	local name=$1 src=$2 out=$3
	shift 3
	g++ -O2 -std=c++17 -D_GNU_SOURCE -DX4_HAVE_CUDA -D__CUDA_ARCH__=800 "$@" \
		-Ibench/emu/fake -I"$T/kern" -Ilib -w "$src" -o "$out" "$lib" \
		-lpthread -lm -L"$cuda" -lcudart -Wl,-rpath,"$cuda" ${LDFLAGS:-} >"$out.log" 2>&1 ||
		{ echo "FAIL $name: $(grep -m 3 error "$out.log")"; exit 1; }
}

# emu_run NAME SOURCE WHAT [FLAGS...]: a driver that runs with no arguments,
# built by emu_build into $T/NAME ("PASS NAME.build (WHAT compile for the
# emulator)") and run: its own PASS/FAIL lines, and one FAIL more where it
# exits non-zero.  Returns its exit status.
emu_run() {
	local name=$1 src=$2 what=$3 rc
	shift 3
	emu_build "$name.build" "$src" "$T/$name" "$@"
	echo "PASS $name.build ($what compile for the emulator)"
	"$T/$name" 2>"$T/err"; rc=$?
	[ $rc -eq 0 ] || echo "FAIL $name.run: exit $rc $(tail -n 2 "$T/err")"
	return $rc
}
