/*
 * layout.c - a xing4_0 checkpoint's dimensions (read from its keys, or one
 * of x4-synth's presets) and the exact tensor list they imply
 * (docs/gguf.md 4 and 5).  Nothing here knows 3584 or 40: every shape is derived
 * from the config, so the tiny preset exercises the same code as the release.
 */
#include "trunk_int.h"

#include <math.h>

#define ARCH "xing4_0"

static int get_int(const x4_gguf *g, const char *key, int lo, int hi, int *v, x4_err *e)
{
	uint64_t u;
	int rc = x4_gguf_get_u64(g, key, &u, e);
	if (rc)
		return rc;
	if (u < (uint64_t)lo || u > (uint64_t)hi)
		return x4_err_set(e, X4_EFORMAT, "key %s is %llu, outside [%d, %d]", key,
				  (unsigned long long)u, lo, hi);
	*v = (int)u;
	return 0;
}

static int get_float(const x4_gguf *g, const char *key, float *v, x4_err *e)
{
	double d;
	int rc = x4_gguf_get_f64(g, key, &d, e);
	if (rc)
		return rc;
	if (!isfinite(d))
		return x4_err_set(e, X4_EFORMAT, "key %s is not a finite number", key);
	*v = (float)d;
	return 0;
}

/* kq_scale depends on three keys; keep the formula in one place. */
static void config_derive(x4_config *c)
{
	c->d_nope = c->d_qk - c->d_rope;
	double mscale = 1.0;
	if (c->yarn_factor > 1.0f)
		mscale = 1.0 + (double)c->yarn_log_mult * log((double)c->yarn_factor);
	c->kq_scale = (float)(mscale * mscale / sqrt((double)c->d_qk));
}

/* The relations every later part relies on, each failure naming its keys. */
static int config_check(const x4_config *c, x4_err *e)
{
	if (c->n_nextn >= c->n_block_file)
		return x4_err_set(e, X4_EFORMAT, ARCH ".nextn_predict_layers (%d) leaves no trunk "
				  "block of " ARCH ".block_count (%d)", c->n_nextn, c->n_block_file);
	if (c->n_dense > c->n_block)
		return x4_err_set(e, X4_EFORMAT, ARCH ".leading_dense_block_count (%d) exceeds the "
				  "%d trunk blocks (block_count - nextn_predict_layers)",
				  c->n_dense, c->n_block);
	if (c->d_rope >= c->d_qk || c->d_rope % 2)
		return x4_err_set(e, X4_EFORMAT, ARCH ".rope.dimension_count (%d) must be even and "
				  "below " ARCH ".attention.key_length_mla (%d)", c->d_rope, c->d_qk);
	if (c->n_expert_used > c->n_expert)
		return x4_err_set(e, X4_EFORMAT, ARCH ".expert_used_count (%d) exceeds "
				  ARCH ".expert_count (%d)", c->n_expert_used, c->n_expert);
	/* NextN blocks are MoE blocks too (docs/gguf.md 5.6). */
	if ((c->n_dense < c->n_block || c->n_nextn > 0) &&
	    (c->n_expert < 1 || c->n_expert_used < 1))
		return x4_err_set(e, X4_EFORMAT, "MoE blocks (every block from "
				  ARCH ".leading_dense_block_count on, NextN included) need "
				  ARCH ".expert_count and " ARCH ".expert_used_count >= 1 (they are "
				  "%d and %d)", c->n_expert, c->n_expert_used);
	if (c->bos_id >= c->n_vocab || c->eos_id >= c->n_vocab || c->unk_id >= c->n_vocab)
		return x4_err_set(e, X4_EFORMAT, "tokenizer.ggml.bos/eos/unknown_token_id (%d/%d/%d) "
				  "outside the %d-token vocabulary", c->bos_id, c->eos_id, c->unk_id,
				  c->n_vocab);
	if (!(c->clamp_min < c->clamp_max))
		return x4_err_set(e, X4_EFORMAT, ARCH ".hyper_connection.clamp_min (%g) must be below "
				  "clamp_max (%g)", c->clamp_min, c->clamp_max);
	if (!(c->rms_eps > 0) || !(c->hc_eps > 0))
		return x4_err_set(e, X4_EFORMAT, ARCH ".attention.layer_norm_rms_epsilon and "
				  ARCH ".hyper_connection.epsilon must be positive");
	/* Block formats run along ne0: D and the FFN widths feed IQ4_NL rows
	 * (32), the head is Q6_K (256). */
	if (c->n_embd % 256)
		return x4_err_set(e, X4_EFORMAT, ARCH ".embedding_length (%d) must be a multiple of "
				  "256 (the Q6_K output rows)", c->n_embd);
	if (c->n_ff % 32 || c->n_ff_exp % 32)
		return x4_err_set(e, X4_EFORMAT, ARCH ".feed_forward_length (%d) and "
				  ARCH ".expert_feed_forward_length (%d) must be multiples of 32 "
				  "(IQ4_NL rows)", c->n_ff, c->n_ff_exp);
	return 0;
}

