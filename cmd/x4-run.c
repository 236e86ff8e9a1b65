/*
 * x4-run - generate text from a xing4_0 checkpoint.
 *
 * Tokens stream to stdout as they are produced; the statistics go to
 * stderr so that stdout is the text and nothing else.  The first decode
 * step is reported apart from the steady rate: after a prefill it is not a
 * steady-state step (record section 6), and an average over both misreads
 * the rate.  Ctrl-C is honoured at the next token boundary, never inside a
 * forward, so what was printed is exactly what was generated.
 */
#include "x4.h"

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define PROG "x4-run"
#define DEFAULT_PROMPT "Once upon a time"
#define EXIT_INTERRUPTED 130 /* 128 + SIGINT, what a shell reports for Ctrl-C */
#define DUMP_CHUNK 256       /* prompt positions per forward when every row is kept */

static volatile sig_atomic_t interrupted;
static void on_sigint(int sig) { (void)sig; interrupted = 1; }

static void usage(FILE *f)
{
	fprintf(f,
"usage: " PROG " [-m PATH] [--tokenizer DIR] [-p TEXT | -f FILE | --tokens IDS]\n"
"              [--chat [--system TEXT]] [-n N] [--temperature T] [--top-k K]\n"
"              [--top-p P] [-s SEED] [--ignore-eos] [--device cpu|cuda:N]\n"
"              [--threads N] [--max-model-len N] [--resid f32|f16|bf16]\n"
"              [--prec f32|f64] [--kv-cache f16|exact] [--hc fused|eager]\n"
"              [--gpu-memory SIZE] [--sublayer f32|bf16|f16] [--graph on|off]\n"
"              [--dump-logits FILE.npy] [--tokenize] [--json]\n"
"Generate text from a xing4_0 checkpoint; statistics go to stderr.\n"
"  -m, --model PATH        a .gguf or a folder holding one (default: the tiny\n"
"                          preset, ../build/models/tiny beside this binary)\n"
"      --tokenizer DIR     the release's tokenizer folder\n"
"  -p, --prompt TEXT       the prompt (else -f, else stdin if not a terminal,\n"
"                          else \"" DEFAULT_PROMPT "\")\n"
"  -f, --file FILE         read the prompt from FILE ('-' = stdin)\n"
"      --tokens IDS        feed raw token ids, comma separated (e.g. 1,5,9)\n"
"      --chat              render the prompt as one user turn of the chat template\n"
"      --system TEXT       a system message (with --chat)\n"
"      --bos               prepend bos to a raw completion prompt\n"
"      --special           match special tokens spelled in the prompt text\n"
"  -n, --tokens-max N      generate at most N tokens (default 64)\n"
"      --temperature T     0 = greedy (default 0)\n"
"      --top-k K           keep the K most likely tokens (default 0 = off)\n"
"      --top-p P           nucleus sampling mass (default 1 = off)\n"
"  -s, --seed N            sampler seed (default: from the clock, printed)\n"
"      --ignore-eos        do not stop at <_end>\n"
"      --device DEV        cpu (default) or cuda:N\n"
"      --threads N         CPU threads (default 0 = all)\n"
"      --max-model-len N   positions the cache holds (default: the library's)\n"
"      --resid W           residual stream width: f32 (default), f16, bf16\n"
"      --prec P            CPU arithmetic: f32 (default) or f64 (the reference)\n"
"      --kv-cache K        latent cache values: f16 (default with f32) or exact\n"
"                          (the arithmetic's own width; CPU only)\n"
"      --sublayer W        the width attention and the FFN are handed their\n"
"                          normed input in: f32 (default), bf16, f16\n"
"      --graph on|off      GPU: replay each decode step from a captured CUDA\n"
"                          graph (default on) or launch it eagerly\n"
"      --hc H              GPU hyper-connection gate: fused (default, one kernel)\n"
"                          or eager (the multi-kernel path, for comparison)\n"
"      --gpu-memory SIZE   device memory x4 may hold (e.g. 20G; default: what\n"
"                          is free); a model that does not fit is refused\n"
"      --dump-logits FILE  write the logits of every position as float32 .npy\n"
"      --tokenize          print the prompt's token ids and exit\n"
"      --json              print text and statistics as one JSON object\n"
"  -h, --help              this help\n"
"      --version           version, commit and CUDA runtime\n"
"Exit status: 0 done, 1 failure, 2 usage, 130 interrupted by SIGINT.\n");
}

