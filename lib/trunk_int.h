/*
 * trunk_int.h - what lib/model/model.c binds and the trunks (CPU and CUDA) read,
 * plus the CPU trunk's pieces that tests/test_trunk.c checks one by one.
 * Only lib/ and tests/ include this.
 */
#ifndef X4_TRUNK_INT_H
#define X4_TRUNK_INT_H

#include "x4_int.h"

/* A block's tensors, once (docs/gguf.md 5.3-5.5): the x4_block_w field,
 * the name after "blk.N.", the part of the block that holds it (ALL: trunk
 * and NextN blocks; HC: trunk blocks; DENSE: blocks below n_dense; MOE:
 * the MoE blocks, NextN included; SHEXP: those, when expert_shared_count >
 * 0), its role (enum x4_role: the released type and the types taken
 * instead) and its shape in ggml order from the configuration (lib/model/layout.c
 * resolves the symbols: D n_embd, QL q_lora, HQK n_head * d_qk, KVR kv_lora
 * + d_rope, KV kv_lora, NOPE d_nope, DV d_v, H n_head, HDV n_head * d_v,
 * HCD n_hc * n_embd, NC n_hc * (2 + n_hc), FF n_ff, E n_expert, FE
 * n_ff_exp, FS n_ff_exp * expert_shared_count, 3 and 1 themselves).  In
 * file order.  x4_layout, the binding (lib/model/model.c), x4_block_w, the
 * device copy x4_block_dev, its upload (lib/cuda/trunk_cuda.c) and the memory
 * plan's count of it (lib/cuda/mem_plan.c) come from it. */
#define X4_BLOCK_TENSORS(X)                                                             \
	X(attn_norm, "attn_norm.weight", ALL, F32, 1, D, 1, 1)                          \
	X(attn_q_a, "attn_q_a.weight", ALL, BF16, 2, D, QL, 1)                          \
	X(attn_q_a_norm, "attn_q_a_norm.weight", ALL, F32, 1, QL, 1, 1)                 \
	X(attn_q_b, "attn_q_b.weight", ALL, BF16, 2, QL, HQK, 1)                        \
	X(attn_kv_a_mqa, "attn_kv_a_mqa.weight", ALL, BF16, 2, D, KVR, 1)               \
	X(attn_kv_a_norm, "attn_kv_a_norm.weight", ALL, F32, 1, KV, 1, 1)               \
	X(attn_k_b, "attn_k_b.weight", ALL, BF16, 3, NOPE, KV, H)                       \
	X(attn_v_b, "attn_v_b.weight", ALL, BF16, 3, KV, DV, H)                         \
	X(attn_output, "attn_output.weight", ALL, BF16, 2, HDV, D, 1)                   \
	X(hc_attn_fn, "hc_attn_fn.weight", HC, BF16, 2, HCD, NC, 1)                     \
	X(hc_attn_base, "hc_attn_base.weight", HC, F32, 1, NC, 1, 1)                    \
	X(hc_attn_scale, "hc_attn_scale.weight", HC, F32, 1, 3, 1, 1)                   \
	X(ffn_norm, "ffn_norm.weight", ALL, F32, 1, D, 1, 1)                            \
	X(hc_ffn_fn, "hc_ffn_fn.weight", HC, BF16, 2, HCD, NC, 1)                       \
	X(hc_ffn_base, "hc_ffn_base.weight", HC, F32, 1, NC, 1, 1)                      \
	X(hc_ffn_scale, "hc_ffn_scale.weight", HC, F32, 1, 3, 1, 1)                     \
	X(ffn_gate, "ffn_gate.weight", DENSE, FFN, 2, D, FF, 1)                         \
	X(ffn_up, "ffn_up.weight", DENSE, FFN, 2, D, FF, 1)                             \
	X(ffn_down, "ffn_down.weight", DENSE, FFN, 2, FF, D, 1)                         \
	X(ffn_gate_inp, "ffn_gate_inp.weight", MOE, F32, 2, D, E, 1)                    \
	X(exp_probs_b, "exp_probs_b.bias", MOE, F32, 1, E, 1, 1)                        \
	X(ffn_gate_exps, "ffn_gate_exps.weight", MOE, EXPERT, 3, D, FE, E)              \
	X(ffn_up_exps, "ffn_up_exps.weight", MOE, EXPERT, 3, D, FE, E)                  \
	X(ffn_down_exps, "ffn_down_exps.weight", MOE, EXPERT, 3, FE, D, E)              \
	X(ffn_gate_shexp, "ffn_gate_shexp.weight", SHEXP, FFN, 2, D, FS, 1)             \
	X(ffn_up_shexp, "ffn_up_shexp.weight", SHEXP, FFN, 2, D, FS, 1)                 \
	X(ffn_down_shexp, "ffn_down_shexp.weight", SHEXP, FFN, 2, FS, D, 1)