int x4_config_read(const x4_gguf *g, x4_config *c, x4_err *e)
{
	memset(c, 0, sizeof *c);
	const char *s;
	uint64_t len;
	int rc = x4_gguf_get_str(g, "general.architecture", &s, &len, e);
	if (rc)
		return rc;
	if (len != strlen(ARCH) || memcmp(s, ARCH, len) != 0)
		return x4_err_set(e, X4_EFORMAT, "architecture is '%.*s', not " ARCH,
				  (int)X4_MIN(len, 64), s);

	enum { BIG = 1 << 30 };
	struct { const char *key; int *v; int lo, hi; } ints[] = {
		{ ARCH ".block_count", &c->n_block_file, 1, 4096 },
		{ ARCH ".nextn_predict_layers", &c->n_nextn, 0, 4096 },
		{ ARCH ".context_length", &c->n_ctx_train, 1, BIG },
		{ ARCH ".embedding_length", &c->n_embd, 1, 1 << 20 },
		{ ARCH ".feed_forward_length", &c->n_ff, 1, 1 << 24 },
		{ ARCH ".leading_dense_block_count", &c->n_dense, 0, 4096 },
		{ ARCH ".attention.head_count", &c->n_head, 1, 4096 },
		{ ARCH ".attention.key_length_mla", &c->d_qk, 2, 1 << 16 },
		{ ARCH ".attention.value_length_mla", &c->d_v, 1, 1 << 16 },
		{ ARCH ".attention.q_lora_rank", &c->q_lora, 1, 1 << 20 },
		{ ARCH ".attention.kv_lora_rank", &c->kv_lora, 1, 1 << 20 },
		{ ARCH ".rope.dimension_count", &c->d_rope, 2, 1 << 16 },
		{ ARCH ".rope.scaling.original_context_length", &c->yarn_orig_ctx, 1, BIG },
		{ ARCH ".expert_count", &c->n_expert, 0, 1 << 16 },
		{ ARCH ".expert_used_count", &c->n_expert_used, 0, 1 << 16 },
		{ ARCH ".expert_shared_count", &c->n_expert_shared, 0, 1 << 16 },
		{ ARCH ".expert_feed_forward_length", &c->n_ff_exp, 1, 1 << 24 },
		{ ARCH ".expert_gating_func", &c->gating_func, 0, 16 },
		{ ARCH ".hyper_connection.count", &c->n_hc, 1, 64 },
		{ ARCH ".hyper_connection.sinkhorn_iterations", &c->sinkhorn_iters, 0, 1 << 16 },
	};
	for (size_t i = 0; i < X4_ARRAY_LEN(ints); i++)
		if ((rc = get_int(g, ints[i].key, ints[i].lo, ints[i].hi, ints[i].v, e)))
			return rc;
	struct { const char *key; float *v; } floats[] = {
		{ ARCH ".attention.layer_norm_rms_epsilon", &c->rms_eps },
		{ ARCH ".rope.freq_base", &c->rope_base },
		{ ARCH ".rope.scaling.factor", &c->yarn_factor },
		{ ARCH ".rope.scaling.yarn_beta_fast", &c->yarn_beta_fast },
		{ ARCH ".rope.scaling.yarn_beta_slow", &c->yarn_beta_slow },
		{ ARCH ".rope.scaling.yarn_log_multiplier", &c->yarn_log_mult },
		{ ARCH ".expert_weights_scale", &c->expert_scale },
		{ ARCH ".hyper_connection.epsilon", &c->hc_eps },
	};
	for (size_t i = 0; i < X4_ARRAY_LEN(floats); i++)
		if ((rc = get_float(g, floats[i].key, floats[i].v, e)))
			return rc;
	if ((rc = x4_gguf_get_bool(g, ARCH ".expert_weights_norm", &c->expert_norm, e)))
		return rc;
	if ((rc = x4_gguf_get_str(g, ARCH ".rope.scaling.type", &s, &len, e)))
		return rc;
	if (len != 4 || memcmp(s, "yarn", 4) != 0)
		return x4_err_set(e, X4_EFORMAT, ARCH ".rope.scaling.type is '%.*s'; x4 implements "
				  "only 'yarn'", (int)X4_MIN(len, 64), s);

	/* Keys whose only legal value is fixed by the absorbed MLA and the
	 * single-group router: read them so a foreign variant is refused. */
	/* Zeroed: at -O3 GCC 12 cannot see that get_int fails (nonzero)
	 * whenever it leaves *v unset. */
	int head_kv = 0, key_len = 0, value_len = 0, groups = 0, groups_used = 0;
	if ((rc = get_int(g, ARCH ".attention.head_count_kv", 1, 4096, &head_kv, e)) ||
	    (rc = get_int(g, ARCH ".attention.key_length", 1, 1 << 20, &key_len, e)) ||
	    (rc = get_int(g, ARCH ".attention.value_length", 1, 1 << 20, &value_len, e)) ||
	    (rc = get_int(g, ARCH ".expert_group_count", 1, 1 << 16, &groups, e)) ||
	    (rc = get_int(g, ARCH ".expert_group_used_count", 1, 1 << 16, &groups_used, e)))
		return rc;
	if (head_kv != 1)
		return x4_err_set(e, X4_EFORMAT, ARCH ".attention.head_count_kv is %d; the absorbed "
				  "MLA has one shared latent head (1)", head_kv);
	if (key_len != c->kv_lora + c->d_rope)
		return x4_err_set(e, X4_EFORMAT, ARCH ".attention.key_length (%d) != kv_lora_rank "
				  "(%d) + rope.dimension_count (%d)", key_len, c->kv_lora, c->d_rope);
	if (value_len != c->kv_lora)
		return x4_err_set(e, X4_EFORMAT, ARCH ".attention.value_length (%d) != "
				  "kv_lora_rank (%d)", value_len, c->kv_lora);
	if (groups != 1 || groups_used != 1)
		return x4_err_set(e, X4_EFORMAT, ARCH ".expert_group_count/_used_count are %d/%d; "
				  "x4 implements only ungrouped routing (1/1)", groups, groups_used);
	if (c->gating_func != 2)
		return x4_err_set(e, X4_EFORMAT, ARCH ".expert_gating_func is %d; xing4_0 routes by "
				  "sigmoid (2)", c->gating_func);

	/* The clamp is x4's extension (docs/forward.md 10.1): a release-shaped file lacks it. */
	c->clamp_min = -30.0f;
	c->clamp_max = 30.0f;
	if (x4_gguf_find_kv(g, ARCH ".hyper_connection.clamp_min") >= 0 &&
	    (rc = get_float(g, ARCH ".hyper_connection.clamp_min", &c->clamp_min, e)))
		return rc;
	if (x4_gguf_find_kv(g, ARCH ".hyper_connection.clamp_max") >= 0 &&
	    (rc = get_float(g, ARCH ".hyper_connection.clamp_max", &c->clamp_max, e)))
		return rc;

	if (x4_gguf_find_kv(g, ARCH ".vocab_size") >= 0) {
		if ((rc = get_int(g, ARCH ".vocab_size", 1, BIG, &c->n_vocab, e)))
			return rc;
		int64_t i = x4_gguf_find_kv(g, "tokenizer.ggml.tokens");
		int et;
		uint64_t n;
		const void *data;
		if (i >= 0 && x4_gguf_kv_arr(g, i, &et, &n, &data) == 0 && n != (uint64_t)c->n_vocab)
			return x4_err_set(e, X4_EFORMAT, ARCH ".vocab_size (%d) != the length of "
					  "tokenizer.ggml.tokens (%llu)", c->n_vocab,
					  (unsigned long long)n);
	} else {
		int64_t i = x4_gguf_find_kv(g, "tokenizer.ggml.tokens");
		int et;
		uint64_t n;
		const void *data;
		if (i < 0)
			return x4_err_set(e, X4_ENOTFOUND, "neither " ARCH ".vocab_size nor "
					  "tokenizer.ggml.tokens is present: the vocabulary size is unknown");
		if (x4_gguf_kv_arr(g, i, &et, &n, &data) != 0 || n < 1 || n > BIG)
			return x4_err_set(e, X4_EFORMAT, "tokenizer.ggml.tokens is not a usable array");
		c->n_vocab = (int)n;
	}
	/* Token ids default to the release's (docs/gguf.md 4) when a file omits them. */
	struct { const char *key; int *v; int def; } ids[] = {
		{ "tokenizer.ggml.bos_token_id", &c->bos_id, 1 },
		{ "tokenizer.ggml.eos_token_id", &c->eos_id, 2 },
		{ "tokenizer.ggml.unknown_token_id", &c->unk_id, 0 },
	};
	for (size_t i = 0; i < X4_ARRAY_LEN(ids); i++) {
		*ids[i].v = ids[i].def;
		if (x4_gguf_find_kv(g, ids[i].key) >= 0 &&
		    (rc = get_int(g, ids[i].key, 0, BIG, ids[i].v, e)))
			return rc;
	}

	c->n_block = c->n_block_file - c->n_nextn;
	config_derive(c);
	return config_check(c, e);
}

