/*
 * mla_prefill_mma.cuh - the tensor-core prefill attention
 * (x4k_mla_prefill_mma, kernels/mla_prefill.cu): x4k_mla_prefill's
 * contract (token t of the chunk, at *pos + t, attends to the cache rows
 * [0, *pos + t], the chunk's own rows stored first) on the MMA units, for
 * the model's shape alone, flash-attention style: no score matrix, no
 * workspace, shared memory independent of the context.  The pieces (tiles,
 * fragments, splits, the softmax step) and the arithmetic are the decode's
 * (mla_mma_dev.cuh; docs/numerics.md 1.7).  The kernel lab
 * (bench/kernels/mla_prefill.cu) times it beside x4k_mla_prefill and checks
 * it against it.  sm_80 and later, as the decode.
 *
 * The latent is shared by every head, so one staged tile of cache rows
 * serves every (token, head) row of a block: the rows are the chunk's
 * n_tok * n_head (token, head) pairs in qt's order, 32 a block (two
 * m-tiles of 16; since 16 | n_head an m-tile is one token's, so it has one
 * causal limit, and a block's two are at most one token apart).  The block
 * walks the cache rows [0, the longer limit) in tiles of 32, NSTAGE in
 * flight by cp.async (two: 101,120 bytes of shared memory, inside sm_86's
 * and sm_89's 99 KB as well as sm_80's and sm_90's).  8 warps:
 *
 *   scores: warp w takes m-tile w >> 2 and k-quarter w & 3 (its query
 *     fragments, hi and lo, in registers for the whole walk) against the
 *     tile's 32 rows (four n-tiles); the quarters meet in shared memory;
 *   softmax: warp w owns the block rows 4w .. 4w+3, a lane a cache row
 *     (the decode's step, each row masked at its own token's limit);
 *   values: warp w owns the latent columns 64w .. +63 of both m-tiles
 *     (64 f32 accumulators a lane), a tile's product from zero in two
 *     passes of 32 columns, then acc = alpha * acc + it by an fp32 fma.
 *
 * Blocks run from the chunk's last rows to its first (the longest walks
 * first, so that the short ones fill the tail of the grid).  The result of
 * a row depends on its own query and the cache alone, not on its block's
 * other rows (a row's scale, max, sum and accumulators are its own; the
 * other m-tile only lengthens the walk by masked rows, which add p = 0 and
 * alpha = 1 exactly), and every sum runs in a fixed order: deterministic.
 */
#ifndef X4_MLA_PREFILL_MMA_CUH
#define X4_MLA_PREFILL_MMA_CUH

#include <limits.h>

#include "mla_mma_dev.cuh"

namespace mla_mma {

constexpr int PMT = 2;          /* m-tiles a prefill block */
constexpr int PR = PMT * MR;    /* (token, head) rows a block: 32 */
constexpr int PRW = PR / 8;     /* softmax rows a warp: 4 */
static_assert(PMT * KQ * 32 == THREADS, "a warp an (m-tile, k-quarter)");
static_assert(PMT == 2 && PRW * KQ == MR, "warp w's softmax rows are in its own m-tile, w >> 2");

template <int NSTAGE>
constexpr size_t prefill_smem_bytes()
{
	return (size_t)NSTAGE * TILEB + sizeof(float) * KQ * PR * SCS + sizeof(__half) * 2 * PR * PS +
	       sizeof(float) * (KQ * PR + 2 * PR);
}
static_assert(prefill_smem_bytes<2>() <= 99 * 1024, "sm_86/sm_89's opt-in: 99 KB a block");

template <int NSTAGE>
static __global__ void __launch_bounds__(THREADS, 1) mla_prefill_mma_kernel(mla_params a, int n_rows)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
	static_assert(NSTAGE >= 2, "at least double-buffered");
	extern __shared__ __align__(16) unsigned char smraw[];
	float *sc = reinterpret_cast<float *>(smraw + (size_t)NSTAGE * TILEB); /* [KQ][PR][SCS] partial scores */
	__half *sph = reinterpret_cast<__half *>(sc + KQ * PR * SCS);          /* [PR][PS] p*2^14, hi */
	__half *spl = sph + PR * PS;                                           /* [PR][PS] lo */
	float *sqm = reinterpret_cast<float *>(spl + PR * PS);                  /* [KQ][PR] max|q| a quarter */
	float *sal = sqm + KQ * PR;                                            /* [PR] rescale of a tile */
	float *sls = sal + PR;                                                 /* [PR] final sums */
	const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
	const int g = lane >> 2, t4 = lane & 3;
	const int r0 = (int)(gridDim.x - 1 - blockIdx.x) * PR; /* the block's first row */
	x4p::trigger();
	x4p::wait(); /* the position, the queries and the chunk's cache rows */

