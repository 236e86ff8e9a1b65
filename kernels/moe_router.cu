/*
 * moe_router.cu - the MoE router (docs/forward.md 7.2: fp32 sigmoid, top-k on score +
 * bias with the lower index winning a tie, weights from the unbiased scores)
 * and the route table, built on the device so that nothing is read back
 * and the MoE can be captured into a graph (docs/record.md 6: the one
 * read-back, a bincount, is what refused the capture).
 */
#include "cuda_check.h"
#include "x4_kern.h"
#include "core_dev.cuh"
#include "pdl.cuh"
#include "moe_route_dev.cuh"

#define ROUTER_WARPS 4
#define TABLE_THREADS 512

using x4route::MAX_EXPERTS;
using x4route::MAX_K;
using x4route::select_token;
using x4route::small_table;

static size_t align256(size_t n) { return (n + 255) & ~(size_t)255; }

extern "C" int x4k_moe_routes_init(x4k_moe_routes *r, void *ws, size_t ws_bytes, int n_tok, int k,
				   int n_expert, int tile, x4_err *e)
{
	if (n_tok < 0 || k <= 0 || k > MAX_K || n_expert <= 0 || n_expert > MAX_EXPERTS || k > n_expert ||
	    (tile != 64 && (tile < 1 || tile > 4)) || (long long)n_tok * k > 0x7fffffff)
		return x4_err_set(e, X4_EINVAL,
				  "x4k_moe_routes_init: %d tokens, top-%d of %d experts, tile %d: "
				  "need k <= 8, experts <= 256, tile 1..4 or 64",
				  n_tok, k, n_expert, tile);
	size_t need = x4k_moe_routes_bytes(n_tok, k, n_expert, tile);
	if (!ws || ws_bytes < need || ((uintptr_t)ws & 255))
		return x4_err_set(e, X4_EINVAL,
				  "x4k_moe_routes_init: workspace of %zu bytes at %p; need %zu, 256-aligned",
				  ws_bytes, ws, need);
	size_t nr = (size_t)n_tok * k;
	uint8_t *p = static_cast<uint8_t *>(ws);
	r->n_tok = n_tok;
	r->k = k;
	r->n_expert = n_expert;
	r->tile = tile;
	r->max_tiles = x4k_moe_max_tiles((int)nr, n_expert, tile);
	r->sel = reinterpret_cast<int32_t *>(p), p += align256(nr * 4);
	r->wts = reinterpret_cast<float *>(p), p += align256(nr * 4);
	r->route = reinterpret_cast<int32_t *>(p), p += align256(nr * 4);
	r->counts = reinterpret_cast<int32_t *>(p), p += align256((size_t)n_expert * 4);
	r->offsets = reinterpret_cast<int32_t *>(p), p += align256(((size_t)n_expert + 1) * 4);
	r->tile_expert = reinterpret_cast<int32_t *>(p), p += align256((size_t)r->max_tiles * 4);
	r->tile_start = reinterpret_cast<int32_t *>(p), p += align256((size_t)r->max_tiles * 4);
	r->n_tiles = reinterpret_cast<int32_t *>(p), p += align256(4);
	r->score = reinterpret_cast<float *>(p);
	return 0;
}

/* The logits, spread over the card: a warp per (token, expert), a block
 * per token and four experts, x in shared memory.  Every warp runs the same
 * lane split and shuffle tree, so two equal weight rows give equal bits. */
__global__ void __launch_bounds__(ROUTER_WARPS * 32)
router_logits_kernel(int d, int n_expert, const float *__restrict__ x, const float *__restrict__ w_r,
		     float *__restrict__ score)
{
	extern __shared__ float xs[]; /* [d] */
	const int t = blockIdx.y, lane = threadIdx.x & 31;
	const int ex = blockIdx.x * ROUTER_WARPS + (threadIdx.x >> 5);
	const float *xt = x + (size_t)t * d;
	for (int c = threadIdx.x; c < d; c += blockDim.x)
		xs[c] = xt[c];
	__syncthreads();
	if (ex >= n_expert)
		return;
	const float *wr = w_r + (size_t)ex * d;
	float a = 0.f;
	for (int c = lane; c < d; c += 32)
		a = __fmaf_rn(wr[c], xs[c], a);
	a = x4c::warp_sum(a);
	if (lane == 0)
		score[(size_t)t * n_expert + ex] = 1.f / (1.f + expf(-a));
}