int x4_config_preset(const char *name, x4_config *c, x4_err *e)
{
	/* The released dimensions (docs/forward.md 2); the other presets start here. */
	static const x4_config full = {
		.n_embd = 3584, .n_hc = 4, .n_block = 40, .n_block_file = 41, .n_nextn = 1,
		.n_dense = 2, .n_head = 32, .q_lora = 768, .kv_lora = 512, .d_qk = 192,
		.d_v = 128, .d_rope = 64, .n_vocab = 131072, .n_ff = 9216, .n_expert = 64,
		.n_expert_used = 4, .n_expert_shared = 1, .n_ff_exp = 1024,
		.n_ctx_train = 262144, .sinkhorn_iters = 20, .hc_eps = 1e-6f,
		.clamp_min = -30.0f, .clamp_max = 30.0f, .rms_eps = 1e-6f,
		.rope_base = 10000.0f, .yarn_factor = 64.0f, .yarn_orig_ctx = 4096,
		.yarn_beta_fast = 32.0f, .yarn_beta_slow = 1.0f, .yarn_log_mult = 0.1f,
		.expert_scale = 2.0f, .expert_norm = true, .gating_func = 2,
		.bos_id = 1, .eos_id = 2, .unk_id = 0,
	};
	*c = full;
	if (!name || strcmp(name, "full") == 0) {
		/* as released */
	} else if (strcmp(name, "tiny") == 0) {
		/* Every structural feature at small width: D stays a multiple of
		 * 256 for the Q6_K head; 2 dense + 2 MoE so both FFN kinds and a
		 * block-to-block residual run; top-4 of 16 so routing chooses;
		 * the tokenizer's real 32768 pieces. About 35 MB. */
		c->n_embd = 256;
		c->n_block = 4;
		c->n_block_file = 5;
		c->n_head = 4;
		c->q_lora = 96;
		c->kv_lora = 64;
		c->d_qk = 96;
		c->d_v = 32;
		c->n_vocab = 32768;
		c->n_ff = 512;
		c->n_expert = 16;
		c->n_ff_exp = 128;
		c->n_ctx_train = 4096;
		c->yarn_orig_ctx = 4096;
	} else if (strcmp(name, "small") == 0) {
		/* Released widths (so kernels see their real shapes) with few
		 * blocks and experts: about 1 GB. */
		c->n_block = 4;
		c->n_block_file = 5;
		c->n_expert = 8;
		c->n_vocab = 32768;
	} else {
		return x4_err_set(e, X4_EINVAL, "unknown preset '%s' (use tiny, small or full)", name);
	}
	config_derive(c);
	return config_check(c, e);
}

