/*
 * hc.cu - the kernel lab for the hyper-connection gate (x4k_hc_pre, fused
 * path, docs/forward.md 5.1) at the decode step's shape: one token, 4 streams of
 * 3584, 24 coefficient rows, with the previous sublayer's update fused in
 * front (as the step runs it) and without.  The 7-block split of 317feb9
 * (old/hc_317.cuh) against the library's 112-block split (and the split
 * with the sublayer's RMSNorm fused, as the step calls it), L2 flushed
 * between repetitions.  Bytes: the BF16 weights, H read, y, and H_out and
 * x written.
 *
 *   make bench-kernels CUDA_ARCH=90 && build/bench/hc [old|new|all]
 */
#include "lab.h"
#include "x4_kern.h"
#include "old/hc_317.cuh"

int main(int argc, char **argv)
{
	lab L;
	lab_init(&L, argc, argv, "times the fused hyper-connection gate, one token");
	const int n_hc = 4, D = 3584, NC = X4K_HC_NCOEF(4);
	const size_t K = (size_t)n_hc * D;
	x4k_hc_cfg c = { n_hc, D, 20, 1e-6f, 1e-6f, -30.f, 30.f };
	uint16_t *fn = lab_half((size_t)NC * K, 11, false);
	float *base = lab_f32(NC, 12), *H = lab_f32(K, 13), *y = lab_f32(D, 14);
	float *scale = lab_f32(3, 15), *cp = lab_f32(NC, 16);
	float *Ho = (float *)lab_alloc(K * 4), *x = (float *)lab_alloc(D * 4);
	float *cf = (float *)lab_alloc(NC * 4);
	size_t wsb = (size_t)1 << 20; /* more than either path needs for one token */
	void *ws_old = lab_alloc(wsb), *ws_new = lab_alloc(wsb);
	LAB_CK(cudaMemset(ws_old, 0, wsb));
	LAB_CK(cudaMemset(ws_new, 0, wsb));
	LAB_CK(cudaDeviceSynchronize());
	size_t need = x4k_hc_workspace_bytes(&c, 1);
	if (need > wsb) {
		fprintf(stderr, "hc: workspace of %zu bytes needed\n", need);
		return 1;
	}
	x4_err e = { 0 };
	float *gain = lab_f32(D, 17), *xh = (float *)lab_alloc(D * 4);
	LAB_CK(cudaDeviceSynchronize());
	if (L.run_new) /* the gate with the sublayer's RMSNorm fused (the step's call) */
		lab_row(&L, "hc_gate", "new+norm", "1tok_4x3584_update", (double)NC * K * 2 + 3 * K * 4 +
			4.0 * D * 4, lab_time_us(&L, [&] {
				if (x4k_hc_pre_norm(&c, 1, H, fn, base, scale, y, cp, Ho, x, cf, gain, 1e-6f,
						    xh, false, ws_new, wsb, L.s, &e)) {
					fprintf(stderr, "hc: %s\n", e.msg);
					exit(1);
				}
			}));
	for (int upd = 1; upd >= 0; upd--) {
		const float *yp = upd ? y : nullptr, *cpp = upd ? cp : nullptr;
		double bytes = (double)NC * K * 2 + K * 4 + D * 4 + (upd ? D * 4 + K * 4 : 0);
		const char *nm = upd ? "1tok_4x3584_update" : "1tok_4x3584";
		if (L.run_old)
			lab_row(&L, "hc_gate", "old", nm, bytes, lab_time_us(&L, [&] {
					hc_317::hc_pre(&c, 1, H, fn, base, scale, yp, cpp, Ho, x, cf, ws_old, L.s);
				}));
		if (L.run_new)
			lab_row(&L, "hc_gate", "new", nm, bytes, lab_time_us(&L, [&] {
					if (x4k_hc_pre(&c, 1, H, fn, base, scale, yp, cpp, Ho, x, cf, false, ws_new,
						       wsb, L.s, &e)) {
						fprintf(stderr, "hc: %s\n", e.msg);
						exit(1);
					}
				}));
	}
	return 0;
}
