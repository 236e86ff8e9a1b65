"""oracle_gguf_read.py - the `gguf` package (not x4) reads x4-synth's tiny file.

Checks, from the tree's root, with the built bin/x4-synth and bin/x4-inspect:
  * GGUFReader sees the same keys, value types and values as `x4-inspect --json`
    (arrays: element type, count and the first elements);
  * the same tensors in the same order with the same shapes, types, sizes and offsets;
  * the raw bytes of a few tensors, read at x4-inspect's offsets, equal GGUFReader's;
  * the weights, dequantized by gguf's own decoders, have the scales docs/forward.md 10.9 asks
    of the synthetic writer (per-weight std about 1/sqrt(K) for a matrix fed a normalised
    input; BF16 attention inside the fp16 normal range, docs/numerics.md 1.9; RMS gains near 1).
Written from the descriptions in docs/forward.md and docs/gguf.md, not from x4's C code.
Prints PASS/FAIL lines.
"""
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
from gguf import GGUFReader, GGUFValueType
from gguf.quants import dequantize

fails = 0


def check(name, ok, why=""):
	global fails
	if ok:
		print(f"PASS {name}")
	else:
		fails += 1
		print(f"FAIL {name}: {why}")
	sys.stdout.flush()


VTYPE = {
	GGUFValueType.UINT8: "u8", GGUFValueType.INT8: "i8", GGUFValueType.UINT16: "u16",
	GGUFValueType.INT16: "i16", GGUFValueType.UINT32: "u32", GGUFValueType.INT32: "i32",
	GGUFValueType.FLOAT32: "f32", GGUFValueType.BOOL: "bool", GGUFValueType.STRING: "string",
	GGUFValueType.ARRAY: "array", GGUFValueType.UINT64: "u64", GGUFValueType.INT64: "i64",
	GGUFValueType.FLOAT64: "f64",
}


def scalar(field, part):
	t = field.types[-1]
	if t == GGUFValueType.STRING:
		return bytes(part).decode("utf-8")
	v = part[0]
	if t == GGUFValueType.BOOL:
		return bool(v)
	if t in (GGUFValueType.FLOAT32, GGUFValueType.FLOAT64):
		return float(v)
	return int(v)


def same_value(a, b, vtype):
	if vtype == "f32":  # x4-inspect prints the shortest decimal that reads back as the f32
		return np.float32(a) == np.float32(b)
	return a == b


def main():
	root = os.getcwd()
	synth = os.path.join(root, "bin/x4-synth")
	inspect = os.path.join(root, "bin/x4-inspect")
	if not (os.access(synth, os.X_OK) and os.access(inspect, os.X_OK)):
		check("setup", False, "bin/x4-synth or bin/x4-inspect is not built (run make)")
		return
	tmp = tempfile.mkdtemp(prefix="x4-oracle-gguf.")
	try:
		run(synth, inspect, tmp)
	finally:
		for f in os.listdir(tmp):
			os.unlink(os.path.join(tmp, f))
		os.rmdir(tmp)


