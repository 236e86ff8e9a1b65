/*
 * trunk_cuda.c - the CUDA trunk's frame: the device, the one upload of every
 * trunk tensor, the memory plan (weights, the fp16 latent cache sized from
 * max_ctx, the workspaces of one prefill chunk) and its refusal when they
 * do not fit, create/free/reset.  The forward pass is lib/cuda/trunk_cuda_fwd.c.
 *
 * The arithmetic of the plan is lib/cuda/mem_plan.c's, shared with x4-ceiling.
 *
 * The weights are the GGUF bytes as mapped, one allocation for all of them:
 * the kernels read IQ4_NL, Q6_K, Q8_0 (experts) and BF16 blocks in place and index the
 * expert tensors [E][rows][k] as stored, so nothing is repacked.
 */
#include "trunk_cuda.h"

#ifdef X4_HAVE_CUDA

#define MIB (1024.0 * 1024.0)
#define STAGE_BYTES ((size_t)64 << 20)

/* The reserve, the cache's and the workspaces' sizes, the chunk's pick and
 * the refusals' arithmetic are the memory plan's (lib/cuda/mem_plan.c, x4.h
 * section 6b), which x4-ceiling predicts a card with: one definition. */
static uint64_t reserve(const x4_trunk_cuda *t) { return t->o.no_reserve ? 0 : X4_MEM_RESERVE_BYTES; }

static uint64_t ws_bytes(const x4_trunk_cuda *t, int T)
{
	return x4_mem_ws_bytes(t->c, t->max_ctx, T);
}

static uintptr_t carve(uintptr_t *at, size_t n)
{
	uintptr_t p = (*at + 255) & ~(uintptr_t)255;
	*at = p + n;
	return p;
}

/* ---- the weights ---- */

struct piece {
	void *dst;
	const void *src;
	size_t n;
};

struct placer {
	uintptr_t at;         /* the next free byte (from 0 when only counting) */
	struct piece *pieces; /* NULL: only count */
	int n;
};

static const void *place(struct placer *p, const x4_gguf_tensor *w)
{
	if (!w)
		return NULL;
	uintptr_t at = carve(&p->at, (size_t)w->nbytes);
	if (p->pieces)
		p->pieces[p->n] = (struct piece){ (void *)at, w->data, (size_t)w->nbytes };
	p->n++;
	return (const void *)at;
}

/* Lay every trunk tensor out in one allocation (or only count its bytes). */
static void place_all(x4_trunk_cuda *t, struct placer *p)
{
	const x4_model *m = t->m;
	t->token_embd = place(p, m->token_embd);
	t->output_norm = place(p, m->output_norm);
	t->output = place(p, m->output);
	for (int b = 0; b < t->c->n_block; b++) {
		const x4_block_w *hw = &m->blk[b];
		x4_block_dev *d = &t->blk[b];
#define X4_PLACE_(f, ...) d->f = place(p, hw->f);
		X4_BLOCK_TENSORS(X4_PLACE_)
#undef X4_PLACE_
	}
}

struct stage_copy {
	char *dst;
	const char *src;
	size_t n, part;
};

static void stage_part(void *arg, int64_t i)
{
	struct stage_copy *s = arg;
	size_t at = (size_t)i * s->part;
	if (at < s->n)
		memcpy(s->dst + at, s->src + at, X4_MIN(s->part, s->n - at));
}

/* Host mapping -> pinned staging (a few threads: the first touch of the
 * mapping faults pages in) -> device, double-buffered so that the copy
 * engine runs while the next piece is staged. */