	/* each m-tile's token and causal limit; a row past the chunk (the
	 * second m-tile of the last block when n_rows % 32 == 16) computes the
	 * last row's query over no cache row and writes nothing */
	int len[PMT];
#pragma unroll
	for (int m = 0; m < PMT; m++) {
		const int rm = r0 + m * MR;
		len[m] = rm < n_rows ? max(0, mla_len(a, rm / a.n_head)) : 0;
	}
	const int t1 = max(len[0], len[1]); /* PMT == 2 */
	const int ntile = (t1 + T - 1) / T;
	const char *cache = reinterpret_cast<const char *>(a.cache);
	const uint32_t stg = smem_u32(smraw);

	/* tile i's rows into stage i % NSTAGE; one commit group a tile, empty
	 * past the last, so that the count is uniform */
	auto load_tile = [&](int i) {
		if (i < ntile)
			stage_tile(stg + (uint32_t)(i % NSTAGE) * TILEB, cache, i * T, t1, tid);
		cp_async_commit();
	};
#pragma unroll
	for (int i = 0; i < NSTAGE - 1; i++)
		load_tile(i);

	/* the queries' A fragments, hi and lo, of this warp's m-tile and k-quarter */
	const int kq = warp & 3, mt = warp >> 2;
	uint32_t qh[KSQ][4], ql[KSQ][4];
	float qinv[PRW]; /* 2^-k of the softmax rows PRW*warp .. +PRW-1 */
	{
		const int ra = min(r0 + mt * MR + g, n_rows - 1), rb = min(r0 + mt * MR + g + 8, n_rows - 1);
		float2 qv[KSQ][4];
		q_load(qv, a.qt + (size_t)ra * CW, a.qt + (size_t)rb * CW, kq, lane);
		float m0, m1;
		q_max(qv, m0, m1);
		if (t4 == 0) {
			sqm[kq * PR + mt * MR + g] = m0;
			sqm[kq * PR + mt * MR + g + 8] = m1;
		}
		__syncthreads();
		const float s0 = pow2f(q_scale_exp(q_row_max(sqm, PR, mt * MR + g)));
		const float s1 = pow2f(q_scale_exp(q_row_max(sqm, PR, mt * MR + g + 8)));
#pragma unroll
		for (int j = 0; j < PRW; j++)
			qinv[j] = pow2f(-q_scale_exp(q_row_max(sqm, PR, PRW * warp + j)));
		q_split(qv, s0, s1, qh, ql);
	}
	const int lenw = mt ? len[1] : len[0]; /* the softmax rows' limit: their m-tile's */

	float acc[PMT][8][4]; /* O * 2^14: rows g, g + 8 of each m-tile x this warp's 8 n-tiles */
#pragma unroll
	for (int m = 0; m < PMT; m++)
#pragma unroll
		for (int j = 0; j < 8; j++)
#pragma unroll
			for (int r = 0; r < 4; r++)
				acc[m][j][r] = 0.f;
	float m_run[PRW], l_run[PRW];
#pragma unroll
	for (int j = 0; j < PRW; j++) {
		m_run[j] = -INFINITY;
		l_run[j] = 0.f;
	}
	/* this lane's ldmatrix addresses within a stage, and of the probabilities */
	const uint32_t koff = (uint32_t)ldk_row(lane) * ROWB + (kq * KSQ * 16 + ldk_col(lane)) * 2;
	const uint32_t voff = (uint32_t)ldv_row(lane) * ROWB + (warp * 64 + ldv_col(lane)) * 2;
	uint32_t ph[PMT][1], pl[PMT][1];
#pragma unroll
	for (int m = 0; m < PMT; m++) {
		const uint32_t poff = (uint32_t)((m * MR + lda_row(lane)) * PS + lda_col(lane)) * 2;
		ph[m][0] = smem_u32(sph) + poff;
		pl[m][0] = smem_u32(spl) + poff;
	}

