/*
 * x4-serve - an OpenAI-compatible HTTP server over the library's generation
 * session: the model is loaded once, then /v1/chat/completions and
 * /v1/completions are answered whole or streamed (server-sent events, one
 * a token), one sequence at a time in arrival order (serve_worker.c).
 *
 * HTTP is libmicrohttpd's, a thread a connection, so that a streamed
 * response's reader can wait on its job; JSON is jansson's.  A request is
 * checked (route, method, key, content type, size, then the body field by
 * field and the prompt against the context) before it takes a place in the
 * queue, and every refusal is an OpenAI error object with its status.  A
 * client that hangs up cancels its request at the next token (in the
 * prefill, the next chunk).  SIGINT and SIGTERM cancel what runs and what
 * waits, answer those still connected, free everything and exit 0.
 */
#include "serve.h"

#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <microhttpd.h>
#include <netdb.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

static void usage(FILE *f)
{
	fprintf(f,
"usage: x4-serve [-m PATH] [--tokenizer DIR] [--device cpu|cuda:N]\n"
"                [--host ADDR] [--port N] [--served-model-name NAME]\n"
"                [--api-key KEY] [--prefix-cache SIZE] [--max-body SIZE]\n"
"                [--max-queue N] [--timeout S] [--quiet] [--max-model-len N]\n"
"                [request options of x4-run]\n"
"Serve a xing4_0 checkpoint over HTTP with the OpenAI API: POST\n"
"/v1/chat/completions and /v1/completions, GET /v1/models, /health, /metrics.\n"
"  -m, --model PATH        a .gguf or a folder holding one (default: the tiny\n"
"                          preset beside this binary)\n"
"      --tokenizer DIR     the release's tokenizer folder (default: beside it)\n"
"      --host ADDR         the address to listen on (default 127.0.0.1)\n"
"      --port N            the port (default 8000; 0 picks a free one); the\n"
"                          address is printed on stderr once it listens\n"
"      --served-model-name NAME  the model's name in requests and /v1/models\n"
"                          (default: the .gguf's name without .gguf)\n"
"      --api-key KEY       require 'Authorization: Bearer KEY' on /v1/\n"
"      --prefix-cache SIZE bytes of cache rows the prefix store keeps for reuse\n"
"                          (default 1G; 0 turns it off)\n"
"      --max-body SIZE     the largest request body (default 1M): 413 above\n"
"      --max-queue N       requests that may wait behind the running one\n"
"                          (default 64): 503 beyond\n"
"      --timeout S         seconds a connection may sit idle, and a request's\n"
"                          body may take to arrive (default 30): 408 beyond\n"
"      --quiet             no line on stderr for each request\n"
"%s%s"
"  -h, --help              this help\n"
"      --version           version, commit and CUDA runtime\n"
"Exit status: 0 after SIGINT or SIGTERM (the running request cancelled),\n"
"1 failure (the model, the address), 2 usage.\n", x4t_load_help, x4t_trunk_help);
}

struct opts {
	const char *model, *tokdir, *host, *name, *key;
	long port, max_queue, timeout;
	uint64_t prefix, max_body;
	bool quiet;
	x4_trunk_opts trunk;
};

