/*
 * x4-profile - where a step's time goes, kernel by kernel.
 *
 * Prefills a fixed sequence of token ids to the context asked for, runs
 * decode steps as x4-run runs them (x4_trunk_forward_next with one token,
 * graphed unless --graph off), first unprofiled and timed by the host, then
 * again with the library's profiler attached (lib/prof.c: CUPTI's activity
 * records on a GPU, wall-clock timers around each operation on the CPU),
 * and prints one TSV table: a row per kernel, a row per sublayer class, and
 * rows for the step as a whole.  A profiled run is not a speed; the
 * unprofiled step is printed beside it so that the profile's cost is stated.
 */
#include "x4.h"

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define PROG "x4-profile"
#define NOTE "profiled run: not a speed"

static volatile sig_atomic_t got_signal;
static void on_signal(int sig) { got_signal = sig; }
static bool stop_requested(void *ctx) { (void)ctx; return got_signal != 0; }

static void usage(FILE *f)
{
	fprintf(f,
"usage: " PROG " [-m PATH] [--device cpu|cuda:N] [--context C] [-n|--steps N]\n"
"                  [--prefill P] [--graph on|off] [--hc fused|eager]\n"
"                  [--sublayer f32|bf16|f16] [--resid f32|f16|bf16] [--prec f32|f64]\n"
"                  [--kv-cache f16|exact] [--threads N] [--max-model-len N]\n"
"                  [--gpu-memory SIZE] [--temperature T] [--top-k K] [--top-p P]\n"
"                  [-s SEED] [--ceiling GBPS] [--trace FILE.json[.gz]] [--json]\n"
"Profile decode steps (or a prefill) kernel by kernel; a profiled run is not a speed.\n"
"  -m, --model PATH        a .gguf or a folder holding one (default: the tiny preset)\n"
"      --device DEV        cpu (default) or cuda:N\n"
"      --context C         prefill C token ids first (default 512 for decode, 0 with\n"
"                          --prefill); id i is 1000 + 7919*i mod (n_vocab - 1000)\n"
"  -n, --steps N           profile N decode steps, or N prefills (default 8)\n"
"      --prefill P         profile the prefill of P more ids instead of decode steps\n"
"      --graph on|off      GPU: replay each decode step from a CUDA graph (default on)\n"
"      --hc H              GPU hyper-connection gate: fused (default) or eager\n"
"      --sublayer W        sublayer input width: f32 (default), bf16, f16\n"
"      --resid W           residual stream width: f32 (default), f16, bf16\n"
"      --prec P            CPU arithmetic: f32 (default) or f64\n"
"      --kv-cache K        latent cache values: f16 (default with f32) or exact (CPU)\n"
"      --threads N         CPU threads (default 0 = all)\n"
"      --max-model-len N   positions the cache holds (default: the library's, or\n"
"                          what the profile needs when that is more)\n"
"      --gpu-memory SIZE   device memory x4 may hold (e.g. 20G)\n"
"      --temperature T     the pick: 0 = greedy (default)\n"
"      --top-k K           keep the K most likely tokens (default 0 = off)\n"
"      --top-p P           nucleus mass (default 1 = off)\n"
"  -s, --seed N            sampler seed (default 0)\n"
"      --ceiling GBPS      the streaming-read ceiling in GB/s (default: measured here)\n"
"      --trace FILE        write a Chrome trace (ui.perfetto.dev); gzip for FILE.gz\n"
"      --json              one JSON object a line instead of the TSV\n"
"  -h, --help              this help\n"
"      --version           version, commit and CUDA runtime\n"
"Exit status: 0 done, 1 failure (or a profile that failed its own checks),\n"
"2 usage, 128+N killed by signal N (SIGINT, SIGTERM, SIGHUP) with no trace left.\n");
}

__attribute__((format(printf, 1, 2))) static void die_usage(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fprintf(stderr, PROG ": ");
	vfprintf(stderr, fmt, ap);
	fprintf(stderr, " (see " PROG " -h)\n");
	va_end(ap);
	exit(2);
}

