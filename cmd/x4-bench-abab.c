/*
 * x4-bench-abab - price one set of request options against another in one
 * process, on the same loaded weights.
 *
 * Two copies of a full-size model do not fit on one card, and two
 * processes see different clocks, heat and page cache; so the arms run in
 * one session, in rounds of A B B A (a fixed order inside a pair biases a
 * comparison; ABBA cancels a linear drift), after warm-up runs that are
 * discarded.  A round's ratio is the summed decode time of its A runs over
 * its B runs; the control is the same arm on both sides of the bracket
 * (A1 against A2 of the round), the noise floor in this very process.  A
 * run whose generated token count differs from the others voids the
 * comparison: a rate over different work is not a rate (docs/measuring.md).
 */
#include "tool.h"

#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_ARGS 64

static void usage(FILE *f)
{
	fprintf(f,
"usage: x4-bench-abab [-m PATH] [--tokenizer DIR] [--device cpu|cuda:N]\n"
"                     [--gpu-memory SIZE] -a OPTIONS -b OPTIONS [--pairs N]\n"
"                     [--warmup N] [--prompt-tokens N] [-n N] [-s SEED]\n"
"                     [--stop-at-eos] [--json]\n"
"Compare two sets of request options in one process on the same weights:\n"
"rounds of A B B A, warm-up runs discarded, a control from the same arm.\n"
"  -m, --model PATH        a .gguf or a folder holding one (default: the tiny\n"
"                          preset, ../build/models/tiny beside this binary)\n"
"      --tokenizer DIR     the release's tokenizer folder\n"
"%s"
"  -a, --arm-a OPTIONS     arm A's options, e.g. \"--hc eager\" (\"\" = defaults)\n"
"  -b, --arm-b OPTIONS     arm B's options, e.g. \"--hc fused\"\n"
"                          (an arm takes the request options below and the\n"
"                          sampling ones; a load option is refused)\n"
"      --pairs N           ABBA rounds (default 4: 8 A and 8 B runs)\n"
"      --warmup N          runs before the rounds, alternating A and B, discarded\n"
"                          (default 2)\n"
"      --prompt-tokens N   the prompt, as N raw ids (default 512)\n"
"  -n, --tokens-max N      tokens each run generates (default 64)\n"
"  -s, --seed N            the sampler's seed, the same for every run (default 1)\n"
"      --stop-at-eos       stop at <_end> (default: never, so every run generates\n"
"                          the same count)\n"
"      --json              one JSON object instead of TSV\n"
"  (request options given outside -a and -b apply to both arms)\n"
"  -h, --help              this help\n"
"      --version           version, commit and CUDA runtime\n"
"Request options, for -a and -b (the cache is sized for the prompt and the\n"
"tokens unless --max-model-len is given):\n%s%s"
"Exit status: 0 a verdict, 1 a voided comparison or a failure, 2 usage.\n",
		x4t_load_help, x4t_trunk_help, x4t_sampler_help);
}

struct arm {
	const char *name;   /* "a" or "b" */
	const char *text;   /* the options as given */
	x4_trunk_opts trunk;
	x4_sampler_opts samp;
};

