#!/usr/bin/env bash
# tool_synth_inspect.sh - run the built x4-synth and x4-inspect from the tree's
# root: exit codes, stdout, stderr, the folder's files, determinism, --check on
# a file with a tensor removed, a truncated file and bad arguments.
# Prints one PASS/FAIL line per check.
set -u
cd "$(dirname "$0")/.." || exit 2
SYNTH=bin/x4-synth INSPECT=bin/x4-inspect DROP=build/tests/helper_gguf_drop
for b in $SYNTH $INSPECT $DROP; do
	[ -x "$b" ] || { echo "FAIL setup: $b is not built (run make)"; exit 1; }
done
T=$(mktemp -d "${TMPDIR:-/tmp}/x4-tool-synth.XXXXXX") || exit 2
trap 'rm -rf "$T"' EXIT
fails=0
ok() { # name, condition-status, why
	if [ "$2" -eq 0 ]; then echo "PASS $1"; else echo "FAIL $1: $3"; fails=$((fails + 1)); fi
}
# run NAME CMD...: stdout in $T/NAME.out, stderr in $T/NAME.err, status in $rc
run() {
	local name=$1; shift
	"$@" >"$T/$name.out" 2>"$T/$name.err" </dev/null
	rc=$?
}

# -- x4-synth writes the tiny preset --
run synth $SYNTH --preset tiny --seed 1 -o "$T/a"
ok synth_exit $rc "exit $rc: $(head -c 300 "$T/synth.err")"
# stderr is not a terminal: no progress bar, only the one-line summary
[ "$(wc -l <"$T/synth.err")" -eq 1 ] && grep -q '^x4-synth: wrote .*: 113 tensors, .* GB/s$' "$T/synth.err" &&
	! grep -q $'\r' "$T/synth.err"
ok synth_stderr_summary_only $? "stderr: $(head -c 300 "$T/synth.err")"
[ ! -s "$T/synth.out" ]; ok synth_stdout_empty $? "stdout: $(head -c 200 "$T/synth.out")"
want="chat_template.jinja config.json tokenizer.model tokenizer_config.json xing4_0-tiny.gguf"
got=$(ls "$T/a" | sort | tr '\n' ' ' | sed 's/ $//')
[ "$got" = "$want" ]; ok synth_folder_files $? "folder holds: $got"
python3 -c 'import json,sys; c=json.load(open(sys.argv[1])); t=json.load(open(sys.argv[2]));
assert c["model_type"] == "xing4_0" and c["mhc_h_res_clamp_min"] == -30.0 and c["rope_scaling"]["type"] == "yarn"
assert c["hidden_size"] == 256 and c["num_hidden_layers"] == 4 and c["num_nextn_predict_layers"] == 1
assert t["eos_token"] == "<_end>" and t["added_tokens_decoder"]["2"]["content"] == "<_end>"' \
	"$T/a/config.json" "$T/a/tokenizer_config.json" 2>"$T/json.err"
ok synth_json_files $? "$(tail -n 1 "$T/json.err")"
GG=$T/a/xing4_0-tiny.gguf

# -- x4-inspect reads it back --
run inspect $INSPECT "$GG"
ok inspect_exit $rc "exit $rc: $(head -c 300 "$T/inspect.err")"
[ ! -s "$T/inspect.err" ]; ok inspect_stderr_empty $? "stderr: $(head -c 300 "$T/inspect.err")"
for s in header metadata tensors census fingerprint architecture decode_bytes decode_time; do
	grep -q "^# $s\$" "$T/inspect.out"; ok "inspect_section_$s" $? "no '# $s' section"
done
grep -q $'^total\t113\t38326432\t' "$T/inspect.out"
ok inspect_census_total $? "$(grep '^total' "$T/inspect.out" | head -n 1)"
grep -q $'^IQ4_NL\t27\t' "$T/inspect.out" && grep -q $'^BF16\t39\t' "$T/inspect.out" &&
	grep -q $'^F32\t46\t' "$T/inspect.out" && grep -q $'^Q6_K\t1\t' "$T/inspect.out"
ok inspect_census_types $? "$(sed -n '/^# census/,/^$/p' "$T/inspect.out" | tr '\n' '|')"
grep -q $'^total_record\t' "$T/inspect.out" && grep -q $'^routed_experts\trouted experts, 4 of 16' "$T/inspect.out" &&
	grep -q $'^total_record\t616\t' "$T/inspect.out"