static int upload(x4_trunk_cuda *t, const struct piece *pc, int np, x4_err *e)
{
	void *buf[2] = { NULL, NULL };
	cudaEvent_t ev[2] = { NULL, NULL };
	bool used[2] = { false, false };
	int rc = 0, k = 0, nthr = X4_MIN(8, x4_ncpu());
	uint64_t total = 0, done = 0;
	for (int i = 0; i < np; i++)
		total += pc[i].n;
	for (int i = 0; i < 2 && !rc; i++) {
		rc = x4_cuda_check(cudaMallocHost(&buf[i], STAGE_BYTES),
				   "allocate 64 MiB of pinned host memory to stage the weights", e);
		if (!rc)
			rc = x4_cuda_check(cudaEventCreateWithFlags(&ev[i], cudaEventDisableTiming),
					   "create an event for the weight upload", e);
	}
	for (int i = 0; i < np && !rc; i++) {
		for (size_t at = 0; at < pc[i].n && !rc; at += STAGE_BYTES) {
			size_t len = X4_MIN(STAGE_BYTES, pc[i].n - at);
			if (used[k] && (rc = x4_cuda_check(cudaEventSynchronize(ev[k]),
							   "upload the weights", e)))
				break;
			struct stage_copy sc = { buf[k], (const char *)pc[i].src + at, len,
						 (len + (size_t)nthr - 1) / (size_t)nthr };
			if (len >= ((size_t)1 << 20))
				x4_parallel_for(nthr, nthr, stage_part, &sc);
			else
				memcpy(buf[k], sc.src, len);
			rc = x4_cuda_check(cudaMemcpyAsync((char *)pc[i].dst + at, buf[k], len,
							   cudaMemcpyHostToDevice, t->s),
					   "upload the weights", e);
			if (!rc)
				rc = x4_cuda_check(cudaEventRecord(ev[k], t->s), "upload the weights", e);
			used[k] = true;
			k ^= 1;
			done += len;
			if (t->o.progress)
				t->o.progress(t->o.progress_ctx, done, total);
		}
	}
	if (!rc)
		rc = x4_cuda_check(cudaStreamSynchronize(t->s), "upload the weights", e);
	else
		cudaStreamSynchronize(t->s); /* the staging buffers are freed next */
	for (int i = 0; i < 2; i++) {
		if (ev[i])
			cudaEventDestroy(ev[i]);
		if (buf[i])
			cudaFreeHost(buf[i]);
	}
	return rc;
}

/* ---- create ---- */

static int open_device(x4_trunk_cuda *t, int ordinal, x4_err *e)
{
	int n = 0;
	cudaError_t rc = cudaGetDeviceCount(&n);
	if (rc != cudaSuccess) {
		(void)cudaGetLastError();
		return x4_err_set(e, X4_ECUDA, "--device cuda:%d: no usable CUDA device (%s); use "
				  "--device cpu", ordinal, cudaGetErrorString(rc));
	}
	if (ordinal >= n)
		return x4_err_set(e, X4_ECUDA, "--device cuda:%d: this machine has %d CUDA device%s%s",
				  ordinal, n, n == 1 ? "" : "s",
				  n ? " (use cuda:0 .. cuda:N-1)" : "; use --device cpu");
	X4_CUDA_TRY(cudaSetDevice(ordinal), "select the CUDA device", e);
	struct cudaDeviceProp p;
	X4_CUDA_TRY(cudaGetDeviceProperties(&p, ordinal), "read the CUDA device's properties", e);
	snprintf(t->dev_name, sizeof t->dev_name, "%.100s (cuda:%d)", p.name, ordinal);
	t->dev = ordinal;
	return 0;
}

/* The decode attention's kernel on this trunk's device, into *out: fp32 as
 * asked; mma as asked where the card has sm_80 (the shape was checked by
 * lib/run/trunk.c), else X4_EINVAL; auto is mma where the card and the
 * shape take it and fp32 elsewhere.  Resolved at create and before a
 * configure changes anything, not at the first decode step. */