static void die_usage(const char *fmt, const char *a, const char *b)
{
	fprintf(stderr, PROG ": ");
	fprintf(stderr, fmt, a, b);
	fprintf(stderr, " (see " PROG " -h)\n");
	exit(2);
}

static long parse_long(const char *s, long lo, long hi, const char *opt)
{
	long v;
	x4_err e;
	if (x4_parse_long(s, lo, hi, opt, &v, &e))
		die_usage("%s%s", e.msg, "");
	return v;
}

/* "20G", "512M", "300000K" or plain bytes -> bytes; strict. */
static uint64_t parse_size(const char *s, const char *opt)
{
	char *end;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	uint64_t mult = 1;
	if (*end == 'K' || *end == 'k')
		mult = 1ull << 10, end++;
	else if (*end == 'M' || *end == 'm')
		mult = 1ull << 20, end++;
	else if (*end == 'G' || *end == 'g')
		mult = 1ull << 30, end++;
	if (!*s || *s == '-' || *end || errno || v == 0 || v > (UINT64_MAX >> 30)) {
		fprintf(stderr, PROG ": %s '%s': expected a size such as 20G, 512M or 300000K "
			"(see " PROG " -h)\n", opt, s);
		exit(2);
	}
	return (uint64_t)v * mult;
}

static double parse_double(const char *s, double lo, double hi, const char *opt)
{
	char *end;
	errno = 0;
	double v = strtod(s, &end);
	if (!*s || *end || errno || !isfinite(v) || v < lo || v > hi) {
		fprintf(stderr, PROG ": %s '%s': expected a number in [%g, %g] (see " PROG " -h)\n",
			opt, s, lo, hi);
		exit(2);
	}
	return v;
}

static int parse_prec(const char *s)
{
	if (strcmp(s, "f32") == 0)
		return X4_PREC_F32;
	if (strcmp(s, "f64") == 0)
		return X4_PREC_F64;
	die_usage("--prec '%s': expected f32 or f64%s", s, "");
	return 0;
}

static int parse_kv(const char *s)
{
	if (strcmp(s, "f16") == 0)
		return X4_KV_F16;
	if (strcmp(s, "exact") == 0)
		return X4_KV_EXACT;
	die_usage("--kv-cache '%s': expected f16 or exact%s", s, "");
	return 0;
}

/* What the cache holds, as the trunk resolves X4_KV_DEFAULT: fp16 values
 * with f32 arithmetic (and always on the GPU), exact with f64. */
static const char *kv_name(const x4_trunk_opts *t)
{
	if (t->kv == X4_KV_F16)
		return "f16";
	if (t->kv == X4_KV_EXACT)
		return "exact";
	return t->prec == X4_PREC_F64 && t->device < 0 ? "exact" : "f16";
}

static const char *sub_name(int s)
{
	return s == X4_SUB_BF16 ? "bf16" : s == X4_SUB_F16 ? "f16" : "f32";
}

static int parse_resid(const char *s)
{
	if (strcmp(s, "f32") == 0)
		return X4_RESID_F32;
	if (strcmp(s, "f16") == 0)
		return X4_RESID_F16;
	if (strcmp(s, "bf16") == 0)
		return X4_RESID_BF16;
	die_usage("--resid '%s': expected f32, f16 or bf16%s", s, "");
	return 0;
}
/* The whole of a stream, NUL-terminated. */
static char *slurp(FILE *f, const char *name, size_t *len)
{
	size_t cap = 4096, n = 0;
	char *buf = malloc(cap);
	while (buf) {
		n += fread(buf + n, 1, cap - 1 - n, f);
		if (n < cap - 1)
			break;
		char *nb = realloc(buf, cap *= 2);
		if (!nb)
			free(buf);
		buf = nb;
	}
	if (!buf || ferror(f)) {
		fprintf(stderr, PROG ": cannot read the prompt from %s: %s\n", name,
			buf ? strerror(errno) : "out of memory");
		exit(1);
	}
	buf[n] = 0;
	*len = n;
	return buf;
}
/* A growing byte buffer, for --json's text. */
struct buf {
	char *p;
	size_t n, cap;
};
static void buf_add(struct buf *b, const char *s, size_t n)
{
	if (b->n + n + 1 > b->cap) {
		size_t cap = (b->n + n + 1) * 2;
		char *p = realloc(b->p, cap);
		if (!p) {
			fprintf(stderr, PROG ": out of memory\n");
			exit(1);
		}
		b->p = p;
		b->cap = cap;
	}
	memcpy(b->p + b->n, s, n);
	b->n += n;
	b->p[b->n] = 0;
}

