/*
 * trunk_cuda.h - the CUDA trunk's state, shared by its two files:
 * lib/cuda/trunk_cuda.c (device, upload, memory plan, create/free) and
 * lib/cuda/trunk_cuda_fwd.c (the forward pass and the probe).  Seen by those two
 * only.
 */
#ifndef X4_TRUNK_CUDA_H
#define X4_TRUNK_CUDA_H

#include "trunk_int.h"

#ifdef X4_HAVE_CUDA
#include "cuda_check.h"
#include "x4_kern.h"

/* A block's tensors on the device: the GGUF bytes as mapped (the kernels
 * index IQ4_NL/Q6_K/BF16 blocks and the expert tensors [E][rows][k] as
 * stored), NULL where the host binding is NULL. */
typedef struct x4_block_dev {
#define X4_FIELD_(f, ...) const void *f;
	X4_BLOCK_TENSORS(X4_FIELD_)
#undef X4_FIELD_
} x4_block_dev;

struct x4_trunk_cuda {
	const x4_model *m;
	const x4_config *c;
	x4_trunk_opts o;
	int dev;
	char dev_name[128];
	cudaStream_t s;
	/* The gates' side stream (x4k_hc_pre_norm): side_live while a gate's
	 * coefficients may still be forming there, until a reader joins them. */
	x4k_side side;
	bool side_live;
	int max_ctx, pos, chunk, cw, ncoef, F;
	x4k_hc_cfg hc;
	void *weights;           /* one allocation holding every trunk tensor */
	uint64_t weight_bytes;
	const void *token_embd, *output_norm, *output;
	x4_block_dev *blk;       /* [n_block] */
	uint16_t *cache;         /* [n_block][max_ctx][cw] fp16 bits */
	uint64_t cache_bytes;
	void *work;              /* the workspace allocation */
	uint64_t work_bytes;
	x4_cuda_ws w;
	int32_t *ids_host;       /* [chunk] pinned staging for the ids */
	int *pos_host;           /* [1] pinned staging for the position */
	double load_s;
	/* the probe's host copies (allocated when a probe is set) */
	x4_probe_fn probe;
	void *probe_ctx;
	float *pr_streams, *pr_y, *pr_xh, *pr_coef, *pr_wts; /* [n_hc*D], [D], [D], [ncoef], [k] */
	int *pr_sel;             /* [k] */
	float *narrow_host;      /* [chunk][n_hc][D] for the F16/BF16 residual arms */
	/* x4_trunk_forward_next's device pick, allocated on its first call */
	void *samp;              /* [ws | next id | step counter] */
	size_t samp_ws_bytes;
	int32_t *next_host;      /* [1] pinned */
	/* The decode step captured once and replayed (x4_trunk_forward_next
	 * with one token); recaptured when the sampler's settings change. */
	cudaGraphExec_t step_graph;
	x4_sampler_opts graph_so;
	bool graph_failed;       /* capture refused once: stay eager */
	bool broken;             /* a configure failed and the old plan could not return */
	x4_prof *prof;           /* set while profiled (lib/prof_int.h), else NULL */
};
#endif /* X4_HAVE_CUDA */

#endif
