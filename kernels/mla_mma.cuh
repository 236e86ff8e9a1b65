/*
 * mla_mma.cuh - the tensor-core decode attention (x4k_mla_decode_mma,
 * kernels/mla_decode.cu): x4k_mla_decode's contract and partial layout on
 * the MMA units, for the model's shape alone.  An option until priced
 * (x4_trunk_opts.attn, `--attn mma`); its arithmetic and its agreement with
 * the fp32 kernel are docs/numerics.md 1.7, its pieces (the tiles, the
 * fragments, the splits, the softmax step) mla_mma_dev.cuh's, which the
 * prefill's kernel (mla_prefill_mma.cuh) shares.  The kernel lab
 * (bench/kernels/mla_decode.cu) times this code at two pipeline depths and
 * checks it against x4k_mla_decode.  sm_80 and later: the kernel body is
 * empty below sm_80, and the launcher checks the device's compute
 * capability on the host and launches nothing on an older one.
 *
 * Shape: the model's alone (16 | n_head, kv_lora 512, d_rope 64: a row of
 * 576 fp16, the cache [max_ctx][576]), one decode token.
 *
 * Grid (nsplit, n_head / 16) over the library's splits (mla_nsplit,
 * mla_span): a block takes 16 heads (one m-tile) and a span of rows, in
 * rounds of TR tiles of 32 rows, NSTAGE rounds in flight (the next
 * NSTAGE-1 rounds' copies issued while this one is computed).  8 warps.
 * A round is one pass of scores, barrier, softmax, barrier, values: its
 * chains of round trips, not the cache's bytes, set the walk's pace
 * (2 warps a scheduler, 0.27 instructions issued a cycle at 32,500
 * positions: bench/RESULTS.md 41), so from ROUND64_CTX cache rows
 * the library takes rounds of 64 (TR 2: 1.03-1.04x the decode step at
 * 32,500 positions), below it rounds of 32 (TR 1: spans of 32 to 96 rows,
 * where 64 did not pay).  A span's last round whose second tile is wholly
 * past the span is done as a round of 32.
 *
 * Scores S^T[16 heads][32 rows] = Q[16][576] . K^T: warp w takes the
 * k-quarter w&3 and the rows 16*(w>>2) .. +15 (two n-tiles).  Its A
 * fragments (the queries, hi and lo) are loaded once from global memory
 * straight into registers and kept for every tile; B is ldmatrix.x4
 * (non-transposed: the cache's own [row][dim] layout is B's "col") from the
 * staged tile.
 *
 * Softmax: online per head in fp32 (running max, sum, the accumulators
 * rescaled by alpha each round), warp w owning heads 2w, 2w+1, a lane a
 * row of each tile, expf: the library's arithmetic.
 *
 * Values O[16][512] += P[16][32 TR] . V[32 TR][512]: warp w owns the
 * columns 64w .. +63 (8 n-tiles, 32 f32 a lane), A = P (hi and lo) by
 * ldmatrix.x4 from shared memory, B = V by ldmatrix.x4.trans from the same
 * staged round (its first 512 columns).
 *
 * Partials pm/pl/pacc in the library's layout, combined by the library's
 * own kernel (mla_combine_kernel, mla_attn.cuh); nsplit == 1 writes ob
 * directly.  Deterministic: every sum in a fixed order.
 */
#ifndef X4_MLA_MMA_CUH
#define X4_MLA_MMA_CUH

#include "mla_mma_dev.cuh"

