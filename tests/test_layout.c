/*
 * test_layout.c - the presets and the tensor list they imply, against the
 * released checkpoint's figures (docs/gguf.md 5, docs/record.md 1),
 * and x4_config_read over a file x4_config_write wrote.
 */
#include "x4.h"
#include "t.h"

#include <math.h>
#include <unistd.h>

static uint64_t spec_bytes(const x4_tensor_spec *t)
{
	return x4_type_bytes(t->type, t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3]);
}

static const x4_tensor_spec *find(const x4_tensor_spec *t, int n, const char *name)
{
	for (int i = 0; i < n; i++)
		if (strcmp(t[i].name, name) == 0)
			return &t[i];
	return NULL;
}

static uint64_t block_bytes(const x4_tensor_spec *t, int n, int block)
{
	uint64_t s = 0;
	for (int i = 0; i < n; i++)
		if (t[i].block == block)
			s += spec_bytes(&t[i]);
	return s;
}

static void test_full(void)
{
	x4_err e = { 0 };
	x4_config c;
	int rc = x4_config_preset("full", &c, &e);
	T_OK(rc == 0, "preset_full", "%s", e.msg);
	T_OK(c.n_block == 40 && c.n_block_file == 41 && c.d_nope == 128, "preset_full_blocks",
	     "n_block %d file %d d_nope %d", c.n_block, c.n_block_file, c.d_nope);
	T_OK(fabsf(c.kq_scale - 0.14467963f) < 1e-7f, "preset_full_kq_scale", "%.9f",
	     (double)c.kq_scale);

	x4_tensor_spec *t;
	int n;
	rc = x4_layout(&c, &t, &n, &e);
	T_OK(rc == 0 && n == 977, "layout_full_count", "rc %d n %d %s", rc, n, e.msg);
	if (rc)
		return;
	int cnt[64] = { 0 };
	uint64_t bytes[64] = { 0 }, total = 0;
	for (int i = 0; i < n; i++) {
		cnt[t[i].type]++;
		bytes[t[i].type] += spec_bytes(&t[i]);
		total += spec_bytes(&t[i]);
	}
	T_OK(cnt[X4_T_IQ4_NL] == 243 && cnt[X4_T_BF16] == 327 && cnt[X4_T_F32] == 406 &&
	     cnt[X4_T_Q6_K] == 1, "layout_full_census", "IQ4_NL %d BF16 %d F32 %d Q6_K %d",
	     cnt[X4_T_IQ4_NL], cnt[X4_T_BF16], cnt[X4_T_F32], cnt[X4_T_Q6_K]);
	T_OK(bytes[X4_T_IQ4_NL] == 29073866752ull / 32 * 18 && bytes[X4_T_BF16] == 2ull * 1662091264 &&
	     bytes[X4_T_F32] == 4ull * 9311024 && bytes[X4_T_Q6_K] == 385351680ull,
	     "layout_full_type_bytes", "IQ4_NL %llu BF16 %llu F32 %llu Q6_K %llu",
	     (unsigned long long)bytes[X4_T_IQ4_NL], (unsigned long long)bytes[X4_T_BF16],
	     (unsigned long long)bytes[X4_T_F32], (unsigned long long)bytes[X4_T_Q6_K]);
	T_OK(total == 20100828352ull, "layout_full_data_bytes", "%llu", (unsigned long long)total);
	T_OK(block_bytes(t, n, 40) == 1003302144ull, "layout_full_blk40_bytes", "%llu",
	     (unsigned long long)block_bytes(t, n, 40));
	T_OK(block_bytes(t, n, 0) == 113968344ull && block_bytes(t, n, 1) == 113968344ull,
	     "layout_full_dense_block_bytes", "%llu", (unsigned long long)block_bytes(t, n, 0));
	bool moe_ok = true;
	for (int b = 2; b < 40; b++)
		moe_ok &= block_bytes(t, n, b) == 461702616ull;
	T_OK(moe_ok, "layout_full_moe_block_bytes", "blk.2 %llu",
	     (unsigned long long)block_bytes(t, n, 2));
	int n40 = 0, hc40 = 0;
	for (int i = 0; i < n; i++)
		if (t[i].block == 40) {
			n40++;
			hc40 += strstr(t[i].name, ".hc_") != NULL;
		}
	T_OK(n40 == 24 && hc40 == 0, "layout_full_nextn_block", "%d tensors, %d hc_*", n40, hc40);

	/* Spot shapes straight from the tables of docs/gguf.md 5. */
	const x4_tensor_spec *s = find(t, n, "blk.7.attn_k_b.weight");
	T_OK(s && s->type == X4_T_BF16 && s->n_dims == 3 && s->ne[0] == 128 && s->ne[1] == 512 &&
	     s->ne[2] == 32, "layout_full_k_b_shape", "%s", s ? "wrong" : "missing");
	s = find(t, n, "blk.2.ffn_down_exps.weight");
	T_OK(s && s->type == X4_T_IQ4_NL && s->ne[0] == 1024 && s->ne[1] == 3584 && s->ne[2] == 64,
	     "layout_full_down_exps_shape", "%s", s ? "wrong" : "missing");
	s = find(t, n, "blk.39.hc_ffn_fn.weight");
	T_OK(s && s->type == X4_T_BF16 && s->ne[0] == 14336 && s->ne[1] == 24,
	     "layout_full_hc_fn_shape", "%s", s ? "wrong" : "missing");
	s = find(t, n, "blk.40.nextn.eh_proj.weight");
	T_OK(s && s->type == X4_T_IQ4_NL && s->ne[0] == 7168 && s->ne[1] == 3584,
	     "layout_full_eh_proj_shape", "%s", s ? "wrong" : "missing");
	T_OK(find(t, n, "blk.1.ffn_gate.weight") && !find(t, n, "blk.1.ffn_gate_inp.weight") &&
	     find(t, n, "blk.2.exp_probs_b.bias") && !find(t, n, "blk.40.hc_attn_fn.weight"),
	     "layout_full_names", "dense/MoE/NextN split wrong");
	T_OK(strcmp(t[0].name, "token_embd.weight") == 0 && strcmp(t[2].name, "output.weight") == 0 &&
	     t[2].type == X4_T_Q6_K && t[n - 1].block == 40, "layout_full_order", "%s %s",
	     t[0].name, t[2].name);

	x4_decode_bytes d;
	rc = x4_decode_bytes_count(&c, t, n, &d, &e);
	T_OK(rc == 0 && d.attn == 2272788480ull && d.routed == 941359104ull &&
	     d.output == 385351680ull && d.shared == 235339776ull && d.dense == 111476736ull,
	     "decode_bytes_rows", "attn %llu routed %llu out %llu shared %llu dense %llu %s",
	     (unsigned long long)d.attn, (unsigned long long)d.routed,
	     (unsigned long long)d.output, (unsigned long long)d.shared,
	     (unsigned long long)d.dense, e.msg);
	T_OK(d.misc_record == 92301504ull && d.total_record == 4038617280ull,
	     "decode_bytes_record_total", "misc %llu total %llu",
	     (unsigned long long)d.misc_record, (unsigned long long)d.total_record);
	T_OK(d.misc_trunk == 91306944ull, "decode_bytes_trunk_misc", "%llu",
	     (unsigned long long)d.misc_trunk);
	free(t);
}