/* Split an arm's options on blanks and parse them as request options. */
static void parse_arm(struct arm *a, const char *flag, const x4_trunk_opts *base,
		      const x4_sampler_opts *sbase)
{
	static const struct option lo[] = {
		X4T_TRUNK_LONGOPTS, X4T_SAMPLER_LONGOPTS, X4T_LOAD_LONGOPTS,
		{"model", required_argument, 0, 'm'},
		{"tokenizer", required_argument, 0, 't'},
		{0, 0, 0, 0},
	};
	a->trunk = *base;
	a->samp = *sbase;
	char *copy = strdup(a->text);
	if (!copy)
		x4t_die("out of memory");
	char *argv[MAX_ARGS + 2] = { (char *)"arm" };
	int argc = 1;
	for (char *tok = strtok(copy, " \t\n"); tok; tok = strtok(NULL, " \t\n")) {
		if (argc > MAX_ARGS)
			x4t_usage_error("%s: more than %d words of options", flag, MAX_ARGS);
		argv[argc++] = tok;
	}
	argv[argc] = NULL;
	optind = 0; /* glibc: start a new scan */
	opterr = 0;
	int c;
	while ((c = getopt_long(argc, argv, ":", lo, NULL)) != -1) {
		if (x4t_trunk_opt(c, optarg, &a->trunk) || x4t_sampler_opt(c, optarg, &a->samp))
			continue;
		if (c == X4T_O_DEVICE || c == X4T_O_GPUMEM || c == 'm' || c == 't')
			x4t_usage_error("%s \"%s\": %s is a load option: changing it needs the "
					"weights reloaded, so both arms share it; give it once, "
					"outside the arms", flag, a->text, argv[optind - 1]);
		if (c == ':')
			x4t_usage_error("%s \"%s\": %s needs a value", flag, a->text,
					argv[optind - 1]);
		x4t_usage_error("%s \"%s\": '%s' is not a request option", flag, a->text,
				argv[optind - 1]);
	}
	if (optind < argc)
		x4t_usage_error("%s \"%s\": unexpected '%s'", flag, a->text, argv[optind]);
	/* a->text stays for the rows; the words are copied out of `copy` */
	free(copy);
	opterr = 1;
}

struct result {
	int kind;           /* 0 warm-up, 1 a measured run */
	int round;          /* -1 for warm-ups */
	int arm;            /* 0 A, 1 B */
	int seq;            /* its place in the process's order */
	size_t n_prompt, n_gen;
	double prefill_tok_s, decode_ms, first_ms;
	int stop;
};

struct ctx {
	const char *model_path, *fingerprint, *device, *commit;
	char types[256];
	int prompt_tokens;
};

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

/* median, min and max of v[0..n) (sorted in place) */
static void stats3(double *v, int n, double *med, double *lo, double *hi)
{
	qsort(v, (size_t)n, sizeof *v, cmp_double);
	*med = n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
	*lo = v[0];
	*hi = v[n - 1];
}

/* The type census: "IQ4_NL:243,BF16:327,F32:406,Q6_K:1", by first appearance. */
static void census(const x4_gguf *g, char *out, size_t cap)
{
	int types[64], counts[64], nt = 0;
	for (int64_t i = 0; i < x4_gguf_tensor_count(g); i++) {
		int ty = x4_gguf_tensor_at(g, i)->type, j = 0;
		while (j < nt && types[j] != ty)
			j++;
		if (j == nt && nt < 64) {
			types[nt] = ty;
			counts[nt++] = 0;
		}
		if (j < nt)
			counts[j]++;
	}
	out[0] = 0;
	for (int j = 0; j < nt; j++)
		snprintf(out + strlen(out), cap - strlen(out), "%s%s:%d", j ? "," : "",
			 x4_type_name(types[j]), counts[j]);
}

static void tsv_value(double v, const char *fmt)
{
	if (isfinite(v))
		x4t_outf(fmt, v);
	else
		x4t_outf("-");
}

static void tsv_row(const struct ctx *c, const char *kind, const char *round, const char *arm,
		    int seq, const struct result *r, const double *pre3, const double *dec3,
		    const double *ratio3, int max_ctx, const char *options)
{
	x4t_outf("%s\t%s\t%s\t", kind, round, arm);
	if (seq >= 0)
		x4t_outf("%d", seq);
	else
		x4t_outf("-");
	x4t_outf("\t%d\t", c->prompt_tokens);
	if (r)
		x4t_outf("%zu", r->n_gen);
	else
		x4t_outf("-");
	for (int i = 0; i < 3; i++) {
		x4t_outf("\t");
		tsv_value(pre3 ? pre3[i] : NAN, "%.2f");
	}
	for (int i = 0; i < 3; i++) {
		x4t_outf("\t");
		tsv_value(dec3 ? dec3[i] : NAN, "%.4f");
	}
	x4t_outf("\t");
	tsv_value(r ? r->first_ms : NAN, "%.3f");
	for (int i = 0; i < 3; i++) {
		x4t_outf("\t");
		tsv_value(ratio3 ? ratio3[i] : NAN, "%.4f");
	}
	x4t_outf("\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%s\n", c->model_path, c->fingerprint, c->types,
		 c->commit, c->device, c->prompt_tokens, max_ctx, *options ? options : "defaults");
}