static void parse_args(int argc, char **argv, struct opts *o)
{
	enum { O_TOK = 256, O_HOST, O_PORT, O_NAME, O_KEY, O_PREFIX, O_BODY, O_QUEUE, O_TIMEOUT,
	       O_QUIET, O_VERSION };
	static const struct option lo[] = {
		{"model", required_argument, 0, 'm'},
		{"tokenizer", required_argument, 0, O_TOK},
		{"host", required_argument, 0, O_HOST},
		{"port", required_argument, 0, O_PORT},
		{"served-model-name", required_argument, 0, O_NAME},
		{"api-key", required_argument, 0, O_KEY},
		{"prefix-cache", required_argument, 0, O_PREFIX},
		{"max-body", required_argument, 0, O_BODY},
		{"max-queue", required_argument, 0, O_QUEUE},
		{"timeout", required_argument, 0, O_TIMEOUT},
		{"quiet", no_argument, 0, O_QUIET},
		{"help", no_argument, 0, 'h'},
		{"version", no_argument, 0, O_VERSION},
		X4T_LOAD_LONGOPTS, X4T_TRUNK_LONGOPTS,
		{0, 0, 0, 0},
	};
	memset(o, 0, sizeof *o);
	o->host = "127.0.0.1";
	o->port = 8000;
	o->prefix = 1ull << 30;
	o->max_body = 1ull << 20;
	o->max_queue = 64;
	o->timeout = 30;
	x4_trunk_opts_default(&o->trunk);
	int c;
	while ((c = getopt_long(argc, argv, "m:h", lo, NULL)) != -1) {
		if (x4t_load_opt(c, optarg, &o->trunk) || x4t_trunk_opt(c, optarg, &o->trunk))
			continue;
		switch (c) {
		case 'm': o->model = optarg; break;
		case O_TOK: o->tokdir = optarg; break;
		case O_HOST: o->host = optarg; break;
		case O_PORT: o->port = x4t_long(optarg, 0, 65535, "--port"); break;
		case O_NAME: o->name = optarg; break;
		case O_KEY: o->key = optarg; break;
		case O_PREFIX:
			o->prefix = strcmp(optarg, "0") ? x4t_size(optarg, "--prefix-cache") : 0;
			break;
		case O_BODY: o->max_body = x4t_size(optarg, "--max-body"); break;
		case O_QUEUE: o->max_queue = x4t_long(optarg, 0, 1 << 16, "--max-queue"); break;
		case O_TIMEOUT: o->timeout = x4t_long(optarg, 1, 86400, "--timeout"); break;
		case O_QUIET: o->quiet = true; break;
		case 'h': usage(stdout); exit(x4t_out_done("the help"));
		case O_VERSION:
			printf("x4-serve %s (commit %s, CUDA runtime %s)\n", x4_version(), x4_commit(),
			       x4_cuda_runtime());
			exit(x4t_out_done(NULL));
		default: usage(stderr); exit(2);
		}
	}
	if (optind < argc)
		x4t_usage_error("unexpected argument '%s'", argv[optind]);
	if (o->name && !*o->name)
		x4t_usage_error("--served-model-name: give a name");
	if (o->key && !*o->key)
		x4t_usage_error("--api-key: give a key (an empty one would let anyone in)");
	if (o->max_body > SIZE_MAX / 2)
		x4t_usage_error("--max-body: at most %zu bytes", SIZE_MAX / 2);
	x4t_device_opts_check(&o->trunk);
}

/* ---- the HTTP side ---- */

enum route { R_NONE, R_HEALTH, R_MODELS, R_METRICS, R_CHAT, R_COMPLETIONS };

struct server {
	serve_worker w;
	const struct opts *o;
	char name[256];
	long long started;
	atomic_bool stopping;
	atomic_int inflight;  /* generation requests whose answer is not sent yet */
};

/* One request on a connection (MHD's con_cls). */
struct conn {
	enum route route;
	char *body;
	size_t n, cap;
	bool too_big, late;
	double t0;
	serve_job *job;
};

static enum route route_of(const char *url)
{
	static const struct { const char *url; enum route r; } routes[] = {
		{ "/health", R_HEALTH }, { "/v1/models", R_MODELS }, { "/metrics", R_METRICS },
		{ "/v1/chat/completions", R_CHAT }, { "/v1/completions", R_COMPLETIONS },
	};
	for (size_t i = 0; i < sizeof routes / sizeof *routes; i++)
		if (!strcmp(url, routes[i].url))
			return routes[i].r;
	return R_NONE;
}

