/*
 * trunk.c - the public trunk API: the options and arguments are checked
 * here, once, and the call dispatched on opts->device: -1 runs the CPU
 * reference trunk (lib/cpu/trunk_cpu*.c), an ordinal >= 0 the CUDA trunk
 * (lib/cuda/trunk_cuda*.c).  Both keep the same contract, so the tools never ask
 * which one they hold, and the backends may assume valid arguments.
 */
#include "trunk_int.h"
#include "x4_kern.h"

#include <math.h>

struct x4_trunk {
	const x4_model *m;
	x4_trunk_opts o;     /* as given (max_ctx 0 = automatic) */
	x4_trunk_cpu *cpu;   /* exactly one of the two is set (none after a failed configure) */
	x4_trunk_cuda *cuda;
	float *row;          /* [n_vocab] the CPU's last logits for forward_next, kept */
	x4_probe_fn probe;   /* kept here too: a configure makes a new CPU trunk */
	void *probe_ctx;
};

void x4_trunk_opts_default(x4_trunk_opts *o)
{
	memset(o, 0, sizeof *o);
	o->device = -1;
	o->resid = X4_RESID_F32;
	o->prec = X4_PREC_F32;
	/* Priced on the H200 with x4-bench-abab: 1.056x at 512 tokens of
	 * context, 1.051x at 4096 (bench/RESULTS.md 14); a no-op below sm_90. */
	o->pdl = true;
	/* Priced on the H200 with x4-bench-abab: 1.003x at 512 tokens of
	 * context, 1.135x at 4096, 1.73x at 32,500 by x4-run (bench/RESULTS.md
	 * 23); fp32 where the card or the checkpoint does not take it. */
	o->attn = X4_ATTN_AUTO;
}

int x4_trunk_opts_ctx(const x4_model *m, const x4_trunk_opts *o)
{
	const x4_config *c = x4_model_config(m);
	return o && o->max_ctx ? o->max_ctx : X4_MIN(c->n_ctx_train, X4_DEFAULT_CTX);
}

/* Every option checked, and max_ctx resolved into *r for the backends. */
static int check_opts(const x4_model *m, const x4_trunk_opts *o, x4_trunk_opts *r, x4_err *e)
{
	const x4_config *c = x4_model_config(m);
	if (o->resid < X4_RESID_F32 || o->resid > X4_RESID_BF16)
		return x4_err_set(e, X4_EINVAL, "residual width %d is not one of f32, f16, bf16",
				  o->resid);
	if (o->sublayer < X4_SUB_F32 || o->sublayer > X4_SUB_F16)
		return x4_err_set(e, X4_EINVAL, "sublayer input width %d is not one of f32, bf16, "
				  "f16", o->sublayer);
	if (o->prec != X4_PREC_F32 && o->prec != X4_PREC_F64)
		return x4_err_set(e, X4_EINVAL, "precision %d is not one of f32, f64", o->prec);
	if (o->kv < X4_KV_DEFAULT || o->kv > X4_KV_EXACT)
		return x4_err_set(e, X4_EINVAL, "cache width %d is not one of default, f16, exact",
				  o->kv);
	if (o->device < -1)
		return x4_err_set(e, X4_EINVAL, "device %d: use -1 for the CPU or a CUDA ordinal",
				  o->device);
	if (o->threads < 0 || o->prefill_chunk < 0)
		return x4_err_set(e, X4_EINVAL, "threads (%d) and prefill chunk (%d) must be 0 "
				  "(automatic) or positive", o->threads, o->prefill_chunk);
	if (o->attn != X4_ATTN_FP32 && o->attn != X4_ATTN_MMA && o->attn != X4_ATTN_AUTO)
		return x4_err_set(e, X4_EINVAL, "decode attention %d is not one of fp32, mma, auto",
				  o->attn);
	if (o->gemm != X4_GEMM_MMA && o->gemm != X4_GEMM_FMA)
		return x4_err_set(e, X4_EINVAL, "prefill product core %d is not one of mma, fma", o->gemm);
	/* (the compute capability, sm_80 for mma, is the CUDA trunk's to check) */
	if (o->device >= 0 && o->attn == X4_ATTN_MMA &&
	    !x4k_mla_mma_shape(c->n_head, c->kv_lora, c->d_rope))
		return x4_err_set(e, X4_EINVAL, "--attn mma: the tensor-core attention takes the "
				  "model's shape: heads a multiple of 16, kv_lora 512, rope 64; this "
				  "checkpoint has %d heads, kv_lora %d, rope %d (use --attn fp32)",
				  c->n_head, c->kv_lora, c->d_rope);
	if (o->device >= 0 && o->prec == X4_PREC_F64)
		return x4_err_set(e, X4_EINVAL, "the float64 trunk runs on the CPU only; "
				  "use --device cpu with it");
	if (o->device >= 0 && o->kv == X4_KV_EXACT)
		return x4_err_set(e, X4_EINVAL, "the GPU's latent cache is fp16; an exact cache "
				  "runs on the CPU only (use --device cpu)");
	if (o->device < 0 && o->mem_limit)
		return x4_err_set(e, X4_EINVAL, "--gpu-memory caps device memory and means nothing "
				  "on the CPU: drop it, or use --device cuda:N");
	if (o->device < 0 && o->no_reserve)
		return x4_err_set(e, X4_EINVAL, "no_reserve plans device memory and means nothing "
				  "on the CPU");
	*r = *o;
	r->max_ctx = x4_trunk_opts_ctx(m, o);
	if (r->max_ctx < 1 || r->max_ctx > c->n_ctx_train)
		return x4_err_set(e, X4_ERANGE, "--max-model-len %d: the model's context is 1 to %d "
				  "positions", r->max_ctx, c->n_ctx_train);
	return 0;
}

