/*
 * mla_mma_dev.cuh - the tensor-core attention's pieces, one definition each
 * for its two kernels: the decode (mla_mma.cuh, x4k_mla_decode_mma) and the
 * prefill (mla_prefill_mma.cuh, x4k_mla_prefill_mma).  Their arithmetic and
 * its error are docs/numerics.md 1.7.
 *
 * Both take the model's shape alone (kv_lora 512, rope 64: a cache row of
 * 576 fp16; heads in sixteens, x4k_mla_mma_shape) and stage the cache in
 * tiles of 32 rows (1152 bytes a row, padded to 1168 so that ldmatrix's
 * eight row addresses fall in eight different bank groups) by cp.async.
 * Their rows of queries come in m-tiles of 16 (the MMA's M): the decode's
 * block is one m-tile of 16 heads, the prefill's two of (token, head) rows.
 * 8 warps; for the scores warp w takes the k-quarter w & 3 (144 dims, 9
 * k-steps of 16), whose query fragments (hi and lo, 72 registers) it holds
 * for the whole walk; the quarters' partial scores meet in shared memory
 * and are added in a fixed order.
 *
 * Precision: the products must be fp32-accurate.  K and V are exact fp16;
 * q (fp32) is split into two fp16 terms, q*s = hi + lo with s a power of
 * two a row (max|q*s| in [2^14, 2^15): exact to apply and to remove, and
 * clear of fp16's 65504), and S = (hi.K + lo.K) / s: q to 22 bits, the
 * products exact in the f32 accumulators.  Likewise the probabilities (fp32
 * in [0, 1]) for the value product, p * 2^14 = hi + lo.  Every tensor-core
 * chain is short (9 MMAs a partial score, 4 a tile's value product, each
 * from zero): a tile's value product is added to the running accumulators
 * by an fp32 fma, as the fp32 kernel does it, so that the tensor cores'
 * truncated accumulation never runs along a whole span.
 *
 * Everything that issues cp.async, ldmatrix or mma is compiled for sm_80
 * and later only; the kernels' bodies are empty below, and their launchers
 * check the device on the host (mma_device_ready) before launching.
 */
#ifndef X4_MLA_MMA_DEV_CUH
#define X4_MLA_MMA_DEV_CUH

#include <cuda_fp16.h>
#include <stdio.h>

#include <atomic>

#include "mla_attn.cuh"
#include "mma_dev.cuh"

