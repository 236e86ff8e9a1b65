/*
 * t_trunk.h - what the CPU trunk tests share (tests/test_trunk.c and
 * tests/test_shapes.c): a trunk made with the options they vary, and the
 * relative error they compare logits by.
 */
#ifndef X4_T_TRUNK_H
#define X4_T_TRUNK_H

#include <math.h>
#include <stddef.h>
#include <stdio.h>

#include "x4.h"

/* A CPU trunk on m with x4_trunk_opts_default's options but these (chunk 0:
 * automatic prefill chunks); NULL, the reason printed as a comment line,
 * when it cannot be made. */
static x4_trunk *t_trunk(const x4_model *m, int prec, int threads, int max_ctx, int chunk,
			 int kv, int resid) __attribute__((unused));
static x4_trunk *t_trunk(const x4_model *m, int prec, int threads, int max_ctx, int chunk,
			 int kv, int resid)
{
	x4_trunk_opts o;
	x4_trunk_opts_default(&o);
	o.device = -1;
	o.prec = prec;
	o.threads = threads;
	o.max_ctx = max_ctx;
	o.prefill_chunk = chunk;
	o.kv = kv;
	o.resid = resid;
	x4_trunk *t;
	x4_err e;
	if (x4_trunk_create(&t, m, &o, &e)) {
		printf("# trunk_create: %s\n", e.msg);
		return NULL;
	}
	return t;
}

/* ||a - b|| / ||b|| over n values (the numpy oracle's measure); ||a - b||
 * when b is all zeros. */
static double t_rel_err(const float *a, const float *b, size_t n) __attribute__((unused));
static double t_rel_err(const float *a, const float *b, size_t n)
{
	double d = 0, nb = 0;
	for (size_t i = 0; i < n; i++) {
		d += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
		nb += (double)b[i] * b[i];
	}
	return nb > 0 ? sqrt(d / nb) : sqrt(d);
}

#endif
