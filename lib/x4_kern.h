/*
 * x4_kern.h - the CUDA kernels' entry points (x4k_*) and their plain-C
 * references (x4r_*).  Seen by lib/ and tests/ only, never by cmd/.
 *
 * Every x4k_* call is asynchronous on the stream it is given, returns 0 or a
 * negative X4_E* (argument checks and the launch's own status, through
 * lib/cuda_check.h), allocates nothing and never synchronises with the host,
 * so a sequence of them can be captured into a CUDA graph.  Pointers are
 * device pointers unless a comment says otherwise.  Weights are the GGUF
 * bytes as mapped (IQ4_NL 18-byte blocks, Q6_K 210-byte blocks, BF16); a
 * matrix of n rows and k columns is n rows of k contiguous values
 * (docs/forward.md 1).
 * Activations are fp32 in and out, and every accumulation is fp32.
 *
 * Sections (and the files that implement each):
 *   0. workspace sizes, in every build (lib/cuda/kern_ws.c)
 *   1. quantized products and the MoE  (kernels/gemv_quant.cu, gemm_quant.cu,
 *      swiglu.cu, moe_router.cu, moe_experts.cu)
 *   2. attention, rope, hyper-connection, norms (kernels/hc.cu, mla_*.cu, rope.cu,
 *      kv_store.cu, norm.cu, embed.cu, head.cu, narrow.cu, sample.cu)
 *   3. ref: plain-C references (lib/ref/)
 *   4. the streaming-read ceiling (kernels/stream_read.cu, for lib/prof/prof_ceiling.c)
 */
#ifndef X4_KERN_H
#define X4_KERN_H

#include "x4.h"

#if defined(X4_HAVE_CUDA) || defined(__CUDACC__)
#include <cuda_runtime_api.h>
#define X4K_HAVE_CUDA 1
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ============ 0. workspace sizes, in every build ============ */
/* The shapes that size the kernels' workspaces, and the byte counts made
 * from them, compiled with or without CUDA: the kernels launch with these
 * splits, and the memory plan (x4.h section 6b, lib/cuda/mem_plan.c) counts the
 * same bytes on a machine with no device.  (lib/cuda/kern_ws.c) */
enum {
	X4K_HC_CW = 32,           /* columns of D a block when the gate is split */
	X4K_HC_SPLIT_MAX_TOK = 8, /* up to this many tokens the gate is split */
	X4K_MLA_MIN_SPAN = 32,    /* cache rows a decode split takes at least: one tile */
	X4K_MLA_MAX_SPLIT = 64,   /* decode splits at most (kernels/mla_attn.cuh says why) */
};
/* The shape the tensor-core attention takes (x4k_mla_decode_mma,
 * x4k_mla_prefill_mma): heads in blocks of 16, the model's latent of 512
 * and rope of 64. */
static inline int x4k_mla_mma_shape(int n_head, int kv_lora, int d_rope)
{
	return n_head >= 16 && n_head % 16 == 0 && n_head / 16 <= 65535 && kv_lora == 512 &&
	       d_rope == 64;
}
/* Blocks the gate's projection is split over for n_tok tokens. */
static inline int x4k_hc_nsplit(int D, int n_tok)
{
	return n_tok <= X4K_HC_SPLIT_MAX_TOK ? (D + X4K_HC_CW - 1) / X4K_HC_CW : 1;
}
/* Splits of the decode attention's grid, sized from max_ctx. */
static inline int x4k_mla_nsplit(int max_ctx)
{
	int n = (max_ctx + X4K_MLA_MIN_SPAN - 1) / X4K_MLA_MIN_SPAN;
	return n < 1 ? 1 : n > X4K_MLA_MAX_SPLIT ? X4K_MLA_MAX_SPLIT : n;
}
/* Tiles of the grouped MoE kernel at most: every tile holds at least one
 * route, and an expert wastes at most one partial tile. */
static inline int x4k_moe_max_tiles(int n_route, int n_expert, int tile)
{
	long long b = ((long long)n_route + tile - 1) / tile + n_expert;
	return (int)(b < n_route ? b : n_route);
}
/* Routes per tile: 4 at decode sizes (a weight row is read once for a few
 * tokens), 64 for prefill (a dequantized tile is reused across 64 routes). */
int x4k_moe_tile(int n_tok, int k);
/* The route table's workspace (x4k_moe_routes_init carves it). */
size_t x4k_moe_routes_bytes(int n_tok, int k, int n_expert, int tile);
/* Workspace of x4k_moe_experts: h [n_tok*k][f] and out [n_tok*k][d], fp32. */
size_t x4k_moe_experts_workspace_bytes(int n_tok, int k, int d, int f);
/* The hyper-connection's dimensions and constants (docs/forward.md 5.1), as plain
 * values so that tests can make odd shapes. */