static enum MHD_Result reply(struct server *sv, struct MHD_Connection *c, int status,
			     const char *type, char *body)
{
	serve_worker_count_status(&sv->w, status);
	if (!body)
		return MHD_NO; /* out of memory: drop the connection */
	struct MHD_Response *r = MHD_create_response_from_buffer(strlen(body), body,
								 MHD_RESPMEM_MUST_FREE);
	if (!r) {
		free(body);
		return MHD_NO;
	}
	MHD_add_response_header(r, "Content-Type", type);
	if (status == 401)
		MHD_add_response_header(r, "WWW-Authenticate", "Bearer");
	if (status == 405)
		MHD_add_response_header(r, "Allow", "GET, HEAD, POST");
	if (status == 503)
		MHD_add_response_header(r, "Retry-After", "1");
	enum MHD_Result rc = MHD_queue_response(c, (unsigned)status, r);
	MHD_destroy_response(r);
	return rc;
}

static enum MHD_Result reply_json(struct server *sv, struct MHD_Connection *c, int status,
				  json_t *o)
{
	char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
	json_decref(o);
	return reply(sv, c, status, "application/json", s);
}

static enum MHD_Result reply_error(struct server *sv, struct MHD_Connection *c,
				   const char *method, const char *url, const serve_error *err)
{
	if (!sv->o->quiet)
		x4t_warn("%s %.200s: %d %s", method, url, err->status, err->message);
	return reply(sv, c, err->status, "application/json", serve_error_json(err));
}

/* The peer hung up (a half-close counts: no HTTP client sends one mid-request). */
static bool client_gone(int fd)
{
	if (fd < 0)
		return false;
	struct pollfd p = { .fd = fd, .events = POLLRDHUP };
	return poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR));
}

/* Wait for the job to change (at most 50 ms), watching its client: true
 * (and the job cancelled) when the client is gone. */
static bool job_wait(serve_job *j)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_nsec += 50 * 1000000L;
	if (ts.tv_nsec >= 1000000000L)
		ts.tv_sec++, ts.tv_nsec -= 1000000000L;
	pthread_cond_timedwait(&j->cv, &j->mu, &ts);
	if (j->done || !client_gone(j->client_fd))
		return false;
	atomic_store(&j->cancel, true);
	return true;
}

static ssize_t sse_read(void *cls, uint64_t pos, char *buf, size_t max)
{
	serve_job *j = cls;
	(void)pos;
	pthread_mutex_lock(&j->mu);
	for (;;) {
		if (j->sse_off < j->sse_n) {
			size_t k = j->sse_n - j->sse_off < max ? j->sse_n - j->sse_off : max;
			memcpy(buf, j->sse + j->sse_off, k);
			j->sse_off += k;
			if (j->sse_off == j->sse_n)
				j->sse_off = j->sse_n = 0;
			pthread_mutex_unlock(&j->mu);
			return (ssize_t)k;
		}
		if (j->done) {
			pthread_mutex_unlock(&j->mu);
			return MHD_CONTENT_READER_END_OF_STREAM;
		}
		if (job_wait(j)) {
			pthread_mutex_unlock(&j->mu);
			return MHD_CONTENT_READER_END_WITH_ERROR;
		}
	}
}

static void sse_free(void *cls) { serve_job_unref(cls); }

static enum MHD_Result completion(struct server *sv, struct MHD_Connection *c, struct conn *q,
				  const char *method, const char *url)
{
	serve_error err;
	serve_job *j = serve_parse_request(&sv->w, q->route == R_CHAT ? SERVE_CHAT : SERVE_COMPLETION,
					   q->body ? q->body : "", q->n, sv->name, &err);
	if (!j)
		return reply_error(sv, c, method, url, &err);
	const union MHD_ConnectionInfo *ci =
		MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
	j->client_fd = ci ? ci->connect_fd : -1;
	if (!serve_worker_submit(&sv->w, j, &err)) {
		serve_job_unref(j);
		return reply_error(sv, c, method, url, &err);
	}
	q->job = j;
	atomic_fetch_add(&sv->inflight, 1);
	if (j->stream) {
		serve_job_ref(j);
		struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384,
									    sse_read, j, sse_free);
		if (!r) {
			serve_job_unref(j);
			return MHD_NO;
		}
		MHD_add_response_header(r, "Content-Type", "text/event-stream");
		MHD_add_response_header(r, "Cache-Control", "no-cache");
		serve_worker_count_status(&sv->w, 200);
		enum MHD_Result rc = MHD_queue_response(c, 200, r);
		MHD_destroy_response(r);
		return rc;
	}
	pthread_mutex_lock(&j->mu);
	while (!j->done)
		job_wait(j);
	pthread_mutex_unlock(&j->mu);
	if (client_gone(j->client_fd))
		return MHD_NO;
	if (j->finish == SERVE_FIN_ERROR) {
		serve_error_set(&err, 500, "server_error", NULL, NULL, "%s", j->error);
		return reply_error(sv, c, method, url, &err);
	}
	if (j->finish == SERVE_FIN_CANCEL) {
		serve_error_set(&err, 503, "server_error", "shutting_down", NULL,
				"the server stopped before the request finished");
		return reply_error(sv, c, method, url, &err);
	}
	return reply_json(sv, c, 200, serve_response(j, sv->name));
}

