/* The fused hyper-connection gate of commit 317feb9 (kernels/hc.cu as it
 * was: 7 blocks of 512 columns at D 3584), kept for bench/kernels/hc.cu;
 * the anonymous namespace renamed hc_317, the entry point a plain
 * launcher of the fused path.  Not built into the library. */
#ifndef X4_HC_317_CUH
#define X4_HC_317_CUH

#include "core_dev.cuh"

namespace hc_317 {


/* The coefficients on one thread, as core_dev.cuh had them at 317feb9
 * (the library now runs them a lane an element: x4c::hc_coef_warp). */
template <int NHC>
__device__ void hc_coef(const float *m, const float *base, const float *scale,
			const x4k_hc_cfg &c, float *coef)
{
	float M[NHC][NHC];
#pragma unroll
	for (int s = 0; s < NHC; s++)
		coef[s] = x4c::hc_pre_of(m, base, scale, s);
#pragma unroll
	for (int d = 0; d < NHC; d++)
		coef[NHC + d] = 2.0f * x4c::sigmoid(__fmaf_rn(scale[1], m[NHC + d], base[NHC + d]));
#pragma unroll
	for (int d = 0; d < NHC; d++) {
		float mx = -INFINITY;
#pragma unroll
		for (int s = 0; s < NHC; s++) {
			int k = 2 * NHC + d * NHC + s;
			float v = __fmaf_rn(scale[2], m[k], base[k]);
			v = v < c.clamp_min ? c.clamp_min : v;
			v = v > c.clamp_max ? c.clamp_max : v;
			M[d][s] = v;
			mx = v > mx ? v : mx;
		}
#pragma unroll
		for (int s = 0; s < NHC; s++)
			M[d][s] = expf(M[d][s] - mx);
	}
	for (int it = 0; it < c.iters; it++) {
#pragma unroll
		for (int d = 0; d < NHC; d++) {
			float sum = 0;
#pragma unroll
			for (int s = 0; s < NHC; s++)
				sum += M[d][s];
			sum += c.hc_eps;
#pragma unroll
			for (int s = 0; s < NHC; s++)
				M[d][s] = M[d][s] / sum;
		}
#pragma unroll
		for (int s = 0; s < NHC; s++) {
			float sum = 0;
#pragma unroll
			for (int d = 0; d < NHC; d++)
				sum += M[d][s];
			sum += c.hc_eps;
#pragma unroll
			for (int d = 0; d < NHC; d++)
				M[d][s] = M[d][s] / sum;
		}
	}
#pragma unroll
	for (int d = 0; d < NHC; d++)
#pragma unroll
		for (int s = 0; s < NHC; s++)
			coef[2 * NHC + d * NHC + s] = M[d][s];
}

constexpr int HC_THREADS = 256;
constexpr int HC_CPB = 512;          /* columns of D per block when split */
constexpr int HC_SPLIT_MAX_TOK = 8;  /* up to this many tokens, split */

int hc_nsplit(int D, int n_tok)
{
	return n_tok <= HC_SPLIT_MAX_TOK ? (D + HC_CPB - 1) / HC_CPB : 1;
}

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

template <int NHC, int VEC>
__global__ void __launch_bounds__(HC_THREADS)
hc_fused_kernel(x4k_hc_cfg c, const float *H, const uint16_t *__restrict__ fn,
		const float *__restrict__ base, const float *__restrict__ scale,
		const float *__restrict__ y_prev, const float *__restrict__ coef_prev,
		float *H_out, float *__restrict__ x, float *__restrict__ coef, float *part,
		unsigned *count)
{
	constexpr int NC = NHC * (2 + NHC), NR = NC + 1, NW = HC_THREADS / 32;
	__shared__ float s_red[NW][NR];
	__shared__ float s_tot[NR];
	__shared__ float s_m[NC];
	__shared__ float s_cp[NC];
	__shared__ float s_pre[NHC];
	__shared__ int s_last;

	const int D = c.D, tok = blockIdx.y, nb = gridDim.x, tid = threadIdx.x;
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

	const int c0 = nb == 1 ? 0 : blockIdx.x * HC_CPB;
	const int c1 = nb == 1 ? D : min(D, c0 + HC_CPB);
	float acc[NC];
#pragma unroll
	for (int r = 0; r < NC; r++)
		acc[r] = 0;
	float ss = 0;
	for (int col = c0 + tid * VEC; col < c1; col += HC_THREADS * VEC) {
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
	__syncthreads();

	if (nb > 1) {
		float *mine = part + ((size_t)tok * nb + blockIdx.x) * NR;
		if (tid < NR)
			mine[tid] = s_tot[tid];
		__threadfence(); /* the partial is visible before the count says so */
		__syncthreads();
		if (tid == 0)
			s_last = atomicAdd(&count[tok], 1u) == (unsigned)(nb - 1);
		__syncthreads();
		if (!s_last)
			return;
		__threadfence();
		if (tid < NR) {
			float t = 0;
			for (int b = 0; b < nb; b++) /* block order: reproducible */
				t += __ldcg(part + ((size_t)tok * nb + b) * NR + tid);
			s_tot[tid] = t;
		}
		if (tid == 0)
			count[tok] = 0; /* ready for the next call (and a graph replay) */
		__syncthreads();
	}

	const float inv = 1.0f / sqrtf(s_tot[NC] / (float)K + c.rms_eps);
	if (tid < NC)
		s_m[tid] = s_tot[tid] * inv;
	__syncthreads();
	if (tid < NHC)
		s_pre[tid] = x4c::hc_pre_of(s_m, base, scale, tid);
	__syncthreads();

	if (warp == 0) {
		if (tid == 0) {
			float cf[NC];
			hc_coef<NHC>(s_m, base, scale, c, cf);
#pragma unroll
			for (int i = 0; i < NC; i++)
				coef[(size_t)tok * NC + i] = cf[i];
		}
	} else {
		/* the collapse; other blocks wrote parts of Ho, so read through L2 */
		for (int col = (tid - 32) * VEC; col < D; col += (HC_THREADS - 32) * VEC) {
			float h[NHC][VEC], xv[VEC];
#pragma unroll
			for (int s = 0; s < NHC; s++)
				load_vec_cg<VEC>(Hsrc + (size_t)s * D + col, h[s]);
#pragma unroll
			for (int v = 0; v < VEC; v++) {
				float t = 0;
#pragma unroll
				for (int s = 0; s < NHC; s++)
					t = __fmaf_rn(s_pre[s], h[s][v], t);
				xv[v] = t;
			}
			store_vec<VEC>(x + (size_t)tok * D + col, xv);
		}
	}
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
	int tok = blockIdx.x * blockDim.x + threadIdx.x;
	if (tok >= n_tok)
		return;
	float mm[NC], cf[NC];
#pragma unroll
	for (int i = 0; i < NC; i++)
		mm[i] = m[(size_t)tok * NC + i];
	hc_coef<NHC>(mm, base, scale, c, cf);
#pragma unroll
	for (int i = 0; i < NC; i++)
		coef[(size_t)tok * NC + i] = cf[i];
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


/* x4k_hc_pre's fused path as 317feb9 launched it (ws zeroed once). */
static inline void hc_pre(const x4k_hc_cfg *c, int n_tok, const float *H, const uint16_t *fn,
			  const float *base, const float *scale, const float *y_prev,
			  const float *coef_prev, float *H_out, float *x, float *coef, void *ws,
			  cudaStream_t st)
{
	const int D = c->D;
	unsigned *count = (unsigned *)ws;
	float *fws = (float *)((char *)ws + round_up((size_t)n_tok * sizeof(unsigned), 256));
	bool vec = D % 2 == 0 && aligned(H, 8) && aligned(H_out, 8) && aligned(y_prev, 8) &&
		   aligned(x, 8) && aligned(fn, 4);
	dim3 grid(hc_nsplit(D, n_tok), n_tok);
	if (vec) {
		X4C_NHC_SWITCH(c->n_hc, NHC,
			hc_fused_kernel<NHC, 2><<<grid, HC_THREADS, 0, st>>>(
				*c, H, fn, base, scale, y_prev, coef_prev, H_out, x, coef, fws, count));
	} else {
		X4C_NHC_SWITCH(c->n_hc, NHC,
			hc_fused_kernel<NHC, 1><<<grid, HC_THREADS, 0, st>>>(
				*c, H, fn, base, scale, y_prev, coef_prev, H_out, x, coef, fws, count));
	}
}

} /* namespace hc_317 */

#endif
