/*
 * quant_dev.cuh - device code shared by the quantized products (gemv_quant.cu,
 * gemm_quant.cu) and the grouped MoE experts (moe_experts.cu): block decoding
 * of IQ4_NL, Q6_K, Q8_0 and BF16 in the product cores' lane layouts (the
 * formats' geometry and codebook are lib/blockfmt.h's; docs/gguf.md 3), and
 * the two product cores.
 *
 *   gemv core: a warp per weight row, the row streamed through shared memory
 *   in chunks of KC values with 16-byte loads (an 18- or 210-byte block is
 *   only 2-byte aligned, so the bytes are staged and decoded from shared
 *   memory), against NV input vectors held in shared memory.
 *   row-staged gemv core: the gemv core's sums for one input vector, with
 *   all of a warp's rows loaded into registers at once.
 *   gemm core: a 64-row x 64-token tile; each 32-wide slice of the weight is
 *   dequantized once into shared memory and reused by all 64 tokens.
 *
 * All sums are fp32 and run in a fixed order (no atomics), written with
 * explicit _rn intrinsics so that no instantiation (one input vector or four)
 * contracts them differently: a route's result is the same bits whichever
 * tile it lands in.
 */
#ifndef X4_QUANT_DEV_CUH
#define X4_QUANT_DEV_CUH

#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <stdint.h>

#include "x4.h"
#include "blockfmt.h"
#include "core_dev.cuh"
#include "pdl.cuh"

namespace x4d {

/* ---------------- formats ---------------- */

/* A type's values and bytes a block, from lib/blockfmt.h's table. */
template <int TYPE> struct fmt {
	enum { BE = x4b_block_elems(TYPE), BB = x4b_block_bytes(TYPE) };
	static_assert(BE > 0, "a block format of lib/blockfmt.h");
};

__host__ __device__ inline size_t row_bytes(int type, int k)
{
	return (size_t)x4b_row_bytes(type, (uint64_t)k);
}

using x4c::bf16; /* the widenings and the warp sum are core_dev.cuh's */
using x4c::f16;
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
	const uint32_t t0 = (uint32_t)X4B_IQ4NL_LO, t1 = (uint32_t)(X4B_IQ4NL_LO >> 32); /* codes 0..7 */
	const uint32_t t2 = (uint32_t)X4B_IQ4NL_HI, t3 = (uint32_t)(X4B_IQ4NL_HI >> 32); /* 8..15 */
	uint32_t lo = __byte_perm(t0, t1, q), hi = __byte_perm(t2, t3, q);
	return __byte_perm(lo, hi, 0x3210u | ((q & 0x8888u) >> 1));
}

/* The codebook + 128 as bytes (codes 0..3, 4..7, 8..11, 12..15) and
 * 0x4b000000, held in registers: opaque copies (or-ed with a zero the
 * compiler cannot see through), since a PRMT with two constant operands
 * costs a register move for one of them at every use. */
struct iq4_consts {
	uint32_t t0, t1, t2, t3, e;
};

__device__ __forceinline__ iq4_consts iq4_consts_of(uint32_t zero)
{
	constexpr uint64_t B = 0x8080808080808080ull; /* + 128 on every byte */
	return { (uint32_t)(X4B_IQ4NL_LO ^ B) | zero, (uint32_t)((X4B_IQ4NL_LO ^ B) >> 32) | zero,
		 (uint32_t)(X4B_IQ4NL_HI ^ B) | zero, (uint32_t)((X4B_IQ4NL_HI ^ B) >> 32) | zero,
		 0x4b000000u | zero };
}

/* Four codes (4-bit fields 0..3 of q) -> their codebook values + 128 as bytes. */
__device__ __forceinline__ uint32_t iq4_lookup4_biased(uint32_t q, const iq4_consts &k)
{
	uint32_t lo = __byte_perm(k.t0, k.t1, q), hi = __byte_perm(k.t2, k.t3, q);
	return __byte_perm(lo, hi, 0x3210u | ((q & 0x8888u) >> 1));
}

/* Byte j of w (a code + 128) as the float value of the code, exactly,
 * without I2F (a quarter-rate conversion: 16 a clock an SM caps IQ4_NL near
 * 2.3 TB/s on the H200): PRMT puts the byte under the exponent of 2^23 and
 * one FADD takes 2^23 + 128 off.  e is 0x4b000000 (iq4_consts). */
