/*
 * hc.cu - the hyper-connection gate (docs/forward.md 5.1) and the stream
 * update (docs/forward.md 5.2 A4/F4), all fp32.
 *
 * The fused path is one launch a sublayer.  A gate reads 688 KB of BF16
 * weights for one token (24 rows of 14336): at decode sizes (up to
 * X4K_HC_SPLIT_MAX_TOK tokens) the projection is split across the card, a block
 * per 32 columns of D (112 blocks at D 3584), so that every weight load of
 * the gate is in flight at once and no SM streams more than 6 KB.  A block
 * first issues its weight loads (they depend on nothing), then forms its
 * columns of the state (the previous sublayer's update fused in front: a
 * thread a column, every stream of it, so H_out may be H), its 24 partial
 * dots and its partial sum of squares, and leaves them in the workspace.
 * The last block to finish (a counter) adds the partials in block order,
 * a warp a coefficient row (the same bits whichever block is last), then
 * does the coefficients on one warp (x4c::hc_coef_warp: a lane an element
 * of the 4x4) while its other warps do the collapse, which needs
 * only pre, and then (x4k_hc_pre_norm) the sublayer's RMSNorm of x, which
 * saves the norm's launch.  With a side stream (x4k_hc_pre_norm's side,
 * the decode step's) the coefficients leave the gate's launch: its warp 0
 * writes the normalised dots and hc_coef_kernel finishes them on the side
 * stream, off the chain of launches (the Sinkhorn was ~1.9 us of every
 * gate; the step 1.04x faster: bench/RESULTS.md 36).  Prefill-sized calls
 * use one block a token (hc_fused_kernel; the norm then runs as its own
 * launch).
 *
 * The eager path does the same arithmetic in separate launches (update, RMS,
 * projection, coefficients, collapse): the lever x4-bench-abab prices.
 */
#include "core_dev.cuh"
#include "pdl.cuh"

