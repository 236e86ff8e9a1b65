/*
 * serve_worker.c - the one thread that owns the session: it takes jobs
 * from a bounded FIFO and runs each to its end before the next, so two
 * requests are never mixed in one cache (docs/serving.md).  A job's text
 * grows here, token by token; stop strings are matched on it, and the text
 * that could still turn out to be the start of one is held back.  The
 * connection's thread reads what the job has (its streamed events, or at
 * the end the whole text) under the job's lock.
 */
#include "serve.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

const int serve_statuses[16] = { 200, 400, 401, 404, 405, 408, 413, 415, 422, 429, 431, 500,
				 503, 0, 0, 0 };

int serve_status_slot(int status)
{
	for (int i = 0; i < 16 && serve_statuses[i]; i++)
		if (serve_statuses[i] == status)
			return i;
	return -1;
}

const char *serve_finish_name(int fin)
{
	switch (fin) {
	case SERVE_FIN_STOP: return "stop";
	case SERVE_FIN_LENGTH: return "length";
	case SERVE_FIN_CANCEL: return "cancelled";
	case SERVE_FIN_ERROR: return "error";
	default: return NULL;
	}
}

serve_job *serve_job_new(void)
{
	serve_job *j = calloc(1, sizeof *j);
	if (!j)
		return NULL;
	pthread_mutex_init(&j->mu, NULL);
	pthread_cond_init(&j->cv, NULL);
	atomic_init(&j->refs, 1);
	atomic_init(&j->cancel, false);
	j->client_fd = -1;
	j->prefill_tok_s = j->decode_tok_s = NAN;
	return j;
}

void serve_job_ref(serve_job *j) { atomic_fetch_add(&j->refs, 1); }

void serve_job_unref(serve_job *j)
{
	if (!j || atomic_fetch_sub(&j->refs, 1) != 1)
		return;
	for (int i = 0; i < j->n_stop; i++)
		free(j->stop[i]);
	free(j->ids);
	free(j->text);
	free(j->sse);
	free(j->gen);
	pthread_mutex_destroy(&j->mu);
	pthread_cond_destroy(&j->cv);
	free(j);
}

static bool grow(char **p, size_t *cap, size_t need)
{
	if (need <= *cap)
		return true;
	size_t c = *cap ? *cap : 256;
	while (c < need)
		c *= 2;
	char *q = realloc(*p, c);
	if (!q)
		return false;
	*p = q;
	*cap = c;
	return true;
}

bool serve_job_sse_add(serve_job *j, const char *s, size_t n)
{
	if (!grow(&j->sse, &j->sse_cap, j->sse_n + n))
		return false;
	memcpy(j->sse + j->sse_n, s, n);
	j->sse_n += n;
	return true;
}

/* ---- the prefix store: made, read and freed here alone ---- */

static int store_open(serve_worker *w, uint64_t budget)
{
	w->store = NULL;
	if (!budget)
		return 0;
	x4_err e = {0};
	if (x4_prefix_store_create(&w->store, budget, &e)) {
		x4t_warn("%s", e.msg);
		return 1;
	}
	return 0;
}

static void store_stats(serve_worker *w, serve_metrics *m)
{
	m->have_prefix = w->store != NULL;
	memset(&m->prefix, 0, sizeof m->prefix);
	if (w->store)
		x4_prefix_store_stats(w->store, &m->prefix);
}

static void store_close(serve_worker *w)
{
	x4_prefix_store_free(w->store);
	w->store = NULL;
}

/* ---- a job's text ---- */

/* The longest suffix of text[from, n) that is a proper prefix of a stop
 * string: it may yet become one, so it is not sent. */
static size_t stop_hold(const serve_job *j, size_t from)
{
	size_t hold = 0, avail = j->text_n - from;
	for (int i = 0; i < j->n_stop; i++) {
		size_t sl = strlen(j->stop[i]);
		for (size_t k = sl - 1 < avail ? sl - 1 : avail; k > hold; k--)
			if (memcmp(j->text + j->text_n - k, j->stop[i], k) == 0) {
				hold = k;
				break;
			}
	}
	return hold;
}