ok inspect_decode_table $? "$(sed -n '/^# decode_bytes/,/^$/p' "$T/inspect.out" | tr '\n' '|')"
grep -q $'^tokenizer.ggml.tokens\tarray\\[string\\]\t32768\t\\["<_unk>"' "$T/inspect.out"
ok inspect_array_summary $? "$(grep '^tokenizer.ggml.tokens' "$T/inspect.out" | head -c 200)"
run inspect_json $INSPECT --json "$GG"
[ $rc -eq 0 ] && python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert len(d["tensors"]) == 113' \
	"$T/inspect_json.out" 2>/dev/null
ok inspect_json $? "exit $rc or not one JSON object with 113 tensors"
run check $INSPECT --check "$GG"
[ $rc -eq 0 ] && grep -qx 'check: ok, 113 tensors' "$T/check.out" && [ ! -s "$T/check.err" ]
ok check_passes $? "exit $rc: $(head -c 300 "$T/check.out") $(head -c 300 "$T/check.err")"

# -- determinism: same seed (other thread count) same bytes; other seed other bytes --
fp() { $INSPECT --full-fingerprint "$1" | sed -n '/^# fingerprint/{n;n;p}' | cut -f1; }
run synth_b $SYNTH --preset tiny --seed 1 --threads 1 -o "$T/b"
run synth_c $SYNTH --preset tiny --seed 2 -o "$T/c"
fa=$(fp "$GG") fb=$(fp "$T/b/xing4_0-tiny.gguf") fc=$(fp "$T/c/xing4_0-tiny.gguf")
[ -n "$fa" ] && [ "$fa" = "$fb" ]; ok synth_deterministic $? "seed 1: '$fa' vs '$fb' (1 thread)"
[ -n "$fc" ] && [ "$fa" != "$fc" ]; ok synth_seed_changes_bytes $? "seed 1 '$fa' seed 2 '$fc'"
cmp -s "$T/a/tokenizer.model" "$T/b/tokenizer.model" && cmp -s "$T/a/config.json" "$T/c/config.json"
ok synth_folder_deterministic $? "tokenizer.model or config.json differ between runs"

# -- a loud expert is written and recorded --
run synth_loud $SYNTH --preset tiny --loud 2:0:50 -o "$T/l"
[ $rc -eq 0 ] && $INSPECT "$T/l/xing4_0-tiny.gguf" | grep -q $'^x4.synth.loud\tstring\t1\t2:0:50$'
ok synth_loud $? "exit $rc: $(head -c 300 "$T/synth_loud.err")"

# -- the second expert format: --expert-type q8_0 written, inspected, checked, run --
run synth_q8 $SYNTH --preset tiny --expert-type q8_0 -o "$T/q8"
ok synth_q8_exit $rc "exit $rc: $(head -c 300 "$T/synth_q8.err")"
run inspect_q8 $INSPECT "$T/q8/xing4_0-tiny.gguf"
n_q8=$(grep -c $'_exps.weight\tQ8_0\t' "$T/inspect_q8.out")
n_iq4=$(grep -c $'_exps.weight\tIQ4_NL\t' "$T/inspect_q8.out")
[ $rc -eq 0 ] && [ "$n_q8" -gt 0 ] && [ "$n_iq4" -eq 0 ] &&
	grep -q $'^general.file_type\tu32\t1\t7$' "$T/inspect_q8.out" &&
	grep -q $'blk.0.ffn_gate.weight\tIQ4_NL\t' "$T/inspect_q8.out"
ok inspect_q8_expert_types $? "exit $rc; $n_q8 Q8_0 and $n_iq4 IQ4_NL expert stacks"
run check_q8 $INSPECT --check "$T/q8/xing4_0-tiny.gguf"
[ $rc -eq 0 ] && grep -q '^check: ok, 113 tensors$' "$T/check_q8.out"
ok check_q8_accepts $? "exit $rc: $(head -c 300 "$T/check_q8.out")"
run run_q8 bin/x4-run -m "$T/q8" -p "Once upon a time" -n 4 --ignore-eos --json
[ $rc -eq 0 ] && grep -q '"generated_tokens":4,' "$T/run_q8.out"
ok run_q8_cpu $? "exit $rc: $(head -c 300 "$T/run_q8.err")"
run synth_badtype $SYNTH --preset tiny --expert-type q4_k -o "$T/bad"
[ $rc -eq 2 ] && grep -q "use iq4_nl or q8_0" "$T/synth_badtype.err" && [ ! -e "$T/bad/xing4_0-tiny.gguf" ]
ok synth_bad_expert_type $? "exit $rc: $(head -c 300 "$T/synth_badtype.err")"

