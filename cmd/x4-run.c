/*
 * x4-run - generate text from a xing4_0 checkpoint: a thin tool over the
 * library's generation session (lib/run/session.c).
 *
 * Tokens stream to stdout as they are produced; the statistics go to
 * stderr so that stdout is the text and nothing else.  The first decode
 * step is reported apart from the steady rate: after a prefill it is not a
 * steady-state step (docs/measuring.md), and an average over both misreads
 * the rate.  SIGINT, SIGTERM and SIGHUP are honoured at the next token (in
 * the prefill, the next chunk), never inside a forward, so what was printed
 * is exactly what was generated; a second one ends the process at once.
 */
#include "tool.h"

#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define DEFAULT_PROMPT "Once upon a time"

static void usage(FILE *f)
{
	fprintf(f,
"usage: x4-run [-m PATH] [--tokenizer DIR] [-p TEXT | -f FILE | --tokens IDS]\n"
"              [--chat [--system TEXT]] [-n N] [--temperature T] [--top-k K]\n"
"              [--top-p P] [-s SEED] [--ignore-eos] [--device cpu|cuda:N]\n"
"              [--threads N] [--max-model-len N] [--resid f32|f16|bf16]\n"
"              [--prec f32|f64] [--kv-cache f16|exact] [--hc fused|eager]\n"
"              [--gpu-memory SIZE] [--sublayer f32|bf16|f16] [--graph on|off]\n"
"              [--prefill-chunk N] [--pdl on|off] [--attn auto|fp32|mma]\n"
"              [--gemm mma|fma] [--copy block|warp]\n"
"              [--dump-logits FILE.npy] [--tokenize] [--json]\n"
"Generate text from a xing4_0 checkpoint; statistics go to stderr.\n"
"  -m, --model PATH        a .gguf or a folder holding one (default: the tiny\n"
"                          preset beside this binary, ../build/models/tiny, or\n"
"                          ../share/x4/models/tiny when installed)\n"
"      --tokenizer DIR     the release's tokenizer folder (default: beside the\n"
"                          .gguf); its config.json and tokenizer.model are checked\n"
"                          against the checkpoint, whose own vocabulary tokenizes\n"
"  -p, --prompt TEXT       the prompt (else -f, else stdin if not a terminal,\n"
"                          else \"" DEFAULT_PROMPT "\")\n"
"  -f, --file FILE         read the prompt from FILE ('-' = stdin); one trailing\n"
"                          newline of a file or stdin is not part of the prompt\n"
"      --tokens IDS        feed raw token ids, comma separated (e.g. 1,5,9)\n"
"      --chat              render the prompt as one user turn of the chat template\n"
"      --system TEXT       a system message (with --chat)\n"
"      --bos               prepend bos to a raw completion prompt\n"
"      --special           match special tokens spelled in the prompt text\n"
"  -n, --tokens-max N      generate at most N tokens (default 64)\n"
"%s"
"  -s, --seed N            sampler seed (default: from the clock, printed)\n"
"      --ignore-eos        do not stop at <_end>\n"
"%s%s"
"      --dump-logits FILE  write the logits of every position as float32 .npy\n"
"                          (a regular file; a symbolic link is followed)\n"
"      --tokenize          print the prompt's token ids and exit\n"
"      --json              print text and statistics as one JSON object\n"
"  -h, --help              this help\n"
"      --version           version, commit and CUDA runtime\n"
"Exit status: 0 done, 1 failure, 2 usage, 128+N stopped by signal N (130 for\n"
"SIGINT) at a token or prefill-chunk boundary.\n", x4t_sampler_help, x4t_load_help,
		x4t_trunk_help);
}

struct opts {
	const char *model, *tokdir, *prompt, *file, *system, *tokens, *dump;
	bool chat, bos, special, ignore_eos, tokenize, json, seed_given;
	long n_max;
	x4_sampler_opts samp;
	x4_trunk_opts trunk;
};