/* ---- the tensor list ---- */

#define TYPE_BIT(t) (1u << (t))
static const struct {
	uint32_t types;
	int released;
	const char *names;
} roles[] = {
	[X4_ROLE_F32] = { TYPE_BIT(X4_T_F32), X4_T_F32, "F32" },
	[X4_ROLE_BF16] = { TYPE_BIT(X4_T_BF16), X4_T_BF16, "BF16" },
	[X4_ROLE_FFN] = { TYPE_BIT(X4_T_IQ4_NL), X4_T_IQ4_NL, "IQ4_NL" },
	/* kernels/moe_experts.cu and the CPU trunk take either */
	[X4_ROLE_EXPERT] = { TYPE_BIT(X4_T_IQ4_NL) | TYPE_BIT(X4_T_Q8_0), X4_T_IQ4_NL,
			     "IQ4_NL|Q8_0" },
	[X4_ROLE_HEAD] = { TYPE_BIT(X4_T_Q6_K), X4_T_Q6_K, "Q6_K" },
};

uint32_t x4_role_types(int role)
{
	return role >= 0 && role < (int)X4_ARRAY_LEN(roles) ? roles[role].types : 0;
}

const char *x4_role_types_name(int role)
{
	return role >= 0 && role < (int)X4_ARRAY_LEN(roles) ? roles[role].names : "?";
}