/* Length of the valid UTF-8 sequence at s (0 if invalid). */
static int utf8_len(const unsigned char *s, size_t n)
{
	int len = s[0] < 0x80 ? 1 : (s[0] >> 5) == 6 ? 2 : (s[0] >> 4) == 14 ? 3
		: (s[0] >> 3) == 30 ? 4 : 0;
	if (!len || (size_t)len > n)
		return 0;
	for (int i = 1; i < len; i++)
		if ((s[i] & 0xc0) != 0x80)
			return 0;
	return len;
}

/* A JSON string; invalid UTF-8 (a byte piece the model left unfinished)
 * becomes U+FFFD so that the object always parses. */
static void json_str(FILE *f, const char *s, size_t n)
{
	const unsigned char *u = (const unsigned char *)s;
	fputc('"', f);
	for (size_t i = 0; i < n;) {
		int len = utf8_len(u + i, n - i);
		if (!len) {
			fputs("\\ufffd", f);
			i++;
			continue;
		}
		unsigned char ch = u[i];
		if (ch == '"' || ch == '\\')
			fprintf(f, "\\%c", ch);
		else if (ch == '\n')
			fputs("\\n", f);
		else if (ch == '\t')
			fputs("\\t", f);
		else if (ch < 0x20 || ch == 0x7f)
			fprintf(f, "\\u%04x", ch);
		else
			fwrite(u + i, 1, (size_t)len, f);
		i += (size_t)len;
	}
	fputc('"', f);
}

static size_t min_size(size_t a, size_t b) { return a < b ? a : b; }

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

struct opts {
	const char *model, *tokdir, *prompt, *file, *system, *tokens, *dump;
	bool chat, bos, special, ignore_eos, tokenize, json, seed_given;
	long n_max;
	x4_sampler_opts samp;
	x4_trunk_opts trunk;
	char device[32];
};