namespace {

constexpr int HC_THREADS = 256;
/* The split's shape is lib/x4_kern.h's (section 0), which the workspace's
 * size is counted from: columns of D a block, and the token count up to
 * which the gate is split. */
constexpr int HC_CW = X4K_HC_CW;

int hc_nsplit(int D, int n_tok) { return x4k_hc_nsplit(D, n_tok); }

template <int VEC>
__device__ __forceinline__ void load_vec(const float *p, float *v)
{
	if (VEC == 2) {
		float2 t = *reinterpret_cast<const float2 *>(p);
		v[0] = t.x;
		v[VEC - 1] = t.y;
	} else {
		v[0] = *p;
	}
}

template <int VEC>
__device__ __forceinline__ void load_vec_cg(const float *p, float *v)
{
	if (VEC == 2) {
		float2 t = __ldcg(reinterpret_cast<const float2 *>(p));
		v[0] = t.x;
		v[VEC - 1] = t.y;
	} else {
		v[0] = __ldcg(p);
	}
}

template <int VEC>
__device__ __forceinline__ void store_vec(float *p, const float *v)
{
	if (VEC == 2)
		*reinterpret_cast<float2 *>(p) = make_float2(v[0], v[VEC - 1]);
	else
		*p = v[0];
}

/* The sublayer's RMSNorm fused behind the collapse (x4k_hc_pre_norm): gain
 * [D], eps, xh [n_tok][D]; red is HC_THREADS / 32 floats of shared memory.
 * xh NULL: no norm. */
struct hc_norm_args {
	const float *gain = nullptr;
	float eps = 0.f;
	float *xh = nullptr;
	float *red = nullptr;
};

/* The collapse's operands, loaded by warps 1.. before the block has the
 * coefficients, so that they travel with the partials' loads instead of
 * after them: the first HC_TAIL steps of (HC_THREADS - 32) * VEC columns
 * of every stream of Hsrc and of the norm's gain (all of D at the model's
 * 3584 and VEC 2).  Columns past them are loaded where they are used. */
constexpr int HC_TAIL = 8;
template <int NHC, int VEC> struct hc_tail {
	float h[HC_TAIL][NHC][VEC];
	float g[HC_TAIL][VEC];
};

template <int NHC, int VEC>
__device__ __forceinline__ void hc_tail_load(hc_tail<NHC, VEC> &t, int D, const float *Hsrc,
					     const float *__restrict__ gain)
{
	const int tid = threadIdx.x, step = (HC_THREADS - 32) * VEC;
	if (tid < 32)
		return;
#pragma unroll
	for (int u = 0; u < HC_TAIL; u++) {
		const int c0 = (tid - 32) * VEC + u * step;
		if (c0 >= D)
			break;
#pragma unroll
		for (int s = 0; s < NHC; s++) /* written by other blocks of this launch: L2 */
			load_vec_cg<VEC>(Hsrc + (size_t)s * D + c0, t.h[u][s]);
		if (gain)
			load_vec<VEC>(gain + c0, t.g[u]);
	}
}

/* x = sum_s pre[s] h[s] at VEC columns, the sum in source order. */
template <int NHC, int VEC>
__device__ __forceinline__ void hc_collapse_at(const float *pre, const float (&h)[NHC][VEC], float *xv)
{
#pragma unroll
	for (int v = 0; v < VEC; v++) {
		float t = 0;
#pragma unroll
		for (int s = 0; s < NHC; s++)
			t = __fmaf_rn(pre[s], h[s][v], t);
		xv[v] = t;
	}
}

/* docs/forward.md 5.1 steps 2 and 4-9 once the block holds the token's 24
 * dots and sum of squares in s_tot and warps 1.. hold t (hc_tail_load): the
 * coefficients on warp 0 (written to coef) while warps 1.. do the collapse
 * x = sum_s pre[s] Hsrc[s] (each computing pre itself: no barrier) and then,
 * with nm.xh, the sublayer's RMSNorm of x (docs/forward.md 3.1): the
 * collapse threads' sums of squares in a fixed order (warp trees, then the
 * warps in order, over a named barrier that warp 0, busy with the
 * Sinkhorn, does not join), then xh = (x * inv) * gain, x and gain from
 * registers.  With mdefer, warp 0 leaves the token's normalised
 * projections there instead (hc_coef_kernel finishes the coefficients on
 * a side stream: x4k_hc_pre_norm's side).  blockDim.x is HC_THREADS. */
template <int NHC, int VEC>
__device__ __forceinline__ void hc_finish(const x4k_hc_cfg &c, int tok, const float *s_tot,
					  float *s_m, const float *__restrict__ base,
					  const float *__restrict__ scale, const float *Hsrc,
					  float *__restrict__ x, float *__restrict__ coef,
					  const hc_tail<NHC, VEC> &t, const hc_norm_args &nm,
					  float *__restrict__ mdefer = nullptr)
{
	constexpr int NC = NHC * (2 + NHC);
	const int D = c.D, tid = threadIdx.x, step = (HC_THREADS - 32) * VEC;
	const size_t K = (size_t)NHC * D;
	const float inv = 1.0f / sqrtf(s_tot[NC] / (float)K + c.rms_eps);
	if (tid < 32) {
		if (mdefer) {
			for (int i = tid; i < NC; i += 32)
				mdefer[(size_t)tok * NC + i] = s_tot[i] * inv;
			return;
		}
		for (int i = tid; i < NC; i += 32)
			s_m[i] = s_tot[i] * inv;
		__syncwarp();
		x4c::hc_coef_warp<NHC>(s_m, base, scale, c, coef + (size_t)tok * NC);
		return;
	}
	float mp[NHC], pre[NHC];
#pragma unroll
	for (int s = 0; s < NHC; s++)
		mp[s] = s_tot[s] * inv;
#pragma unroll
	for (int s = 0; s < NHC; s++)
		pre[s] = x4c::hc_pre_of(mp, base, scale, s);
	float ss = 0.f, xr[HC_TAIL][VEC];
#pragma unroll
	for (int u = 0; u < HC_TAIL; u++) {
		const int c0 = (tid - 32) * VEC + u * step;
		if (c0 >= D)
			break;
		hc_collapse_at<NHC, VEC>(pre, t.h[u], xr[u]);
		store_vec<VEC>(x + (size_t)tok * D + c0, xr[u]);
		if (nm.xh)
#pragma unroll
			for (int v = 0; v < VEC; v++)
				ss = fmaf(xr[u][v], xr[u][v], ss);
	}
	for (int c0 = (tid - 32) * VEC + HC_TAIL * step; c0 < D; c0 += step) {
		float h[NHC][VEC], xv[VEC];
#pragma unroll
		for (int s = 0; s < NHC; s++)
			load_vec_cg<VEC>(Hsrc + (size_t)s * D + c0, h[s]);
		hc_collapse_at<NHC, VEC>(pre, h, xv);
		store_vec<VEC>(x + (size_t)tok * D + c0, xv);
		if (nm.xh)
#pragma unroll
			for (int v = 0; v < VEC; v++)
				ss = fmaf(xv[v], xv[v], ss);
	}
	if (!nm.xh)
		return;
	const int nt = HC_THREADS - 32, w1 = (tid >> 5) - 1;
	ss = x4c::warp_sum(ss);
	if ((tid & 31) == 0)
		nm.red[w1] = ss;
	asm volatile("bar.sync 1, %0;" ::"r"(nt) : "memory");
	float tt = nm.red[0];
	for (int i = 1; i < nt / 32; i++)
		tt += nm.red[i];
	const float ninv = 1.0f / sqrtf(tt / (float)D + nm.eps);
#pragma unroll
	for (int u = 0; u < HC_TAIL; u++) {
		const int c0 = (tid - 32) * VEC + u * step;
		if (c0 >= D)
			break;
		float o[VEC];
#pragma unroll
		for (int v = 0; v < VEC; v++)
			o[v] = (xr[u][v] * ninv) * t.g[u][v];
		store_vec<VEC>(nm.xh + (size_t)tok * D + c0, o);
	}
	for (int c0 = (tid - 32) * VEC + HC_TAIL * step; c0 < D; c0 += step) {
		float xv[VEC], gv[VEC], o[VEC];
		load_vec<VEC>(x + (size_t)tok * D + c0, xv);
		load_vec<VEC>(nm.gain + c0, gv);
#pragma unroll
		for (int v = 0; v < VEC; v++)
			o[v] = (xv[v] * ninv) * gv[v];
		store_vec<VEC>(nm.xh + (size_t)tok * D + c0, o);
	}
}

/* Prefill sizes: one block a token over all of D. */
template <int NHC, int VEC>
__global__ void __launch_bounds__(HC_THREADS)
hc_fused_kernel(x4k_hc_cfg c, const float *H, const uint16_t *__restrict__ fn,
		const float *__restrict__ base, const float *__restrict__ scale,
		const float *__restrict__ y_prev, const float *__restrict__ coef_prev,
		float *H_out, float *__restrict__ x, float *__restrict__ coef)
{
	constexpr int NC = NHC * (2 + NHC), NR = NC + 1, NW = HC_THREADS / 32;
	__shared__ float s_red[NW][NR];
	__shared__ float s_tot[NR];
	__shared__ float s_m[NC];
	__shared__ float s_cp[NC];

	const int D = c.D, tok = blockIdx.y, tid = threadIdx.x;
	const int lane = tid & 31, warp = tid >> 5;
	const size_t K = (size_t)NHC * D;
	const float *Ht = H + (size_t)tok * K;
	float *Ho = y_prev ? H_out + (size_t)tok * K : nullptr;
	const float *Hsrc = y_prev ? Ho : Ht; /* the state the gate sees */

	if (y_prev) { /* uniform over the block */
		for (int i = tid; i < NC; i += HC_THREADS)
			s_cp[i] = coef_prev[(size_t)tok * NC + i];
		__syncthreads();
	}

	float acc[NC];
#pragma unroll
	for (int r = 0; r < NC; r++)
		acc[r] = 0;
	float ss = 0;
	for (int col = tid * VEC; col < D; col += HC_THREADS * VEC) {
		float u[NHC][VEC];
#pragma unroll
		for (int s = 0; s < NHC; s++)
			load_vec<VEC>(Ht + (size_t)s * D + col, u[s]);
		if (y_prev) {
			float yv[VEC];
			load_vec<VEC>(y_prev + (size_t)tok * D + col, yv);
#pragma unroll
			for (int v = 0; v < VEC; v++) {
				float h[NHC], o[NHC];
#pragma unroll
				for (int s = 0; s < NHC; s++)
					h[s] = u[s][v];
				x4c::hc_update<NHC>(s_cp, yv[v], h, o);
#pragma unroll
				for (int s = 0; s < NHC; s++)
					u[s][v] = o[s];
			}
#pragma unroll
			for (int s = 0; s < NHC; s++)
				store_vec<VEC>(Ho + (size_t)s * D + col, u[s]);
		}
#pragma unroll
		for (int s = 0; s < NHC; s++)
#pragma unroll
			for (int v = 0; v < VEC; v++)
				ss = fmaf(u[s][v], u[s][v], ss);
#pragma unroll
		for (int r = 0; r < NC; r++) {
			const uint16_t *w = fn + (size_t)r * K + col;
#pragma unroll
			for (int s = 0; s < NHC; s++) {
				if (VEC == 2) {
					float2 f = x4c::bf16x2(__ldg(reinterpret_cast<const unsigned *>(w + (size_t)s * D)));
					acc[r] = fmaf(f.x, u[s][0], acc[r]);
					acc[r] = fmaf(f.y, u[s][VEC - 1], acc[r]);
				} else {
					acc[r] = fmaf(x4c::bf16(__ldg(w + (size_t)s * D)), u[s][0], acc[r]);
				}
			}
		}
	}

#pragma unroll
	for (int r = 0; r < NC; r++) {
		float v = x4c::warp_sum(acc[r]);
		if (lane == 0)
			s_red[warp][r] = v;
	}
	ss = x4c::warp_sum(ss);
	if (lane == 0)
		s_red[warp][NC] = ss;
	__syncthreads();
	if (tid < NR) {
		float t = 0;
		for (int w = 0; w < NW; w++)
			t += s_red[w][tid];
		s_tot[tid] = t;
	}
	__syncthreads(); /* also orders this block's Ho stores before the collapse reads */
	hc_tail<NHC, VEC> tl;
	hc_tail_load<NHC, VEC>(tl, D, Hsrc, nullptr);
	hc_finish<NHC, VEC>(c, tok, s_tot, s_m, base, scale, Hsrc, x, coef, tl, hc_norm_args());
}

/* Decode sizes: block b of a token takes columns [32b, 32b + 32) of D, for
 * every stream.  Weight row r goes to warp r % 8; a lane takes 4 columns of
 * one stream (lane / 8), so a row's 32 x NHC products of the block are one
 * warp load (8-byte loads when VEC4) and one shuffle tree.  Partials
 * [tok][block][NC dots | sum of squares] go to part; the last block of the
 * token (count) finishes. */
template <int NHC, bool VEC4>
__global__ void __launch_bounds__(HC_THREADS)
hc_split_kernel(x4k_hc_cfg c, const float *H, const uint16_t *__restrict__ fn,
		const float *__restrict__ base, const float *__restrict__ scale,
		const float *__restrict__ y_prev, const float *__restrict__ coef_prev,
		float *H_out, float *__restrict__ x, float *__restrict__ coef, float *part,
		unsigned *count, const float *__restrict__ gain, float norm_eps, float *__restrict__ xh,
		float *__restrict__ mdefer)
{
	constexpr int NC = NHC * (2 + NHC), NR = NC + 1, NW = HC_THREADS / 32;
	constexpr int RPW = (NC + NW - 1) / NW; /* rows a warp */
	__shared__ float s_nred[NW];
	__shared__ __align__(16) float s_u[NHC][HC_CW]; /* the state at the block's columns */
	__shared__ float s_cp[NC];
	__shared__ float s_red[NR];
	__shared__ float s_tot[NR];
	__shared__ float s_m[NC];
	__shared__ int s_last;

	const int D = c.D, tok = blockIdx.y, nb = gridDim.x, tid = threadIdx.x;
	const int lane = tid & 31, warp = tid >> 5;
	const size_t K = (size_t)NHC * D;
	const int c0 = blockIdx.x * HC_CW;
	const int ls = lane >> 3, lc = 4 * (lane & 7); /* this lane's stream and column */
	const bool lact = ls < NHC && c0 + lc < D;

	/* 1. the weights first: they do not depend on the previous kernel */
	float wv[RPW][4];
#pragma unroll
	for (int i = 0; i < RPW; i++) {
		const int r = warp + NW * i;
		const uint16_t *w = fn + (size_t)(r < NC ? r : 0) * K + (size_t)ls * D + c0 + lc;
		if (VEC4) {
			uint2 q = make_uint2(0u, 0u);
			if (lact && r < NC)
				q = __ldcs(reinterpret_cast<const uint2 *>(w));
			const float2 a = x4c::bf16x2(q.x), b = x4c::bf16x2(q.y);
			wv[i][0] = a.x, wv[i][1] = a.y, wv[i][2] = b.x, wv[i][3] = b.y;
		} else {
#pragma unroll
			for (int j = 0; j < 4; j++)
				wv[i][j] = ls < NHC && r < NC && c0 + lc + j < D ? x4c::bf16(__ldcs(w + j)) : 0.f;
		}
	}

	x4p::trigger();
	x4p::wait(); /* everything below reads the previous kernels' outputs */

	/* 2. the state the gate sees at columns c0.., the update fused in front */
	const float *Ht = H + (size_t)tok * K;
	float *Ho = y_prev ? H_out + (size_t)tok * K : nullptr;
	const int col = c0 + tid;
	float h[NHC], yv = 0.f; /* loaded before the coefficients' barrier: one round */
#pragma unroll
	for (int s = 0; s < NHC; s++)
		h[s] = tid < HC_CW && col < D ? Ht[(size_t)s * D + col] : 0.f;
	if (y_prev && tid < HC_CW && col < D)
		yv = y_prev[(size_t)tok * D + col];
	if (y_prev) { /* uniform over the block */
		if (tid < NC)
			s_cp[tid] = coef_prev[(size_t)tok * NC + tid];
		__syncthreads();
	}
	if (tid < HC_CW) {
		float o[NHC];
		if (y_prev && col < D) {
			x4c::hc_update<NHC>(s_cp, yv, h, o);
#pragma unroll
			for (int s = 0; s < NHC; s++) {
				Ho[(size_t)s * D + col] = o[s];
				h[s] = o[s];
			}
		}
#pragma unroll
		for (int s = 0; s < NHC; s++)
			s_u[s][tid] = h[s];
	}
	__syncthreads();

	/* 3. the block's partial dots and sum of squares */
	float u[4] = { 0.f, 0.f, 0.f, 0.f };
	if (ls < NHC) {
		const float4 t = *reinterpret_cast<const float4 *>(&s_u[ls][lc]);
		u[0] = t.x, u[1] = t.y, u[2] = t.z, u[3] = t.w; /* zeros past D */
	}
#pragma unroll
	for (int i = 0; i < RPW; i++) {
		const int r = warp + NW * i;
		float a = 0.f;
#pragma unroll
		for (int j = 0; j < 4; j++)
			a = fmaf(wv[i][j], u[j], a);
		a = x4c::warp_sum(a);
		if (lane == 0 && r < NC)
			s_red[r] = a;
	}
	if (warp == 0) {
		float q = 0.f;
#pragma unroll
		for (int j = 0; j < 4; j++)
			q = fmaf(u[j], u[j], q);
		q = x4c::warp_sum(q);
		if (lane == 0)
			s_red[NC] = q;
	}
	__syncthreads();
	float *mine = part + ((size_t)tok * nb + blockIdx.x) * NR;
	if (tid < NR)
		mine[tid] = s_red[tid];
	x4c::fence_acq_rel_gpu(); /* the partial and Ho are visible before the count says so */
	__syncthreads();
	if (tid == 0)
		s_last = atomicAdd(&count[tok], 1u) == (unsigned)(nb - 1);
	__syncthreads();
	if (!s_last)
		return;
	x4c::fence_acq_rel_gpu();
	/* the collapse's operands first: their loads and the partials' below are in flight together */
	hc_tail<NHC, VEC4 ? 2 : 1> tl;
	hc_tail_load<NHC, VEC4 ? 2 : 1>(tl, D, y_prev ? Ho : Ht, xh ? gain : nullptr);

	/* 4. the last block: the partials summed a warp a value, lane-strided
	 * in block order and then one shuffle tree, so the bits do not depend
	 * on which block came last */
	constexpr int VPW = (NR + NW - 1) / NW, BPL = 4; /* values a warp; partials a lane a round */
	float t[VPW];
#pragma unroll
	for (int q = 0; q < VPW; q++)
		t[q] = 0.f;
	for (int b0 = 0; b0 < nb; b0 += 32 * BPL) { /* one round of loads for every value of the warp */
		float pv[VPW][BPL];
#pragma unroll
		for (int q = 0; q < VPW; q++)
#pragma unroll
			for (int j = 0; j < BPL; j++) {
				const int v = warp + NW * q, b = b0 + lane + 32 * j;
				pv[q][j] = v < NR && b < nb ? __ldcg(part + ((size_t)tok * nb + b) * NR + v) : 0.f;
			}
#pragma unroll
		for (int q = 0; q < VPW; q++)
#pragma unroll
			for (int j = 0; j < BPL; j++)
				t[q] += pv[q][j];
	}
#pragma unroll
	for (int q = 0; q < VPW; q++) {
		const float v = x4c::warp_sum(t[q]);
		if (lane == 0 && warp + NW * q < NR)
			s_tot[warp + NW * q] = v;
	}
	if (tid == 0)
		count[tok] = 0; /* ready for the next call (and a graph replay) */
	__syncthreads();
	hc_norm_args nm;
	nm.gain = gain, nm.eps = norm_eps, nm.xh = xh, nm.red = s_nred;
	hc_finish<NHC, VEC4 ? 2 : 1>(c, tok, s_tot, s_m, base, scale, y_prev ? Ho : Ht, x, coef, tl, nm,
				     mdefer);
}

/* ---- the eager path ---- */

template <int NHC>
__global__ void hc_update_kernel(x4k_hc_cfg c, const float *__restrict__ coef,
				 const float *__restrict__ y, const float *H, float *H_out)
{
	constexpr int NC = NHC * (2 + NHC);
	__shared__ float s_c[NC];
	const int D = c.D, tok = blockIdx.y;
	for (int i = threadIdx.x; i < NC; i += blockDim.x)
		s_c[i] = coef[(size_t)tok * NC + i];
	__syncthreads();
	int col = blockIdx.x * blockDim.x + threadIdx.x;
	if (col >= D)
		return;
	const size_t K = (size_t)NHC * D;
	float h[NHC], o[NHC];
#pragma unroll
	for (int s = 0; s < NHC; s++)
		h[s] = H[(size_t)tok * K + (size_t)s * D + col];
	x4c::hc_update<NHC>(s_c, y[(size_t)tok * D + col], h, o);
#pragma unroll
	for (int d = 0; d < NHC; d++)
		H_out[(size_t)tok * K + (size_t)d * D + col] = o[d];
}

__global__ void hc_rms_kernel(int K, float eps, const float *__restrict__ H, float *__restrict__ inv)
{
	__shared__ float red[32];
	const float *h = H + (size_t)blockIdx.x * K;
	float ss = 0;
	for (int i = threadIdx.x; i < K; i += blockDim.x)
		ss = fmaf(h[i], h[i], ss);
	ss = x4c::block_sum(ss, red);
	if (threadIdx.x == 0)
		inv[blockIdx.x] = 1.0f / sqrtf(ss / (float)K + eps);
}

__global__ void hc_proj_kernel(int K, int NC, const float *__restrict__ H,
			       const uint16_t *__restrict__ fn, const float *__restrict__ inv,
			       float *__restrict__ m)
{
	__shared__ float red[32];
	const int r = blockIdx.x, tok = blockIdx.y;
	const float *h = H + (size_t)tok * K;
	const uint16_t *w = fn + (size_t)r * K;
	float acc = 0;
	for (int i = threadIdx.x; i < K; i += blockDim.x)
		acc = fmaf(x4c::bf16(w[i]), h[i], acc);
	acc = x4c::block_sum(acc, red);
	if (threadIdx.x == 0)
		m[(size_t)tok * NC + r] = acc * inv[tok];
}

template <int NHC>
__global__ void hc_coef_kernel(x4k_hc_cfg c, int n_tok, const float *__restrict__ m,
			       const float *__restrict__ base, const float *__restrict__ scale,
			       float *__restrict__ coef)
{
	constexpr int NC = NHC * (2 + NHC);
	const int tok = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5); /* a warp a token */
	if (tok >= n_tok)
		return;
	x4c::hc_coef_warp<NHC>(m + (size_t)tok * NC, base, scale, c, coef + (size_t)tok * NC);
}