typedef struct x4k_hc_cfg {
	int n_hc;           /* streams, 1..4 */
	int D;              /* one stream's width */
	int iters;          /* Sinkhorn rounds */
	float rms_eps;      /* of the unweighted RMS over n_hc*D */
	float hc_eps;       /* Sinkhorn denominators only */
	float clamp_min, clamp_max; /* comb logits */
} x4k_hc_cfg;
/* Coefficients per token: n_hc*(2+n_hc) floats, [pre | post | comb[dst][src]]. */
#define X4K_HC_NCOEF(n_hc) ((n_hc) * (2 + (n_hc)))
/* The gate's workspace for calls of up to n_tok tokens (x4k_hc_pre). */
size_t x4k_hc_workspace_bytes(const x4k_hc_cfg *c, int n_tok);
/* The decode attention's partial max/sum/accumulators (x4k_mla_decode). */
size_t x4k_mla_decode_workspace_bytes(int n_head, int kv_lora, int max_ctx);

#ifdef X4K_HAVE_CUDA
/* Programmatic dependent launch for the decode step's kernels (compute
 * capability 9.0 and later; kernels/pdl.cuh): process-wide, off until set;
 * a graph keeps the setting it was captured with.  The arithmetic does not
 * change: the results are the same bits either way.  `make X4_PDL=1` builds
 * with it on from the start. */
void x4k_pdl_set(int on);
int x4k_pdl_get(void);

/* ============ 1. quantized products and the MoE ============ */

/* y = W x.  type: X4_T_IQ4_NL (k % 32 == 0), X4_T_Q6_K (k % 256 == 0) or
 * X4_T_BF16 (any k).  w: n rows of k; x: [k]; y: [n].  IQ4_NL takes the
 * tensor cores where the products' switch (x4k_gemm_mma_set), the device
 * (sm_80) and the shape allow (kernels/gemv_tc.cuh; docs/numerics.md 1.11),
 * the register core otherwise. */
int x4k_gemv(int type, const void *w, int n, int k, const float *x, float *y,
	     cudaStream_t s, x4_err *e);

/* Two products that read the same x, in one launch where the shapes allow
 * (BF16 with k % 8 == 0, 16-byte aligned: the attention's q_a and kv_a):
 * y1 = W1 x (n1 rows), y2 = W2 x (n2 rows), each row's sum the same bits
 * as x4k_gemv's.  Otherwise two x4k_gemv launches. */
int x4k_gemv2(int type, const void *w1, int n1, float *y1, const void *w2, int n2, float *y2,
	      int k, const float *x, cudaStream_t s, x4_err *e);

/* h = silu(W_gate x) * (W_up x) for one token ([n]), the SwiGLU product in
 * fp32 as x4k_swiglu forms it: one launch for IQ4_NL with k % 256 == 0 and
 * 16-byte aligned weights and x (on the tensor cores as x4k_gemv takes
 * them, else the register core); otherwise x4k_gemv into the scratch g
 * and u ([n] each, needed then), then x4k_swiglu. */
int x4k_gemv_swiglu(int type, const void *w_gate, const void *w_up, int n, int k, const float *x,
		    float *g, float *u, float *h, cudaStream_t s, x4_err *e);

/* Y = X W^T for n_tok tokens: x [n_tok][k], y [n_tok][n].  On sm_80 and
 * later, IQ4_NL and BF16 with k % 32 == 0 and w, x 16-byte aligned take the
 * tensor-core core (kernels/gemm_mma.cuh: fp32-accurate products, docs/numerics.md
 * 1.10, not the FMA core's bits); everything else the FMA core, a weight
 * tile dequantized once into shared memory and reused across 64 tokens. */
int x4k_gemm(int type, const void *w, int n, int k, int n_tok, const float *x,
	     float *y, cudaStream_t s, x4_err *e);

/* The tensor-core products: the prefill's gemm core (x4k_gemm,
 * x4k_moe_experts' tiles of 64 routes, and the per-head absorb and
 * expansion of chunks of 16 tokens or more) and the decode's IQ4_NL
 * matrix-vector products (x4k_gemv, x4k_gemv_swiglu, x4k_moe_experts_sum):
 * process-wide, on until set; 0 runs the CUDA-core kernels everywhere (the
 * comparison arm), 1 the tensor cores where the device and the shape take
 * them.  Kernels launched earlier keep the core they were launched with. */
void x4k_gemm_mma_set(int on);
int x4k_gemm_mma_get(void);
/* How the batch-1 IQ4_NL tensor-core products (kernels/gemv_tc.cuh) copy
 * their weights into shared memory (process-wide; the trunk sets it from
 * x4_trunk_opts.warp_copy): 1 (the default) the block's 16 rows as one
 * contiguous span, a warp's copy 512 contiguous bytes; 0 each warp its own
 * 144-byte slice of the 16 rows.  The same bits either way. */
