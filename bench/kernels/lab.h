/*
 * lab.h - the kernel lab's harness (bench/kernels/<op>.cu, one program an
 * operation, its variants side by side).  Each program times a variant at
 * a shape with the L2 flushed before every repetition (a 256 MiB write: the
 * H200's L2 is 60 MiB), CUDA events around the launch alone, the median of
 * LAB_REPS, and prints one TSV row:
 *
 *   op  variant  shape  bytes  time_us  gbps  pct_of_read_ceiling  tflops
 *
 * bytes are what the kernel must move: weights, inputs and outputs (a
 * program's top comment says what it counts); tflops is filled for the
 * matrix-matrix products (2 flops a multiply-add) and is "-" elsewhere, the
 * last column so that run.sh's summary reads the others as before.
 * The read ceiling is measured once in the same process: a streaming read
 * of 1 GiB (16-byte __ldcs loads, 8 blocks of 512 an SM), the median of 10.
 * A program takes `old`, `new` or `all` (default) as its first argument.
 * The shapes are the released model's (lab_model gives its dimensions).
 * Timings, not checks: tests/gpu_kern.c tests the same kernels, and the
 * lab is where they are timed.
 */
#ifndef X4_LAB_H
#define X4_LAB_H

#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <algorithm>
#include <cmath>
#include <vector>

#include "x4.h"
#include "x4_kern.h"

#define LAB_REPS 25

#define LAB_CK(x)                                                                         \
	do {                                                                              \
		cudaError_t e_ = (x);                                                     \
		if (e_ != cudaSuccess) {                                                  \
			fprintf(stderr, "lab: %s:%d: %s\n", __FILE__, __LINE__,           \
				cudaGetErrorString(e_));                                  \
			exit(1);                                                          \
		}                                                                         \
	} while (0)

/* An x4 call that must succeed: rc 0, else its message (e) and exit 1. */
#define LAB_X4(call, e)                                                                   \
	do {                                                                              \
		if ((call) != 0) {                                                        \
			fprintf(stderr, "lab: %s:%d: %s\n", __FILE__, __LINE__, (e).msg);   \
			exit(1);                                                          \
		}                                                                         \
	} while (0)

struct lab {
	cudaStream_t s;
	cudaEvent_t a, b;
	void *flush;
	size_t flush_bytes;
	double ceiling_gbps;
	bool run_old, run_new;
	int sms; /* the card's SMs */
	char gpu[256];
};

__global__ void lab_read_kernel(const uint4 *__restrict__ p, size_t n, unsigned *out)
{
	unsigned acc = 0;
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x) {
		uint4 v = __ldcs(p + i);
		acc ^= v.x ^ v.y ^ v.z ^ v.w;
	}
	if (acc == 0x12345678u)
		*out = acc;
}

/* Deterministic filler for weights and activations: any bits the kernels
 * accept (timing does not depend on the values; finite floats in [-1, 1]
 * for fp32 buffers). */
__global__ void lab_fill_bytes(uint32_t *p, size_t n_words, uint32_t seed)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n_words;
	     i += (size_t)gridDim.x * blockDim.x) {
		uint32_t z = (uint32_t)i * 0x9e3779b9u + seed;
		z ^= z >> 16;
		z *= 0x85ebca6bu;
		z ^= z >> 13;
		p[i] = z;
	}
}

__global__ void lab_fill_f32(float *p, size_t n, uint32_t seed)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x) {
		uint32_t z = (uint32_t)i * 0x9e3779b9u + seed;
		z ^= z >> 15;
		z *= 0x2c1b3c6du;
		z ^= z >> 12;
		p[i] = (float)(z >> 8) * (2.0f / 16777216.0f) - 1.0f;
	}
}

/* BF16 or fp16 words whose every half is a small finite value (exponent
 * field forced into a safe range). */
__global__ void lab_fill_half(uint16_t *p, size_t n, uint32_t seed, bool fp16)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x) {
		uint32_t z = (uint32_t)i * 0x9e3779b9u + seed;
		z ^= z >> 16;
		z *= 0x7feb352du;
		z ^= z >> 15;
		/* bf16: sign, exponent 0x78..0x7b (2^-7..2^-4), mantissa; fp16: exponent 10..13 */
		p[i] = fp16 ? (uint16_t)((z & 0x83ffu) | (((z >> 10) & 3u) + 10u) << 10)
			    : (uint16_t)((z & 0x807fu) | (((z >> 7) & 3u) + 0x78u) << 7);
	}
}

__device__ __forceinline__ uint32_t lab_mix(uint32_t z)
{
	z ^= z >> 16;
	z *= 0x7feb352du;
	z ^= z >> 15;
	z *= 0x846ca68bu;
	z ^= z >> 16;
	return z;
}

/* N(0, sigma^2) by Box-Muller from a hash of the index: into f (fp32) or h
 * (fp16 bits); the attention programs' data (their scores need a spread of
 * sizes that the uniform fillers do not give). */