template <int NHC>
__global__ void hc_collapse_kernel(int D, const float *__restrict__ H,
				   const float *__restrict__ coef, float *__restrict__ x)
{
	constexpr int NC = NHC * (2 + NHC);
	const int tok = blockIdx.y, col = blockIdx.x * blockDim.x + threadIdx.x;
	if (col >= D)
		return;
	const float *h = H + (size_t)tok * NHC * D;
	float t = 0;
#pragma unroll
	for (int s = 0; s < NHC; s++)
		t = __fmaf_rn(coef[(size_t)tok * NC + s], h[(size_t)s * D + col], t);
	x[(size_t)tok * D + col] = t;
}

bool aligned(const void *p, size_t a) { return p == nullptr || ((uintptr_t)p % a) == 0; }

size_t round_up(size_t n, size_t a) { return (n + a - 1) / a * a; }

int check_cfg(const x4k_hc_cfg *c, int n_tok, const char *who, x4_err *e)
{
	if (!c || c->n_hc < 1 || c->n_hc > 4 || c->D < 1 || c->iters < 0 || n_tok < 0 ||
	    n_tok > 65535 || (size_t)c->n_hc * c->D > (size_t)1 << 30)
		return x4_err_set(e, X4_EINVAL, "%s: bad shape (n_hc %d, D %d, iters %d, %d tokens)",
				  who, c ? c->n_hc : -1, c ? c->D : -1, c ? c->iters : -1, n_tok);
	return 0;
}

} /* namespace */

