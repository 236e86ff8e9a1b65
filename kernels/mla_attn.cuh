/*
 * mla_attn.cuh - the absorbed MLA attention core (docs/forward.md 6.4) shared by the
 * decode (mla_decode.cu) and prefill (mla_prefill.cu) entry points.
 *
 * A block takes 8 heads of one query token and a span of cache rows, in
 * tiles of 32 rows.  Scores: each warp takes 4 rows of the tile and all 8
 * heads; a lane walks the 576-wide row in half2 steps (coalesced fp16 loads
 * straight from the cache, the queries from shared memory) holding 32
 * partial dots, which one reduce-scatter (31 shuffles) turns into one full
 * score a lane.  Softmax: warp h owns head h's running max and sum, a lane
 * a row.  Values: a thread owns two latent columns for the 8 heads.  All fp32.
 * Decode splits the rows across blocks (flash-decoding) and a second kernel
 * combines the partial max/sum/accumulators; the split is sized from the
 * context length read on the device, over a grid sized from max_ctx.
 *
 * Every phase issues its global loads in one round, ahead of their use: the
 * queries (float2, up to 16 a thread), a tile's score operands (CPI half2
 * of each of a warp's 4 rows a lane, CPI a template constant), loaded
 * while the tile before is computed, and a tile's value rows (32 a thread,
 * mostly from L1: the score phase just read them), loaded before the
 * reduce-scatter and the softmax that they wait behind.  The loop that
 * walked them one dependent load at a time cost 61 us a layer at 513
 * positions in the profile of 317feb9.
 */
#ifndef X4_MLA_ATTN_CUH
#define X4_MLA_ATTN_CUH

#include "core_dev.cuh"
#include "pdl.cuh"