static void parse_args(int argc, char **argv, struct opts *o)
{
	enum { O_TOK = 256, O_CHAT, O_SYSTEM, O_BOS, O_SPECIAL, O_TEMP, O_TOPK, O_TOPP,
	       O_IGNORE_EOS, O_DEVICE, O_THREADS, O_MAXLEN, O_RESID, O_TOKENS, O_TOKENIZE,
	       O_DUMP, O_JSON, O_VERSION, O_PREC, O_KV, O_HC, O_GPUMEM, O_SUB, O_GRAPH };
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
		{"temperature", required_argument, 0, O_TEMP},
		{"top-k", required_argument, 0, O_TOPK},
		{"top-p", required_argument, 0, O_TOPP},
		{"seed", required_argument, 0, 's'},
		{"ignore-eos", no_argument, 0, O_IGNORE_EOS},
		{"device", required_argument, 0, O_DEVICE},
		{"threads", required_argument, 0, O_THREADS},
		{"max-model-len", required_argument, 0, O_MAXLEN},
		{"resid", required_argument, 0, O_RESID},
		{"prec", required_argument, 0, O_PREC},
		{"kv-cache", required_argument, 0, O_KV},
		{"hc", required_argument, 0, O_HC},
		{"gpu-memory", required_argument, 0, O_GPUMEM},
		{"sublayer", required_argument, 0, O_SUB},
		{"graph", required_argument, 0, O_GRAPH},
		{"tokens", required_argument, 0, O_TOKENS},
		{"tokenize", no_argument, 0, O_TOKENIZE},
		{"dump-logits", required_argument, 0, O_DUMP},
		{"json", no_argument, 0, O_JSON},
		{"help", no_argument, 0, 'h'},
		{"version", no_argument, 0, O_VERSION},
		{0, 0, 0, 0},
	};
	memset(o, 0, sizeof *o);
	o->n_max = 64;
	o->samp.top_p = 1.0f;
	x4_trunk_opts_default(&o->trunk);
	o->trunk.device = -1;
	snprintf(o->device, sizeof o->device, "cpu");
	int c;
	while ((c = getopt_long(argc, argv, "m:p:f:n:s:h", lo, NULL)) != -1) {
		switch (c) {
		case 'm': o->model = optarg; break;
		case O_TOK: o->tokdir = optarg; break;
		case 'p': o->prompt = optarg; break;
		case 'f': o->file = optarg; break;
		case O_CHAT: o->chat = true; break;
		case O_SYSTEM: o->system = optarg; break;
		case O_BOS: o->bos = true; break;
		case O_SPECIAL: o->special = true; break;
		case 'n': o->n_max = parse_long(optarg, 0, INT_MAX, "-n"); break;
		case O_TEMP: o->samp.temperature = (float)parse_double(optarg, 0, 1e6, "--temperature"); break;
		case O_TOPK: o->samp.top_k = (int)parse_long(optarg, 0, INT_MAX, "--top-k"); break;
		case O_TOPP: o->samp.top_p = (float)parse_double(optarg, 1e-9, 1, "--top-p"); break;
		case 's': {
			char *end;
			errno = 0;
			unsigned long long v = strtoull(optarg, &end, 10);
			if (!*optarg || *end || errno || *optarg == '-')
				die_usage("-s '%s': expected an unsigned integer%s", optarg, "");
			o->samp.seed = v;
			o->seed_given = true;
			break;
		}
		case O_IGNORE_EOS: o->ignore_eos = true; break;
		case O_DEVICE:
		{
			x4_err pe;
			if (x4_parse_device(optarg, &o->trunk.device, &pe))
				die_usage("%s%s", pe.msg, "");
		}
			snprintf(o->device, sizeof o->device, "%s", optarg);
			break;
		case O_THREADS: o->trunk.threads = (int)parse_long(optarg, 0, 4096, "--threads"); break;
		case O_MAXLEN: o->trunk.max_ctx = (int)parse_long(optarg, 1, INT_MAX, "--max-model-len"); break;
		case O_RESID: o->trunk.resid = parse_resid(optarg); break;
		case O_PREC: o->trunk.prec = parse_prec(optarg); break;
		case O_KV: o->trunk.kv = parse_kv(optarg); break;
		case O_HC:
			if (strcmp(optarg, "fused") && strcmp(optarg, "eager"))
				die_usage("--hc '%s': expected fused or eager%s", optarg, "");
			o->trunk.hc_eager = strcmp(optarg, "eager") == 0;
			break;
		case O_GPUMEM: o->trunk.mem_limit = parse_size(optarg, "--gpu-memory"); break;
		case O_GRAPH:
			if (strcmp(optarg, "on") && strcmp(optarg, "off"))
				die_usage("--graph '%s': expected on or off%s", optarg, "");
			o->trunk.no_graph = strcmp(optarg, "off") == 0;
			break;
		case O_SUB:
			if (!strcmp(optarg, "f32"))
				o->trunk.sublayer = X4_SUB_F32;
			else if (!strcmp(optarg, "bf16"))
				o->trunk.sublayer = X4_SUB_BF16;
			else if (!strcmp(optarg, "f16"))
				o->trunk.sublayer = X4_SUB_F16;
			else
				die_usage("--sublayer '%s': expected f32, bf16 or f16%s", optarg, "");
			break;
		case O_TOKENS: o->tokens = optarg; break;
		case O_TOKENIZE: o->tokenize = true; break;
		case O_DUMP: o->dump = optarg; break;
		case O_JSON: o->json = true; break;
		case 'h': usage(stdout); exit(0);
		case O_VERSION:
			printf(PROG " %s (commit %s, CUDA runtime %s)\n", x4_version(), x4_commit(),
			       x4_cuda_runtime());
			exit(0);
		default: usage(stderr); exit(2);
		}
	}
	if (optind < argc)
		die_usage("unexpected argument '%s'%s; the prompt goes after -p", argv[optind], "");
	if (o->tokens && (o->prompt || o->file || o->chat))
		die_usage("--tokens feeds ids as they are: it takes no -p, -f or --chat%s%s", "", "");
	if (o->prompt && o->file)
		die_usage("give the prompt once: -p or -f, not both%s%s", "", "");
	if (o->system && !o->chat)
		die_usage("--system is part of the chat template: add --chat%s%s", "", "");
	if (o->chat && (o->bos || o->special))
		die_usage("--bos and --special are for raw completion; --chat renders the template%s%s", "", "");
}