static enum MHD_Result get(struct server *sv, struct MHD_Connection *c, enum route r)
{
	if (r == R_METRICS)
		return reply(sv, c, 200, "text/plain; version=0.0.4; charset=utf-8",
			     serve_metrics_text(&sv->w));
	if (r == R_HEALTH)
		return reply_json(sv, c, atomic_load(&sv->stopping) ? 503 : 200,
				  json_pack("{s:s}", "status",
					    atomic_load(&sv->stopping) ? "stopping" : "ok"));
	return reply_json(sv, c, 200, json_pack("{s:s, s:[{s:s, s:s, s:I, s:s, s:i}]}", "object",
						"list", "data", "id", sv->name, "object", "model",
						"created", (json_int_t)sv->started, "owned_by", "x4",
						"max_model_len", serve_worker_ctx(&sv->w)));
}

/* The key, compared in time that does not depend on where it differs. */
static bool key_ok(const char *want, const char *auth)
{
	if (!auth || strncasecmp(auth, "Bearer ", 7))
		return false;
	const char *got = auth + 7;
	size_t nw = strlen(want), ng = strlen(got);
	unsigned char diff = nw != ng;
	for (size_t i = 0; i < nw; i++)
		diff |= (unsigned char)(want[i] ^ (i < ng ? got[i] : 0));
	return !diff;
}

/* What can be refused from the headers alone (0: nothing). */
static int refuse_early(struct server *sv, struct MHD_Connection *c, struct conn *q,
			const char *url, const char *method, serve_error *err)
{
	bool is_get = !strcmp(method, "GET") || !strcmp(method, "HEAD");
	bool is_post = !strcmp(method, "POST");
	if (q->route == R_NONE)
		serve_error_set(err, 404, "invalid_request_error", "not_found", NULL,
				"no such endpoint: %.200s", url);
	else if ((q->route <= R_METRICS && !is_get) || (q->route >= R_CHAT && !is_post))
		serve_error_set(err, 405, "invalid_request_error", "method_not_allowed", NULL,
				"%.20s is not allowed on %s: use %s", method, url,
				q->route <= R_METRICS ? "GET" : "POST");
	else if (sv->o->key && !strncmp(url, "/v1/", 4) &&
		 !key_ok(sv->o->key, MHD_lookup_connection_value(c, MHD_HEADER_KIND,
								 "Authorization")))
		serve_error_set(err, 401, "authentication_error", "invalid_api_key", NULL,
				"a missing or wrong API key: send 'Authorization: Bearer KEY'");
	else
		err->status = 0;
	if (err->status || !is_post)
		return err->status;
	const char *ct = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Type");
	size_t ctn = ct ? strcspn(ct, "; \t") : 0;
	const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
	if (!ct || ctn != 16 || strncasecmp(ct, "application/json", 16))
		serve_error_set(err, 415, "invalid_request_error", "unsupported_media_type", NULL,
				"the body must be application/json, not %.100s",
				ct ? ct : "(no Content-Type)");
	else if (cl && strtoull(cl, NULL, 10) > sv->o->max_body)
		serve_error_set(err, 413, "invalid_request_error", "request_too_large", NULL,
				"the body is %.30s bytes: at most %llu (--max-body)", cl,
				(unsigned long long)sv->o->max_body);
	else if (atomic_load(&sv->stopping))
		serve_error_set(err, 503, "server_error", "shutting_down", NULL,
				"the server is shutting down");
	return err->status;
}

