/*
 * serve_api.c - the OpenAI API's objects for x4-serve: a completion
 * request's body, checked field by field into a job (the prompt tokenized
 * and measured against the context before it is queued, so that a refusal
 * costs no place in the queue), and the responses: the whole object, the
 * streamed chunks, the error object.  Statuses: 400 for a body that is not
 * a JSON object or lacks a required field, and for a prompt (or prompt and
 * max_tokens) that does not fit the context; 422 for a field of the wrong
 * type or out of its range; 404 for another model's name.
 */
#include "serve.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

const char *serve_model_name = "x4";

void serve_error_set(serve_error *err, int status, const char *type, const char *code,
		     const char *param, const char *fmt, ...)
{
	err->status = status;
	err->type = type;
	err->code = code;
	snprintf(err->param, sizeof err->param, "%s", param ? param : "");
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(err->message, sizeof err->message, fmt, ap);
	va_end(ap);
}

char *serve_error_json(const serve_error *err)
{
	json_t *o = json_pack("{s:{s:s, s:s, s:o, s:o}}", "error", "message", err->message,
			      "type", err->type, "param",
			      err->param[0] ? json_string(err->param) : json_null(), "code",
			      err->code ? json_string(err->code) : json_null());
	char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
	json_decref(o);
	return s;
}

json_t *serve_json_text(const char *s, size_t n)
{
	json_t *v = json_stringn(s, n);
	if (v)
		return v;
	/* invalid UTF-8 (never from the detokenizer, which replaces it): U+FFFD a bad byte */
	char *buf = malloc(n * 3 + 1);
	if (!buf)
		return NULL;
	size_t k = 0;
	for (size_t i = 0; i < n;) {
		int len = x4t_utf8_len((const unsigned char *)s + i, n - i);
		if (len && s[i]) {
			memcpy(buf + k, s + i, (size_t)len);
			k += (size_t)len;
			i += (size_t)len;
		} else {
			memcpy(buf + k, "\xef\xbf\xbd", 3);
			k += 3;
			i++;
		}
	}
	v = json_stringn(buf, k);
	free(buf);
	return v;
}

/* A finite number, else null (JSON has no NaN). */
static json_t *num(double x) { return isfinite(x) ? json_real(x) : json_null(); }

/* ---- the request ---- */

enum { FIELD_ABSENT, FIELD_NULL, FIELD_OK, FIELD_BAD };

/* The field key of o: absent, null, or of JSON type t (a number for
 * JSON_REAL, an integer for JSON_INTEGER); FIELD_BAD fills err with a 422. */
static int field(json_t *o, const char *key, json_type t, json_t **v, serve_error *err)
{
	*v = json_object_get(o, key);
	if (!*v)
		return FIELD_ABSENT;
	if (json_is_null(*v))
		return FIELD_NULL;
	bool ok = t == JSON_REAL ? json_is_number(*v) : t == JSON_TRUE ? json_is_boolean(*v)
		: json_typeof(*v) == t;
	if (ok)
		return FIELD_OK;
	static const char *const names[] = { "an object", "an array", "a string", "an integer",
					     "a number", "a boolean", "a boolean", "null" };
	serve_error_set(err, 422, "invalid_request_error", "invalid_type", key, "'%s' must be %s",
			key, names[t]);
	return FIELD_BAD;
}

static bool get_bool(json_t *o, const char *key, bool *out, serve_error *err)
{
	json_t *v;
	int f = field(o, key, JSON_TRUE, &v, err);
	if (f == FIELD_OK)
		*out = json_is_true(v);
	return f != FIELD_BAD;
}

static bool get_real(json_t *o, const char *key, double lo, double hi, bool lo_open, float *out,
		     serve_error *err)
{
	json_t *v;
	int f = field(o, key, JSON_REAL, &v, err);
	if (f != FIELD_OK)
		return f != FIELD_BAD;
	double x = json_number_value(v);
	if (!(x >= lo && x <= hi) || (lo_open && x == lo)) {
		serve_error_set(err, 422, "invalid_request_error", "out_of_range", key,
				"'%s' is %g: it must be in %c%g, %g]", key, x, lo_open ? '(' : '[',
				lo, hi);
		return false;
	}
	*out = (float)x;
	return true;
}

