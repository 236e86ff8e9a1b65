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

#define ROUTER_WARPS 4
#define TABLE_THREADS 512
#define MAX_EXPERTS 256
#define MAX_K 8

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

/* A warp a token: lane l holds experts l, l+32, ... (g + bias in
 * registers); each of the k rounds takes the warp's maximum in the order
 * (g + bias descending, index ascending), so the lower index wins an exact
 * tie, and marks it taken; NaN never wins, and when only NaN is left the
 * lowest index not yet taken is picked: x4r_topk's rule (lib/x4_kern.h).
 * Every lane ends a round with the same pick. */
/* Token t's top k on one warp (the body of router_select_kernel). */
__device__ __forceinline__ void select_token(int t, int lane, int n_expert, int k,
					     const float *__restrict__ score,
					     const float *__restrict__ bias, float scale, bool norm,
					     int32_t *__restrict__ sel, float *__restrict__ wts)
{
	const float *g = score + (size_t)t * n_expert;
	float gv[MAX_EXPERTS / 32], sb[MAX_EXPERTS / 32];
	unsigned taken = 0;
#pragma unroll
	for (int j = 0; j < MAX_EXPERTS / 32; j++) {
		const int ex = lane + 32 * j;
		gv[j] = ex < n_expert ? g[ex] : 0.f;
		sb[j] = ex < n_expert ? gv[j] + bias[ex] : 0.f;
		if (ex >= n_expert)
			taken |= 1u << j;
	}
	float sum = 0.f;
	int pick[MAX_K];
	float pg[MAX_K];
#pragma unroll
	for (int s = 0; s < MAX_K; s++) {
		if (s >= k)
			break;
		int be = -1;
		float bsb = 0.f, bg = 0.f;
#pragma unroll
		for (int j = 0; j < MAX_EXPERTS / 32; j++) /* ascending index in the lane */
			if (!(taken & (1u << j)) && !isnan(sb[j]) && (be < 0 || sb[j] > bsb)) {
				be = lane + 32 * j;
				bsb = sb[j];
				bg = gv[j];
			}
#pragma unroll
		for (int o = 16; o; o >>= 1) {
			const int oe = __shfl_xor_sync(0xffffffffu, be, o);
			const float osb = __shfl_xor_sync(0xffffffffu, bsb, o);
			const float og = __shfl_xor_sync(0xffffffffu, bg, o);
			if (oe >= 0 && (be < 0 || osb > bsb || (osb == bsb && oe < be))) {
				be = oe;
				bsb = osb;
				bg = og;
			}
		}
		if (be < 0) { /* only NaN left: the lowest index not yet taken */
			int lo = 0x7fffffff;
#pragma unroll
			for (int j = MAX_EXPERTS / 32 - 1; j >= 0; j--)
				if (!(taken & (1u << j)))
					lo = lane + 32 * j;
#pragma unroll
			for (int o = 16; o; o >>= 1)
				lo = min(lo, __shfl_xor_sync(0xffffffffu, lo, o));
			be = lo;
			float mine = 0.f;
#pragma unroll
			for (int j = 0; j < MAX_EXPERTS / 32; j++)
				if (j == (be >> 5))
					mine = gv[j];
			bg = __shfl_sync(0xffffffffu, mine, be & 31);
		}
		if ((be & 31) == lane)
			taken |= 1u << (be >> 5);
		pick[s] = be;
		pg[s] = bg;
		sum += bg;
	}
	if (lane != 0)
		return;
#pragma unroll
	for (int s = 0; s < MAX_K; s++) {
		if (s >= k)
			break;
		sel[(size_t)t * k + s] = pick[s];
		wts[(size_t)t * k + s] = norm ? pg[s] / (sum + 1e-20f) * scale : pg[s] * scale;
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

/* The route table of route_table_kernel for nr <= 32 routes on one warp
 * (lane i: route i): the same counts, offsets, tiles and order (a route's
 * place is its expert's offset plus the routes of that expert before it,
 * so ascending route id within an expert). */
__device__ __forceinline__ void small_table(const x4k_moe_routes &r, int lane)
{
	const int nr = r.n_tok * r.k, E = r.n_expert;
	int ex = lane < nr ? r.sel[lane] : -1;
	if (ex >= E)
		ex = -1; /* dropped, as a negative id */
	constexpr int J = MAX_EXPERTS / 32;
	int cnt[J];
#pragma unroll
	for (int j = 0; j < J; j++)
		cnt[j] = 0;
	for (int i = 0; i < nr; i++) {
		const int si = __shfl_sync(0xffffffffu, ex, i);
#pragma unroll
		for (int j = 0; j < J; j++)
			cnt[j] += si >= 0 && si == lane + 32 * j;
	}
	/* exclusive prefix sums over experts in ascending id (expert 32 j + lane) */
	int off[J], tb[J], run = 0, trun = 0;
#pragma unroll
	for (int j = 0; j < J; j++) {
		const int nt = (cnt[j] + r.tile - 1) / r.tile;
		int a = cnt[j], b = nt;
#pragma unroll
		for (int o = 1; o < 32; o <<= 1) { /* inclusive scans */
			const int a2 = __shfl_up_sync(0xffffffffu, a, o), b2 = __shfl_up_sync(0xffffffffu, b, o);
			if (lane >= o)
				a += a2, b += b2;
		}
		off[j] = run + a - cnt[j];
		tb[j] = trun + b - nt;
		run += __shfl_sync(0xffffffffu, a, 31);
		trun += __shfl_sync(0xffffffffu, b, 31);
	}
#pragma unroll
	for (int j = 0; j < J; j++) {
		const int e = lane + 32 * j;
		if (e >= E)
			break;
		r.counts[e] = cnt[j];
		r.offsets[e] = off[j];
		for (int q = 0; q * r.tile < cnt[j]; q++)
			if (tb[j] + q < r.max_tiles) {
				r.tile_expert[tb[j] + q] = e;
				r.tile_start[tb[j] + q] = off[j] + q * r.tile;
			}
	}
	if (lane == 0) {
		r.offsets[E] = run;
		*r.n_tiles = trun < r.max_tiles ? trun : r.max_tiles;
	}
	/* this route's place: its expert's offset (held by lane ex % 32 in slot
	 * ex / 32) plus the same expert's routes before it */
	const unsigned peers = __match_any_sync(0xffffffffu, ex);
	const int rank = __popc(peers & ((1u << lane) - 1));
	int base = 0;
#pragma unroll
	for (int j = 0; j < J; j++) {
		const int v = __shfl_sync(0xffffffffu, off[j], ex & 31);
		if (ex >= 0 && j == ex >> 5)
			base = v;
	}
	if (ex >= 0)
		r.route[base + rank] = lane;
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

static int router(const x4k_moe_routes *r, const float *x, int d, const float *w_r,
		  const float *bias, float scale, bool norm, bool table, bool *tabled, cudaStream_t s,
		  x4_err *e);

extern "C" int x4k_moe_router(const x4k_moe_routes *r, const float *x, int d, const float *w_r,
			      const float *bias, float scale, bool norm, cudaStream_t s, x4_err *e)
{
	bool tabled;
	return router(r, x, d, w_r, bias, scale, norm, false, &tabled, s, e);
}

extern "C" int x4k_moe_router_table(const x4k_moe_routes *r, const float *x, int d,
				    const float *w_r, const float *bias, float scale, bool norm,
				    cudaStream_t s, x4_err *e)
{
	bool tabled;
	int rc = router(r, x, d, w_r, bias, scale, norm, true, &tabled, s, e);
	return rc || tabled ? rc : x4k_moe_route_table(r, s, e);
}

static int router(const x4k_moe_routes *r, const float *x, int d, const float *w_r,
		  const float *bias, float scale, bool norm, bool table, bool *tabled, cudaStream_t s,
		  x4_err *e)
{
	*tabled = false;
	if (!r || !x || !w_r || !bias || d <= 0 || d > 12288)
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
	X4_CUDA_TRY(cudaGetLastError(), "x4k_moe_router: logits launch", e);
	if (table && r->n_tok <= ROUTER_WARPS && r->n_tok * r->k <= 32) {
		x4p::launch(router_select_table_kernel, dim3(1), dim3(ROUTER_WARPS * 32), 0, s, *r, bias,
			    scale, norm);
		*tabled = true;
		return x4_cuda_launched("x4k_moe_router: select and table launch", e);
	}
	x4p::launch(router_select_kernel, dim3((r->n_tok + ROUTER_WARPS - 1) / ROUTER_WARPS),
		    dim3(ROUTER_WARPS * 32), 0, s, r->n_tok, r->n_expert, r->k,
		    (const float *)r->score, bias, scale, norm, r->sel, r->wts);
	return x4_cuda_launched("x4k_moe_router: select launch", e);
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