/* The prompt's ids, from --tokens, the chat template or raw text. */
static int32_t *prompt_ids(const struct opts *o, const x4_tokenizer *tok, size_t *n)
{
	x4_err e = {0};
	if (o->tokens) {
		int32_t *ids;
		if (x4_parse_ids(o->tokens, &ids, n, &e))
			die_usage("%s%s", e.msg, "");
		return ids;
	}
	char *text;
	size_t len;
	if (o->prompt) {
		text = strdup(o->prompt);
		len = strlen(o->prompt);
	} else if (o->file && strcmp(o->file, "-") != 0) {
		FILE *f = fopen(o->file, "rb");
		if (!f) {
			fprintf(stderr, PROG ": cannot open the prompt file %s: %s\n", o->file,
				strerror(errno));
			exit(1);
		}
		text = slurp(f, o->file, &len);
		fclose(f);
	} else if (o->file || !isatty(0)) {
		text = slurp(stdin, "stdin", &len);
		/* An empty stdin (a script's </dev/null) means no prompt was given. */
		if (!len && !o->file) {
			free(text);
			text = strdup(DEFAULT_PROMPT);
			len = strlen(text);
		}
	} else {
		text = strdup(DEFAULT_PROMPT);
		len = strlen(text);
	}
	if (!text) {
		fprintf(stderr, PROG ": out of memory\n");
		exit(1);
	}
	int32_t *ids = NULL;
	int rc;
	if (o->chat) {
		x4_chat_msg msgs[2];
		int nm = 0;
		if (o->system)
			msgs[nm++] = (x4_chat_msg){"system", o->system};
		msgs[nm++] = (x4_chat_msg){"user", text};
		rc = x4_chat_tokenize(tok, msgs, nm, true, &ids, n, &e);
	} else {
		unsigned flags = (o->bos ? X4_TOKENIZE_BOS : 0) | (o->special ? X4_TOKENIZE_SPECIAL : 0);
		rc = x4_tokenize(tok, text, len, flags, &ids, n, &e);
	}
	free(text);
	if (rc) {
		fprintf(stderr, PROG ": cannot tokenize the prompt: %s\n", e.msg);
		exit(1);
	}
	return ids;
}

struct stats {
	size_t n_prompt, n_gen;
	double prefill_s;
	double *steps; /* [n_steps] seconds per decode forward */
	size_t n_steps, cap_steps;
	const char *stop;
};

static void step_add(struct stats *s, double dt)
{
	if (s->n_steps == s->cap_steps) {
		s->cap_steps = s->cap_steps ? 2 * s->cap_steps : 256;
		double *p = realloc(s->steps, s->cap_steps * sizeof *p);
		if (!p) {
			fprintf(stderr, PROG ": out of memory\n");
			exit(1);
		}
		s->steps = p;
	}
	s->steps[s->n_steps++] = dt;
}

/* first step, median of the rest (NAN when absent) */
static void step_summary(const struct stats *s, double *first, double *median, size_t *n)
{
	*first = s->n_steps ? s->steps[0] : NAN;
	*n = s->n_steps > 1 ? s->n_steps - 1 : 0;
	*median = NAN;
	if (!*n)
		return;
	double *v = malloc(*n * sizeof *v);
	if (!v)
		return;
	memcpy(v, s->steps + 1, *n * sizeof *v);
	qsort(v, *n, sizeof *v, cmp_double);
	*median = *n % 2 ? v[*n / 2] : 0.5 * (v[*n / 2 - 1] + v[*n / 2]);
	free(v);
}