namespace mla_mma {
using namespace x4c;

constexpr int MR = 16;              /* rows of an m-tile: the MMA's M */
constexpr int T = MLA_T;            /* rows a tile (32: the decode spans' granularity) */
constexpr int THREADS = 256;
constexpr int KV = 512, ROPE = 64, CW = KV + ROPE;
constexpr int KSTEPS = CW / 16;     /* 36 k-steps of the score */
constexpr int KQ = 4;               /* k-quarters (warps) of the score */
constexpr int KSQ = KSTEPS / KQ;    /* 9 k-steps a warp */
constexpr int ROWB = CW * 2 + 16;   /* bytes a staged row: 1168 (= 16 mod 128) */
constexpr int TILEB = T * ROWB;     /* 37376 bytes a stage */
constexpr int CHUNKS = CW * 2 / 16; /* 72 16-byte copies a row */
constexpr int CPT = T * CHUNKS / THREADS; /* 9 copies a thread a tile */
constexpr int SCS = 40;             /* floats a partial-score row (32 + 8: float2 stores conflict-free) */
constexpr int PS = 40;              /* halves a probability row (80 bytes: ldmatrix conflict-free) */
constexpr float PSCALE = 16384.f;   /* 2^14: p*2^14 <= 2^14, its hi/lo split clear of fp16 subnormals */
constexpr float PSCALE_INV = 1.f / 16384.f;
static_assert(KSTEPS % KQ == 0 && T * CHUNKS % THREADS == 0, "tile split");
static_assert(T == 32, "a lane a row of the tile in the softmax");
static_assert(KV == 8 * 64, "a warp owns 64 value columns");
static_assert(MR == 16 && KV == 512 && ROPE == 64, "the shape x4k_mla_mma_shape names");

/* ---- fragment layouts (PTX ISA, mma.m16n8k16 .f16 and ldmatrix), lane l,
 * g = l >> 2, t = l & 3:
 *   A 16x16 row-major: reg r holds A[g + 8*(r&1)][2t + 8*(r>>1) + {0,1}]
 *   B 16x8 "col":      reg r holds B[2t + 8r + {0,1}][g]
 *   C 16x8 f32:        reg r holds C[g + 8*(r>>1)][2t + (r&1)]
 *   ldmatrix.x4: lanes 8i..8i+7 give the row addresses of matrix i (8 rows
 *   of 8 halves); register i gets matrix i's [l>>2][2(l&3) + {0,1}], with
 *   .trans its [2(l&3) + {0,1}][l>>2].
 * The row and column (in halves) of the address lane l gives: */
/* A from a row-major [m][k] block (P): regs a0..a3 */
__host__ __device__ constexpr int lda_row(int l) { return l & 15; }
__host__ __device__ constexpr int lda_col(int l) { return (l >> 4) << 3; }
/* B of two n-tiles from [n][k] rows (the keys): {b0, b1} of n-tile 0, then of n-tile 1 */
__host__ __device__ constexpr int ldk_row(int l) { return (l & 7) | ((l >> 4) << 3); }
__host__ __device__ constexpr int ldk_col(int l) { return ((l >> 3) & 1) << 3; }
/* B of two n-tiles from [k][n] rows (the values), .trans: the same order */
__host__ __device__ constexpr int ldv_row(int l) { return (l & 7) | (((l >> 3) & 1) << 3); }
__host__ __device__ constexpr int ldv_col(int l) { return (l >> 4) << 3; }
/* A element (reg r, half e) and C element (reg r) of lane l */
__host__ __device__ constexpr int fa_row(int l, int r) { return (l >> 2) + 8 * (r & 1); }
__host__ __device__ constexpr int fa_col(int l, int r, int e) { return 2 * (l & 3) + 8 * (r >> 1) + e; }
__host__ __device__ constexpr int fc_row(int l, int r) { return (l >> 2) + 8 * (r >> 1); }
__host__ __device__ constexpr int fc_col(int l, int r) { return 2 * (l & 3) + (r & 1); }

/* the power of two and the query's scale: mma_dev.cuh's */
using x4m::pow2f;
using x4m::q_scale_exp;

/* The largest of a row's four k-quarter maxima, sqm[kq * stride + r]. */
__device__ __forceinline__ float q_row_max(const float *sqm, int stride, int r)
{
	return fmaxf(fmaxf(sqm[r], sqm[stride + r]), fmaxf(sqm[2 * stride + r], sqm[3 * stride + r]));
}

/* A row's score from its four k-quarter partials d[kq * stride], in one order. */
__device__ __forceinline__ float quarter_sum(const float *d, int stride)
{
	return ((d[0] + d[stride]) + d[2 * stride]) + d[3 * stride];
}

/* One tile's online-softmax step for one row, a lane a key of the tile (s
 * -inf where masked): the running max and sum (the same in every lane)
 * move on, p is the lane's probability against the new max and alpha the
 * accumulators' rescale.  The fp32 kernel's arithmetic (mla_attn.cuh).  A
 * row that has seen no key yet (every s so far -inf) keeps p 0, alpha 0,
 * its max -inf and its sum 0, where exp(-inf - -inf) would be NaN; a row
 * with a finite max computes exactly what it would without the guard.
 * With NK 2 (a decode round of 64 rows) a lane takes keys lane and 32 +
 * lane: one max and one sum for both, the pair's p added before the warp's
 * sum. */
template <int NK>
__device__ __forceinline__ void softmax_step(const float (&s)[NK], float (&p)[NK], float &m_run,
					     float &l_run, float &alpha)
{
	static_assert(NK == 1 || NK == 2, "a lane takes one key of a tile of 32, or two of a round of 64");
	const float mnew = fmaxf(m_run, warp_max(NK == 1 ? s[0] : fmaxf(s[0], s[NK - 1])));
	const float mu = mnew == -INFINITY ? 0.f : mnew;
#pragma unroll
	for (int k = 0; k < NK; k++)
		p[k] = expf(s[k] - mu);
	alpha = expf(m_run - mu);
	l_run = l_run * alpha + warp_sum(NK == 1 ? p[0] : p[0] + p[NK - 1]);
	m_run = mnew;
}

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
/* shared-memory addresses, cp.async, ldmatrix and the fp16 MMA: mma_dev.cuh's */
using x4m::smem_u32;
using x4m::cp_async16;
using x4m::cp_async_commit;
using x4m::cp_async_wait;
using x4m::ldsm_x4;
using x4m::ldsm_x4_t;
using x4m::mma16816;

using x4m::pack_h2;
using x4m::split_h;

/* The copies of cache rows [tb, tb + 32) into the stage at dst (shared
 * address), this thread's CPT of them; rows at or past t1 are zero-filled
 * and read nothing (their scores are masked, their values multiply p = 0,
 * and zeros, unlike a stale stage, cannot make 0 * NaN).  No commit. */
__device__ __forceinline__ void stage_tile(uint32_t dst, const char *cache, int tb, int t1, int tid)
{
#pragma unroll
	for (int j = 0; j < CPT; j++) {
		const int c = tid + j * THREADS, r = c / CHUNKS, ch = c - r * CHUNKS;
		const bool ok = tb + r < t1;
		const char *src = cache + (size_t)(ok ? tb + r : 0) * (CW * 2) + ch * 16;
		cp_async16(dst + r * ROWB + ch * 16, src, ok ? 16 : 0);
	}
}

/* An m-tile's queries for the k-quarter kq, as A fragments in fp32: rows g
 * (q0) and g + 8 (q8) of the m-tile, each a pointer to its row of CW.  And
 * the largest |q| of each of the two rows in this quarter, every lane of a
 * quad (the lanes of one row) holding it. */
__device__ __forceinline__ void q_load(float2 (&qv)[KSQ][4], const float *q0, const float *q8, int kq,
				       int lane)
{
#pragma unroll
	for (int k = 0; k < KSQ; k++)
#pragma unroll
		for (int r = 0; r < 4; r++)
			qv[k][r] = __ldg(reinterpret_cast<const float2 *>((r & 1 ? q8 : q0) + kq * KSQ * 16 +
									   k * 16 + fa_col(lane, r, 0)));
}

__device__ __forceinline__ void q_max(const float2 (&qv)[KSQ][4], float &m0, float &m1)
{
	m0 = 0.f;
	m1 = 0.f;
#pragma unroll
	for (int k = 0; k < KSQ; k++) {
		m0 = fmaxf(m0, fmaxf(fmaxf(fabsf(qv[k][0].x), fabsf(qv[k][0].y)),
				     fmaxf(fabsf(qv[k][2].x), fabsf(qv[k][2].y))));
		m1 = fmaxf(m1, fmaxf(fmaxf(fabsf(qv[k][1].x), fabsf(qv[k][1].y)),
				     fmaxf(fabsf(qv[k][3].x), fabsf(qv[k][3].y))));
	}
	m0 = fmaxf(m0, __shfl_xor_sync(X4C_FULL, m0, 1));
	m1 = fmaxf(m1, __shfl_xor_sync(X4C_FULL, m1, 1));
	m0 = fmaxf(m0, __shfl_xor_sync(X4C_FULL, m0, 2));
	m1 = fmaxf(m1, __shfl_xor_sync(X4C_FULL, m1, 2));
}

/* The fragments scaled (s0 row g, s1 row g + 8: powers of two) and split,
 * hi and lo. */
__device__ __forceinline__ void q_split(const float2 (&qv)[KSQ][4], float s0, float s1,
					uint32_t (&qh)[KSQ][4], uint32_t (&ql)[KSQ][4])
{
#pragma unroll
	for (int k = 0; k < KSQ; k++)
#pragma unroll
		for (int r = 0; r < 4; r++) {
			const float s = r & 1 ? s1 : s0;
			__half xh, xl, yh, yl;
			split_h(qv[k][r].x * s, xh, xl);
			split_h(qv[k][r].y * s, yh, yl);
			qh[k][r] = pack_h2(xh, yh);
			ql[k][r] = pack_h2(xl, yl);
		}
}

/* A k-quarter's partial scores of one m-tile against 16 * NP rows of the
 * staged tile, from zero, hi and lo in separate chains: NP pairs of
 * n-tiles, pair p's keys at kaddr + p * 16 rows (kaddr: this lane's
 * ldmatrix address of the quarter's first k-step). */
template <int NP>
__device__ __forceinline__ void score_quarter(float (&sh)[2 * NP][4], float (&sl)[2 * NP][4],
					      const uint32_t (&qh)[KSQ][4], const uint32_t (&ql)[KSQ][4],
					      uint32_t kaddr)
{
#pragma unroll
	for (int n = 0; n < 2 * NP; n++)
#pragma unroll
		for (int r = 0; r < 4; r++)
			sh[n][r] = sl[n][r] = 0.f;
#pragma unroll
	for (int k = 0; k < KSQ; k++)
#pragma unroll
		for (int p = 0; p < NP; p++) {
			uint32_t b[4];
			ldsm_x4(b, kaddr + p * 16 * ROWB + k * 32);
			mma16816(sh[2 * p], qh[k], b[0], b[1]);
			mma16816(sh[2 * p + 1], qh[k], b[2], b[3]);
			mma16816(sl[2 * p], ql[k], b[0], b[1]);
			mma16816(sl[2 * p + 1], ql[k], b[2], b[3]);
		}
}

/* Those partials into shared memory: d points at the m-tile's first row and
 * the pairs' first column, rows STRIDE floats apart; hi + lo in fp32. */
template <int NP, int STRIDE = SCS>
__device__ __forceinline__ void score_store(float *d, const float (&sh)[2 * NP][4],
					    const float (&sl)[2 * NP][4], int lane)
{
#pragma unroll
	for (int n = 0; n < 2 * NP; n++)
#pragma unroll
		for (int r = 0; r < 4; r += 2)
			*reinterpret_cast<float2 *>(d + fc_row(lane, r) * STRIDE + n * 8 + fc_col(lane, r)) =
				make_float2(sh[n][r] + sl[n][r], sh[n][r + 1] + sl[n][r + 1]);
}

/* A tile's value product, from zero, of MT m-tiles and NP pairs of n-tiles
 * (16 * NP value columns): tv[m][n] = P[m] . V over the tile's 16 * KK rows
 * (32 unless a decode round of 64 rows), P
 * as p * 2^14 in hi and lo (ph[m], pl[m]: this lane's ldmatrix address of
 * m-tile m's first k-step), V by ldmatrix.trans (vaddr: this lane's
 * address of the first pair at the tile's row 0). */
template <int MT, int NP, int KK = 2>
__device__ __forceinline__ void value_tile(float (&tv)[MT][2 * NP][4], const uint32_t (&ph)[MT],
					   const uint32_t (&pl)[MT], uint32_t vaddr)
{
#pragma unroll
	for (int m = 0; m < MT; m++)
#pragma unroll
		for (int n = 0; n < 2 * NP; n++)
#pragma unroll
			for (int r = 0; r < 4; r++)
				tv[m][n][r] = 0.f;
#pragma unroll
	for (int kk = 0; kk < KK; kk++) {
		uint32_t ah[MT][4], al[MT][4];
#pragma unroll
		for (int m = 0; m < MT; m++) {
			ldsm_x4(ah[m], ph[m] + kk * 32);
			ldsm_x4(al[m], pl[m] + kk * 32);
		}
#pragma unroll
		for (int pr = 0; pr < NP; pr++) {
			uint32_t b[4];
			ldsm_x4_t(b, vaddr + kk * 16 * ROWB + pr * 32);
#pragma unroll
			for (int m = 0; m < MT; m++) {
				mma16816(tv[m][2 * pr], ah[m], b[0], b[1]);
				mma16816(tv[m][2 * pr + 1], ah[m], b[2], b[3]);
				mma16816(tv[m][2 * pr], al[m], b[0], b[1]);
				mma16816(tv[m][2 * pr + 1], al[m], b[2], b[3]);
			}
		}
	}
}
#endif /* __CUDA_ARCH__ >= 800 */

/* Host: can the current device run a tensor-core kernel that takes smem
 * bytes of dynamic shared memory (sm_80 or newer, the opt-in allows it),
 * its attribute set?  0, or X4_EINVAL saying which (nothing launched), or
 * X4_ECUDA.  ready: the devices found able, a bit an ordinal below 64, so
 * that each is checked once (one such word a kernel instance). */
template <typename K>
static int mma_device_ready(K *kernel, size_t smem, std::atomic<unsigned long long> &ready,
			    const char *what, x4_err *e)
{
	int dev = 0;
	if (cudaGetDevice(&dev) != cudaSuccess) {
		(void)cudaGetLastError();
		return x4_err_set(e, X4_ECUDA, "%s: no current CUDA device", what);
	}
	const unsigned long long bit = dev < 64 ? 1ull << dev : 0;
	if (bit && (ready.load() & bit))
		return 0;
	int major = 0, minor = 0, optin = 0;
	if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
	    cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess ||
	    cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess) {
		(void)cudaGetLastError();
		return x4_err_set(e, X4_ECUDA, "%s: read cuda:%d's attributes", what, dev);
	}
	if (major < 8)
		return x4_err_set(e, X4_EINVAL, "%s: the tensor-core attention needs sm_80 or newer; "
				  "cuda:%d is sm_%d%d", what, dev, major, minor);
	if ((size_t)optin < smem)
		return x4_err_set(e, X4_EINVAL, "%s: %zu bytes of shared memory a block needed, "
				  "cuda:%d allows %d", what, smem, dev, optin);
	char w[128];
	snprintf(w, sizeof w, "%s: set the kernel's shared memory", what);
	X4_CUDA_TRY(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem),
		    w, e);
	ready.fetch_or(bit);
	return 0;
}

} /* namespace mla_mma */

#endif
