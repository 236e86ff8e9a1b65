/*
 * prof_ceiling.c - the streaming-read ceiling a profile's GB/s are a share
 * of, measured in the profiling process itself so that it is the same card
 * (or machine) in the same state.  The GPU's is kernels/stream_read.cu over
 * 1 GiB (the H200's L2 is 60 MiB: nothing is served from it); the CPU's a
 * read of 256 MiB on the trunk's threads.  Each is the median of several
 * repetitions after a warm-up.
 */
#include "x4_int.h"

#ifdef X4_HAVE_CUDA
#include "cuda_check.h"
#include "x4_kern.h"
#endif

#define REPS 10
#define CPU_REPS 5
#define CPU_BYTES ((size_t)256 << 20)

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

static double median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof *v, cmp_double);
	return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* ---- the CPU ---- */

struct cpu_read {
	const uint64_t *a;
	size_t n;
	int parts;
	uint64_t *sink; /* [parts]: the sums, so that the reads are kept */
};

static void cpu_read_part(void *arg, int64_t i)
{
	struct cpu_read *c = arg;
	size_t per = (c->n + (size_t)c->parts - 1) / (size_t)c->parts;
	size_t lo = (size_t)i * per, hi = X4_MIN(c->n, lo + per);
	uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
	size_t k = lo;
	for (; k + 4 <= hi; k += 4) {
		s0 += c->a[k];
		s1 += c->a[k + 1];
		s2 += c->a[k + 2];
		s3 += c->a[k + 3];
	}
	for (; k < hi; k++)
		s0 += c->a[k];
	c->sink[i] = s0 + s1 + s2 + s3;
}

static int cpu_ceiling(int threads, double *gbps, char *desc, size_t cap, x4_err *e)
{
	int nthr = threads > 0 ? threads : x4_ncpu();
	uint64_t *a = x4_alloc(CPU_BYTES, "the read-ceiling buffer", e);
	uint64_t *sink = x4_calloc((size_t)nthr, sizeof *sink, "the read-ceiling buffer", e);
	if (!a || !sink) {
		free(a);
		free(sink);
		return X4_ENOMEM;
	}
	memset(a, 1, CPU_BYTES);
	struct cpu_read c = { a, CPU_BYTES / sizeof *a, nthr, sink };
	double t[CPU_REPS];
	x4_parallel_for(nthr, nthr, cpu_read_part, &c); /* warm-up */
	for (int r = 0; r < CPU_REPS; r++) {
		double t0 = x4_now();
		x4_parallel_for(nthr, nthr, cpu_read_part, &c);
		t[r] = x4_now() - t0;
	}
	*gbps = (double)CPU_BYTES / median(t, CPU_REPS) / 1e9;
	if (desc)
		snprintf(desc, cap, "a read of %zu MiB on %d CPU threads, median of %d",
			 CPU_BYTES >> 20, nthr, CPU_REPS);
	free(a);
	free(sink);
	return 0;
}

/* ---- the GPU ---- */

#ifdef X4_HAVE_CUDA
struct gpu_read {
	void *buf;
	unsigned long long *sink;
	cudaStream_t s;
	cudaEvent_t ev[2];
};

static void gpu_free(struct gpu_read *g)
{
	if (g->s)
		cudaStreamSynchronize(g->s);
	for (int i = 0; i < 2; i++)
		if (g->ev[i])
			cudaEventDestroy(g->ev[i]);
	if (g->s)
		cudaStreamDestroy(g->s);
	x4_dev_free(g->buf);
	x4_dev_free(g->sink);
}

static int gpu_measure(int dev, struct gpu_read *g, double *gbps, char *desc, size_t cap,
		       x4_err *e)
{
	X4_CUDA_TRY(cudaSetDevice(dev), "select the CUDA device", e);
	struct cudaDeviceProp pr;
	X4_CUDA_TRY(cudaGetDeviceProperties(&pr, dev), "read the CUDA device's properties", e);
	size_t free_b = 0, total_b = 0;
	X4_CUDA_TRY(cudaMemGetInfo(&free_b, &total_b), "read the free device memory", e);
	/* 1 GiB, or what half the free memory allows (at least 64 MiB). */
	size_t bytes = (size_t)1 << 30;
	while (bytes > ((size_t)64 << 20) && bytes > free_b / 2)
		bytes /= 2;
	int rc = x4_dev_alloc(&g->buf, bytes, "the read-ceiling buffer", e);
	if (!rc)
		rc = x4_dev_alloc((void **)&g->sink, sizeof *g->sink, "the read-ceiling sink", e);
	if (rc)
		return rc;
	X4_CUDA_TRY(cudaMemset(g->buf, 1, bytes), "fill the read-ceiling buffer", e);
	X4_CUDA_TRY(cudaStreamCreate(&g->s), "create a stream for the read ceiling", e);
	for (int i = 0; i < 2; i++)
		X4_CUDA_TRY(cudaEventCreate(&g->ev[i]), "create an event for the read ceiling", e);
	/* Eight blocks of 512 a multiprocessor: the occupancy at which the
	 * H200 reaches its best streaming rate (a quarter of that loses 13%). */
	int blocks = pr.multiProcessorCount * 8;
	double t[REPS];
	for (int r = -2; r < REPS; r++) {
		X4_CUDA_TRY(cudaEventRecord(g->ev[0], g->s), "time the read ceiling", e);
		if ((rc = x4k_stream_read(g->buf, bytes / 16, blocks, g->sink, g->s, e)))
			return rc;
		X4_CUDA_TRY(cudaEventRecord(g->ev[1], g->s), "time the read ceiling", e);
		X4_CUDA_TRY(cudaEventSynchronize(g->ev[1]), "run the read ceiling", e);
		float ms = 0;
		X4_CUDA_TRY(cudaEventElapsedTime(&ms, g->ev[0], g->ev[1]), "time the read ceiling",
			    e);
		if (r >= 0)
			t[r] = (double)ms * 1e-3;
	}
	*gbps = (double)bytes / median(t, REPS) / 1e9;
	if (desc)
		snprintf(desc, cap, "a streaming read of %zu MiB on %.100s, %d blocks of 512, "
			 "median of %d", bytes >> 20, pr.name, blocks, REPS);
	return 0;
}
#endif

int x4_prof_ceiling(int device, int threads, double *gbps, char *desc, size_t desc_cap,
		    x4_err *e)
{
	*gbps = 0;
	if (desc && desc_cap)
		desc[0] = 0;
	if (device < 0)
		return cpu_ceiling(threads, gbps, desc, desc_cap, e);
#ifdef X4_HAVE_CUDA
	struct gpu_read g = { 0 };
	int rc = gpu_measure(device, &g, gbps, desc, desc_cap, e);
	gpu_free(&g);
	return rc;
#else
	return x4_err_set(e, X4_ECUDA, "this build of x4 has no CUDA: the read ceiling of "
			  "cuda:%d cannot be measured", device);
#endif
}