static void parse_args(int argc, char **argv, struct opts *o)
{
	enum { O_TOK = 256, O_CHAT, O_SYSTEM, O_BOS, O_SPECIAL, O_IGNORE_EOS, O_TOKENS,
	       O_TOKENIZE, O_DUMP, O_JSON, O_VERSION };
	static const struct option lo[] = {
		{"model", required_argument, 0, 'm'},
		{"tokenizer", required_argument, 0, O_TOK},
		{"prompt", required_argument, 0, 'p'},
		{"file", required_argument, 0, 'f'},
		{"chat", no_argument, 0, O_CHAT},
		{"system", required_argument, 0, O_SYSTEM},
		{"bos", no_argument, 0, O_BOS},
		{"special", no_argument, 0, O_SPECIAL},
		{"tokens-max", required_argument, 0, 'n'},
		{"seed", required_argument, 0, 's'},
		{"ignore-eos", no_argument, 0, O_IGNORE_EOS},
		{"tokens", required_argument, 0, O_TOKENS},
		{"tokenize", no_argument, 0, O_TOKENIZE},
		{"dump-logits", required_argument, 0, O_DUMP},
		{"json", no_argument, 0, O_JSON},
		{"help", no_argument, 0, 'h'},
		{"version", no_argument, 0, O_VERSION},
		X4T_SAMPLER_LONGOPTS, X4T_LOAD_LONGOPTS, X4T_TRUNK_LONGOPTS,
		{0, 0, 0, 0},
	};
	memset(o, 0, sizeof *o);
	o->n_max = 64;
	o->samp.top_p = 1.0f;
	x4_trunk_opts_default(&o->trunk);
	int c;
	while ((c = getopt_long(argc, argv, "m:p:f:n:s:h", lo, NULL)) != -1) {
		if (x4t_sampler_opt(c, optarg, &o->samp) || x4t_load_opt(c, optarg, &o->trunk) ||
		    x4t_trunk_opt(c, optarg, &o->trunk))
			continue;
		switch (c) {
		case 'm': o->model = optarg; break;
		case O_TOK: o->tokdir = optarg; break;
		case 'p': o->prompt = optarg; break;
		case 'f': o->file = optarg; break;
		case O_CHAT: o->chat = true; break;
		case O_SYSTEM: o->system = optarg; break;
		case O_BOS: o->bos = true; break;
		case O_SPECIAL: o->special = true; break;
		case 'n': o->n_max = x4t_long(optarg, 0, INT_MAX, "-n"); break;
		case 's':
			o->samp.seed = x4t_u64(optarg, "-s");
			o->seed_given = true;
			break;
		case O_IGNORE_EOS: o->ignore_eos = true; break;
		case O_TOKENS: o->tokens = optarg; break;
		case O_TOKENIZE: o->tokenize = true; break;
		case O_DUMP: o->dump = optarg; break;
		case O_JSON: o->json = true; break;
		case 'h': usage(stdout); exit(0);
		case O_VERSION:
			printf("x4-run %s (commit %s, CUDA runtime %s)\n", x4_version(), x4_commit(),
			       x4_cuda_runtime());
			exit(0);
		default: usage(stderr); exit(2);
		}
	}
	if (optind < argc)
		x4t_usage_error("unexpected argument '%s'; the prompt goes after -p", argv[optind]);
	if (o->tokens && (o->prompt || o->file || o->chat))
		x4t_usage_error("--tokens feeds ids as they are: it takes no -p, -f or --chat");
	if (o->prompt && o->file)
		x4t_usage_error("give the prompt once: -p or -f, not both");
	if (o->system && !o->chat)
		x4t_usage_error("--system is part of the chat template: add --chat");
	if (o->chat && (o->bos || o->special))
		x4t_usage_error("--bos and --special are for raw completion; --chat renders the template");
	x4t_device_opts_check(&o->trunk);
}

/* The prompt's text: -p, else -f, else stdin when it is not a terminal and
 * holds something, else the default. */
static char *prompt_text(const struct opts *o, size_t *len)
{
	const char *p = o->prompt;
	if (!p && (o->file || !isatty(0))) {
		char *text = x4t_prompt_read(o->file, len);
		if (text)
			return text;
		/* an empty stdin (a script's </dev/null): no prompt was given */
	}
	if (!p)
		p = DEFAULT_PROMPT;
	char *text = strdup(p);
	if (!text)
		x4t_die("out of memory");
	*len = strlen(p);
	return text;
}

/* What the callbacks share. */
struct run {
	const struct opts *o;
	x4_npy *npy;
	char *text;          /* --json: the generated text */
	size_t text_n, text_cap;
	bool write_failed;
	x4_err oom;
};