void x4k_tc_copy_set(int block);
int x4k_tc_copy_get(void);
/* The most rows a warp x4k_gemv's Q6_K kernel (the LM head's: rows of an
 * even number of blocks, k <= 4096) may take, process-wide: 4 (the
 * default; anything but 1 and 2 reads as 4), 2 or 1.  The launcher takes
 * the largest form up to it that the card's shared memory allows: 4 or 2
 * adjacent rows sharing each read of x (gemv_q6k_rows_kernel: 108 and 62
 * KB a block for the head), else a warp a row (gemv_q6k_kernel).  The
 * same bits every way; the setting is for the tests, which compare the
 * forms (4 rows a warp is 1.018x the decode step's rate at 512 tokens of
 * context against 1, 1.005x against 2, bench/RESULTS.md 37). */
void x4k_q6k_rows_set(int rows);
int x4k_q6k_rows_get(void);
/* How x4k_gemv's Q6_K product takes the tensor cores (gemv_q6k_tc_kernel,
 * process-wide, under the products' switch x4k_gemm_mma_set, on sm_80 and
 * later where the shape allows: k % 512 == 0, k <= 4096, 16-byte aligned
 * weights and x): 0 (the default) with two 16-row tiles in flight a block
 * where the card's shared memory takes them, else one; 2 or 1 that form
 * only; -1 never (the rows forms above).  Both tile counts give the same
 * bits, not the rows forms' (docs/numerics.md 1.8); the setting is for the
 * tests and the lab, which compare the forms. */
void x4k_q6k_tc_set(int tiles);
int x4k_q6k_tc_get(void);

/* h = silu(g) * u elementwise, fp32 (docs/numerics.md 1.4: the product is the value that
 * overflows fp16, so it stays fp32 on its way to the down projection). */
int x4k_swiglu(int64_t n, const float *g, const float *u, float *h,
	       cudaStream_t s, x4_err *e);

/* ---- MoE (docs/forward.md 7.2, 7.3) ----
 * The route table lives in one caller-owned device workspace:
 *   x4k_moe_routes r;  size_t nb = x4k_moe_routes_bytes(n_tok, k, n_expert, tile);
 *   x4k_moe_routes_init(&r, ws, nb, n_tok, k, n_expert, tile, e);
 *   x4k_moe_router(&r, ...);        fills r.sel, r.wts
 *   x4k_moe_route_table(&r, ...);   fills counts, offsets, route, tiles
 *   x4k_moe_experts(&r, ...);       every route's expert output, own row each
 *   x4k_moe_reduce(&r, ...);        y = sum over slots in ascending expert id, + shared
 * A route is the pair (token t, slot s), numbered t*k + s. */
typedef struct x4k_moe_routes {
	int n_tok, k, n_expert;
	int tile;        /* routes per tile of the grouped kernel (x4k_moe_tile) */
	int max_tiles;   /* bound on *n_tiles known on the host: the grid's size */
	int32_t *sel;    /* [n_tok][k] expert of each slot, slot 0 the best */
	float *wts;      /* [n_tok][k] weight of each slot (docs/forward.md 7.2 step 3) */
	int32_t *counts; /* [n_expert] routes per expert */
	int32_t *offsets;     /* [n_expert + 1] exclusive prefix sum of counts */
	int32_t *route;       /* [n_tok*k] route ids t*k+s, grouped by expert in
			       * ascending id, each group in ascending route id */
	int32_t *tile_expert; /* [max_tiles] expert of tile i */
	int32_t *tile_start;  /* [max_tiles] its first index into route */
	int32_t *n_tiles;     /* [1] tiles in use (written on the device) */
	float *score;         /* [n_tok][n_expert] router sigmoids (scratch) */
} x4k_moe_routes;

/* (x4k_moe_tile and x4k_moe_routes_bytes are in section 0.) */
/* Carve r's arrays out of ws (device, x4k_moe_routes_bytes large). */
int x4k_moe_routes_init(x4k_moe_routes *r, void *ws, size_t ws_bytes, int n_tok,
			int k, int n_expert, int tile, x4_err *e);

/* The router, all fp32: logits W_r x (w_r: [n_expert][d] F32), g = sigmoid,
 * the top k by g + bias (the lower index wins an exact tie), weights from the
 * unbiased g: scale * g / (sum g + 1e-20) when norm, else scale * g.
 * x: [n_tok][d], d <= 12288, n_tok <= 65535.  Writes r->sel and r->wts (and
 * r->score, its scratch).  n_expert <= 256, k <= 8.  Two launches: the
 * logits a warp per (token, expert), the selection a warp per token. */
int x4k_moe_router(const x4k_moe_routes *r, const float *x, int d, const float *w_r,
		   const float *bias, float scale, bool norm, cudaStream_t s,
		   x4_err *e);

/* The router's selection rule, for calls that select from r->score
 * themselves: bias [n_expert], and the weights' scale and norm as
 * x4k_moe_router takes them. */
