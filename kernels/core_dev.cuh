/*
 * core_dev.cuh - device helpers shared by every kernel (the quantized
 * products' own are quant_dev.cuh's, which builds on these): BF16 and fp16
 * widening, warp and block reductions, the hyper-connection's
 * coefficient arithmetic (one body for the fused and the eager path, so the
 * two differ only in how the projection is summed) and the YaRN rotation.
 */
#ifndef X4_CORE_DEV_CUH
#define X4_CORE_DEV_CUH

#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <stdint.h>
#include <math.h>

#include "x4_kern.h"
#include "cuda_check.h"

namespace x4c {

#define X4C_FULL 0xffffffffu

__device__ __forceinline__ float bf16(uint16_t h) { return __uint_as_float((uint32_t)h << 16); }
__device__ __forceinline__ float f16(uint16_t h) { return __half2float(__ushort_as_half(h)); }

/* Two BF16 values packed in one 32-bit word (the lower address in the low half). */
__device__ __forceinline__ float2 bf16x2(uint32_t w)
{
	return make_float2(__uint_as_float(w << 16), __uint_as_float(w & 0xffff0000u));
}

__device__ __forceinline__ float warp_sum(float v)
{
#pragma unroll
	for (int o = 16; o; o >>= 1)
		v += __shfl_xor_sync(X4C_FULL, v, o);
	return v;
}

__device__ __forceinline__ float warp_max(float v)
{
#pragma unroll
	for (int o = 16; o; o >>= 1)
		v = fmaxf(v, __shfl_xor_sync(X4C_FULL, v, o));
	return v;
}

/* Sum over the block (blockDim.x a multiple of 32, <= 1024); every thread
 * gets the result.  red: 32 floats of shared memory, free on entry. */
__device__ __forceinline__ float block_sum(float v, float *red)
{
	int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
	v = warp_sum(v);
	if (lane == 0)
		red[warp] = v;
	__syncthreads();
	float t = 0;
	for (int i = 0; i < nw; i++) /* fixed order: the same bits every run */
		t += red[i];
	__syncthreads(); /* red may be reused by the caller at once */
	return t;
}

/* Max over the block, as block_sum. */
__device__ __forceinline__ float block_max(float v, float *red)
{
	int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
	v = warp_max(v);
	if (lane == 0)
		red[warp] = v;
	__syncthreads();
	float t = red[0];
	for (int i = 1; i < nw; i++)
		t = fmaxf(t, red[i]);
	__syncthreads();
	return t;
}

/* The fence of a last-block-finishes pattern (writer: stores, fence,
 * atomic; last block: atomic, fence, loads).  acq_rel at GPU scope is what
 * the pattern needs; __threadfence() compiles to the sequentially
 * consistent MEMBAR.SC.GPU, a heavier fence on the gate's critical path. */
__device__ __forceinline__ void fence_acq_rel_gpu()
{
	asm volatile("fence.acq_rel.gpu;" ::: "memory");
}

__device__ __forceinline__ float sigmoid(float z) { return 1.0f / (1.0f + expf(-z)); }

/* docs/forward.md 5.1 step 4 for stream s of a token's projection m (already scaled by
 * the RMS): one expression used by every path. */
__device__ __forceinline__ float hc_pre_of(const float *m, const float *base,
					   const float *scale, int s)
{
	return sigmoid(__fmaf_rn(scale[0], m[s], base[s]));
}

/* docs/forward.md 5.1 steps 4-8 on one warp (every lane calls it, all 32
 * active): coef = [pre | post | comb[dst][src]] from m.  Lane l < NHC*NHC
 * holds comb element (d, s) = (l / NHC, l % NHC) through the 2 * iters
 * normalisations, so each of the 40 dependent steps is a few shuffles and
 * one division instead of NHC*NHC divisions on one thread.  Every sum runs
 * in the serial order (a row over s, a column over d, from 0, then + eps),
 * each lane gathering its row or column by shuffles, and the divisions are
 * the same IEEE divisions: the coefficients are those of the one-thread
 * loop, bit for bit.  Lanes past NHC*NHC shadow lane 0 and write nothing. */
template <int NHC>
__device__ void hc_coef_warp(const float *m, const float *base, const float *scale,
			     const x4k_hc_cfg &c, float *coef)
{
	constexpr int NN = NHC * NHC;
	const int lane = threadIdx.x & 31, l = lane < NN ? lane : 0;
	const int d = l / NHC, s = l % NHC;
	if (lane < NHC) {
		coef[lane] = hc_pre_of(m, base, scale, lane);
		coef[NHC + lane] = 2.0f * sigmoid(__fmaf_rn(scale[1], m[NHC + lane], base[NHC + lane]));
	}
	/* the row's clamped logits, each lane its own copy of the row (the same
	 * expressions), so the row maximum is the serial loop's */
	float mx = -INFINITY, v = 0.f;
#pragma unroll
	for (int j = 0; j < NHC; j++) {
		const int k = 2 * NHC + d * NHC + j;
		float t = __fmaf_rn(scale[2], m[k], base[k]);
		/* not fminf/fmaxf: a NaN must stay a NaN, as in the reference */
		t = t < c.clamp_min ? c.clamp_min : t;
		t = t > c.clamp_max ? c.clamp_max : t;
		mx = t > mx ? t : mx;
		if (j == s)
			v = t;
	}
	float M = expf(v - mx);
	for (int it = 0; it < c.iters; it++) {
		float sum = 0;
#pragma unroll
		for (int j = 0; j < NHC; j++)
			sum += __shfl_sync(0xffffffffu, M, d * NHC + j);
		sum += c.hc_eps;
		M = M / sum;
		sum = 0;
#pragma unroll
		for (int j = 0; j < NHC; j++)
			sum += __shfl_sync(0xffffffffu, M, j * NHC + s);
		sum += c.hc_eps;
		M = M / sum;
	}
	if (lane < NN)
		coef[2 * NHC + lane] = M;
}

/* docs/forward.md 5.2 A4/F4 at one column: out[d] = post[d] * y + sum_s C[d][s] h[s],
 * the mixed sum first, in source order (as the reference). */
template <int NHC>
__device__ __forceinline__ void hc_update(const float *coef, float y, const float *h, float *out)
{
#pragma unroll
	for (int d = 0; d < NHC; d++) {
		float mixed = 0;
#pragma unroll
		for (int s = 0; s < NHC; s++)
			mixed = __fmaf_rn(coef[2 * NHC + d * NHC + s], h[s], mixed);
		out[d] = __fmaf_rn(coef[NHC + d], y, mixed);
	}
}

/* YaRN rotation of one adjacent pair at position p (docs/forward.md 6.2): the angle is
 * fl32(fl32(p) * omega), rounded on its own (no contraction), then the
 * accurate cosf/sinf (never __sinf: angles reach 2.6e5 rad). */
__device__ __forceinline__ float2 rope_pair(float a, float b, int p, float omega)
{
	float th = __fmul_rn((float)p, omega);
	float sn, cs;
	sincosf(th, &sn, &cs);
	return make_float2(a * cs - b * sn, b * cs + a * sn);
}

} /* namespace x4c */

/* Dispatch a template on the stream count (1..4: each instance unrolls
 * n_hc*(2+n_hc) dot products, and compile time grows with it). */
#define X4C_NHC_SWITCH(n, NHC, ...)                                      \
	switch (n) {                                                     \
	case 1: { constexpr int NHC = 1; __VA_ARGS__; } break;           \
	case 2: { constexpr int NHC = 2; __VA_ARGS__; } break;           \
	case 3: { constexpr int NHC = 3; __VA_ARGS__; } break;           \
	case 4: { constexpr int NHC = 4; __VA_ARGS__; } break;           \
	default: break;                                                  \
	}

#endif