/* The parts of a block and the shape symbols of X4_BLOCK_TENSORS (lib/trunk_int.h). */
enum { PART_ALL, PART_HC, PART_DENSE, PART_MOE, PART_SHEXP };
enum {
	DIM_1, DIM_3, DIM_D, DIM_QL, DIM_HQK, DIM_KVR, DIM_KV, DIM_NOPE, DIM_DV, DIM_H, DIM_HDV,
	DIM_HCD, DIM_NC, DIM_FF, DIM_E, DIM_FE, DIM_FS,
};

static uint64_t dim(const x4_config *c, int sym)
{
	const uint64_t H = (uint64_t)c->n_head;
	switch (sym) {
	case DIM_3: return 3;
	case DIM_D: return (uint64_t)c->n_embd;
	case DIM_QL: return (uint64_t)c->q_lora;
	case DIM_HQK: return H * (uint64_t)c->d_qk;
	case DIM_KVR: return (uint64_t)c->kv_lora + (uint64_t)c->d_rope;
	case DIM_KV: return (uint64_t)c->kv_lora;
	case DIM_NOPE: return (uint64_t)c->d_nope;
	case DIM_DV: return (uint64_t)c->d_v;
	case DIM_H: return H;
	case DIM_HDV: return H * (uint64_t)c->d_v;
	case DIM_HCD: return (uint64_t)c->n_hc * (uint64_t)c->n_embd;
	case DIM_NC: return (uint64_t)c->n_hc * (2 + (uint64_t)c->n_hc); /* pre | post | comb */
	case DIM_FF: return (uint64_t)c->n_ff;
	case DIM_E: return (uint64_t)c->n_expert;
	case DIM_FE: return (uint64_t)c->n_ff_exp;
	case DIM_FS: return (uint64_t)c->n_ff_exp * (uint64_t)c->n_expert_shared;
	default: return 1;
	}
}

