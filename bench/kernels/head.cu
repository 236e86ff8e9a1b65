/*
 * head.cu - the kernel lab for the head's front (x4k_head: the mean of the
 * 4 streams of 3584, then the output RMSNorm) for the decode step's one
 * token, the vector the Q6_K logits product reads (that product is
 * gemv.cu's output_head row).  L2 flushed between repetitions.  Bytes: the
 * streams and the gain read, y written.
 *
 *   make bench-kernels CUDA_ARCH=90 && build/bench/head [new|all]
 */
#include "lab.h"
#include "x4_kern.h"

int main(int argc, char **argv)
{
	lab L;
	lab_init(&L, argc, argv, "times the stream mean and output norm, one token");
	const x4_config c = lab_model();
	const int D = c.n_embd, n_hc = c.n_hc;
	float *H = lab_f32((size_t)n_hc * D, 111), *gain = lab_f32((size_t)D, 112);
	float *y = (float *)lab_alloc((size_t)D * 4);
	LAB_CK(cudaDeviceSynchronize());
	x4_err e = { 0 };
	char nm[64];
	snprintf(nm, sizeof nm, "1tok_%dx%d", n_hc, D);
	if (L.run_new)
		lab_row(&L, "head", "new", nm, 4.0 * n_hc * D + 8.0 * D, lab_time_us(&L, [&] {
				LAB_X4(x4k_head(1, n_hc, D, H, gain, c.rms_eps, y, L.s, &e), e);
			}));
	return 0;
}