static bool get_int(json_t *o, const char *key, json_int_t lo, json_int_t hi, json_int_t *out,
		    bool *given, serve_error *err)
{
	json_t *v;
	int f = field(o, key, JSON_INTEGER, &v, err);
	if (f != FIELD_OK)
		return f != FIELD_BAD;
	json_int_t x = json_integer_value(v);
	if (x < lo || x > hi) {
		serve_error_set(err, 422, "invalid_request_error", "out_of_range", key,
				"'%s' is %lld: it must be in [%lld, %lld]", key, (long long)x,
				(long long)lo, (long long)hi);
		return false;
	}
	*out = x;
	if (given)
		*given = true;
	return true;
}

static bool parse_stop(json_t *o, serve_job *j, serve_error *err)
{
	json_t *v = json_object_get(o, "stop");
	if (!v || json_is_null(v))
		return true;
	size_t n = json_is_array(v) ? json_array_size(v) : 1;
	if (!json_is_string(v) && !json_is_array(v)) {
		serve_error_set(err, 422, "invalid_request_error", "invalid_type", "stop",
				"'stop' must be a string or an array of strings");
		return false;
	}
	if (n > SERVE_MAX_STOP) {
		serve_error_set(err, 422, "invalid_request_error", "out_of_range", "stop",
				"'stop' holds %zu strings: at most %d", n, SERVE_MAX_STOP);
		return false;
	}
	for (size_t i = 0; i < n; i++) {
		json_t *s = json_is_array(v) ? json_array_get(v, i) : v;
		if (!json_is_string(s) || !json_string_length(s)) {
			serve_error_set(err, 422, "invalid_request_error", "invalid_type", "stop",
					"'stop' strings must be strings of at least one character");
			return false;
		}
		if (!(j->stop[j->n_stop] = strdup(json_string_value(s)))) {
			serve_error_set(err, 500, "server_error", NULL, NULL, "out of memory");
			return false;
		}
		j->n_stop++;
	}
	return true;
}

/* A message's content: a string, or an array of {"type":"text","text":...}
 * parts, joined, into *out (malloc'd).  false with err filled. */
static bool content_text(json_t *c, char **out, serve_error *err)
{
	size_t len = 1, i;
	json_t *part;
	if (json_is_array(c))
		json_array_foreach(c, i, part) {
			json_t *type = json_object_get(part, "type"), *text = json_object_get(part, "text");
			if (!json_is_string(type) || strcmp(json_string_value(type), "text") ||
			    !json_is_string(text))
				goto bad;
			len += json_string_length(text);
		}
	else if (json_is_string(c))
		len += json_string_length(c);
	else if (c && !json_is_null(c))
		goto bad;
	char *s = malloc(len);
	if (!s) {
		serve_error_set(err, 500, "server_error", NULL, NULL, "out of memory");
		return false;
	}
	size_t k = 0;
	if (json_is_string(c)) {
		memcpy(s, json_string_value(c), json_string_length(c));
		k = json_string_length(c);
	} else if (json_is_array(c))
		json_array_foreach(c, i, part) {
			json_t *text = json_object_get(part, "text");
			memcpy(s + k, json_string_value(text), json_string_length(text));
			k += json_string_length(text);
		}
	s[k] = 0;
	*out = s;
	return true;
bad:
	serve_error_set(err, 422, "invalid_request_error", "invalid_type", "messages",
			"a message's content must be a string or an array of text parts");
	return false;
}

static bool chat_prompt(json_t *root, const x4_tokenizer *tok, serve_job *j, serve_error *err)
{
	json_t *msgs = json_object_get(root, "messages");
	if (!msgs) {
		serve_error_set(err, 400, "invalid_request_error", "missing_field", "messages",
				"'messages' is required");
		return false;
	}
	if (!json_is_array(msgs) || !json_array_size(msgs)) {
		serve_error_set(err, 422, "invalid_request_error", "invalid_type", "messages",
				"'messages' must be a non-empty array of messages");
		return false;
	}
	size_t n = json_array_size(msgs);
	if (n > 65536) {
		serve_error_set(err, 422, "invalid_request_error", "out_of_range", "messages",
				"%zu messages: at most 65536", n);
		return false;
	}
	x4_chat_msg *m = calloc(n, sizeof *m);
	char **text = calloc(n, sizeof *text);
	bool ok = m && text;
	if (!ok)
		serve_error_set(err, 500, "server_error", NULL, NULL, "out of memory");
	for (size_t i = 0; ok && i < n; i++) {
		json_t *msg = json_array_get(msgs, i), *role = json_object_get(msg, "role");
		if (!json_is_object(msg) || !json_is_string(role)) {
			serve_error_set(err, 422, "invalid_request_error", "invalid_type", "messages",
					"message %zu must be an object with a string 'role'", i);
			ok = false;
			break;
		}
		m[i].role = json_string_value(role);
		if (!strcmp(m[i].role, "developer")) /* the API's newer name for system */
			m[i].role = "system";
		if (!(ok = content_text(json_object_get(msg, "content"), &text[i], err)))
			break;
		m[i].content = text[i];
	}
	x4_err e = {0};
	if (ok && x4_chat_tokenize(tok, m, (int)n, true, &j->ids, &j->n_ids, &e)) {
		serve_error_set(err, e.code == X4_ENOMEM ? 500 : 422,
				e.code == X4_ENOMEM ? "server_error" : "invalid_request_error",
				e.code == X4_ENOMEM ? NULL : "invalid_value", "messages", "%s", e.msg);
		ok = false;
	}
	for (size_t i = 0; text && i < n; i++)
		free(text[i]);
	free(text);
	free(m);
	return ok;
}

