/*
 * ref_gemv.c - the plain-C references of the quantized products and the
 * SwiGLU product (x4_kern.h section 3): dequantize a row with x4_dequant,
 * then the obvious double-precision dot products.  Rows are spread over the
 * CPUs in chunks only because the model's sizes would take minutes on one.
 */
#include "x4_int.h"
#include "x4_kern.h"

#include <math.h>

#define ROWS_PER_TASK 64

struct gemm_job {
	int type, n, k, n_tok;
	const uint8_t *w;
	size_t row_bytes;
	const float *x;
	float *y, *mag;
	int failed; /* a task that could not get its row buffer */
};

static void gemm_rows(void *arg, int64_t task)
{
	struct gemm_job *j = arg;
	float *row = malloc((size_t)j->k * sizeof *row); /* [k] one dequantized row */
	if (!row) {
		__atomic_store_n(&j->failed, 1, __ATOMIC_RELAXED);
		return;
	}
	int r0 = (int)task * ROWS_PER_TASK;
	int r1 = X4_MIN(j->n, r0 + ROWS_PER_TASK);
	for (int r = r0; r < r1; r++) {
		if (x4_dequant(j->type, j->w + (size_t)r * j->row_bytes, row,
			       (uint64_t)j->k, NULL)) {
			__atomic_store_n(&j->failed, 1, __ATOMIC_RELAXED);
			break;
		}
		for (int t = 0; t < j->n_tok; t++) {
			const float *x = j->x + (size_t)t * j->k;
			double acc = 0, m = 0;
			for (int c = 0; c < j->k; c++) {
				double p = (double)row[c] * (double)x[c];
				acc += p;
				m += fabs(p);
			}
			j->y[(size_t)t * j->n + r] = (float)acc;
			if (j->mag)
				j->mag[(size_t)t * j->n + r] = (float)m;
		}
	}
	free(row);
}

int x4r_gemm(int type, const void *w, int n, int k, int n_tok, const float *x,
	     float *y, float *mag, x4_err *e)
{
	if (type != X4_T_IQ4_NL && type != X4_T_Q6_K && type != X4_T_BF16)
		return x4_err_set(e, X4_EINVAL, "ref gemm: type %s is not IQ4_NL, Q6_K or BF16",
				  x4_type_name(type));
	if (n < 0 || k <= 0 || n_tok < 0 || k % x4_type_block_elems(type))
		return x4_err_set(e, X4_EINVAL, "ref gemm: bad shape n %d k %d tokens %d for %s",
				  n, k, n_tok, x4_type_name(type));
	struct gemm_job j = {
		.type = type, .n = n, .k = k, .n_tok = n_tok, .w = w,
		.row_bytes = (size_t)x4_type_bytes(type, (uint64_t)k),
		.x = x, .y = y, .mag = mag,
	};
	x4_parallel_for((n + ROWS_PER_TASK - 1) / ROWS_PER_TASK, 0, gemm_rows, &j);
	if (j.failed)
		return x4_err_set(e, X4_ENOMEM, "ref gemm: out of host memory for a row of %d", k);
	return 0;
}

int x4r_gemv(int type, const void *w, int n, int k, const float *x, float *y,
	     float *mag, x4_err *e)
{
	return x4r_gemm(type, w, n, k, 1, x, y, mag, e);
}

void x4r_swiglu(int64_t n, const float *g, const float *u, float *h)
{
	for (int64_t i = 0; i < n; i++) {
		double gi = g[i];
		h[i] = (float)(gi / (1.0 + exp(-gi)) * (double)u[i]);
	}
}