# -- --check names a removed tensor --
run drop $DROP "$GG" "$T/drop.gguf" blk.3.ffn_up_exps.weight
ok drop_helper $rc "exit $rc: $(head -c 300 "$T/drop.err")"
run check_drop $INSPECT --check "$T/drop.gguf"
[ $rc -eq 1 ] && grep -q $'^missing\tblk.3.ffn_up_exps.weight\tIQ4_NL|Q8_0\t256x128x16' "$T/check_drop.out"
ok check_names_missing_tensor $? "exit $rc: $(head -c 300 "$T/check_drop.out")"
run inspect_drop $INSPECT "$T/drop.gguf"
[ $rc -eq 0 ] && grep -q $'^total\t112\t' "$T/inspect_drop.out"
ok inspect_file_with_hole $? "exit $rc: $(head -c 300 "$T/inspect_drop.err")"

# -- a truncated file: exit 1 and one clear message --
head -c 20000000 "$GG" >"$T/trunc.gguf"
run trunc $INSPECT "$T/trunc.gguf"
[ $rc -eq 1 ] && [ "$(wc -l <"$T/trunc.err")" -eq 1 ] && grep -q 'runs past the end of the file' "$T/trunc.err" &&
	[ ! -s "$T/trunc.out" ]
ok inspect_truncated $? "exit $rc: $(head -c 300 "$T/trunc.err")"
run check_trunc $INSPECT --check "$T/trunc.gguf"
[ $rc -eq 1 ]; ok check_truncated $? "exit $rc"
run missing $INSPECT "$T/no-such.gguf"
[ $rc -eq 1 ] && grep -q 'No such file' "$T/missing.err"; ok inspect_missing_file $? "exit $rc"

# -- a foreign architecture: generic parts, and --check says why --
python3 - "$T/llama.gguf" <<'EOF'
import struct, sys
def s(b): return struct.pack("<Q", len(b)) + b
kv = s(b"general.architecture") + struct.pack("<I", 8) + s(b"llama")
t = s(b"w") + struct.pack("<I", 1) + struct.pack("<Q", 32) + struct.pack("<I", 0) + struct.pack("<Q", 0)
h = b"GGUF" + struct.pack("<IQQ", 3, 1, 1) + kv + t
h += b"\0" * (-len(h) % 32)
open(sys.argv[1], "wb").write(h + b"\0" * 128)
EOF
run llama $INSPECT "$T/llama.gguf"
[ $rc -eq 0 ] && grep -q '^# census' "$T/llama.out" && ! grep -q '^# architecture' "$T/llama.out" && [ ! -s "$T/llama.err" ]
ok inspect_foreign_generic $? "exit $rc: $(head -c 300 "$T/llama.err")"
run check_llama $INSPECT --check "$T/llama.gguf"
[ $rc -eq 1 ] && grep -q "architecture is 'llama', not xing4_0" "$T/check_llama.out"
ok check_foreign_arch $? "exit $rc: $(head -c 300 "$T/check_llama.out")"

# -- usage errors exit 2; -h exits 0 --
for args in "" "--preset huge -o $T/x" "--preset tiny" "--preset tiny --seed abc -o $T/x" \
	"--preset tiny --threads 0 -o $T/x" "--preset tiny --loud 0:0:5 -o $T/x" \
	"--preset tiny --loud 2:99:5 -o $T/x" "--preset tiny --loud 2:0 -o $T/x" \
	"--preset tiny --loud 4:0:5 -o $T/x" "--bogus"; do
	run usage $SYNTH $args
	[ $rc -eq 2 ] && [ -s "$T/usage.err" ] && [ ! -e "$T/x" ]
	ok "synth_usage_exit2 [${args//$T/T}]" $? "exit $rc: $(head -c 200 "$T/usage.err")"
done
run help $SYNTH -h
[ $rc -eq 0 ] && grep -q '^usage: x4-synth' "$T/help.out"; ok synth_help $? "exit $rc"
run usage_i $INSPECT
[ $rc -eq 2 ]; ok inspect_usage_exit2 $? "exit $rc"
# block 4 of the tiny preset is NextN, which no trunk runs
run loud_nextn $SYNTH --preset tiny --loud 4:0:5 -o "$T/x"
grep -q 'MoE blocks are 2\.\.3 (block 4 is the NextN block' "$T/loud_nextn.err"
ok synth_loud_nextn_named $? "$(head -c 300 "$T/loud_nextn.err")"
# stdout that cannot be written is a failure
for args in -h --version; do
	$SYNTH $args >/dev/full 2>"$T/full.err"; rc=$?
	[ $rc -eq 1 ] && grep -q "^x4-synth: writing .* to stdout failed: No space left on device$" "$T/full.err"
	ok "synth_stdout_full [$args]" $? "exit $rc: $(head -c 200 "$T/full.err")"
