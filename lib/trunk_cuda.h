/*
 * trunk_cuda.h - the CUDA trunk's state, shared by its two files:
 * lib/trunk_cuda.c (device, upload, memory plan, create/free) and
 * lib/trunk_cuda_fwd.c (the forward pass and the probe).  Seen by those two
 * only.
 */
#ifndef X4_TRUNK_CUDA_H
#define X4_TRUNK_CUDA_H

#include "trunk_int.h"

#ifdef X4_HAVE_CUDA
#include "cuda_check.h"
#include "x4_kern.h"

/* A block's tensors on the device: the GGUF bytes as mapped (the kernels
 * index IQ4_NL/Q6_K/BF16 blocks and the expert tensors [E][rows][k] as
 * stored), NULL where the host binding is NULL. */
typedef struct x4_block_dev {
#define X4_FIELD_(f, ...) const void *f;
	X4_BLOCK_TENSORS(X4_FIELD_)
#undef X4_FIELD_
} x4_block_dev;

/* The activations of one chunk of up to T tokens, carved out of one
 * device allocation (256-byte aligned pieces; x4k_moe_routes_init wants it). */
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

struct x4_trunk_cuda {
	const x4_model *m;
	const x4_config *c;
	x4_trunk_opts o;
	int dev;
	char dev_name[128];
	cudaStream_t s;
	int max_ctx, pos, chunk, cw, ncoef, F;
	x4k_hc_cfg hc;
	void *weights;           /* one allocation holding every trunk tensor */
	uint64_t weight_bytes;
	const void *token_embd, *output_norm, *output;
	x4_block_dev *blk;       /* [n_block] */
	uint16_t *cache;         /* [n_block][max_ctx][cw] fp16 bits */
	uint64_t cache_bytes;
	void *work;              /* the workspace allocation */
	uint64_t work_bytes;
	x4_cuda_ws w;
	int32_t *ids_host;       /* [chunk] pinned staging for the ids */
	int *pos_host;           /* [1] pinned staging for the position */
	double load_s;
	/* the probe's host copies (allocated when a probe is set) */
	x4_probe_fn probe;
	void *probe_ctx;
	float *pr_streams, *pr_y, *pr_xh, *pr_coef, *pr_wts; /* [n_hc*D], [D], [D], [ncoef], [k] */
	int *pr_sel;             /* [k] */
	float *narrow_host;      /* [chunk][n_hc][D] for the F16/BF16 residual arms */
	/* x4_trunk_forward_next's device pick, allocated on its first call */
	void *samp;              /* [ws | next id | step counter] */
	size_t samp_ws_bytes;
	int32_t *next_host;      /* [1] pinned */
	/* The decode step captured once and replayed (x4_trunk_forward_next
	 * with one token); recaptured when the sampler's settings change. */
	cudaGraphExec_t step_graph;
	x4_sampler_opts graph_so;
	bool graph_failed;       /* capture refused once: stay eager */
	bool broken;             /* a configure failed and the old plan could not return */
	x4_prof *prof;           /* set while profiled (lib/prof_int.h), else NULL */
};

/* Bytes of the workspace for chunks of up to T tokens; with base set, also
 * carve w's pointers out of it (base NULL: only count). */
size_t x4_cuda_ws_layout(const x4_trunk_cuda *t, int T, char *base, x4_cuda_ws *w);
#endif /* X4_HAVE_CUDA */

#endif