typedef struct x4k_moe_pick {
	const float *bias;
	float scale;
	bool norm;
} x4k_moe_pick;

/* x4k_moe_router's first launch alone: the sigmoids of the logits into
 * r->score. */
int x4k_moe_router_logits(const x4k_moe_routes *r, const float *x, int d, const float *w_r,
			  cudaStream_t s, x4_err *e);

/* x4k_moe_router's selection from r->score (sel, wts), then the table as
 * x4k_moe_route_table, in the fewest launches (one for the decode step's
 * sizes, below). */
int x4k_moe_select_table(const x4k_moe_routes *r, const x4k_moe_pick *p, cudaStream_t s,
			 x4_err *e);

/* x4k_moe_router then x4k_moe_route_table, in the fewest launches: up to 4
 * tokens and 32 routes (the decode step) the selection's block also builds
 * the table (two launches instead of three), with the same contents. */
int x4k_moe_router_table(const x4k_moe_routes *r, const float *x, int d, const float *w_r,
			 const float *bias, float scale, bool norm, cudaStream_t s, x4_err *e);

/* counts, offsets, route, the tile list and n_tiles from r->sel, on the
 * device (no read-back): a stable counting sort, so the table depends only
 * on sel.  An expert id outside [0, n_expert) is dropped. */
int x4k_moe_route_table(const x4k_moe_routes *r, cudaStream_t s, x4_err *e);

/* The routed experts, one grouped launch per projection for every route:
 * gate and up (w: [n_expert][f][d] each) with the SwiGLU product kept fp32,
 * then down ([n_expert][d][f]) writing route t*k+s's output to row t*k+s of
 * `out` (one writer per element: no atomics, so the result does not depend
 * on which block finishes first).  type: X4_T_IQ4_NL.  x: [n_tok][d].
 * *out (optional) receives the [n_tok*k][d] rows inside ws. */
int x4k_moe_experts(const x4k_moe_routes *r, int type, const float *x, int d, int f,
		    const void *gate, const void *up, const void *down, void *ws,
		    size_t ws_bytes, const float **out, cudaStream_t s, x4_err *e);

/* One token's MoE output in two launches at the batch-1 step: the experts'
 * gate and up, then y = sum over the slots in ascending expert id of wts *
 * (down of the route's h), + the shared expert's down of sh ([f], its type
 * stype, [d][f]).  With sgate and sup (the shared expert's gate and up,
 * [f][d], stype; both or neither, one token only) sh is formed here first,
 * silu(sgate x) * (sup x) with x4k_gemv_swiglu's bits: on the tensor cores
 * in the experts' gate/up launch; without them sh is an input.  On the
 * tensor cores where x4k_gemv takes them and the shapes allow (IQ4_NL; d
 * and f in whole 256-value ranges, d <= 5120, f <= 1024:
 * kernels/gemv_tc.cuh), else on the register core with every product and
 * the sum as x4k_moe_experts, x4k_gemv and x4k_moe_reduce form them (the
 * same bits); shapes neither takes (more tokens or routes, other types, f >
 * 1024) run as those three.  y: [d].  ws as x4k_moe_experts'.  pick
 * NULL: r's selection and table are formed already; else r->score holds
 * the router's sigmoids (x4k_moe_router_logits) and the call selects and
 * builds the table itself, the same contents as x4k_moe_select_table: on
 * the tensor cores inside the gate/up launch (each routed block selects
 * its own expert, the first writes the table) and again in the down
 * launch's blocks before their wait, so that the routes' weights are
 * copied before h is ready; else that call's launch first. */
int x4k_moe_experts_sum(const x4k_moe_routes *r, const x4k_moe_pick *pick, int type, const float *x,
			int d, int f, const void *gate, const void *up, const void *down, int stype,
			const void *sgate, const void *sup, const void *sdown, float *sh, void *ws,
			size_t ws_bytes, float *y, cudaStream_t s, x4_err *e);

/* y[t] = sum over t's k slots, taken in ascending expert id (docs/forward.md 7.3), of
 * wts * out[t*k+s], then + shared[t] (optional, [n_tok][d]).  The order
 * depends on the expert ids only, never on the route table's permutation,
 * so the sum is bit-reproducible.  y: [n_tok][d]. */
int x4k_moe_reduce(const x4k_moe_routes *r, const float *out, const float *shared,
		   int d, float *y, cudaStream_t s, x4_err *e);
#endif /* X4K_HAVE_CUDA */

/* ============ 2. attention, rope, hyper-connection, norms ============ */
/* (kernels/hc.cu, norm.cu, embed.cu, head.cu, rope.cu, kv_store.cu,
 * mla_absorb.cu, mla_decode.cu, mla_prefill.cu, sample.cu; references in
 * lib/ref/ref_hc.c, ref_attn.c, ref_misc.c.)  Positions and the context
 * length are read from device ints (`pos`: the position of the first token
 * of the call; token t is at *pos + t), so one captured graph replays every
 * decode step.  The KV cache of one layer is max_ctx rows of
 * cw = kv_lora + d_rope fp16 values (uint16_t bits): [c_kv normed | k_r roped]. */