/* x4k_hc_pre, and x4k_hc_pre_norm when xh is not NULL: the split path
 * fuses the norm into its last block (*normed = true), the others leave it
 * to the caller. */
static int hc_pre(const x4k_hc_cfg *c, int n_tok, const float *H, const uint16_t *fn,
		  const float *base, const float *scale, const float *y_prev, const float *coef_prev,
		  float *H_out, float *x, float *coef, bool eager, void *ws, size_t ws_bytes,
		  const float *gain, float norm_eps, float *xh, bool *normed, const x4k_side *side,
		  cudaStream_t st, x4_err *e)
{
	*normed = false;
	/* with a side stream, `done` is recorded on every path that returns 0:
	 * after the coefficients, wherever they were formed */
	auto done_here = [&](int rc) {
		if (!rc && side)
			rc = x4_cuda_check(cudaEventRecord(side->done, st), "x4k_hc_pre_norm: side event", e);
		return rc;
	};
	int rc = check_cfg(c, n_tok, "x4k_hc_pre", e);
	if (rc)
		return rc;
	if (n_tok == 0)
		return done_here(0);
	if (!H || !fn || !base || !scale || !x || !coef || !ws ||
	    (y_prev && (!coef_prev || !H_out)))
		return x4_err_set(e, X4_EINVAL, "x4k_hc_pre: NULL buffer");
	size_t need = x4k_hc_workspace_bytes(c, n_tok);
	if (ws_bytes < need)
		return x4_err_set(e, X4_EINVAL, "x4k_hc_pre: workspace of %zu bytes, %zu needed "
				  "for %d tokens", ws_bytes, need, n_tok);
	const int D = c->D, K = c->n_hc * D, NC = X4K_HC_NCOEF(c->n_hc);
	unsigned *count = (unsigned *)ws;
	float *fws = (float *)((char *)ws + round_up((size_t)n_tok * sizeof(unsigned), 256));

	if (eager) {
		const float *Hs = H;
		if (y_prev) {
			X4C_NHC_SWITCH(c->n_hc, NHC,
				hc_update_kernel<NHC><<<dim3((D + 255) / 256, n_tok), 256, 0, st>>>(
					*c, coef_prev, y_prev, H, H_out));
			if ((rc = x4_cuda_launched("x4k_hc_pre: eager stream update", e)))
				return rc;
			Hs = H_out;
		}
		float *inv = fws, *m = fws + n_tok;
		hc_rms_kernel<<<n_tok, 256, 0, st>>>(K, c->rms_eps, Hs, inv);
		if ((rc = x4_cuda_launched("x4k_hc_pre: eager RMS", e)))
			return rc;
		hc_proj_kernel<<<dim3(NC, n_tok), 256, 0, st>>>(K, NC, Hs, fn, inv, m);
		if ((rc = x4_cuda_launched("x4k_hc_pre: eager projection", e)))
			return rc;
		X4C_NHC_SWITCH(c->n_hc, NHC,
			hc_coef_kernel<NHC><<<(n_tok + 3) / 4, 128, 0, st>>>(*c, n_tok, m, base,
									       scale, coef));
		if ((rc = x4_cuda_launched("x4k_hc_pre: eager coefficients", e)))
			return rc;
		X4C_NHC_SWITCH(c->n_hc, NHC,
			hc_collapse_kernel<NHC><<<dim3((D + 255) / 256, n_tok), 256, 0, st>>>(
				D, Hs, coef, x));
		return done_here(x4_cuda_launched("x4k_hc_pre: eager collapse", e));
	}

	/* Pairs (split: fours) of columns when every row and stream is aligned. */
	const int nb = hc_nsplit(D, n_tok);
	dim3 grid(nb, n_tok);
	/* the side's normalised projections, past the partials */
	float *mdefer = side && nb > 1 ? fws + (size_t)n_tok * nb * (NC + 1) : nullptr;
	if (nb > 1) {
		bool v4 = D % 4 == 0 && aligned(H, 8) && aligned(H_out, 8) && aligned(y_prev, 8) &&
			  aligned(x, 8) && aligned(fn, 8) && aligned(gain, 8) && aligned(xh, 8);
		if (v4) {
			X4C_NHC_SWITCH(c->n_hc, NHC,
				x4p::launch(hc_split_kernel<NHC, true>, grid, dim3(HC_THREADS), 0, st,
					    *c, H, fn, base, scale, y_prev, coef_prev, H_out, x, coef,
					    fws, count, gain, norm_eps, xh, mdefer));
		} else {
			X4C_NHC_SWITCH(c->n_hc, NHC,
				x4p::launch(hc_split_kernel<NHC, false>, grid, dim3(HC_THREADS), 0, st,
					    *c, H, fn, base, scale, y_prev, coef_prev, H_out, x, coef,
					    fws, count, gain, norm_eps, xh, mdefer));
		}
		*normed = xh != nullptr;
		if ((rc = x4_cuda_launched("x4k_hc_pre: fused gate", e)) || !side)
			return rc;
		/* the Sinkhorn on the side stream: nothing of this sublayer reads
		 * the coefficients but the next gate's update, so the gate's
		 * launch ends with its collapse and norm */
		X4_CUDA_TRY(cudaEventRecord(side->fork, st), "x4k_hc_pre_norm: side event", e);
		X4_CUDA_TRY(cudaStreamWaitEvent(side->s, side->fork, 0), "x4k_hc_pre_norm: side wait", e);
		X4C_NHC_SWITCH(c->n_hc, NHC,
			hc_coef_kernel<NHC><<<(n_tok + 3) / 4, 128, 0, side->s>>>(*c, n_tok, mdefer, base,
										   scale, coef));
		if ((rc = x4_cuda_launched("x4k_hc_pre_norm: side coefficients", e)))
			return rc;
		X4_CUDA_TRY(cudaEventRecord(side->done, side->s), "x4k_hc_pre_norm: side event", e);
		return 0;
	}
	bool vec = D % 2 == 0 && aligned(H, 8) && aligned(H_out, 8) && aligned(y_prev, 8) &&
		   aligned(x, 8) && aligned(fn, 4);
	if (vec) {
		X4C_NHC_SWITCH(c->n_hc, NHC,
			hc_fused_kernel<NHC, 2><<<grid, HC_THREADS, 0, st>>>(
				*c, H, fn, base, scale, y_prev, coef_prev, H_out, x, coef));
	} else {
		X4C_NHC_SWITCH(c->n_hc, NHC,
			hc_fused_kernel<NHC, 1><<<grid, HC_THREADS, 0, st>>>(
				*c, H, fn, base, scale, y_prev, coef_prev, H_out, x, coef));
	}
	return done_here(x4_cuda_launched("x4k_hc_pre: fused gate", e));
}