static bool text_add(struct run *r, const char *s, size_t n)
{
	if (r->text_n + n + 1 > r->text_cap) {
		size_t cap = (r->text_n + n + 1) * 2;
		char *p = realloc(r->text, cap);
		if (!p)
			return false;
		r->text = p;
		r->text_cap = cap;
	}
	memcpy(r->text + r->text_n, s, n);
	r->text_n += n;
	r->text[r->text_n] = 0;
	return true;
}

static int on_token(void *ctx, int32_t id, const char *piece, size_t len)
{
	struct run *r = ctx;
	(void)id;
	if (r->o->json) {
		if (!text_add(r, piece, len)) {
			r->write_failed = true;
			x4_err_set(&r->oom, X4_ENOMEM, "out of memory for the generated text");
			return 1;
		}
	} else if (len && (!x4t_out(piece, len) || !x4t_out_flush())) {
		r->write_failed = true;
		return 1;
	}
	return x4t_stop_signal != 0;
}

static int on_prefill(void *ctx, size_t done, size_t total)
{
	(void)ctx;
	(void)done;
	(void)total;
	return x4t_stop_signal != 0;
}

static int on_logits(void *ctx, const float *rows, int n, x4_err *e)
{
	struct run *r = ctx;
	return x4_npy_append(r->npy, rows, n, e);
}

static void print_stats(const struct opts *o, const x4_model *m, const x4_paths *paths,
			const x4_gen_stats *s, const char *stop, const struct run *r,
			const x4_trunk_stats *ts)
{
	char dev[32];
	x4t_device_name(o->trunk.device, dev, sizeof dev);
	bool gpu = o->trunk.device >= 0;
	int threads = o->trunk.threads ? o->trunk.threads : x4_ncpu();
	const char *hc = gpu ? (o->trunk.hc_eager ? "eager" : "fused") : "n/a";
	const char *graph = gpu ? (o->trunk.no_graph ? "off" : "on") : "n/a";
	const char *pdl = gpu ? (o->trunk.pdl ? "on" : "off") : "n/a";
	if (!o->json) {
		x4t_warn("model %s (fingerprint %s), device %s, threads %d, resid %s, sublayer %s, "
			 "prec %s, kv-cache %s, hc %s, graph %s, pdl %s, attn %s, gemm %s, copy %s, "
			 "temperature %g, "
			 "top_k %d, top_p %g, seed %llu", paths->gguf, x4_model_fingerprint(m), dev,
			 threads, x4_resid_name(o->trunk.resid), x4t_sub_name(o->trunk.sublayer),
			 x4t_prec_name(o->trunk.prec), x4t_kv_name(&o->trunk), hc, graph, pdl,
			 x4t_attn_name(o->trunk.device, ts->attn), x4t_gemm_name(&o->trunk),
			 x4t_copy_name(&o->trunk), o->samp.temperature, o->samp.top_k, o->samp.top_p,
			 (unsigned long long)o->samp.seed);
		if (ts->resident_bytes)
			x4t_warn("loaded %.2f GiB to %s in %.2f s (%.1f GB/s); KV cache %.0f MiB for "
				 "%d positions; prefill chunk %d", ts->resident_bytes / 1073741824.0,
				 ts->device, ts->load_s,
				 ts->load_s > 0 ? ts->resident_bytes / ts->load_s / 1e9 : 0.0,
				 ts->cache_bytes / 1048576.0, ts->max_ctx, ts->prefill_chunk);
		x4t_warn("prompt %zu tokens, prefill %.3f s = %.1f tok/s", s->n_prompt, s->prefill_s,
			 s->prefill_tok_s);
		if (s->n_steps)
			x4t_warn("first decode step %.2f ms", s->first_step_s * 1e3);
		if (s->n_steady)
			x4t_warn("steady decode %.1f tok/s (median step %.2f ms over %zu steps after "
				 "the first)", 1.0 / s->median_step_s, s->median_step_s * 1e3,
				 s->n_steady);
		x4t_warn("generated %zu tokens, stop: %s", s->n_gen, stop);
		return;
	}
	FILE *f = stdout;
	fprintf(f, "{\"text\":");
	x4t_json_str(f, r->text ? r->text : "", r->text_n);
	fprintf(f, ",\"tokens\":[");
	for (size_t i = 0; i < s->n_gen; i++)
		fprintf(f, "%s%d", i ? "," : "", s->tokens[i]);
	fprintf(f, "],\"stop\":\"%s\",\"prompt_tokens\":%zu,\"generated_tokens\":%zu", stop,
		s->n_prompt, s->n_gen);
	fprintf(f, ",\"prefill_s\":%.6f", s->prefill_s);
	if (isfinite(s->prefill_tok_s))
		fprintf(f, ",\"prefill_tok_s\":%.3f", s->prefill_tok_s);
	else
		fprintf(f, ",\"prefill_tok_s\":null");
	if (s->n_steps)
		fprintf(f, ",\"first_step_ms\":%.4f", s->first_step_s * 1e3);
	else
		fprintf(f, ",\"first_step_ms\":null");
	if (s->n_steady)
		fprintf(f, ",\"decode_median_step_ms\":%.4f,\"decode_tok_s\":%.3f",
			s->median_step_s * 1e3, 1.0 / s->median_step_s);
	else
		fprintf(f, ",\"decode_median_step_ms\":null,\"decode_tok_s\":null");
	fprintf(f, ",\"decode_steady_steps\":%zu,\"load_s\":%.4f,\"resident_bytes\":%llu,"
		"\"cache_bytes\":%llu,\"max_ctx\":%d,\"prefill_chunk\":%d,\"device_name\":",
		s->n_steady, ts->load_s, (unsigned long long)ts->resident_bytes,
		(unsigned long long)ts->cache_bytes, ts->max_ctx, ts->prefill_chunk);
	x4t_json_str(f, ts->device, strlen(ts->device));
	fprintf(f, ",\"sublayer\":\"%s\",\"prec\":\"%s\",\"kv_cache\":\"%s\",\"hc\":\"%s\","
		"\"graph\":\"%s\",\"pdl\":\"%s\",\"attn\":\"%s\",\"gemm\":\"%s\",\"copy\":\"%s\","
		"\"gpu_memory_bytes\":%llu,"
		"\"model\":",
		x4t_sub_name(o->trunk.sublayer), x4t_prec_name(o->trunk.prec), x4t_kv_name(&o->trunk),
		hc, graph, pdl, x4t_attn_name(o->trunk.device, ts->attn), x4t_gemm_name(&o->trunk),
		x4t_copy_name(&o->trunk), (unsigned long long)o->trunk.mem_limit);
	x4t_json_str(f, paths->gguf, strlen(paths->gguf));
	fprintf(f, ",\"model_fingerprint\":\"%s\",\"commit\":\"%s\",\"device\":\"%s\","
		"\"threads\":%d,\"resid\":\"%s\",\"chat\":%s,\"temperature\":%g,\"top_k\":%d,"
		"\"top_p\":%g,\"seed\":%llu,\"ignore_eos\":%s}\n", x4_model_fingerprint(m),
		x4_commit(), dev, threads, x4_resid_name(o->trunk.resid),
		o->chat ? "true" : "false", o->samp.temperature, o->samp.top_k, o->samp.top_p,
		(unsigned long long)o->samp.seed, o->ignore_eos ? "true" : "false");
}