/* Send text[emitted, end) as one delta. */
static void emit(serve_job *j, size_t end)
{
	if (end <= j->emitted)
		return;
	if (j->stream && !serve_sse_delta(j, serve_model_name, j->text + j->emitted,
					  end - j->emitted, false))
		j->oom = true;
	j->emitted = end;
}

/* Append a piece; true when a stop string now ends the text.  No stop
 * string starts before j->emitted (everything before it was ruled out), so
 * the search starts there. */
static bool text_add(serve_job *j, const char *piece, size_t len)
{
	if (!grow(&j->text, &j->text_cap, j->text_n + len + 1)) {
		j->oom = true;
		return false;
	}
	memcpy(j->text + j->text_n, piece, len);
	j->text_n += len;
	j->text[j->text_n] = 0;
	size_t best = SIZE_MAX;
	for (int i = 0; i < j->n_stop; i++) {
		const char *p = memmem(j->text + j->emitted, j->text_n - j->emitted, j->stop[i],
				       strlen(j->stop[i]));
		if (p && (size_t)(p - j->text) < best)
			best = (size_t)(p - j->text);
	}
	if (best != SIZE_MAX) {
		j->text_n = best;
		j->text[best] = 0;
		emit(j, best);
		return true;
	}
	emit(j, j->text_n - stop_hold(j, j->emitted));
	return false;
}

static int on_token(void *ctx, int32_t id, const char *piece, size_t len)
{
	serve_job *j = ctx;
	(void)id;
	pthread_mutex_lock(&j->mu);
	bool hit = text_add(j, piece, len);
	if (hit)
		j->finish = SERVE_FIN_STOP;
	bool stop = hit || j->oom;
	pthread_cond_broadcast(&j->cv);
	pthread_mutex_unlock(&j->mu);
	return stop || atomic_load(&j->cancel);
}

static int on_prefill(void *ctx, size_t done, size_t total)
{
	serve_job *j = ctx;
	(void)done;
	(void)total;
	return atomic_load(&j->cancel);
}

/* ---- the worker ---- */

static void count(serve_worker *w, const serve_job *j, const x4_gen_stats *st)
{
	pthread_mutex_lock(&w->mmu);
	if (j->finish == SERVE_FIN_CANCEL)
		w->m.cancellations++;
	if (st) {
		w->m.requests++;
		w->m.prompt_tokens += st->n_prompt;
		w->m.gen_tokens += st->n_gen;
		w->m.prefill_s += st->prefill_s;
		for (size_t i = 0; i < st->n_steps; i++)
			w->m.decode_s += st->step_s[i];
		if (isfinite(st->prefill_tok_s))
			w->m.last_prefill_tok_s = st->prefill_tok_s;
		if (st->n_steady)
			w->m.last_decode_tok_s = 1.0 / st->median_step_s;
	}
	store_stats(w, &w->m);
	pthread_mutex_unlock(&w->mmu);
}

/* The worker is free for the next job: after the job's end and the offer
 * of its rows to the store, whose counters /metrics then shows. */
static void idle(serve_worker *w)
{
	pthread_mutex_lock(&w->mu);
	w->current = NULL;
	pthread_mutex_unlock(&w->mu);
	pthread_mutex_lock(&w->mmu);
	w->m.running = 0;
	store_stats(w, &w->m);
	pthread_mutex_unlock(&w->mmu);
}

/* Fill the job's result from the session's, count it, and wake its
 * connection: a client that has its answer sees it in /metrics too. */