static int backend_create(x4_trunk *t, const x4_trunk_opts *r, x4_err *e)
{
	return r->device < 0 ? x4_trunk_cpu_create(&t->cpu, t->m, r, e)
			     : x4_trunk_cuda_create(&t->cuda, t->m, r, e);
}

int x4_trunk_create(x4_trunk **out, const x4_model *m, const x4_trunk_opts *o, x4_err *e)
{
	*out = NULL;
	x4_trunk_opts def, r;
	if (!o) {
		x4_trunk_opts_default(&def);
		o = &def;
	}
	int rc = check_opts(m, o, &r, e);
	if (rc)
		return rc;
	x4_trunk *t = x4_calloc(1, sizeof *t, "the trunk", e);
	if (!t)
		return X4_ENOMEM;
	t->m = m;
	t->o = *o;
	if ((rc = backend_create(t, &r, e))) {
		free(t);
		return rc;
	}
	*out = t;
	return 0;
}

int x4_trunk_configure(x4_trunk *t, const x4_trunk_opts *o, x4_err *e)
{
	if (o->device != t->o.device)
		return x4_err_set(e, X4_EINVAL, "the device (--device) is a load option: moving to "
				  "another device needs the weights reloaded; open the model again");
	if (o->mem_limit != t->o.mem_limit)
		return x4_err_set(e, X4_EINVAL, "--gpu-memory is a load option: it sizes the upload, "
				  "so changing it needs the weights reloaded; open the model again");
	if (o->no_reserve != t->o.no_reserve)
		return x4_err_set(e, X4_EINVAL, "the reserve (no_reserve) is a load option: it "
				  "decides what the load accepts; open the model again");
	x4_trunk_opts r;
	int rc = check_opts(t->m, o, &r, e);
	if (rc)
		return rc;
	if (t->cuda) {
		/* (a change of pdl, attn, gemm or warp_copy alone also lands here: the
		 * step's graph is captured anew with the launches' new
		 * attributes or the other attention kernel) */
		rc = x4_trunk_cuda_configure(t->cuda, &r, e);
	} else {
		/* The CPU trunk reads the weights in place: a new one costs its
		 * cache and workspaces, made before the old ones go. */
		x4_trunk_cpu *old = t->cpu;
		rc = x4_trunk_cpu_create(&t->cpu, t->m, &r, e);
		if (rc)
			t->cpu = old;
		else
			x4_trunk_cpu_free(old);
	}
	if (rc)
		return rc;
	if (t->cpu)
		x4_trunk_cpu_set_probe(t->cpu, t->probe, t->probe_ctx);
	t->o = *o;
	return 0;
}

const x4_trunk_opts *x4_trunk_get_opts(const x4_trunk *t) { return &t->o; }

void x4_trunk_free(x4_trunk *t)
{
	if (!t)
		return;
	if (t->cpu)
		x4_trunk_cpu_free(t->cpu);
	if (t->cuda)
		x4_trunk_cuda_free(t->cuda);
	free(t->row);
	free(t);
}

void x4_trunk_reset(x4_trunk *t)
{
	if (t->cpu)
		x4_trunk_cpu_reset(t->cpu);
	else
		x4_trunk_cuda_reset(t->cuda);
}

int x4_trunk_pos(const x4_trunk *t)
{
	return t->cpu ? x4_trunk_cpu_pos(t->cpu) : x4_trunk_cuda_pos(t->cuda);
}

static int max_ctx(const x4_trunk *t)
{
	x4_trunk_stats s;
	x4_trunk_get_stats(t, &s);
	return s.max_ctx;
}