/* The logits at decode sizes: a block a (expert, token), 256 threads, a
 * thread four float4 of the row in one round (RL batches of 1024 values:
 * d <= 12288), the block's sum in a fixed order (warp trees, then warps in
 * order), so every expert's logit comes from the same sequence of
 * operations and two equal weight rows give equal bits.  At 317feb9 the
 * logits ran 16 blocks, a warp an expert walking its row 32 values a step.
 * x and w_r rows must be 16-byte aligned (d % 4 == 0). */
constexpr int RL_THREADS = 256, RL_VEC = 4; /* float4 a thread a batch */

__global__ void __launch_bounds__(RL_THREADS)
router_logits_wide(int d, int n_expert, const float4 *__restrict__ x, const float4 *__restrict__ w_r,
		   float *__restrict__ score)
{
	__shared__ float red[RL_THREADS / 32];
	const int ex = blockIdx.x, t = blockIdx.y, tid = threadIdx.x;
	const int d4 = d / 4;
	const float4 *xr = x + (size_t)t * d4, *wr = w_r + (size_t)ex * d4;
	float a = 0.f;
	float4 wv[RL_VEC];
#pragma unroll
	for (int j = 0; j < RL_VEC; j++) /* the first batch's weights before the wait (pdl.cuh) */
		wv[j] = __ldg(wr + (j * RL_THREADS + tid < d4 ? j * RL_THREADS + tid : 0));
	x4p::trigger();
	x4p::wait();
	for (int b0 = 0; b0 < d4; b0 += RL_THREADS * RL_VEC) {
		float4 xv[RL_VEC];
#pragma unroll
		for (int j = 0; j < RL_VEC; j++) {
			const int i = b0 + j * RL_THREADS + tid;
			const int ic = i < d4 ? i : 0; /* unpredicated loads, then selects */
			if (b0)
				wv[j] = __ldg(wr + ic);
			xv[j] = __ldg(xr + ic);
		}
		/* +0 from a word of every load, added to x: every product then
		 * waits for all of the batch's loads, so they are issued together
		 * (left alone the compiler puts each product after its own load) */
		float z = 0.f;
#pragma unroll
		for (int j = 0; j < RL_VEC; j++) {
			z = __fmaf_rn(__uint_as_float(__float_as_uint(wv[j].x) & 0x007fffffu), 0.f, z);
			z = __fmaf_rn(__uint_as_float(__float_as_uint(xv[j].x) & 0x007fffffu), 0.f, z);
		}
#pragma unroll
		for (int j = 0; j < RL_VEC; j++) {
			const int i = b0 + j * RL_THREADS + tid;
			xv[j].x = __fadd_rn(xv[j].x, z), xv[j].y = __fadd_rn(xv[j].y, z);
			xv[j].z = __fadd_rn(xv[j].z, z), xv[j].w = __fadd_rn(xv[j].w, z);
			if (i >= d4)
				wv[j] = xv[j] = make_float4(0.f, 0.f, 0.f, 0.f);
		}
#pragma unroll
		for (int j = 0; j < RL_VEC; j++) {
			a = __fmaf_rn(wv[j].x, xv[j].x, a);
			a = __fmaf_rn(wv[j].y, xv[j].y, a);
			a = __fmaf_rn(wv[j].z, xv[j].z, a);
			a = __fmaf_rn(wv[j].w, xv[j].w, a);
		}
	}
	a = x4c::warp_sum(a);
	if ((tid & 31) == 0)
		red[tid >> 5] = a;
	__syncthreads();
	if (tid == 0) {
		float v = red[0];
		for (int w = 1; w < RL_THREADS / 32; w++)
			v = __fadd_rn(v, red[w]);
		score[(size_t)t * n_expert + ex] = 1.f / (1.f + expf(-v));
	}
}

__global__ void __launch_bounds__(ROUTER_WARPS * 32)
router_select_kernel(int n_tok, int n_expert, int k, const float *__restrict__ score,
		     const float *__restrict__ bias, float scale, bool norm, int32_t *__restrict__ sel,
		     float *__restrict__ wts)
{
	const int t = blockIdx.x * ROUTER_WARPS + (threadIdx.x >> 5), lane = threadIdx.x & 31;
	x4p::trigger();
	x4p::wait();
	if (t >= n_tok)
		return;
	select_token(t, lane, n_expert, k, score, bias, scale, norm, sel, wts);
}