__device__ __forceinline__ float biased_val(uint32_t w, uint32_t e, int j)
{
	return __fadd_rn(__uint_as_float(__byte_perm(w, e, 0x7540u | j)), -8388736.0f);
}

template <int J> __device__ __forceinline__ float iq4_val(uint32_t w, uint32_t e) { return biased_val(w, e, J); }

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

/* The 32-value blocks of IQ4_NL and Q8_0 (lane b: block b of the chunk) for
 * NM staged rows at once: acc[m][v] += (values [0, kc) of p[m]) . xs[v].
 * Each x value is read once for the NM rows, and every code becomes its
 * float by biased_val (the IQ4_NL lookup yields code + 128; a Q8_0 byte
 * xor 0x80 is code + 128), exactly as a conversion would.  Per row the
 * sum runs in value order on the codes, then is scaled once: the same
 * operations, in the same order, whatever NM is. */
template <int TYPE, int NV, int NM>
__device__ __forceinline__ void chunk_dot_blocks(const uint8_t *const (&p)[NM], int kc, const float *xs,
						 int lane, float (&acc)[NM][NV])
{
	constexpr bool IQ = TYPE == X4_T_IQ4_NL;
	constexpr int BB = IQ ? 18 : 34, NW = IQ ? 4 : 8; /* block bytes; code words */
	const int b = lane; /* one 32-value block a lane */
	if (32 * b >= kc)
		return;
	const iq4_consts kq = iq4_consts_of(0u);
	const float *x = xs + 33 * b;
	float s[NM][NV];
#pragma unroll
	for (int m = 0; m < NM; m++)
#pragma unroll
		for (int v = 0; v < NV; v++)
			s[m][v] = 0.f;
#pragma unroll
	for (int i = 0; i < NW; i++) {
		uint32_t lo[NM], hi[NM];
#pragma unroll
		for (int m = 0; m < NM; m++) {
			const uint32_t w = ld32_2(p[m] + BB * b + 2 + 4 * i);
			if (IQ) {
				lo[m] = iq4_lookup4_biased(nibbles4(w, 0), kq);
				hi[m] = iq4_lookup4_biased(nibbles4(w, 1), kq);
			} else {
				lo[m] = w ^ 0x80808080u;
				hi[m] = 0u;
			}
		}
#pragma unroll
		for (int j = 0; j < 4; j++)
#pragma unroll
			for (int v = 0; v < NV; v++) {
				const float xl = x[v * XS + 4 * i + j];
				const float xh = IQ ? x[v * XS + 16 + 4 * i + j] : 0.f;
#pragma unroll
				for (int m = 0; m < NM; m++) {
					s[m][v] = __fmaf_rn(biased_val(lo[m], kq.e, j), xl, s[m][v]);
					if (IQ)
						s[m][v] = __fmaf_rn(biased_val(hi[m], kq.e, j), xh, s[m][v]);
				}
			}
	}
#pragma unroll
	for (int m = 0; m < NM; m++) {
		const float d = f16(*reinterpret_cast<const uint16_t *>(p[m] + BB * b));
#pragma unroll
		for (int v = 0; v < NV; v++)
			acc[m][v] = __fmaf_rn(d, s[m][v], acc[m][v]);
	}
}

/* A Q6_K group's four codes (0..63: the value + 32) as bytes, from its ql
 * word shifted to its nibbles (lo4) and its qh word shifted to its two bits
 * (hi2); bits above those the masks keep may be anything. */
__device__ __forceinline__ uint32_t q6k_codes(uint32_t lo4, uint32_t hi2)
{
	return (lo4 & 0x0F0F0F0Fu) | ((hi2 & 0x03030303u) << 4);
}

/* Byte j of w (a Q6_K code) as the float value of the code, exactly: as
 * biased_val, with the code's own bias of 32 taken off in the FADD instead
 * of a +96 on the bytes before it (the same floats, one add fewer). */
__device__ __forceinline__ float q6k_val(uint32_t w, uint32_t e, int j)
{
	return __fadd_rn(__uint_as_float(__byte_perm(w, e, 0x7540u | j)), -8388640.0f);
}

/* A Q6_K group's sum into acc: its two 16-value halves' code sums s0, s1
 * under their scales sc0, sc1, then the block's d. */
__device__ __forceinline__ float q6k_scaled(float d, float sc0, float sc1, float s0, float s1, float acc)
{
	return __fmaf_rn(d, __fmaf_rn(sc1, s1, __fmul_rn(sc0, s0)), acc);
}