__global__ void lab_fill_normal(float *f, uint16_t *h, size_t n, uint32_t seed, float sigma)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x) {
		uint32_t a = lab_mix((uint32_t)i * 0x9e3779b9u + seed);
		uint32_t b = lab_mix(a ^ 0x5bd1e995u ^ (uint32_t)(i >> 32));
		float u1 = ((a >> 8) + 0.5f) * (1.0f / 16777216.0f), u2 = (b >> 8) * (1.0f / 16777216.0f);
		float z = sigma * sqrtf(-2.0f * logf(u1)) * cospif(2.0f * u2);
		if (f)
			f[i] = z;
		else
			h[i] = __half_as_ushort(__float2half_rn(z));
	}
}

static inline void *lab_alloc(size_t n)
{
	void *p = NULL;
	LAB_CK(cudaMalloc(&p, n ? n : 16));
	return p;
}

/* Every block's fp16 scale (its first 2 bytes; bb bytes a block) made
 * finite: exponent field 10..13, sign and mantissa kept. */
__global__ void lab_finite_scales(uint8_t *w, size_t n_blocks, int bb)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n_blocks;
	     i += (size_t)gridDim.x * blockDim.x) {
		uint16_t *h = reinterpret_cast<uint16_t *>(w + i * bb);
		const unsigned v = *h;
		*h = (uint16_t)((v & 0x83ffu) | (((v >> 10) & 3u) + 10u) << 10);
	}
}

static inline void lab_bytes(void *p, size_t n, uint32_t seed)
{
	lab_fill_bytes<<<1024, 256>>>((uint32_t *)p, n / 4, seed);
	if (n % 4)
		LAB_CK(cudaMemset((char *)p + n / 4 * 4, 0, n % 4));
	LAB_CK(cudaGetLastError());
}

/* rows x k values of a block type whose scale leads its block (IQ4_NL,
 * Q8_0): random bytes, every scale made finite (2^-5..2^-2). */
static inline void *lab_blocks(int type, size_t rows, int k, uint32_t seed)
{
	const size_t nb = rows * (size_t)(k / x4_type_block_elems(type));
	const size_t bytes = nb * x4_type_block_bytes(type);
	void *w = lab_alloc(bytes);
	lab_bytes(w, bytes, seed);
	lab_finite_scales<<<1024, 256>>>((uint8_t *)w, nb, x4_type_block_bytes(type));
	LAB_CK(cudaGetLastError());
	return w;
}

static inline float *lab_f32(size_t n, uint32_t seed)
{
	float *p = (float *)lab_alloc(n * 4);
	lab_fill_f32<<<1024, 256>>>(p, n, seed);
	LAB_CK(cudaGetLastError());
	return p;
}

static inline uint16_t *lab_half(size_t n, uint32_t seed, bool fp16)
{
	uint16_t *p = (uint16_t *)lab_alloc(n * 2);
	lab_fill_half<<<1024, 256>>>(p, n, seed, fp16);
	LAB_CK(cudaGetLastError());
	return p;
}

/* max |a - b| / max |b| over n device floats, and how many of b are not
 * finite (*bad), for a lab program's check of one variant against another. */
static inline double lab_normwise_diff(const float *a, const float *b, size_t n, size_t *bad)
{
	std::vector<float> ha(n), hb(n);
	LAB_CK(cudaMemcpy(ha.data(), a, n * 4, cudaMemcpyDeviceToHost));
	LAB_CK(cudaMemcpy(hb.data(), b, n * 4, cudaMemcpyDeviceToHost));
	double d = 0, m = 0;
	*bad = 0;
	for (size_t i = 0; i < n; i++) {
		if (!(fabsf(hb[i]) <= 3.4e38f) || !(fabsf(ha[i]) <= 3.4e38f)) {
			++*bad;
			continue;
		}
		d = std::max(d, (double)fabsf(ha[i] - hb[i]));
		m = std::max(m, (double)fabsf(hb[i]));
	}
	return m > 0 ? d / m : d;
}

/* One route table in its own allocation. */
struct lab_routes {
	x4k_moe_routes r;
	void *rws;
};

/* r's table for tile routes a tile from the host's sel and wts */
static inline void lab_routes_make(lab_routes *m, int n_tok, int k, int E, int tile, const int32_t *sel,
				   const float *wts, cudaStream_t s)
{
	x4_err e = { 0 };
	size_t rb = x4k_moe_routes_bytes(n_tok, k, E, tile);
	m->rws = lab_alloc(rb);
	LAB_X4(x4k_moe_routes_init(&m->r, m->rws, rb, n_tok, k, E, tile, &e), e);
	LAB_CK(cudaMemcpy(m->r.sel, sel, (size_t)n_tok * k * 4, cudaMemcpyHostToDevice));
	LAB_CK(cudaMemcpy(m->r.wts, wts, (size_t)n_tok * k * 4, cudaMemcpyHostToDevice));
	LAB_X4(x4k_moe_route_table(&m->r, s, &e), e);
	LAB_CK(cudaStreamSynchronize(s));
}