static const struct block_tensor {
	const char *name;
	int part, role, n_dims, ne[3];
} block_tensors[] = {
#define X4_ROW_(f, nm, part, role, nd, a, b, c) \
	{ nm, PART_##part, X4_ROLE_##role, nd, { DIM_##a, DIM_##b, DIM_##c } },
	X4_BLOCK_TENSORS(X4_ROW_)
#undef X4_ROW_
};

struct lay {
	x4_tensor_spec *t;
	int n, cap;
};

static void add(struct lay *l, int block, int role, const char *name, int n_dims, uint64_t ne0,
		uint64_t ne1, uint64_t ne2)
{
	if (l->n >= l->cap)
		return; /* counted in advance: cannot happen */
	x4_tensor_spec *t = &l->t[l->n++];
	memset(t, 0, sizeof *t);
	if (block >= 0)
		snprintf(t->name, sizeof t->name, "blk.%d.%s", block, name);
	else
		snprintf(t->name, sizeof t->name, "%s", name);
	t->type = roles[role].released;
	t->role = role;
	t->n_dims = n_dims;
	t->ne[0] = ne0;
	t->ne[1] = n_dims > 1 ? ne1 : 1;
	t->ne[2] = n_dims > 2 ? ne2 : 1;
	t->ne[3] = 1;
	t->block = block;
}

/* Block b's tensors of X4_BLOCK_TENSORS, in its order: a trunk block has
 * the gate and a dense or an MoE FFN; a NextN block (b >= n_block) is a
 * plain pre-norm MoE block with no gate. */
static void add_block(struct lay *l, const x4_config *c, int b)
{
	bool nextn = b >= c->n_block, moe = nextn || b >= c->n_dense;
	for (size_t i = 0; i < X4_ARRAY_LEN(block_tensors); i++) {
		const struct block_tensor *bt = &block_tensors[i];
		bool here = bt->part == PART_ALL || (bt->part == PART_HC && !nextn) ||
			    (bt->part == PART_DENSE && !moe) || (bt->part == PART_MOE && moe) ||
			    (bt->part == PART_SHEXP && moe && c->n_expert_shared > 0);
		if (here)
			add(l, b, bt->role, bt->name, bt->n_dims, dim(c, bt->ne[0]), dim(c, bt->ne[1]),
			    dim(c, bt->ne[2]));
	}
}

int x4_layout(const x4_config *c, x4_tensor_spec **out, int *n, x4_err *e)
{
	*out = NULL;
	*n = 0;
	if (c->n_block < 0 || c->n_block_file < c->n_block || c->n_block_file > 4096)
		return x4_err_set(e, X4_EINVAL, "block counts %d trunk / %d stored are inconsistent",
				  c->n_block, c->n_block_file);
	struct lay l = { .cap = 3 + ((int)X4_ARRAY_LEN(block_tensors) + 6) * c->n_block_file };
	l.t = x4_calloc((size_t)l.cap, sizeof *l.t, "the tensor layout", e);
	if (!l.t)
		return X4_ENOMEM;
	uint64_t D = (uint64_t)c->n_embd, V = (uint64_t)c->n_vocab;
	add(&l, -1, X4_ROLE_BF16, "token_embd.weight", 2, D, V, 0);
	add(&l, -1, X4_ROLE_F32, "output_norm.weight", 1, D, 0, 0);
	add(&l, -1, X4_ROLE_HEAD, "output.weight", 2, D, V, 0);
	for (int b = 0; b < c->n_block_file; b++) {
		add_block(&l, c, b);
		if (b < c->n_block)
			continue;
		/* NextN (MTP): x4 recognises these and never binds them */
		add(&l, b, X4_ROLE_FFN, "nextn.eh_proj.weight", 2, 2 * D, D, 0);
		add(&l, b, X4_ROLE_FFN, "nextn.embed_tokens.weight", 2, D, V, 0);
		add(&l, b, X4_ROLE_F32, "nextn.enorm.weight", 1, D, 0, 0);
		add(&l, b, X4_ROLE_F32, "nextn.hnorm.weight", 1, D, 0, 0);
		add(&l, b, X4_ROLE_FFN, "nextn.shared_head_head.weight", 2, D, V, 0);
		add(&l, b, X4_ROLE_F32, "nextn.shared_head_norm.weight", 1, D, 0, 0);
	}
	for (int i = 0; i < l.n; i++) {
		x4_tensor_spec *t = &l.t[i];
		uint64_t elems = t->ne[0] * t->ne[1] * t->ne[2];
		if (elems == 0) {
			int rc = x4_err_set(e, X4_EINVAL, "%s: a zero dimension [%llu, %llu, %llu]: "
					    "the config leaves a count or width at 0", t->name,
					    (unsigned long long)t->ne[0], (unsigned long long)t->ne[1],
					    (unsigned long long)t->ne[2]);
			free(l.t);
			return rc;
		}
		if (t->ne[0] % (uint64_t)x4_type_block_elems(t->type)) {
			int rc = x4_err_set(e, X4_EINVAL, "%s: ne0 %llu is not a multiple of the %s "
					    "block (%d)", t->name, (unsigned long long)t->ne[0],
					    x4_type_name(t->type), x4_type_block_elems(t->type));
			free(l.t);
			return rc;
		}
	}
	*out = l.t;
	*n = l.n;
	return 0;
}

int x4_config_write(x4_gguf_writer *w, const x4_config *c)
{
	int rc = 0;
#define U32(k, v) rc |= x4_gguf_writer_kv_u32(w, ARCH "." k, (uint32_t)(v))
#define F32(k, v) rc |= x4_gguf_writer_kv_f32(w, ARCH "." k, (v))
	rc |= x4_gguf_writer_kv_str(w, "general.architecture", ARCH);
	U32("block_count", c->n_block_file);
	U32("nextn_predict_layers", c->n_nextn);
	U32("context_length", c->n_ctx_train);
	U32("vocab_size", c->n_vocab);
	U32("embedding_length", c->n_embd);
	U32("feed_forward_length", c->n_ff);
	U32("leading_dense_block_count", c->n_dense);
	U32("attention.head_count", c->n_head);
	U32("attention.head_count_kv", 1);
	U32("attention.key_length", c->kv_lora + c->d_rope);
	U32("attention.value_length", c->kv_lora);
	U32("attention.key_length_mla", c->d_qk);
	U32("attention.value_length_mla", c->d_v);
	U32("attention.q_lora_rank", c->q_lora);
	U32("attention.kv_lora_rank", c->kv_lora);
	F32("attention.layer_norm_rms_epsilon", c->rms_eps);
	U32("rope.dimension_count", c->d_rope);
	F32("rope.freq_base", c->rope_base);
	rc |= x4_gguf_writer_kv_str(w, ARCH ".rope.scaling.type", "yarn");
	F32("rope.scaling.factor", c->yarn_factor);
	U32("rope.scaling.original_context_length", c->yarn_orig_ctx);
	F32("rope.scaling.yarn_beta_fast", c->yarn_beta_fast);
	F32("rope.scaling.yarn_beta_slow", c->yarn_beta_slow);
	F32("rope.scaling.yarn_log_multiplier", c->yarn_log_mult);
	U32("expert_count", c->n_expert);
	U32("expert_used_count", c->n_expert_used);
	U32("expert_shared_count", c->n_expert_shared);
	U32("expert_feed_forward_length", c->n_ff_exp);
	U32("expert_gating_func", c->gating_func);
	rc |= x4_gguf_writer_kv_bool(w, ARCH ".expert_weights_norm", c->expert_norm);
	F32("expert_weights_scale", c->expert_scale);
	U32("expert_group_count", 1);
	U32("expert_group_used_count", 1);
	U32("hyper_connection.count", c->n_hc);
	U32("hyper_connection.sinkhorn_iterations", c->sinkhorn_iters);
	F32("hyper_connection.epsilon", c->hc_eps);
	F32("hyper_connection.clamp_min", c->clamp_min);
	F32("hyper_connection.clamp_max", c->clamp_max);
#undef U32
#undef F32
	rc |= x4_gguf_writer_kv_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)c->bos_id);
	rc |= x4_gguf_writer_kv_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)c->eos_id);
	rc |= x4_gguf_writer_kv_u32(w, "tokenizer.ggml.unknown_token_id", (uint32_t)c->unk_id);
	return rc ? X4_EINVAL : 0;
}