static void print_stats(const struct opts *o, const x4_model *m, const x4_paths *paths,
			const struct stats *s, const struct buf *text, const int32_t *gen,
			const x4_trunk_stats *ts)
{
	double first, median;
	size_t n_steady;
	step_summary(s, &first, &median, &n_steady);
	int threads = o->trunk.threads ? o->trunk.threads : x4_ncpu();
	double prefill_tok_s = s->prefill_s > 0 ? s->n_prompt / s->prefill_s : NAN;
	if (!o->json) {
		fprintf(stderr, PROG ": model %s (fingerprint %s), device %s, threads %d, resid %s, "
			"sublayer %s, prec %s, kv-cache %s, hc %s, graph %s, temperature %g, top_k %d, top_p %g, "
			"seed %llu\n", paths->gguf, x4_model_fingerprint(m), o->device, threads,
			x4_resid_name(o->trunk.resid), sub_name(o->trunk.sublayer), o->trunk.prec == X4_PREC_F64 ? "f64" : "f32",
			kv_name(&o->trunk), o->trunk.hc_eager ? "eager" : "fused",
			o->trunk.no_graph ? "off" : "on", o->samp.temperature, o->samp.top_k, o->samp.top_p,
			(unsigned long long)o->samp.seed);
		if (ts->resident_bytes)
			fprintf(stderr, PROG ": loaded %.2f GiB to %s in %.2f s (%.1f GB/s); KV cache "
				"%.0f MiB for %d positions; prefill chunk %d\n",
				ts->resident_bytes / 1073741824.0, ts->device, ts->load_s,
				ts->load_s > 0 ? ts->resident_bytes / ts->load_s / 1e9 : 0.0,
				ts->cache_bytes / 1048576.0, ts->max_ctx, ts->prefill_chunk);
		fprintf(stderr, PROG ": prompt %zu tokens, prefill %.3f s = %.1f tok/s\n",
			s->n_prompt, s->prefill_s, prefill_tok_s);
		if (s->n_steps)
			fprintf(stderr, PROG ": first decode step %.2f ms\n", first * 1e3);
		if (n_steady)
			fprintf(stderr, PROG ": steady decode %.1f tok/s (median step %.2f ms over "
				"%zu steps after the first)\n", 1.0 / median, median * 1e3, n_steady);
		fprintf(stderr, PROG ": generated %zu tokens, stop: %s\n", s->n_gen, s->stop);
		return;
	}
	FILE *f = stdout;
	fprintf(f, "{\"text\":");
	json_str(f, text->p ? text->p : "", text->n);
	fprintf(f, ",\"tokens\":[");
	for (size_t i = 0; i < s->n_gen; i++)
		fprintf(f, "%s%d", i ? "," : "", gen[i]);
	fprintf(f, "],\"stop\":\"%s\",\"prompt_tokens\":%zu,\"generated_tokens\":%zu", s->stop,
		s->n_prompt, s->n_gen);
	fprintf(f, ",\"prefill_s\":%.6f", s->prefill_s);
	if (isfinite(prefill_tok_s))
		fprintf(f, ",\"prefill_tok_s\":%.3f", prefill_tok_s);
	else
		fprintf(f, ",\"prefill_tok_s\":null");
	if (s->n_steps)
		fprintf(f, ",\"first_step_ms\":%.4f", first * 1e3);
	else
		fprintf(f, ",\"first_step_ms\":null");
	if (n_steady)
		fprintf(f, ",\"decode_median_step_ms\":%.4f,\"decode_tok_s\":%.3f", median * 1e3,
			1.0 / median);
	else
		fprintf(f, ",\"decode_median_step_ms\":null,\"decode_tok_s\":null");
	fprintf(f, ",\"decode_steady_steps\":%zu,\"load_s\":%.4f,\"resident_bytes\":%llu,"
		"\"cache_bytes\":%llu,\"max_ctx\":%d,\"prefill_chunk\":%d,\"device_name\":", n_steady,
		ts->load_s, (unsigned long long)ts->resident_bytes,
		(unsigned long long)ts->cache_bytes, ts->max_ctx, ts->prefill_chunk);
	json_str(f, ts->device, strlen(ts->device));
	fprintf(f, ",\"sublayer\":\"%s\",\"prec\":\"%s\",\"kv_cache\":\"%s\",\"hc\":\"%s\","
		"\"graph\":\"%s\",\"gpu_memory_bytes\":%llu,\"model\":", sub_name(o->trunk.sublayer),
		o->trunk.prec == X4_PREC_F64 ? "f64" : "f32", kv_name(&o->trunk),
		o->trunk.hc_eager ? "eager" : "fused", o->trunk.no_graph ? "off" : "on", (unsigned long long)o->trunk.mem_limit);
	json_str(f, paths->gguf, strlen(paths->gguf));
	fprintf(f, ",\"model_fingerprint\":\"%s\",\"commit\":\"%s\",\"device\":\"%s\","
		"\"threads\":%d,\"resid\":\"%s\",\"chat\":%s,\"temperature\":%g,\"top_k\":%d,"
		"\"top_p\":%g,\"seed\":%llu,\"ignore_eos\":%s}\n", x4_model_fingerprint(m),
		x4_commit(), o->device, threads, x4_resid_name(o->trunk.resid),
		o->chat ? "true" : "false", o->samp.temperature, o->samp.top_k, o->samp.top_p,
		(unsigned long long)o->samp.seed, o->ignore_eos ? "true" : "false");
	fflush(f);
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
	fprintf(stderr, "\r" PROG ": loading weights %3d%%  %.2f / %.2f GiB  %.1f GB/s", pct,
		done / 1073741824.0, total / 1073741824.0, dt > 0 ? done / dt / 1e9 : 0.0);
	if (done >= total)
		fputc('\n', stderr);
	fflush(stderr);
}