	for (int i = 0; i < ntile; i++) {
		cp_async_wait<NSTAGE - 2>(); /* this thread's copies of tile i */
		__syncthreads();             /* everyone's; and tile i-1's stage is free */
		load_tile(i + NSTAGE - 1);
		const uint32_t st = stg + (uint32_t)(i % NSTAGE) * TILEB;
		const int tb = i * T;

		{ /* partial scores of this warp's m-tile and k-quarter, all 32 rows */
			float sh[4][4], sl[4][4];
			score_quarter<2>(sh, sl, qh, ql, st + koff);
			score_store<2>(sc + (kq * PR + mt * MR) * SCS, sh, sl, lane);
		}
		__syncthreads();

		/* online softmax: rows PRW*w .. +PRW-1, a lane a cache row */
#pragma unroll
		for (int j = 0; j < PRW; j++) {
			const int r = PRW * warp + j;
			const float dot = quarter_sum(sc + r * SCS + lane, PR * SCS);
			const float s[1] = { tb + lane < lenw ? dot * qinv[j] * a.scale : -INFINITY };
			float alpha, p[1];
			softmax_step<1>(s, p, m_run[j], l_run[j], alpha);
			__half hi, lo;
			split_h(p[0] * PSCALE, hi, lo);
			sph[r * PS + lane] = hi;
			spl[r * PS + lane] = lo;
			if (lane == 0)
				sal[r] = alpha;
		}
		__syncthreads();

		/* this tile's value product, from zero, then acc = alpha * acc + it,
		 * an m-tile at a time (32 registers of it) */
#pragma unroll
		for (int m = 0; m < PMT; m++) {
			float tv[1][8][4];
			value_tile<1, 4>(tv, ph[m], pl[m], st + voff);
			const float a0 = sal[m * MR + fc_row(lane, 0)], a1 = sal[m * MR + fc_row(lane, 2)];
#pragma unroll
			for (int j = 0; j < 8; j++)
#pragma unroll
				for (int r = 0; r < 4; r++)
					acc[m][j][r] = fmaf(acc[m][j][r], r < 2 ? a0 : a1, tv[0][j][r]);
		}
	}
	cp_async_wait<0>(); /* only empty groups are left: nothing outstanding at exit */

	if (lane < PRW) {
		float l = l_run[0];
#pragma unroll
		for (int j = 1; j < PRW; j++)
			l = lane == j ? l_run[j] : l;
		sls[PRW * warp + lane] = l;
	}
	__syncthreads();
#pragma unroll
	for (int m = 0; m < PMT; m++)
#pragma unroll
		for (int r = 0; r < 4; r += 2) {
			const int row = m * MR + fc_row(lane, r);
			if (r0 + row >= n_rows)
				continue;
			const float l = sls[row];
			const float inv = l > 0.f ? 1.0f / l : 0.f; /* no cache row: acc is 0, a zero */
			float *o = a.ob + (size_t)(r0 + row) * KV + warp * 64 + fc_col(lane, r);
#pragma unroll
			for (int j = 0; j < 8; j++) {
				float2 v = make_float2(acc[m][j][r] * PSCALE_INV, acc[m][j][r + 1] * PSCALE_INV);
				v.x *= inv;
				v.y *= inv;
				*reinterpret_cast<float2 *>(o + j * 8) = v;
			}
		}
#endif
}

/* x4k_mla_prefill's arguments and contract, for the model's shape alone:
 * 0, or X4_EINVAL (nothing launched) when it cannot run here, X4_ECUDA
 * when the launch fails.  NSTAGE: tiles in flight (the library's instance
 * is 2; the lab also times 3). */
template <int NSTAGE = 2>
static int mla_prefill_mma(int n_tok, int n_head, int kv_lora, int d_rope, const float *qt,
			   const uint16_t *cache, int max_ctx, const int *pos, float kq_scale, float *ob,
			   cudaStream_t s, x4_err *e)
{
	if (n_tok < 0 || n_tok > 65535 || !x4k_mla_mma_shape(n_head, kv_lora, d_rope) || max_ctx < 1 ||
	    (long long)n_tok * n_head > INT_MAX)
		return x4_err_set(e, X4_EINVAL, "x4k_mla_prefill_mma: the tensor-core attention takes "
				  "the model's shape: heads a multiple of 16, kv_lora 512, rope 64, up to "
				  "65535 tokens and tokens x heads < 2^31 (not %d tokens, %d heads, "
				  "kv_lora %d, rope %d; max_ctx %d)", n_tok, n_head, kv_lora, d_rope,
				  max_ctx);
	if (n_tok == 0)
		return 0;
	if (!qt || !cache || !pos || !ob)
		return x4_err_set(e, X4_EINVAL, "x4k_mla_prefill_mma: NULL buffer");
	if ((uintptr_t)qt % 8 || (uintptr_t)cache % 16 || (uintptr_t)ob % 8)
		return x4_err_set(e, X4_EINVAL, "x4k_mla_prefill_mma: misaligned buffer (the cache 16 "
				  "bytes, the others 8)");
	constexpr size_t smem = prefill_smem_bytes<NSTAGE>();
	static std::atomic<unsigned long long> ready{ 0 }; /* mma_device_ready's devices */
	if (int rc = mma_device_ready(mla_prefill_mma_kernel<NSTAGE>, smem, ready,
				      "x4k_mla_prefill_mma", e))
		return rc;
	const mla_params a =
		mla_prefill_params(qt, cache, pos, ob, n_head, KV, CW, max_ctx, kq_scale);
	const int n_rows = n_tok * n_head;
	mla_prefill_mma_kernel<NSTAGE><<<(n_rows + PR - 1) / PR, THREADS, smem, s>>>(a, n_rows);
	return x4_cuda_launched("x4k_mla_prefill_mma: attention", e);
}

} /* namespace mla_mma */

#endif