/* (x4k_hc_cfg is in section 0.) */

#ifdef X4K_HAVE_CUDA
/* H[t][s][:] = bf16 row ids[t] of emb ([n_vocab][D]), widened, for every
 * stream s < n_hc (docs/forward.md 4).  ids on the device (a sampled id feeds the next
 * step without a read-back); an id outside [0, n_vocab) gives a NaN row. */
int x4k_embed(const uint16_t *emb, int n_vocab, int D, int n_hc, const int32_t *ids,
	      int n_tok, float *H, cudaStream_t s, x4_err *e);

/* y[t] = gain * x[t] / sqrt(mean(x[t]^2) + eps), fp32; rows of n at stride
 * ld_x / ld_y floats; gain may be NULL (1); y may be x. */
int x4k_rmsnorm(int n_tok, int n, const float *x, int ld_x, const float *gain, float eps,
		float *y, int ld_y, cudaStream_t s, x4_err *e);

/* Round n fp32 values in place to bf16 (X4K_NARROW_BF16) or fp16
 * (X4K_NARROW_F16) precision, nearest even: the sublayer input's width
 * (docs/numerics.md 1.3), with the values kept fp32 in memory. */
enum { X4K_NARROW_BF16 = 1, X4K_NARROW_F16 = 2 };
int x4k_narrow(int64_t n, float *x, int dtype, cudaStream_t s, x4_err *e);

/* docs/forward.md 8 before the logits: y[t] = RMS_gain(mean_s H[t][s]).  H [n_tok][n_hc][D]. */
int x4k_head(int n_tok, int n_hc, int D, const float *H, const float *gain, float eps,
	     float *y, cudaStream_t s, x4_err *e);

/* ---- hyper-connection (docs/forward.md 5.1, 5.2) ----
 * x4k_hc_pre: the gate of one sublayer for n_tok tokens, all fp32: RMS over
 * the flattened n_hc*D, the projection with the BF16 fn ([ncoef][n_hc*D],
 * stream-major columns), sigmoids, clamp, exp(x - rowmax), the Sinkhorn
 * rounds, and the collapse x[t] = sum_s pre[s] H[t][s] ([n_tok][D]); coef
 * [n_tok][ncoef].  Optionally fused with the previous sublayer's stream
 * update (docs/forward.md 5.2 A4/F4): when y_prev is not NULL the state used is
 *   H_out[d] = post_prev[d] * y_prev + sum_s comb_prev[d][s] * H[s]
 * (coef_prev, y_prev [n_tok][D]), written to H_out (may be H); otherwise
 * H_out is ignored.  eager selects the multi-kernel path (the same
 * arithmetic in five launches) instead of the one fused kernel.  The fused
 * kernel splits a few tokens' projection across blocks, the last block to
 * finish doing the coefficients and the collapse; ws (x4k_hc_workspace_bytes
 * for at least n_tok) must be zeroed once after allocation, and every call
 * leaves it zeroed again.  Calls sharing one ws must be on one stream.
 * (x4k_hc_workspace_bytes is in section 0.) */
int x4k_hc_pre(const x4k_hc_cfg *c, int n_tok, const float *H, const uint16_t *fn,
	       const float *base, const float *scale, const float *y_prev,
	       const float *coef_prev, float *H_out, float *x, float *coef, bool eager,
	       void *ws, size_t ws_bytes, cudaStream_t s, x4_err *e);
/* A side stream for work whose result is read only later: the call
 * records `fork` on its own stream, makes s wait for it, runs the work on s
 * and records `done` there; every reader of the result waits for `done`
 * first (cudaStreamWaitEvent).  Calls with a side always record `done`,
 * on s or, where the work ran on the call's own stream, there. */
typedef struct x4k_side {
	cudaStream_t s;
	cudaEvent_t fork, done;
} x4k_side;
/* x4k_hc_pre followed by the sublayer's RMSNorm of its collapse: xh[t] =
 * gain * x[t] / sqrt(mean(x[t]^2) + norm_eps) ([n_tok][D], as x4k_rmsnorm
 * computes it; x is still written).  At decode sizes the norm runs inside
 * the gate's last block (one launch instead of two); otherwise it is a
 * second launch.  side (may be NULL): at decode sizes the coefficients
 * (the Sinkhorn: nothing of the sublayer needs them, only the next gate's
 * update) are finished by a small kernel on side->s, so that the gate's
 * launch ends with its collapse and norm; coef is complete once side->done
 * is.  The same bits either way. */