int main(int argc, char **argv)
{
	struct opts o;
	parse_args(argc, argv, &o);
	if (!o.seed_given) {
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		o.samp.seed = (uint64_t)ts.tv_sec * 1000000007ull + (uint64_t)ts.tv_nsec;
	}
	char defmodel[4096];
	if (!o.model) {
		x4_default_model(defmodel, sizeof defmodel);
		o.model = defmodel;
	}

	x4_err e = {0};
	x4_paths paths;
	/* Every resource, so that each failure below leaves through one exit. */
	x4_model *m = NULL;
	x4_trunk *t = NULL;
	x4_sampler *smp = NULL;
	x4_npy *npy = NULL;
	int32_t *ids = NULL, *gen = NULL;
	float *logits = NULL;
	struct stats st = {.stop = "count"};
	struct buf text = {0};
	int status = 1;
	if (x4_paths_resolve(o.model, o.tokdir, &paths, &e) || x4_model_open(&m, &paths, &e)) {
		fprintf(stderr, PROG ": %s%s\n", e.msg, o.model == defmodel && access(defmodel, F_OK)
			? " (the default model is the tiny preset: run `make tiny`, or give -m)" : "");
		return 1;
	}
	const x4_config *cfg = x4_model_config(m);
	const x4_tokenizer *tok = x4_model_tokenizer(m);
	int n_vocab = cfg->n_vocab;

	size_t n_prompt;
	ids = prompt_ids(&o, tok, &n_prompt);
	for (size_t i = 0; i < n_prompt; i++)
		if (ids[i] >= n_vocab) {
			fprintf(stderr, PROG ": token id %d is outside the vocabulary [0, %d)\n",
				ids[i], n_vocab);
			goto out;
		}
	if (o.tokenize) {
		for (size_t i = 0; i < n_prompt; i++)
			printf("%s%d", i ? "," : "", ids[i]);
		printf("\n");
		status = 0;
		goto out;
	}
	if (!n_prompt) {
		fprintf(stderr, PROG ": the prompt is empty: give some text, or --bos to start "
			"from bos alone\n");
		goto out;
	}
	if (o.trunk.max_ctx && n_prompt > (size_t)o.trunk.max_ctx) {
		fprintf(stderr, PROG ": the prompt is %zu tokens, more than --max-model-len %d: "
			"raise --max-model-len or shorten the prompt\n", n_prompt, o.trunk.max_ctx);
		goto out;
	}

	struct load_bar bar = { x4_now(), -1 };
	if (isatty(2) && !o.json) {
		o.trunk.progress = load_progress;
		o.trunk.progress_ctx = &bar;
	}
	if (x4_trunk_create(&t, m, &o.trunk, &e) || x4_sampler_create(&smp, &o.samp, &e)) {
		fprintf(stderr, PROG ": %s\n", e.msg);
		goto out;
	}
	if (o.dump && x4_npy_open(&npy, o.dump, n_vocab, &e)) {
		fprintf(stderr, PROG ": %s\n", e.msg);
		goto out;
	}
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_sigint;
	sigemptyset(&sa.sa_mask);
	sa.sa_flags = SA_RESTART;
	sigaction(SIGINT, &sa, NULL);

	size_t chunk = npy ? DUMP_CHUNK : n_prompt;
	/* logits: [chunk][n_vocab] while prefilling with --dump-logits, else [1][n_vocab] */
	logits = malloc(min_size(chunk, n_prompt) * n_vocab * sizeof *logits);
	size_t gen_cap = min_size((size_t)o.n_max, 4096) + 1;
	gen = malloc(gen_cap * sizeof *gen); /* [gen_cap] generated ids */
	if (!logits || !gen) {
		fprintf(stderr, PROG ": out of memory for the logits of %zu positions\n", chunk);
		goto out;
	}
	st.n_prompt = n_prompt;
	int rc = 0;

	/* Prefill.  Without --dump-logits the next token is picked where the
	 * logits are (x4_trunk_forward_next: on the GPU one id comes back). */
	int32_t next = -1;
	for (size_t at = 0; at < n_prompt; at += chunk) {
		size_t n = min_size(chunk, n_prompt - at);
		double t0 = x4_now();
		if (!npy && at + n == n_prompt)
			rc = x4_trunk_forward_next(t, ids + at, (int)n, smp, &o.samp, &next, &e);
		else
			rc = x4_trunk_forward(t, ids + at, (int)n, logits, npy != NULL, &e);
		st.prefill_s += x4_now() - t0;
		if (!rc && npy)
			rc = x4_npy_append(npy, logits, (int)n, &e);
		if (rc) {
			if (rc == X4_ERANGE)
				fprintf(stderr, PROG ": %s (raise --max-model-len or shorten the prompt)\n",
					e.msg);
			else
				fprintf(stderr, PROG ": %s\n", e.msg);
			goto out;
		}
	}
	/* The last prompt row is the one the first token is sampled from. */
	const float *row = npy ? logits + ((n_prompt - 1) % chunk) * (size_t)n_vocab : logits;
	if (row != logits)
		memmove(logits, row, (size_t)n_vocab * sizeof *logits);

	/* Decode: sample from the current row, emit, feed.  With --dump-logits
	 * the last token is fed too, so there is a row per generated token. */
	x4_detok dt = {0};
	char piece[256];
	for (;;) {
		if (interrupted) {
			st.stop = "interrupt";
			break;
		}
		if (st.n_gen >= (size_t)o.n_max)
			break;
		int32_t id = npy ? x4_sample(smp, logits, n_vocab) : next;
		if (npy && !isfinite(logits[id])) {
			/* (without --dump-logits the trunk's pick checks this itself) */
			rc = x4_err_nonfinite_logits(&e, x4_trunk_pos(t) - 1);
			fprintf(stderr, PROG ": %s\n", e.msg);
			break;
		}
		if (id == cfg->eos_id && !o.ignore_eos) {
			st.stop = "eos";
			break;
		}
		if (st.n_gen == gen_cap) {
			int32_t *p = realloc(gen, (gen_cap *= 2) * sizeof *gen);
			if (!p) {
				fprintf(stderr, PROG ": out of memory\n");
				rc = X4_ENOMEM;
				break;
			}
			gen = p;
		}
		gen[st.n_gen++] = id;
		size_t k = x4_detok_step(tok, &dt, id, piece, sizeof piece);
		if (o.json) {
			buf_add(&text, piece, k);
		} else if (k) {
			fwrite(piece, 1, k, stdout);
			fflush(stdout);
		}
		if (st.n_gen >= (size_t)o.n_max && !npy)
			break;
		double t0 = x4_now();
		rc = npy ? x4_trunk_forward(t, &id, 1, logits, false, &e)
			 : x4_trunk_forward_next(t, &id, 1, smp, &o.samp, &next, &e);
		double dtm = x4_now() - t0;
		if (rc == X4_ERANGE) {
			/* the cache is full: the context, not a failure, ends the run */
			st.stop = "context";
			rc = 0;
			break;
		}
		if (rc) {
			fprintf(stderr, PROG ": %s\n", e.msg);
			break;
		}
		step_add(&st, dtm);
		if (npy && (rc = x4_npy_append(npy, logits, 1, &e))) {
			fprintf(stderr, PROG ": %s\n", e.msg);
			break;
		}
	}
	size_t k = x4_detok_flush(tok, &dt, piece, sizeof piece);
	if (o.json) {
		buf_add(&text, piece, k);
	} else {
		fwrite(piece, 1, k, stdout);
		fputc('\n', stdout);
		fflush(stdout);
	}
	if (rc)
		goto out;
	rc = npy ? x4_npy_close(npy, &e) : 0;
	npy = NULL;
	if (rc) {
		fprintf(stderr, PROG ": %s\n", e.msg);
		goto out;
	}
	x4_trunk_stats ts;
	x4_trunk_get_stats(t, &ts);
	print_stats(&o, m, &paths, &st, &text, gen, &ts);
	status = strcmp(st.stop, "interrupt") == 0 ? EXIT_INTERRUPTED : 0;
out:
	x4_npy_abort(npy); /* a dump not closed above is not left half-written */
	x4_sampler_free(smp);
	x4_trunk_free(t);
	x4_model_close(m);
	free(logits);
	free(gen);
	free(ids);
	free(text.p);
	free(st.steps);
	return status;
}
