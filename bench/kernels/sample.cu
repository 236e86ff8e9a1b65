/*
 * sample.cu - the kernel lab for picking the next token on the device
 * (kernels/sample.cu) over the 131072 logits of one decode step: the
 * argmax (x4k_argmax) and the sampler (x4k_sample) at temperature 0.8 with
 * top-p 0.9, and at 0.7 with top-k 40 and top-p 0.95.  The logits are
 * roughly normal with sd 2.5 and one NaN (the sampler's radix select and
 * kept mass depend on their spread; the argmax does not).  L2 flushed
 * between repetitions.  Bytes: the logits read.
 *
 *   make bench-kernels CUDA_ARCH=90 && build/bench/sample [new|all]
 */
#include <math.h>

#include "lab.h"
#include "x4_kern.h"

/* l = 2.15 (u0 + u1 + u2 + u3), u [4][n] uniform in [-1, 1]: sd 2.48 */
__global__ void logits_kernel(float *l, const float *u, int n)
{
	for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
		l[i] = 2.15f * (u[i] + u[(size_t)n + i] + u[2 * (size_t)n + i] + u[3 * (size_t)n + i]);
}

int main(int argc, char **argv)
{
	lab L;
	lab_init(&L, argc, argv, "times the argmax and the sampler over the vocabulary");
	const x4_config c = lab_model();
	const int V = c.n_vocab;
	float *u = lab_f32((size_t)4 * V, 121), *logits = (float *)lab_alloc((size_t)V * 4);
	logits_kernel<<<256, 256>>>(logits, u, V);
	LAB_CK(cudaGetLastError());
	const float nan = NAN;
	LAB_CK(cudaMemcpy(logits + V / 3, &nan, sizeof nan, cudaMemcpyHostToDevice));
	size_t wsb = x4k_sample_workspace_bytes(V);
	void *ws = lab_alloc(wsb);
	int32_t *out = (int32_t *)lab_alloc(sizeof(int32_t));
	uint64_t *counter = (uint64_t *)lab_alloc(sizeof(uint64_t));
	LAB_CK(cudaMemset(counter, 0, sizeof(uint64_t)));
	LAB_CK(cudaDeviceSynchronize());
	x4_err e = { 0 };
	char nm[64];
	snprintf(nm, sizeof nm, "vocab%d", V);
	if (!L.run_new)
		return 0;
	lab_row(&L, "argmax", "new", nm, 4.0 * V, lab_time_us(&L, [&] {
			LAB_X4(x4k_argmax(V, logits, out, ws, wsb, L.s, &e), e);
		}));
	const struct {
		float temp;
		int top_k;
		float top_p;
	} set[] = { { 0.8f, 0, 0.9f }, { 0.7f, 40, 0.95f } };
	for (const auto &s : set) {
		snprintf(nm, sizeof nm, "vocab%d_T%g_k%d_p%g", V, s.temp, s.top_k, s.top_p);
		lab_row(&L, "sample", "new", nm, 4.0 * V, lab_time_us(&L, [&] {
				LAB_X4(x4k_sample(V, logits, s.temp, s.top_k, s.top_p, 122, counter, out, ws,
						  wsb, L.s, &e), e);
			}));
	}
	return 0;
}