static void finish(serve_worker *w, serve_job *j, int rc, const x4_gen_stats *st,
		   const x4_err *e)
{
	pthread_mutex_lock(&j->mu);
	if (rc || j->oom) {
		j->finish = SERVE_FIN_ERROR;
		snprintf(j->error, sizeof j->error, "%s", rc ? e->msg : "out of memory for the text");
	} else if (!st) {
		j->finish = SERVE_FIN_CANCEL; /* cancelled before it started */
	} else if (j->finish != SERVE_FIN_STOP) {
		j->finish = st->stop == X4_STOP_CANCEL ? SERVE_FIN_CANCEL
			  : st->stop == X4_STOP_EOS ? SERVE_FIN_STOP : SERVE_FIN_LENGTH;
		if (j->finish != SERVE_FIN_CANCEL)
			emit(j, j->text_n); /* nothing more can complete a stop string */
	}
	if (st) {
		j->n_prompt = st->n_prompt;
		j->n_reused = st->n_reused;
		j->prefill_tok_s = st->prefill_tok_s;
		j->decode_tok_s = st->n_steady ? 1.0 / st->median_step_s : NAN;
		j->gen = st->n_gen ? malloc(st->n_gen * sizeof *j->gen) : NULL;
		if (j->gen) {
			memcpy(j->gen, st->tokens, st->n_gen * sizeof *j->gen);
			j->n_gen = st->n_gen;
		}
	}
	if (j->stream && !serve_sse_finish(j, serve_model_name))
		j->sse_n = j->sse_off = 0; /* out of memory: the stream ends cut short */
	count(w, j, st);
	j->done = true;
	pthread_cond_broadcast(&j->cv);
	pthread_mutex_unlock(&j->mu);
}

/* The request has given its last token: answer the client now, before
 * the session offers the rows to the store (a copy of the whole cache on
 * a GPU, which the client need not wait for). */
static void on_end(void *ctx, const x4_gen_stats *st)
{
	serve_job *j = ctx;
	finish(j->worker, j, 0, st, NULL);
}

static void run(serve_worker *w, serve_job *j)
{
	if (atomic_load(&j->cancel)) {
		finish(w, j, 0, NULL, NULL);
		idle(w);
		return;
	}
	j->worker = w;
	pthread_mutex_lock(&j->mu);
	j->started = true;
	if (j->stream && j->kind == SERVE_CHAT && !serve_sse_delta(j, serve_model_name, "", 0, true))
		j->oom = true;
	pthread_cond_broadcast(&j->cv);
	pthread_mutex_unlock(&j->mu);
	x4_request r = {
		.ids = j->ids, .n_ids = j->n_ids, .max_tokens = j->max_tokens, .sampler = j->sampler,
		.ignore_eos = j->ignore_eos, .opts = &w->opts, .on_token = on_token,
		.on_prefill = on_prefill, .on_end = on_end, .ctx = j, .prefix = w->store,
	};
	x4_gen_stats st;
	x4_err e = {0};
	int rc = x4_session_generate(w->session, &r, &st, &e);
	pthread_mutex_lock(&j->mu);
	bool answered = j->done;
	pthread_mutex_unlock(&j->mu);
	if (!answered)
		finish(w, j, rc, &st, &e);
	else if (rc) /* the answer stands; only the store's copy of its rows failed */
		x4t_warn("%s: the prefix store did not keep its rows: %s", j->id, e.msg);
	idle(w);
	if (!w->quiet) {
		char reused[48] = "";
		if (st.n_reused)
			snprintf(reused, sizeof reused, " (%zu reused)", st.n_reused);
		x4t_warn("%s: prompt %zu tokens%s, %zu generated, finish %s, prefill %.1f tok/s, "
			 "decode %.1f tok/s%s%s", j->id, st.n_prompt, reused, st.n_gen,
			 serve_finish_name(j->finish), isfinite(st.prefill_tok_s) ? st.prefill_tok_s : 0,
			 st.n_steady ? 1.0 / st.median_step_s : 0.0, rc && !answered ? ": " : "",
			 rc && !answered ? e.msg : "");
	}
}

static void *worker_main(void *arg)
{
	serve_worker *w = arg;
	for (;;) {
		pthread_mutex_lock(&w->mu);
		while (!w->head && !w->stopping)
			pthread_cond_wait(&w->cv, &w->mu);
		serve_job *j = w->head;
		if (!j) {
			pthread_mutex_unlock(&w->mu);
			break;
		}
		w->head = j->next;
		if (!w->head)
			w->tail = NULL;
		j->next = NULL;
		w->depth--;
		w->current = j;
		if (w->stopping)
			atomic_store(&j->cancel, true);
		pthread_mutex_unlock(&w->mu);
		pthread_mutex_lock(&w->mmu);
		w->m.running = 1;
		pthread_mutex_unlock(&w->mmu);
		run(w, j); /* clears current and running when it counts the job */
		serve_job_unref(j);
	}
	return NULL;
}

