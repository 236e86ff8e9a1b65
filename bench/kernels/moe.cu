/*
 * moe.cu - the kernel lab for the routed experts at the batch-1 decode
 * step (x4k_moe_experts: gate and up with the SwiGLU product, then down,
 * for one token's 4 routes on 4 distinct experts of 64, IQ4_NL 3584 x
 * 1024): the staged gemv tiles of 317feb9 (old/quant_dev_317.cuh) against
 * the library's one-token register core, L2 flushed between repetitions.
 * Bytes: the 4 experts' weights (12 matrices of 2 MB).
 *
 *   make bench-kernels CUDA_ARCH=90 && build/bench/moe [old|new|all]
 */
#include "lab.h"
#include "x4_kern.h"
#include "old/quant_dev_317.cuh"

int main(int argc, char **argv)
{
	lab L;
	lab_init(&L, argc, argv, "times the routed experts, one token, top-4 of 64");
	const int d = 3584, f = 1024, E = 64, k = 4, n_tok = 1;
	size_t mb = x4_type_bytes(X4_T_IQ4_NL, (uint64_t)E * f * d);
	void *gate = lab_alloc(mb), *up = lab_alloc(mb), *down = lab_alloc(mb);
	lab_bytes(gate, mb, 31);
	lab_bytes(up, mb, 32);
	lab_bytes(down, mb, 33);
	float *x = lab_f32((size_t)d, 34);
	x4_err e = { 0 };
	int tile = x4k_moe_tile(n_tok, k);
	size_t rb = x4k_moe_routes_bytes(n_tok, k, E, tile);
	void *rws = lab_alloc(rb);
	x4k_moe_routes r;
	size_t wsb = x4k_moe_experts_workspace_bytes(n_tok, k, d, f);
	void *ws = lab_alloc(wsb);
	int32_t sel[4] = { 5, 17, 40, 63 };
	float wts[4] = { 0.4f, 0.3f, 0.2f, 0.1f };
	if (x4k_moe_routes_init(&r, rws, rb, n_tok, k, E, tile, &e)) {
		fprintf(stderr, "moe: %s\n", e.msg);
		return 1;
	}
	LAB_CK(cudaMemcpy(r.sel, sel, sizeof sel, cudaMemcpyHostToDevice));
	LAB_CK(cudaMemcpy(r.wts, wts, sizeof wts, cudaMemcpyHostToDevice));
	if (x4k_moe_route_table(&r, L.s, &e)) {
		fprintf(stderr, "moe: %s\n", e.msg);
		return 1;
	}
	LAB_CK(cudaDeviceSynchronize());
	float *h = (float *)ws;
	float *o = (float *)((char *)ws + (((size_t)k * f * 4 + 255) & ~(size_t)255));
	double bytes = 3.0 * k * x4_type_bytes(X4_T_IQ4_NL, (uint64_t)f * d);
	const char *nm = "1tok_top4_3584x1024";
	if (L.run_old)
		lab_row(&L, "moe_experts", "old", nm, bytes, lab_time_us(&L, [&] {
				x4d_317::moe_experts(&r, x, d, f, gate, up, down, h, o, L.s);
			}));
	if (L.run_new)
		lab_row(&L, "moe_experts", "new", nm, bytes, lab_time_us(&L, [&] {
				if (x4k_moe_experts(&r, X4_T_IQ4_NL, x, d, f, gate, up, down, ws, wsb, NULL,
						    L.s, &e)) {
					fprintf(stderr, "moe: %s\n", e.msg);
					exit(1);
				}
			}));
	return 0;
}