/* A device int holding v (a position, read by the kernels on the device). */
static inline int *lab_int(int v)
{
	int *p = (int *)lab_alloc(sizeof(int));
	LAB_CK(cudaMemcpy(p, &v, sizeof v, cudaMemcpyHostToDevice));
	return p;
}

static inline void lab_flush(lab *L)
{
	static unsigned char v;
	LAB_CK(cudaMemsetAsync(L->flush, ++v, L->flush_bytes, L->s));
}

template <typename F>
static double lab_time_us(lab *L, F &&launch)
{
	std::vector<float> t;
	for (int w = 0; w < 3; w++)
		launch();
	LAB_CK(cudaStreamSynchronize(L->s));
	LAB_CK(cudaGetLastError());
	for (int r = 0; r < LAB_REPS; r++) {
		lab_flush(L);
		LAB_CK(cudaEventRecord(L->a, L->s));
		launch();
		LAB_CK(cudaEventRecord(L->b, L->s));
		LAB_CK(cudaEventSynchronize(L->b));
		float ms;
		LAB_CK(cudaEventElapsedTime(&ms, L->a, L->b));
		t.push_back(ms);
	}
	LAB_CK(cudaGetLastError());
	std::sort(t.begin(), t.end());
	return 1e3 * (LAB_REPS % 2 ? t[LAB_REPS / 2] : 0.5 * (t[LAB_REPS / 2 - 1] + t[LAB_REPS / 2]));
}

/* One row; flops > 0 for a matrix-matrix product fills the tflops column. */
static inline void lab_row(const lab *L, const char *op, const char *variant, const char *shape,
			   double bytes, double us, double flops = 0)
{
	double gbps = bytes / (us * 1e3);
	char tf[32] = "-";
	if (flops > 0)
		snprintf(tf, sizeof tf, "%.2f", flops / (us * 1e6));
	printf("%s\t%s\t%s\t%.0f\t%.2f\t%.0f\t%.1f\t%s\n", op, variant, shape, bytes, us, gbps,
	       100.0 * gbps / L->ceiling_gbps, tf);
	fflush(stdout);
}

/* The released model's dimensions (x4_config_preset "full"). */
static inline x4_config lab_model(void)
{
	x4_config c;
	x4_err e = { 0 };
	LAB_X4(x4_config_preset("full", &c, &e), e);
	return c;
}

static inline void lab_init(lab *L, int argc, char **argv, const char *usage)
{
	const char *v = argc > 1 ? argv[1] : "all";
	L->run_old = !strcmp(v, "old") || !strcmp(v, "all");
	L->run_new = !strcmp(v, "new") || !strcmp(v, "all");
	if (!L->run_old && !L->run_new) {
		fprintf(stderr, "usage: %s [old|new|all]\n%s\n", argv[0], usage);
		exit(2);
	}
	cudaDeviceProp prop;
	LAB_CK(cudaGetDeviceProperties(&prop, 0));
	snprintf(L->gpu, sizeof L->gpu, "%s", prop.name);
	L->sms = prop.multiProcessorCount;
	LAB_CK(cudaStreamCreate(&L->s));
	LAB_CK(cudaEventCreate(&L->a));
	LAB_CK(cudaEventCreate(&L->b));
	L->flush_bytes = (size_t)256 << 20;
	L->flush = lab_alloc(L->flush_bytes);
	size_t rb = (size_t)1 << 30;
	uint4 *buf = (uint4 *)lab_alloc(rb);
	LAB_CK(cudaMemset(buf, 1, rb));
	unsigned *out = (unsigned *)lab_alloc(4);
	const int blocks = prop.multiProcessorCount * 8;
	std::vector<float> t;
	for (int r = 0; r < 10; r++) {
		LAB_CK(cudaEventRecord(L->a, L->s));
		lab_read_kernel<<<blocks, 512, 0, L->s>>>(buf, rb / 16, out);
		LAB_CK(cudaEventRecord(L->b, L->s));
		LAB_CK(cudaEventSynchronize(L->b));
		float ms;
		LAB_CK(cudaEventElapsedTime(&ms, L->a, L->b));
		t.push_back(ms);
	}
	std::sort(t.begin(), t.end());
	L->ceiling_gbps = rb / (0.5 * (t[4] + t[5]) * 1e6);
	LAB_CK(cudaFree(buf));
	LAB_CK(cudaFree(out));
	fprintf(stderr, "# %s: %s, %d SMs, read ceiling %.0f GB/s (1 GiB, median of 10)\n", argv[0],
		L->gpu, prop.multiProcessorCount, L->ceiling_gbps);
	printf("op\tvariant\tshape\tbytes\ttime_us\tgbps\tpct_of_read_ceiling\ttflops\n");
}

#endif
