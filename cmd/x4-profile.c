/*
 * x4-profile - where a step's time goes, kernel by kernel.
 *
 * Prefills a fixed sequence of token ids to the context asked for, runs
 * decode steps as x4-run runs them (x4_trunk_forward_next with one token,
 * graphed unless --graph off), first unprofiled and timed by the host, then
 * again with the library's profiler attached (lib/prof/prof.c: CUPTI's activity
 * records on a GPU, wall-clock timers around each operation on the CPU),
 * and prints one TSV table: a row per kernel, a row per sublayer class, and
 * rows for the step as a whole.  A profiled run is not a speed; the
 * unprofiled step is printed beside it so that the profile's cost is stated.
 */
#include "tool.h"

#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PROG "x4-profile"
#define NOTE "profiled run: not a speed"

static bool stop_requested(void *ctx) { (void)ctx; return x4t_stop_signal != 0; }

static void usage(FILE *f)
{
	fprintf(f,
"usage: " PROG " [-m PATH] [--device cpu|cuda:N] [--context C] [-n|--steps N]\n"
"                  [--prefill P] [--graph on|off] [--hc fused|eager] [--attn auto|fp32|mma]\n"
"                  [--gemm mma|fma] [--copy block|warp]\n"
"                  [--sublayer f32|bf16|f16] [--resid f32|f16|bf16] [--prec f32|f64]\n"
"                  [--kv-cache f16|exact] [--threads N] [--prefill-chunk N]\n"
"                  [--max-model-len N] [--gpu-memory SIZE] [--temperature T]\n"
"                  [--top-k K] [--top-p P] [-s SEED] [--ceiling GBPS]\n"
"                  [--trace FILE.json[.gz]] [--json]\n"
"Profile decode steps (or a prefill) kernel by kernel; a profiled run is not a speed.\n"
"  -m, --model PATH        a .gguf or a folder holding one (default: the tiny preset)\n"
"      --context C         prefill C token ids first (default 512 for decode, 0 with\n"
"                          --prefill); id i is 1000 + 7919*i mod (n_vocab - 1000)\n"
"  -n, --steps N           profile N decode steps, or N prefills (default 8)\n"
"      --prefill P         profile the prefill of P more ids instead of decode steps\n"
"  -s, --seed N            sampler seed (default 0)\n"
"      --ceiling GBPS      the streaming-read ceiling in GB/s (default: measured here)\n"
"      --trace FILE        write a Chrome trace (ui.perfetto.dev); gzip for FILE.gz\n"
"      --json              one JSON object a line instead of the TSV\n"
"  -h, --help              this help\n"
"      --version           version, commit and CUDA runtime\n"
"The trunk (--max-model-len defaults to what the profile needs when that is more):\n"
"%s%s"
"The pick:\n"
"%s"
"Exit status: 0 done, 1 failure (or a profile that failed its own checks),\n"
"2 usage, 128+N stopped by signal N (SIGINT, SIGTERM, SIGHUP) with no trace left.\n",
		x4t_load_help, x4t_trunk_help, x4t_sampler_help);
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

static void parse_args(int argc, char **argv, struct opts *o)
{
	enum { O_CONTEXT = 256, O_PREFILL, O_CEIL, O_TRACE, O_JSON, O_VERSION };
	static const struct option lo[] = {
		{"model", required_argument, 0, 'm'},
		{"context", required_argument, 0, O_CONTEXT},
		{"steps", required_argument, 0, 'n'},
		{"prefill", required_argument, 0, O_PREFILL},
		{"seed", required_argument, 0, 's'},
		{"ceiling", required_argument, 0, O_CEIL},
		{"trace", required_argument, 0, O_TRACE},
		{"json", no_argument, 0, O_JSON},
		{"help", no_argument, 0, 'h'},
		{"version", no_argument, 0, O_VERSION},
		X4T_TRUNK_LONGOPTS,
		X4T_LOAD_LONGOPTS,
		X4T_SAMPLER_LONGOPTS,
		{0, 0, 0, 0},
	};
	memset(o, 0, sizeof *o);
	o->steps = 8;
	o->context = 512;
	x4_trunk_opts_default(&o->trunk);
	o->samp.top_p = 1.0f;
	int c;
	while ((c = getopt_long(argc, argv, "m:n:s:h", lo, NULL)) != -1) {
		if (x4t_trunk_opt(c, optarg, &o->trunk) || x4t_load_opt(c, optarg, &o->trunk) ||
		    x4t_sampler_opt(c, optarg, &o->samp))
			continue;
		switch (c) {
		case 'm': o->model = optarg; break;
		case O_CONTEXT:
			o->context = x4t_long(optarg, 0, INT_MAX / 4, "--context");
			o->context_given = true;
			break;
		case 'n': o->steps = x4t_long(optarg, 1, 1000000, "--steps"); break;
		case O_PREFILL: o->prefill = x4t_long(optarg, 1, INT_MAX / 4, "--prefill"); break;
		case 's': o->samp.seed = x4t_u64(optarg, "-s"); break;
		case O_CEIL: o->ceiling = x4t_double(optarg, 1e-3, 1e9, "--ceiling"); break;
		case O_TRACE:
			if (!*optarg)
				x4t_usage_error("--trace needs a file name");
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
		x4t_usage_error("unexpected argument '%s'", argv[optind]);
	if (o->prefill && !o->context_given)
		o->context = 0;
	if (!o->prefill && o->context < 1)
		x4t_usage_error("--context %ld: a decode step needs at least one token before it",
				o->context);
	x4t_device_name(o->trunk.device, o->device, sizeof o->device);
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
		if (x4t_stop_signal) {
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

static void json_str(FILE *f, const char *s) { x4t_json_str(f, s, strlen(s)); }

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
		"\"cuda_runtime\":\"%s\",\"graph\":\"%s\",\"hc\":\"%s\",\"attn\":\"%s\",\"gemm\":\"%s\",\"copy\":\"%s\","
		"\"sublayer\":\"%s\","
		"\"resid\":\"%s\",\"prec\":\"%s\",\"kv_cache\":\"%s\",\"threads\":%d,\"max_ctx\":%d,"
		"\"prefill_chunk\":%d,\"gpu_memory_bytes\":%llu,\"temperature\":%g,\"top_k\":%d,"
		"\"top_p\":%g,\"seed\":%llu,\"ceiling_gbps\":%.1f,\"ceiling\":",
		x4_model_fingerprint(m), x4_commit(), x4_version(), x4_cuda_runtime(),
		o->trunk.no_graph ? "off" : "on", o->trunk.hc_eager ? "eager" : "fused",
		x4t_attn_name(o->trunk.device, ts->attn), x4t_gemm_name(&o->trunk), x4t_copy_name(&o->trunk),
		x4t_sub_name(o->trunk.sublayer),
		x4_resid_name(o->trunk.resid),
		x4t_prec_name(o->trunk.prec), x4t_kv_name(&o->trunk), threads, ts->max_ctx,
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
	double launches, us, share_pct, min_us, max_us, bytes, gbps, ceiling_pct, exposed_us;
	double floor_us, over_us; /* the bytes' time at the ceiling; what the row costs past it */
};

static const char *const fields[] = {
	"section", "name", "class", "launches_step", "us_step", "share_pct", "min_us", "max_us",
	"bytes_step", "gbps", "ceiling_pct", "exposed_us", "floor_us", "over_floor_us",
};
static const char *const fmts[] = { "%.2f", "%.3f", "%.2f", "%.3f", "%.3f", "%.0f", "%.1f", "%.1f",
				    "%.3f", "%.3f", "%.3f" };
#define NVAL (sizeof fmts / sizeof fmts[0])

static void put_row(bool json, const struct row *r)
{
	double v[NVAL] = { r->launches, r->us, r->share_pct, r->min_us, r->max_us, r->bytes,
			   r->gbps, r->ceiling_pct, r->exposed_us, r->floor_us, r->over_us };
	if (json) {
		x4t_outf("{\"section\":\"%s\",\"name\":", r->section);
		x4t_json_str(stdout, r->name, strlen(r->name));
		x4t_outf(",\"class\":\"%s\"", r->cls);
		for (size_t i = 0; i < NVAL; i++) {
			x4t_outf(",\"%s\":", fields[i + 3]);
			if (isfinite(v[i]))
				x4t_outf(fmts[i], v[i]);
			else
				x4t_outf("null");
		}
		x4t_outf(",\"profiled\":true}\n");
		return;
	}
	x4t_outf("%s\t%s\t%s", r->section, r->name, r->cls);
	for (size_t i = 0; i < NVAL; i++) {
		x4t_outf("\t");
		if (isfinite(v[i]))
			x4t_outf(fmts[i], v[i]);
		else
			x4t_outf("NA");
	}
	x4t_outf("\n");
}

/* GB/s of bytes over us microseconds, and its share of the ceiling; the
 * bytes' time at the ceiling, and what `own` microseconds (the row's
 * exposed time, or a step row's own) cost past it. */
static void rate(struct row *r, double bytes, double us, double ceiling, double own)
{
	r->bytes = bytes >= 0 ? bytes : NAN;
	r->gbps = bytes > 0 && us > 0 ? bytes / us / 1e3 : NAN;
	r->ceiling_pct = isfinite(r->gbps) && ceiling > 0 ? 100 * r->gbps / ceiling : NAN;
	r->floor_us = bytes >= 0 && ceiling > 0 ? bytes / ceiling / 1e3 : NAN;
	r->over_us = isfinite(r->floor_us) && isfinite(own) ? own - r->floor_us : NAN;
}

static struct row prof_row(const char *section, const x4_prof_row *p, double ceiling)
{
	struct row r = { section, p->name, x4_prof_class_name(p->cls), p->launches, p->us,
			 100 * p->share, p->min_us, p->max_us, NAN, NAN, NAN, p->exposed_us, NAN, NAN };
	rate(&r, p->bytes, p->us, ceiling, p->exposed_us);
	return r;
}

/* A row of the step section. */
static struct row step_row(const char *name, double launches, double us, double wall)
{
	struct row r = { "step", name, "-", launches, us, NAN, NAN, NAN, NAN, NAN, NAN, NAN, NAN, NAN };
	r.share_pct = isfinite(us) && wall > 0 ? 100 * us / wall : NAN;
	return r;
}

static void print_tables(const struct opts *o, const x4_prof_result *res, double ceiling,
			 const double *unprof)
{
	const x4_prof_summary *s = &res->s;
	if (!o->json) {
		for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++)
			x4t_outf("%s%s", i ? "\t" : "", fields[i]);
		x4t_outf("\n");
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
	rate(&r, s->bytes, s->kernel_us, ceiling, NAN);
	put_row(o->json, &r);
	r = step_row("enqueued", (double)s->enqueued_total / steps, NAN, wall);
	put_row(o->json, &r);
	/* a graphed step's dependencies between kernels, by kind (NA: no graph) */
	const double gs = s->graphed_steps;
	r = step_row("pdl_edges", gs ? (double)s->pdl_edges_total / gs : NAN, NAN, wall);
	put_row(o->json, &r);
	r = step_row("full_edges", gs ? (double)s->full_edges_total / gs : NAN, NAN, wall);
	put_row(o->json, &r);
	r = step_row("unattributed", (double)s->unattributed / steps, NAN, wall);
	put_row(o->json, &r);
	r = step_row("outside_step", (double)s->outside / steps, NAN, wall);
	put_row(o->json, &r);
	r = step_row("device_busy", NAN, s->busy_us, wall);
	rate(&r, s->bytes, s->busy_us, ceiling, s->busy_us);
	put_row(o->json, &r);
	r = step_row("gaps", s->gaps, s->gap_us, wall);
	r.max_us = s->gap_max_us;
	put_row(o->json, &r);
	r = step_row("step_wall", 1, wall, wall);
	r.min_us = s->wall_min_us;
	r.max_us = s->wall_max_us;
	rate(&r, s->bytes, wall, ceiling, wall);
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
	rate(&r, s->bytes, unprof[0], ceiling, unprof[0]);
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

/* --json's last line: the step figures the checks use, means and medians. */
static void print_summary(const x4_prof_summary *s, const double *unprof, double ceiling)
{
	x4t_outf("{\"section\":\"summary\",\"profiled\":true,\"note\":\"" NOTE "\",\"steps\":%d,"
		 "\"tokens_step\":%d,\"pos\":%d,\"kernels_step\":%.2f,\"kernels_total\":%lld,"
		 "\"enqueued_total\":%lld,\"mismatched_steps\":%d,\"unattributed\":%lld,"
		 "\"outside_step\":%lld,\"kernel_us_step\":%.3f,\"busy_us_step\":%.3f,"
		 "\"gaps_step\":%.2f,\"gap_us_step\":%.3f,\"gap_max_us\":%.3f,\"wall_us\":%.3f,"
		 "\"wall_median_us\":%.3f,\"wall_min_us\":%.3f,\"wall_max_us\":%.3f,", s->steps,
		 s->tokens, s->pos, s->kernels, (long long)s->kernels_total,
		 (long long)s->enqueued_total, s->mismatched_steps, (long long)s->unattributed,
		 (long long)s->outside, s->kernel_us, s->busy_us, s->gaps, s->gap_us, s->gap_max_us,
		 s->wall_us, s->wall_median_us, s->wall_min_us, s->wall_max_us);
	if (s->graphed_steps)
		x4t_outf("\"graphed_steps\":%d,\"pdl_edges_step\":%.2f,\"full_edges_step\":%.2f,",
			 s->graphed_steps, (double)s->pdl_edges_total / s->graphed_steps,
			 (double)s->full_edges_total / s->graphed_steps);
	else
		x4t_outf("\"graphed_steps\":0,\"pdl_edges_step\":null,\"full_edges_step\":null,");
	if (s->submit_us >= 0)
		x4t_outf("\"submit_us\":%.3f,", s->submit_us);
	else
		x4t_outf("\"submit_us\":null,");
	if (s->bytes >= 0)
		x4t_outf("\"bytes_step\":%.0f,", s->bytes);
	else
		x4t_outf("\"bytes_step\":null,");
	x4t_outf("\"unprofiled_us\":%.3f,\"unprofiled_median_us\":%.3f,\"unprofiled_min_us\":%.3f,"
		 "\"unprofiled_max_us\":%.3f,\"overhead_pct\":%.2f,\"ceiling_gbps\":%.1f,"
		 "\"cupti_dropped\":%llu,\"graph_kernels\":%lld,\"graph_by_node\":%lld}\n", unprof[0],
		 unprof[1], unprof[2], unprof[3],
		 unprof[0] > 0 ? 100 * (s->wall_us - unprof[0]) / unprof[0] : 0.0, ceiling,
		 (unsigned long long)s->dropped, (long long)s->graph_kernels, (long long)s->by_node);
}

int main(int argc, char **argv)
{
	x4t_prog = PROG;
	struct opts o;
	parse_args(argc, argv, &o);
	if (o.trunk.device >= 0 && !x4_prof_have_cupti()) {
		bool cuda = strcmp(x4_cuda_runtime(), "none") != 0;
		x4t_die("--device %s: this build of x4 has no %s, so it cannot profile a GPU; "
			"rebuild with %s, or use --device cpu", o.device,
			cuda ? "CUPTI (the CUDA Toolkit's profiling library was not found beside "
			       "cudart at build time)" : "CUDA (nvcc was not found at build time)",
			cuda ? "CUPTI installed beside cudart" : "the CUDA Toolkit");
	}
	size_t tl = o.trace ? strlen(o.trace) : 0;
	if (tl > 3 && strcmp(o.trace + tl - 3, ".gz") == 0 && !x4_prof_have_zlib())
		x4t_die("--trace %s: this build of x4 has no zlib (install zlib1g-dev and rebuild, "
			"or drop the .gz)", o.trace);
	x4t_catch_stop_signals();

	char defmodel[4096];
	if (!o.model) {
		x4t_default_model(defmodel, sizeof defmodel);
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
	if (x4_paths_resolve(o.model, NULL, &paths, &e) || x4_model_open(&m, &paths, &e))
		x4t_die("%s%s", e.msg, x4t_default_model_hint(o.model, defmodel));
	const x4_config *cfg = x4_model_config(m);
	/* Positions: the context, then a warm-up and the steps (decode) or
	 * the prompt (prefill).  The library's default length when it holds
	 * them, as x4-run's (the decode attention's grid is sized from it). */
	long need = o.context + (o.prefill ? o.prefill : o.steps + 1);
	long deflen = cfg->n_ctx_train < 4096 ? cfg->n_ctx_train : 4096;
	if (need > cfg->n_ctx_train) {
		x4t_warn("the profile needs %ld positions and the model's context is %d: lower "
			 "--context, --steps or --prefill", need, cfg->n_ctx_train);
		goto out;
	}
	if (o.trunk.max_ctx && need > o.trunk.max_ctx) {
		x4t_warn("the profile needs %ld positions, more than --max-model-len %d: raise it, "
			 "or lower --context, --steps or --prefill", need, o.trunk.max_ctx);
		goto out;
	}
	if (!o.trunk.max_ctx && need > deflen)
		o.trunk.max_ctx = (int)need;
	if (x4_trunk_create(&t, m, &o.trunk, &e)) {
		x4t_warn("%s", e.msg);
		goto out;
	}
	ids = malloc(sizeof *ids * (size_t)(o.context + o.prefill));
	walls = malloc(sizeof *walls * (size_t)o.steps);
	if (!ids || !walls) {
		x4t_warn("out of memory for %ld steps", o.steps);
		goto out;
	}
	for (long i = 0; i < o.context + o.prefill; i++)
		ids[i] = prompt_id(i, cfg->n_vocab);

	/* The ceiling first, while nothing else runs and nothing is profiled. */
	double ceiling = o.ceiling;
	char cdesc[256] = "given with --ceiling";
	if (!ceiling && x4_prof_ceiling(o.trunk.device, o.trunk.threads, &ceiling, cdesc,
					sizeof cdesc, &e)) {
		x4t_warn("the read ceiling: %s", e.msg);
		goto out;
	}
	struct run r = { &o, t, ids, walls };
	int rc = pass(&r, NULL, &e);
	if (!rc)
		rc = pass(&r, &prof, &e);
	x4_prof_result res;
	if (!rc)
		rc = x4_prof_finish(prof, &res, &e);
	if (rc == X4_EINTR || x4t_stop_signal)
		goto out;
	if (rc) {
		x4t_warn("%s", e.msg);
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
		x4t_warn("out of memory");
		goto out;
	}
	if (o.json) {
		x4t_outf("%s\n", rj);
	} else {
		int threads = o.trunk.threads ? o.trunk.threads : x4_ncpu();
		fprintf(stderr, "# " NOTE "\n");
		x4t_warn("model %s (fingerprint %s), device %s (%s), commit %s", paths.gguf,
			 x4_model_fingerprint(m), o.device, ts.device, x4_commit());
		x4t_warn("%s of %d token%s at context %ld, %ld steps; graph %s, hc %s, attn %s, gemm %s, copy %s, "
			 "sublayer %s, resid %s, prec %s, kv-cache %s, threads %d, max-model-len %d, "
			 "prefill chunk %d, temperature %g, top_k %d, top_p %g, seed %llu",
			 o.prefill ? "prefill" : "decode", res.s.tokens, res.s.tokens == 1 ? "" : "s",
			 o.context, o.steps, o.trunk.no_graph ? "off" : "on",
			 o.trunk.hc_eager ? "eager" : "fused", x4t_attn_name(o.trunk.device, ts.attn), x4t_gemm_name(&o.trunk),
			 x4t_copy_name(&o.trunk), x4t_sub_name(o.trunk.sublayer),
			 x4_resid_name(o.trunk.resid), x4t_prec_name(o.trunk.prec),
			 x4t_kv_name(&o.trunk), threads, ts.max_ctx, ts.prefill_chunk,
			 o.samp.temperature, o.samp.top_k, o.samp.top_p,
			 (unsigned long long)o.samp.seed);
		x4t_warn("read ceiling %.1f GB/s (%s)", ceiling, cdesc);
		if (res.s.graph_kernels)
			x4t_warn("graph replays: %lld kernels, %lld matched to their capture by graph node, "
				 "the rest by start order", (long long)res.s.graph_kernels,
				 (long long)res.s.by_node);
		x4t_warn("step %.3f ms profiled, %.3f ms unprofiled (means of %ld; medians %.3f and "
			 "%.3f ms): the profile adds %+.1f%%", res.s.wall_us / 1e3, unprof[0] / 1e3,
			 o.steps, res.s.wall_median_us / 1e3, unprof[1] / 1e3,
			 unprof[0] > 0 ? 100 * (res.s.wall_us - unprof[0]) / unprof[0] : 0.0);
	}
	print_tables(&o, &res, ceiling, unprof);
	if (o.json)
		print_summary(&res.s, unprof, ceiling);
	if (!x4t_out_flush()) {
		x4t_out_report();
		goto out;
	}
	if (o.trace) {
		rc = x4_prof_write_trace(prof, o.trace, rj, stop_requested, NULL, &e);
		if (rc == X4_EINTR || x4t_stop_signal)
			goto out;
		if (rc) {
			x4t_warn("%s", e.msg);
			goto out;
		}
		if (!o.json)
			x4t_warn("trace %s: %d steps", o.trace, res.s.steps);
	}
	char msg[1024];
	if (check_profile(&res.s, msg, sizeof msg)) {
		x4t_warn("the profile failed its own checks: %s", msg + 2);
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
	/* Stopped by a signal: nothing half-written is left (the trace is
	 * renamed only when whole); the status a shell expects. */
	return x4t_stop_signal ? 128 + x4t_stop_signal : status;
}