/* acc[v] += (values [0, kc) of the staged chunk at p) . xs[v].  The sum of a
 * block is formed on the integer codes and scaled once. */
template <int TYPE, int NV>
__device__ __forceinline__ void chunk_dot(const uint8_t *p, int kc, const float *xs, int lane,
					  float (&acc)[NV])
{
	if constexpr (TYPE == X4_T_IQ4_NL || TYPE == X4_T_Q8_0) {
		const uint8_t *const pp[1] = { p };
		float a[1][NV];
#pragma unroll
		for (int v = 0; v < NV; v++)
			a[0][v] = acc[v];
		chunk_dot_blocks<TYPE, NV, 1>(pp, kc, xs, lane, a);
#pragma unroll
		for (int v = 0; v < NV; v++)
			acc[v] = a[0][v];
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
		const iq4_consts kq6 = iq4_consts_of(0u);
		float s0[NV], s1[NV];
#pragma unroll
		for (int v = 0; v < NV; v++)
			s0[v] = s1[v] = 0.f;
#pragma unroll
		for (int i = 0; i < 8; i++) {
			uint32_t c = q6k_codes(ld32_2(ql + 4 * i) >> sh1, ld32_2(qh + 4 * i) >> sh2);
			c += 0x60606060u; /* codes 0..63 (value + 32) -> value + 128, no carry */
#pragma unroll
			for (int j = 0; j < 4; j++)
#pragma unroll
				for (int v = 0; v < NV; v++) {
					const float cv = biased_val(c, kq6.e, j);
					if (i < 4)
						s0[v] = __fmaf_rn(cv, x[v * XS + 4 * i + j], s0[v]);
					else
						s1[v] = __fmaf_rn(cv, x[v * XS + 4 * i + j], s1[v]);
				}
		}
#pragma unroll
		for (int v = 0; v < NV; v++)
			acc[v] = q6k_scaled(d, sc0, sc1, s0[v], s1[v], acc[v]);
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

/* chunk_dot for NM staged rows of the same x: the block formats read each
 * x value once for every row (chunk_dot_blocks); the others row by row. */
template <int TYPE, int NV, int NM>
__device__ __forceinline__ void chunk_dot_m(const uint8_t *const (&p)[NM], int kc, const float *xs,
					    int lane, float (&acc)[NM][NV])
{
	if constexpr (TYPE == X4_T_IQ4_NL || TYPE == X4_T_Q8_0) {
		chunk_dot_blocks<TYPE, NV, NM>(p, kc, xs, lane, acc);
	} else {
#pragma unroll
		for (int m = 0; m < NM; m++)
			chunk_dot<TYPE, NV>(p[m], kc, xs, lane, acc[m]);
	}
}

/* chunk_dot's Q6_K sums for NM staged rows of one x: acc[m] += group g8
 * (0..7) of the block at q[m] (2-byte aligned, in shared memory) against
 * x[0..31], formed exactly as chunk_dot forms a lane's group.  Two
 * differences in the reading, none in the sums: each x value is read once
 * for the NM rows, and a row's ql and qh words are read 4-byte aligned
 * (one load a word, where ld32_2 takes two): a span that starts 2 bytes
 * past a word is read from the word before it, and word i is the funnel
 * shift of aligned words i and i + 1 by 16 bits, the code's own shift
 * (sh1, sh2) added in; what that brings in from word i + 1 lands in the
 * bits q6k_codes masks off.  The words read lie in [q[m] - 2, q[m] + 196):
 * where a block starts 2 past a word, the 2 bytes before it must be in the
 * buffer (a row's first block never does in a row that starts on a word).
 * e: iq4_consts' e, 0x4b000000 held in a register (iq4_consts_of with a
 * zero the compiler cannot see), so that q6k_val's byte selectors are
 * the immediates. */
template <int NM>
__device__ __forceinline__ void q6k_group_rows(const uint8_t *const (&q)[NM], int g8, const float *x,
					       uint32_t e, float (&acc)[NM])
{
	const int hh = g8 >> 2, kq = g8 & 3;
	const uint32_t *ql[NM], *qh[NM];
	int shl[NM], shh[NM];
	uint32_t lo[NM], hi[NM];
	float s0[NM], s1[NM];
#pragma unroll
	for (int m = 0; m < NM; m++) {
		const int o = (int)((uintptr_t)q[m] & 2); /* the spans' offset past a word */
		ql[m] = reinterpret_cast<const uint32_t *>(q[m] - o + 64 * hh + 32 * (kq & 1));
		qh[m] = reinterpret_cast<const uint32_t *>(q[m] - o + 128 + 32 * hh);
		shl[m] = 8 * o + 4 * (kq >> 1);
		shh[m] = 8 * o + 2 * kq;
		lo[m] = ql[m][0], hi[m] = qh[m][0];
		s0[m] = s1[m] = 0.f;
	}
#pragma unroll
	for (int i = 0; i < 8; i++) {
		uint32_t c[NM];
#pragma unroll
		for (int m = 0; m < NM; m++) {
			const uint32_t l2 = ql[m][i + 1], h2 = qh[m][i + 1];
			c[m] = q6k_codes(__funnelshift_r(lo[m], l2, shl[m]), __funnelshift_r(hi[m], h2, shh[m]));
			lo[m] = l2, hi[m] = h2;
		}
#pragma unroll
		for (int j = 0; j < 4; j++) {
			const float xv = x[4 * i + j];
#pragma unroll
			for (int m = 0; m < NM; m++) {
				const float cv = q6k_val(c[m], e, j);
				if (i < 4)
					s0[m] = __fmaf_rn(cv, xv, s0[m]);
				else
					s1[m] = __fmaf_rn(cv, xv, s1[m]);
			}
		}
	}
#pragma unroll
	for (int m = 0; m < NM; m++) {
		const uint32_t sc = *reinterpret_cast<const uint16_t *>(q[m] + 192 + 8 * hh + 2 * kq);
		const float d = f16(*reinterpret_cast<const uint16_t *>(q[m] + 208));
		acc[m] = q6k_scaled(d, (float)(int8_t)(sc & 0xffu), (float)(int8_t)(sc >> 8), s0[m], s1[m], acc[m]);
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
		chunk_dot_m<TYPE, NV, NM>(p, kc, xs, lane, acc);
		__syncwarp(); /* the staging buffer is rewritten next chunk */
	}
#pragma unroll
	for (int m = 0; m < NM; m++)
#pragma unroll
		for (int v = 0; v < NV; v++)
			acc[m][v] = x4c::warp_sum(acc[m][v]);
}

/* x whole in shared memory, padded as gemv_block lays it chunk by chunk
 * (value c at xpad(c)): k <= XV * 4 * GEMV_WARPS * 32 values, 16-byte
 * aligned, k % 4 == 0, a float4 a thread a round.  Loads and stores apart
 * (xwhole_load, xwhole_store), so that a caller issues its other loads
 * between and ors into every store a +0 made from all of them
 * (xwhole_zero for x's part): the stores then wait for every load, and
 * the compiler issues them all first instead of one dependent round per
 * use. */
template <int XV>
__device__ __forceinline__ void xwhole_load(float4 (&xv)[XV], const float *__restrict__ x, int k)
{
	const float4 *x4 = reinterpret_cast<const float4 *>(x);
#pragma unroll
	for (int j = 0; j < XV; j++) {
		const int i = threadIdx.x + j * GEMV_WARPS * 32;
		xv[j] = __ldg(x4 + (i < k / 4 ? i : 0));
	}
}

template <int XV>
__device__ __forceinline__ float xwhole_zero(const float4 (&xv)[XV], float z)
{
#pragma unroll
	for (int j = 0; j < XV; j++)
		z = __fmaf_rn(__uint_as_float(__float_as_uint(xv[j].x) & 0x007fffffu), 0.f, z);
	return z;
}

template <int XV>
__device__ __forceinline__ void xwhole_store(float *xs, const float4 (&xv)[XV], int k, uint32_t zi)
{
#pragma unroll
	for (int j = 0; j < XV; j++) {
		const int i = threadIdx.x + j * GEMV_WARPS * 32;
		if (i < k / 4) {
			xs[xpad(4 * i)] = __uint_as_float(__float_as_uint(xv[j].x) | zi);
			xs[xpad(4 * i + 1)] = __uint_as_float(__float_as_uint(xv[j].y) | zi);
			xs[xpad(4 * i + 2)] = __uint_as_float(__float_as_uint(xv[j].z) | zi);
			xs[xpad(4 * i + 3)] = __uint_as_float(__float_as_uint(xv[j].w) | zi);
		}
	}
}

/* ---------------- the row-staged gemv core ----------------
 * gemv_block against one input vector with all of a warp's weight bytes in
 * flight at once.  gemv_block keeps one chunk of a warp's rows in flight,
 * behind the block's x staging and two barriers a chunk: latency, not
 * bandwidth (the batch-1 experts' gate/up so ran at ~630 GB/s on the
 * H200, a seventh of what the card streams).  Here a
 * warp first issues the 16-byte loads of all its rows into registers: NS
 * spans of `rows` adjacent rows, lane L holding lines L, L + 32, ... of
 * each (IT of them); then the block stages x for the whole k once, behind
 * one barrier, padded as gemv_block lays it chunk by chunk; then the warp
 * moves its rows from registers into its staging buffer a chunk at a time
 * and runs chunk_dot on each chunk as gemv_block does: the same bytes and
 * x, the same sums in the same order, so the bits of gemv_block<TYPE, 1,
 * NS> row for row.  Staging a chunk at a time (not whole rows) keeps the
 * shared memory gemv_block's for NV vectors (x whole for k <= NV * KC, a
 * chunk a matrix a warp), so a kernel that runs both cores, for tiles of one
 * route and of several, needs no more than the chunked core alone.
 *
 * Rows must start 16-byte aligned with row_bytes % 16 == 0 (k % 256 == 0
 * for IQ4_NL and Q8_0): every chunk of a row is then whole lines, and a
 * row's lines follow the previous row's in a span.  rows_held says whether
 * and how many rows a span takes. */

/* The rows (at most `most`) of k values at w that a span of gemv_rows<TYPE,
 * NV, NS, IT> holds; 0 where it takes none (the chunked core's shape).
 * Host: a launch picks the core and sizes its grid by it. */
template <int TYPE, int NV, int IT>
static inline int rows_held(const void *w, int k, int most)
{
	const size_t rb = row_bytes(TYPE, k);
	if (rb == 0 || rb % 16 || ((uintptr_t)w & 15) || k > NV * KC)
		return 0;
	const size_t n = (size_t)IT * 32 * 16 / rb;
	return n < (size_t)most ? (int)n : most;
}

/* The warp's rows r = 0..rows-1 of the spans w[s] (rows_held of them at
 * most; rows 0: the warp only joins the barrier) against x (k values,
 * global, 16-byte aligned); emit(r, sum) with sum[s] row r of span s,
 * complete in every lane.  A block of GEMV_WARPS warps, all calling.  The
 * x stores wait for every load (xwhole_zero), the weights' included. */
template <int TYPE, int NV, int NS, int IT, class EMIT>
__device__ __forceinline__ void gemv_rows(uint8_t *smem, const uint8_t *const (&w)[NS], int rows,
					  int k, const float *__restrict__ x, EMIT &&emit)
{
	static_assert(chunk_bytes<TYPE>::N % 16 == 0, "a chunk of whole 16-byte lines");
	using S = gemv_smem<TYPE, NV, NS>;
	float *xs = reinterpret_cast<float *>(smem);
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	const int rb = (int)row_bytes(TYPE, k), lines = rows * rb / 16;
	uint4 v[NS][IT];
#pragma unroll
	for (int s = 0; s < NS; s++)
#pragma unroll
		for (int i = 0; i < IT; i++)
			if (lane + 32 * i < lines)
				v[s][i] = __ldcs(reinterpret_cast<const uint4 *>(w[s]) + lane + 32 * i);
	constexpr int XV = NV * KC / 4 / (GEMV_WARPS * 32);
	float4 xv[XV];
	xwhole_load<XV>(xv, x, k);
	float z = xwhole_zero<XV>(xv, 0.f);
#pragma unroll
	for (int s = 0; s < NS; s++)
#pragma unroll
		for (int i = 0; i < IT; i++)
			z = __fmaf_rn(__uint_as_float(v[s][i].x & 0x007fffffu), 0.f, z);
	xwhole_store<XV>(xs, xv, k, __float_as_uint(z));
	__syncthreads();
	uint8_t *stg = smem + S::X + warp * NS * S::STAGE;
	for (int r = 0; r < rows; r++) {
		float acc[NS][1];
#pragma unroll
		for (int s = 0; s < NS; s++)
			acc[s][0] = 0.f;
		for (int k0 = 0; k0 < k; k0 += KC) {
			const int kc = k - k0 < KC ? k - k0 : KC;
			const int l0 = (r * rb + (int)row_bytes(TYPE, k0)) >> 4;
			const int nl = (int)row_bytes(TYPE, kc) >> 4;
#pragma unroll
			for (int s = 0; s < NS; s++)
#pragma unroll
				for (int i = 0; i < IT; i++) {
					const int l = lane + 32 * i - l0;
					if (l >= 0 && l < nl)
						reinterpret_cast<uint4 *>(stg + s * S::STAGE)[l] = v[s][i];
				}
			__syncwarp();
			const uint8_t *ps[NS];
#pragma unroll
			for (int s = 0; s < NS; s++)
				ps[s] = stg + s * S::STAGE;
			chunk_dot_m<TYPE, 1, NS>(ps, kc, xs + xpad(k0), lane, acc);
			__syncwarp(); /* the staging buffer is rewritten next chunk */
		}
		float sum[NS];
#pragma unroll
		for (int s = 0; s < NS; s++)
			sum[s] = x4c::warp_sum(acc[s][0]);
		emit(r, sum);
	}
}

/* ---------------- the IQ4_NL register core ----------------
 * For rows of k % 256 == 0 values at 16-byte aligned addresses (every
 * IQ4_NL matrix of the model): 8 blocks (256 values, 144 bytes) start at a
 * 16-byte boundary, so a lane loads its 8-block group with nine 16-byte
 * loads straight into registers (ld.global.nc: the lanes of a warp are 144
 * bytes apart, and the halves of a sector one load leaves the next one
 * finds in L1) and decodes it with compile-time byte offsets.  A code
 * becomes a float without I2F (a quarter-rate conversion: 16 a clock an SM
 * caps IQ4_NL near 2.3 TB/s on the H200): the codebook lookup yields the
 * code + 128 as a byte, PRMT puts it under the exponent of 2^23 and one
 * FADD takes 2^23 + 128 off, exactly.  About 4.4 instructions a weight
 * (lookup 1.4, PRMT, FADD, FFMA): the issue rate allows ~4 TB/s.  Per block the sum runs as in
 * chunk_dot (value order, then the scale), then block after block. */

constexpr int IQ_THREADS = 128; /* a block: (row set, group) a lane */

/* Bytes [b, b + 4) of the 144-byte group held in W[36] (b even; a
 * constant once the loops are unrolled, so W stays in registers). */
__device__ __forceinline__ uint32_t grp_word(const uint32_t (&W)[36], int b)
{
	return b % 4 == 0 ? W[b / 4] : __byte_perm(W[b / 4], W[b / 4 + 1], 0x5432u);
}

template <int B>
__device__ __forceinline__ float grp_f16(const uint32_t (&W)[36])
{
	const uint32_t w = W[B / 4];
	return f16((uint16_t)(B % 4 == 0 ? w & 0xffffu : w >> 16));
}

/* s = sum of the 32 products of block J of W with x[0..31] (xv: 8 float4),
 * in chunk_dot's order; returns fma(d, s, acc).  The low half of a qs word
 * is already four codes in selector order (byte 0 low, byte 0 high, byte 1
 * low, byte 1 high: values 4i, 16+4i, 4i+1, 16+4i+1), so the lookup takes
 * the word as it is, and its high half shifted, with no nibble packing. */
template <int J>
__device__ __forceinline__ float iq4_block(const uint32_t (&W)[36], const float4 (&xv)[8], float acc,
					   const iq4_consts &k)
{
	float s = 0.f;
#pragma unroll
	for (int i = 0; i < 4; i++) {
		const uint32_t w = grp_word(W, 18 * J + 2 + 4 * i);
		const uint32_t a = iq4_lookup4_biased(w, k), b = iq4_lookup4_biased(w >> 16, k);
		const float4 xl = xv[i], xh = xv[4 + i]; /* values 4i.., 16 + 4i.. */
		s = __fmaf_rn(iq4_val<0>(a, k.e), xl.x, s);
		s = __fmaf_rn(iq4_val<1>(a, k.e), xh.x, s);
		s = __fmaf_rn(iq4_val<2>(a, k.e), xl.y, s);
		s = __fmaf_rn(iq4_val<3>(a, k.e), xh.y, s);
		s = __fmaf_rn(iq4_val<0>(b, k.e), xl.z, s);
		s = __fmaf_rn(iq4_val<1>(b, k.e), xh.z, s);
		s = __fmaf_rn(iq4_val<2>(b, k.e), xl.w, s);
		s = __fmaf_rn(iq4_val<3>(b, k.e), xh.w, s);
	}
	return __fmaf_rn(grp_f16<18 * J>(W), s, acc);
}

template <int J, int NW>
__device__ __forceinline__ void iq4_blocks(const uint32_t (&W)[NW][36], const float4 *__restrict__ xg,
					   float (&acc)[NW], const iq4_consts &k)
{
	if constexpr (J < 8) {
		float4 xv[8];
#pragma unroll
		for (int m = 0; m < 8; m++)
			xv[m] = __ldg(xg + 8 * J + m);
#pragma unroll
		for (int i = 0; i < NW; i++)
			acc[i] = iq4_block<J>(W[i], xv, acc[i], k);
		iq4_blocks<J + 1, NW>(W, xg, acc, k);
	}
}

/* acc[i] += the group's 256 weights of row i (wp[i]: 144 bytes, 16-byte
 * aligned) . xg[0..255] (16-byte aligned), for NW rows sharing x.  WAIT:
 * the weights do not depend on the previous kernel, x does: x4p::wait()
 * between their loads (pdl.cuh). */
template <int NW, bool WAIT = false>
__device__ __forceinline__ void iq4_group_dot(const uint4 *const (&wp)[NW], const float4 *__restrict__ xg,
					      float (&acc)[NW])
{
	uint32_t W[NW][36];
#pragma unroll
	for (int i = 0; i < NW; i++)
#pragma unroll
		for (int q = 0; q < 9; q++) {
			const uint4 v = __ldg(wp[i] + q);
			W[i][4 * q] = v.x, W[i][4 * q + 1] = v.y, W[i][4 * q + 2] = v.z, W[i][4 * q + 3] = v.w;
		}
	if (WAIT) {
		x4p::trigger();
		x4p::wait();
	}
	/* A zero made from a word of every load, or-ed into every word: each
	 * decode then waits for all the loads, so the compiler issues them all
	 * first instead of one dependent round per use (x + 0 as in the BF16
	 * gemv; here the zero is the bits of +0.0f). */
	float z = 0.f;
#pragma unroll
	for (int i = 0; i < NW; i++)
#pragma unroll
		for (int q = 0; q < 9; q++)
			z = __fmaf_rn(__uint_as_float(W[i][4 * q] & 0x007fffffu), 0.f, z);
	const uint32_t zi = __float_as_uint(z);
#pragma unroll
	for (int i = 0; i < NW; i++)
#pragma unroll
		for (int q = 0; q < 36; q++)
			W[i][q] |= zi;
	const iq4_consts k = iq4_consts_of(zi);
	iq4_blocks<0, NW>(W, xg, acc, k);
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
	} else if constexpr (TYPE == X4_T_Q8_0) {
		const uint8_t *b = row + (size_t)(k0 / 32) * 34;
		const float d = f16(*reinterpret_cast<const uint16_t *>(b));
#pragma unroll
		for (int i = 0; i < 2; i++) {
			const uint32_t c = ld32_2(b + 2 + 8 * q + 4 * i);
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
/* The geometry every product entry point checks on a weight matrix, for a
 * type the caller has taken. */
static inline int check_geometry(const char *op, int type, const void *w, int n, int k, x4_err *e)
{
	int be = x4_type_block_elems(type);
	if (n < 0 || k <= 0 || k % be)
		return x4_err_set(e, X4_EINVAL, "%s: %d x %d %s: columns must be a positive multiple of %d",
				  op, n, k, x4_type_name(type), be);
	if (!w || ((uintptr_t)w & 1))
		return x4_err_set(e, X4_EINVAL, "%s: weights %p are NULL or not 2-byte aligned", op, w);
	return 0;
}

/* Host: the checks of the products that take IQ4_NL, Q6_K and BF16. */
static inline int check_matrix(const char *op, int type, const void *w, int n, int k, x4_err *e)
{
	if (type != X4_T_IQ4_NL && type != X4_T_Q6_K && type != X4_T_BF16)
		return x4_err_set(e, X4_EINVAL, "%s: weight type %s is not IQ4_NL, Q6_K or BF16",
				  op, x4_type_name(type));
	return check_geometry(op, type, w, n, k, e);
}

} /* namespace x4d */

#endif