static uint64_t total_bytes(const char *preset, int *count)
{
	x4_err e = { 0 };
	x4_config c;
	x4_tensor_spec *t;
	int n;
	if (x4_config_preset(preset, &c, &e) || x4_layout(&c, &t, &n, &e))
		return 0;
	uint64_t s = 0;
	for (int i = 0; i < n; i++)
		s += spec_bytes(&t[i]);
	free(t);
	*count = n;
	return s;
}

static void test_small_presets(void)
{
	int n = 0;
	uint64_t tiny = total_bytes("tiny", &n);
	/* 3 globals + 2 dense x 19 + 2 MoE x 24 + NextN 24 */
	T_OK(n == 113, "layout_tiny_count", "%d", n);
	T_OK(tiny > 1000000 && tiny < 64ull << 20, "layout_tiny_size", "%llu bytes",
	     (unsigned long long)tiny);
	uint64_t small = total_bytes("small", &n);
	T_OK(n == 113 && small > 500000000ull && small < 1500000000ull, "layout_small_size",
	     "%d tensors %llu bytes", n, (unsigned long long)small);
	x4_err e = { 0 };
	x4_config c;
	T_OK(x4_config_preset("huge", &c, &e) == X4_EINVAL && strstr(e.msg, "huge"),
	     "preset_unknown", "%s", e.msg);
}

/* Keys only (config_read needs no tensors); arch NULL writes x4_config_write's. */
static int write_keys(const char *path, const x4_config *c, const char *arch, x4_err *e)
{
	x4_gguf_writer *w;
	int rc = x4_gguf_writer_open(&w, path, e);
	if (rc)
		return rc;
	if (arch)
		x4_gguf_writer_kv_str(w, "general.architecture", arch);
	else
		x4_config_write(w, c);
	if ((rc = x4_gguf_writer_begin_data(w, e))) {
		x4_gguf_writer_abort(w);
		return rc;
	}
	return x4_gguf_writer_finish(w, e);
}

static int read_keys(const char *path, x4_config *c, x4_err *e)
{
	x4_gguf *g;
	int rc = x4_gguf_open(&g, path, e);
	if (rc)
		return rc;
	rc = x4_config_read(g, c, e);
	x4_gguf_close(g);
	return rc;
}

