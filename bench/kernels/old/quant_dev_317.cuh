/* The staged gemv of commit 317feb9 (kernels/quant_dev.cuh and kernels/gemv_quant.cu
 * as they were), kept for bench/kernels/gemv.cu and moe.cu: namespace x4d
 * renamed x4d_317, the entry point a plain launcher.  Not built into the
 * library. */
/*
 * quant_dev.cuh - device code shared by the quantized products (gemv_quant.cu,
 * gemm_quant.cu) and the grouped MoE experts (moe_experts.cu): block decoding
 * of IQ4_NL, Q6_K and BF16 (docs/gguf.md 3), and the two product cores.
 *
 *   gemv core: a warp per weight row, the row streamed through shared memory
 *   in chunks of KC values with 16-byte loads (an 18- or 210-byte block is
 *   only 2-byte aligned, so the bytes are staged and decoded from shared
 *   memory), against NV input vectors held in shared memory.
 *   gemm core: a 64-row x 64-token tile; each 32-wide slice of the weight is
 *   dequantized once into shared memory and reused by all 64 tokens.
 *
 * All sums are fp32 and run in a fixed order (no atomics), written with
 * explicit _rn intrinsics so that no instantiation (one input vector or four)
 * contracts them differently: a route's result is the same bits whichever
 * tile it lands in.
 */
#ifndef X4_QUANT_DEV_317_CUH
#define X4_QUANT_DEV_317_CUH

#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <stdint.h>

#include "x4.h"

