#!/usr/bin/env bash
# One device call's worth of work on the GPU machine (it keeps nothing between
# calls): build for the card, run the GPU tests, write the full preset and
# inspect it.  Usage (from the tree root, on the GPU machine):
#   COMMIT=<git describe> bash bench/gpu-session.sh [steps...]
#   steps: build test-gpu full bench sanitize golden levers (default: the first
#   five, in that order).  golden: with an older tree exported to old/ (git archive REV |
#   tar -x -C old), build its x4-run and write tests/data/gpu_golden_{tiny,small}.json
#   (its greedy and seed-7 tokens and its logits' sha256) for gpu_model.sh to
#   compare against (GOLDEN_TREE=.: this tree's own build, labelled COMMIT).  levers: the record's levers priced by x4-bench-abab on the
#   full preset at LEVER_CTX (default "512 4096") tokens of context; LEVERS (one
#   "A options|B options" a line) prices others, LEVER_PAIRS and LEVER_WARMUP
#   (default 4, 2 past 1,024 tokens; 2) set the rounds: a device call's
#   comparison goes here rather than into a new copy of the loop.  profile:
#   x4-profile on the full preset at PROFILE_CTX (default "512 4096"), with traces.
#   kernels: the kernel lab, old and new kernels side by side (LAB_PROGS:
#   only these programs, e.g. "hc moe"; default every one).  decode: the
#   goal table's decode figures (512, 4096 by x4-bench-abab; 32768 by x4-run).
#   ceiling: x4-ceiling on the full preset: the chunk measurement and the tables for
#   CEILING_CARDS (default 22G,24G,48G,80G,141G) on the whole card (--no-run), then the
#   promise and the edge under each of CEILING_CAPS (default 22G 24G) by what a load
#   accepts; CEILING_RUN=yes fills the edge's cache too (~95,000 positions at 22G: at the
#   prefill rate of RESULTS 14, ~330 tok/s at 32k, longer than one device call).
#   cards: bench/cards.sh on the full preset over the machine's cards (a
#   machine of two or more; CARDS_N, default every card nvidia-smi lists).
#   deps: what x4-serve and its tests need and the GPU image lacks, carried
#   from this machine (the device tool's carry: .deps, .whl): libmicrohttpd and
#   jansson's Debian packages unpacked under /tmp/x4-deps (pkg-config and the
#   loader pointed there), the openai client's wheels under /tmp/x4-site (PY).
#   Put it first: the build finds x4-serve's libraries through it.  Fetch them
#   here once: (cd .deps && apt-get download libmicrohttpd12 libmicrohttpd-dev
#   libjansson-dev) and pip download the wheels of tests/requirements.txt's
#   openai block (cp312, manylinux) into .whl.
#   serve: bench/serve.sh on the full preset: x4-serve through a stock OpenAI
#   client against x4-run (SERVE_ROUNDS, default 3); serve-chat: only its
#   closing chat.  serve-test: tests/gpu_serve.sh alone.  prefill-profile:
#   x4-profile --prefill on the full preset at PREFILL_P (default "512 4096").
#   long: x4-run on the full preset with a prompt of N - 128 words at each N
#   of LONG_CTX (default 131072), --max-model-len N, 64 tokens: prefill and
#   decode at long context (long-N.json, each run under LONG_TIMEOUT, default
#   540 s); `python3 bench/decode_tsv.py --prefill` reads them.
#   ncu: Nsight Compute's report on a lab program's kernels (NCU_PROG,
#   NCU_ARGS, NCU_KERNELS, NCU_COUNT, NCU_SKIP; default the experts' kernels of
#   build/bench/moe): a profiled run, never a speed.
# Logs and tables go to $OUT (or build/gpu-out when OUT is unset).
set -u
# The device tool brings back at most 8 files from $OUT: everything is
# written to a work folder and packed into $OUT/session.tgz at exit (a
# second run into the same $OUT packs session-2.tgz, and so on, and appends
# to its session.log: call 24's levers were lost to the profile's pack).
FINAL=${OUT:-build/gpu-out}
OUT=$(mktemp -d /tmp/x4-gpu-out.XXXXXX)
mkdir -p "$FINAL"
pack() {
	local name=session.tgz n=2
	while [ -e "$FINAL/$name" ]; do name=session-$n.tgz; n=$((n + 1)); done
	cat "$OUT/session.log" >>"$FINAL/session.log" 2>/dev/null
	tar czf "$FINAL/$name" -C "$OUT" .
}
trap pack EXIT
steps=${*:-build test-gpu full bench sanitize}
COMMIT=${COMMIT:-$(git describe --always --dirty 2>/dev/null || echo unknown)}
export X4_COMMIT=$COMMIT
log() { echo "== $*" | tee -a "$OUT/session.log"; }
# The full preset in /tmp/x4-full for a step that needs it (the full step writes it afresh).
full_preset() {
	[ -f /tmp/x4-full/xing4_0-full.gguf ] || bin/x4-synth --preset full --seed 1 -o /tmp/x4-full >/dev/null 2>&1
}
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv | tee "$OUT/gpu.txt"
date -u +%FT%TZ | tee -a "$OUT/gpu.txt"
git rev-parse --short HEAD 2>/dev/null | tee -a "$OUT/gpu.txt"
for s in $steps; do
	case $s in
	build)
		log "build (CUDA_ARCH=90)"
		t0=$SECONDS
		make -j16 CUDA_ARCH=90 COMMIT="$COMMIT" all tests >"$OUT/build.log" 2>&1 || { tail -n 40 "$OUT/build.log"; exit 1; }
		log "build took $((SECONDS - t0)) s";;
	test-gpu)
		log "make test-gpu"
		make CUDA_ARCH=90 COMMIT="$COMMIT" test-gpu >"$OUT/test-gpu.log" 2>&1
		grep -E '^(FAIL|# time|#.*GB/s)|passed' "$OUT/test-gpu.log" | tail -n 40
		cp build/test-logs/gpu_* "$OUT/" 2>/dev/null;;
	full)
		log "x4-synth --preset full"
		d=/tmp/x4-full; rm -rf "$d"
		/usr/bin/time -v bin/x4-synth --preset full --seed 1 -o "$d" 2>"$OUT/synth-full.err" || { tail "$OUT/synth-full.err"; exit 1; }
		grep -E "Elapsed|Maximum resident" "$OUT/synth-full.err" | tee -a "$OUT/session.log"
		tail -n 2 "$OUT/synth-full.err" | tee -a "$OUT/session.log"
		ls -l "$d" | tee -a "$OUT/session.log"
		bin/x4-inspect "$d"/xing4_0-full.gguf >"$OUT/inspect-full.tsv" 2>&1
		bin/x4-inspect --check "$d"/xing4_0-full.gguf 2>&1 | tail -n 3 | tee -a "$OUT/session.log";;
	bench)
		log "bench/baseline.sh on the full preset"
		OUT="$OUT" bash bench/baseline.sh /tmp/x4-full 3 cuda:0 2>&1 | tail -n 12;;
	sanitize)
		# Once, for the record: the parity tests under compute-sanitizer.
		# gpu_kern holds every kernel's cases (the products and the MoE, the rest): 150 s a half.
		for t in gpu_trunk gpu_kern; do
			log "compute-sanitizer memcheck $t"
			limit=150; [ $t = gpu_kern ] && limit=300
			timeout $limit compute-sanitizer --tool memcheck --print-limit 5 build/tests/$t \
				>"$OUT/sanitize-$t.log" 2>&1
			echo "rc=$? $(grep -c '^PASS' "$OUT/sanitize-$t.log") PASS $(grep -c '^FAIL' "$OUT/sanitize-$t.log") FAIL; $(grep 'ERROR SUMMARY' "$OUT/sanitize-$t.log")" | tee -a "$OUT/session.log"
		done;;
	golden)
		# GOLDEN_TREE=. writes them from this tree's own build (a change
		# that moves the bits on purpose), labelled with COMMIT.
		gt=${GOLDEN_TREE:-old}
		log "golden tokens of the tree in $gt/"
		if [ "$gt" = . ]; then
			echo "$COMMIT" >/tmp/x4-golden-commit
		else
			[ -d "$gt" ] || { echo "no $gt/ tree"; exit 1; }
			(cd "$gt" && make -j16 CUDA_ARCH=90 bin/x4-run bin/x4-synth >"$OUT/golden-build.log" 2>&1) || { tail -n 20 "$OUT/golden-build.log"; exit 1; }
			cat "$gt/COMMIT" >/tmp/x4-golden-commit 2>/dev/null || echo old >/tmp/x4-golden-commit
		fi
		mkdir -p tests/data
		for p in tiny small; do
			d=/tmp/x4-golden-$p; rm -rf "$d"
			bin/x4-synth --preset $p --seed 1 -o "$d" >/dev/null 2>&1 || exit 1
			prompt=$(python3 tests/helper_golden.py --prompt $p)
			common=(-m "$d" -p "$prompt" -n 64 --ignore-eos --json --device cuda:0)
			"$gt"/bin/x4-run "${common[@]}" >"$OUT/g-$p-greedy.json" 2>/dev/null
			"$gt"/bin/x4-run "${common[@]}" --temperature 0.8 --top-p 0.9 -s 7 >"$OUT/g-$p-samp.json" 2>/dev/null
			"$gt"/bin/x4-run "${common[@]}" --dump-logits /tmp/g-$p.npy >/dev/null 2>&1
			python3 - "$p" "$OUT/g-$p-greedy.json" "$OUT/g-$p-samp.json" /tmp/g-$p.npy "$(cat /tmp/x4-golden-commit)" >"tests/data/gpu_golden_$p.json" <<'PY'
