# t.sh - the shell tests' check lines, sourced by tests/tool_*.sh and
# tests/gpu_*.sh after they cd to the tree's root: one PASS or FAIL line a
# check, which tests/run.sh and tests/run-gpu.sh count.
pass() { echo "PASS $1"; }
fail() { echo "FAIL $1: $2"; }
# check NAME STATUS WHY: PASS when STATUS is 0, else FAIL with WHY.
check() { if [ "$2" -eq 0 ]; then pass "$1"; else fail "$1" "$3"; fi; }