namespace x4d_317 {

/* ---------------- formats ---------------- */

template <int TYPE> struct fmt;
template <> struct fmt<X4_T_IQ4_NL> { enum { BE = 32, BB = 18 }; };
template <> struct fmt<X4_T_Q6_K> { enum { BE = 256, BB = 210 }; };
template <> struct fmt<X4_T_BF16> { enum { BE = 1, BB = 2 }; };

__host__ __device__ inline size_t row_bytes(int type, int k)
{
	return type == X4_T_IQ4_NL ? (size_t)(k / 32) * 18
	     : type == X4_T_Q6_K ? (size_t)(k / 256) * 210 : (size_t)k * 2;
}

__device__ __forceinline__ float f16(uint16_t h) { return __half2float(__ushort_as_half(h)); }
__device__ __forceinline__ float bf16(uint16_t h) { return __uint_as_float((uint32_t)h << 16); }
__device__ __forceinline__ float i8(uint32_t w, int j) { return (float)(int8_t)(w >> (8 * j)); }

/* Nibble j of byte j (low nibbles when hi is 0, high when 1) of the 4 bytes
 * of w, packed as 4-bit fields 0..3 of the result. */
__device__ __forceinline__ uint32_t nibbles4(uint32_t w, int hi)
{
	uint32_t x = (w >> (4 * hi)) & 0x0F0F0F0Fu;
	x = (x | (x >> 4)) & 0x00FF00FFu;
	return (x | (x >> 8)) & 0xFFFFu;
}

/* The IQ4_NL codebook values of four codes (4-bit fields 0..3 of q), as four
 * int8 bytes: two byte-permutes pick from the lower and upper 8 entries by
 * the code's low 3 bits, a third picks between them by its bit 3. */
__device__ __forceinline__ uint32_t iq4_lookup4(uint32_t q)
{
	const uint32_t t0 = 0xbfad9881u, t1 = 0xf6eaddcfu; /* codes 0..7 */
	const uint32_t t2 = 0x26190d01u, t3 = 0x71594535u; /* codes 8..15 */
	uint32_t lo = __byte_perm(t0, t1, q), hi = __byte_perm(t2, t3, q);
	return __byte_perm(lo, hi, 0x3210u | ((q & 0x8888u) >> 1));
}

__device__ __forceinline__ uint32_t ld32_2(const uint8_t *p) /* 2-aligned */
{
	const uint16_t *h = reinterpret_cast<const uint16_t *>(p);
	return (uint32_t)h[0] | (uint32_t)h[1] << 16;
}

/* ---------------- staging a row's bytes into shared memory ---------------- */

/* Copies n bytes at src (2-aligned, global) into buf (16-aligned, shared) at
 * the same offset modulo 16, so every whole 16-byte line moves with one
 * 16-byte load; the ragged first and last lines move byte by byte (never
 * reading outside [src, src+n)).  All loads are issued before any store.
 * Returns where src's first byte landed.  Warp-cooperative; the caller
 * __syncwarp()s before reading the bytes. */
template <int MAXN>
__device__ __forceinline__ const uint8_t *stage(uint8_t *buf, const uint8_t *src, int n, int lane)
{
	const int mis = (int)((uintptr_t)src & 15);
	const uint4 *s4 = reinterpret_cast<const uint4 *>(src - mis);
	const int lines = (mis + n + 15) >> 4;
	constexpr int IT = ((MAXN + 30) / 16 + 31) / 32;
	uint4 v[IT];
	unsigned full = 0;
#pragma unroll
	for (int i = 0; i < IT; i++) {
		const int li = lane + 32 * i, lo = 16 * li;
		if (li < lines) {
			if (lo >= mis && lo + 16 <= mis + n) {
				v[i] = __ldcs(s4 + li);
				full |= 1u << i;
			} else {
				const int b0 = lo > mis ? lo : mis;
				const int b1 = lo + 16 < mis + n ? lo + 16 : mis + n;
				for (int b = b0; b < b1; b++)
					buf[b] = src[b - mis];
			}
		}
	}
#pragma unroll
	for (int i = 0; i < IT; i++)
		if (full & (1u << i))
			reinterpret_cast<uint4 *>(buf)[lane + 32 * i] = v[i];
	return buf + mis;
}

/* ---------------- the gemv core ---------------- */

constexpr int KC = 1024;           /* values of a row per chunk */
constexpr int XS = KC + KC / 32;   /* one padded x vector in shared memory */
constexpr int GEMV_WARPS = 8;

/* Shared x index of value c of a chunk: one float of padding after every
 * 32, so lanes reading value 32*lane + j hit 32 different banks. */
__device__ __forceinline__ int xpad(int c) { return c + (c >> 5); }

template <int TYPE> struct chunk_bytes { enum { N = KC / fmt<TYPE>::BE * fmt<TYPE>::BB }; };
template <int TYPE> struct stage_bytes { enum { N = ((chunk_bytes<TYPE>::N + 30) / 16) * 16 }; };

/* acc[v] += (values [0, kc) of the staged chunk at p) . xs[v].  The sum of a
 * block is formed on the integer codes and scaled once. */
template <int TYPE, int NV>
__device__ __forceinline__ void chunk_dot(const uint8_t *p, int kc, const float *xs, int lane,
					  float (&acc)[NV])
{
	if constexpr (TYPE == X4_T_IQ4_NL) {
		const int b = lane; /* one 32-value block a lane */
		if (32 * b >= kc)
			return;
		const uint8_t *q = p + 18 * b;
		const float d = f16(*reinterpret_cast<const uint16_t *>(q));
		const float *x = xs + 33 * b;
		float s[NV];
#pragma unroll
		for (int v = 0; v < NV; v++)
			s[v] = 0.f;
#pragma unroll
		for (int i = 0; i < 4; i++) {
			const uint32_t w = ld32_2(q + 2 + 4 * i);
			const uint32_t lo = iq4_lookup4(nibbles4(w, 0)), hi = iq4_lookup4(nibbles4(w, 1));
#pragma unroll
			for (int j = 0; j < 4; j++)
#pragma unroll
				for (int v = 0; v < NV; v++)
				{
					s[v] = __fmaf_rn(i8(lo, j), x[v * XS + 4 * i + j], s[v]);
					s[v] = __fmaf_rn(i8(hi, j), x[v * XS + 16 + 4 * i + j], s[v]);
				}
		}
#pragma unroll
		for (int v = 0; v < NV; v++)
			acc[v] = __fmaf_rn(d, s[v], acc[v]);
	} else if constexpr (TYPE == X4_T_Q6_K) {
		const int g = lane; /* one 32-value group (one ql/qh quarter) a lane */
		if (32 * g >= kc)
			return;
		const uint8_t *q = p + 210 * (g >> 3);
		const int hh = (g >> 2) & 1, kq = g & 3;
		const uint8_t *ql = q + 64 * hh + 32 * (kq & 1), *qh = q + 128 + 32 * hh;
		const int sh1 = 4 * (kq >> 1), sh2 = 2 * kq;
		const float d = f16(*reinterpret_cast<const uint16_t *>(q + 208));
		const float sc0 = (float)(int8_t)q[192 + 8 * hh + 2 * kq];
		const float sc1 = (float)(int8_t)q[192 + 8 * hh + 2 * kq + 1];
		const float *x = xs + 33 * g;
		float s0[NV], s1[NV];
#pragma unroll
		for (int v = 0; v < NV; v++)
			s0[v] = s1[v] = 0.f;
#pragma unroll
		for (int i = 0; i < 8; i++) {
			uint32_t c = ((ld32_2(ql + 4 * i) >> sh1) & 0x0F0F0F0Fu) |
				     (((ld32_2(qh + 4 * i) >> sh2) & 0x03030303u) << 4);
			c = __vsub4(c, 0x20202020u); /* codes 0..63 -> -32..31 */
#pragma unroll
			for (int j = 0; j < 4; j++)
#pragma unroll
				for (int v = 0; v < NV; v++) {
					if (i < 4)
						s0[v] = __fmaf_rn(i8(c, j), x[v * XS + 4 * i + j], s0[v]);
					else
						s1[v] = __fmaf_rn(i8(c, j), x[v * XS + 4 * i + j], s1[v]);
				}
		}
#pragma unroll
		for (int v = 0; v < NV; v++)
			acc[v] = __fmaf_rn(d, __fmaf_rn(sc1, s1[v], __fmul_rn(sc0, s0[v])), acc[v]);
	} else { /* BF16: values 64j + 2*lane and +1 */
		const uint16_t *h = reinterpret_cast<const uint16_t *>(p);
#pragma unroll 4
		for (int j = 0; j < KC / 64; j++) {
			const int c = 64 * j + 2 * lane;
			if (c >= kc)
				break;
			const float w0 = bf16(h[c]);
			const float w1 = c + 1 < kc ? bf16(h[c + 1]) : 0.f;
			const int xc = xpad(c);
#pragma unroll
			for (int v = 0; v < NV; v++)
				acc[v] = __fmaf_rn(w1, xs[v * XS + xc + 1], __fmaf_rn(w0, xs[v * XS + xc], acc[v]));
		}
	}
}

/* Shared memory of one gemv block: NV padded x vectors, then a staging
 * buffer per warp per matrix. */
template <int TYPE, int NV, int NM> struct gemv_smem {
	enum { X = NV * XS * 4, STAGE = stage_bytes<TYPE>::N, BYTES = X + GEMV_WARPS * NM * STAGE };
};

/* One gemv block: warp w computes row `row` (skipped when row < 0, though it
 * still joins every barrier) of NM matrices (w[m] points at that row) against
 * the NV vectors xsrc[v] (NULL: zeros), over k values.  Returns the warp's
 * sums, complete in every lane. */
template <int TYPE, int NV, int NM>
__device__ __forceinline__ void gemv_block(uint8_t *smem, const uint8_t *const (&w)[NM], int row,
					   int k, const float *const *xsrc, float (&acc)[NM][NV])
{
	float *xs = reinterpret_cast<float *>(smem);
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	uint8_t *stg = smem + gemv_smem<TYPE, NV, NM>::X + warp * NM * gemv_smem<TYPE, NV, NM>::STAGE;
#pragma unroll
	for (int m = 0; m < NM; m++)
#pragma unroll
		for (int v = 0; v < NV; v++)
			acc[m][v] = 0.f;
	for (int k0 = 0; k0 < k; k0 += KC) {
		const int kc = k - k0 < KC ? k - k0 : KC;
		__syncthreads(); /* the previous chunk's x is no longer read */
		for (int i = threadIdx.x; i < NV * KC; i += blockDim.x) {
			const int v = i / KC, c = i % KC;
			const float *xv = xsrc[v];
			xs[v * XS + xpad(c)] = xv && c < kc ? xv[k0 + c] : 0.f;
		}
		__syncthreads();
		if (row < 0)
			continue;
		const uint8_t *p[NM];
#pragma unroll
		for (int m = 0; m < NM; m++)
			p[m] = stage<chunk_bytes<TYPE>::N>(stg + m * gemv_smem<TYPE, NV, NM>::STAGE,
							   w[m] + row_bytes(TYPE, k0),
							   (int)row_bytes(TYPE, kc), lane);
		__syncwarp();
#pragma unroll
		for (int m = 0; m < NM; m++)
			chunk_dot<TYPE, NV>(p[m], kc, xs, lane, acc[m]);
		__syncwarp(); /* the staging buffer is rewritten next chunk */
	}
#pragma unroll
	for (int m = 0; m < NM; m++)
#pragma unroll
		for (int v = 0; v < NV; v++)
#pragma unroll
			for (int o = 16; o; o >>= 1)
				acc[m][v] = __fadd_rn(acc[m][v], __shfl_xor_sync(0xffffffffu, acc[m][v], o));
}

/* ---------------- the gemm core ---------------- */

constexpr int TN = 64, TT = 64, TK = 32, GEMM_THREADS = 256;

/* Dequantize values [k0, k0+32) of rows n0..n0+63 into ws[64][33] (rows past
 * n are zeros).  Thread t does row t/4, values 8*(t%4)..+7, with products
 * formed as x4_dequant forms them. */
template <int TYPE>
__device__ __forceinline__ void dequant_tile(float *ws, const uint8_t *w, int n, int k, int n0, int k0)
{
	const int r = threadIdx.x >> 2, q = threadIdx.x & 3;
	float *o = ws + r * (TK + 1) + 8 * q;
	if (n0 + r >= n) {
#pragma unroll
		for (int j = 0; j < 8; j++)
			o[j] = 0.f;
		return;
	}
	const uint8_t *row = w + (size_t)(n0 + r) * row_bytes(TYPE, k);
	if constexpr (TYPE == X4_T_IQ4_NL) {
		const uint8_t *b = row + (size_t)(k0 / 32) * 18;
		const float d = f16(*reinterpret_cast<const uint16_t *>(b));
		const uint8_t *qs = b + 2 + 8 * (q & 1);
#pragma unroll
		for (int i = 0; i < 2; i++) {
			const uint32_t c = iq4_lookup4(nibbles4(ld32_2(qs + 4 * i), q >> 1));
#pragma unroll
			for (int j = 0; j < 4; j++)
				o[4 * i + j] = d * i8(c, j);
		}
	} else if constexpr (TYPE == X4_T_Q6_K) {
		const uint8_t *b = row + (size_t)(k0 / 256) * 210;
		const int e0 = k0 % 256 + 8 * q, hh = e0 >> 7, kq = (e0 >> 5) & 3, l0 = e0 & 31;
		const uint8_t *ql = b + 64 * hh + 32 * (kq & 1) + l0, *qh = b + 128 + 32 * hh + l0;
		const float ds = f16(*reinterpret_cast<const uint16_t *>(b + 208)) *
				 (float)(int8_t)b[192 + 8 * hh + 2 * kq + (l0 >> 4)];
#pragma unroll
		for (int i = 0; i < 2; i++) {
			uint32_t c = ((ld32_2(ql + 4 * i) >> (4 * (kq >> 1))) & 0x0F0F0F0Fu) |
				     (((ld32_2(qh + 4 * i) >> (2 * kq)) & 0x03030303u) << 4);
			c = __vsub4(c, 0x20202020u);
#pragma unroll
			for (int j = 0; j < 4; j++)
				o[4 * i + j] = ds * i8(c, j);
		}
	} else {
		const uint16_t *h = reinterpret_cast<const uint16_t *>(row);
#pragma unroll
		for (int j = 0; j < 8; j++) {
			const int c = k0 + 8 * q + j;
			o[j] = c < k ? bf16(h[c]) : 0.f;
		}
	}
}

template <int NM> struct gemm_smem {
	enum { TILE = TN * (TK + 1), BYTES = (NM + 1) * TILE * 4 + TT * 8 };
};

/* One gemm block: rows n0..n0+63 of NM matrices against the tokens
 * xrow[0..nt) (each a row of k fp32; nt <= 64).  Thread (tx, ty) = (t%16,
 * t/16) ends with acc[m][i][j] for row n0 + tx + 16i and token ty + 16j. */
template <int TYPE, int NM>
__device__ __forceinline__ void gemm_block(uint8_t *smem, const uint8_t *const (&w)[NM], int n, int k,
					   int n0, const float *const *xrow, int nt,
					   float (&acc)[NM][4][4])
{
	float *ws = reinterpret_cast<float *>(smem);
	float *xs = ws + NM * gemm_smem<NM>::TILE;
	const int tx = threadIdx.x & 15, ty = threadIdx.x >> 4;
#pragma unroll
	for (int m = 0; m < NM; m++)
#pragma unroll
		for (int i = 0; i < 4; i++)
#pragma unroll
			for (int j = 0; j < 4; j++)
				acc[m][i][j] = 0.f;
	for (int k0 = 0; k0 < k; k0 += TK) {
		__syncthreads(); /* the previous slice is no longer read */
#pragma unroll
		for (int m = 0; m < NM; m++)
			dequant_tile<TYPE>(ws + m * gemm_smem<NM>::TILE, w[m], n, k, n0, k0);
		for (int i = threadIdx.x; i < TT * TK; i += GEMM_THREADS) {
			const int t = i / TK, c = i % TK;
			xs[t * (TK + 1) + c] = t < nt && k0 + c < k ? xrow[t][k0 + c] : 0.f;
		}
		__syncthreads();
#pragma unroll 8
		for (int c = 0; c < TK; c++) {
			float b[4];
#pragma unroll
			for (int j = 0; j < 4; j++)
				b[j] = xs[(ty + 16 * j) * (TK + 1) + c];
#pragma unroll
			for (int m = 0; m < NM; m++)
#pragma unroll
				for (int i = 0; i < 4; i++) {
					const float a = ws[m * gemm_smem<NM>::TILE + (tx + 16 * i) * (TK + 1) + c];
#pragma unroll
					for (int j = 0; j < 4; j++)
						acc[m][i][j] = __fmaf_rn(a, b[j], acc[m][i][j]);
				}
		}
	}
}

__device__ __forceinline__ float silu(float g) { return g / (1.f + expf(-g)); }

/* Host: the checks every product entry point makes on a weight matrix. */
static inline int check_matrix(const char *op, int type, const void *w, int n, int k, x4_err *e)
{
	if (type != X4_T_IQ4_NL && type != X4_T_Q6_K && type != X4_T_BF16)
		return x4_err_set(e, X4_EINVAL, "%s: weight type %s is not IQ4_NL, Q6_K or BF16",
				  op, x4_type_name(type));
	int be = x4_type_block_elems(type);
	if (n < 0 || k <= 0 || k % be)
		return x4_err_set(e, X4_EINVAL, "%s: %d x %d %s: columns must be a positive multiple of %d",
				  op, n, k, x4_type_name(type), be);
	if (!w || ((uintptr_t)w & 1))
		return x4_err_set(e, X4_EINVAL, "%s: weights %p are NULL or not 2-byte aligned", op, w);
	return 0;
}

} /* namespace x4d_317 */