import hashlib, json, sys
p, g, s, npy, rev = sys.argv[1:]
print(json.dumps({"preset": p, "commit": rev, "greedy": json.load(open(g))["tokens"],
                  "sampled_seed7": json.load(open(s))["tokens"],
                  "logits_sha256": hashlib.sha256(open(npy, "rb").read()).hexdigest()}))
PY
			cp "tests/data/gpu_golden_$p.json" "$OUT/"
			echo "golden $p: $(head -c 120 tests/data/gpu_golden_$p.json)" | tee -a "$OUT/session.log"
		done;;
	levers)
		log "levers by x4-bench-abab on the full preset"
		full_preset
		for ctx in ${LEVER_CTX:-512 4096}; do
			pairs=4; [ "$ctx" -gt 1024 ] && pairs=2
			pairs=${LEVER_PAIRS:-$pairs}
			levers=${LEVERS:-$'|\n--hc eager|--hc fused\n--graph off|--graph on\n--sublayer f32|--sublayer bf16'}
			while IFS= read -r lv; do
				a=${lv%%|*}; b=${lv#*|}
				tag=$(echo "$ctx-$a-$b" | tr -c 'a-z0-9-' '_')
				bin/x4-bench-abab -m /tmp/x4-full --device cuda:0 -a "$a" -b "$b" --prompt-tokens "$ctx" \
					-n 64 --pairs "$pairs" --warmup "${LEVER_WARMUP:-2}" >"$OUT/abab-$tag.tsv" 2>"$OUT/abab-$tag.err"
				echo "ctx $ctx a='$a' b='$b': $(tail -n 1 "$OUT/abab-$tag.err")" | tee -a "$OUT/session.log"
			done <<<"$levers"
		done;;
	profile)
		log "x4-profile on the full preset"
		full_preset
		for ctx in ${PROFILE_CTX:-512 4096}; do
			# shellcheck disable=SC2086
			bin/x4-profile -m /tmp/x4-full --device cuda:0 --context "$ctx" --steps 16 ${DECODE_OPTS:-} \
				--trace "$OUT/trace-$ctx.json.gz" >"$OUT/profile-$ctx.tsv" 2>"$OUT/profile-$ctx.err"
			echo "profile ctx $ctx: rc $? $(grep -E 'unprofiled|adds' "$OUT/profile-$ctx.err" | tail -n 1)" | tee -a "$OUT/session.log"
			awk -F'\t' '$1 == "class" || $1 == "step"' "$OUT/profile-$ctx.tsv" | tee -a "$OUT/session.log"
		done;;
	kernels)
		log "the kernel lab (bench/kernels/run.sh)"
		# shellcheck disable=SC2086
		bash bench/kernels/run.sh ${LAB_PROGS:-} >"$OUT/lab.txt" 2>"$OUT/lab.err"; echo "rc $?" >>"$OUT/lab.txt"
		cp build/bench/lab.tsv "$OUT/" 2>/dev/null
		tail -n 100 "$OUT/lab.txt";;
	long)
		log "long contexts on the full preset: ${LONG_CTX:-131072}"
		full_preset
		for n in ${LONG_CTX:-131072}; do
			python3 -c 'import sys; print(" ".join(["word"] * (int(sys.argv[1]) - 128)))' "$n" >/tmp/plong.txt
			# shellcheck disable=SC2086
			timeout "${LONG_TIMEOUT:-540}" bin/x4-run -m /tmp/x4-full --device cuda:0 -f /tmp/plong.txt -n 64 \
				--ignore-eos --max-model-len "$n" ${DECODE_OPTS:-} --json >"$OUT/long-$n.json" 2>"$OUT/long-$n.err"
			echo "long $n: exit $? $(tail -c 300 "$OUT/long-$n.err" | tr '\n' ' ')" | tee -a "$OUT/session.log"
			python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); print("long ctx %d: decode %s tok/s, first step %s ms, prefill %s tok/s" % (j["prompt_tokens"], j["decode_tok_s"], j["first_step_ms"], j["prefill_tok_s"]))' \
				"$OUT/long-$n.json" 2>/dev/null | tee -a "$OUT/session.log"
		done;;
	decode)
		# The goal table's figures: steady decode by x4-bench-abab (a control
		# pair: both arms the defaults) at 512 and 4096, x4-run's steady rate
		# at 32768 (one prefill of a 32k prompt), the step's profile.
		log "decode figures on the full preset"
		full_preset
		for ctx in 512 4096; do
			# shellcheck disable=SC2086
			bin/x4-bench-abab -m /tmp/x4-full --device cuda:0 -a "" -b "" --prompt-tokens $ctx \
				-n 64 --pairs 2 --warmup 1 ${DECODE_OPTS:-} >"$OUT/decode-$ctx.tsv" 2>"$OUT/decode-$ctx.err"
			echo "decode ctx $ctx: $(tail -n 1 "$OUT/decode-$ctx.err")" | tee -a "$OUT/session.log"
			awk -F'\t' '$1 == "arm" { print "  arm", $3, "decode_ms_tok", $10, "prefill_tok_s", $7 }' "$OUT/decode-$ctx.tsv" | tee -a "$OUT/session.log"
		done
		python3 -c 'print(" ".join(["word"] * 32500))' >/tmp/p32k.txt
		# shellcheck disable=SC2086
		bin/x4-run -m /tmp/x4-full --device cuda:0 -f /tmp/p32k.txt -n 64 --ignore-eos --max-model-len 32832 \
			${DECODE_OPTS:-} --json >"$OUT/decode-32768.json" 2>"$OUT/decode-32768.err"
		python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); print("decode ctx %d: %s tok/s, first step %s ms, prefill %s tok/s" % (j["prompt_tokens"], j["decode_tok_s"], j["first_step_ms"], j["prefill_tok_s"]))' \
			"$OUT/decode-32768.json" | tee -a "$OUT/session.log";;
	ceiling)
		log "x4-ceiling on the full preset"
		cards=${CEILING_CARDS:-22G,24G,48G,80G,141G}
		bin/x4-ceiling -m /tmp/x4-full --device cuda:0 --no-run --cards "$cards" \
			>"$OUT/ceiling-card.tsv" 2>"$OUT/ceiling-card.err"
		echo "ceiling whole card: rc $?" | tee -a "$OUT/session.log"
		tee -a "$OUT/session.log" <"$OUT/ceiling-card.err"
		bin/x4-ceiling --preset full --cards "$cards" >"$OUT/ceiling-predicted.tsv" 2>/dev/null
		run=--no-run; [ "${CEILING_RUN:-no}" = yes ] && run=
		for cap in ${CEILING_CAPS:-22G 24G}; do
			# shellcheck disable=SC2086
			bin/x4-ceiling -m /tmp/x4-full --device cuda:0 --gpu-memory "$cap" --cards "$cap" \
				--chunks 128 $run >"$OUT/ceiling-$cap.tsv" 2>"$OUT/ceiling-$cap.err"
			echo "ceiling --gpu-memory $cap: rc $? $(grep -E 'promises' "$OUT/ceiling-$cap.err" | tail -n 2 | tr '\n' ' ')" | tee -a "$OUT/session.log"
		done;;
	cards)
		n=${CARDS_N:-$(nvidia-smi -L | wc -l)}
		log "bench/cards.sh on the full preset, $n cards"
		OUT="$OUT/cards" bash bench/cards.sh /tmp/x4-full "$n" >"$OUT/cards.tsv" 2>"$OUT/cards.err"
		echo "rc $?: $(grep '^cards.sh' "$OUT/cards.err")" | tee -a "$OUT/session.log"
		grep -E '^(median|aggregate)	' "$OUT/cards.tsv" | tee -a "$OUT/session.log";;
	deps)
		log "x4-serve's libraries and the openai client from .deps and .whl"
		d=/tmp/x4-deps lib=/tmp/x4-deps/usr/lib/x86_64-linux-gnu
		rm -rf "$d" /tmp/x4-site; mkdir -p "$d"
		for f in .deps/*.deb; do dpkg -x "$f" "$d" || exit 1; done
		# The -dev packages' .so links name the runtime's file; the image's own
		# libjansson.so.4 (no -dev there) stands in, and gnutls's headers are
		# not needed to link against libmicrohttpd.so.
		ln -sf "$(ldconfig -p | awk '/libjansson.so.4 /{print $NF; exit}')" "$lib/libjansson.so"
		sed -i '/^Requires.private/d' "$lib"/pkgconfig/*.pc
		export PKG_CONFIG_PATH=$lib/pkgconfig PKG_CONFIG_SYSROOT_DIR=$d
		export LD_LIBRARY_PATH=$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
		python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
			--target /tmp/x4-site .whl/*.whl >"$OUT/pip.log" 2>&1 || { tail -n 5 "$OUT/pip.log"; exit 1; }
		printf '#!/bin/sh\nPYTHONPATH=/tmp/x4-site exec python3 "$@"\n' >/tmp/x4-py; chmod +x /tmp/x4-py
		export PY=/tmp/x4-py
		pkg-config --exists libmicrohttpd jansson && echo "deps: pkg-config finds libmicrohttpd and jansson" | tee -a "$OUT/session.log"
		$PY -c 'import openai; print("deps: openai", openai.__version__)' | tee -a "$OUT/session.log";;
	serve-test)
		log "tests/gpu_serve.sh alone"
		bash tests/gpu_serve.sh >"$OUT/gpu_serve.log" 2>&1
		echo "gpu_serve rc $?: $(grep -c '^PASS' "$OUT/gpu_serve.log") PASS $(grep -c '^FAIL' "$OUT/gpu_serve.log") FAIL" | tee -a "$OUT/session.log"
		grep '^FAIL' "$OUT/gpu_serve.log" | head -n 5;;
	prefill-profile)
		log "x4-profile --prefill on the full preset"
		full_preset
		for p in ${PREFILL_P:-512 4096}; do
			bin/x4-profile -m /tmp/x4-full --device cuda:0 --prefill "$p" -n 2 --max-model-len 8192 \
				--trace "$OUT/trace-prefill-$p.json.gz" >"$OUT/profile-prefill-$p.tsv" 2>"$OUT/profile-prefill-$p.err"
			echo "profile prefill $p: rc $? $(tail -n 1 "$OUT/profile-prefill-$p.err")" | tee -a "$OUT/session.log"
			awk -F'\t' '$1 == "class" || $1 == "step" || $1 == "prefill"' "$OUT/profile-prefill-$p.tsv" | head -n 30 | tee -a "$OUT/session.log"
		done;;
	serve-chat)
		# Only the chat that a stock OpenAI client streams from the full preset.
		log "a chat streamed from x4-serve on the full preset"
		full_preset
		bash bench/serve.sh /tmp/x4-full cuda:0 0 >"$OUT/serve-chat.tsv" 2>"$OUT/serve-chat.err"
		echo "serve.sh rc $?" | tee -a "$OUT/session.log"
		tee -a "$OUT/session.log" <"$OUT/serve-chat.err";;
	serve)
		log "bench/serve.sh on the full preset"
		full_preset
		bash bench/serve.sh /tmp/x4-full cuda:0 "${SERVE_ROUNDS:-3}" 128 >"$OUT/serve.tsv" 2>"$OUT/serve.err"
		echo "serve.sh rc $?" | tee -a "$OUT/session.log"
		grep '^median' "$OUT/serve.tsv" | tee -a "$OUT/session.log"
		tee -a "$OUT/session.log" <"$OUT/serve.err";;
	ncu)
		# Nsight Compute on one lab program's kernels (the hardware counters:
		# a machine on Firecracker has them, gVisor not; the clocks left alone).
		# NCU_PROG (default moe) with NCU_ARGS (default new), kernels matching
		# NCU_KERNELS (default regex:moe_), NCU_COUNT launches (default 3) after
		# NCU_SKIP (default 0) of them;
		# the report as text (speed of light, memory, warp stalls, launch).
		log "ncu on build/bench/${NCU_PROG:-moe}"
		make -s -j16 bench-kernels CUDA_ARCH=90 >"$OUT/ncu-build.log" 2>&1 || { tail "$OUT/ncu-build.log"; exit 1; }
		# shellcheck disable=SC2086
		timeout 400 ncu --clock-control none --kernel-name "${NCU_KERNELS:-regex:moe_}" \
			--launch-skip "${NCU_SKIP:-0}" --launch-count "${NCU_COUNT:-3}" --section SpeedOfLight --section MemoryWorkloadAnalysis \
			--section WarpStateStats --section LaunchStats --section Occupancy \
			build/bench/${NCU_PROG:-moe} ${NCU_ARGS:-new} >"$OUT/ncu-${NCU_PROG:-moe}.txt" 2>&1
		echo "ncu rc $?: $(grep -c 'Duration' "$OUT/ncu-${NCU_PROG:-moe}.txt") kernels reported" | tee -a "$OUT/session.log";;
	*) echo "unknown step $s"; exit 2;;
	esac
done
