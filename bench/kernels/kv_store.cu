/*
 * kv_store.cu - the kernel lab for the cache row's store at the decode
 * step (kernels/kv_store.cu: the RMSNorm of kv_a's 512 latent values and
 * the rope of its 64-wide tail, as one fp16 row of 576), row 4095 of a
 * 4096-row cache: x4k_kv_store alone (new) and with the query's c_q
 * RMSNorm (768, in place) in the same launch (new+qnorm,
 * x4k_kv_store_norm: the step's call).  L2 flushed between repetitions.
 * Bytes: kva, the gain and the frequencies read, the row written; with the
 * norm, q read and written and its gain read.
 *
 *   make bench-kernels CUDA_ARCH=90 && build/bench/kv_store [new|all]
 */
#include "lab.h"
#include "x4_kern.h"

int main(int argc, char **argv)
{
	lab L;
	lab_init(&L, argc, argv, "times the cache row's store, one token");
	const x4_config c = lab_model();
	const int kvl = c.kv_lora, dr = c.d_rope, cw = kvl + dr, nq = c.q_lora, max_ctx = 4096;
	float *kva = lab_f32((size_t)cw, 91), *gain = lab_f32((size_t)kvl, 92);
	float *omega = lab_f32((size_t)dr / 2, 93), *q = lab_f32((size_t)nq, 94);
	float *qgain = lab_f32((size_t)nq, 95);
	uint16_t *cache = (uint16_t *)lab_alloc((size_t)max_ctx * cw * 2);
	const int p = max_ctx - 1;
	int *pos = lab_int(p);
	LAB_CK(cudaDeviceSynchronize());
	x4_err e = { 0 };
	char nm[64];
	snprintf(nm, sizeof nm, "1tok_%d+%d_row%d_of_%d", kvl, dr, p, max_ctx);
	double bytes = 4.0 * cw + 4.0 * kvl + 2.0 * dr + 2.0 * cw;
	if (L.run_new) {
		lab_row(&L, "kv_store", "new", nm, bytes, lab_time_us(&L, [&] {
				LAB_X4(x4k_kv_store(1, kvl, dr, kva, gain, c.rms_eps, omega, pos, cache,
						    max_ctx, L.s, &e), e);
			}));
		/* the norm is in place: a repetition norms the last one's output,
		 * as cheap as the first */
		lab_row(&L, "kv_store", "new+qnorm", nm, bytes + 12.0 * nq, lab_time_us(&L, [&] {
				LAB_X4(x4k_kv_store_norm(1, kvl, dr, kva, gain, c.rms_eps, omega, pos, cache,
							 max_ctx, nq, q, qgain, L.s, &e), e);
			}));
	}
	return 0;
}