/* The arguments of a forward, checked before any work. */
static int check_forward(const x4_trunk *t, const int32_t *ids, int n, x4_err *e)
{
	if (n < 1 || !ids)
		return x4_err_set(e, X4_EINVAL, "a forward needs at least one token");
	int cap = max_ctx(t), pos = x4_trunk_pos(t), nv = x4_model_config(t->m)->n_vocab;
	if (n > cap - pos)
		return x4_err_set(e, X4_ERANGE, "the context holds %d positions: %d in use and %d "
				  "new tokens do not fit; raise --max-model-len or shorten the "
				  "prompt", cap, pos, n);
	for (int i = 0; i < n; i++)
		if (ids[i] < 0 || ids[i] >= nv)
			return x4_err_set(e, X4_EINVAL, "token id %d (at %d) is outside the "
					  "vocabulary [0, %d)", ids[i], i, nv);
	return 0;
}

int x4_trunk_forward(x4_trunk *t, const int32_t *ids, int n, float *logits, bool all_logits,
		     x4_err *e)
{
	int rc = check_forward(t, ids, n, e);
	if (rc)
		return rc;
	if (t->cpu)
		return x4_trunk_cpu_forward(t->cpu, ids, n, logits, all_logits, e);
	return x4_trunk_cuda_forward(t->cuda, ids, n, logits, all_logits, e);
}

int x4_err_nonfinite_logits(x4_err *e, int pos)
{
	return x4_err_set(e, X4_ENUMERIC, "the logits at position %d are not finite: the "
			  "residual stream overflowed or a weight is not finite; run "
			  "x4-walk-residual on the same prompt to find the block where values "
			  "leave range (and keep the residual at --resid f32)", pos);
}

int x4_trunk_forward_next(x4_trunk *t, const int32_t *ids, int n, x4_sampler *smp,
			  const x4_sampler_opts *so, int32_t *next, float *logits, x4_err *e)
{
	int rc = check_forward(t, ids, n, e);
	if (rc)
		return rc;
	int pos = x4_trunk_pos(t) + n - 1;
	if (t->cuda) {
		float v = 0;
		rc = x4_trunk_cuda_forward_next(t->cuda, ids, n, so, next, &v, logits, e);
		if (!rc && !isfinite(v))
			return x4_err_nonfinite_logits(e, pos);
		return rc;
	}
	if (!smp)
		return x4_err_set(e, X4_EINVAL, "x4_trunk_forward_next: a CPU trunk picks with a "
				  "sampler (x4_sampler_create), and none was given");
	int nv = t->cpu->c->n_vocab;
	float *row = logits;
	if (!row) {
		if (!t->row && !(t->row = x4_alloc(sizeof(float) * (size_t)nv, "one row of logits", e)))
			return X4_ENOMEM;
		row = t->row;
	}
	rc = x4_trunk_cpu_forward(t->cpu, ids, n, row, logits != NULL, e);
	if (rc)
		return rc;
	if (logits)
		row += (size_t)(n - 1) * (size_t)nv;
	*next = x4_sample(smp, row, nv);
	/* The picked logit is NaN or infinite only when the row is not a
	 * distribution at all (the argmax skips NaN; all-NaN picks 0). */
	if (!isfinite(row[*next]))
		return x4_err_nonfinite_logits(e, pos);
	return 0;
}

void x4_trunk_set_probe(x4_trunk *t, x4_probe_fn fn, void *ctx)
{
	t->probe = fn;
	t->probe_ctx = ctx;
	if (t->cpu)
		x4_trunk_cpu_set_probe(t->cpu, fn, ctx);
	else
		x4_trunk_cuda_set_probe(t->cuda, fn, ctx);
}

int x4_trunk_get_stats(const x4_trunk *t, x4_trunk_stats *s)
{
	memset(s, 0, sizeof *s);
	if (t->cuda) {
		x4_trunk_cuda_stats(t->cuda, s);
		return 0;
	}
	/* The CPU reads the mapping in place: nothing is loaded or resident. */
	const x4_trunk_cpu *c = t->cpu;
	s->cache_bytes = (uint64_t)c->max_ctx * x4_trunk_cpu_row_bytes(c);
	s->max_ctx = c->max_ctx;
	s->prefill_chunk = c->chunk;
	s->attn = X4_ATTN_FP32;
	snprintf(s->device, sizeof s->device, "cpu");
	return 0;
}

/* ---- the cache as rows, for the prefix store ---- */

uint64_t x4_trunk_cache_row_bytes(const x4_trunk *t)
{
	return t->cpu ? x4_trunk_cpu_row_bytes(t->cpu) : x4_trunk_cuda_row_bytes(t->cuda);
}