int x4k_hc_pre_norm(const x4k_hc_cfg *c, int n_tok, const float *H, const uint16_t *fn,
		    const float *base, const float *scale, const float *y_prev,
		    const float *coef_prev, float *H_out, float *x, float *coef, const float *gain,
		    float norm_eps, float *xh, bool eager, void *ws, size_t ws_bytes,
		    const x4k_side *side, cudaStream_t s, x4_err *e);
/* The stream update alone: H_out[t][d] = post[d] * y[t] + sum_s comb[d][s] *
 * H[t][s] (comb [dst][src], docs/forward.md 5.2); H_out may be H. */
int x4k_hc_post(const x4k_hc_cfg *c, int n_tok, const float *coef, const float *y,
		const float *H, float *H_out, cudaStream_t s, x4_err *e);

/* ---- MLA (docs/forward.md 6), absorbed ----
 * Layouts: q [n_tok][n_head][d_nope + d_rope] (W_qb's output), qt
 * [n_tok][n_head][cw] (q-tilde then the roped q_r: the 576-wide query the
 * cache rows are dotted with), ob [n_tok][n_head][kv_lora], o
 * [n_tok][n_head][d_v] (W_o's input).  W_kb [n_head][kv_lora][d_nope] and
 * W_vb [n_head][d_v][kv_lora] are the BF16 tensors as stored. */

/* YaRN RoPE (docs/forward.md 6.2) on n_vec vectors of d_rope per token, adjacent pairs,
 * angle fl32(fl32(p) * omega[i]) with an accurate cos/sin; omega [d_rope/2]
 * on the device (x4_yarn_freqs).  Vector v of token t starts at
 * in + t*ld_in_tok + v*ld_in_vec (likewise out); out may be in. */
int x4k_rope(int n_tok, int n_vec, int d_rope, const float *in, long ld_in_tok,
	     int ld_in_vec, float *out, long ld_out_tok, int ld_out_vec, const float *omega,
	     const int *pos, cudaStream_t s, x4_err *e);

/* Cache row *pos + t of one layer from kva [n_tok][kv_lora + d_rope] (W_kva's
 * output): RMS_gain of the first kv_lora, RoPE of the d_rope tail, as fp16.
 * Rows at or past max_ctx are not written (the caller refuses them first). */
int x4k_kv_store(int n_tok, int kv_lora, int d_rope, const float *kva, const float *gain,
		 float eps, const float *omega, const int *pos, uint16_t *cache, int max_ctx,
		 cudaStream_t s, x4_err *e);

/* x4k_kv_store and, in the same launch, the RMSNorm of q (x4k_rmsnorm with
 * gain q_gain, eps, in place on q [n_tok][n_q]: the query's c_q norm).
 * n_tok <= 65535. */
int x4k_kv_store_norm(int n_tok, int kv_lora, int d_rope, const float *kva, const float *gain,
		      float eps, const float *omega, const int *pos, uint16_t *cache, int max_ctx,
		      int n_q, float *q, const float *q_gain, cudaStream_t s, x4_err *e);

/* qt[t][h][c] = sum_n W_kb[h][c][n] q[t][h][n] for c < kv_lora (the rope part
 * of qt is left alone: x4k_rope writes it). */
int x4k_mla_absorb_q(int n_tok, int n_head, int kv_lora, int d_nope, int d_rope,
		     const uint16_t *w_kb, const float *q, float *qt, cudaStream_t s,
		     x4_err *e);
/* x4k_mla_absorb_q and x4k_rope of q's rope part (q[t][h][d_nope..] into
 * qt[t][h][kv_lora..], at *pos + t) in one launch, the same arithmetic. */
int x4k_mla_absorb_q_rope(int n_tok, int n_head, int kv_lora, int d_nope, int d_rope,
			  const uint16_t *w_kb, const float *q, float *qt, const float *omega,
			  const int *pos, cudaStream_t s, x4_err *e);
/* o[t][h][j] = sum_c W_vb[h][j][c] ob[t][h][c].  Both products take the
 * prefill's tensor-core tile for chunks of 16 tokens or more (x4k_gemm_mma_set,
 * sm_80 and later; fp32-accurate, docs/numerics.md 1.10), fp32 FMAs otherwise. */
int x4k_mla_expand_v(int n_tok, int n_head, int kv_lora, int d_v, const uint16_t *w_vb,
		     const float *ob, float *o, cudaStream_t s, x4_err *e);

/* Decode attention for one token at position *pos over cache rows
 * [0, *pos] (at most max_ctx): scores kq_scale * qt[h] . row, an fp32
 * softmax, ob[h] = sum P row[0:kv_lora].  Split across the SMs
 * (flash-decoding): the grid is sized from max_ctx on the host, the spans
 * from *pos on the device; partial max/sum/accumulators go to ws
 * (x4k_mla_decode_workspace_bytes) and a second kernel combines them.
 * kv_lora <= 512, cw <= 1024, both even.  (x4k_mla_decode_workspace_bytes
 * is in section 0.) */
