/*
 * mla_absorb.cu - the kernel lab for the absorbed MLA's two per-head
 * products at the decode step (one token, 32 heads, BF16 weights as
 * stored): the query into the latent space (x4k_mla_absorb_q, W_kb
 * [32][512][128]) alone (new) and with the q rope in the same launch
 * (new+rope, x4k_mla_absorb_q_rope: the step's call), and the value back
 * out of it (x4k_mla_expand_v, W_vb [32][128][512]).  L2 flushed between
 * repetitions.  Bytes: the weights, q [32][192] or ob [32][512] read, qt's
 * latent part [32][512] (all of qt [32][576] with the rope) or o [32][128]
 * written.
 *
 *   make bench-kernels CUDA_ARCH=90 && build/bench/mla_absorb [new|all]
 */
#include "lab.h"
#include "x4_kern.h"

int main(int argc, char **argv)
{
	lab L;
	lab_init(&L, argc, argv, "times the absorb and expand products, one token");
	const x4_config c = lab_model();
	const int nh = c.n_head, kvl = c.kv_lora, dn = c.d_nope, dr = c.d_rope, dv = c.d_v;
	const int dqk = dn + dr, cw = kvl + dr;
	uint16_t *wkb = lab_half((size_t)nh * kvl * dn, 71, false);
	uint16_t *wvb = lab_half((size_t)nh * dv * kvl, 72, false);
	float *q = lab_f32((size_t)nh * dqk, 73), *ob = lab_f32((size_t)nh * kvl, 74);
	float *omega = lab_f32((size_t)dr / 2, 75);
	float *qt = (float *)lab_alloc((size_t)nh * cw * 4), *o = (float *)lab_alloc((size_t)nh * dv * 4);
	int *pos = lab_int(4095);
	LAB_CK(cudaDeviceSynchronize());
	x4_err e = { 0 };
	char nm[64];
	snprintf(nm, sizeof nm, "1tok_%dx%dx%d", nh, kvl, dn);
	double wb = 2.0 * nh * kvl * dn;
	if (L.run_new) {
		lab_row(&L, "mla_absorb_q", "new", nm, wb + 4.0 * nh * dqk + 4.0 * nh * kvl,
			lab_time_us(&L, [&] {
				LAB_X4(x4k_mla_absorb_q(1, nh, kvl, dn, dr, wkb, q, qt, L.s, &e), e);
			}));
		lab_row(&L, "mla_absorb_q", "new+rope", nm, wb + 4.0 * nh * dqk + 4.0 * nh * cw + 2.0 * dr,
			lab_time_us(&L, [&] {
				LAB_X4(x4k_mla_absorb_q_rope(1, nh, kvl, dn, dr, wkb, q, qt, omega, pos, L.s,
							     &e), e);
			}));
		snprintf(nm, sizeof nm, "1tok_%dx%dx%d", nh, dv, kvl);
		lab_row(&L, "mla_expand_v", "new", nm, 2.0 * nh * dv * kvl + 4.0 * nh * kvl + 4.0 * nh * dv,
			lab_time_us(&L, [&] {
				LAB_X4(x4k_mla_expand_v(1, nh, kvl, dv, wvb, ob, o, L.s, &e), e);
			}));
	}
	return 0;
}