def run(synth, inspect, tmp):
	subprocess.run([synth, "--preset", "tiny", "--seed", "7", "-o", tmp], check=True,
		       stderr=subprocess.DEVNULL)
	path = os.path.join(tmp, "xing4_0-tiny.gguf")
	x4 = json.loads(subprocess.run([inspect, "--json", path], check=True,
				       capture_output=True, text=True).stdout)
	r = GGUFReader(path)

	# -- header --
	h = x4["header"]
	check("header_data_offset", h["data_offset_bytes"] == r.data_offset,
	      f"x4 {h['data_offset_bytes']} gguf {r.data_offset}")
	check("header_counts", h["tensor_count"] == len(r.tensors) and h["version"] == 3 and
	      h["alignment"] == r.alignment, f"x4 {h} gguf {len(r.tensors)} tensors")
	check("header_file_size", h["file_size_bytes"] == os.path.getsize(path), "")

	# -- keys --
	fields = {k: f for k, f in r.fields.items() if not k.startswith("GGUF.")}
	x4keys = [m["key"] for m in x4["metadata"]]
	check("keys_same_set_and_order", x4keys == list(fields.keys()),
	      f"only x4: {set(x4keys) - set(fields)} only gguf: {set(fields) - set(x4keys)}")
	bad = []
	for m in x4["metadata"]:
		f = fields.get(m["key"])
		if f is None:
			continue
		t = VTYPE[f.types[0]]
		if t != m["type"]:
			bad.append(f"{m['key']}: type {m['type']} vs {t}")
			continue
		if t == "array":
			et = VTYPE[f.types[1]]
			head = [scalar(f, f.parts[i]) for i in f.data[:len(m["head"])]]
			if (et != m["elem_type"] or len(f.data) != m["count"] or
			    not all(same_value(a, b, et) for a, b in zip(m["head"], head))):
				bad.append(f"{m['key']}: {m['elem_type']}[{m['count']}] {m['head'][:3]} vs "
					   f"{et}[{len(f.data)}] {head[:3]}")
		else:
			v = scalar(f, f.parts[f.data[0]])
			if not same_value(m["value"], v, t):
				bad.append(f"{m['key']}: {m['value']!r} vs {v!r}")
	check("keys_same_types_and_values", not bad, "; ".join(bad[:5]))

	# the keys of docs/gguf.md 4, as the gguf package reads them
	want = {
		"general.architecture": "xing4_0", "general.file_type": 25,
		"general.quantization_version": 2, "general.alignment": 32,
		"xing4_0.block_count": 5, "xing4_0.nextn_predict_layers": 1,
		"xing4_0.attention.head_count_kv": 1, "xing4_0.attention.key_length": 128,
		"xing4_0.attention.value_length": 64, "xing4_0.expert_gating_func": 2,
		"xing4_0.expert_weights_norm": True, "xing4_0.hyper_connection.clamp_min": -30.0,
		"tokenizer.ggml.model": "llama", "tokenizer.ggml.bos_token_id": 1,
		"tokenizer.ggml.eos_token_id": 2, "tokenizer.ggml.unknown_token_id": 0,
	}
	got = {k: scalar(fields[k], fields[k].parts[fields[k].data[0]]) for k in want if k in fields}
	check("spec_keys", got == want, f"{ {k: got.get(k) for k in want if got.get(k) != want[k]} }")
	check("tokens_count", len(fields["tokenizer.ggml.tokens"].data) == 32768, "")

	# -- tensors --
	xt = x4["tensors"]
	names_ok = [t["name"] for t in xt] == [t.name for t in r.tensors]
	check("tensors_same_names_and_order", names_ok, f"{len(xt)} vs {len(r.tensors)}")
	bad = []
	for a, b in zip(xt, r.tensors):
		shape = [int(v) for v in b.shape]
		if (a["type"] != b.tensor_type.name or a["shape"] != shape or a["bytes"] != int(b.n_bytes)
		    or h["data_offset_bytes"] + a["offset"] != int(b.data_offset)):
			bad.append(f"{a['name']}: {a['type']} {a['shape']} vs {b.tensor_type.name} {shape}")
	check("tensors_same_types_shapes_offsets", not bad, "; ".join(bad[:5]))
	census = {c["type"]: c["count"] for c in x4["census"]}
	check("census", census == {"F32": 46, "Q6_K": 1, "IQ4_NL": 27, "BF16": 39, "total": 113},
	      f"{census}")

	# -- raw bytes at x4-inspect's offsets --
	T = {t.name: t for t in r.tensors}
	with open(path, "rb") as f:
		raw = f.read()
	bad = []
	for name in ("token_embd.weight", "output.weight", "blk.2.ffn_gate_exps.weight",
		     "blk.0.hc_attn_base.weight", "blk.4.nextn.shared_head_head.weight"):
		a = next(t for t in xt if t["name"] == name)
		at = h["data_offset_bytes"] + a["offset"]
		if raw[at:at + a["bytes"]] != T[name].data.tobytes():
			bad.append(name)
	check("raw_bytes_identical", not bad, f"differ: {bad}")

	# -- the scales the synthetic writer promises --
	def deq(name):
		t = T[name]
		return dequantize(t.data, t.tensor_type).astype(np.float64)

	D = 256
	for name, k in (("blk.0.attn_q_a.weight", D), ("blk.0.attn_output.weight", 128),
			("blk.0.ffn_gate.weight", D), ("blk.0.ffn_down.weight", 512),
			("blk.2.ffn_up_exps.weight", D), ("blk.2.ffn_down_exps.weight", 128),
			("blk.3.ffn_gate_shexp.weight", D), ("blk.1.hc_ffn_fn.weight", 4 * D),
			("blk.2.ffn_gate_inp.weight", D)):
		s = deq(name).std()
		check(f"scale_{name}", abs(s * np.sqrt(k) - 1) < 0.15, f"std {s:.5f}, want {1 / np.sqrt(k):.5f}")
	logits_std = deq("output.weight").std() * np.sqrt(D)
	check("scale_output_logits", 1.5 < logits_std < 2.5, f"std x sqrt(D) = {logits_std:.3f}")
	emb = deq("token_embd.weight")
	check("scale_embedding_rows", 0.8 < emb.std() < 1.2, f"std {emb.std():.3f}")
	attn = np.concatenate([np.abs(deq(f"blk.{b}.{n}.weight")).ravel() for b in range(5)
			       for n in ("attn_q_a", "attn_q_b", "attn_kv_a_mqa", "attn_k_b", "attn_v_b",
					 "attn_output")])
	check("bf16_attention_fp16_normal", attn.min() >= 2.0 ** -14 and attn.max() <= 65504,
	      f"|w| in [{attn.min():.3g}, {attn.max():.3g}]")
	g = deq("blk.1.attn_norm.weight")
	check("rms_gains_near_1", abs(g.mean() - 1) < 0.02 and 0.02 < g.std() < 0.08,
	      f"mean {g.mean():.4f} std {g.std():.4f}")
	base = deq("blk.1.hc_attn_base.weight")
	comb = base[8:].reshape(4, 4)
	check("hc_comb_favours_diagonal", np.diag(comb).min() > np.abs(comb - np.diag(np.diag(comb))).max(),
	      f"comb base {comb.round(2).tolist()}")
	sc = deq("blk.1.hc_ffn_scale.weight")
	check("hc_scale", np.allclose(sc, [0.5, 0.5, 1.0], rtol=0.25), f"{sc}")


main()
sys.exit(1 if fails else 0)
