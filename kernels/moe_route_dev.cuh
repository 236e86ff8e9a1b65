/*
 * moe_route_dev.cuh - the router's top k and the route table of a few
 * routes, as device functions: one definition for moe_router.cu's
 * selection kernels and for the routed experts' gate/up launch at the
 * batch-1 step (gemv_tc.cuh), whose blocks select their own expert from
 * the router's scores instead of waiting for a selection launch.
 */
#ifndef X4_MOE_ROUTE_DEV_CUH
#define X4_MOE_ROUTE_DEV_CUH

#include <stdint.h>

#include "x4_kern.h"

namespace x4route {

constexpr int MAX_EXPERTS = 256, MAX_K = 8;
constexpr int J = MAX_EXPERTS / 32; /* experts a lane: lane + 32 j */

/* One token's picks, the same in every lane of the warp: ex[s] the expert
 * of slot s (slot 0 the best), g[s] its unbiased score, sum their sum
 * added in slot order. */
struct picks {
	int ex[MAX_K];
	float g[MAX_K];
	float sum;
};

/* The lane's biases (0 past n_expert): a weight, so a kernel may load them
 * before it waits for the scores.  JN: experts a lane, n_expert <= 32 JN
 * (fewer registers where the caller knows the experts are few). */
template <int JN = J>
__device__ __forceinline__ void load_bias(int lane, int n_expert, const float *__restrict__ bias,
					  float (&bv)[JN])
{
#pragma unroll
	for (int j = 0; j < JN; j++) {
		const int ex = lane + 32 * j;
		bv[j] = ex < n_expert ? bias[ex] : 0.f;
	}
}

/* A warp a token: lane l holds experts l, l+32, ... (g + bias in
 * registers); each of the k rounds takes the warp's maximum in the order
 * (g + bias descending, index ascending), so the lower index wins an exact
 * tie, and marks it taken; NaN never wins, and when only NaN is left the
 * lowest index not yet taken is picked: x4r_topk's rule (lib/x4_kern.h).
 * Every lane ends a round with the same pick.  g: the token's n_expert
 * scores. */
template <int JN = J, bool CG = false>
__device__ __forceinline__ void top_k(int lane, int n_expert, int k, const float *__restrict__ g,
				      const float (&bv)[JN], picks &p)
{
	float gv[JN], sb[JN];
	unsigned taken = 0;
#pragma unroll
	for (int j = 0; j < JN; j++) {
		const int ex = lane + 32 * j;
		/* CG: past L1 (a read before the wait); else through it, so that
		 * a block's warps after the first hit L1 rather than all of the
		 * card's warps the same two L2 lines */
		gv[j] = ex < n_expert ? (CG ? __ldcg(g + ex) : g[ex]) : 0.f;
		sb[j] = ex < n_expert ? gv[j] + bv[j] : 0.f;
		if (ex >= n_expert)
			taken |= 1u << j;
	}
	p.sum = 0.f;
#pragma unroll
	for (int s = 0; s < MAX_K; s++) {
		if (s >= k)
			break;
		int be = -1;
		float bsb = 0.f, bg = 0.f;
#pragma unroll
		for (int j = 0; j < JN; j++) /* ascending index in the lane */
			if (!(taken & (1u << j)) && !isnan(sb[j]) && (be < 0 || sb[j] > bsb)) {
				be = lane + 32 * j;
				bsb = sb[j];
				bg = gv[j];
			}
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
		/* the warp's maximum in two reductions (redux.sync) instead of a
		 * shuffle tree: the largest key, then the lowest index holding it.
		 * The key orders the values as floats do (-0 made +0 first, so
		 * that the two tie as they compare); 0 is no candidate (NaN and
		 * taken are none), below every real value's key. */
		{
			const unsigned u = __float_as_uint(bsb + 0.f);
			const unsigned key = be < 0 ? 0u : (u & 0x80000000u) ? ~u : u | 0x80000000u;
			const unsigned top = __reduce_max_sync(0xffffffffu, key);
			const int win = __reduce_min_sync(0xffffffffu, key == top && top ? be : 0x7fffffff);
			be = top ? win : -1;
			if (top) {
				float mine = 0.f; /* the winner's score, from the lane that holds it */
#pragma unroll
				for (int j = 0; j < JN; j++)
					if (j == (be >> 5))
						mine = gv[j];
				bg = __shfl_sync(0xffffffffu, mine, be & 31);
			}
		}
#else
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
#endif
		if (be < 0) { /* only NaN left: the lowest index not yet taken */
			int lo = 0x7fffffff;
#pragma unroll
			for (int j = JN - 1; j >= 0; j--)
				if (!(taken & (1u << j)))
					lo = lane + 32 * j;
#pragma unroll
			for (int o = 16; o; o >>= 1)
				lo = min(lo, __shfl_xor_sync(0xffffffffu, lo, o));
			be = lo;
			float mine = 0.f;
#pragma unroll
			for (int j = 0; j < JN; j++)
				if (j == (be >> 5))
					mine = gv[j];
			bg = __shfl_sync(0xffffffffu, mine, be & 31);
		}
		if ((be & 31) == lane)
			taken |= 1u << (be >> 5);
		p.ex[s] = be;
		p.g[s] = bg;
		p.sum += bg;
	}
}

/* Slot s's weight: scale * g / (sum g + 1e-20) when norm, else scale * g. */
__device__ __forceinline__ float weight(const picks &p, int s, float scale, bool norm)
{
	return norm ? p.g[s] / (p.sum + 1e-20f) * scale : p.g[s] * scale;
}

/* The picks p of one token into its k entries of sel and wts (one thread). */
__device__ __forceinline__ void write_picks(const picks &p, int k, float scale, bool norm,
					    int32_t *__restrict__ sel, float *__restrict__ wts)
{
#pragma unroll
	for (int s = 0; s < MAX_K; s++) {
		if (s >= k)
			break;
		sel[s] = p.ex[s];
		wts[s] = weight(p, s, scale, norm);
	}
}

/* Token t's top k into sel and wts (lane 0 writes). */
__device__ __forceinline__ void select_token(int t, int lane, int n_expert, int k,
					     const float *__restrict__ score,
					     const float *__restrict__ bias, float scale, bool norm,
					     int32_t *__restrict__ sel, float *__restrict__ wts)
{
	float bv[J];
	load_bias(lane, n_expert, bias, bv);
	picks p;
	top_k(lane, n_expert, k, score + (size_t)t * n_expert, bv, p);
	if (lane == 0)
		write_picks(p, k, scale, norm, sel + (size_t)t * k, wts + (size_t)t * k);
}

/* One token's tile m of the route table (one route a tile: the picks in
 * ascending expert id): its slot, which is also the route's id. */
__device__ __forceinline__ int tile_slot(const picks &p, int k, int m)
{
	int slot = 0;
#pragma unroll
	for (int s = 0; s < MAX_K; s++) {
		if (s >= k)
			break;
		int below = 0;
#pragma unroll
		for (int q = 0; q < MAX_K; q++)
			if (q < k)
				below += p.ex[q] < p.ex[s];
		if (below == m)
			slot = s;
	}
	return slot;
}

/* The route table of route_table_kernel for nr <= 32 routes on one warp
 * (lane i: route i): the same counts, offsets, tiles and order (a route's
 * place is its expert's offset plus the routes of that expert before it,
 * so ascending route id within an expert). */
template <int JN = J>
__device__ __forceinline__ void small_table(const x4k_moe_routes &r, int lane)
{
	const int nr = r.n_tok * r.k, E = r.n_expert;
	int ex = lane < nr ? r.sel[lane] : -1;
	if (ex >= E)
		ex = -1; /* dropped, as a negative id */
	int cnt[JN];
#pragma unroll
	for (int j = 0; j < JN; j++)
		cnt[j] = 0;
	for (int i = 0; i < nr; i++) {
		const int si = __shfl_sync(0xffffffffu, ex, i);
#pragma unroll
		for (int j = 0; j < JN; j++)
			cnt[j] += si >= 0 && si == lane + 32 * j;
	}
	/* exclusive prefix sums over experts in ascending id (expert 32 j + lane) */
	int off[JN], tb[JN], run = 0, trun = 0;
#pragma unroll
	for (int j = 0; j < JN; j++) {
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
	for (int j = 0; j < JN; j++) {
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
	for (int j = 0; j < JN; j++) {
		const int v = __shfl_sync(0xffffffffu, off[j], ex & 31);
		if (ex >= 0 && j == ex >> 5)
			base = v;
	}
	if (ex >= 0)
		r.route[base + rank] = lane;
}

} /* namespace x4route */

#endif