static int resolve_attn(const x4_trunk_cuda *t, const x4_trunk_opts *o, int *out, x4_err *e)
{
	const int asked = o->attn; /* out may be &o->attn */
	*out = X4_ATTN_FP32;
	if (asked == X4_ATTN_FP32)
		return 0;
	int major = 0, minor = 0;
	X4_CUDA_TRY(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, t->dev),
		    "read the device's compute capability", e);
	X4_CUDA_TRY(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, t->dev),
		    "read the device's compute capability", e);
	if (asked == X4_ATTN_AUTO) {
		if (major >= 8 && x4k_mla_mma_shape(t->c->n_head, t->c->kv_lora, t->c->d_rope))
			*out = X4_ATTN_MMA;
		return 0;
	}
	if (major < 8)
		return x4_err_set(e, X4_EINVAL, "--attn mma: the tensor-core attention needs sm_80 "
				  "or newer; %s is sm_%d%d (use --attn fp32 or auto)", t->dev_name,
				  major, minor);
	*out = X4_ATTN_MMA;
	return 0;
}

static double mib(uint64_t b) { return (double)b / MIB; }

/* " (of the 2048 MiB --gpu-memory allows)" when a limit is set, else "". */
static const char *limit_note(const x4_trunk_cuda *t, char *buf, size_t n)
{
	if (!t->o.mem_limit)
		return "";
	snprintf(buf, n, " (of the %.0f MiB --gpu-memory allows)", mib(t->o.mem_limit));
	return buf;
}

/* Free device memory as x4 may use it: what the driver reports, capped by
 * --gpu-memory (opts.mem_limit) less what this trunk already holds. */
static int usable_free(x4_trunk_cuda *t, uint64_t held, uint64_t *free_out,
		       uint64_t *total_out, x4_err *e)
{
	size_t free_b = 0, total_b = 0;
	X4_CUDA_TRY(cudaMemGetInfo(&free_b, &total_b), "read the free device memory", e);
	uint64_t f = free_b, lim = t->o.mem_limit;
	if (lim)
		f = X4_MIN(f, lim > held ? lim - held : 0);
	*free_out = f;
	*total_out = lim ? X4_MIN(lim, (uint64_t)total_b) : total_b;
	return 0;
}

/* Refuse before the upload when the weights, the cache and the narrowest
 * chunk cannot all be resident (docs/record.md 5: a refusal at load, not an
 * out-of-memory inside a request). */
static int check_fit(x4_trunk_cuda *t, x4_err *e)
{
	char note[64];
	uint64_t free_b = 0, total_b = 0;
	int rc = usable_free(t, 0, &free_b, &total_b, e);
	if (rc)
		return rc;
	x4_mem_plan p;
	x4_mem_plan_solve(t->c, t->weight_bytes, t->max_ctx, 0, free_b, reserve(t), &p);
	uint64_t w = t->weight_bytes, need = p.narrow_ws_bytes + p.reserve;
	if (p.verdict == X4_MEM_NO_WEIGHTS)
		return x4_err_set(e, X4_ENOMEM, "the weights need %.0f MiB and %.0f MiB are free on "
				  "%s%s (%.0f MiB in all); use a card with more memory", mib(w),
				  mib(free_b), t->dev_name, limit_note(t, note, sizeof note), mib(total_b));
	if (p.verdict == X4_MEM_NO_CONTEXT)
		return x4_err_set(e, X4_ENOMEM, "--max-model-len %d needs a %.0f MiB cache; with "
				  "%.0f MiB of weights resident, %.0f MiB are free on %s%s and the "
				  "narrowest prefill chunk (%d tokens) needs %.0f MiB; lower "
				  "--max-model-len or use a card with more memory", t->max_ctx,
				  mib(t->cache_bytes), mib(w), mib(free_b - w), t->dev_name,
				  limit_note(t, note, sizeof note), p.narrow_chunk, mib(need));
	return 0;
}

/* The largest power of two <= X4_MEM_MAX_CHUNK (or the caller's chunk) whose workspace
 * fits in what the weights and the cache left (x4_mem_chunk). */