namespace x4c {

constexpr int MLA_HG = 8;         /* heads a block (one warp each in the softmax) */
constexpr int MLA_T = 32;         /* rows a tile (one lane each in the softmax) */
constexpr int MLA_THREADS = 256;  /* 8 warps x 4 rows = one tile of scores */
constexpr int MLA_MIN_SPAN = X4K_MLA_MIN_SPAN;  /* rows a split at least: one tile */
constexpr int MLA_MAX_SPLIT = X4K_MLA_MAX_SPLIT; /* 256 blocks of 8 heads at the model's 32: two an SM;
				   * more splits would move more partial bytes than cache
				   * bytes past ~4096 positions (66 KB of partials a split) */
constexpr int MLA_QB = 16;        /* float2 query loads a thread: 8 heads x 1024 / 512 */

/* The rows a split covers and how many splits are in use, for len rows
 * over nsplit available splits (same on the host and in both kernels). */
__host__ __device__ inline void mla_span(int len, int nsplit, int *span, int *nsp)
{
	int s = (len + nsplit - 1) / nsplit;
	s = (s + MLA_T - 1) / MLA_T * MLA_T;
	if (s < MLA_MIN_SPAN)
		s = MLA_MIN_SPAN;
	*span = s;
	*nsp = len > 0 ? (len + s - 1) / s : 0;
}

inline int mla_nsplit(int max_ctx) { return x4k_mla_nsplit(max_ctx); }

inline size_t mla_smem_bytes(int cw)
{
	return sizeof(float) * ((size_t)MLA_HG * cw + 2 * MLA_HG * MLA_T + 3 * MLA_HG);
}

struct mla_params {
	const float *qt;       /* [n_tok][n_head][cw] */
	const __half2 *cache;  /* [max_ctx][cw/2] */
	const int *pos;        /* token t is at *pos + t and sees rows [0, *pos + t] */
	float *ob;             /* [n_tok][n_head][kv_lora] (one split) */
	float *pm, *pl;        /* [n_tok][nsplit][n_head] partial max and sum */
	float *pacc;           /* [n_tok][nsplit][n_head][kv_lora] unnormalised */
	int n_head, kv_lora, cw, max_ctx;
	float scale;
};

/* A prefill chunk's parameters: one span a token, no partials. */
inline mla_params mla_prefill_params(const float *qt, const uint16_t *cache, const int *pos,
				     float *ob, int n_head, int kv_lora, int cw, int max_ctx,
				     float scale)
{
	mla_params a = {};
	a.qt = qt;
	a.cache = reinterpret_cast<const __half2 *>(cache);
	a.pos = pos;
	a.ob = ob;
	a.n_head = n_head;
	a.kv_lora = kv_lora;
	a.cw = cw;
	a.max_ctx = max_ctx;
	a.scale = scale;
	return a;
}

/* One decode token's parameters, the partials carved from ws in the layout
 * x4k_mla_decode_workspace_bytes counts: pm, pl [nsplit][n_head], then pacc
 * [nsplit][n_head][kv_lora] (both decode kernels write it, the combine reads it). */
inline mla_params mla_decode_params(const float *qt, const uint16_t *cache, const int *pos,
				    float *ob, void *ws, int n_head, int kv_lora, int cw,
				    int max_ctx, float scale, int nsplit)
{
	mla_params a = mla_prefill_params(qt, cache, pos, ob, n_head, kv_lora, cw, max_ctx, scale);
	a.pm = (float *)ws;
	a.pl = a.pm + (size_t)nsplit * n_head;
	a.pacc = a.pl + (size_t)nsplit * n_head;
	if ((uintptr_t)a.pacc % 8) /* float2 stores: 8-byte aligned rows (the +256 covers it) */
		a.pacc += 1;
	return a;
}

/* Rows token tok sees with the chunk's first at position p.
 *
 * mla_pos_early: the decode step's attention kernels (the cache store, the
 * tensor-core attention, the combine) read the position before their wait
 * (pdl.cuh), past L1.  That is safe: it is written only by the copy that
 * uploads it ahead of a step's (or a prefill chunk's) first kernel, in
 * stream order, so every kernel after it starts after the copy completed;
 * and it takes one dependent round trip off each one's chain after the
 * wait: 1.007x of the step at 512 tokens of context, 1.020x at 4,096
 * (bench/RESULTS.md 38). */
__device__ __forceinline__ int mla_len_at(const mla_params &a, int p, int tok)
{
	int len = p + tok + 1;
	return len > a.max_ctx ? a.max_ctx : len;
}

__device__ __forceinline__ int mla_len(const mla_params &a, int tok) { return mla_len_at(a, *a.pos, tok); }

/* Turns lane-partial v[0..31] into full sums, lane l ending with index l. */
#define X4C_RS_STEP(o, n)                                                   \
	{                                                                   \
		bool up = lane & (o);                                       \
		_Pragma("unroll") for (int i = 0; i < (n) / 2; i++)         \
		{                                                           \
			float send = up ? v[i] : v[i + (n) / 2];            \
			float keep = up ? v[i + (n) / 2] : v[i];            \
			v[i] = keep + __shfl_xor_sync(X4C_FULL, send, (o)); \
		}                                                           \
	}

/* Two fp16 values packed in a 32-bit word (the lower address in the low half). */
__device__ __forceinline__ float2 h2f2(uint32_t u)
{
	return make_float2(__half2float(__ushort_as_half((unsigned short)(u & 0xffffu))),
			   __half2float(__ushort_as_half((unsigned short)(u >> 16))));
}

/* The score phase's half2 steps a lane: the smallest instance that covers a
 * row of cw/2 half2 in steps of 32. */
inline int mla_cpi(int cw)
{
	const int n = (cw / 2 + 31) / 32;
	return n <= 1 ? 1 : n <= 2 ? 2 : n <= 4 ? 4 : n <= 9 ? 9 : 16;
}

#define X4C_MLA_CPI_SWITCH(cw, CPI, ...)                                 \
	switch (mla_cpi(cw)) {                                          \
	case 1: { constexpr int CPI = 1; __VA_ARGS__; } break;          \
	case 2: { constexpr int CPI = 2; __VA_ARGS__; } break;          \
	case 4: { constexpr int CPI = 4; __VA_ARGS__; } break;          \
	case 9: { constexpr int CPI = 9; __VA_ARGS__; } break;          \
	default: { constexpr int CPI = 16; __VA_ARGS__; } break;        \
	}

/* static: each including file gets its own copy of the kernel */
template <int CPI>
static __global__ void __launch_bounds__(MLA_THREADS) mla_attn_kernel(mla_params a)
{
	extern __shared__ __align__(16) float sm[];
	const int cw = a.cw, cp2 = cw / 2, kv2 = a.kv_lora / 2;
	float *sq = sm;                   /* [HG][cw] the 8 heads' queries */
	float *ss = sq + MLA_HG * cw;     /* [HG][T] scores of a tile */
	float *spt = ss + MLA_HG * MLA_T; /* [T][HG] probabilities, row-major by row */
	float *sal = spt + MLA_T * MLA_HG; /* [HG] rescale of the accumulators */
	float *sml = sal + MLA_HG;        /* [2][HG] final max and sum */
	const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
	const int tok = blockIdx.z, h0 = blockIdx.y * MLA_HG, split = blockIdx.x;
	const int nsplit = gridDim.x;
	x4p::trigger();
	x4p::wait(); /* the position, the queries and this step's cache row (pdl.cuh) */
	const int len = mla_len(a, tok);
	int span, nsp;
	mla_span(len, nsplit, &span, &nsp);
	if (nsp == 0 && nsplit == 1) { /* nothing to attend: a defined zero */
		for (int i = tid; i < MLA_HG * a.kv_lora; i += MLA_THREADS) {
			int h = i / a.kv_lora;
			if (h0 + h < a.n_head)
				a.ob[((size_t)tok * a.n_head + h0) * a.kv_lora + i] = 0.f;
		}
		return;
	}
	if (split >= nsp) /* uniform over the block, before any barrier */
		return;
	const int t0 = split * span, t1 = min(len, t0 + span);

	{
		/* the 8 heads' queries, every load of the thread first (cw is even) */
		const int n2 = MLA_HG * cp2, nh2 = (a.n_head - h0) * cp2;
		const float2 *q2 = reinterpret_cast<const float2 *>(a.qt + ((size_t)tok * a.n_head + h0) * cw);
		float2 qv[MLA_QB];
#pragma unroll
		for (int k = 0; k < MLA_QB; k++) {
			const int i = tid + k * MLA_THREADS;
			qv[k] = i < n2 && i < nh2 ? q2[i] : make_float2(0.f, 0.f);
		}
		float2 *sq2w = reinterpret_cast<float2 *>(sq);
#pragma unroll
		for (int k = 0; k < MLA_QB; k++) {
			const int i = tid + k * MLA_THREADS;
			if (i < n2)
				sq2w[i] = qv[k];
		}
	}
	float m_run = -INFINITY, l_run = 0; /* head `warp`'s, the same in every lane */
	float acc[MLA_HG][2];
#pragma unroll
	for (int h = 0; h < MLA_HG; h++)
		acc[h][0] = acc[h][1] = 0.f;
	__syncthreads();
	const float2 *sq2 = reinterpret_cast<const float2 *>(sq);
	const uint32_t *cu = reinterpret_cast<const uint32_t *>(a.cache); /* half2 words */

	/* a tile's score operands: rows tb + warp*4 .. +3, CPI half2 of each a lane */
	auto load_k = [&](int tb, uint32_t (&kr)[CPI][4]) {
		const int pb = tb + warp * 4;
#pragma unroll
		for (int i = 0; i < CPI; i++) {
			const int cp = lane + 32 * i;
#pragma unroll
			for (int j = 0; j < 4; j++)
				kr[i][j] = cp < cp2 && pb + j < t1 ? __ldg(cu + (size_t)(pb + j) * cp2 + cp) : 0u;
		}
	};
	uint32_t kr[CPI][4];
	load_k(t0, kr);
	for (int tb = t0; tb < t1; tb += MLA_T) {
		/* scores: rows pb..pb+3 x heads 0..7, index j*8 + h */
		const int pb = tb + warp * 4;
		float v[32];
#pragma unroll
		for (int i = 0; i < 32; i++)
			v[i] = 0.f;
		/* the next tile's operands in flight while this one is computed */
		uint32_t kn[CPI][4];
		load_k(tb + MLA_T, kn);
#pragma unroll
		for (int i = 0; i < CPI; i++) {
			const int cp = lane + 32 * i;
			if (cp >= cp2)
				break;
			float2 kf[4];
#pragma unroll
			for (int j = 0; j < 4; j++)
				kf[j] = h2f2(kr[i][j]);
#pragma unroll
			for (int h = 0; h < MLA_HG; h++) {
				float2 q = sq2[h * cp2 + cp];
#pragma unroll
				for (int j = 0; j < 4; j++)
					v[j * 8 + h] = fmaf(q.y, kf[j].y, fmaf(q.x, kf[j].x, v[j * 8 + h]));
			}
		}
		/* this tile's value rows, needed after the softmax: loaded now */
		const int n = min(MLA_T, t1 - tb);
		uint32_t vr[MLA_T];
#pragma unroll
		for (int j = 0; j < MLA_T; j++)
			vr[j] = tid < kv2 && j < n ? cu[(size_t)(tb + j) * cp2 + tid] : 0u;
		X4C_RS_STEP(16, 32)
		X4C_RS_STEP(8, 16)
		X4C_RS_STEP(4, 8)
		X4C_RS_STEP(2, 4)
		X4C_RS_STEP(1, 2)
		{
			int j = lane >> 3, h = lane & 7;
			ss[h * MLA_T + warp * 4 + j] = pb + j < t1 ? v[0] * a.scale : -INFINITY;
		}
		__syncthreads();

		/* online softmax: warp = head, lane = row */
		{
			float s = ss[warp * MLA_T + lane];
			float mnew = fmaxf(m_run, warp_max(s)); /* finite: a tile has a row */
			float p = expf(s - mnew);
			float alpha = expf(m_run - mnew);
			l_run = l_run * alpha + warp_sum(p);
			m_run = mnew;
			spt[lane * MLA_HG + warp] = p;
			if (lane == 0)
				sal[warp] = alpha;
		}
		__syncthreads();

		/* values: columns 2*tid, 2*tid+1 of the latent */
		if (tid < kv2) {
#pragma unroll
			for (int h = 0; h < MLA_HG; h++) {
				acc[h][0] *= sal[h];
				acc[h][1] *= sal[h];
			}
#pragma unroll
			for (int j = 0; j < MLA_T; j++) {
				if (j >= n)
					break;
				float2 vv = h2f2(vr[j]);
				float4 p0 = *reinterpret_cast<const float4 *>(spt + j * MLA_HG);
				float4 p1 = *reinterpret_cast<const float4 *>(spt + j * MLA_HG + 4);
				float pp[8] = { p0.x, p0.y, p0.z, p0.w, p1.x, p1.y, p1.z, p1.w };
#pragma unroll
				for (int h = 0; h < MLA_HG; h++) {
					acc[h][0] = fmaf(pp[h], vv.x, acc[h][0]);
					acc[h][1] = fmaf(pp[h], vv.y, acc[h][1]);
				}
			}
		}
		__syncthreads(); /* ss, spt and sal are rewritten by the next tile */
#pragma unroll
		for (int i = 0; i < CPI; i++)
#pragma unroll
			for (int j = 0; j < 4; j++)
				kr[i][j] = kn[i][j];
	}

	if (lane == 0) {
		sml[warp] = m_run;
		sml[MLA_HG + warp] = l_run;
	}
	__syncthreads();
	if (nsplit == 1) {
		if (tid < kv2) {
#pragma unroll
			for (int h = 0; h < MLA_HG; h++) {
				if (h0 + h >= a.n_head)
					break;
				float inv = 1.0f / sml[MLA_HG + h];
				float2 *o = reinterpret_cast<float2 *>(
					a.ob + ((size_t)tok * a.n_head + h0 + h) * a.kv_lora);
				o[tid] = make_float2(acc[h][0] * inv, acc[h][1] * inv);
			}
		}
		return;
	}
	const size_t base = ((size_t)tok * nsplit + split) * a.n_head;
	if (tid < MLA_HG && h0 + tid < a.n_head) {
		a.pm[base + h0 + tid] = sml[tid];
		a.pl[base + h0 + tid] = sml[MLA_HG + tid];
	}
	if (tid < kv2) {
#pragma unroll
		for (int h = 0; h < MLA_HG; h++) {
			if (h0 + h >= a.n_head)
				break;
			float2 *o = reinterpret_cast<float2 *>(a.pacc + (base + h0 + h) * a.kv_lora);
			o[tid] = make_float2(acc[h][0], acc[h][1]);
		}
	}
}

constexpr int MLA_COMB_COLS = 128; /* latent columns a combine block */
static_assert(MLA_MAX_SPLIT <= MLA_COMB_COLS, "a combine thread a split's max and sum");

/* The decode splits combined (every decode path's second kernel: the fp32
 * one's and the tensor-core one's, mla_mma.cuh).  Block (head, 128
 * columns), a thread a column.  Every load of the thread is issued at once,
 * behind the position alone: its column of each split's accumulator
 * (nsp <= MLA_MAX_SPLIT values in registers), and, for thread i < nsp,
 * split i's max and sum.  Then the splits' weights exp(m_i - M) and L, and
 * the column's sum in split order.  (Loading the accumulators after the
 * two reductions, eight at a time, put five memory round trips in a row:
 * 5.6-6.0 us a layer in the step's profile, with no bytes to speak of.) */
static __global__ void __launch_bounds__(MLA_COMB_COLS)
mla_combine_kernel(mla_params a, int nsplit)
{
	__shared__ float sw[MLA_MAX_SPLIT];
	__shared__ float red[32];
	const int h = blockIdx.x, tok = blockIdx.z, tid = threadIdx.x;
	const int c = blockIdx.y * MLA_COMB_COLS + tid;
	const int p0 = __ldcg(a.pos); /* before the wait: mla_pos_early */
	x4p::trigger();
	x4p::wait();
	int span, nsp;
	mla_span(mla_len_at(a, p0, tok), nsplit, &span, &nsp);
	float *o = a.ob + ((size_t)tok * a.n_head + h) * a.kv_lora;
	if (nsp == 0) { /* nothing to attend: a defined zero (uniform branch) */
		if (c < a.kv_lora)
			o[c] = 0.f;
		return;
	}
	const size_t base = (size_t)tok * nsplit * a.n_head + h;
	const bool col = c < a.kv_lora;
	const float *p = a.pacc + base * a.kv_lora + c;
	const size_t stride = (size_t)a.n_head * a.kv_lora;
	float pv[MLA_MAX_SPLIT];
#pragma unroll
	for (int j = 0; j < MLA_MAX_SPLIT; j++)
		pv[j] = col && j < nsp ? __ldg(p + (size_t)j * stride) : 0.f;
	const float m = tid < nsp ? a.pm[base + (size_t)tid * a.n_head] : -INFINITY;
	const float l = tid < nsp ? a.pl[base + (size_t)tid * a.n_head] : 0.f;
	const float M = block_max(m, red);
	float w = tid < nsp ? expf(m - M) : 0.f;
	float lw = tid < nsp ? l * w : 0.f;
	const float L = block_sum(lw, red);
	if (tid < MLA_MAX_SPLIT)
		sw[tid] = w;
	__syncthreads();
	if (!col)
		return;
	const float inv = 1.0f / L;
	float t = 0;
#pragma unroll
	for (int j = 0; j < MLA_MAX_SPLIT; j++)
		if (j < nsp)
			t = fmaf(pv[j], sw[j], t);
	o[c] = t * inv;
}

/* The combine of a decode's nsplit partials into a.ob (both decode paths). */
inline int mla_combine_launch(const mla_params &a, int nsplit, cudaStream_t s, const char *what,
			      x4_err *e)
{
	dim3 cgrid(a.n_head, (a.kv_lora + MLA_COMB_COLS - 1) / MLA_COMB_COLS, 1);
	x4p::launch(mla_combine_kernel, cgrid, dim3(MLA_COMB_COLS), 0, s, a, nsplit);
	return x4_cuda_launched(what, e);
}

#undef X4C_RS_STEP

} /* namespace x4c */

#endif
