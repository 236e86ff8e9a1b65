/* The chunked decode experts of commit d99d56c (kernels/moe_experts.cu's
 * gemv tiles as they were before the row-staged path for tiles of one
 * route), kept for bench/kernels/moe.cu: in namespace moe_chunk, SMALL_NV
 * a constant, the entry point a plain launcher of the two gemv kernels.
 * The gemv core they call (gemv_block, chunk_dot) is quant_dev.cuh's,
 * which that change left as it was.  Not built into the library. */
#ifndef X4_MOE_CHUNK_CUH
#define X4_MOE_CHUNK_CUH

#include "x4_kern.h"
#include "quant_dev.cuh"

namespace moe_chunk {

using namespace x4d;

constexpr int SMALL_NV = 4;

/* The tile's expert, first route index and route count; false past the end. */
__device__ __forceinline__ bool tile_of(const x4k_moe_routes &r, int *ex, int *start, int *cnt)
{
	const int t = blockIdx.x;
	if (t >= *r.n_tiles)
		return false;
	*ex = r.tile_expert[t];
	*start = r.tile_start[t];
	const int left = r.offsets[*ex + 1] - *start;
	*cnt = left < r.tile ? left : r.tile;
	return true;
}

template <int T_EXP, int NV>
__device__ __forceinline__ void gu_gemv(uint8_t *smem, const float *const *xsrc, const uint8_t *g,
					const uint8_t *u, int row, int d, int f, int start, int cnt, float *h)
{
	const uint8_t *const wr[2] = { g, u };
	float acc[2][NV];
	gemv_block<T_EXP, NV, 2>(smem, wr, row, d, xsrc, acc);
	if (row >= 0 && (threadIdx.x & 31) == 0)
#pragma unroll
		for (int v = 0; v < NV; v++)
			if (v < cnt)
				h[(size_t)(start + v) * f + row] = silu(acc[0][v]) * acc[1][v];
}

template <int T_EXP>
__global__ void __launch_bounds__(GEMV_WARPS * 32)
moe_gu_gemv(x4k_moe_routes r, const float *__restrict__ x, int d, int f, const uint8_t *__restrict__ gate,
	    const uint8_t *__restrict__ up, float *__restrict__ h)
{
	__shared__ __align__(16) uint8_t smem[gemv_smem<T_EXP, SMALL_NV, 2>::BYTES];
	__shared__ const float *xsrc[SMALL_NV];
	int ex, start, cnt;
	if (!tile_of(r, &ex, &start, &cnt))
		return;
	if (threadIdx.x < SMALL_NV) /* read after gemv_block's first barrier */
		xsrc[threadIdx.x] = (int)threadIdx.x < cnt
			? x + (size_t)(r.route[start + threadIdx.x] / r.k) * d : nullptr;
	const int row = blockIdx.y * GEMV_WARPS + (threadIdx.x >> 5);
	const bool ok = row < f;
	const size_t rb = row_bytes(T_EXP, d), at = ((size_t)ex * f + (ok ? row : 0)) * rb;
	if (cnt == 1)
		gu_gemv<T_EXP, 1>(smem, xsrc, gate + at, up + at, ok ? row : -1, d, f, start, cnt, h);
	else
		gu_gemv<T_EXP, SMALL_NV>(smem, xsrc, gate + at, up + at, ok ? row : -1, d, f, start, cnt, h);
}

template <int T_EXP, int NV>
__device__ __forceinline__ void down_gemv(uint8_t *smem, const float *const *xsrc, const uint8_t *w,
					  int row, int d, int f, const int32_t *route, int cnt,
					  float *out)
{
	const uint8_t *const wr[1] = { w };
	float acc[1][NV];
	gemv_block<T_EXP, NV, 1>(smem, wr, row, f, xsrc, acc);
	if (row >= 0 && (threadIdx.x & 31) == 0)
#pragma unroll
		for (int v = 0; v < NV; v++)
			if (v < cnt)
				out[(size_t)route[v] * d + row] = acc[0][v];
}

template <int T_EXP>
__global__ void __launch_bounds__(GEMV_WARPS * 32)
moe_down_gemv(x4k_moe_routes r, int d, int f, const uint8_t *__restrict__ down,
	      const float *__restrict__ h, float *__restrict__ out)
{
	__shared__ __align__(16) uint8_t smem[gemv_smem<T_EXP, SMALL_NV, 1>::BYTES];
	__shared__ const float *xsrc[SMALL_NV];
	int ex, start, cnt;
	if (!tile_of(r, &ex, &start, &cnt))
		return;
	if (threadIdx.x < SMALL_NV)
		xsrc[threadIdx.x] = (int)threadIdx.x < cnt ? h + (size_t)(start + threadIdx.x) * f : nullptr;
	const int row = blockIdx.y * GEMV_WARPS + (threadIdx.x >> 5);
	const bool ok = row < d;
	const uint8_t *w = down + ((size_t)ex * d + (ok ? row : 0)) * row_bytes(T_EXP, f);
	if (cnt == 1)
		down_gemv<T_EXP, 1>(smem, xsrc, w, ok ? row : -1, d, f, r.route + start, cnt, out);
	else
		down_gemv<T_EXP, SMALL_NV>(smem, xsrc, w, ok ? row : -1, d, f, r.route + start, cnt, out);
}

/* gate/up with SwiGLU into h, then down into o, for tiles of at most 4 routes */
template <int T_EXP>
static inline void experts(const x4k_moe_routes *r, const float *x, int d, int f, const void *gate,
			   const void *up, const void *down, float *h, float *o, cudaStream_t s)
{
	const unsigned tiles = (unsigned)r->max_tiles;
	moe_gu_gemv<T_EXP><<<dim3(tiles, (f + GEMV_WARPS - 1) / GEMV_WARPS), GEMV_WARPS * 32, 0, s>>>(
		*r, x, d, f, static_cast<const uint8_t *>(gate), static_cast<const uint8_t *>(up), h);
	moe_down_gemv<T_EXP><<<dim3(tiles, (d + GEMV_WARPS - 1) / GEMV_WARPS), GEMV_WARPS * 32, 0, s>>>(
		*r, d, f, static_cast<const uint8_t *>(down), h, o);
}

} /* namespace moe_chunk */

#endif
