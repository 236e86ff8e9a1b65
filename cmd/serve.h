/*
 * serve.h - what the parts of x4-serve share: a job (one generation
 * request, from the parsed body to the finished text), the worker that owns
 * the session and runs jobs one at a time in arrival order, and the
 * counters /metrics publishes.  x4-serve.c is the HTTP side (routes, errors,
 * the daemon), serve_api.c the OpenAI request and response objects,
 * serve_worker.c the queue and the worker.
 */
#ifndef X4_SERVE_H
#define X4_SERVE_H

#include "tool.h"

#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>

/* An HTTP error as the OpenAI API words it. */
typedef struct serve_error {
	int status;          /* 400, 401, 404, ... */
	const char *type;    /* "invalid_request_error", "authentication_error", ... */
	const char *code;    /* "context_length_exceeded", ... or NULL */
	char param[64];      /* the field at fault, "" for none */
	char message[512];
} serve_error;
void serve_error_set(serve_error *err, int status, const char *type, const char *code,
		     const char *param, const char *fmt, ...) __attribute__((format(printf, 6, 7)));

enum { SERVE_CHAT, SERVE_COMPLETION };
enum { SERVE_MAX_STOP = 4 }; /* the OpenAI API's limit */

/* Finish reasons beyond the session's own stops. */
enum { SERVE_FIN_NONE, SERVE_FIN_STOP, SERVE_FIN_LENGTH, SERVE_FIN_CANCEL, SERVE_FIN_ERROR };
const char *serve_finish_name(int fin);

typedef struct serve_job {
	/* set when the request is parsed, read-only after */
	int kind;               /* SERVE_CHAT or SERVE_COMPLETION */
	bool stream, include_usage;
	int32_t *ids;           /* [n_ids] the prompt, tokenized by the HTTP thread */
	size_t n_ids;
	long max_tokens;
	bool ignore_eos;
	x4_sampler_opts sampler;
	char *stop[SERVE_MAX_STOP];
	int n_stop;
	char id[40];            /* "chatcmpl-N" / "cmpl-N" */
	long long created;

	/* the worker's, under mu */
	pthread_mutex_t mu;
	pthread_cond_t cv;
	char *text;             /* the generated text, stop strings cut off */
	size_t text_n, text_cap;
	size_t emitted;         /* bytes of text already sent as deltas */
	char *sse;              /* streamed events not yet handed to the connection */
	size_t sse_n, sse_cap, sse_off;
	bool started, done;
	int finish;             /* SERVE_FIN_* once done */
	size_t n_prompt, n_gen, n_reused;
	int32_t *gen;           /* [n_gen] the generated ids, copied from the stats */
	double prefill_tok_s, decode_tok_s;
	char error[X4_ERR_MSG]; /* when finish is SERVE_FIN_ERROR */
	bool oom;               /* a buffer could not grow: the job ends in error */

	struct serve_worker *worker; /* the worker running it (set when it starts) */
	int client_fd;          /* the connection's socket, watched for a hang-up */
	atomic_bool cancel;     /* the client went away, or the server stops */
	atomic_int refs;        /* the connection, the queue, the streamed response */
	struct serve_job *next; /* the queue's link */
} serve_job;

serve_job *serve_job_new(void);
void serve_job_ref(serve_job *j);
void serve_job_unref(serve_job *j);
/* Append to the job's streamed events (under its lock); false when out of memory. */
bool serve_job_sse_add(serve_job *j, const char *s, size_t n);

/* The counters of /metrics (under the server's metrics lock). */
typedef struct serve_metrics {
	uint64_t requests, prompt_tokens, gen_tokens, cancellations;
	double prefill_s, decode_s;              /* totals of every request */
	double last_prefill_tok_s, last_decode_tok_s;
	uint64_t responses[16];                  /* by status, see serve_status_slot */
	x4_trunk_stats trunk;
	x4_prefix_stats prefix;
	bool have_prefix;
	int queue_depth, running;
} serve_metrics;
int serve_status_slot(int status);
extern const int serve_statuses[16];

typedef struct serve_worker {
	x4_session *session;
	x4_trunk_opts opts;
	x4_prefix_store *store; /* NULL when --prefix-cache 0 */
	int max_queue;
	pthread_t thread;
	pthread_mutex_t mu;     /* the queue and stopping */
	pthread_cond_t cv;
	serve_job *head, *tail, *current;
	int depth;
	bool stopping, started;
	pthread_mutex_t mmu;    /* the metrics */
	serve_metrics m;
	atomic_ullong next_id;
	bool quiet;
} serve_worker;

/* Load the model (once) and start the worker.  0 or 1 after a message. */
int serve_worker_start(serve_worker *w, const x4_paths *p, uint64_t prefix_budget);
/* Queue a job (a reference is taken): false when the queue is full or the
 * server is stopping (err filled: 503). */
bool serve_worker_submit(serve_worker *w, serve_job *j, serve_error *err);
/* Cancel everything queued and running, join the worker, free the session. */
void serve_worker_stop(serve_worker *w);
/* A snapshot of the counters (with the queue's depth). */
void serve_worker_metrics(serve_worker *w, serve_metrics *out);
void serve_worker_count_status(serve_worker *w, int status);
/* The Prometheus text of /metrics, malloc'd. */
char *serve_metrics_text(serve_worker *w);
const x4_model *serve_worker_model(const serve_worker *w);
int serve_worker_ctx(const serve_worker *w);

/* serve_api.c: the body of a completion request, checked, into a job: the
 * prompt tokenized, every field's range checked, the prompt against the
 * context.  NULL with err filled when it is refused. */
serve_job *serve_parse_request(serve_worker *w, int kind, const char *body, size_t n,
			       const char *model_name, serve_error *err);
/* The whole response of a finished job; the events of a streamed one. */
json_t *serve_response(const serve_job *j, const char *model_name);
/* "data: {...}\n\n" for the chunk carrying delta (role: the first chunk),
 * the closing chunk (fin != NONE), the usage chunk.  Appended to the job's
 * sse buffer under its lock by the worker; false when out of memory. */
bool serve_sse_delta(serve_job *j, const char *model_name, const char *delta, size_t n,
		     bool role);
bool serve_sse_finish(serve_job *j, const char *model_name);
/* {"error":{"message","type","param","code"}} as a malloc'd string. */
char *serve_error_json(const serve_error *err);
/* A JSON string value for n bytes that may hold invalid UTF-8 (replaced). */
json_t *serve_json_text(const char *s, size_t n);

/* The served model's name (for the worker's chunks). */
extern const char *serve_model_name;

#endif
