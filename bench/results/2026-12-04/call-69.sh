#!/usr/bin/env bash
# Device call 69 (written in session 22, no device lent that session; run it
# on the branch lever-attn-wide, whose temporary --copy wide|wide96|wide64
# arms it uses): the wide decode attention, all 32 heads a block so that
# each staged cache row is read once and each warp has twice the
# independent chains, up to 128 splits (the combine for 128).  Section 41:
# at 32,500 the attention walks its 33 MB of cache at 21.9% of the read
# ceiling, one block of 8 warps an SM, both head groups staging the same
# rows.
#   checks: gpu_kern mla (the library's kernel, then wide at 128 and 64
#     splits, contexts 1 to 32,768, the tests' rule and a second call's
#     bits); the golden digests with --copy wide (tiny: 16 heads, so the
#     library's kernel; small: 32 heads, the bits may move where its splits
#     differ);
#   lab: build/bench/mla_decode new (mma_r32/r64 against wide64/128_r32,
#     wide64/96/128_r64 and the pipelined walk wide64/128_p32 at 512, 4,096
#     and 32,768, each checked against the fp32 kernel);
#   step: x4-bench-abab arm a main's kernel, arm b wide, at 32,500 (wide,
#     wide96, widep: the pipelined walk at 128 splits; 2 pairs).  Call 70
#     prices the lab's best at 512 and 4,096 (at 4,096 128 splits write 8.4
#     MB of partials a layer, more than the cache's 4.7 MB, so 64 may be the
#     better cap there).
set -u
. bench/call-lib.sh
call_begin
call_build all tests build/bench/mla_decode
call_full_bg
build/tests/gpu_kern mla >"$OUT/x/kern-mla.txt" 2>&1
echo "gpu_kern mla rc=$?: $(tail -n 1 "$OUT/x/kern-mla.txt") ($((SECONDS-t0)) s)"; grep -E "^FAIL" "$OUT/x/kern-mla.txt" | head -5
timeout 120 build/bench/mla_decode new >"$OUT/x/lab-mla.tsv" 2>"$OUT/x/lab-mla.err"
echo "lab rc=$? ($((SECONDS-t0)) s)"; cut -f1-7 "$OUT/x/lab-mla.tsv" | grep -E 'mma_r|wide' | column -t; grep -E 'FAIL|skipped' "$OUT/x/lab-mla.err" | head
echo "golden --copy wide:"; bash bench/results/2026-12-03/golden.sh --copy wide
wait
echo "synth done ($((SECONDS-t0)) s)"
call_levers l32 32500 2 330 $'|--copy wide\n|--copy wide96\n|--copy widep'
call_end
