/*
 * inspect.c - what a checkpoint costs per decode token (docs/record.md
 * 1), computed from a tensor list so that the same code
 * prices a file on disk and a layout never written.
 */
#include "x4_int.h"

static bool ends_with(const char *s, const char *suffix)
{
	size_t n = strlen(s), m = strlen(suffix);
	return n >= m && memcmp(s + n - m, suffix, m) == 0;
}

/* "blk.12.attn_q_a.weight" -> 12 and "attn_q_a.weight"; -1 and the name for a global. */
static int split_block(const char *name, const char **rest)
{
	*rest = name;
	if (strncmp(name, "blk.", 4) != 0)
		return -1;
	char *end;
	long b = strtol(name + 4, &end, 10);
	if (end == name + 4 || *end != '.' || b < 0 || b > 1 << 20)
		return -1;
	*rest = end + 1;
	return (int)b;
}

int x4_tensor_specs_from_gguf(const x4_gguf *g, x4_tensor_spec **out, int *n, x4_err *e)
{
	int64_t count = x4_gguf_tensor_count(g);
	*out = NULL;
	*n = 0;
	if (count < 0 || count > 1 << 24)
		return x4_err_set(e, X4_EFORMAT, "tensor count %lld is out of range", (long long)count);
	x4_tensor_spec *t = x4_calloc((size_t)(count ? count : 1), sizeof *t, "the tensor list", e);
	if (!t)
		return X4_ENOMEM;
	for (int64_t i = 0; i < count; i++) {
		const x4_gguf_tensor *s = x4_gguf_tensor_at(g, i);
		const char *rest;
		snprintf(t[i].name, sizeof t[i].name, "%s", s->name);
		t[i].type = s->type;
		t[i].n_dims = s->n_dims;
		for (int d = 0; d < 4; d++)
			t[i].ne[d] = s->ne[d];
		t[i].block = split_block(s->name, &rest);
	}
	*out = t;
	*n = (int)count;
	return 0;
}

static uint64_t spec_bytes(const x4_tensor_spec *t)
{
	return x4_type_bytes(t->type, t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3]);
}

int x4_decode_bytes_count(const x4_config *c, const x4_tensor_spec *t, int n,
			  x4_decode_bytes *out, x4_err *e)
{
	static const char *const attn[] = {
		"attn_q_a.weight", "attn_q_b.weight", "attn_kv_a_mqa.weight",
		"attn_k_b.weight", "attn_v_b.weight", "attn_output.weight",
	};
	static const char *const dense[] = {
		"ffn_gate.weight", "ffn_up.weight", "ffn_down.weight",
	};
	memset(out, 0, sizeof *out);
	bool have_embd = false;
	for (int i = 0; i < n; i++) {
		const char *rest;
		int b = split_block(t[i].name, &rest);
		uint64_t bytes = spec_bytes(&t[i]);
		bool trunk = b >= 0 && b < c->n_block;
		bool hc_fn = strncmp(rest, "hc_", 3) == 0 && ends_with(rest, "_fn.weight");

		if (t[i].type == X4_T_F32 || hc_fn)
			out->misc_record += bytes;
		if (b < 0) {
			if (strcmp(rest, "output.weight") == 0) {
				out->output += bytes;
			} else if (strcmp(rest, "output_norm.weight") == 0) {
				out->misc_trunk += bytes;
			} else if (strcmp(rest, "token_embd.weight") == 0 && t[i].ne[1] > 0) {
				/* a token reads one row of the table */
				uint64_t row = bytes / t[i].ne[1];
				out->misc_record += row;
				out->misc_trunk += row;
				have_embd = true;
			}
			continue;
		}
		if (!trunk)
			continue; /* NextN: never loaded (its F32 part is in misc_record) */
		bool counted = false;
		for (size_t k = 0; k < X4_ARRAY_LEN(attn); k++)
			if (strcmp(rest, attn[k]) == 0) {
				out->attn += bytes;
				counted = true;
			}
		for (size_t k = 0; k < X4_ARRAY_LEN(dense); k++)
			if (strcmp(rest, dense[k]) == 0) {
				out->dense += bytes;
				counted = true;
			}
		if (counted)
			continue;
		if (ends_with(rest, "_exps.weight")) {
			uint64_t n_exp = t[i].ne[2];
			if (n_exp == 0 || (uint64_t)c->n_expert_used > n_exp)
				return x4_err_set(e, X4_ESHAPE, "%s holds %llu experts, fewer than "
						  "expert_used_count %d", t[i].name,
						  (unsigned long long)n_exp, c->n_expert_used);
			out->routed += bytes / n_exp * (uint64_t)c->n_expert_used;
		} else if (ends_with(rest, "_shexp.weight")) {
			out->shared += bytes;
		} else if (strncmp(rest, "hc_", 3) == 0 || ends_with(rest, "norm.weight") ||
			   strcmp(rest, "ffn_gate_inp.weight") == 0 ||
			   strcmp(rest, "exp_probs_b.bias") == 0) {
			out->misc_trunk += bytes;
		}
	}
	if (!have_embd)
		return x4_err_set(e, X4_ENOTFOUND, "token_embd.weight is missing: no embedding row "
				  "to count");
	uint64_t big = out->attn + out->routed + out->output + out->shared + out->dense;
	out->total_record = big + out->misc_record;
	out->total_trunk = big + out->misc_trunk;
	return 0;
}