static int pick_chunk(x4_trunk_cuda *t, x4_err *e)
{
	char note[64];
	uint64_t free_b = 0, total_b = 0;
	int rc = usable_free(t, t->weight_bytes + t->cache_bytes, &free_b, &total_b, e);
	if (rc)
		return rc;
	uint64_t r = reserve(t), avail = free_b > r ? free_b - r : 0;
	t->chunk = x4_mem_chunk(t->c, t->max_ctx, t->o.prefill_chunk, free_b, r);
	if (t->chunk)
		return 0;
	if (t->o.prefill_chunk) {
		int T = X4_MIN(t->o.prefill_chunk, t->max_ctx);
		return x4_err_set(e, X4_ENOMEM, "a prefill chunk of %d tokens needs %.0f MiB "
				  "and %.0f MiB are free on %s%s beside the weights and the "
				  "cache; use a smaller chunk or --max-model-len", T,
				  mib(ws_bytes(t, T)), mib(avail), t->dev_name,
				  limit_note(t, note, sizeof note));
	}
	int floor_t = x4_mem_narrow_chunk(t->max_ctx);
	uint64_t need = ws_bytes(t, floor_t) + r;
	return x4_err_set(e, X4_ENOMEM, "--max-model-len %d: with %.0f MiB of weights and a %.0f "
			  "MiB cache resident, %.0f MiB are free on %s%s and the narrowest prefill "
			  "chunk (%d tokens) needs %.0f MiB; lower --max-model-len or use a card "
			  "with more memory", t->max_ctx, mib(t->weight_bytes), mib(t->cache_bytes),
			  mib((uint64_t)free_b), t->dev_name, limit_note(t, note, sizeof note),
			  floor_t, mib(need));
}

/* What the request options decide, on weights already resident: the
 * cache for max_ctx, the prefill chunk and its workspaces, the pinned
 * staging, the narrow residual's host copy.  unplan() undoes it. */
static int plan(x4_trunk_cuda *t, x4_err *e)
{
	const x4_config *c = t->c;
	int rc;
	t->cache_bytes = x4_mem_cache_bytes(c, t->max_ctx);
	if ((rc = x4_dev_alloc((void **)&t->cache, t->cache_bytes,
			       "the KV cache (lower --max-model-len)", e)))
		return rc;
	/* Rows past the length are never read; zeros keep a stray read finite. */
	X4_CUDA_TRY(cudaMemsetAsync(t->cache, 0, t->cache_bytes, t->s), "clear the KV cache", e);
	if ((rc = pick_chunk(t, e)))
		return rc;
	t->work_bytes = ws_bytes(t, t->chunk);
	if ((rc = x4_dev_alloc(&t->work, t->work_bytes, "the workspaces", e)))
		return rc;
	x4_cuda_ws_layout(c, t->max_ctx, t->chunk, t->work, &t->w);
	/* The fused gate's workspace must start zeroed; each call leaves it so. */
	X4_CUDA_TRY(cudaMemsetAsync(t->w.hc_ws, 0, t->w.hc_ws_bytes, t->s),
		    "clear the hyper-connection workspace", e);
	float omega[X4_MAX(1, c->d_rope / 2)];
	x4_yarn_freqs(c, omega);
	X4_CUDA_TRY(cudaMemcpyAsync(t->w.omega, omega, sizeof omega, cudaMemcpyHostToDevice, t->s),
		    "upload the rope frequencies", e);
	X4_CUDA_TRY(cudaMallocHost((void **)&t->ids_host, sizeof(int32_t) * (size_t)t->chunk),
		    "allocate pinned host memory for the token ids", e);
	X4_CUDA_TRY(cudaMallocHost((void **)&t->pos_host, sizeof(int)),
		    "allocate pinned host memory for the position", e);
	X4_CUDA_TRY(cudaStreamSynchronize(t->s), "prepare the trunk on the GPU", e);

	size_t D = (size_t)c->n_embd, hc = (size_t)c->n_hc;
	if (t->o.resid != X4_RESID_F32 &&
	    !(t->narrow_host = x4_alloc(sizeof(float) * (size_t)t->chunk * hc * D,
					"the narrowed residual's staging", e)))
		return X4_ENOMEM;
	return 0;
}

