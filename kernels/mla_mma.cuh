/*
 * mla_mma.cuh - the tensor-core decode attention (x4k_mla_decode_mma,
 * kernels/mla_decode.cu): x4k_mla_decode's contract and partial layout on
 * the MMA units, for the model's shape alone.  An option until priced
 * (x4_trunk_opts.attn, `--attn mma`); its arithmetic and its agreement with
 * the fp32 kernel are docs/numerics.md 1.7.  The kernel lab
 * (bench/kernels/mla_decode.cu) times this code at two pipeline depths and
 * checks it against x4k_mla_decode.  sm_80 and later: the kernel body is
 * empty below sm_80, and the launcher checks the device's compute
 * capability on the host and launches nothing on an older one.
 *
 * Shape: the model's alone (16 | n_head, kv_lora 512, d_rope 64: a row of
 * 576 fp16, the cache [max_ctx][576]), one decode token.
 *
 * Grid (nsplit, n_head / 16) over the library's splits (mla_nsplit,
 * mla_span): a block takes 16 heads (the MMA's M) and a span of rows, in
 * tiles of 32 rows staged whole (1152 bytes a row, padded to 1168 so that
 * ldmatrix's eight row addresses fall in eight different bank groups) by
 * cp.async, NSTAGE tiles in flight (the next NSTAGE-1 tiles' copies
 * issued while this one is computed).  8 warps.
 *
 * Scores S^T[16 heads][32 rows] = Q[16][576] . K^T, m16n8k16 (f16 in, f32
 * accumulate): warp w takes the k-quarter w&3 (144 dims, 9 k-steps) and the
 * rows 16*(w>>2) .. +15 (two n-tiles).  Its A fragments (the queries, hi and
 * lo, 72 registers) are loaded once from global memory straight into
 * registers and kept for every tile; B is ldmatrix.x4 (non-transposed:
 * the cache's own [row][dim] layout is B's "col") from the staged tile.
 * The four k-quarters' partial scores meet in shared memory and are added
 * in a fixed order.
 *
 * Precision: the products must be fp32-accurate.  K and V are exact fp16;
 * q (fp32) is split into two fp16 terms, q*s = hi + lo with s a power of
 * two a head (max|q*s| in [2^14, 2^15): exact to apply and to remove), and
 * S = (hi.K + lo.K) / s: q to 22 bits, the products exact in the f32
 * accumulators.  Likewise the probabilities (fp32 in [0, 1]) for the value
 * product, p * 2^14 = hi + lo.  Every tensor-core chain is short (9 MMAs a
 * partial score, 4 a tile's value product, each from zero): the tile's
 * value product is added to the running accumulators by an fp32 fma, as
 * the library does it, so that the tensor cores' truncated accumulation
 * never runs along a whole span.
 *
 * Softmax: online per head in fp32 (running max, sum, the accumulators
 * rescaled by alpha each tile), warp w owning heads 2w, 2w+1, a lane a
 * row, expf: the library's arithmetic.
 *
 * Values O[16][512] += P[16][32] . V[32][512]: warp w owns the columns
 * 64w .. +63 (8 n-tiles, 32 f32 a lane), A = P (hi and lo) by ldmatrix.x4
 * from shared memory, B = V by ldmatrix.x4.trans from the same staged tile
 * (its first 512 columns).
 *
 * Partials pm/pl/pacc in the library's layout, combined by the library's
 * own kernel (mla_combine_kernel, mla_attn.cuh); nsplit == 1 writes ob
 * directly.  Deterministic: every sum in a fixed order.
 */
#ifndef X4_MLA_MMA_CUH
#define X4_MLA_MMA_CUH

#include <cuda_fp16.h>

#include <atomic>

#include "mla_attn.cuh"
#include "mma_dev.cuh"