/* prompt: a string, an array of one string, an array of token ids, or an
 * array of one array of ids. */
static bool completion_prompt(json_t *root, const x4_tokenizer *tok, serve_job *j,
			      serve_error *err)
{
	json_t *p = json_object_get(root, "prompt");
	if (!p) {
		serve_error_set(err, 400, "invalid_request_error", "missing_field", "prompt",
				"'prompt' is required");
		return false;
	}
	if (json_is_array(p) && json_array_size(p) == 1 &&
	    (json_is_string(json_array_get(p, 0)) || json_is_array(json_array_get(p, 0))))
		p = json_array_get(p, 0);
	x4_err e = {0};
	if (json_is_string(p)) {
		if (x4_tokenize(tok, json_string_value(p), json_string_length(p), 0, &j->ids,
				&j->n_ids, &e)) {
			serve_error_set(err, 500, "server_error", NULL, "prompt", "%s", e.msg);
			return false;
		}
		return true;
	}
	bool ok = json_is_array(p);
	size_t n = ok ? json_array_size(p) : 0;
	int nv = x4_tokenizer_n_vocab(tok);
	for (size_t i = 0; ok && i < n; i++) {
		json_t *v = json_array_get(p, i);
		ok = json_is_integer(v) && json_integer_value(v) >= 0 && json_integer_value(v) < nv;
	}
	if (!ok) {
		serve_error_set(err, 422, "invalid_request_error", "invalid_value", "prompt",
				"'prompt' must be a string, or one array of token ids in [0, %d): one "
				"prompt a request", nv);
		return false;
	}
	j->ids = malloc((n ? n : 1) * sizeof *j->ids);
	if (!j->ids) {
		serve_error_set(err, 500, "server_error", NULL, NULL, "out of memory");
		return false;
	}
	for (size_t i = 0; i < n; i++)
		j->ids[i] = (int32_t)json_integer_value(json_array_get(p, i));
	j->n_ids = n;
	return true;
}

/* What x4 does not do: more than one choice, echo, log-probabilities. */
static bool unsupported(json_t *root, serve_error *err)
{
	json_int_t n = 1;
	if (!get_int(root, "n", 1, 1, &n, NULL, err))
		return false;
	static const char *const keys[] = { "echo", "logprobs", "suffix", "tools" };
	for (size_t i = 0; i < sizeof keys / sizeof *keys; i++) {
		json_t *v = json_object_get(root, keys[i]);
		if (v && !json_is_null(v) && !json_is_false(v)) {
			serve_error_set(err, 422, "invalid_request_error", "unsupported", keys[i],
					"'%s' is not supported by x4-serve", keys[i]);
			return false;
		}
	}
	return true;
}