static void unplan(x4_trunk_cuda *t)
{
	if (t->s)
		cudaStreamSynchronize(t->s);
	if (t->step_graph)
		cudaGraphExecDestroy(t->step_graph);
	t->step_graph = NULL;
	t->graph_failed = false;
	x4_dev_free(t->work);
	x4_dev_free(t->cache);
	t->work = NULL;
	t->cache = NULL;
	t->work_bytes = t->cache_bytes = 0;
	memset(&t->w, 0, sizeof t->w);
	if (t->ids_host)
		cudaFreeHost(t->ids_host);
	if (t->pos_host)
		cudaFreeHost(t->pos_host);
	t->ids_host = NULL;
	t->pos_host = NULL;
	free(t->narrow_host);
	t->narrow_host = NULL;
	t->pos = 0;
}

static int create(x4_trunk_cuda *t, x4_err *e)
{
	const x4_config *c = t->c;
	int rc = open_device(t, t->o.device, e);
	if (rc || (rc = resolve_attn(t, &t->o, &t->o.attn, e)))
		return rc;
	X4_CUDA_TRY(cudaStreamCreate(&t->s), "create the trunk's CUDA stream", e);
	X4_CUDA_TRY(cudaStreamCreate(&t->side.s), "create the trunk's side stream", e);
	X4_CUDA_TRY(cudaEventCreateWithFlags(&t->side.fork, cudaEventDisableTiming),
		    "create the side stream's events", e);
	X4_CUDA_TRY(cudaEventCreateWithFlags(&t->side.done, cudaEventDisableTiming),
		    "create the side stream's events", e);

	struct placer count = { 0, NULL, 0 };
	place_all(t, &count);
	t->weight_bytes = x4_mem_weight_bytes(t->m);
	/* The plan's count and the placement walk the same list (X4_BLOCK_TENSORS). */
	if (carve(&count.at, 0) != t->weight_bytes)
		return x4_err_set(e, X4_EINVAL, "the upload places %llu bytes of weights and the "
				  "memory plan counts %llu: a tensor is missing from one of them",
				  (unsigned long long)carve(&count.at, 0),
				  (unsigned long long)t->weight_bytes);
	t->cache_bytes = x4_mem_cache_bytes(c, t->max_ctx);
	if ((rc = check_fit(t, e)))
		return rc;

	struct piece *pieces = x4_calloc((size_t)count.n, sizeof *pieces, "the upload list", e);
	if (!pieces)
		return X4_ENOMEM;
	rc = x4_dev_alloc(&t->weights, t->weight_bytes, "the weights", e);
	if (!rc) {
		struct placer p = { (uintptr_t)t->weights, pieces, 0 };
		place_all(t, &p);
		double t0 = x4_now();
		rc = upload(t, pieces, p.n, e);
		t->load_s = x4_now() - t0;
	}
	free(pieces);
	if (rc)
		return rc;

	if ((rc = plan(t, e)))
		return rc;

	size_t D = (size_t)c->n_embd, hc = (size_t)c->n_hc, k = (size_t)X4_MAX(1, c->n_expert_used);
	t->pr_streams = x4_alloc(sizeof(float) * hc * D, "the probe", e);
	t->pr_y = x4_alloc(sizeof(float) * D, "the probe", e);
	t->pr_xh = x4_alloc(sizeof(float) * D, "the probe", e);
	t->pr_coef = x4_alloc(sizeof(float) * (size_t)t->ncoef, "the probe", e);
	t->pr_wts = x4_alloc(sizeof(float) * k, "the probe", e);
	t->pr_sel = x4_alloc(sizeof(int) * k, "the probe", e);
	if (!t->pr_streams || !t->pr_y || !t->pr_xh || !t->pr_coef || !t->pr_wts || !t->pr_sel)
		return X4_ENOMEM;
	return 0;
}