namespace mla_mma {
using namespace x4c;
using namespace x4m; /* the MMA and fp16-split helpers (mma_dev.cuh) */

constexpr int HG = 16;              /* heads a block: the MMA's M */
constexpr int T = MLA_T;            /* rows a tile (32: the spans' granularity) */
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
static_assert(KV == 8 * 64, "a warp owns 64 value columns");
static_assert(HG == 16 && KV == 512 && ROPE == 64, "the shape x4k_mla_mma_shape names");

template <int NSTAGE>
constexpr size_t smem_bytes()
{
	return (size_t)NSTAGE * TILEB + sizeof(float) * KQ * HG * SCS + sizeof(__half) * 2 * HG * PS +
	       sizeof(float) * (KQ * HG + 2 * HG);
}

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

template <int NSTAGE>
static __global__ void __launch_bounds__(THREADS, 1) mla_mma_kernel(mla_params a)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
	static_assert(NSTAGE >= 2, "at least double-buffered");
	extern __shared__ __align__(16) unsigned char smraw[];
	float *sc = reinterpret_cast<float *>(smraw + (size_t)NSTAGE * TILEB); /* [KQ][HG][SCS] partial scores */
	__half *sph = reinterpret_cast<__half *>(sc + KQ * HG * SCS);          /* [HG][PS] p*2^14, hi */
	__half *spl = sph + HG * PS;                                           /* [HG][PS] lo */
	float *sqm = reinterpret_cast<float *>(spl + HG * PS);                  /* [KQ][HG] max|q| a quarter */
	float *sal = sqm + KQ * HG;                                            /* [HG] rescale of a tile */
	float *sls = sal + HG;                                                 /* [HG] final sums */
	const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
	const int g = lane >> 2, t4 = lane & 3;
	const int h0 = blockIdx.y * HG, split = blockIdx.x, nsplit = gridDim.x;
	x4p::trigger();
	x4p::wait(); /* the position, the queries and this step's cache row */
	const int len = mla_len(a, 0);
	int span, nsp;
	mla_span(len, nsplit, &span, &nsp);
	if (nsp == 0 && nsplit == 1) { /* nothing to attend: a defined zero */
		for (int i = tid; i < HG * KV; i += THREADS)
			a.ob[(size_t)h0 * KV + i] = 0.f;
		return;
	}
	if (split >= nsp) /* uniform over the block, before any barrier */
		return;
	const int t0 = split * span, t1 = min(len, t0 + span);
	const int ntile = (t1 - t0 + T - 1) / T;
	const char *cache = reinterpret_cast<const char *>(a.cache);
	const uint32_t stg = smem_u32(smraw);

	/* tile i's rows into stage i % NSTAGE, rows past t1 zero-filled (read
	 * nothing: their scores are masked, their values multiply p = 0); one
	 * commit group a tile, empty past the last, so that the count is uniform */
	auto load_tile = [&](int i) {
		if (i < ntile) {
			const int tb = t0 + i * T;
			const uint32_t dst = stg + (uint32_t)(i % NSTAGE) * TILEB;
#pragma unroll
			for (int j = 0; j < CPT; j++) {
				const int c = tid + j * THREADS, r = c / CHUNKS, ch = c - r * CHUNKS;
				const bool ok = tb + r < t1;
				const char *src = cache + (size_t)(ok ? tb + r : 0) * (CW * 2) + ch * 16;
				cp_async16(dst + r * ROWB + ch * 16, src, ok ? 16 : 0);
			}
		}
		cp_async_commit();
	};
#pragma unroll
	for (int i = 0; i < NSTAGE - 1; i++)
		load_tile(i);