int serve_worker_start(serve_worker *w, const x4_paths *p, uint64_t prefix_budget)
{
	x4_err e = {0};
	pthread_mutex_init(&w->mu, NULL);
	pthread_cond_init(&w->cv, NULL);
	pthread_mutex_init(&w->mmu, NULL);
	if (x4_session_open(&w->session, p, &e)) {
		x4t_warn("%s", e.msg);
		return 1;
	}
	if (x4_session_load(w->session, &w->opts, &e)) {
		x4t_warn("%s", e.msg);
		return 1;
	}
	if (store_open(w, prefix_budget))
		return 1;
	x4_trunk_get_stats(x4_session_trunk(w->session), &w->m.trunk);
	store_stats(w, &w->m);
	if (pthread_create(&w->thread, NULL, worker_main, w)) {
		x4t_warn("cannot start the worker thread");
		return 1;
	}
	w->started = true;
	return 0;
}

bool serve_worker_submit(serve_worker *w, serve_job *j, serve_error *err)
{
	pthread_mutex_lock(&w->mu);
	/* the running job does not count: --max-queue is the jobs that wait */
	bool ok = !w->stopping && w->depth + (w->current != NULL) <= w->max_queue;
	if (w->stopping)
		serve_error_set(err, 503, "server_error", "shutting_down", NULL,
				"the server is shutting down");
	else if (!ok)
		serve_error_set(err, 503, "server_error", "queue_full", NULL,
				"%d requests are waiting already (--max-queue): retry later", w->depth);
	if (ok) {
		serve_job_ref(j);
		if (w->tail)
			w->tail->next = j;
		else
			w->head = j;
		w->tail = j;
		w->depth++;
		pthread_cond_signal(&w->cv);
	}
	pthread_mutex_unlock(&w->mu);
	return ok;
}

void serve_worker_stop(serve_worker *w)
{
	pthread_mutex_lock(&w->mu);
	w->stopping = true;
	for (serve_job *j = w->head; j; j = j->next)
		atomic_store(&j->cancel, true);
	if (w->current)
		atomic_store(&w->current->cancel, true);
	pthread_cond_broadcast(&w->cv);
	pthread_mutex_unlock(&w->mu);
	if (w->started)
		pthread_join(w->thread, NULL);
	w->started = false;
	store_close(w);
	x4_session_close(w->session);
	w->session = NULL;
	pthread_mutex_destroy(&w->mu);
	pthread_cond_destroy(&w->cv);
	pthread_mutex_destroy(&w->mmu);
}

void serve_worker_metrics(serve_worker *w, serve_metrics *out)
{
	pthread_mutex_lock(&w->mu);
	int depth = w->depth;
	pthread_mutex_unlock(&w->mu);
	pthread_mutex_lock(&w->mmu);
	*out = w->m;
	pthread_mutex_unlock(&w->mmu);
	out->queue_depth = depth;
}

void serve_worker_count_status(serve_worker *w, int status)
{
	int k = serve_status_slot(status);
	pthread_mutex_lock(&w->mmu);
	if (k >= 0)
		w->m.responses[k]++;
	pthread_mutex_unlock(&w->mmu);
}

const x4_model *serve_worker_model(const serve_worker *w) { return x4_session_model(w->session); }

int serve_worker_ctx(const serve_worker *w) { return x4_session_ctx(w->session, &w->opts); }

/* ---- /metrics ---- */

/* The process's resident set, from /proc/self/statm (0 when unreadable). */
static uint64_t rss_bytes(void)
{
	FILE *f = fopen("/proc/self/statm", "r");
	unsigned long long size = 0, res = 0;
	if (f) {
		if (fscanf(f, "%llu %llu", &size, &res) != 2)
			res = 0;
		fclose(f);
	}
	return (uint64_t)res * (uint64_t)sysconf(_SC_PAGESIZE);
}