extern "C" int x4k_hc_pre(const x4k_hc_cfg *c, int n_tok, const float *H, const uint16_t *fn,
			  const float *base, const float *scale, const float *y_prev,
			  const float *coef_prev, float *H_out, float *x, float *coef, bool eager,
			  void *ws, size_t ws_bytes, cudaStream_t st, x4_err *e)
{
	bool normed;
	return hc_pre(c, n_tok, H, fn, base, scale, y_prev, coef_prev, H_out, x, coef, eager, ws,
		      ws_bytes, nullptr, 0.f, nullptr, &normed, nullptr, st, e);
}

extern "C" int x4k_hc_pre_norm(const x4k_hc_cfg *c, int n_tok, const float *H, const uint16_t *fn,
			       const float *base, const float *scale, const float *y_prev,
			       const float *coef_prev, float *H_out, float *x, float *coef,
			       const float *gain, float norm_eps, float *xh, bool eager, void *ws,
			       size_t ws_bytes, const x4k_side *side, cudaStream_t st, x4_err *e)
{
	if (!gain || !xh)
		return x4_err_set(e, X4_EINVAL, "x4k_hc_pre_norm: NULL gain or output");
	bool normed;
	int rc = hc_pre(c, n_tok, H, fn, base, scale, y_prev, coef_prev, H_out, x, coef, eager, ws,
			ws_bytes, gain, norm_eps, xh, &normed, side, st, e);
	if (rc || normed || n_tok == 0)
		return rc;
	return x4k_rmsnorm(n_tok, c->D, x, c->D, gain, norm_eps, xh, c->D, st, e);
}

extern "C" int x4k_hc_post(const x4k_hc_cfg *c, int n_tok, const float *coef, const float *y,
			   const float *H, float *H_out, cudaStream_t st, x4_err *e)
{
	int rc = check_cfg(c, n_tok, "x4k_hc_post", e);
	if (rc)
		return rc;
	if (n_tok == 0)
		return 0;
	if (!coef || !y || !H || !H_out)
		return x4_err_set(e, X4_EINVAL, "x4k_hc_post: NULL buffer");
	X4C_NHC_SWITCH(c->n_hc, NHC,
		hc_update_kernel<NHC><<<dim3((c->D + 255) / 256, n_tok), 256, 0, st>>>(
			*c, coef, y, H, H_out));
	return x4_cuda_launched("x4k_hc_post: stream update", e);
}
