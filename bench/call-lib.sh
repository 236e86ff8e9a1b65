# call-lib.sh - sourced by a device call's script (bench/results/DATE/call-N.sh,
# run on the GPU machine from the tree's root with $OUT set by the device
# tool): the steps every call repeats, one definition each.  Output goes to
# $OUT/x, packed into $OUT/x.tgz by call_end (the tool brings back few files).
#   call_begin                 the clock and $OUT/x
#   call_build TARGET...       make -j16 CUDA_ARCH=90 TARGET..., its rc and first errors
#   call_full_bg               the full preset into /tmp/x4-full in the background
#                              (unless there); `wait` before a step that needs it
#   call_levers NAME CTX PAIRS TIMEOUT LEVERS
#                              bench/gpu-session.sh levers (x4-bench-abab, one "A|B"
#                              a line of LEVERS, warm-up 1) into $OUT/x/NAME, its lines;
#                              TIMEOUT is cut to what is left before CALL_END; a
#                              bench still running at its end is stopped
#   CALL_END                   seconds into the call by which its steps end (570), so
#                              that call_end packs inside the device's 600
#   left                       the seconds left before CALL_END
#   upto SECONDS CMD...        CMD under the smaller of SECONDS and the time left
#                              (rc 125 and a line if none is left)
#   call_end                   pack $OUT/x and say how long the call took
CALL_END=570
left() { echo $((CALL_END - (SECONDS - t0))); }
upto() {
	local l; l=$(left); [ "$l" -gt 5 ] || { echo "  (no time left for: $2)"; return 125; }
	timeout $(($1 < l ? $1 : l)) "${@:2}"
}
call_begin() {
	t0=$SECONDS
	mkdir -p "$OUT/x"
}
call_build() {
	make -j16 CUDA_ARCH=90 "$@" >"$OUT/x/build.log" 2>&1
	echo "build rc=$? ($((SECONDS - t0)) s)"
	grep -E ' error' "$OUT/x/build.log" | head -5
}
call_full_bg() {
	[ -f /tmp/x4-full/xing4_0-full.gguf ] ||
		(bin/x4-synth --preset full --seed 1 -o /tmp/x4-full >/dev/null 2>&1) &
}
call_levers() {
	local lim=$(($4 < CALL_END - (SECONDS - t0) ? $4 : CALL_END - (SECONDS - t0)))
	[ "$lim" -gt 0 ] || { echo "levers $1: no time left"; return; }
	OUT="$OUT/x/$1" LEVER_CTX="$2" LEVER_PAIRS="$3" LEVER_WARMUP=1 LEVERS="$5" \
		timeout "$lim" bash bench/gpu-session.sh levers >"$OUT/x/$1.txt" 2>&1
	local rc=$?
	# timeout stops the session's shell, not the bench it started (call 75's
	# ran on beside the steps after it): stop that too
	[ $rc -eq 124 ] && pkill -f bin/x4-bench-abab && sleep 1
	echo "levers $1 rc=$rc ($((SECONDS - t0)) s)"
	grep "ctx" "$OUT/x/$1.txt"
}
call_end() {
	rm -f "$OUT/x/build.log"
	tar -C "$OUT" -czf "$OUT/x.tgz" x && rm -rf "$OUT/x"
	echo "end ($((SECONDS - t0)) s)"
}
