/*
 * moe_router.cu - the kernel lab for the router and its route table
 * (kernels/moe_router.cu: logits W_r x, sigmoid, top-4 of 64 by g + bias,
 * then the table the expert kernels read), for one token (the decode step)
 * and a 512-token chunk: x4k_moe_router then x4k_moe_route_table (new,
 * three launches) against x4k_moe_router_table (fused: two launches up to
 * 4 tokens, as the step calls it), L2 flushed between repetitions.
 * Bytes: the F32 router weights [64][3584], the bias, x [n_tok][3584] read,
 * sel and wts [n_tok][4] written (the table's few KB not counted).
 *
 *   make bench-kernels CUDA_ARCH=90 && build/bench/moe_router [new|all]
 */
#include "lab.h"
#include "x4_kern.h"

int main(int argc, char **argv)
{
	lab L;
	lab_init(&L, argc, argv, "times the router and route table, one token and 512");
	const x4_config c = lab_model();
	const int d = c.n_embd, E = c.n_expert, k = c.n_expert_used, T = 512;
	float *wr = lab_f32((size_t)E * d, 51), *bias = lab_f32((size_t)E, 52);
	float *x = lab_f32((size_t)T * d, 53);
	x4_err e = { 0 };
	const int toks[2] = { 1, T };
	for (int n : toks) {
		int tile = x4k_moe_tile(n, k);
		size_t rb = x4k_moe_routes_bytes(n, k, E, tile);
		void *ws = lab_alloc(rb);
		x4k_moe_routes r;
		LAB_X4(x4k_moe_routes_init(&r, ws, rb, n, k, E, tile, &e), e);
		LAB_CK(cudaDeviceSynchronize());
		char nm[64];
		snprintf(nm, sizeof nm, "%dtok_top%d_of_%d_d%d", n, k, E, d);
		double bytes = 4.0 * E * d + 4.0 * E + 4.0 * n * d + 8.0 * n * k;
		if (L.run_new) {
			lab_row(&L, "moe_router", "new", nm, bytes, lab_time_us(&L, [&] {
					LAB_X4(x4k_moe_router(&r, x, d, wr, bias, c.expert_scale, c.expert_norm,
							      L.s, &e), e);
					LAB_X4(x4k_moe_route_table(&r, L.s, &e), e);
				}));
			lab_row(&L, "moe_router", "fused", nm, bytes, lab_time_us(&L, [&] {
					LAB_X4(x4k_moe_router_table(&r, x, d, wr, bias, c.expert_scale,
								    c.expert_norm, L.s, &e), e);
				}));
		}
		LAB_CK(cudaFree(ws));
	}
	return 0;
}