/* ---- the gemv and the decode experts of 317feb9 (gemv_quant.cu, moe_experts.cu) ---- */
namespace x4d_317 {

template <int TYPE>
__global__ void __launch_bounds__(GEMV_WARPS * 32)
gemv_kernel(const uint8_t *__restrict__ w, int n, int k, const float *__restrict__ x,
	    float *__restrict__ y)
{
	__shared__ __align__(16) uint8_t smem[gemv_smem<TYPE, 1, 1>::BYTES];
	__shared__ const float *xsrc[1];
	const int row = blockIdx.x * GEMV_WARPS + (threadIdx.x >> 5);
	const bool ok = row < n;
	if (threadIdx.x == 0)
		xsrc[0] = x; /* read after gemv_block's first barrier */
	const uint8_t *const wr[1] = { w + (size_t)(ok ? row : 0) * row_bytes(TYPE, k) };
	float acc[1][1];
	gemv_block<TYPE, 1, 1>(smem, wr, ok ? row : -1, k, xsrc, acc);
	if (ok && (threadIdx.x & 31) == 0)
		y[row] = acc[0][0];
}

static inline void gemv(int type, const void *w, int n, int k, const float *x, float *y,
			cudaStream_t s)
{
	dim3 grid((unsigned)((n + GEMV_WARPS - 1) / GEMV_WARPS)), block(GEMV_WARPS * 32);
	const uint8_t *wb = static_cast<const uint8_t *>(w);
	if (type == X4_T_IQ4_NL)
		gemv_kernel<X4_T_IQ4_NL><<<grid, block, 0, s>>>(wb, n, k, x, y);
	else if (type == X4_T_Q6_K)
		gemv_kernel<X4_T_Q6_K><<<grid, block, 0, s>>>(wb, n, k, x, y);
	else
		gemv_kernel<X4_T_BF16><<<grid, block, 0, s>>>(wb, n, k, x, y);
}

#define T_EXP X4_T_IQ4_NL
#define SMALL_NV 4
#define MAX_K 8

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

/* ---- decode shape: gemv core ---- */

template <int NV>
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
		gu_gemv<1>(smem, xsrc, gate + at, up + at, ok ? row : -1, d, f, start, cnt, h);
	else
		gu_gemv<SMALL_NV>(smem, xsrc, gate + at, up + at, ok ? row : -1, d, f, start, cnt, h);
}

template <int NV>
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
		down_gemv<1>(smem, xsrc, w, ok ? row : -1, d, f, r.route + start, cnt, out);
	else
		down_gemv<SMALL_NV>(smem, xsrc, w, ok ? row : -1, d, f, r.route + start, cnt, out);
}



/* The decode-shape experts (tiles of at most 4 routes) as 317feb9 launched them. */
static inline void moe_experts(const x4k_moe_routes *r, const float *x, int d, int f,
			       const void *gate, const void *up, const void *down, float *h, float *o,
			       cudaStream_t s)
{
	const unsigned tiles = (unsigned)r->max_tiles;
	moe_gu_gemv<<<dim3(tiles, (f + GEMV_WARPS - 1) / GEMV_WARPS), GEMV_WARPS * 32, 0, s>>>(
		*r, x, d, f, static_cast<const uint8_t *>(gate), static_cast<const uint8_t *>(up), h);
	moe_down_gemv<<<dim3(tiles, (d + GEMV_WARPS - 1) / GEMV_WARPS), GEMV_WARPS * 32, 0, s>>>(
		*r, d, f, static_cast<const uint8_t *>(down), h, o);
}

} /* namespace x4d_317 */

#endif
