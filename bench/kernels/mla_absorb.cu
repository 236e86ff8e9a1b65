/*
 * mla_absorb.cu - the kernel lab for the absorbed MLA's two per-head
 * products (32 heads, BF16 weights as stored): the query into the latent
 * space (x4k_mla_absorb_q, W_kb [32][512][128]) alone (new) and with the q
 * rope in the same launch (new+rope, x4k_mla_absorb_q_rope: the step's
 * call), and the value back out of it (x4k_mla_expand_v, W_vb
 * [32][128][512]).  First at the decode step's one token, then for
 * prefill chunks of 16 to 512 tokens on the library's two cores
 * (x4k_gemm_mma_set: old the warp-a-row FMA kernel, new the tensor-core
 * tile), after a check that the two agree within 1e-5 normwise (a
 * "# check" line on stderr, exit 1 if not).  L2 flushed between
 * repetitions.  Bytes: the weights, q [T][32][192] or ob [T][32][512]
 * read, qt's latent part [T][32][512] (all of qt [T][32][576] with the
 * rope) or o [T][32][128] written; tflops: 2 rows k T a head.
 *
 *   make bench-kernels CUDA_ARCH=90 && build/bench/mla_absorb [old|new|all]
 */
#include "lab.h"
#include "x4_kern.h"

int main(int argc, char **argv)
{
	lab L;
	lab_init(&L, argc, argv, "times the absorb and expand products, one token (new) and prefill "
		 "chunks on the two cores (old: FMA, new: tensor cores)");
	const x4_config c = lab_model();
	const int nh = c.n_head, kvl = c.kv_lora, dn = c.d_nope, dr = c.d_rope, dv = c.d_v;
	const int dqk = dn + dr, cw = kvl + dr;
	uint16_t *wkb = lab_half((size_t)nh * kvl * dn, 71, false);
	uint16_t *wvb = lab_half((size_t)nh * dv * kvl, 72, false);
	float *q = lab_f32((size_t)nh * dqk, 73), *ob = lab_f32((size_t)nh * kvl, 74);
	float *omega = lab_f32((size_t)dr / 2, 75);
	const int TMAX = 512;
	float *qt = (float *)lab_alloc((size_t)nh * cw * 4), *o = (float *)lab_alloc((size_t)nh * dv * 4);
	float *pq = lab_f32((size_t)TMAX * nh * dqk, 76), *pob = lab_f32((size_t)TMAX * nh * kvl, 77);
	float *pqt[2], *po[2];
	for (int i = 0; i < 2; i++) {
		pqt[i] = (float *)lab_alloc((size_t)TMAX * nh * cw * 4);
		po[i] = (float *)lab_alloc((size_t)TMAX * nh * dv * 4);
	}
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
	bool ok = true;
	for (const int T : { 16, 32, 64, 512 }) {
		for (int core = 0; core < 2; core++) { /* the check: both cores, the same data */
			x4k_gemm_mma_set(core);
			LAB_X4(x4k_mla_absorb_q_rope(T, nh, kvl, dn, dr, wkb, pq, pqt[core], omega, pos, L.s, &e), e);
			LAB_X4(x4k_mla_expand_v(T, nh, kvl, dv, wvb, pob, po[core], L.s, &e), e);
		}
		x4k_gemm_mma_set(1);
		LAB_CK(cudaStreamSynchronize(L.s));
		size_t bq, bo;
		const double dq = lab_normwise_diff(pqt[1], pqt[0], (size_t)T * nh * cw, &bq);
		const double dv2 = lab_normwise_diff(po[1], po[0], (size_t)T * nh * dv, &bo);
		const bool same = dq <= 1e-5 && dv2 <= 1e-5 && !bq && !bo;
		fprintf(stderr, "# check t%d: absorb %.3g, expand %.3g (max|new - old| / max|old|), %zu not "
			"finite: %s\n", T, dq, dv2, bq + bo, same ? "ok" : "DIFFER");
		ok = ok && same;
		for (int core = 0; core < 2; core++) {
			if (!(core ? L.run_new : L.run_old))
				continue;
			x4k_gemm_mma_set(core);
			snprintf(nm, sizeof nm, "t%d_%dx%dx%d", T, nh, kvl, dn);
			lab_row(&L, "mla_absorb_q_rope", core ? "new" : "old", nm,
				wb + 4.0 * T * nh * dqk + 4.0 * T * nh * cw, lab_time_us(&L, [&] {
					LAB_X4(x4k_mla_absorb_q_rope(T, nh, kvl, dn, dr, wkb, pq, pqt[0], omega,
								     pos, L.s, &e), e);
				}), 2.0 * nh * kvl * dn * T);
			snprintf(nm, sizeof nm, "t%d_%dx%dx%d", T, nh, dv, kvl);
			lab_row(&L, "mla_expand_v", core ? "new" : "old", nm,
				2.0 * nh * dv * kvl + 4.0 * T * nh * kvl + 4.0 * T * nh * dv, lab_time_us(&L, [&] {
					LAB_X4(x4k_mla_expand_v(T, nh, kvl, dv, wvb, pob, po[0], L.s, &e), e);
				}), 2.0 * nh * dv * kvl * T);
		}
		x4k_gemm_mma_set(1);
	}
	fprintf(stderr, "# check: %s\n", ok ? "every chunk ok" : "DIFFER");
	return ok ? 0 : 1;
}