int x4_trunk_cuda_create(x4_trunk_cuda **out, const x4_model *m, const x4_trunk_opts *o,
			 x4_err *e)
{
	*out = NULL;
	const x4_config *c = &m->c;
	int max_ctx = o->max_ctx; /* resolved and checked by lib/run/trunk.c */
	if (c->n_hc < 1 || c->n_hc > 4)
		return x4_err_set(e, X4_EINVAL, "%d residual streams: the GPU kernels take 1 to 4",
				  c->n_hc);
	/* The kernels' own limits, checked before anything is loaded rather than
	 * at the first forward (the released model is well inside each). */
	if (c->kv_lora > 512 || c->kv_lora + c->d_rope > 1024 || c->n_expert_used > 8 ||
	    c->n_expert > 256 || c->d_nope > 512 || (c->d_rope & 1))
		return x4_err_set(e, X4_EINVAL, "this model's shape is outside what the GPU kernels "
				  "take (kv_lora_rank %d <= 512, cache row %d <= 1024, experts %d <= "
				  "256 with %d <= 8 used, qk_nope %d <= 512, an even rope dimension %d); "
				  "use --device cpu", c->kv_lora, c->kv_lora + c->d_rope, c->n_expert,
				  c->n_expert_used, c->d_nope, c->d_rope);
	x4_trunk_cuda *t = x4_calloc(1, sizeof *t, "the CUDA trunk", e);
	if (!t)
		return X4_ENOMEM;
	t->m = m;
	t->c = c;
	t->o = *o;
	t->max_ctx = max_ctx;
	t->cw = c->kv_lora + c->d_rope;
	t->ncoef = X4K_HC_NCOEF(c->n_hc);
	t->F = X4_MAX(1, X4_MAX(c->n_ff, c->n_ff_exp * X4_MAX(1, c->n_expert_shared)));
	t->hc = (x4k_hc_cfg){ c->n_hc, c->n_embd, c->sinkhorn_iters, c->rms_eps, c->hc_eps,
			      c->clamp_min, c->clamp_max };
	t->blk = x4_calloc((size_t)c->n_block, sizeof *t->blk, "the CUDA trunk", e);
	int rc = t->blk ? create(t, e) : X4_ENOMEM;
	if (rc) {
		x4_trunk_cuda_free(t);
		return rc;
	}
	*out = t;
	return 0;
}

int x4_trunk_cuda_configure(x4_trunk_cuda *t, const x4_trunk_opts *o, x4_err *e)
{
	X4_CUDA_TRY(cudaSetDevice(t->dev), "select the CUDA device", e);
	int attn;
	int rc = resolve_attn(t, o, &attn, e);
	if (rc)
		return rc;
	x4_trunk_opts old = t->o;
	int old_ctx = t->max_ctx;
	unplan(t);
	t->o = *o;
	t->o.attn = attn;
	t->o.progress = old.progress;
	t->o.progress_ctx = old.progress_ctx;
	t->max_ctx = o->max_ctx;
	/* What is free now is beside the resident weights: the new cache and
	 * the narrowest chunk must fit in it, or the old plan is restored. */
	char note[64];
	uint64_t free_b = 0, total_b = 0;
	rc = usable_free(t, t->weight_bytes, &free_b, &total_b, e);
	uint64_t cache = x4_mem_cache_bytes(t->c, t->max_ctx);
	uint64_t need = x4_mem_ctx_need(t->c, t->max_ctx, reserve(t));
	if (!rc && need > free_b)
		rc = x4_err_set(e, X4_ENOMEM, "--max-model-len %d needs a %.0f MiB cache and the "
				"narrowest prefill chunk %.0f MiB more; %.0f MiB are free on %s%s "
				"beside the resident weights; lower --max-model-len", t->max_ctx,
				mib(cache), mib(need - cache), mib(free_b), t->dev_name,
				limit_note(t, note, sizeof note));
	if (!rc)
		rc = plan(t, e);
	if (!rc) {
		x4_trunk_cuda_reset(t);
		return 0;
	}
	/* Back to the plan that ran before; it fitted then. */
	unplan(t);
	t->o = old;
	t->max_ctx = old_ctx;
	x4_err e2;
	if (plan(t, &e2)) {
		unplan(t);
		t->broken = true;
	}
	return rc;
}