/* The selection and the route table in one block, for n_tok <= ROUTER_WARPS
 * tokens and n_tok * k <= 32 routes (the decode step): warp t selects
 * token t, then warp 0 builds the table from the sel just written. */
__global__ void __launch_bounds__(ROUTER_WARPS * 32)
router_select_table_kernel(x4k_moe_routes r, const float *__restrict__ bias, float scale, bool norm)
{
	const int t = threadIdx.x >> 5, lane = threadIdx.x & 31;
	x4p::trigger();
	x4p::wait();
	if (t < r.n_tok)
		select_token(t, lane, r.n_expert, r.k, r.score, bias, scale, norm, r.sel, r.wts);
	__syncthreads(); /* sel is visible to the block */
	if (t == 0)
		small_table(r, lane);
}

extern "C" int x4k_moe_router_logits(const x4k_moe_routes *r, const float *x, int d, const float *w_r,
				     cudaStream_t s, x4_err *e)
{
	if (!r || !x || !w_r || d <= 0 || d > 12288)
		return x4_err_set(e, X4_EINVAL, "x4k_moe_router: NULL buffer or width %d outside 1..12288", d);
	if (r->n_tok == 0)
		return 0;
	if (r->n_tok > 65535)
		return x4_err_set(e, X4_EINVAL, "x4k_moe_router: %d tokens; at most 65535 a call", r->n_tok);
	if (r->n_tok <= 64 && d % 4 == 0 && !((uintptr_t)x & 15) && !((uintptr_t)w_r & 15)) {
		x4p::launch(router_logits_wide, dim3(r->n_expert, r->n_tok), dim3(RL_THREADS), 0, s, d,
			    r->n_expert, reinterpret_cast<const float4 *>(x),
			    reinterpret_cast<const float4 *>(w_r), r->score);
	} else {
		dim3 grid((r->n_expert + ROUTER_WARPS - 1) / ROUTER_WARPS, r->n_tok);
		router_logits_kernel<<<grid, ROUTER_WARPS * 32, (size_t)d * 4, s>>>(d, r->n_expert, x,
										   w_r, r->score);
	}
	return x4_cuda_launched("x4k_moe_router: logits launch", e);
}

/* The selection alone (a warp a token), or with the table where the
 * one-block kernel takes the call (*tabled then true). */
static int pick_routes(const x4k_moe_routes *r, const x4k_moe_pick *p, bool table, bool *tabled,
		       cudaStream_t s, x4_err *e)
{
	*tabled = false;
	if (!r || !p || !p->bias)
		return x4_err_set(e, X4_EINVAL, "x4k_moe_router: NULL routes or bias");
	if (r->n_tok == 0)
		return 0;
	if (table && r->n_tok <= ROUTER_WARPS && r->n_tok * r->k <= 32) {
		x4p::launch(router_select_table_kernel, dim3(1), dim3(ROUTER_WARPS * 32), 0, s, *r, p->bias,
			    p->scale, p->norm);
		*tabled = true;
		return x4_cuda_launched("x4k_moe_router: select and table launch", e);
	}
	x4p::launch(router_select_kernel, dim3((r->n_tok + ROUTER_WARPS - 1) / ROUTER_WARPS),
		    dim3(ROUTER_WARPS * 32), 0, s, r->n_tok, r->n_expert, r->k,
		    (const float *)r->score, p->bias, p->scale, p->norm, r->sel, r->wts);
	return x4_cuda_launched("x4k_moe_router: select launch", e);
}

extern "C" int x4k_moe_select_table(const x4k_moe_routes *r, const x4k_moe_pick *p, cudaStream_t s,
				    x4_err *e)
{
	bool tabled;
	int rc = pick_routes(r, p, true, &tabled, s, e);
	return rc || tabled ? rc : x4k_moe_route_table(r, s, e);
}