static enum MHD_Result handle(void *cls, struct MHD_Connection *c, const char *url,
			      const char *method, const char *version, const char *data,
			      size_t *data_size, void **con_cls)
{
	struct server *sv = cls;
	struct conn *q = *con_cls;
	serve_error err;
	(void)version;
	if (!q) {
		if (!(q = calloc(1, sizeof *q)))
			return MHD_NO;
		*con_cls = q;
		q->t0 = x4_now();
		q->route = route_of(url);
		if (refuse_early(sv, c, q, url, method, &err))
			return reply_error(sv, c, method, url, &err);
		return MHD_YES;
	}
	if (*data_size) {
		/* A body that takes longer than --timeout is a slow client: 408 when
		 * it ends (libmicrohttpd cannot answer in the middle of a body), and
		 * the connection closed if it is still coming at twice the time. */
		double t = x4_now() - q->t0;
		if (t > 2.0 * (double)sv->o->timeout)
			return MHD_NO;
		if (t > (double)sv->o->timeout)
			q->late = true;
		if (q->n + *data_size > sv->o->max_body)
			q->too_big = true;
		if (!q->too_big && !q->late) {
			size_t need = q->n + *data_size + 1;
			if (need > q->cap) {
				size_t cap = need > 2 * q->cap ? need : 2 * q->cap;
				char *p = realloc(q->body, cap);
				if (!p)
					return MHD_NO;
				q->body = p;
				q->cap = cap;
			}
			memcpy(q->body + q->n, data, *data_size);
			q->n += *data_size;
		}
		*data_size = 0;
		return MHD_YES;
	}
	if (q->too_big)
		serve_error_set(&err, 413, "invalid_request_error", "request_too_large", NULL,
				"the body is over %llu bytes (--max-body)",
				(unsigned long long)sv->o->max_body);
	else if (q->late)
		serve_error_set(&err, 408, "invalid_request_error", "request_timeout", NULL,
				"the body took over %ld s to arrive (--timeout)", sv->o->timeout);
	else
		err.status = 0;
	if (err.status)
		return reply_error(sv, c, method, url, &err);
	if (q->route <= R_METRICS)
		return get(sv, c, q->route);
	return completion(sv, c, q, method, url);
}

static void completed(void *cls, struct MHD_Connection *c, void **con_cls,
		      enum MHD_RequestTerminationCode toe)
{
	struct server *sv = cls;
	struct conn *q = *con_cls;
	(void)c;
	if (!q)
		return;
	if (q->job) {
		if (toe != MHD_REQUEST_TERMINATED_COMPLETED_OK)
			atomic_store(&q->job->cancel, true);
		serve_job_unref(q->job);
		atomic_fetch_sub(&sv->inflight, 1);
	}
	free(q->body);
	free(q);
	*con_cls = NULL;
}

/* ---- the daemon ---- */

static struct MHD_Daemon *listen_on(struct server *sv, const struct opts *o, int *port)
{
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
				  .ai_flags = AI_PASSIVE | AI_NUMERICSERV }, *ai = NULL;
	char ps[8];
	snprintf(ps, sizeof ps, "%ld", o->port);
	int gai = getaddrinfo(o->host, ps, &hints, &ai);
	if (gai) {
		x4t_warn("--host %s: %s", o->host, gai_strerror(gai));
		return NULL;
	}
	unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION |
			 MHD_USE_ITC | (ai->ai_family == AF_INET6 ? MHD_USE_IPv6 : 0);
	/* connections beyond the queue's are refused at accept: each holds a thread */
	unsigned limit = (unsigned)(o->max_queue * 2 + 16);
	struct MHD_Daemon *d = MHD_start_daemon(
		flags, (uint16_t)o->port, NULL, NULL, handle, sv,
		MHD_OPTION_SOCK_ADDR, ai->ai_addr,
		MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)o->timeout,
		MHD_OPTION_CONNECTION_LIMIT, limit,
		MHD_OPTION_NOTIFY_COMPLETED, completed, sv,
		MHD_OPTION_END);
	freeaddrinfo(ai);
	if (!d) {
		x4t_warn("cannot listen on %s port %ld: %s", o->host, o->port,
			 errno ? strerror(errno) : "libmicrohttpd refused the options");
		return NULL;
	}
	const union MHD_DaemonInfo *di = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
	*port = di ? di->port : (int)o->port;
	return d;
}