static long parse_long(const char *s, long lo, long hi, const char *opt)
{
	long v;
	x4_err e;
	if (x4_parse_long(s, lo, hi, opt, &v, &e))
		die_usage("%s", e.msg);
	return v;
}

static double parse_double(const char *s, double lo, double hi, const char *opt)
{
	char *end;
	errno = 0;
	double v = strtod(s, &end);
	if (!*s || *end || errno || !isfinite(v) || v < lo || v > hi)
		die_usage("%s '%s': expected a number in [%g, %g]", opt, s, lo, hi);
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
	if (!*s || *s == '-' || *end || errno || v == 0 || v > (UINT64_MAX >> 30))
		die_usage("%s '%s': expected a size such as 20G, 512M or 300000K", opt, s);
	return (uint64_t)v * mult;
}

/* One of names[] (NULL-terminated) -> its index. */
static int parse_choice(const char *s, const char *opt, const char *const *names)
{
	for (int i = 0; names[i]; i++)
		if (strcmp(s, names[i]) == 0)
			return i;
	char list[128] = "";
	for (int i = 0; names[i]; i++)
		snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s",
			 i ? (names[i + 1] ? ", " : " or ") : "", names[i]);
	die_usage("%s '%s': expected %s", opt, s, list);
	return 0;
}

struct opts {
	const char *model, *trace;
	char device[32];
	long context, steps, prefill;
	bool context_given, json;
	double ceiling;
	x4_trunk_opts trunk;
	x4_sampler_opts samp;
};

static const char *const resid_names[] = { "f32", "f16", "bf16", NULL };
static const char *const sub_names[] = { "f32", "bf16", "f16", NULL };
static const char *const prec_names[] = { "f32", "f64", NULL };
static const char *const onoff[] = { "on", "off", NULL };
static const char *const hc_names[] = { "fused", "eager", NULL };
static const char *const kv_names[] = { "f16", "exact", NULL };

