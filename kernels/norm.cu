/*
 * norm.cu - RMSNorm with gain (docs/forward.md 3.1), fp32: a block a row, the sum of
 * squares reduced in a fixed order so a row gives the same bits every run.
 *
 * A row of up to 16384 values is held in registers: each thread loads its
 * V vectors (float4 when the rows allow) in one round, so a decode-sized
 * row costs one global latency, one block reduction and one store instead
 * of the 14 dependent load rounds a 256-thread loop makes at 3584 (10 us a
 * launch in the profile of 317feb9).  Wider rows take the plain loop.
 */
#include "core_dev.cuh"
#include "pdl.cuh"

namespace {

template <int VEC> struct vec_t;
template <> struct vec_t<1> { typedef float T; };
template <> struct vec_t<4> { typedef float4 T; };

template <int VEC>
__device__ __forceinline__ void ld(const float *p, float *v)
{
	if constexpr (VEC == 4) {
		const float4 t = *reinterpret_cast<const float4 *>(p);
		v[0] = t.x, v[1] = t.y, v[2] = t.z, v[3] = t.w;
	} else {
		v[0] = *p;
	}
}

template <int VEC>
__device__ __forceinline__ void st(float *p, const float *v)
{
	if constexpr (VEC == 4)
		*reinterpret_cast<float4 *>(p) = make_float4(v[0], v[1], v[2], v[3]);
	else
		*p = v[0];
}

/* Thread t holds elements (k * blockDim + t) * VEC + j, k < V, j < VEC. */
template <int VEC, int V>
__global__ void __launch_bounds__(1024)
rmsnorm_reg_kernel(int n, const float *x, int ld_x, const float *__restrict__ gain, float eps,
		   float *y, int ld_y)
{
	__shared__ float red[32];
	const float *xr = x + (size_t)blockIdx.x * ld_x;
	float *yr = y + (size_t)blockIdx.x * ld_y;
	float v[V][VEC], g[V][VEC];
#pragma unroll
	for (int k = 0; k < V; k++) { /* the gain first: a weight, ready before the wait */
		const int e = (k * (int)blockDim.x + (int)threadIdx.x) * VEC;
#pragma unroll
		for (int j = 0; j < VEC; j++)
			v[k][j] = g[k][j] = 0.f;
		if (e < n && gain)
			ld<VEC>(gain + e, g[k]);
	}
	x4p::trigger();
	x4p::wait();
#pragma unroll
	for (int k = 0; k < V; k++) {
		const int e = (k * (int)blockDim.x + (int)threadIdx.x) * VEC;
		if (e < n)
			ld<VEC>(xr + e, v[k]);
	}
	float ss = 0;
#pragma unroll
	for (int k = 0; k < V; k++)
#pragma unroll
		for (int j = 0; j < VEC; j++)
			ss = fmaf(v[k][j], v[k][j], ss);
	ss = x4c::block_sum(ss, red); /* its barriers also order the reads before y = x writes */
	const float inv = 1.0f / sqrtf(ss / (float)n + eps);
#pragma unroll
	for (int k = 0; k < V; k++) {
		const int e = (k * (int)blockDim.x + (int)threadIdx.x) * VEC;
		if (e >= n)
			continue;
		float o[VEC];
#pragma unroll
		for (int j = 0; j < VEC; j++)
			o[j] = gain ? (v[k][j] * inv) * g[k][j] : v[k][j] * inv;
		st<VEC>(yr + e, o);
	}
}

__global__ void __launch_bounds__(256)
rmsnorm_kernel(int n, const float *x, int ld_x, const float *__restrict__ gain, float eps,
	       float *y, int ld_y)
{
	__shared__ float red[32];
	const float *xr = x + (size_t)blockIdx.x * ld_x;
	float *yr = y + (size_t)blockIdx.x * ld_y;
	float ss = 0;
	for (int i = threadIdx.x; i < n; i += blockDim.x)
		ss = fmaf(xr[i], xr[i], ss);
	ss = x4c::block_sum(ss, red); /* its barriers also order the reads before y = x writes */
	const float inv = 1.0f / sqrtf(ss / (float)n + eps);
	for (int i = threadIdx.x; i < n; i += blockDim.x)
		yr[i] = gain ? (xr[i] * inv) * gain[i] : xr[i] * inv;
}

bool aligned16(const void *p) { return ((uintptr_t)p & 15) == 0; }

template <int VEC>
bool launch_reg(int n_tok, int n, const float *x, int ld_x, const float *gain, float eps,
		float *y, int ld_y, cudaStream_t s)
{
	const int nv = (n + VEC - 1) / VEC; /* vectors in a row */
	const int V = nv <= 1024 ? 1 : nv <= 2048 ? 2 : nv <= 4096 ? 4 : 0;
	if (!V)
		return false;
	const int threads = ((nv + V - 1) / V + 31) / 32 * 32;
	switch (V) {
	case 1: x4p::launch(rmsnorm_reg_kernel<VEC, 1>, dim3(n_tok), dim3(threads), 0, s, n, x, ld_x, gain, eps, y, ld_y); break;
	case 2: x4p::launch(rmsnorm_reg_kernel<VEC, 2>, dim3(n_tok), dim3(threads), 0, s, n, x, ld_x, gain, eps, y, ld_y); break;
	default: x4p::launch(rmsnorm_reg_kernel<VEC, 4>, dim3(n_tok), dim3(threads), 0, s, n, x, ld_x, gain, eps, y, ld_y); break;
	}
	return true;
}

} /* namespace */

extern "C" int x4k_rmsnorm(int n_tok, int n, const float *x, int ld_x, const float *gain,
			   float eps, float *y, int ld_y, cudaStream_t s, x4_err *e)
{
	if (n_tok < 0 || n < 1 || ld_x < n || ld_y < n || n_tok > (1 << 30))
		return x4_err_set(e, X4_EINVAL, "x4k_rmsnorm: bad shape (%d rows of %d, ld %d/%d)",
				  n_tok, n, ld_x, ld_y);
	if (n_tok == 0)
		return 0;
	if (!x || !y)
		return x4_err_set(e, X4_EINVAL, "x4k_rmsnorm: NULL buffer");
	const bool v4 = n % 4 == 0 && ld_x % 4 == 0 && ld_y % 4 == 0 && aligned16(x) &&
			aligned16(y) && (!gain || aligned16(gain));
	if (!(v4 ? launch_reg<4>(n_tok, n, x, ld_x, gain, eps, y, ld_y, s)
		 : launch_reg<1>(n_tok, n, x, ld_x, gain, eps, y, ld_y, s)))
		rmsnorm_kernel<<<n_tok, 256, 0, s>>>(n, x, ld_x, gain, eps, y, ld_y);
	return x4_cuda_launched("x4k_rmsnorm: launch", e);
}