/* The .gguf's file name without .gguf. */
static void default_name(const char *gguf, char *out, size_t cap)
{
	const char *base = strrchr(gguf, '/');
	base = base ? base + 1 : gguf;
	size_t n = strlen(base);
	if (n > 5 && !strcmp(base + n - 5, ".gguf"))
		n -= 5;
	snprintf(out, cap, "%.*s", (int)n, base);
}

int main(int argc, char **argv)
{
	x4t_prog = "x4-serve";
	struct opts o;
	parse_args(argc, argv, &o);
	char defmodel[4096];
	if (!o.model) {
		x4t_default_model(defmodel, sizeof defmodel);
		o.model = defmodel;
	}
	/* Every thread started from here on has the stop signals blocked: only
	 * main takes them, in sigsuspend below. */
	x4t_catch_stop_signals();
	signal(SIGPIPE, SIG_IGN);
	sigset_t stops, old;
	sigemptyset(&stops);
	sigaddset(&stops, SIGINT);
	sigaddset(&stops, SIGTERM);
	sigaddset(&stops, SIGHUP);
	pthread_sigmask(SIG_BLOCK, &stops, &old);

	static struct server sv;
	sv.o = &o;
	sv.started = (long long)time(NULL);
	sv.w.max_queue = (int)o.max_queue;
	sv.w.quiet = o.quiet;
	sv.w.opts = o.trunk;
	x4_paths paths;
	x4_err e = {0};
	if (x4_paths_resolve(o.model, o.tokdir, &paths, &e))
		x4t_die("%s%s", e.msg, x4t_default_model_hint(o.model, defmodel));
	if (serve_worker_start(&sv.w, &paths, o.prefix)) {
		serve_worker_stop(&sv.w);
		return 1;
	}
	if (o.name)
		snprintf(sv.name, sizeof sv.name, "%s", o.name);
	else
		default_name(paths.gguf, sv.name, sizeof sv.name);
	serve_model_name = sv.name;
	int port = 0;
	struct MHD_Daemon *d = listen_on(&sv, &o, &port);
	if (!d) {
		serve_worker_stop(&sv.w);
		return 1;
	}
	const x4_trunk_stats *ts = &sv.w.m.trunk;
	char dev[32];
	x4t_warn("model %s (fingerprint %s) as '%s' on %s, %d positions, prefix store %llu bytes",
		 paths.gguf, x4_model_fingerprint(x4_session_model(sv.w.session)), sv.name,
		 x4t_device_name(o.trunk.device, dev, sizeof dev), ts->max_ctx,
		 (unsigned long long)o.prefix);
	x4t_warn("listening on http://%s%s%s:%d", strchr(o.host, ':') ? "[" : "", o.host,
		 strchr(o.host, ':') ? "]" : "", port);

	sigset_t wait = old;
	sigdelset(&wait, SIGINT);
	sigdelset(&wait, SIGTERM);
	sigdelset(&wait, SIGHUP);
	while (!x4t_stop_signal)
		sigsuspend(&wait);
	x4t_warn("signal %d: stopping (the running request is cancelled)", (int)x4t_stop_signal);
	atomic_store(&sv.stopping, true);
	MHD_quiesce_daemon(d);
	serve_worker_stop(&sv.w); /* every job done: their connections answer */
	/* Let the answers go out (a stream's last events, a 503) before the
	 * daemon closes every connection; a client that does not read them has
	 * --timeout. */
	for (long i = 0; i < o.timeout * 100 && atomic_load(&sv.inflight) > 0; i++)
		nanosleep(&(struct timespec){ 0, 10 * 1000000L }, NULL);
	MHD_stop_daemon(d);
	return 0;
}