static void parse_args(int argc, char **argv, struct opts *o)
{
	enum { O_DEVICE = 256, O_CONTEXT, O_PREFILL, O_GRAPH, O_HC, O_SUB, O_RESID, O_PREC, O_KV,
	       O_THREADS, O_MAXLEN, O_GPUMEM, O_TEMP, O_TOPK, O_TOPP, O_CEIL, O_TRACE, O_JSON,
	       O_VERSION };
	static const struct option lo[] = {
		{"model", required_argument, 0, 'm'},
		{"device", required_argument, 0, O_DEVICE},
		{"context", required_argument, 0, O_CONTEXT},
		{"steps", required_argument, 0, 'n'},
		{"prefill", required_argument, 0, O_PREFILL},
		{"graph", required_argument, 0, O_GRAPH},
		{"hc", required_argument, 0, O_HC},
		{"sublayer", required_argument, 0, O_SUB},
		{"resid", required_argument, 0, O_RESID},
		{"prec", required_argument, 0, O_PREC},
		{"kv-cache", required_argument, 0, O_KV},
		{"threads", required_argument, 0, O_THREADS},
		{"max-model-len", required_argument, 0, O_MAXLEN},
		{"gpu-memory", required_argument, 0, O_GPUMEM},
		{"temperature", required_argument, 0, O_TEMP},
		{"top-k", required_argument, 0, O_TOPK},
		{"top-p", required_argument, 0, O_TOPP},
		{"seed", required_argument, 0, 's'},
		{"ceiling", required_argument, 0, O_CEIL},
		{"trace", required_argument, 0, O_TRACE},
		{"json", no_argument, 0, O_JSON},
		{"help", no_argument, 0, 'h'},
		{"version", no_argument, 0, O_VERSION},
		{0, 0, 0, 0},
	};
	memset(o, 0, sizeof *o);
	o->steps = 8;
	o->context = 512;
	x4_trunk_opts_default(&o->trunk);
	o->samp.top_p = 1.0f;
	snprintf(o->device, sizeof o->device, "cpu");
	int c;
	x4_err pe;
	while ((c = getopt_long(argc, argv, "m:n:s:h", lo, NULL)) != -1) {
		switch (c) {
		case 'm': o->model = optarg; break;
		case O_DEVICE:
			if (x4_parse_device(optarg, &o->trunk.device, &pe))
				die_usage("%s", pe.msg);
			snprintf(o->device, sizeof o->device, "%s", optarg);
			break;
		case O_CONTEXT:
			o->context = parse_long(optarg, 0, INT_MAX / 4, "--context");
			o->context_given = true;
			break;
		case 'n': o->steps = parse_long(optarg, 1, 1000000, "--steps"); break;
		case O_PREFILL: o->prefill = parse_long(optarg, 1, INT_MAX / 4, "--prefill"); break;
		case O_GRAPH: o->trunk.no_graph = parse_choice(optarg, "--graph", onoff) == 1; break;
		case O_HC: o->trunk.hc_eager = parse_choice(optarg, "--hc", hc_names) == 1; break;
		case O_SUB: o->trunk.sublayer = parse_choice(optarg, "--sublayer", sub_names); break;
		case O_RESID: o->trunk.resid = parse_choice(optarg, "--resid", resid_names); break;
		case O_PREC: o->trunk.prec = parse_choice(optarg, "--prec", prec_names); break;
		case O_KV:
			o->trunk.kv = parse_choice(optarg, "--kv-cache", kv_names) ? X4_KV_EXACT
										    : X4_KV_F16;
			break;
		case O_THREADS: o->trunk.threads = (int)parse_long(optarg, 0, 4096, "--threads"); break;
		case O_MAXLEN:
			o->trunk.max_ctx = (int)parse_long(optarg, 1, INT_MAX, "--max-model-len");
			break;
		case O_GPUMEM: o->trunk.mem_limit = parse_size(optarg, "--gpu-memory"); break;
		case O_TEMP: o->samp.temperature = (float)parse_double(optarg, 0, 1e6, "--temperature"); break;
		case O_TOPK: o->samp.top_k = (int)parse_long(optarg, 0, INT_MAX, "--top-k"); break;
		case O_TOPP: o->samp.top_p = (float)parse_double(optarg, 1e-9, 1, "--top-p"); break;
		case 's': {
			char *end;
			errno = 0;
			unsigned long long v = strtoull(optarg, &end, 10);
			if (!*optarg || *end || errno || *optarg == '-')
				die_usage("-s '%s': expected an unsigned integer", optarg);
			o->samp.seed = v;
			break;
		}
		case O_CEIL: o->ceiling = parse_double(optarg, 1e-3, 1e9, "--ceiling"); break;
		case O_TRACE:
			if (!*optarg)
				die_usage("--trace needs a file name");
			o->trace = optarg;
			break;
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
		die_usage("unexpected argument '%s'", argv[optind]);
	if (o->prefill && !o->context_given)
		o->context = 0;
	if (!o->prefill && o->context < 1)
		die_usage("--context %ld: a decode step needs at least one token before it",
			  o->context);
}

/* The fixed prompt: spread over the vocabulary above its special low ids,
 * the same on every run, so a context is exactly the count asked for. */
static int32_t prompt_id(long i, int n_vocab)
{
	if (n_vocab <= 2000)
		return (int32_t)(i % n_vocab);
	return (int32_t)(1000 + (i * 7919) % (n_vocab - 1000));
}

/* ---- the runs ---- */

struct run {
	const struct opts *o;
	x4_trunk *t;
	const int32_t *ids; /* [context + prefill] */
	double *walls;      /* [steps] seconds, the unprofiled pass */
};

/* One pass over the steps: timed by the host (p NULL), or bracketed for the
 * profiler, which is attached once the context is in place.  The first
 * step is a warm-up (on a GPU, the graph's capture) and is not counted. */
static int pass(struct run *r, x4_prof **p, x4_err *e)
{
	const struct opts *o = r->o;
	x4_sampler *smp = NULL;
	int rc = x4_sampler_create(&smp, &o->samp, e);
	if (rc)
		return rc;
	int C = (int)o->context, P = (int)o->prefill;
	int32_t next = 0;
	x4_trunk_reset(r->t);
	if (!P)
		rc = x4_trunk_forward_next(r->t, r->ids, C, smp, &o->samp, &next, NULL, e);
	if (!rc && p)
		rc = x4_prof_attach(p, r->t, e);
	for (long i = -1; i < o->steps && !rc; i++) {
		if (got_signal) {
			rc = x4_err_set(e, X4_EINTR, "interrupted");
			break;
		}
		if (P) {
			x4_trunk_reset(r->t);
			if (C)
				rc = x4_trunk_forward(r->t, r->ids, C, NULL, false, e);
			if (rc)
				break;
		}
		int32_t id = next;
		if (p)
			x4_prof_step_begin(*p, i >= 0);
		double t0 = x4_now();
		rc = P ? x4_trunk_forward_next(r->t, r->ids + C, P, smp, &o->samp, &next, NULL, e)
		       : x4_trunk_forward_next(r->t, &id, 1, smp, &o->samp, &next, NULL, e);
		double dt = x4_now() - t0;
		if (p)
			x4_prof_step_end(*p);
		if (!rc && i >= 0 && !p)
			r->walls[i] = dt;
	}
	x4_sampler_free(smp);
	return rc;
}

/* ---- output ---- */

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

static void json_str(FILE *f, const char *s)
{
	fputc('"', f);
	for (; *s; s++) {
		unsigned char ch = (unsigned char)*s;
		if (ch == '"' || ch == '\\')
			fprintf(f, "\\%c", ch);
		else if (ch < 0x20)
			fprintf(f, "\\u%04x", ch);
		else
			fputc(ch, f);
	}
	fputc('"', f);
}

static const char *kv_name(const x4_trunk_opts *t)
{
	if (t->kv == X4_KV_EXACT || (t->kv == X4_KV_DEFAULT && t->prec == X4_PREC_F64 && t->device < 0))
		return "exact";
	return "f16";
}

/* The run's record, one JSON object: what can change a number. */
static char *run_json(const struct opts *o, const x4_model *m, const x4_paths *paths,
		      const x4_trunk_stats *ts, const x4_prof_summary *s, double ceiling,
		      const char *ceiling_desc)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	if (!f)
		return NULL;
	int threads = o->trunk.threads ? o->trunk.threads : x4_ncpu();
	fprintf(f, "{\"section\":\"run\",\"profiled\":true,\"note\":\"" NOTE "\",\"mode\":\"%s\","
		"\"context\":%ld,\"prefill\":%ld,\"steps\":%ld,\"tokens_step\":%d,\"device\":",
		o->prefill ? "prefill" : "decode", o->context, o->prefill, o->steps, s->tokens);
	json_str(f, o->device);
	fprintf(f, ",\"device_name\":");
	json_str(f, ts->device);
	fprintf(f, ",\"model\":");
	json_str(f, paths->gguf);
	fprintf(f, ",\"model_fingerprint\":\"%s\",\"commit\":\"%s\",\"version\":\"%s\","
		"\"cuda_runtime\":\"%s\",\"graph\":\"%s\",\"hc\":\"%s\",\"sublayer\":\"%s\","
		"\"resid\":\"%s\",\"prec\":\"%s\",\"kv_cache\":\"%s\",\"threads\":%d,\"max_ctx\":%d,"
		"\"prefill_chunk\":%d,\"gpu_memory_bytes\":%llu,\"temperature\":%g,\"top_k\":%d,"
		"\"top_p\":%g,\"seed\":%llu,\"ceiling_gbps\":%.1f,\"ceiling\":",
		x4_model_fingerprint(m), x4_commit(), x4_version(), x4_cuda_runtime(),
		o->trunk.no_graph ? "off" : "on", o->trunk.hc_eager ? "eager" : "fused",
		sub_names[o->trunk.sublayer], x4_resid_name(o->trunk.resid),
		prec_names[o->trunk.prec], kv_name(&o->trunk), threads, ts->max_ctx,
		ts->prefill_chunk, (unsigned long long)o->trunk.mem_limit, o->samp.temperature,
		o->samp.top_k, o->samp.top_p, (unsigned long long)o->samp.seed, ceiling);
	json_str(f, ceiling_desc);
	fprintf(f, ",\"cupti_dropped\":%llu,\"trace\":", (unsigned long long)s->dropped);
	if (o->trace)
		json_str(f, o->trace);
	else
		fprintf(f, "null");
	fprintf(f, "}");
	if (fclose(f) != 0) {
		free(buf);
		return NULL;
	}
	return buf;
}

/* One output row; NAN prints as NA (TSV) or null (JSON). */
struct row {
	const char *section, *name, *cls;
	double launches, us, share_pct, min_us, max_us, bytes, gbps, ceiling_pct;
};

static const char *const fields[] = {
	"section", "name", "class", "launches_step", "us_step", "share_pct", "min_us", "max_us",
	"bytes_step", "gbps", "ceiling_pct",
};
static const char *const fmts[] = { "%.2f", "%.3f", "%.2f", "%.3f", "%.3f", "%.0f", "%.1f", "%.1f" };

static void put_row(bool json, const struct row *r)
{
	double v[8] = { r->launches, r->us, r->share_pct, r->min_us, r->max_us, r->bytes, r->gbps,
			r->ceiling_pct };
	if (json) {
		printf("{\"section\":\"%s\",\"name\":", r->section);
		json_str(stdout, r->name);
		printf(",\"class\":\"%s\"", r->cls);
		for (int i = 0; i < 8; i++) {
			printf(",\"%s\":", fields[i + 3]);
			if (isfinite(v[i]))
				printf(fmts[i], v[i]);
			else
				printf("null");
		}
		printf(",\"profiled\":true}\n");
		return;
	}
	printf("%s\t%s\t%s", r->section, r->name, r->cls);
	for (int i = 0; i < 8; i++) {
		putchar('\t');
		if (isfinite(v[i]))
			printf(fmts[i], v[i]);
		else
			printf("NA");
	}
	putchar('\n');
}

/* GB/s of bytes over us microseconds, and its share of the ceiling. */
static void rate(struct row *r, double bytes, double us, double ceiling)
{
	r->bytes = bytes >= 0 ? bytes : NAN;
	r->gbps = bytes > 0 && us > 0 ? bytes / us / 1e3 : NAN;
	r->ceiling_pct = isfinite(r->gbps) && ceiling > 0 ? 100 * r->gbps / ceiling : NAN;
}

static struct row prof_row(const char *section, const x4_prof_row *p, double ceiling)
{
	struct row r = { section, p->name, x4_prof_class_name(p->cls), p->launches, p->us,
			 100 * p->share, p->min_us, p->max_us, NAN, NAN, NAN };
	rate(&r, p->bytes, p->us, ceiling);
	return r;
}

/* A row of the step section. */
static struct row step_row(const char *name, double launches, double us, double wall)
{
	struct row r = { "step", name, "-", launches, us, NAN, NAN, NAN, NAN, NAN, NAN };
	r.share_pct = isfinite(us) && wall > 0 ? 100 * us / wall : NAN;
	return r;
}

static void print_tables(const struct opts *o, const x4_prof_result *res, double ceiling,
			 const double *unprof)
{
	const x4_prof_summary *s = &res->s;
	if (!o->json) {
		for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++)
			printf("%s%s", i ? "\t" : "", fields[i]);
		putchar('\n');
	}
	for (int i = 0; i < res->n_kernels; i++) {
		struct row r = prof_row("kernel", &res->kernels[i], ceiling);
		put_row(o->json, &r);
	}
	for (int i = 0; i < res->n_classes; i++) {
		struct row r = prof_row("class", &res->classes[i], ceiling);
		put_row(o->json, &r);
	}
	double steps = s->steps ? s->steps : 1, wall = s->wall_us;
	struct row r = step_row("kernels", s->kernels, s->kernel_us, wall);
	r.share_pct = NAN;
	rate(&r, s->bytes, s->kernel_us, ceiling);
	put_row(o->json, &r);
	r = step_row("enqueued", (double)s->enqueued_total / steps, NAN, wall);
	put_row(o->json, &r);
	r = step_row("unattributed", (double)s->unattributed / steps, NAN, wall);
	put_row(o->json, &r);
	r = step_row("outside_step", (double)s->outside / steps, NAN, wall);
	put_row(o->json, &r);
	r = step_row("device_busy", NAN, s->busy_us, wall);
	rate(&r, s->bytes, s->busy_us, ceiling);
	put_row(o->json, &r);
	r = step_row("gaps", s->gaps, s->gap_us, wall);
	r.max_us = s->gap_max_us;
	put_row(o->json, &r);
	r = step_row("step_wall", 1, wall, wall);
	r.min_us = s->wall_min_us;
	r.max_us = s->wall_max_us;
	rate(&r, s->bytes, wall, ceiling);
	put_row(o->json, &r);
	r = step_row("host_submit", NAN, s->submit_us >= 0 ? s->submit_us : NAN, wall);
	if (s->submit_us >= 0) {
		r.min_us = s->submit_min_us;
		r.max_us = s->submit_max_us;
	}
	put_row(o->json, &r);
	r = step_row("unprofiled_step", 1, unprof[0], wall);
	r.min_us = unprof[2];
	r.max_us = unprof[3];
	rate(&r, s->bytes, unprof[0], ceiling);
	put_row(o->json, &r);
	r = step_row("overhead", NAN, wall - unprof[0], wall);
	r.share_pct = unprof[0] > 0 ? 100 * (wall - unprof[0]) / unprof[0] : NAN;
	put_row(o->json, &r);
}