static void test_round_trip(void)
{
	char path[64];
	snprintf(path, sizeof path, "/tmp/x4_test_layout.%d.gguf", (int)getpid());
	static const char *const presets[] = { "tiny", "small", "full" };
	for (size_t i = 0; i < sizeof presets / sizeof *presets; i++) {
		x4_err e = { 0 };
		x4_config want, got;
		char name[64];
		x4_config_preset(presets[i], &want, &e);
		int rc = write_keys(path, &want, NULL, &e);
		if (rc == 0)
			rc = read_keys(path, &got, &e);
		snprintf(name, sizeof name, "config_round_trip_%s", presets[i]);
		/* Every field is an exact int/float/bool copy (f32 keys hold f32). */
		T_OK(rc == 0 && memcmp(&want, &got, sizeof want) == 0, name, "rc %d %s", rc, e.msg);
	}

	x4_err e = { 0 };
	x4_config c, got;
	x4_config_preset("tiny", &c, &e);
	int rc = write_keys(path, &c, "llama", &e);
	rc = rc ? rc : read_keys(path, &got, &e);
	T_OK(rc == X4_EFORMAT && strstr(e.msg, "architecture is 'llama', not xing4_0"),
	     "config_read_foreign_arch", "rc %d: %s", rc, e.msg);
	rc = write_keys(path, &c, "xing4_0", &e);
	rc = rc ? rc : read_keys(path, &got, &e);
	T_OK(rc != 0 && strstr(e.msg, "xing4_0.block_count"), "config_read_missing_key",
	     "rc %d: %s", rc, e.msg);
	c.n_expert_used = c.n_expert + 1;
	rc = write_keys(path, &c, NULL, &e);
	rc = rc ? rc : read_keys(path, &got, &e);
	T_OK(rc == X4_EFORMAT && strstr(e.msg, "expert_used_count") && strstr(e.msg, "expert_count"),
	     "config_read_inconsistent", "rc %d: %s", rc, e.msg);
	unlink(path);
}

/* x4_synth_weights over the tiny layout with tensor `name` given `type`:
 * its return code, e filled. */
static int synth_retyped(const char *path, const char *name, int type, x4_err *e)
{
	x4_config c;
	x4_tensor_spec *t;
	int n, rc;
	if ((rc = x4_config_preset("tiny", &c, e)) || (rc = x4_layout(&c, &t, &n, e)))
		return rc;
	for (int i = 0; i < n; i++)
		if (strcmp(t[i].name, name) == 0)
			t[i].type = type;
	x4_gguf_writer *w;
	if ((rc = x4_gguf_writer_open(&w, path, e))) {
		free(t);
		return rc;
	}
	for (int i = 0; i < n; i++)
		x4_gguf_writer_tensor(w, t[i].name, t[i].type, t[i].n_dims, t[i].ne);
	x4_synth_opts o = { .seed = 1, .threads = 1 };
	if (!(rc = x4_gguf_writer_begin_data(w, e)))
		rc = x4_synth_weights(w, &c, t, n, &o, e);
	x4_gguf_writer_abort(w);
	free(t);
	return rc;
}

/* The synthetic writer refuses a type it has no generator for, or a
 * control tensor it would write as F32 in a narrower type, before it
 * writes a byte (it used to draw any other type as F32 values). */
static void test_synth_types(void)
{
	char path[64];
	snprintf(path, sizeof path, "/tmp/x4_test_synth.%d.gguf", (int)getpid());
	static const struct {
		const char *tensor;
		int type;
		const char *want, *name;
	} cases[] = {
		{ "token_embd.weight", X4_T_F16, "(F16)", "synth_refuses_type F16 token_embd" },
		{ "output.weight", X4_T_Q4_K, "(Q4_K)", "synth_refuses_type Q4_K output" },
		{ "output_norm.weight", X4_T_BF16, "drawn as F32", "synth_refuses_type BF16 output_norm" },
	};
	for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
		x4_err e = { 0 };
		int rc = synth_retyped(path, cases[k].tensor, cases[k].type, &e);
		T_OK(rc == X4_EINVAL && strstr(e.msg, cases[k].tensor) && strstr(e.msg, cases[k].want),
		     cases[k].name, "rc %d: %s", rc, e.msg);
	}
	x4_err e = { 0 };
	int rc = synth_retyped(path, "output.weight", X4_T_Q6_K, &e);
	T_OK(rc == 0, "synth_accepts_layout tiny", "rc %d: %s", rc, e.msg);
	unlink(path);
}

int main(void)
{
	test_full();
	test_small_presets();
	test_round_trip();
	test_synth_types();
	return t_done();
}
