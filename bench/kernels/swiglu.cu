/*
 * swiglu.cu - the kernel lab for the elementwise SwiGLU product h =
 * silu(g) * u (x4k_swiglu, fp32) where the step runs it apart from the
 * products: after the gate and up GEMMs of a 512-token chunk, for the
 * dense FFN (9216 wide) and the shared expert (1024).  (At one token the
 * product is fused into x4k_gemv_swiglu: gemv.cu's gate+up+swiglu rows.)
 * L2 flushed between repetitions.  Bytes: g and u read, h written.
 *
 *   make bench-kernels CUDA_ARCH=90 && build/bench/swiglu [new|all]
 */
#include "lab.h"
#include "x4_kern.h"

int main(int argc, char **argv)
{
	lab L;
	lab_init(&L, argc, argv, "times the SwiGLU product of a 512-token chunk");
	const x4_config c = lab_model();
	const int T = 512, widths[] = { c.n_ff, c.n_ff_exp };
	const int64_t nmax = (int64_t)T * c.n_ff;
	float *g = lab_f32((size_t)nmax, 131), *u = lab_f32((size_t)nmax, 132);
	float *h = (float *)lab_alloc((size_t)nmax * 4);
	LAB_CK(cudaDeviceSynchronize());
	x4_err e = { 0 };
	for (int w : widths) {
		const int64_t n = (int64_t)T * w;
		char nm[64];
		snprintf(nm, sizeof nm, "t%d_x%d", T, w);
		if (L.run_new)
			lab_row(&L, "swiglu", "new", nm, 12.0 * n, lab_time_us(&L, [&] {
					LAB_X4(x4k_swiglu(n, g, u, h, L.s, &e), e);
				}));
	}
	return 0;
}