namespace mla_mma {

constexpr int HG = MR;              /* heads a block: one m-tile */
constexpr int ROUND64_CTX = 8192;   /* caches (max_ctx) from which the library walks rounds of 64 */

/* TR tiles of 32 rows a round (1 or 2): a stage holds a round, the
 * scores' and probabilities' rows are a round wide. */
template <int TR> struct round_shape {
	static_assert(TR == 1 || TR == 2, "rounds of 32 or 64 rows");
	enum { RT = T * TR, SCR = SCS + T * (TR - 1), PR = PS + T * (TR - 1), STAGEB = TR * TILEB };
};

template <int NSTAGE, int TR = 1>
constexpr size_t smem_bytes()
{
	using R = round_shape<TR>;
	return (size_t)NSTAGE * R::STAGEB + sizeof(float) * KQ * HG * R::SCR + sizeof(__half) * 2 * HG * R::PR +
	       sizeof(float) * (KQ * HG + 2 * HG);
}

template <int NSTAGE, int TR = 1>
static __global__ void __launch_bounds__(THREADS, 1) mla_mma_kernel(mla_params a)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
	static_assert(NSTAGE >= 2, "at least double-buffered");
	using R = round_shape<TR>;
	constexpr int RT = R::RT, SCR = R::SCR, PR = R::PR;
	extern __shared__ __align__(16) unsigned char smraw[];
	float *sc = reinterpret_cast<float *>(smraw + (size_t)NSTAGE * R::STAGEB); /* [KQ][HG][SCR] partial scores */
	__half *sph = reinterpret_cast<__half *>(sc + KQ * HG * SCR);              /* [HG][PR] p*2^14, hi */
	__half *spl = sph + HG * PR;                                               /* [HG][PR] lo */
	float *sqm = reinterpret_cast<float *>(spl + HG * PR);                     /* [KQ][HG] max|q| a quarter */
	float *sal = sqm + KQ * HG;                                            /* [HG] rescale of a tile */
	float *sls = sal + HG;                                                 /* [HG] final sums */
	const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
	const int g = lane >> 2, t4 = lane & 3;
	const int h0 = blockIdx.y * HG, split = blockIdx.x, nsplit = gridDim.x;
	const int p0 = __ldcg(a.pos); /* before the wait: mla_pos_early (mla_attn.cuh) */
	x4p::trigger();
	x4p::wait(); /* the queries and this step's cache row */
	const int len = mla_len_at(a, p0, 0);
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
	const int ntile = (t1 - t0 + RT - 1) / RT; /* rounds */
	const char *cache = reinterpret_cast<const char *>(a.cache);
	const uint32_t stg = smem_u32(smraw);

	/* round i's rows into stage i % NSTAGE (a tile wholly past the span
	 * not at all); one commit group a round, empty past the last, so that
	 * the count is uniform */
	auto load_tile = [&](int i) {
		if (i < ntile)
#pragma unroll
			for (int u = 0; u < TR; u++)
				if (u == 0 || t0 + i * RT + u * T < t1)
					stage_tile(stg + (uint32_t)(i % NSTAGE) * R::STAGEB + u * TILEB, cache,
						   t0 + i * RT + u * T, t1, tid);
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
		q_load(qv, q + (size_t)g * CW, q + (size_t)(g + 8) * CW, kq, lane);
		float m0, m1; /* rows g and g + 8 */
		q_max(qv, m0, m1);
		if (nh == 0 && t4 == 0) {
			sqm[kq * HG + g] = m0;
			sqm[kq * HG + g + 8] = m1;
		}
		__syncthreads();
		const float s0 = pow2f(q_scale_exp(q_row_max(sqm, HG, g)));
		const float s1 = pow2f(q_scale_exp(q_row_max(sqm, HG, g + 8)));
		qinv[0] = pow2f(-q_scale_exp(q_row_max(sqm, HG, 2 * warp)));
		qinv[1] = pow2f(-q_scale_exp(q_row_max(sqm, HG, 2 * warp + 1)));
		q_split(qv, s0, s1, qh, ql);
	}

	float acc[8][4]; /* O * 2^14: heads g, g + 8 x this warp's 8 n-tiles */
#pragma unroll
	for (int j = 0; j < 8; j++)
#pragma unroll
		for (int r = 0; r < 4; r++)
			acc[j][r] = 0.f;
	float m_run[2] = { -INFINITY, -INFINITY }, l_run[2] = { 0.f, 0.f }; /* heads 2w, 2w+1 */
	/* this lane's ldmatrix addresses within a stage, and of the probabilities */
	const uint32_t koff = (uint32_t)(nh * 16 + ldk_row(lane)) * ROWB + (kq * KSQ * 16 + ldk_col(lane)) * 2;
	const uint32_t voff = (uint32_t)ldv_row(lane) * ROWB + (warp * 64 + ldv_col(lane)) * 2;
	const uint32_t poff = (uint32_t)(lda_row(lane) * PR + lda_col(lane)) * 2;
	const uint32_t ph[1] = { smem_u32(sph) + poff }, pl[1] = { smem_u32(spl) + poff };

