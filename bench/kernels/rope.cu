/*
 * rope.cu - the kernel lab for the YaRN RoPE (x4k_rope) as the decode step
 * lays it out: one token's 32 query heads, the 64-wide rope tail of each
 * q row [32][192] written into qt's tail [32][576], at position 4095.  L2
 * flushed between repetitions.  Bytes: the rope parts read and written and
 * the 32 frequencies.
 *
 *   make bench-kernels CUDA_ARCH=90 && build/bench/rope [new|all]
 */
#include "lab.h"
#include "x4_kern.h"

int main(int argc, char **argv)
{
	lab L;
	lab_init(&L, argc, argv, "times the query rope, one token, 32 heads");
	const x4_config c = lab_model();
	const int nh = c.n_head, dr = c.d_rope, dqk = c.d_nope + dr, cw = c.kv_lora + dr;
	float *q = lab_f32((size_t)nh * dqk, 81), *omega = lab_f32((size_t)dr / 2, 82);
	float *qt = (float *)lab_alloc((size_t)nh * cw * 4);
	int *pos = lab_int(4095);
	LAB_CK(cudaDeviceSynchronize());
	x4_err e = { 0 };
	char nm[64];
	snprintf(nm, sizeof nm, "1tok_%dx%d_q_to_qt", nh, dr);
	if (L.run_new)
		lab_row(&L, "rope", "new", nm, 8.0 * nh * dr + 2.0 * dr, lab_time_us(&L, [&] {
				LAB_X4(x4k_rope(1, nh, dr, q + c.d_nope, (long)nh * dqk, dqk, qt + c.kv_lora,
						(long)nh * cw, cw, omega, pos, L.s, &e), e);
			}));
	return 0;
}