/* The logits, then the selection (with the table where table is set). */
static int router(const x4k_moe_routes *r, const float *x, int d, const float *w_r,
		  const x4k_moe_pick *p, bool table, cudaStream_t s, x4_err *e)
{
	if (!p->bias)
		return x4_err_set(e, X4_EINVAL, "x4k_moe_router: NULL bias");
	bool tabled;
	int rc = x4k_moe_router_logits(r, x, d, w_r, s, e);
	return rc ? rc : table ? x4k_moe_select_table(r, p, s, e) : pick_routes(r, p, false, &tabled, s, e);
}

extern "C" int x4k_moe_router(const x4k_moe_routes *r, const float *x, int d, const float *w_r,
			      const float *bias, float scale, bool norm, cudaStream_t s, x4_err *e)
{
	const x4k_moe_pick p = { bias, scale, norm };
	return router(r, x, d, w_r, &p, false, s, e);
}

extern "C" int x4k_moe_router_table(const x4k_moe_routes *r, const float *x, int d,
				    const float *w_r, const float *bias, float scale, bool norm,
				    cudaStream_t s, x4_err *e)
{
	const x4k_moe_pick p = { bias, scale, norm };
	return router(r, x, d, w_r, &p, true, s, e);
}

/* One block: a stable counting sort of the routes by expert.  Pass 1 counts
 * (shared atomics: the counts do not depend on their order), thread 0 scans
 * them and lays out the tiles, pass 2 places each chunk of routes: a route's
 * place is its expert's running base, plus the same expert's routes in
 * earlier warps of the chunk, plus its rank among its warp's peers
 * (__match_any_sync), so the order within an expert is the route id's. */
__global__ void __launch_bounds__(TABLE_THREADS)
route_table_kernel(x4k_moe_routes r)
{
	__shared__ int cnt[MAX_EXPERTS], base[MAX_EXPERTS];
	__shared__ int wc[TABLE_THREADS / 32][MAX_EXPERTS];
	const int nr = r.n_tok * r.k, E = r.n_expert;
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	x4p::trigger();
	x4p::wait();
	for (int ex = threadIdx.x; ex < E; ex += blockDim.x)
		cnt[ex] = 0;
	__syncthreads();
	for (int i = threadIdx.x; i < nr; i += blockDim.x) {
		const int ex = r.sel[i];
		if (ex >= 0 && ex < E)
			atomicAdd(&cnt[ex], 1);
	}
	__syncthreads();
	if (threadIdx.x == 0) {
		int off = 0, nt = 0;
		for (int ex = 0; ex < E; ex++) {
			base[ex] = off;
			r.offsets[ex] = off;
			r.counts[ex] = cnt[ex];
			for (int j = 0; j < cnt[ex] && nt < r.max_tiles; j += r.tile) {
				r.tile_expert[nt] = ex;
				r.tile_start[nt] = off + j;
				nt++;
			}
			off += cnt[ex];
		}
		r.offsets[E] = off;
		*r.n_tiles = nt;
	}
	__syncthreads();
	for (int c0 = 0; c0 < nr; c0 += blockDim.x) {
		const int i = c0 + threadIdx.x;
		int ex = i < nr ? r.sel[i] : -1;
		if (ex >= E)
			ex = -1;
		for (int j = lane; j < E; j += 32)
			wc[warp][j] = 0;
		__syncwarp();
		const unsigned peers = __match_any_sync(0xffffffffu, ex);
		const int rank = __popc(peers & ((1u << lane) - 1));
		if (ex >= 0 && rank == 0)
			wc[warp][ex] = __popc(peers);
		__syncthreads();
		for (int j = threadIdx.x; j < E; j += blockDim.x) {
			int run = base[j];
			for (int w = 0; w < TABLE_THREADS / 32; w++) {
				const int n = wc[w][j];
				wc[w][j] = run;
				run += n;
			}
			base[j] = run;
		}
		__syncthreads();
		if (ex >= 0)
			r.route[wc[warp][ex] + rank] = i;
		__syncthreads(); /* wc is cleared again next chunk */
	}
}

extern "C" int x4k_moe_route_table(const x4k_moe_routes *r, cudaStream_t s, x4_err *e)
{
	if (!r)
		return x4_err_set(e, X4_EINVAL, "x4k_moe_route_table: NULL routes");
	if (r->n_tok == 0)
		return 0;
	x4p::launch(route_table_kernel, dim3(1), dim3(TABLE_THREADS), 0, s, *r);
	return x4_cuda_launched("x4k_moe_route_table: launch", e);
}