/* One trunk block's tensors, bound by name and checked for type and shape
 * at open; the half a block does not have (dense or MoE, the shared
 * expert, the gate of a NextN block) is NULL. */
typedef struct x4_block_w {
#define X4_FIELD_(f, ...) const x4_gguf_tensor *f;
	X4_BLOCK_TENSORS(X4_FIELD_)
#undef X4_FIELD_
	bool moe;
} x4_block_w;

struct x4_model {
	x4_gguf *g;
	x4_config c;            /* clamp bounds resolved (GGUF, config.json, +-30) */
	x4_paths paths;
	x4_tokenizer *tok;
	const x4_gguf_tensor *token_embd, *output_norm, *output;
	x4_block_w *blk;        /* [c.n_block] */
	char fingerprint[17];
};

/* The CUDA trunk's activations of one chunk of up to T tokens, carved out
 * of one device allocation (256-byte aligned pieces; x4k_moe_routes_init
 * wants it).  Declared in every build: the memory plan (lib/cuda/mem_plan.c)
 * counts the bytes of the same layout without a device. */
typedef struct x4_cuda_ws {
	float *H, *Hn;       /* [T][n_hc][D] the streams, and the update's target */
	float *x, *xh, *y;   /* [T][D] collapse, normed sublayer input, sublayer output */
	float *shared;       /* [T][D] the shared expert's output */
	float *coef_a, *coef_f; /* [T][ncoef] the attention and FFN gates' coefficients */
	float *cq;           /* [T][q_lora] */
	float *q;            /* [T][n_head][d_qk] */
	float *kva;          /* [T][kv_lora + d_rope] */
	float *qt;           /* [T][n_head][cw] q-tilde | roped q_r */
	float *ob;           /* [T][n_head][kv_lora] */
	float *o;            /* [T][n_head][d_v] */
	float *g, *u, *h;    /* [T][F] dense FFN / shared expert: gate, up, product */
	float *hn;           /* [T][D] the head's normed input */
	float *logits;       /* [T][n_vocab] */
	void *hc_ws;         /* x4k_hc_workspace_bytes(T), zeroed once */
	size_t hc_ws_bytes;
	void *routes_ws;     /* the largest x4k_moe_routes_bytes for 1..T tokens */
	size_t routes_ws_bytes;
	void *exp_ws;        /* x4k_moe_experts_workspace_bytes(T) */
	size_t exp_ws_bytes;
	void *att_ws;        /* x4k_mla_decode_workspace_bytes(max_ctx) */
	size_t att_ws_bytes;
	int32_t *ids;        /* [T] */
	int *pos;            /* [1] the position of the chunk's first token */
	float *omega;        /* [d_rope/2] YaRN frequencies */
} x4_cuda_ws;

/* Bytes of the CUDA trunk's workspace for chunks of up to T tokens with a
 * cache of max_ctx positions; with base set, also carve w's pointers out of
 * it (base NULL: only count).  The one layout the trunk places by and the
 * plan counts by (lib/cuda/mem_plan.c). */
size_t x4_cuda_ws_layout(const x4_config *c, int max_ctx, int T, char *base, x4_cuda_ws *w);

/* ---- the trunk backends behind lib/run/trunk.c ---- */

/* The cache's positions for o (NULL: the defaults): o->max_ctx, else
 * min(the trained context, X4_DEFAULT_CTX). */
int x4_trunk_opts_ctx(const x4_model *m, const x4_trunk_opts *o);

/* The options and a forward's arguments arrive checked by lib/run/trunk.c
 * (max_ctx resolved). */
typedef struct x4_trunk_cpu x4_trunk_cpu;
int x4_trunk_cpu_create(x4_trunk_cpu **t, const x4_model *m, const x4_trunk_opts *o, x4_err *e);
void x4_trunk_cpu_free(x4_trunk_cpu *t);
void x4_trunk_cpu_reset(x4_trunk_cpu *t);
int x4_trunk_cpu_pos(const x4_trunk_cpu *t);
int x4_trunk_cpu_forward(x4_trunk_cpu *t, const int32_t *ids, int n, float *logits,
			 bool all_logits, x4_err *e);
void x4_trunk_cpu_set_probe(x4_trunk_cpu *t, x4_probe_fn fn, void *ctx);
/* The cache as rows [n][n_block][cw] (position-major, so that the first m
 * rows of a saved run are a prefix of it), in the cache's own values:
 * float or double (opts.prec); n within what the caller checked. */