	for (int i = 0; i < ntile; i++) {
		cp_async_wait<NSTAGE - 2>(); /* this thread's copies of tile i */
		__syncthreads();             /* everyone's; and tile i-1's stage is free */
		load_tile(i + NSTAGE - 1);
		const uint32_t st = stg + (uint32_t)(i % NSTAGE) * R::STAGEB;
		const int tb = t0 + i * RT;
		/* a round whose second tile is wholly past the span (its last, of
		 * 32 rows or fewer) is done as a round of 32: the same bits as a
		 * round of 64 whose second tile is masked (p 0 there adds
		 * nothing), without that tile's products */
		const bool half = TR > 1 && tb + T >= t1;

#pragma unroll
		for (int u = 0; u < TR; u++) { /* partial scores of this warp's k-quarter and 16 rows a tile */
			if (u > 0 && half)
				break;
			float sh[2][4], sl[2][4];
			score_quarter<1>(sh, sl, qh, ql, st + u * TILEB + koff);
			score_store<1, SCR>(sc + kq * HG * SCR + u * T + nh * 16, sh, sl, lane);
		}
		__syncthreads();

		/* online softmax: heads 2w, 2w+1, a lane a row of each tile */
#pragma unroll
		for (int j = 0; j < 2; j++) {
			const int h = 2 * warp + j;
			float alpha;
			if (TR == 1 || half) {
				const float dot = quarter_sum(sc + h * SCR + lane, HG * SCR);
				const float s[1] = { tb + lane < t1 ? dot * qinv[j] * a.scale : -INFINITY };
				float p[1];
				softmax_step<1>(s, p, m_run[j], l_run[j], alpha);
				__half hi, lo;
				split_h(p[0] * PSCALE, hi, lo);
				sph[h * PR + lane] = hi;
				spl[h * PR + lane] = lo;
			} else {
				const float d0 = quarter_sum(sc + h * SCR + lane, HG * SCR);
				const float d1 = quarter_sum(sc + h * SCR + T + lane, HG * SCR);
				const float s[2] = { tb + lane < t1 ? d0 * qinv[j] * a.scale : -INFINITY,
						     tb + T + lane < t1 ? d1 * qinv[j] * a.scale : -INFINITY };
				float p[2];
				softmax_step<2>(s, p, m_run[j], l_run[j], alpha);
				__half hi, lo;
				split_h(p[0] * PSCALE, hi, lo);
				sph[h * PR + lane] = hi;
				spl[h * PR + lane] = lo;
				split_h(p[1] * PSCALE, hi, lo);
				sph[h * PR + T + lane] = hi;
				spl[h * PR + T + lane] = lo;
			}
			if (lane == 0)
				sal[h] = alpha;
		}
		__syncthreads();

		{ /* this round's value product, from zero, then acc = alpha * acc + it */
			float tv[1][8][4];
			if (TR == 1 || half)
				value_tile<1, 4, 2>(tv, ph, pl, st + voff);
			else
				value_tile<1, 4, 2 * TR>(tv, ph, pl, st + voff);
			const float a0 = sal[fc_row(lane, 0)], a1 = sal[fc_row(lane, 2)];
#pragma unroll
			for (int j = 0; j < 8; j++)
#pragma unroll
				for (int r = 0; r < 4; r++)
					acc[j][r] = fmaf(acc[j][r], r < 2 ? a0 : a1, tv[0][j][r]);
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
 * X4_ECUDA when a launch fails.  NSTAGE: rounds in flight (the library's
 * instances are 2; the lab also times 4, which was no faster); TR: tiles
 * a round. */
template <int NSTAGE = 2, int TR = 1>
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
	constexpr size_t smem = smem_bytes<NSTAGE, TR>();
	static std::atomic<unsigned long long> ready{ 0 }; /* mma_device_ready's devices */
	if (int rc = mma_device_ready(mla_mma_kernel<NSTAGE, TR>, smem, ready, "x4k_mla_decode_mma", e))
		return rc;
	const int nsplit = mla_nsplit(max_ctx);
	const mla_params a = mla_decode_params(qt, cache, pos, ob, ws, n_head, kv_lora, CW, max_ctx,
					       kq_scale, nsplit);
	x4p::launch(mla_mma_kernel<NSTAGE, TR>, dim3(nsplit, n_head / HG, 1), dim3(THREADS), smem, s, a);
	int rc = x4_cuda_launched("x4k_mla_decode_mma: attention", e);
	if (rc || nsplit == 1)
		return rc;
	return mla_combine_launch(a, nsplit, s, "x4k_mla_decode_mma: combine", e);
}

} /* namespace mla_mma */

#endif