static bool sampling(json_t *root, serve_job *j, serve_error *err)
{
	j->sampler.temperature = 1.0f; /* the API's default */
	j->sampler.top_p = 1.0f;
	json_int_t top_k = 0, seed = 0, maxt = 0;
	bool seed_given = false, max_given = false;
	json_t *so;
	if (!get_real(root, "temperature", 0, 2, false, &j->sampler.temperature, err) ||
	    !get_real(root, "top_p", 0, 1, true, &j->sampler.top_p, err) ||
	    !get_int(root, "top_k", -1, INT32_MAX, &top_k, NULL, err) ||
	    !get_int(root, "seed", INT64_MIN, INT64_MAX, &seed, &seed_given, err) ||
	    !get_bool(root, "stream", &j->stream, err) ||
	    !get_bool(root, "ignore_eos", &j->ignore_eos, err) ||
	    !get_int(root, "max_tokens", 1, INT32_MAX, &maxt, &max_given, err) ||
	    (j->kind == SERVE_CHAT &&
	     !get_int(root, "max_completion_tokens", 1, INT32_MAX, &maxt, &max_given, err)) ||
	    field(root, "stream_options", JSON_OBJECT, &so, err) == FIELD_BAD ||
	    (so && json_is_object(so) && !get_bool(so, "include_usage", &j->include_usage, err)) ||
	    !parse_stop(root, j, err))
		return false;
	j->sampler.top_k = top_k < 0 ? 0 : (int)top_k;
	/* without a seed, the clock's as x4-run takes it, and the job's address so
	 * that two requests parsed at once differ */
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	j->sampler.seed = seed_given ? (uint64_t)seed
				     : (uint64_t)ts.tv_sec * 1000000007ull + (uint64_t)ts.tv_nsec +
				       (uint64_t)(uintptr_t)j;
	j->max_tokens = max_given ? (long)maxt : 0;
	return true;
}

serve_job *serve_parse_request(serve_worker *w, int kind, const char *body, size_t n,
			       const char *model_name, serve_error *err)
{
	json_error_t je;
	json_t *root = json_loadb(body, n, 0, &je);
	if (!root) {
		serve_error_set(err, 400, "invalid_request_error", "invalid_json", NULL,
				"the body is not JSON: %s (line %d, column %d)", je.text, je.line,
				je.column);
		return NULL;
	}
	serve_job *j = NULL;
	if (!json_is_object(root)) {
		serve_error_set(err, 400, "invalid_request_error", "invalid_json", NULL,
				"the body must be a JSON object");
		goto fail;
	}
	json_t *model;
	if (field(root, "model", JSON_STRING, &model, err) == FIELD_BAD)
		goto fail;
	if (model && json_is_string(model) && strcmp(json_string_value(model), model_name)) {
		serve_error_set(err, 404, "invalid_request_error", "model_not_found", "model",
				"the model '%.200s' does not exist: this server serves '%s'",
				json_string_value(model), model_name);
		goto fail;
	}
	if (!(j = serve_job_new())) {
		serve_error_set(err, 500, "server_error", NULL, NULL, "out of memory");
		goto fail;
	}
	j->kind = kind;
	unsigned long long id = atomic_fetch_add(&w->next_id, 1) + 1;
	j->created = (long long)time(NULL);
	snprintf(j->id, sizeof j->id, "%s-%llu", kind == SERVE_CHAT ? "chatcmpl" : "cmpl", id);
	if (!unsupported(root, err) || !sampling(root, j, err))
		goto fail;
	const x4_tokenizer *tok = x4_model_tokenizer(serve_worker_model(w));
	if (!(kind == SERVE_CHAT ? chat_prompt(root, tok, j, err)
				 : completion_prompt(root, tok, j, err)))
		goto fail;
	int ctx = serve_worker_ctx(w);
	if (!j->n_ids) {
		serve_error_set(err, 422, "invalid_request_error", "invalid_value",
				kind == SERVE_CHAT ? "messages" : "prompt", "the prompt is empty");
		goto fail;
	}
	if (j->n_ids >= (size_t)ctx) {
		serve_error_set(err, 400, "invalid_request_error", "context_length_exceeded",
				kind == SERVE_CHAT ? "messages" : "prompt",
				"the prompt is %zu tokens and the context holds %d positions "
				"(--max-model-len), with one at least for the answer", j->n_ids, ctx);
		goto fail;
	}
	long room = ctx - (long)j->n_ids;
	if (!j->max_tokens)
		j->max_tokens = room;
	else if (j->max_tokens > room) {
		serve_error_set(err, 400, "invalid_request_error", "context_length_exceeded",
				"max_tokens", "the context holds %d positions: the prompt's %zu "
				"tokens leave room for %ld, and max_tokens is %ld", ctx, j->n_ids, room,
				j->max_tokens);
		goto fail;
	}
	json_decref(root);
	return j;
fail:
	serve_job_unref(j);
	json_decref(root);
	return NULL;
}

/* ---- the responses ---- */

static json_t *usage(const serve_job *j)
{
	return json_pack("{s:I, s:I, s:I}", "prompt_tokens", (json_int_t)j->n_ids,
			 "completion_tokens", (json_int_t)j->n_gen, "total_tokens",
			 (json_int_t)(j->n_ids + j->n_gen));
}