int main(int argc, char **argv)
{
	x4t_prog = "x4-bench-abab";
	enum { O_TOK = 256, O_PAIRS, O_WARMUP, O_PROMPT, O_EOS, O_JSON, O_VERSION };
	static const struct option lo[] = {
		{"model", required_argument, 0, 'm'},
		{"tokenizer", required_argument, 0, O_TOK},
		{"arm-a", required_argument, 0, 'a'},
		{"arm-b", required_argument, 0, 'b'},
		{"pairs", required_argument, 0, O_PAIRS},
		{"warmup", required_argument, 0, O_WARMUP},
		{"prompt-tokens", required_argument, 0, O_PROMPT},
		{"tokens-max", required_argument, 0, 'n'},
		{"seed", required_argument, 0, 's'},
		{"stop-at-eos", no_argument, 0, O_EOS},
		{"json", no_argument, 0, O_JSON},
		{"help", no_argument, 0, 'h'},
		{"version", no_argument, 0, O_VERSION},
		X4T_LOAD_LONGOPTS, X4T_TRUNK_LONGOPTS, X4T_SAMPLER_LONGOPTS,
		{0, 0, 0, 0},
	};
	const char *model = NULL, *tokdir = NULL;
	struct arm arms[2] = { { .name = "a" }, { .name = "b" } };
	long pairs = 4, warmup = 2, prompt_tokens = 512, n_gen = 64;
	uint64_t seed = 1;
	bool stop_eos = false, json = false;
	x4_trunk_opts base;
	x4_trunk_opts_default(&base);
	x4_sampler_opts sbase = { .temperature = 0, .top_k = 0, .top_p = 1 };
	int c;
	while ((c = getopt_long(argc, argv, "m:a:b:n:s:h", lo, NULL)) != -1) {
		/* request options outside the arms are both arms' starting point */
		if (x4t_load_opt(c, optarg, &base) || x4t_trunk_opt(c, optarg, &base) ||
		    x4t_sampler_opt(c, optarg, &sbase))
			continue;
		switch (c) {
		case 'm': model = optarg; break;
		case O_TOK: tokdir = optarg; break;
		case 'a': arms[0].text = optarg; break;
		case 'b': arms[1].text = optarg; break;
		case O_PAIRS: pairs = x4t_long(optarg, 1, 1000, "--pairs"); break;
		case O_WARMUP: warmup = x4t_long(optarg, 0, 1000, "--warmup"); break;
		case O_PROMPT: prompt_tokens = x4t_long(optarg, 1, 1 << 24, "--prompt-tokens"); break;
		case 'n': n_gen = x4t_long(optarg, 2, 1 << 20, "-n"); break;
		case 's': seed = x4t_u64(optarg, "-s"); break;
		case O_EOS: stop_eos = true; break;
		case O_JSON: json = true; break;
		case 'h': usage(stdout); return 0;
		case O_VERSION:
			printf("x4-bench-abab %s (commit %s, CUDA runtime %s)\n", x4_version(),
			       x4_commit(), x4_cuda_runtime());
			return 0;
		default: usage(stderr); return 2;
		}
	}
	if (optind < argc)
		x4t_usage_error("unexpected argument '%s'", argv[optind]);
	if (!arms[0].text || !arms[1].text)
		x4t_usage_error("give both arms: -a OPTIONS and -b OPTIONS (\"\" for the defaults)");
	if (base.device < 0 && base.mem_limit)
		x4t_usage_error("--gpu-memory caps device memory and means nothing on the CPU");
	sbase.seed = seed;
	for (int i = 0; i < 2; i++) {
		/* sized for the prompt and the tokens unless told otherwise */
		x4_trunk_opts b = base;
		if (!b.max_ctx)
			b.max_ctx = (int)(prompt_tokens + n_gen + 1);
		parse_arm(&arms[i], i ? "-b" : "-a", &b, &sbase);
		if (arms[i].trunk.device >= 0 && arms[i].trunk.prec == X4_PREC_F64)
			x4t_usage_error("-%s: --prec f64 is the CPU reference", arms[i].name);
	}

	char defmodel[4096];
	if (!model) {
		x4t_default_model(defmodel, sizeof defmodel);
		model = defmodel;
	}
	x4_err e = {0};
	x4_paths paths;
	x4_session *s = NULL;
	if (x4_paths_resolve(model, tokdir, &paths, &e) || x4_session_open(&s, &paths, &e))
		x4t_die("%s%s", e.msg, x4t_default_model_hint(model, defmodel));
	const x4_model *m = x4_session_model(s);
	const x4_config *cfg = x4_model_config(m);
	int32_t *ids = malloc(sizeof *ids * (size_t)prompt_tokens); /* [prompt_tokens] */
	int nr = (int)(warmup + 4 * pairs);
	struct result *res = calloc((size_t)nr, sizeof *res);       /* [nr] in run order */
	if (!ids || !res)
		x4t_die("out of memory");
	/* Ordinary ids (past the control pieces), spread over the vocabulary. */
	int lo_id = cfg->n_vocab / 2 < 1000 ? cfg->n_vocab / 2 : 1000;
	int span = (cfg->n_vocab < 32000 ? cfg->n_vocab : 32000) - lo_id;
	for (long i = 0; i < prompt_tokens; i++)
		ids[i] = lo_id + (int32_t)((i * 7919) % span);
	/* The prompt must fit each arm; a cache that fills up during the
	 * generation shows as a different token count, which voids the run. */
	for (int i = 0; i < 2; i++)
		if (x4_session_check_prompt(s, (size_t)prompt_tokens, &arms[i].trunk, &e))
			x4t_die("arm %s: %s", arms[i].name, e.msg);
	if (x4_session_load(s, &arms[0].trunk, &e))
		x4t_die("%s", e.msg);
	x4t_catch_stop_signals();
	x4_trunk_stats ts;
	x4_trunk_get_stats(x4_session_trunk(s), &ts);
	struct ctx cx = { paths.gguf, x4_model_fingerprint(m), ts.device, x4_commit(), "",
			  (int)prompt_tokens };
	census(x4_model_gguf(m), cx.types, sizeof cx.types);
	int max_ctx[2];
	for (int i = 0; i < 2; i++)
		max_ctx[i] = x4_session_ctx(s, &arms[i].trunk);

	/* warm-ups alternate A, B; then each round is A B B A */
	int status = 1;
	for (int k = 0; k < nr; k++) {
		struct result *r = &res[k];
		if (k < warmup) {
			r->kind = 0;
			r->round = -1;
			r->arm = k % 2;
		} else {
			int j = k - (int)warmup;
			r->kind = 1;
			r->round = j / 4;
			r->arm = (j % 4 == 1 || j % 4 == 2);
		}
		r->seq = k;
		const struct arm *a = &arms[r->arm];
		x4_request req = {
			.ids = ids, .n_ids = (size_t)prompt_tokens, .max_tokens = n_gen,
			.sampler = a->samp, .ignore_eos = !stop_eos, .opts = &a->trunk,
		};
		x4_gen_stats st;
		if (x4_session_generate(s, &req, &st, &e)) {
			x4t_warn("run %d (arm %s): %s", k, a->name, e.msg);
			goto out;
		}
		if (x4t_stop_signal) {
			x4t_warn("stopped by signal %d after %d of %d runs", (int)x4t_stop_signal, k,
				 nr);
			status = 128 + x4t_stop_signal;
			goto out;
		}
		r->n_prompt = st.n_prompt;
		r->n_gen = st.n_gen;
		r->prefill_tok_s = st.prefill_tok_s;
		r->decode_ms = st.median_step_s * 1e3;
		r->first_ms = st.first_step_s * 1e3;
		r->stop = st.stop;
		if (isatty(2))
			fprintf(stderr, "\rx4-bench-abab: run %d of %d (%s, arm %s): %.3f ms a token",
				k + 1, nr, r->kind ? "measured" : "warm-up", a->name, r->decode_ms);
	}
	if (isatty(2))
		fputc('\n', stderr);

	/* The verdict: void when any run's token count differs. */
	bool voided = false;
	char why[256] = "";
	for (int k = 0; k < nr; k++)
		if (res[k].n_gen != res[0].n_gen || !isfinite(res[k].decode_ms)) {
			voided = true;
			snprintf(why, sizeof why, "run %d (arm %s) generated %zu tokens (stop %s) where "
				 "run 0 generated %zu%s", k, arms[res[k].arm].name, res[k].n_gen,
				 x4_stop_name(res[k].stop), res[0].n_gen,
				 isfinite(res[k].decode_ms) ? "" : ", so it has no steady step");
			break;
		}
	int np = (int)pairs, nm = 2 * np;
	double pre[2][2 * 1000], dec[2][2 * 1000], ratio[1000], ctrl[1000], pre_ratio[1000];
	int na[2] = { 0, 0 };
	for (int rd = 0; rd < np; rd++) {
		double a_ms = 0, b_ms = 0, a_pf = 0, b_pf = 0, a1 = NAN, a2 = NAN;
		for (int k = 0; k < nr; k++) {
			const struct result *r = &res[k];
			if (!r->kind || r->round != rd)
				continue;
			pre[r->arm][na[r->arm]] = r->prefill_tok_s;
			dec[r->arm][na[r->arm]++] = r->decode_ms;
			if (r->arm) {
				b_ms += r->decode_ms;
				b_pf += r->prefill_tok_s;
			} else {
				a_ms += r->decode_ms;
				a_pf += r->prefill_tok_s;
				if (isnan(a1))
					a1 = r->decode_ms;
				else
					a2 = r->decode_ms;
			}
		}
		ratio[rd] = a_ms / b_ms;     /* B's speed over A's */
		pre_ratio[rd] = b_pf / a_pf;
		ctrl[rd] = a1 / a2;          /* the bracket's second A over its first, as speed */
	}
	double arm3[2][2][3], r3[3], c3[3], p3[3];
	for (int i = 0; i < 2; i++) {
		stats3(pre[i], nm, &arm3[i][0][0], &arm3[i][0][1], &arm3[i][0][2]);
		stats3(dec[i], nm, &arm3[i][1][0], &arm3[i][1][1], &arm3[i][1][2]);
	}
	stats3(ratio, np, &r3[0], &r3[1], &r3[2]);
	stats3(ctrl, np, &c3[0], &c3[1], &c3[2]);
	stats3(pre_ratio, np, &p3[0], &p3[1], &p3[2]);

	char verdict[512];
	if (voided)
		snprintf(verdict, sizeof verdict, "void: %s; a rate over different work is not a "
			 "rate (keep --stop-at-eos off, or give the arms the same sampling)", why);
	else
		snprintf(verdict, sizeof verdict, "b/a %.3fx decode (rounds %.3f-%.3f), prefill "
			 "%.3fx (%.3f-%.3f), control %.3fx (%.3f-%.3f), %d pairs", r3[0], r3[1], r3[2],
			 p3[0], p3[1], p3[2], c3[0], c3[1], c3[2], np);

	if (!json) {
		x4t_outf("kind\tround\tarm\tseq\tprompt_tokens\tgenerated_tokens\tprefill_tok_s\t"
			 "prefill_tok_s_min\tprefill_tok_s_max\tdecode_ms_tok\tdecode_ms_tok_min\t"
			 "decode_ms_tok_max\tfirst_step_ms\tratio\tratio_min\tratio_max\tmodel\t"
			 "model_fingerprint\ttypes\tcommit\tdevice\tcontext\tmax_ctx\toptions\n");
		for (int k = 0; k < nr; k++) {
			const struct result *r = &res[k];
			char rd[16];
			snprintf(rd, sizeof rd, "%d", r->round);
			double p1[3] = { r->prefill_tok_s, NAN, NAN }, d1[3] = { r->decode_ms, NAN, NAN };
			tsv_row(&cx, r->kind ? "run" : "warmup", r->kind ? rd : "-", arms[r->arm].name,
				r->seq, r, p1, d1, NULL, max_ctx[r->arm], arms[r->arm].text);
		}
		for (int i = 0; i < 2; i++)
			tsv_row(&cx, "arm", "-", arms[i].name, -1, NULL, arm3[i][0], arm3[i][1], NULL,
				max_ctx[i], arms[i].text);
		if (!voided) {
			char both[1024];
			snprintf(both, sizeof both, "a: %s | b: %s", arms[0].text, arms[1].text);
			tsv_row(&cx, "ratio", "-", "b/a", -1, NULL, NULL, NULL, r3, max_ctx[1], both);
			tsv_row(&cx, "prefill_ratio", "-", "b/a", -1, NULL, NULL, NULL, p3, max_ctx[1],
				both);
			tsv_row(&cx, "control", "-", "a/a", -1, NULL, NULL, NULL, c3, max_ctx[0],
				arms[0].text);
		}
	} else {
		FILE *f = stdout;
		fprintf(f, "{\"tool\":\"x4-bench-abab\",\"model\":");
		x4t_json_str(f, cx.model_path, strlen(cx.model_path));
		fprintf(f, ",\"model_fingerprint\":\"%s\",\"types\":\"%s\",\"commit\":\"%s\","
			"\"device\":", cx.fingerprint, cx.types, cx.commit);
		x4t_json_str(f, cx.device, strlen(cx.device));
		fprintf(f, ",\"context\":%d,\"tokens\":%ld,\"pairs\":%d,\"warmup\":%ld,\"arms\":[",
			cx.prompt_tokens, n_gen, np, warmup);
		for (int i = 0; i < 2; i++) {
			fprintf(f, "%s{\"arm\":\"%s\",\"options\":", i ? "," : "", arms[i].name);
			x4t_json_str(f, arms[i].text, strlen(arms[i].text));
			fprintf(f, ",\"max_ctx\":%d,\"prefill_tok_s\":{\"median\":%.3f,\"min\":%.3f,"
				"\"max\":%.3f},\"decode_ms_tok\":{\"median\":%.5f,\"min\":%.5f,"
				"\"max\":%.5f}}", max_ctx[i], arm3[i][0][0], arm3[i][0][1],
				arm3[i][0][2], arm3[i][1][0], arm3[i][1][1], arm3[i][1][2]);
		}
		fprintf(f, "],\"runs\":[");
		for (int k = 0; k < nr; k++) {
			const struct result *r = &res[k];
			fprintf(f, "%s{\"seq\":%d,\"warmup\":%s,\"round\":%d,\"arm\":\"%s\","
				"\"generated_tokens\":%zu,\"stop\":\"%s\",\"prefill_tok_s\":%.3f,"
				"\"decode_ms_tok\":%.5f,\"first_step_ms\":%.4f}", k ? "," : "", r->seq,
				r->kind ? "false" : "true", r->round, arms[r->arm].name, r->n_gen,
				x4_stop_name(r->stop), isfinite(r->prefill_tok_s) ? r->prefill_tok_s : -1,
				isfinite(r->decode_ms) ? r->decode_ms : -1,
				isfinite(r->first_ms) ? r->first_ms : -1);
		}
		fprintf(f, "],\"void\":%s", voided ? "true" : "false");
		if (!voided)
			fprintf(f, ",\"ratio\":{\"median\":%.5f,\"min\":%.5f,\"max\":%.5f},"
				"\"prefill_ratio\":{\"median\":%.5f,\"min\":%.5f,\"max\":%.5f},"
				"\"control\":{\"median\":%.5f,\"min\":%.5f,\"max\":%.5f}", r3[0], r3[1],
				r3[2], p3[0], p3[1], p3[2], c3[0], c3[1], c3[2]);
		fprintf(f, ",\"verdict\":");
		x4t_json_str(f, verdict, strlen(verdict));
		fprintf(f, "}\n");
	}
	if (!x4t_out_flush()) {
		x4t_out_report();
		goto out;
	}
	x4t_warn("%s", verdict);
	status = voided ? 1 : 0;
out:
	x4_session_close(s);
	free(ids);
	free(res);
	return status;
}