int x4k_mla_decode(int n_head, int kv_lora, int d_rope, const float *qt, const uint16_t *cache,
		   int max_ctx, const int *pos, float kq_scale, float *ob, void *ws,
		   size_t ws_bytes, cudaStream_t s, x4_err *e);
/* x4k_mla_decode on the tensor cores (kernels/mla_mma.cuh; the trunk's
 * `attn` option, X4_ATTN_MMA): the same arguments, workspace and partial
 * layout, not the same bits (docs/numerics.md 1.7).  From 8,192 rows of
 * cache (max_ctx), on a card that gives a block 173 KB of shared memory, it
 * walks a split's rows 64 a round, else 32 (bits of their own where a
 * split's span is longer than 32 rows).  The model's shape only
 * (heads a multiple of 16, kv_lora 512, rope 64) on sm_80 or newer (the
 * compute capability read on the host); otherwise X4_EINVAL, saying which,
 * and nothing launched. */
int x4k_mla_decode_mma(int n_head, int kv_lora, int d_rope, const float *qt,
		       const uint16_t *cache, int max_ctx, const int *pos, float kq_scale,
		       float *ob, void *ws, size_t ws_bytes, cudaStream_t s, x4_err *e);
/* Prefill attention for n_tok tokens at *pos + t, each over rows
 * [0, *pos + t] (causal; the chunk's own rows already stored). */
int x4k_mla_prefill(int n_tok, int n_head, int kv_lora, int d_rope, const float *qt,
		    const uint16_t *cache, int max_ctx, const int *pos, float kq_scale,
		    float *ob, cudaStream_t s, x4_err *e);
/* x4k_mla_prefill on the tensor cores (kernels/mla_prefill_mma.cuh; the
 * trunk's `attn` option, X4_ATTN_MMA, for T > 1): the same arguments and
 * contract, no workspace, not the same bits (docs/numerics.md 1.7).  The
 * model's shape only (x4k_mla_mma_shape) on sm_80 or newer, as
 * x4k_mla_decode_mma; otherwise X4_EINVAL, saying which, and nothing
 * launched. */
int x4k_mla_prefill_mma(int n_tok, int n_head, int kv_lora, int d_rope, const float *qt,
			const uint16_t *cache, int max_ctx, const int *pos, float kq_scale,
			float *ob, cudaStream_t s, x4_err *e);

/* ---- sampling on the device (a step reads back one id) ---- */
/* out[0] = argmax of logits [n_vocab], NaN skipped, the lowest id on ties
 * (0 when every value is NaN). */
size_t x4k_sample_workspace_bytes(int n_vocab);
int x4k_argmax(int n_vocab, const float *logits, int32_t *out, void *ws, size_t ws_bytes,
	       cudaStream_t s, x4_err *e);
/* Temperature / top-k / top-p: keep the top_k (0: all) by logit, then the
 * fewest of those, highest first, whose softmax(logit / temperature) mass
 * reaches top_p (every token tied with the last one kept is kept too),
 * and draw from them in id order with u = x4r_rng_uniform(seed, *counter);
 * *counter is then incremented on the device.  temperature 0 or top_k 1 is
 * the argmax.  One block: ~tens of microseconds at 131072. */
int x4k_sample(int n_vocab, const float *logits, float temperature, int top_k, float top_p,
	       uint64_t seed, uint64_t *counter, int32_t *out, void *ws, size_t ws_bytes,
	       cudaStream_t s, x4_err *e);
#endif /* X4K_HAVE_CUDA */

/* References of section 2 (lib/ref/ref_hc.c, ref_attn.c, ref_misc.c):
 * double accumulators, host pointers, the same arguments as the kernels.
 * `mag` outputs (optional) give the sum of |terms| behind each value, the
 * scale an fp32 rounding error is measured against. */
void x4r_embed(const uint16_t *emb, int n_vocab, int D, int n_hc, const int32_t *ids,
	       int n_tok, float *H);
void x4r_rmsnorm(int n_tok, int n, const float *x, int ld_x, const float *gain, float eps,
		 float *y, int ld_y);
/* x4k_narrow's reference (dtype 1 bf16, 2 fp16), through lib/quant/quant.c. */
void x4r_narrow(int64_t n, float *x, int dtype);
void x4r_head(int n_tok, int n_hc, int D, const float *H, const float *gain, float eps,
	      float *y);
/* H_out is written when y_prev is given; x_mag [n_tok][D] optional. */
void x4r_hc_pre(const x4k_hc_cfg *c, int n_tok, const float *H, const uint16_t *fn,
		const float *base, const float *scale, const float *y_prev,
		const float *coef_prev, float *H_out, float *x, float *coef, float *x_mag);
void x4r_hc_post(const x4k_hc_cfg *c, int n_tok, const float *coef, const float *y,
		 const float *H, float *H_out);
void x4r_rope(int n_tok, int n_vec, int d_rope, const float *in, long ld_in_tok,
	      int ld_in_vec, float *out, long ld_out_tok, int ld_out_vec, const float *omega,
	      int pos);