json_t *serve_response(const serve_job *j, const char *model_name)
{
	json_t *text = serve_json_text(j->text ? j->text : "", j->text_n);
	json_t *choice = j->kind == SERVE_CHAT
		? json_pack("{s:i, s:{s:s, s:o}, s:n, s:s}", "index", 0, "message", "role",
			    "assistant", "content", text, "logprobs", "finish_reason",
			    serve_finish_name(j->finish))
		: json_pack("{s:i, s:o, s:n, s:s}", "index", 0, "text", text, "logprobs",
			    "finish_reason", serve_finish_name(j->finish));
	json_t *ids = json_array();
	for (size_t i = 0; ids && i < j->n_gen; i++)
		json_array_append_new(ids, json_integer(j->gen[i]));
	/* x4's own: the generated ids (those a stop string was cut from included),
	 * the prompt positions the prefix store restored, the rates */
	json_t *x4 = json_pack("{s:o, s:I, s:o, s:o}", "token_ids", ids, "reused_tokens",
			       (json_int_t)j->n_reused, "prefill_tok_s", num(j->prefill_tok_s),
			       "decode_tok_s", num(j->decode_tok_s));
	return json_pack("{s:s, s:s, s:I, s:s, s:[o], s:o, s:o}", "id", j->id, "object",
			 j->kind == SERVE_CHAT ? "chat.completion" : "text_completion", "created",
			 (json_int_t)j->created, "model", model_name, "choices", choice, "usage",
			 usage(j), "x4", x4);
}

/* One chunk object around choice (NULL: the usage chunk, no choices). */
static bool sse_chunk(serve_job *j, const char *model_name, json_t *choice, bool with_usage)
{
	json_t *o = json_pack("{s:s, s:s, s:I, s:s, s:o}", "id", j->id, "object",
			      j->kind == SERVE_CHAT ? "chat.completion.chunk" : "text_completion",
			      "created", (json_int_t)j->created, "model", model_name, "choices",
			      choice ? json_pack("[o]", choice) : json_array());
	if (o && j->include_usage)
		json_object_set_new(o, "usage", with_usage ? usage(j) : json_null());
	char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
	json_decref(o);
	bool ok = s && serve_job_sse_add(j, "data: ", 6) && serve_job_sse_add(j, s, strlen(s)) &&
		  serve_job_sse_add(j, "\n\n", 2);
	free(s);
	return ok;
}

bool serve_sse_delta(serve_job *j, const char *model_name, const char *delta, size_t n,
		     bool role)
{
	json_t *text = serve_json_text(delta, n), *choice;
	if (j->kind == SERVE_CHAT)
		choice = role ? json_pack("{s:i, s:{s:s, s:o}, s:n, s:n}", "index", 0, "delta", "role",
					  "assistant", "content", text, "logprobs", "finish_reason")
			      : json_pack("{s:i, s:{s:o}, s:n, s:n}", "index", 0, "delta", "content",
					  text, "logprobs", "finish_reason");
	else
		choice = json_pack("{s:i, s:o, s:n, s:n}", "index", 0, "text", text, "logprobs",
				   "finish_reason");
	return choice && sse_chunk(j, model_name, choice, false);
}

bool serve_sse_finish(serve_job *j, const char *model_name)
{
	bool ok;
	if (j->finish == SERVE_FIN_ERROR) {
		serve_error err;
		serve_error_set(&err, 500, "server_error", NULL, NULL, "%s", j->error);
		char *s = serve_error_json(&err);
		ok = s && serve_job_sse_add(j, "data: ", 6) && serve_job_sse_add(j, s, strlen(s)) &&
		     serve_job_sse_add(j, "\n\n", 2);
		free(s);
	} else {
		const char *fin = serve_finish_name(j->finish);
		json_t *choice = j->kind == SERVE_CHAT
			? json_pack("{s:i, s:{}, s:n, s:s}", "index", 0, "delta", "logprobs",
				    "finish_reason", fin)
			: json_pack("{s:i, s:s, s:n, s:s}", "index", 0, "text", "", "logprobs",
				    "finish_reason", fin);
		ok = choice && sse_chunk(j, model_name, choice, false) &&
		     (!j->include_usage || sse_chunk(j, model_name, NULL, true));
	}
	return ok && serve_job_sse_add(j, "data: [DONE]\n\n", 14);
}