done

# -- x4-inspect on a FIFO: refused at once, never waits for a writer --
mkfifo "$T/fifo"
timeout 10 $INSPECT "$T/fifo" >"$T/fifo.out" 2>"$T/fifo.err" </dev/null; rc=$?
[ $rc -eq 1 ] && grep -q 'is not a regular file (a FIFO)' "$T/fifo.err"
ok inspect_fifo_refused $? "exit $rc (124: it hung): $(head -c 200 "$T/fifo.err")"

# -- a failed write leaves nothing behind --
mkdir -p "$T/f/xing4_0-tiny.gguf" # a folder where the GGUF must go: the rename fails
run synth_fail $SYNTH --preset tiny -o "$T/f"
left=$(ls -A "$T/f" | tr '\n' ' ')
[ $rc -eq 1 ] && [ "$left" = "xing4_0-tiny.gguf " ] && [ -z "$(ls -A "$T/f/xing4_0-tiny.gguf")" ]
ok synth_failure_cleans_up $? "exit $rc, left: $left: $(head -c 200 "$T/synth_fail.err")"
run synth_fail2 $SYNTH --preset tiny -o "$T/a/config.json/sub"
[ $rc -eq 1 ] && grep -q 'cannot make the folder' "$T/synth_fail2.err"
ok synth_output_not_a_folder $? "exit $rc: $(head -c 200 "$T/synth_fail2.err")"

# -- a failed or interrupted run leaves the folder as it found it --
state() { (cd "$1" && ls -A && md5sum -- *) 2>&1; }
run synth_d $SYNTH --preset tiny --seed 1 -o "$T/d"
rm "$T/d/tokenizer.model" && mkdir "$T/d/tokenizer.model" # a folder where a file must go
before=$(state "$T/d")
run synth_d2 $SYNTH --preset tiny --seed 2 -o "$T/d"
[ $rc -eq 1 ] && [ "$(state "$T/d")" = "$before" ] &&
	grep -q 'tokenizer.model is a folder, not a file' "$T/synth_d2.err"
ok synth_failure_keeps_old_folder $? "exit $rc; before: $(echo $before | head -c 300); now: $(state "$T/d" | tr '\n' ' ' | head -c 300): $(head -c 300 "$T/synth_d2.err")"
rmdir "$T/d/tokenizer.model"
run synth_d3 $SYNTH --preset tiny --seed 1 -o "$T/d"
before=$(state "$T/d")
# A write that fails part way (the file size limit, SIGXFSZ ignored).
(trap '' XFSZ; ulimit -f 20000; exec $SYNTH --preset tiny --seed 2 -o "$T/d") \
	>"$T/fsize.out" 2>"$T/fsize.err" </dev/null; rc=$?
[ $rc -eq 1 ] && [ "$(state "$T/d")" = "$before" ] && grep -q "nothing in .* was changed" "$T/fsize.err"
ok synth_failed_write_keeps_old_folder $? "exit $rc: $(head -c 300 "$T/fsize.err")"
# SIGINT, SIGTERM and SIGHUP while the new GGUF is being written (the
# small preset: about 1 GB, seconds to write).
for sig in INT TERM HUP; do
	$SYNTH --preset small --seed 3 -o "$T/d" >/dev/null 2>"$T/sig.err" </dev/null &
	pid=$!
	for _ in $(seq 200); do
		compgen -G "$T/d/.x4-synth.*/*.tmp.*" >/dev/null && break
		sleep 0.05
	done
	kill -s $sig $pid
	wait $pid; rc=$?
	[ $rc -eq $((128 + $(kill -l $sig))) ] && [ "$(state "$T/d")" = "$before" ]
	ok "synth_sig${sig}_keeps_old_folder" $? "exit $rc; left: $(ls -A "$T/d" | tr '\n' ' ')"
done

# -- the man page carries a real date --
grep -q '^\.Dd [A-Z][a-z]* [0-9][0-9]*, 20[0-9][0-9]$' man/x4-synth.1 && grep -q '^\.Dd ' man/x4-inspect.1 &&
	! grep -q 'Mdocdate' man/*.1
ok synth_inspect_man_dates $? "$(grep -H '^\.Dd' man/x4-synth.1 man/x4-inspect.1)"

[ $fails -eq 0 ]
