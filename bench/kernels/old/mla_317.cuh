/* The decode attention of commit 317feb9 (kernels/mla_attn.cuh and
 * mla_decode.cu as they were: splits of at least 128 rows, loads one
 * dependent round at a time), kept for bench/kernels/mla_decode.cu; the
 * namespace renamed mla_317, the entry point a plain launcher.  Not built
 * into the library. */
#ifndef X4_MLA_317_CUH
#define X4_MLA_317_CUH

#include "core_dev.cuh"

namespace mla_317 {
using namespace x4c;


constexpr int MLA_HG = 8;         /* heads a block (one warp each in the softmax) */
constexpr int MLA_T = 32;         /* rows a tile (one lane each in the softmax) */
constexpr int MLA_THREADS = 256;  /* 8 warps x 4 rows = one tile of scores */
constexpr int MLA_MIN_SPAN = 128; /* rows a split at least: partials stay small */
constexpr int MLA_MAX_SPLIT = 128;

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

inline int mla_nsplit(int max_ctx)
{
	int n = (max_ctx + MLA_MIN_SPAN - 1) / MLA_MIN_SPAN;
	return n < 1 ? 1 : n > MLA_MAX_SPLIT ? MLA_MAX_SPLIT : n;
}

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

__device__ __forceinline__ int mla_len(const mla_params &a, int tok)
{
	int len = *a.pos + tok + 1;
	return len > a.max_ctx ? a.max_ctx : len;
}

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

/* static: each including file gets its own copy of the kernel */
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

	for (int i = tid; i < MLA_HG * cw; i += MLA_THREADS) {
		int h = i / cw;
		sq[i] = h0 + h < a.n_head ? a.qt[((size_t)tok * a.n_head + h0) * cw + i] : 0.f;
	}
	float m_run = -INFINITY, l_run = 0; /* head `warp`'s, the same in every lane */
	float acc[MLA_HG][2];
#pragma unroll
	for (int h = 0; h < MLA_HG; h++)
		acc[h][0] = acc[h][1] = 0.f;
	__syncthreads();
	const float2 *sq2 = reinterpret_cast<const float2 *>(sq);

	for (int tb = t0; tb < t1; tb += MLA_T) {
		/* scores: rows pb..pb+3 x heads 0..7, index j*8 + h */
		const int pb = tb + warp * 4;
		float v[32];
#pragma unroll
		for (int i = 0; i < 32; i++)
			v[i] = 0.f;
		for (int cp = lane; cp < cp2; cp += 32) {
			float2 kf[4];
#pragma unroll
			for (int j = 0; j < 4; j++)
				kf[j] = pb + j < t1 ? __half22float2(a.cache[(size_t)(pb + j) * cp2 + cp])
						    : make_float2(0.f, 0.f);
#pragma unroll
			for (int h = 0; h < MLA_HG; h++) {
				float2 q = sq2[h * cp2 + cp];
#pragma unroll
				for (int j = 0; j < 4; j++)
					v[j * 8 + h] = fmaf(q.y, kf[j].y, fmaf(q.x, kf[j].x, v[j * 8 + h]));
			}
		}
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
			const int n = min(MLA_T, t1 - tb);
#pragma unroll 4
			for (int j = 0; j < n; j++) {
				float2 vv = __half22float2(a.cache[(size_t)(tb + j) * cp2 + tid]);
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

#undef X4C_RS_STEP


__global__ void __launch_bounds__(MLA_MAX_SPLIT)
mla_combine_kernel(mla_params a, int nsplit)
{
	__shared__ float sw[MLA_MAX_SPLIT];
	__shared__ float red[32];
	const int h = blockIdx.x, tok = blockIdx.y, tid = threadIdx.x;
	int span, nsp;
	mla_span(mla_len(a, tok), nsplit, &span, &nsp);
	float *o = a.ob + ((size_t)tok * a.n_head + h) * a.kv_lora;
	if (nsp == 0) { /* nothing to attend: a defined zero (uniform branch) */
		for (int c = tid; c < a.kv_lora; c += blockDim.x)
			o[c] = 0.f;
		return;
	}
	const size_t base = (size_t)tok * nsplit * a.n_head + h;
	float m = tid < nsp ? a.pm[base + (size_t)tid * a.n_head] : -INFINITY;
	const float M = block_max(m, red);
	float w = tid < nsp ? expf(m - M) : 0.f;
	float lw = tid < nsp ? a.pl[base + (size_t)tid * a.n_head] * w : 0.f;
	const float L = block_sum(lw, red);
	if (tid < MLA_MAX_SPLIT)
		sw[tid] = w;
	__syncthreads();
	const float inv = 1.0f / L;
	for (int c = tid; c < a.kv_lora; c += blockDim.x) {
		float t = 0;
		for (int i = 0; i < nsp; i++)
			t = fmaf(__ldg(a.pacc + (base + (size_t)i * a.n_head) * a.kv_lora + c), sw[i], t);
		o[c] = t * inv;
	}
}


static inline size_t workspace_bytes(int n_head, int kv_lora, int max_ctx)
{
	size_t ns = (size_t)mla_nsplit(max_ctx);
	return sizeof(float) * ns * (size_t)n_head * (2 + (size_t)kv_lora) + 256;
}

/* x4k_mla_decode as 317feb9 launched it. */
static inline void decode(int n_head, int kv_lora, int d_rope, const float *qt, const uint16_t *cache,
			  int max_ctx, const int *pos, float kq_scale, float *ob, void *ws, cudaStream_t s)
{
	const int cw = kv_lora + d_rope, nsplit = mla_nsplit(max_ctx);
	mla_params a;
	a.qt = qt;
	a.cache = reinterpret_cast<const __half2 *>(cache);
	a.pos = pos;
	a.ob = ob;
	a.pm = (float *)ws;
	a.pl = a.pm + (size_t)nsplit * n_head;
	a.pacc = a.pl + (size_t)nsplit * n_head;
	if ((uintptr_t)a.pacc % 8)
		a.pacc += 1;
	a.n_head = n_head;
	a.kv_lora = kv_lora;
	a.cw = cw;
	a.max_ctx = max_ctx;
	a.scale = kq_scale;
	dim3 grid(nsplit, (n_head + MLA_HG - 1) / MLA_HG, 1);
	mla_attn_kernel<<<grid, MLA_THREADS, mla_smem_bytes(cw), s>>>(a);
	if (nsplit > 1)
		mla_combine_kernel<<<dim3(n_head, 1), MLA_MAX_SPLIT, 0, s>>>(a, nsplit);
}

} /* namespace mla_317 */

#endif