void x4r_kv_store(int n_tok, int kv_lora, int d_rope, const float *kva, const float *gain,
		  float eps, const float *omega, int pos, uint16_t *cache, int max_ctx);
void x4r_mla_absorb_q(int n_tok, int n_head, int kv_lora, int d_nope, int d_rope,
		      const uint16_t *w_kb, const float *q, float *qt);
void x4r_mla_expand_v(int n_tok, int n_head, int kv_lora, int d_v, const uint16_t *w_vb,
		      const float *ob, float *o);
/* Absorbed attention for n_tok tokens at pos + t (decode is n_tok 1); mag
 * [n_tok][n_head][kv_lora] optional (sum_tau P |row|); smax (optional)
 * receives the largest |score|. */
void x4r_mla_attn(int n_tok, int n_head, int kv_lora, int d_rope, const float *qt,
		  const uint16_t *cache, int max_ctx, int pos, float kq_scale, float *ob,
		  float *mag, double *smax);
int32_t x4r_argmax(int n_vocab, const float *logits);
/* The sampler's uniform draw in [0, 1): a counter-based hash of (seed,
 * counter), the same on the host and the device. */
double x4r_rng_uniform(uint64_t seed, uint64_t counter);
/* x4k_sample's rule in double.  kept (optional, [n_vocab]) marks the kept set. */
int32_t x4r_sample(int n_vocab, const float *logits, float temperature, int top_k,
		   float top_p, uint64_t seed, uint64_t counter, unsigned char *kept);
/* The same rule over a caller's scratch of x4r_sample_scratch_bytes(n_vocab)
 * bytes: the host sampler (lib/run/sample.c) draws with it, so the CPU and the
 * GPU pick by one rule.  Returns -1 (x4r_sample only) when out of memory. */
size_t x4r_sample_scratch_bytes(int n_vocab);
int32_t x4r_sample_ws(int n_vocab, const float *logits, float temperature, int top_k,
		      float top_p, uint64_t seed, uint64_t counter, unsigned char *kept,
		      void *scratch);

/* ============ 3. ref: plain-C references (lib/ref/) ============ */
/* Obvious loops with double accumulators over weights dequantized by
 * x4_dequant; rows run on all CPUs.  `mag` (optional, same shape as y)
 * receives the sum of |terms| behind each output, the scale an fp32
 * rounding error is measured against: |y_fp32 - y| <= c * 2^-24 * mag. */
int x4r_gemv(int type, const void *w, int n, int k, const float *x, float *y,
	     float *mag, x4_err *e);
/* x [n_tok][k], y and mag [n_tok][n]. */
int x4r_gemm(int type, const void *w, int n, int k, int n_tok, const float *x,
	     float *y, float *mag, x4_err *e);
void x4r_swiglu(int64_t n, const float *g, const float *u, float *h);
/* The router's selection (docs/forward.md 7.2), the one top-k of x4: the k
 * largest of v[n] in selection order, a later index winning only when
 * strictly greater (the lower index keeps an exact tie).  A NaN never wins
 * over a number; when only NaN is left, the lowest index not yet taken is
 * selected, so the k stay distinct (a repeated expert would be summed
 * twice).  The CPU trunks, this reference, the replay and (in the same
 * order) kernels/moe_router.cu select by this rule. */
void x4r_topk(const double *v, int n, int k, int *sel);
/* The router of docs/forward.md 7.2 in double.  sel, wts: [n_tok][k]; score (optional,
 * [n_tok][n_expert]) receives g + bias and lmag (optional, same shape) the
 * sum of |W_r x| terms of each logit. */
int x4r_moe_router(int n_tok, int d, int n_expert, int k, const float *x,
		   const float *w_r, const float *bias, float scale, bool norm,
		   int32_t *sel, float *wts, float *score, float *lmag, x4_err *e);
/* y = sum over slots in ascending expert id of wts * Expert(x), + shared
 * (optional), in double.  mag: first-order error scale of each y, including
 * what the gate and up products' rounding carries through SwiGLU. */
int x4r_moe_experts(int type, int n_tok, int d, int f, int n_expert, int k,
		    const float *x, const void *gate, const void *up,
		    const void *down, const int32_t *sel, const float *wts,
		    const float *shared, float *y, float *mag, x4_err *e);

/* ============ 4. the streaming-read ceiling ============ */
#ifdef X4K_HAVE_CUDA
/* Read n16 16-byte words at p (16-byte aligned) once each with streaming
 * loads, `blocks` blocks of 512 threads; sink [1] is written only when the
 * words XOR to a value a buffer of one repeated byte never gives. */
int x4k_stream_read(const void *p, size_t n16, int blocks, unsigned long long *sink,
		    cudaStream_t s, x4_err *e);
#endif

#ifdef __cplusplus
}
#endif
#endif