void x4_trunk_cuda_free(x4_trunk_cuda *t)
{
	if (!t)
		return;
	unplan(t);
	x4_dev_free(t->weights);
	if (t->next_host)
		cudaFreeHost(t->next_host);
	x4_dev_free(t->samp);
	if (t->s)
		cudaStreamDestroy(t->s);
	if (t->side.done)
		cudaEventDestroy(t->side.done);
	if (t->side.fork)
		cudaEventDestroy(t->side.fork);
	if (t->side.s)
		cudaStreamDestroy(t->side.s);
	free(t->pr_streams);
	free(t->pr_y);
	free(t->pr_xh);
	free(t->pr_coef);
	free(t->pr_wts);
	free(t->pr_sel);
	free(t->blk);
	free(t);
}

/* The length is what says how much of the cache is context; the next
 * prefill overwrites the rows (the shared-cache bug of docs/record.md 7). */
void x4_trunk_cuda_reset(x4_trunk_cuda *t)
{
	t->pos = 0;
	/* A new request samples as a fresh trunk would: the device sampler's
	 * step counter starts again (a failure here surfaces at the next step). */
	if (t->samp)
		cudaMemsetAsync((char *)t->samp + t->samp_ws_bytes + 16, 0, sizeof(uint64_t), t->s);
}

int x4_trunk_cuda_pos(const x4_trunk_cuda *t) { return t->pos; }

/* The cache, the length and the sampler's counter (restarted by reset) are
 * all the state a position leaves: the position reaches the kernels from
 * pos_host at every forward and replay, the rope frequencies are a table,
 * and the gate's workspace is left zeroed by every call. */
uint64_t x4_trunk_cuda_row_bytes(const x4_trunk_cuda *t)
{
	return (uint64_t)t->c->n_block * (uint64_t)t->cw * sizeof(uint16_t);
}

/* One 2D copy a layer: the layer's rows [from, from + n) are contiguous on
 * the device, and one position's slice of a host row is cw values wide. */
static int cache_copy(x4_trunk_cuda *t, int from, int n, void *host, bool to_host, x4_err *e)
{
	if (t->broken)
		return x4_err_set(e, X4_ENOMEM, "the trunk has no cache since a failed change of "
				  "options; configure it again with options that fit");
	const char *what = to_host ? "read the KV cache's rows to the host"
				   : "write the KV cache's rows from the host";
	X4_CUDA_TRY(cudaSetDevice(t->dev), "select the CUDA device", e);
	size_t lb = (size_t)t->cw * sizeof(uint16_t), rb = (size_t)x4_trunk_cuda_row_bytes(t);
	for (int b = 0; b < t->c->n_block && n > 0; b++) {
		char *dev = (char *)(t->cache + ((size_t)b * (size_t)t->max_ctx + (size_t)from) * (size_t)t->cw);
		char *h = (char *)host + (size_t)b * lb;
		cudaError_t rc = to_host
			? cudaMemcpy2DAsync(h, rb, dev, lb, lb, (size_t)n, cudaMemcpyDeviceToHost, t->s)
			: cudaMemcpy2DAsync(dev, lb, h, rb, lb, (size_t)n, cudaMemcpyHostToDevice, t->s);
		X4_CUDA_TRY(rc, what, e);
	}
	X4_CUDA_TRY(cudaStreamSynchronize(t->s), what, e);
	return 0;
}

