#!/usr/bin/env bash
# gpu_serve.sh - x4-serve's client tests (tests/tool_serve.sh: curl, the
# openai package, a disconnect, the load, the fuzzed corpus, the prefix
# store, the signals) on the small preset on a GPU.  Run from the tree's root
# on a machine with a CUDA GPU (tests/run-gpu.sh does, under `make
# test-gpu`); it writes the small preset into a temporary folder with
# bin/x4-synth.  An argument names the device (default cuda:0; `cpu` runs the
# same on the CPU, slowly, as a dry run).
set -u
cd "$(dirname "$0")/.." || exit 2
DEV=${1:-cuda:0}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if [ ! -x bin/x4-serve ]; then
	echo "SKIP gpu_serve: bin/x4-serve was not built (it needs libmicrohttpd and jansson:" \
		"apt-get install libmicrohttpd-dev libjansson-dev, then make)"
	exit 0
fi
if ! bin/x4-synth --preset small --seed 1 -o "$tmp/small" >"$tmp/synth.log" 2>&1; then
	echo "FAIL gpu_serve.synth: $(tail -n 3 "$tmp/synth.log")"
	exit 1
fi
bash tests/tool_serve.sh "$tmp/small" "$DEV"
