/*
 * trunk_cuda.c - NOT YET IMPLEMENTED: a placeholder so that lib/trunk.c
 * links before the CUDA trunk exists.  Every entry point refuses with
 * X4_ECUDA; the GPU part replaces this whole file with the real trunk.
 */
#include "trunk_int.h"

int x4_trunk_cuda_create(x4_trunk_cuda **t, const x4_model *m, const x4_trunk_opts *o,
			 x4_err *e)
{
	*t = NULL;
	return x4_err_set(e, X4_ECUDA, "this build has no CUDA trunk yet: use --device cpu");
}

void x4_trunk_cuda_free(x4_trunk_cuda *t) { (void)t; }
void x4_trunk_cuda_reset(x4_trunk_cuda *t) { (void)t; }
int x4_trunk_cuda_pos(const x4_trunk_cuda *t) { (void)t; return 0; }

int x4_trunk_cuda_forward(x4_trunk_cuda *t, const int32_t *ids, int n, float *logits,
			  bool all_logits, x4_err *e)
{
	return x4_err_set(e, X4_ECUDA, "this build has no CUDA trunk yet: use --device cpu");
}

void x4_trunk_cuda_set_probe(x4_trunk_cuda *t, x4_probe_fn fn, void *ctx) { (void)t; }