/* What went wrong with the profile itself; 0 when nothing. */
static int check_profile(const x4_prof_summary *s, char *msg, size_t cap)
{
	msg[0] = 0;
	if (s->mismatched_steps)
		snprintf(msg + strlen(msg), cap - strlen(msg), "; %d of %d steps have a kernel count "
			 "(%lld in all) other than what the trunk enqueued (%lld)",
			 s->mismatched_steps, s->steps, (long long)s->kernels_total,
			 (long long)s->enqueued_total);
	if (s->unattributed)
		snprintf(msg + strlen(msg), cap - strlen(msg), "; %lld kernels were launched by no "
			 "marked operation", (long long)s->unattributed);
	if (s->outside)
		snprintf(msg + strlen(msg), cap - strlen(msg), "; %lld kernels lie outside their "
			 "step's host bracket", (long long)s->outside);
	if (s->dropped)
		snprintf(msg + strlen(msg), cap - strlen(msg), "; CUPTI dropped %llu records",
			 (unsigned long long)s->dropped);
	return msg[0] != 0;
}

int main(int argc, char **argv)
{
	struct opts o;
	parse_args(argc, argv, &o);
	if (o.trunk.device >= 0 && !x4_prof_have_cupti()) {
		bool cuda = strcmp(x4_cuda_runtime(), "none") != 0;
		fprintf(stderr, PROG ": --device %s: this build of x4 has no %s, so it cannot "
			"profile a GPU; rebuild with %s, or use --device cpu\n", o.device,
			cuda ? "CUPTI (the CUDA Toolkit's profiling library was not found beside "
			       "cudart at build time)" : "CUDA (nvcc was not found at build time)",
			cuda ? "CUPTI installed beside cudart" : "the CUDA Toolkit");
		return 1;
	}
	size_t tl = o.trace ? strlen(o.trace) : 0;
	if (tl > 3 && strcmp(o.trace + tl - 3, ".gz") == 0 && !x4_prof_have_zlib()) {
		fprintf(stderr, PROG ": --trace %s: this build of x4 has no zlib (install "
			"zlib1g-dev and rebuild, or drop the .gz)\n", o.trace);
		return 1;
	}
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_signal;
	sigemptyset(&sa.sa_mask);
	sa.sa_flags = SA_RESTART;
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);

	char defmodel[4096];
	if (!o.model) {
		x4_default_model(defmodel, sizeof defmodel);
		o.model = defmodel;
	}
	x4_err e = {0};
	x4_paths paths;
	x4_model *m = NULL;
	x4_trunk *t = NULL;
	x4_prof *prof = NULL;
	int32_t *ids = NULL;
	double *walls = NULL;
	char *rj = NULL;
	int status = 1;
	if (x4_paths_resolve(o.model, NULL, &paths, &e) || x4_model_open(&m, &paths, &e)) {
		fprintf(stderr, PROG ": %s%s\n", e.msg, o.model == defmodel && access(defmodel, F_OK)
			? " (the default model is the tiny preset: run `make tiny`, or give -m)" : "");
		return 1;
	}
	const x4_config *cfg = x4_model_config(m);
	/* Positions: the context, then a warm-up and the steps (decode) or
	 * the prompt (prefill). */
	long need = o.context + (o.prefill ? o.prefill : o.steps + 1);
	long deflen = cfg->n_ctx_train < 4096 ? cfg->n_ctx_train : 4096;
	if (need > cfg->n_ctx_train) {
		fprintf(stderr, PROG ": the profile needs %ld positions and the model's context is "
			"%d: lower --context, --steps or --prefill\n", need, cfg->n_ctx_train);
		goto out;
	}
	if (o.trunk.max_ctx && need > o.trunk.max_ctx) {
		fprintf(stderr, PROG ": the profile needs %ld positions, more than --max-model-len "
			"%d: raise it, or lower --context, --steps or --prefill\n", need,
			o.trunk.max_ctx);
		goto out;
	}
	if (!o.trunk.max_ctx && need > deflen)
		o.trunk.max_ctx = (int)need;
	if (x4_trunk_create(&t, m, &o.trunk, &e)) {
		fprintf(stderr, PROG ": %s\n", e.msg);
		goto out;
	}
	ids = malloc(sizeof *ids * (size_t)(o.context + o.prefill));
	walls = malloc(sizeof *walls * (size_t)o.steps);
	if (!ids || !walls) {
		fprintf(stderr, PROG ": out of memory for %ld steps\n", o.steps);
		goto out;
	}
	for (long i = 0; i < o.context + o.prefill; i++)
		ids[i] = prompt_id(i, cfg->n_vocab);

	/* The ceiling first, while nothing else runs and nothing is profiled. */
	double ceiling = o.ceiling;
	char cdesc[256] = "given with --ceiling";
	if (!ceiling && x4_prof_ceiling(o.trunk.device, o.trunk.threads, &ceiling, cdesc,
					sizeof cdesc, &e)) {
		fprintf(stderr, PROG ": the read ceiling: %s\n", e.msg);
		goto out;
	}
	struct run r = { &o, t, ids, walls };
	int rc = pass(&r, NULL, &e);
	if (!rc)
		rc = pass(&r, &prof, &e);
	x4_prof_result res;
	if (!rc)
		rc = x4_prof_finish(prof, &res, &e);
	if (rc == X4_EINTR || got_signal)
		goto out;
	if (rc) {
		fprintf(stderr, PROG ": %s\n", e.msg);
		goto out;
	}
	/* The unprofiled steps as the profile gives its own: mean, median, extremes. */
	qsort(walls, (size_t)o.steps, sizeof *walls, cmp_double);
	double sum = 0;
	for (long i = 0; i < o.steps; i++)
		sum += walls[i];
	double mid = o.steps % 2 ? walls[o.steps / 2]
				 : 0.5 * (walls[o.steps / 2 - 1] + walls[o.steps / 2]);
	double unprof[4] = { sum / (double)o.steps * 1e6, mid * 1e6, walls[0] * 1e6,
			     walls[o.steps - 1] * 1e6 };
	x4_trunk_stats ts;
	x4_trunk_get_stats(t, &ts);
	rj = run_json(&o, m, &paths, &ts, &res.s, ceiling, cdesc);
	if (!rj) {
		fprintf(stderr, PROG ": out of memory\n");
		goto out;
	}
	if (o.json) {
		printf("%s\n", rj);
	} else {
		int threads = o.trunk.threads ? o.trunk.threads : x4_ncpu();
		fprintf(stderr, "# " NOTE "\n");
		fprintf(stderr, PROG ": model %s (fingerprint %s), device %s (%s), commit %s\n",
			paths.gguf, x4_model_fingerprint(m), o.device, ts.device, x4_commit());
		fprintf(stderr, PROG ": %s of %d token%s at context %ld, %ld steps; graph %s, hc %s, "
			"sublayer %s, resid %s, prec %s, kv-cache %s, threads %d, max-model-len %d, "
			"prefill chunk %d, temperature %g, top_k %d, top_p %g, seed %llu\n",
			o.prefill ? "prefill" : "decode", res.s.tokens, res.s.tokens == 1 ? "" : "s",
			o.context, o.steps, o.trunk.no_graph ? "off" : "on",
			o.trunk.hc_eager ? "eager" : "fused", sub_names[o.trunk.sublayer],
			x4_resid_name(o.trunk.resid), prec_names[o.trunk.prec], kv_name(&o.trunk),
			threads, ts.max_ctx, ts.prefill_chunk, o.samp.temperature, o.samp.top_k,
			o.samp.top_p, (unsigned long long)o.samp.seed);
		fprintf(stderr, PROG ": read ceiling %.1f GB/s (%s)\n", ceiling, cdesc);
		fprintf(stderr, PROG ": step %.3f ms profiled, %.3f ms unprofiled (means of %ld; "
			"medians %.3f and %.3f ms): the profile adds %+.1f%%\n", res.s.wall_us / 1e3,
			unprof[0] / 1e3, o.steps, res.s.wall_median_us / 1e3, unprof[1] / 1e3,
			unprof[0] > 0 ? 100 * (res.s.wall_us - unprof[0]) / unprof[0] : 0.0);
	}
	print_tables(&o, &res, ceiling, unprof);
	if (o.json) {
		const x4_prof_summary *s = &res.s;
		printf("{\"section\":\"summary\",\"profiled\":true,\"note\":\"" NOTE "\",\"steps\":%d,"
		       "\"tokens_step\":%d,\"pos\":%d,\"kernels_step\":%.2f,\"kernels_total\":%lld,"
		       "\"enqueued_total\":%lld,\"mismatched_steps\":%d,\"unattributed\":%lld,"
		       "\"outside_step\":%lld,\"kernel_us_step\":%.3f,\"busy_us_step\":%.3f,"
		       "\"gaps_step\":%.2f,\"gap_us_step\":%.3f,\"gap_max_us\":%.3f,"
		       "\"wall_us\":%.3f,\"wall_median_us\":%.3f,\"wall_min_us\":%.3f,"
		       "\"wall_max_us\":%.3f,", s->steps,
		       s->tokens, s->pos, s->kernels, (long long)s->kernels_total,
		       (long long)s->enqueued_total, s->mismatched_steps, (long long)s->unattributed,
		       (long long)s->outside, s->kernel_us, s->busy_us, s->gaps, s->gap_us,
		       s->gap_max_us, s->wall_us, s->wall_median_us, s->wall_min_us, s->wall_max_us);
		if (s->submit_us >= 0)
			printf("\"submit_us\":%.3f,", s->submit_us);
		else
			printf("\"submit_us\":null,");
		printf("\"unprofiled_us\":%.3f,\"unprofiled_median_us\":%.3f,"
		       "\"unprofiled_min_us\":%.3f,\"unprofiled_max_us\":%.3f,"
		       "\"overhead_pct\":%.2f,\"ceiling_gbps\":%.1f}\n", unprof[0], unprof[1],
		       unprof[2], unprof[3],
		       unprof[0] > 0 ? 100 * (s->wall_us - unprof[0]) / unprof[0] : 0.0, ceiling);
	}
	fflush(stdout);
	if (o.trace) {
		rc = x4_prof_write_trace(prof, o.trace, rj, stop_requested, NULL, &e);
		if (rc == X4_EINTR || got_signal)
			goto out;
		if (rc) {
			fprintf(stderr, PROG ": %s\n", e.msg);
			goto out;
		}
		if (!o.json)
			fprintf(stderr, PROG ": trace %s: %d steps\n", o.trace, res.s.steps);
	}
	char msg[1024];
	if (check_profile(&res.s, msg, sizeof msg)) {
		fprintf(stderr, PROG ": the profile failed its own checks: %s\n", msg + 2);
		goto out;
	}
	status = 0;
out:
	x4_prof_free(prof);
	x4_trunk_free(t);
	x4_model_close(m);
	free(ids);
	free(walls);
	free(rj);
	if (got_signal) {
		/* Nothing half-written is left (the trace is renamed only when
		 * whole); then die of the signal as the shell expects. */
		fflush(stdout);
		return 128 + got_signal;
	}
	return status;
}