/* n rows of a cache that has cap of them (filled, for a read), and a buffer. */
static int check_rows(const char *verb, int n, int cap, const char *has, const char *note,
		      const void *rows, x4_err *e)
{
	if (n < 0 || n > cap)
		return x4_err_set(e, n < 0 ? X4_EINVAL : X4_ERANGE, "cannot %s %d cache positions: "
				  "the cache %s %d positions%s; %s 0 to %d", verb, n, has, cap, note,
				  verb, cap);
	if (n > 0 && !rows)
		return x4_err_set(e, X4_EINVAL, "cannot %s %d cache positions without a buffer",
				  verb, n);
	return 0;
}

int x4_trunk_cache_read_from(x4_trunk *t, int from, int n, void *rows, x4_err *e)
{
	if (from < 0 || from > x4_trunk_pos(t))
		return x4_err_set(e, X4_ERANGE, "cannot read the cache from position %d: it holds %d "
				  "positions of context", from, x4_trunk_pos(t));
	int rc = check_rows("read", n, x4_trunk_pos(t) - from, "holds", " of context", rows, e);
	if (rc || !n)
		return rc;
	if (t->cpu) {
		x4_trunk_cpu_cache_read(t->cpu, from, n, rows);
		return 0;
	}
	return x4_trunk_cuda_cache_read(t->cuda, from, n, rows, e);
}

int x4_trunk_cache_read(x4_trunk *t, int n, void *rows, x4_err *e)
{
	return x4_trunk_cache_read_from(t, 0, n, rows, e);
}

int x4_trunk_cache_restore(x4_trunk *t, int n, const void *rows, x4_err *e)
{
	int rc = check_rows("restore", n, max_ctx(t), "has",
			    " (a larger --max-model-len holds more)", rows, e);
	if (rc)
		return rc;
	/* The reset first, so that the device sampler's counter restarts and a
	 * restore that fails half-way leaves a length of 0, never a cache that
	 * is partly another request's. */
	x4_trunk_reset(t);
	if (!n)
		return 0;
	if (t->cpu) {
		x4_trunk_cpu_cache_write(t->cpu, n, rows);
		return 0;
	}
	return x4_trunk_cuda_cache_write(t->cuda, n, rows, e);
}

/* lib/run/prefix.c's key.  The fields are the options that change what a row
 * holds; the rest change how fast it is made, not its values:
 * - resid and sublayer narrow values that feed every later layer's rows;
 * - prec and kv16 are the rows' element type and rounding (the CPU's F32
 *   default is fp16-rounded floats, F64's default exact doubles; the GPU's
 *   cache is fp16 bits whatever kv says, since kv=exact is refused there);
 * - hc_eager is the same arithmetic in five launches on the GPU, but not
 *   promised to be the same bits, and the two are compared with each other
 *   (x4-bench-abab): rows of one never stand in for the other's;
 * - attn, likewise: the tensor-core decode attention is not the fp32
 *   kernel's bits (docs/numerics.md 1.7), and its output feeds every later
 *   layer's rows (0 on the CPU, which has one attention);
 * - gemm, likewise for the prefill's products (docs/numerics.md 1.10; 0 on
 *   the CPU);
 * - device: the CPU's rows are floats or doubles and the GPU's fp16, and
 *   another GPU may take other kernels;
 * - not max_ctx (a row does not depend on the cache's size), threads (every
 *   product has one writer in a fixed order), the prefill chunk (the CPU
 *   computes a token the same in any chunk, docs/numerics.md 3, and
 *   tests/test_session.c checks it through the store; on a GPU the chunk
 *   picks GEMM or GEMV and the rows may differ in the last bits, as they
 *   do between any two chunkings of a fresh prefill), no_graph and pdl
 *   (the same kernels in the same order), and warp_copy (the same
 *   arithmetic, its operands copied in another order). */
void x4_trunk_cache_key(const x4_trunk *t, x4_cache_key *k)
{
	memset(k, 0, sizeof *k);
	memcpy(k->model, t->m->fingerprint, sizeof k->model);
	k->device = t->o.device;
	k->resid = t->o.resid;
	k->sublayer = t->o.sublayer;
	k->prec = t->cpu ? t->o.prec : X4_PREC_F32;
	k->kv16 = t->cpu ? t->cpu->kv16 : 1;
	k->hc_eager = t->cuda ? t->o.hc_eager : 0;
	k->attn = t->cuda ? x4_trunk_cuda_attn(t->cuda) : X4_ATTN_FP32;
	k->gemm = t->cuda ? t->o.gemm : X4_GEMM_MMA;
	k->row_bytes = x4_trunk_cache_row_bytes(t);
}

x4_trunk_cpu *x4_trunk_cpu_part(x4_trunk *t) { return t->cpu; }
x4_trunk_cuda *x4_trunk_cuda_part(x4_trunk *t) { return t->cuda; }
