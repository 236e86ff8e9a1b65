/*
 * session.c - the generation loop, once, for every tool: a model opened on
 * a device, then requests run on it one at a time.  A request resets the
 * cache before anything is forwarded (a short request after a long one
 * never sees the long one's rows), applies its own options to the trunk
 * when they differ from the last request's, restores from a prefix store
 * (lib/run/prefix.c) the rows of the longest prefix of its prompt the store
 * holds, prefills the rest in the trunk's chunks (a callback may stop it
 * between two), then picks, streams and feeds one token at a time, and at
 * the end offers its rows to the store.  The first decode step is kept
 * apart from the steady median: after a prefill it is not a steady-state
 * step (docs/measuring.md).
 */
#include "trunk_int.h"

#include <math.h>

struct x4_session {
	x4_model *m;
	x4_trunk *t;
	double *steps;     /* [cap_steps] seconds per decode step, the last request's */
	size_t cap_steps;
	int32_t *gen;      /* [cap_gen] the last request's generated ids */
	size_t cap_gen;
	float *rows;       /* [n_rows][n_vocab] logits delivered to on_logits */
	size_t n_rows;
};

const char *x4_stop_name(int stop)
{
	switch (stop) {
	case X4_STOP_COUNT: return "count";
	case X4_STOP_EOS: return "eos";
	case X4_STOP_CONTEXT: return "context";
	case X4_STOP_CANCEL: return "cancel";
	default: return "?";
	}
}

int x4_session_open(x4_session **out, const x4_paths *p, x4_err *e)
{
	*out = NULL;
	x4_session *s = x4_calloc(1, sizeof *s, "the session", e);
	if (!s)
		return X4_ENOMEM;
	int rc = x4_model_open(&s->m, p, e);
	if (rc) {
		x4_session_close(s);
		return rc;
	}
	*out = s;
	return 0;
}

int x4_session_load(x4_session *s, const x4_trunk_opts *o, x4_err *e)
{
	if (s->t)
		return x4_err_set(e, X4_EINVAL, "the session is loaded already; a request's options "
				  "change what can change without a reload");
	return x4_trunk_create(&s->t, s->m, o, e);
}

int x4_session_ctx(const x4_session *s, const x4_trunk_opts *o)
{
	return x4_trunk_opts_ctx(s->m, o);
}

int x4_session_check_prompt(const x4_session *s, size_t n, const x4_trunk_opts *o, x4_err *e)
{
	if (!o && s->t)
		o = x4_trunk_get_opts(s->t);
	int cap = x4_session_ctx(s, o);
	const x4_config *c = x4_model_config(s->m);
	if (n > (size_t)cap)
		return x4_err_set(e, X4_ERANGE, "the prompt is %zu tokens and the cache holds %d "
				  "positions (--max-model-len: by default min(the model's context, "
				  "%d); the model's context is %d): raise --max-model-len to at least "
				  "%zu, or shorten the prompt", n, cap, X4_DEFAULT_CTX, c->n_ctx_train,
				  n);
	return 0;
}

void x4_session_close(x4_session *s)
{
	if (!s)
		return;
	x4_trunk_free(s->t);
	x4_model_close(s->m);
	free(s->steps);
	free(s->gen);
	free(s->rows);
	free(s);
}

const x4_model *x4_session_model(const x4_session *s) { return s->m; }
x4_trunk *x4_session_trunk(x4_session *s) { return s->t; }

int x4_session_tokenize(x4_session *s, const x4_request *r, int32_t **ids, size_t *n, x4_err *e)
{
	*ids = NULL;
	*n = 0;
	const x4_tokenizer *tok = x4_model_tokenizer(s->m);
	if (r->n_ids) {
		int32_t *v = x4_alloc(sizeof *v * r->n_ids, "the prompt's ids", e);
		if (!v)
			return X4_ENOMEM;
		memcpy(v, r->ids, sizeof *v * r->n_ids);
		*ids = v;
		*n = r->n_ids;
	} else if (r->n_chat) {
		int rc = x4_chat_tokenize(tok, r->chat, r->n_chat, true, ids, n, e);
		if (rc)
			return rc;
	} else {
		int rc = x4_tokenize(tok, r->text ? r->text : "", r->text ? r->text_len : 0,
				     r->tokenize_flags, ids, n, e);
		if (rc)
			return rc;
	}
	int nv = x4_model_config(s->m)->n_vocab;
	for (size_t i = 0; i < *n; i++)
		if ((*ids)[i] < 0 || (*ids)[i] >= nv) {
			int bad = (*ids)[i];
			free(*ids);
			*ids = NULL;
			return x4_err_set(e, X4_EINVAL, "token id %d (at %zu) is outside the vocabulary "
					  "[0, %d)", bad, i, nv);
		}
	return 0;
}

/* The request's options differ from the trunk's in something it must be
 * configured for (the progress callback is not an option). */