static void metric(FILE *f, const char *name, const char *type, const char *help, double v)
{
	fprintf(f, "# HELP %s %s\n# TYPE %s %s\n%s %.17g\n", name, help, name, type, name, v);
}

char *serve_metrics_text(serve_worker *w)
{
	serve_metrics m;
	serve_worker_metrics(w, &m);
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	if (!f)
		return NULL;
	metric(f, "x4_resident_bytes", "gauge", "Weight bytes the trunk holds on its device "
	       "(0 on the CPU, which reads the mapping).", (double)m.trunk.resident_bytes);
	metric(f, "x4_cache_bytes", "gauge", "Bytes of the latent KV cache.",
	       (double)m.trunk.cache_bytes);
	metric(f, "x4_context_positions", "gauge", "Positions the cache holds (--max-model-len).",
	       m.trunk.max_ctx);
	metric(f, "process_resident_memory_bytes", "gauge", "The process's resident set size.",
	       (double)rss_bytes());
	metric(f, "x4_requests_total", "counter", "Generation requests run to their end.",
	       (double)m.requests);
	metric(f, "x4_prompt_tokens_total", "counter", "Prompt tokens of the requests run.",
	       (double)m.prompt_tokens);
	metric(f, "x4_generation_tokens_total", "counter", "Tokens generated.",
	       (double)m.gen_tokens);
	metric(f, "x4_prefill_seconds_total", "counter", "Seconds spent in prefills.", m.prefill_s);
	metric(f, "x4_decode_seconds_total", "counter", "Seconds spent in decode steps.",
	       m.decode_s);
	metric(f, "x4_prefill_tokens_per_second", "gauge", "The last request's prefill rate.",
	       m.last_prefill_tok_s);
	metric(f, "x4_decode_tokens_per_second", "gauge",
	       "The last request's steady decode rate (median step after the first).",
	       m.last_decode_tok_s);
	metric(f, "x4_queue_depth", "gauge", "Requests waiting behind the running one.",
	       m.queue_depth);
	metric(f, "x4_queue_limit", "gauge", "Requests that may wait (--max-queue).", w->max_queue);
	metric(f, "x4_requests_running", "gauge", "Requests running now (0 or 1).", m.running);
	metric(f, "x4_cancellations_total", "counter",
	       "Requests cancelled: the client went away, or the server stopped.",
	       (double)m.cancellations);
	fprintf(f, "# HELP x4_http_responses_total Responses by HTTP status.\n"
		"# TYPE x4_http_responses_total counter\n");
	for (int i = 0; i < 16 && serve_statuses[i]; i++)
		fprintf(f, "x4_http_responses_total{code=\"%d\"} %llu\n", serve_statuses[i],
			(unsigned long long)m.responses[i]);
	metric(f, "x4_prefix_enabled", "gauge", "1 when the prefix store is on (--prefix-cache).",
	       m.have_prefix);
	metric(f, "x4_prefix_hits_total", "counter",
	       "Requests that restored at least one prompt position from the prefix store.",
	       (double)m.prefix.hits);
	metric(f, "x4_prefix_misses_total", "counter", "Requests that restored none.",
	       (double)m.prefix.misses);
	metric(f, "x4_prefix_reused_tokens_total", "counter",
	       "Prompt positions restored from the prefix store instead of forwarded.",
	       (double)m.prefix.reused_tokens);
	metric(f, "x4_prefix_entries", "gauge", "Entries the prefix store holds.",
	       (double)m.prefix.entries);
	metric(f, "x4_prefix_bytes", "gauge", "Bytes the prefix store holds.",
	       (double)m.prefix.bytes);
	metric(f, "x4_prefix_budget_bytes", "gauge", "The prefix store's byte budget.",
	       (double)m.prefix.budget);
	metric(f, "x4_prefix_evictions_total", "counter", "Entries dropped to stay in the budget.",
	       (double)m.prefix.evictions);
	if (fclose(f)) {
		free(buf);
		return NULL;
	}
	return buf;
}
