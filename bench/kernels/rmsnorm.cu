/*
 * rmsnorm.cu - the kernel lab for x4k_rmsnorm: the 256-thread loop of
 * 317feb9 (kept below) against the library's row-in-registers kernel, at
 * the decode step's rows (3584: attn_norm and ffn_norm; 768: q_a_norm),
 * L2 flushed between repetitions.  Bytes: x, gain and y.
 *
 *   make bench-kernels CUDA_ARCH=90 && build/bench/rmsnorm [old|new|all]
 */
#include "lab.h"
#include "x4_kern.h"

namespace norm_317 {
/* kernels/norm.cu of 317feb9 */
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
	int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
	for (int o = 16; o; o >>= 1)
		ss += __shfl_xor_sync(0xffffffffu, ss, o);
	if (lane == 0)
		red[warp] = ss;
	__syncthreads();
	float t = 0;
	for (int i = 0; i < nw; i++)
		t += red[i];
	__syncthreads();
	const float inv = 1.0f / sqrtf(t / (float)n + eps);
	for (int i = threadIdx.x; i < n; i += blockDim.x)
		yr[i] = gain ? (xr[i] * inv) * gain[i] : xr[i] * inv;
}
} /* namespace norm_317 */

int main(int argc, char **argv)
{
	lab L;
	lab_init(&L, argc, argv, "times x4k_rmsnorm at the decode step's rows");
	const int ns[] = { 3584, 768 };
	x4_err e = { 0 };
	for (int n : ns) {
		float *x = lab_f32((size_t)n, 3), *g = lab_f32((size_t)n, 4), *y = (float *)lab_alloc((size_t)n * 4);
		LAB_CK(cudaDeviceSynchronize());
		char nm[64];
		snprintf(nm, sizeof nm, "1x%d", n);
		double bytes = 3.0 * n * 4;
		if (L.run_old)
			lab_row(&L, "rmsnorm", "old", nm, bytes, lab_time_us(&L, [&] {
					norm_317::rmsnorm_kernel<<<1, 256, 0, L.s>>>(n, x, n, g, 1e-6f, y, n);
				}));
		if (L.run_new)
			lab_row(&L, "rmsnorm", "new", nm, bytes, lab_time_us(&L, [&] {
					LAB_X4(x4k_rmsnorm(1, n, x, n, g, 1e-6f, y, n, L.s, &e), e);
				}));
		LAB_CK(cudaFree(x));
		LAB_CK(cudaFree(g));
		LAB_CK(cudaFree(y));
	}
	return 0;
}