static bool opts_differ(const x4_trunk_opts *a, const x4_trunk_opts *b)
{
	return a->device != b->device || a->max_ctx != b->max_ctx || a->resid != b->resid ||
	       a->prec != b->prec || a->threads != b->threads ||
	       a->prefill_chunk != b->prefill_chunk || a->hc_eager != b->hc_eager ||
	       a->kv != b->kv || a->mem_limit != b->mem_limit || a->sublayer != b->sublayer ||
	       a->no_graph != b->no_graph || a->pdl != b->pdl || a->attn != b->attn ||
	       a->gemm != b->gemm || a->warp_copy != b->warp_copy || a->no_reserve != b->no_reserve;
}

static int grow(void **p, size_t *cap, size_t need, size_t elem, const char *what, x4_err *e)
{
	if (need <= *cap)
		return 0;
	size_t c = *cap ? *cap : 256;
	while (c < need)
		c *= 2;
	void *q = realloc(*p, c * elem);
	if (!q)
		return x4_err_set(e, X4_ENOMEM, "out of memory for %s", what);
	*p = q;
	*cap = c;
	return 0;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

static void summarise(x4_session *s, x4_gen_stats *st)
{
	st->step_s = s->steps;
	st->tokens = s->gen;
	st->prefill_tok_s = st->prefill_s > 0 ? (double)st->n_prefilled / st->prefill_s : NAN;
	st->first_step_s = st->n_steps ? s->steps[0] : NAN;
	st->n_steady = st->n_steps > 1 ? st->n_steps - 1 : 0;
	st->median_step_s = NAN;
	if (!st->n_steady)
		return;
	double *v = malloc(st->n_steady * sizeof *v);
	if (!v)
		return;
	memcpy(v, s->steps + 1, st->n_steady * sizeof *v);
	qsort(v, st->n_steady, sizeof *v, cmp_double);
	size_t n = st->n_steady;
	st->median_step_s = n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
	free(v);
}

/* The prompt's forward in chunks from position `from` (the positions before
 * it were restored); the last chunk also picks the first token (when one is
 * to be generated).  *stopped when a callback said stop. */
static int prefill(x4_session *s, const x4_request *r, const int32_t *prompt, size_t n_prompt,
		   size_t from, x4_sampler *smp, int32_t *next, x4_gen_stats *st, bool *stopped,
		   x4_err *e)
{
	const int32_t *ids = prompt + from;
	size_t n = n_prompt - from;
	x4_trunk_stats ts;
	x4_trunk_get_stats(s->t, &ts);
	size_t nv = (size_t)x4_model_config(s->m)->n_vocab;
	/* The trunk's own chunk with or without every row delivered: a chunk's
	 * width changes the summation order of its products, so another width
	 * would give other logits in the last bits. */
	size_t chunk = ts.prefill_chunk > 0 ? (size_t)ts.prefill_chunk : 1;
	float *rows = NULL;
	if (r->on_logits) {
		size_t need = X4_MIN(chunk, n);
		if (s->n_rows < need) {
			float *p = realloc(s->rows, need * nv * sizeof *p);
			if (!p)
				return x4_err_set(e, X4_ENOMEM, "out of memory for the logits of %zu "
						  "positions", need);
			s->rows = p;
			s->n_rows = need;
		}
		rows = s->rows;
	}
	for (size_t at = 0; at < n; at += chunk) {
		size_t k = X4_MIN(chunk, n - at);
		bool last = at + k == n;
		double t0 = x4_now();
		int rc = last && r->max_tokens > 0
			? x4_trunk_forward_next(s->t, ids + at, (int)k, smp, &r->sampler, next, rows, e)
			: x4_trunk_forward(s->t, ids + at, (int)k, rows, rows != NULL, e);
		st->prefill_s += x4_now() - t0;
		if (!rc)
			st->n_prefilled = at + k;
		if (!rc && r->on_logits)
			rc = r->on_logits(r->ctx, rows, (int)k, e);
		if (rc)
			return rc;
		if (r->on_prefill && r->on_prefill(r->ctx, from + at + k, n_prompt)) {
			*stopped = true;
			return 0;
		}
	}
	return 0;
}

/* Offer the cache to the store: every position forwarded, whose ids are
 * the prompt's and then the generated ones fed back (the last generated
 * token is fed only when it was given its logits).  A request that failed
 * offers nothing: a CUDA failure may have left the device's rows in doubt,
 * and a non-finite pick means the streams overflowed.  A cancelled one
 * offers what it forwarded: the length only ever counts whole forwards, so
 * a cancel at a chunk or a token boundary leaves no half-written row in it. */
static int offer(x4_session *s, x4_prefix_store *ps, const int32_t *prompt, size_t n,
		 x4_err *e)
{
	size_t pos = (size_t)x4_trunk_pos(s->t);
	if (pos <= n)
		return x4_prefix_offer(ps, s->t, prompt, pos, e);
	int32_t *ids = malloc(pos * sizeof *ids);
	if (!ids)
		return 0; /* as an entry the store could not allocate */
	memcpy(ids, prompt, n * sizeof *ids);
	memcpy(ids + n, s->gen, (pos - n) * sizeof *ids);
	int rc = x4_prefix_offer(ps, s->t, ids, pos, e);
	free(ids);
	return rc;
}

int x4_session_generate(x4_session *s, const x4_request *r, x4_gen_stats *st, x4_err *e)
{
	memset(st, 0, sizeof *st);
	st->stop = X4_STOP_COUNT;
	st->prefill_tok_s = st->first_step_s = st->median_step_s = NAN;
	st->step_s = s->steps;
	st->tokens = s->gen;
	if (r->max_tokens < 0)
		return x4_err_set(e, X4_EINVAL, "a token budget of %ld: use 0 or more", r->max_tokens);
	int rc = x4_sampler_check(&r->sampler, e);
	if (rc)
		return rc;
	int32_t *ids = NULL;
	size_t n = 0;
	if ((rc = x4_session_tokenize(s, r, &ids, &n, e)))
		return rc;
	const x4_config *c = x4_model_config(s->m);
	x4_sampler *smp = NULL;
	if (!n)
		rc = x4_err_set(e, X4_EINVAL, "the prompt is empty: give some text (or a bos id)");
	if (!rc)
		rc = x4_session_check_prompt(s, n, r->opts, e);
	if (!rc && !s->t)
		rc = x4_session_load(s, r->opts, e);
	if (!rc && r->opts && opts_differ(r->opts, x4_trunk_get_opts(s->t)))
		rc = x4_trunk_configure(s->t, r->opts, e);
	if (!rc)
		rc = x4_sampler_create(&smp, &r->sampler, e);
	if (rc) {
		free(ids);
		return rc;
	}
	st->n_prompt = n;
	/* Nothing of an earlier request is context for this one: the reset
	 * comes first, and only rows the store holds for this prompt's own ids
	 * are put back (at most n - 1, so that the last prompt token is
	 * forwarded and gives the first pick its logits). */
	x4_trunk_reset(s->t);
	if (r->prefix) {
		double t0 = x4_now();
		rc = x4_prefix_restore(r->prefix, s->t, ids, n, n - 1, &st->n_reused, e);
		st->restore_s = x4_now() - t0;
	}

	bool stopped = false;
	int32_t next = -1;
	if (!rc)
		rc = prefill(s, r, ids, n, st->n_reused, smp, &next, st, &stopped, e);
	if (stopped)
		st->stop = X4_STOP_CANCEL;
	x4_detok dt = {0};
	char piece[256];
	while (!rc && !stopped && r->max_tokens > 0) {
		if (st->n_gen >= (size_t)r->max_tokens)
			break;
		int32_t id = next;
		if (id == c->eos_id && !r->ignore_eos) {
			st->stop = X4_STOP_EOS;
			break;
		}
		if ((rc = grow((void **)&s->gen, &s->cap_gen, st->n_gen + 1, sizeof *s->gen,
			       "the generated ids", e)))
			break;
		s->gen[st->n_gen++] = id;
		size_t k = x4_detok_step(x4_model_tokenizer(s->m), &dt, id, piece, sizeof piece);
		bool cancel = r->on_token && r->on_token(r->ctx, id, piece, k);
		/* Every generated token has its row of logits: the last is fed too. */
		if (cancel || (st->n_gen >= (size_t)r->max_tokens && !r->on_logits)) {
			if (cancel)
				st->stop = X4_STOP_CANCEL;
			break;
		}
		float *row = r->on_logits ? s->rows : NULL;
		double t0 = x4_now();
		rc = x4_trunk_forward_next(s->t, &id, 1, smp, &r->sampler, &next, row, e);
		double dtm = x4_now() - t0;
		if (rc == X4_ERANGE) {
			/* the cache is full: the context, not a failure, ends the run */
			st->stop = X4_STOP_CONTEXT;
			rc = 0;
			break;
		}
		if (rc)
			break;
		if ((rc = grow((void **)&s->steps, &s->cap_steps, st->n_steps + 1, sizeof *s->steps,
			       "the step times", e)))
			break;
		s->steps[st->n_steps++] = dtm;
		if (r->on_logits && (rc = r->on_logits(r->ctx, row, 1, e)))
			break;
	}
	size_t k = x4_detok_flush(x4_model_tokenizer(s->m), &dt, piece, sizeof piece);
	if (k && r->on_token && st->stop != X4_STOP_CANCEL)
		r->on_token(r->ctx, -1, piece, k);
	x4_sampler_free(smp);
	summarise(s, st); /* the offer below adds only offer_s */
	if (!rc && r->on_end)
		r->on_end(r->ctx, st);
	if (!rc && r->prefix) {
		double t0 = x4_now();
		rc = offer(s, r->prefix, ids, n, e);
		st->offer_s = x4_now() - t0;
	}
	free(ids);
	return rc;
}