	/* the queries' A fragments, hi and lo, for this warp's k-quarter */
	const int kq = warp & 3, nh = warp >> 2;
	uint32_t qh[KSQ][4], ql[KSQ][4];
	float qinv[2]; /* 2^-k of the softmax heads 2*warp, 2*warp+1 */
	{
		const float *q = a.qt + (size_t)h0 * CW;
		float2 qv[KSQ][4];
#pragma unroll
		for (int k = 0; k < KSQ; k++)
#pragma unroll
			for (int r = 0; r < 4; r++)
				qv[k][r] = __ldg(reinterpret_cast<const float2 *>(
					q + (size_t)fa_row(lane, r) * CW + kq * KSQ * 16 + k * 16 + fa_col(lane, r, 0)));
		float m0 = 0.f, m1 = 0.f; /* rows g and g + 8 */
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
		if (nh == 0 && t4 == 0) {
			sqm[kq * HG + g] = m0;
			sqm[kq * HG + g + 8] = m1;
		}
		__syncthreads();
		auto head_max = [&](int h) {
			return fmaxf(fmaxf(sqm[h], sqm[HG + h]), fmaxf(sqm[2 * HG + h], sqm[3 * HG + h]));
		};
		const float s0 = pow2f(q_scale_exp(head_max(g))), s1 = pow2f(q_scale_exp(head_max(g + 8)));
		qinv[0] = pow2f(-q_scale_exp(head_max(2 * warp)));
		qinv[1] = pow2f(-q_scale_exp(head_max(2 * warp + 1)));
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

	float acc[8][4]; /* O * 2^14: heads g, g + 8 x this warp's 8 n-tiles */
#pragma unroll
	for (int j = 0; j < 8; j++)
#pragma unroll
		for (int r = 0; r < 4; r++)
			acc[j][r] = 0.f;
	float m_run[2] = { -INFINITY, -INFINITY }, l_run[2] = { 0.f, 0.f }; /* heads 2w, 2w+1 */
	const uint32_t sph_s = smem_u32(sph), spl_s = smem_u32(spl);
	/* this lane's ldmatrix addresses within a stage */
	const uint32_t koff = (uint32_t)(nh * 16 + ldk_row(lane)) * ROWB + (kq * KSQ * 16 + ldk_col(lane)) * 2;
	const uint32_t voff = (uint32_t)ldv_row(lane) * ROWB + (warp * 64 + ldv_col(lane)) * 2;
	const uint32_t poff = (uint32_t)(lda_row(lane) * PS + lda_col(lane)) * 2;

	for (int i = 0; i < ntile; i++) {
		cp_async_wait<NSTAGE - 2>(); /* this thread's copies of tile i */
		__syncthreads();             /* everyone's; and tile i-1's stage is free */
		load_tile(i + NSTAGE - 1);
		const uint32_t st = stg + (uint32_t)(i % NSTAGE) * TILEB;
		const int tb = t0 + i * T;

		{ /* partial scores of this warp's k-quarter and 16 rows */
			float sh[2][4], sl[2][4];
#pragma unroll
			for (int n = 0; n < 2; n++)
#pragma unroll
				for (int r = 0; r < 4; r++)
					sh[n][r] = sl[n][r] = 0.f;
#pragma unroll
			for (int k = 0; k < KSQ; k++) {
				uint32_t b[4];
				ldsm_x4(b, st + koff + k * 32);
				mma16816(sh[0], qh[k], b[0], b[1]);
				mma16816(sh[1], qh[k], b[2], b[3]);
				mma16816(sl[0], ql[k], b[0], b[1]);
				mma16816(sl[1], ql[k], b[2], b[3]);
			}
#pragma unroll
			for (int n = 0; n < 2; n++)
#pragma unroll
				for (int r = 0; r < 4; r += 2) {
					float *o = sc + (kq * HG + fc_row(lane, r)) * SCS + nh * 16 + n * 8 + fc_col(lane, r);
					*reinterpret_cast<float2 *>(o) =
						make_float2(sh[n][r] + sl[n][r], sh[n][r + 1] + sl[n][r + 1]);
				}
		}
		__syncthreads();

		/* online softmax: heads 2w, 2w+1, a lane a row */
#pragma unroll
		for (int j = 0; j < 2; j++) {
			const int h = 2 * warp + j;
			const float *d = sc + h * SCS + lane;
			const float dot = ((d[0] + d[HG * SCS]) + d[2 * HG * SCS]) + d[3 * HG * SCS];
			const float s = tb + lane < t1 ? dot * qinv[j] * a.scale : -INFINITY;
			const float mnew = fmaxf(m_run[j], warp_max(s)); /* finite: a tile has a row */
			const float p = expf(s - mnew);
			const float alpha = expf(m_run[j] - mnew);
			l_run[j] = l_run[j] * alpha + warp_sum(p);
			m_run[j] = mnew;
			__half ph, pl;
			split_h(p * PSCALE, ph, pl);
			sph[h * PS + lane] = ph;
			spl[h * PS + lane] = pl;
			if (lane == 0)
				sal[h] = alpha;
		}
		__syncthreads();

		{ /* this tile's value product, from zero, then acc = alpha * acc + it */
			float tv[8][4];
#pragma unroll
			for (int j = 0; j < 8; j++)
#pragma unroll
				for (int r = 0; r < 4; r++)
					tv[j][r] = 0.f;
#pragma unroll
			for (int kk = 0; kk < 2; kk++) {
				uint32_t ah[4], al[4];
				ldsm_x4(ah, sph_s + poff + kk * 32);
				ldsm_x4(al, spl_s + poff + kk * 32);
#pragma unroll
				for (int pr = 0; pr < 4; pr++) {
					uint32_t b[4];
					ldsm_x4_t(b, st + voff + kk * 16 * ROWB + pr * 32);
					mma16816(tv[2 * pr], ah, b[0], b[1]);
					mma16816(tv[2 * pr + 1], ah, b[2], b[3]);
					mma16816(tv[2 * pr], al, b[0], b[1]);
					mma16816(tv[2 * pr + 1], al, b[2], b[3]);
				}
			}
			const float a0 = sal[fc_row(lane, 0)], a1 = sal[fc_row(lane, 2)];
#pragma unroll
			for (int j = 0; j < 8; j++)
#pragma unroll
				for (int r = 0; r < 4; r++)
					acc[j][r] = fmaf(acc[j][r], r < 2 ? a0 : a1, tv[j][r]);
		}
	}
	cp_async_wait<0>(); /* only empty groups are left: nothing outstanding at exit */

	const size_t base = (size_t)split * a.n_head; /* one token: tok 0 */
	if (lane < 2) {
		const int h = 2 * warp + lane;
		const float m = lane ? m_run[1] : m_run[0], l = lane ? l_run[1] : l_run[0];
		sls[h] = l;
		if (nsplit > 1) {
			a.pm[base + h0 + h] = m;
			a.pl[base + h0 + h] = l;
		}
	}
	__syncthreads();
#pragma unroll
	for (int j = 0; j < 8; j++)
#pragma unroll
		for (int r = 0; r < 4; r += 2) {
			const int h = fc_row(lane, r), c = warp * 64 + j * 8 + fc_col(lane, r);
			float2 v = make_float2(acc[j][r] * PSCALE_INV, acc[j][r + 1] * PSCALE_INV);
			if (nsplit == 1) {
				const float inv = 1.0f / sls[h];
				v.x *= inv;
				v.y *= inv;
				*reinterpret_cast<float2 *>(a.ob + (size_t)(h0 + h) * KV + c) = v;
			} else {
				*reinterpret_cast<float2 *>(a.pacc + (base + h0 + h) * KV + c) = v;
			}
		}
#endif
}

/* x4k_mla_decode's arguments and contract (one token at *pos over rows
 * [0, *pos], ws of x4k_mla_decode_workspace_bytes), for the model's shape
 * alone: 0, or X4_EINVAL (nothing launched) when it cannot run here,
 * X4_ECUDA when a launch fails.  NSTAGE: tiles in flight (the library's
 * instance is 2; the lab also times 4, which was no faster). */
template <int NSTAGE = 2>
static int mla_mma_decode(int n_head, int kv_lora, int d_rope, const float *qt,
			  const uint16_t *cache, int max_ctx, const int *pos, float kq_scale,
			  float *ob, void *ws, size_t ws_bytes, cudaStream_t s, x4_err *e)
{
	if (!x4k_mla_mma_shape(n_head, kv_lora, d_rope) || max_ctx < 1)
		return x4_err_set(e, X4_EINVAL, "x4k_mla_decode_mma: the tensor-core attention takes "
				  "the model's shape: heads a multiple of 16, kv_lora 512, rope 64 (not "
				  "%d heads, kv_lora %d, rope %d; max_ctx %d)", n_head, kv_lora, d_rope,
				  max_ctx);
	if (!qt || !cache || !pos || !ob || !ws)
		return x4_err_set(e, X4_EINVAL, "x4k_mla_decode_mma: NULL buffer");
	if ((uintptr_t)qt % 8 || (uintptr_t)cache % 16 || (uintptr_t)ob % 8 || (uintptr_t)ws % 8)
		return x4_err_set(e, X4_EINVAL, "x4k_mla_decode_mma: misaligned buffer (the cache 16 "
				  "bytes, the others 8)");
	const size_t need = x4k_mla_decode_workspace_bytes(n_head, kv_lora, max_ctx);
	if (ws_bytes < need)
		return x4_err_set(e, X4_EINVAL, "x4k_mla_decode_mma: workspace of %zu bytes, %zu "
				  "needed", ws_bytes, need);
	constexpr size_t smem = smem_bytes<NSTAGE>();
	/* the devices found able (sm_80+, the shared memory, the attribute set):
	 * a bit an ordinal below 64, each checked once */
	static std::atomic<unsigned long long> ready{ 0 };
	int dev = 0;
	if (cudaGetDevice(&dev) != cudaSuccess) {
		(void)cudaGetLastError();
		return x4_err_set(e, X4_ECUDA, "x4k_mla_decode_mma: no current CUDA device");
	}
	const unsigned long long bit = dev < 64 ? 1ull << dev : 0;
	if (!bit || !(ready.load() & bit)) {
		int major = 0, minor = 0, optin = 0;
		if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
		    cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess ||
		    cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) !=
			    cudaSuccess) {
			(void)cudaGetLastError();
			return x4_err_set(e, X4_ECUDA, "x4k_mla_decode_mma: read cuda:%d's attributes", dev);
		}
		if (major < 8)
			return x4_err_set(e, X4_EINVAL, "x4k_mla_decode_mma: the tensor-core attention "
					  "needs sm_80 or newer; cuda:%d is sm_%d%d", dev, major, minor);
		if ((size_t)optin < smem)
			return x4_err_set(e, X4_EINVAL, "x4k_mla_decode_mma: %zu bytes of shared memory "
					  "a block needed, cuda:%d allows %d", smem, dev, optin);
		X4_CUDA_TRY(cudaFuncSetAttribute(mla_mma_kernel<NSTAGE>,
						 cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem),
			    "x4k_mla_decode_mma: set the kernel's shared memory", e);
		ready.fetch_or(bit);
	}
	const int nsplit = mla_nsplit(max_ctx);
	const mla_params a = mla_decode_params(qt, cache, pos, ob, ws, n_head, kv_lora, CW, max_ctx,
					       kq_scale, nsplit);
	x4p::launch(mla_mma_kernel<NSTAGE>, dim3(nsplit, n_head / HG, 1), dim3(THREADS), smem, s, a);
	int rc = x4_cuda_launched("x4k_mla_decode_mma: attention", e);
	if (rc || nsplit == 1)
		return rc;
	return mla_combine_launch(a, nsplit, s, "x4k_mla_decode_mma: combine", e);
}

} /* namespace mla_mma */

#endif
