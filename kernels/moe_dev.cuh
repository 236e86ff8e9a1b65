/*
 * moe_dev.cuh - the router's selection (docs/forward.md 7.2), one
 * definition for the router's kernels (moe_router.cu) and the persistent
 * decode step (step.cu): the top k of score + bias on one warp, the
 * weights from the unbiased scores.
 */
#ifndef X4_MOE_DEV_CUH
#define X4_MOE_DEV_CUH

#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#define X4C_MOE_MAX_EXPERTS 256
#define X4C_MOE_MAX_K 8

namespace x4c {

/* A warp a token: lane l holds experts l, l+32, ... (g + bias in
 * registers); each of the k rounds takes the warp's maximum in the order
 * (g + bias descending, index ascending), so the lower index wins an exact
 * tie, and marks it taken; NaN never wins, and when only NaN is left the
 * lowest index not yet taken is picked: x4r_topk's rule (lib/x4_kern.h).
 * Every lane ends a round with the same pick. */
/* Token t's top k on one warp (the router's select kernels, and the
 * persistent step's, kernels/step.cu).  ROLLED keeps the k rounds a loop
 * (the persistent step's code is kept small: docs/step.md 3); the same
 * operations in the same order either way. */
template <bool ROLLED = false>
__device__ __forceinline__ void moe_select_token(int t, int lane, int n_expert, int k,
					     const float *__restrict__ score,
					     const float *__restrict__ bias, float scale, bool norm,
					     int32_t *__restrict__ sel, float *__restrict__ wts)
{
	const float *g = score + (size_t)t * n_expert;
	float gv[X4C_MOE_MAX_EXPERTS / 32], sb[X4C_MOE_MAX_EXPERTS / 32];
	unsigned taken = 0;
#pragma unroll
	for (int j = 0; j < X4C_MOE_MAX_EXPERTS / 32; j++) {
		const int ex = lane + 32 * j;
		gv[j] = ex < n_expert ? g[ex] : 0.f;
		sb[j] = ex < n_expert ? gv[j] + bias[ex] : 0.f;
		if (ex >= n_expert)
			taken |= 1u << j;
	}
	float sum = 0.f;
	constexpr int RK = ROLLED ? 1 : X4C_MOE_MAX_K; /* the rounds' unrolling */
	int pick[X4C_MOE_MAX_K];
	float pg[X4C_MOE_MAX_K];
#pragma unroll RK
	for (int s = 0; s < X4C_MOE_MAX_K; s++) {
		if (s >= k)
			break;
		int be = -1;
		float bsb = 0.f, bg = 0.f;
#pragma unroll
		for (int j = 0; j < X4C_MOE_MAX_EXPERTS / 32; j++) /* ascending index in the lane */
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
			for (int j = X4C_MOE_MAX_EXPERTS / 32 - 1; j >= 0; j--)
				if (!(taken & (1u << j)))
					lo = lane + 32 * j;
#pragma unroll
			for (int o = 16; o; o >>= 1)
				lo = min(lo, __shfl_xor_sync(0xffffffffu, lo, o));
			be = lo;
			float mine = 0.f;
#pragma unroll
			for (int j = 0; j < X4C_MOE_MAX_EXPERTS / 32; j++)
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
#pragma unroll RK
	for (int s = 0; s < X4C_MOE_MAX_K; s++) {
		if (s >= k)
			break;
		sel[(size_t)t * k + s] = pick[s];
		wts[(size_t)t * k + s] = norm ? pg[s] / (sum + 1e-20f) * scale : pg[s] * scale;
	}
}

} /* namespace x4c */

#endif