/* A progress bar for the weight upload, on a terminal only. */
struct load_bar {
	double t0;
	int last_pct;
};

static void load_progress(void *ctx, uint64_t done, uint64_t total)
{
	struct load_bar *b = ctx;
	int pct = total ? (int)(100 * done / total) : 100;
	if (pct == b->last_pct)
		return;
	b->last_pct = pct;
	double dt = x4_now() - b->t0;
	fprintf(stderr, "\rx4-run: loading weights %3d%%  %.2f / %.2f GiB  %.1f GB/s", pct,
		done / 1073741824.0, total / 1073741824.0, dt > 0 ? done / dt / 1e9 : 0.0);
	if (done >= total)
		fputc('\n', stderr);
	fflush(stderr);
}

int main(int argc, char **argv)
{
	x4t_prog = "x4-run";
	struct opts o;
	parse_args(argc, argv, &o);
	if (!o.seed_given) {
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		o.samp.seed = (uint64_t)ts.tv_sec * 1000000007ull + (uint64_t)ts.tv_nsec;
	}
	char defmodel[4096];
	if (!o.model) {
		x4t_default_model(defmodel, sizeof defmodel);
		o.model = defmodel;
	}
	x4_err e = {0};
	/* The destination is checked before any work. */
	char dump[4096];
	if (o.dump && x4_npy_check_path(o.dump, dump, sizeof dump, &e))
		x4t_die("--dump-logits %s", e.msg);
	/* Read before anything is loaded, so a bad prompt costs no upload. */
	int32_t *raw = NULL;
	size_t n_raw = 0, text_len = 0;
	char *text = NULL;
	if (o.tokens)
		x4t_ids(o.tokens, &raw, &n_raw);
	else
		text = prompt_text(&o, &text_len);

	x4_paths paths;
	x4_session *s = NULL;
	if (x4_paths_resolve(o.model, o.tokdir, &paths, &e) || x4_session_open(&s, &paths, &e)) {
		free(raw);
		free(text);
		x4t_die("%s%s", e.msg, x4t_default_model_hint(o.model, defmodel));
	}
	const x4_model *m = x4_session_model(s);
	x4_chat_msg msgs[2];
	int nm = 0;
	x4_request req = {
		.ids = raw, .n_ids = n_raw, .max_tokens = o.n_max, .sampler = o.samp,
		.ignore_eos = o.ignore_eos, .opts = &o.trunk,
	};
	if (!o.tokens && o.chat) {
		if (o.system)
			msgs[nm++] = (x4_chat_msg){ "system", o.system };
		msgs[nm++] = (x4_chat_msg){ "user", text };
		req.chat = msgs;
		req.n_chat = nm;
	} else if (!o.tokens) {
		req.text = text;
		req.text_len = text_len;
		req.tokenize_flags = (o.bos ? X4_TOKENIZE_BOS : 0) |
				     (o.special ? X4_TOKENIZE_SPECIAL : 0);
	}
	int status = 1;
	struct run r = { .o = &o };
	int32_t *ids = NULL;
	size_t n_prompt = 0;
	if (x4_session_tokenize(s, &req, &ids, &n_prompt, &e)) {
		x4t_warn("%s%s", o.tokens ? "" : "cannot tokenize the prompt: ", e.msg);
		goto out;
	}
	if (o.tokenize) {
		for (size_t i = 0; i < n_prompt; i++)
			x4t_outf("%s%d", i ? "," : "", ids[i]);
		x4t_outf("\n");
		if (!x4t_out_flush()) {
			x4t_out_report();
			goto out;
		}
		status = 0;
		goto out;
	}
	if (!n_prompt) {
		x4t_warn("the prompt is empty: give some text, or --bos to start from bos alone");
		goto out;
	}
	/* The prompt against the context, before the weights are loaded. */
	if (x4_session_check_prompt(s, n_prompt, &o.trunk, &e)) {
		x4t_warn("%s", e.msg);
		goto out;
	}
	struct load_bar bar = { x4_now(), -1 };
	if (isatty(2) && !o.json) {
		o.trunk.progress = load_progress;
		o.trunk.progress_ctx = &bar;
	}
	if (x4_session_load(s, &o.trunk, &e)) {
		x4t_warn("%s", e.msg);
		goto out;
	}
	if (o.dump && x4_npy_open(&r.npy, dump, x4_model_config(m)->n_vocab, &e)) {
		x4t_warn("%s", e.msg);
		goto out;
	}
	x4t_catch_stop_signals();
	req.on_token = on_token;
	req.on_prefill = on_prefill;
	req.on_logits = r.npy ? on_logits : NULL;
	req.ctx = &r;
	x4_gen_stats st;
	int rc = x4_session_generate(s, &req, &st, &e);
	if (!o.json && !r.write_failed && (!x4t_out("\n", 1) || !x4t_out_flush()))
		r.write_failed = true;
	if (r.write_failed) {
		if (r.oom.code)
			x4t_warn("%s", r.oom.msg);
		else
			x4t_out_report();
		goto out;
	}
	if (rc) {
		x4t_warn("%s", e.msg);
		goto out;
	}
	rc = r.npy ? x4_npy_close(r.npy, &e) : 0;
	r.npy = NULL;
	if (rc) {
		x4t_warn("%s", e.msg);
		goto out;
	}
	const char *stop = st.stop == X4_STOP_CANCEL ? "interrupt" : x4_stop_name(st.stop);
	x4_trunk_stats ts;
	x4_trunk_get_stats(x4_session_trunk(s), &ts);
	print_stats(&o, m, &paths, &st, stop, &r, &ts);
	if (!x4t_out_flush()) {
		x4t_out_report();
		goto out;
	}
	status = x4t_stop_signal ? 128 + x4t_stop_signal : 0;
out:
	x4_npy_abort(r.npy); /* a dump not closed above is not left half-written */
	x4_session_close(s);
	free(r.text);
	free(ids);
	free(raw);
	free(text);
	return status;
}