uint64_t x4_trunk_cpu_row_bytes(const x4_trunk_cpu *t);
void x4_trunk_cpu_cache_read(const x4_trunk_cpu *t, int from, int n, void *rows);
/* Write rows [0, n) and set the length to n. */
void x4_trunk_cpu_cache_write(x4_trunk_cpu *t, int n, const void *rows);

/* The CUDA trunk (lib/cuda/trunk_cuda.c): the same contract as the
 * public x4_trunk_* functions, with the options and a forward's arguments
 * already checked by lib/run/trunk.c (max_ctx resolved); create returns
 * X4_ECUDA in a build without CUDA. */
typedef struct x4_trunk_cuda x4_trunk_cuda;
int x4_trunk_cuda_create(x4_trunk_cuda **t, const x4_model *m, const x4_trunk_opts *o,
			 x4_err *e);
void x4_trunk_cuda_free(x4_trunk_cuda *t);
void x4_trunk_cuda_reset(x4_trunk_cuda *t);
int x4_trunk_cuda_pos(const x4_trunk_cuda *t);
int x4_trunk_cuda_forward(x4_trunk_cuda *t, const int32_t *ids, int n, float *logits,
			  bool all_logits, x4_err *e);
void x4_trunk_cuda_set_probe(x4_trunk_cuda *t, x4_probe_fn fn, void *ctx);
/* Forward, then the next token picked on the device (one id read back). */
int x4_trunk_cuda_forward_next(x4_trunk_cuda *t, const int32_t *ids, int n,
			       const x4_sampler_opts *so, int32_t *next, float *logit,
			       float *logits, x4_err *e);
/* New request options on the weights already resident (x4_trunk_configure;
 * device and mem_limit unchanged, max_ctx resolved). */
int x4_trunk_cuda_configure(x4_trunk_cuda *t, const x4_trunk_opts *o, x4_err *e);
void x4_trunk_cuda_stats(const x4_trunk_cuda *t, x4_trunk_stats *s);
/* The decode attention's kernel in use: X4_ATTN_FP32 or X4_ATTN_MMA (AUTO resolved). */
int x4_trunk_cuda_attn(const x4_trunk_cuda *t);
/* The same rows as the CPU's, in the GPU cache's fp16 bits. */
uint64_t x4_trunk_cuda_row_bytes(const x4_trunk_cuda *t);
int x4_trunk_cuda_cache_read(x4_trunk_cuda *t, int from, int n, void *rows, x4_err *e);
/* Positions [from, from + n) of a trunk's cache as rows (x4_trunk_cache_read
 * is from 0), checked against its length: the prefix store reads only what
 * no entry holds already. */
int x4_trunk_cache_read_from(x4_trunk *t, int from, int n, void *rows, x4_err *e);
int x4_trunk_cuda_cache_write(x4_trunk_cuda *t, int n, const void *rows, x4_err *e);
/* The backend a trunk holds (NULL for the other), for the profiler's hooks
 * (lib/prof/prof.c). */
x4_trunk_cpu *x4_trunk_cpu_part(x4_trunk *t);
x4_trunk_cuda *x4_trunk_cuda_part(x4_trunk *t);

/* ---- the prefix store (lib/run/prefix.c) and what it asks of the trunk ---- */

/* What makes two trunks' cache rows interchangeable: rows saved from one
 * may be restored into the other and continue exactly the computation the
 * first would have made (lib/run/prefix.c says why each field is here, and why
 * max_ctx, the chunk, the threads, the graph and pdl are not).  Filled by
 * x4_trunk_cache_key only (zeroed first, so two keys compare with memcmp;
 * copy one with memcpy, which keeps its padding zero). */
typedef struct x4_cache_key {
	char model[17];     /* the checkpoint's fingerprint */
	int device;         /* -1 the CPU, else the CUDA ordinal */
	int resid;          /* enum x4_resid */
	int sublayer;       /* enum x4_sub */
	int prec;           /* enum x4_prec (X4_PREC_F32 on a GPU) */
	int kv16;           /* the cache's values are rounded to fp16 */
	int hc_eager;       /* GPU: the eager gate (0 on the CPU, which has one path) */
	int attn;           /* GPU: enum x4_attn, the decode attention (FP32 on the CPU) */
	int gemm;           /* GPU: enum x4_gemm, the prefill products' core (MMA on the CPU) */
	uint64_t row_bytes; /* x4_trunk_cache_row_bytes */
} x4_cache_key;
void x4_trunk_cache_key(const x4_trunk *t, x4_cache_key *k);