int x4_trunk_cuda_cache_read(x4_trunk_cuda *t, int from, int n, void *rows, x4_err *e)
{
	return cache_copy(t, from, n, rows, true, e);
}

int x4_trunk_cuda_cache_write(x4_trunk_cuda *t, int n, const void *rows, x4_err *e)
{
	/* (the copy only reads the host rows) */
	int rc = cache_copy(t, 0, n, (void *)rows, false, e);
	if (!rc)
		t->pos = n;
	return rc;
}

void x4_trunk_cuda_set_probe(x4_trunk_cuda *t, x4_probe_fn fn, void *ctx)
{
	t->probe = fn;
	t->probe_ctx = ctx;
}

void x4_trunk_cuda_stats(const x4_trunk_cuda *t, x4_trunk_stats *s)
{
	s->load_s = t->load_s;
	s->resident_bytes = t->weight_bytes;
	s->cache_bytes = t->cache_bytes;
	s->work_bytes = t->work_bytes;
	s->max_ctx = t->max_ctx;
	s->prefill_chunk = t->chunk;
	s->attn = t->o.attn;
	snprintf(s->device, sizeof s->device, "%.120s", t->dev_name);
}

int x4_trunk_cuda_attn(const x4_trunk_cuda *t) { return t->o.attn; }

#else /* no CUDA in this build */

#define NO_CUDA "this build of x4 has no CUDA (nvcc was not found at build time): rebuild " \
		"with the CUDA Toolkit, or use --device cpu"

int x4_trunk_cuda_create(x4_trunk_cuda **t, const x4_model *m, const x4_trunk_opts *o,
			 x4_err *e)
{
	*t = NULL;
	return x4_err_set(e, X4_ECUDA, NO_CUDA);
}

void x4_trunk_cuda_free(x4_trunk_cuda *t) { (void)t; }

int x4_trunk_cuda_forward_next(x4_trunk_cuda *t, const int32_t *ids, int n,
			       const x4_sampler_opts *so, int32_t *next, float *logit,
			       float *logits, x4_err *e)
{
	return x4_trunk_cuda_forward(t, ids, n, NULL, false, e);
}

int x4_trunk_cuda_configure(x4_trunk_cuda *t, const x4_trunk_opts *o, x4_err *e)
{
	return x4_err_set(e, X4_ECUDA, NO_CUDA);
}
void x4_trunk_cuda_reset(x4_trunk_cuda *t) { (void)t; }
int x4_trunk_cuda_pos(const x4_trunk_cuda *t) { (void)t; return 0; }

int x4_trunk_cuda_forward(x4_trunk_cuda *t, const int32_t *ids, int n, float *logits,
			  bool all_logits, x4_err *e)
{
	return x4_err_set(e, X4_ECUDA, NO_CUDA);
}

void x4_trunk_cuda_set_probe(x4_trunk_cuda *t, x4_probe_fn fn, void *ctx) { (void)t; }
void x4_trunk_cuda_stats(const x4_trunk_cuda *t, x4_trunk_stats *s) { (void)t; (void)s; }
int x4_trunk_cuda_attn(const x4_trunk_cuda *t) { (void)t; return X4_ATTN_FP32; }
uint64_t x4_trunk_cuda_row_bytes(const x4_trunk_cuda *t) { (void)t; return 0; }

int x4_trunk_cuda_cache_read(x4_trunk_cuda *t, int from, int n, void *rows, x4_err *e)
{
	return x4_err_set(e, X4_ECUDA, NO_CUDA);
}

int x4_trunk_cuda_cache_write(x4_trunk_cuda *t, int n, const void *rows, x4_err *e)
{
	return x4_err_set(e, X4_ECUDA, NO_CUDA);
}

#endif