/* For lib/run/session.c.  Restore into t (reset first, always) the longest
 * prefix of ids[0, n) that an entry with t's key holds, at most max
 * positions; *restored gets how many (0: a miss, and t is only reset).
 * Counts the hit or the miss. */
int x4_prefix_restore(x4_prefix_store *ps, x4_trunk *t, const int32_t *ids, size_t n,
		      size_t max, size_t *restored, x4_err *e);
/* Offer t's cache rows [0, n) (n <= x4_trunk_pos), whose ids are ids[0, n),
 * as an entry.  A store that cannot allocate the entry keeps what it had
 * and returns 0: the request it follows has already succeeded. */
int x4_prefix_offer(x4_prefix_store *ps, x4_trunk *t, const int32_t *ids, size_t n,
		    x4_err *e);

/* ---- pieces of the CPU trunk, exposed for tests ---- */

/* YaRN frequencies omega_i, i < d_rope/2, in fp32 (docs/forward.md 6.2). */
void x4_yarn_freqs(const x4_config *c, float *omega /* [d_rope/2] */);

/* The hyper-connection coefficients from the 24-wide projection m
 * (docs/forward.md 5.1 steps 4-8), in double (the F64 trunk's arithmetic) and float (the
 * F32 trunk's).  pre/post [n_hc], comb [n_hc][n_hc] as [dst][src]. */
void x4_hc_coef_f64(const x4_config *c, const double *m, const float *base,
		    const float *scale, double *pre, double *post, double *comb);
void x4_hc_coef_f32(const x4_config *c, const float *m, const float *base,
		    const float *scale, float *pre, float *post, float *comb);

/* docs/forward.md 5.2 A4/F4 for one token: out[d] = post[d] * y + sum_s C[d][s] * H[s],
 * H and out [n_hc][D], C [dst][src]. */
void x4_hc_update_f64(int n_hc, int D, const double *post, const double *comb,
		      const double *H, const double *y, double *out);
void x4_hc_update_f32(int n_hc, int D, const float *post, const float *comb,
		      const float *H, const float *y, float *out);

/* One weight row to float: x4_dequant's values (lib/blockfmt.h's decode),
 * vectorized for the CPU trunk's inner loop. */
void x4_cpu_dequant_row(int type, const void *src, float *dst, uint64_t n);

/* A persistent thread pool: run(fn, n) calls fn(arg, i, worker) for every
 * i < n, each i on exactly one worker (worker 0 is the caller). */
typedef struct x4_pool x4_pool;
int x4_pool_create(x4_pool **p, int nthreads, x4_err *e);
void x4_pool_free(x4_pool *p);
int x4_pool_size(const x4_pool *p);
void x4_pool_run(x4_pool *p, int64_t n, void (*fn)(void *arg, int64_t i, int worker),
		 void *arg);

/* ---- the CPU trunk's state (lib/cpu/trunk_cpu.c), shared by its two
 * arithmetic instances lib/cpu/trunk_cpu_f32.c and lib/cpu/trunk_cpu_f64.c, which
 * compile one body (lib/cpu/trunk_cpu_tmpl.h) with float and with double ---- */

struct x4_trunk_cpu {
	const x4_model *m;
	const x4_config *c;
	x4_trunk_opts o;
	int max_ctx, pos, chunk, nthr;
	int cw;           /* cache row width: kv_lora + d_rope (576) */
	x4_pool *pool;
	float *omega;     /* [d_rope/2] YaRN frequencies */
	void *cache;      /* [n_block][max_ctx][cw] in the instance's type */
	bool kv16;        /* cache values rounded to fp16 (enum x4_kv) */
	size_t kmax;      /* the longest weight row, in elements */
	float **wrow;     /* [nthr][kmax]: one dequantized weight row per worker */
	void **att;       /* [nthr]: attention scratch per worker, in the instance's type */
	void *ws;         /* the instance's workspace */
	x4_probe_fn probe;
	void *probe_ctx;
	x4_prof *prof;    /* set while profiled (lib/prof_int.h), else NULL */
};

int x4_cpu_ws_alloc_f32(x4_trunk_cpu *t, x4_err *e);
void x4_cpu_ws_free_f32(x4_trunk_cpu *t);
void x4_cpu_forward_f32(x4_trunk_cpu *t, const int32_t *ids, int n, float *logits, bool all);
int x4_cpu_ws_alloc_f64(x4_trunk_cpu *t, x4_err *e);
void x4_cpu_ws_free_f64(x4_trunk_cpu *t);
void x4_cpu_forward_f64(x4_trunk_cpu *t, const int32_t *ids, int n, float *logits, bool all);

#endif
