/*
 * tool.c - the helpers every x4 tool shares (see tool.h).
 */
#include "tool.h"

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

const char *x4t_prog = "x4";

void x4t_usage_error(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fprintf(stderr, "%s: ", x4t_prog);
	vfprintf(stderr, fmt, ap);
	fprintf(stderr, " (see %s -h)\n", x4t_prog);
	va_end(ap);
	exit(2);
}

void x4t_warn(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fprintf(stderr, "%s: ", x4t_prog);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
}

void x4t_die(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fprintf(stderr, "%s: ", x4t_prog);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
	exit(1);
}

long x4t_long(const char *s, long lo, long hi, const char *opt)
{
	char *end;
	errno = 0;
	long v = strtol(s, &end, 10);
	if (!*s || *end || errno || v < lo || v > hi)
		x4t_usage_error("%s '%s': expected an integer in [%ld, %ld]", opt, s, lo, hi);
	return v;
}

double x4t_double(const char *s, double lo, double hi, const char *opt)
{
	char *end;
	errno = 0;
	double v = strtod(s, &end);
	if (!*s || *end || errno || !isfinite(v) || v < lo || v > hi)
		x4t_usage_error("%s '%s': expected a number in [%g, %g]", opt, s, lo, hi);
	return v;
}

uint64_t x4t_u64(const char *s, const char *opt)
{
	char *end;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (!*s || *end || errno || *s == '-' || *s == '+' || *s == ' ')
		x4t_usage_error("%s '%s': expected an unsigned integer", opt, s);
	return v;
}

uint64_t x4t_size(const char *s, const char *opt)
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
		x4t_usage_error("%s '%s': expected a size such as 20G, 512M or 300000K", opt, s);
	return (uint64_t)v * mult;
}

int x4t_device(const char *s)
{
	if (strcmp(s, "cpu") == 0)
		return -1;
	if (strncmp(s, "cuda:", 5) == 0) {
		char *end;
		errno = 0;
		long v = strtol(s + 5, &end, 10);
		if (s[5] && !*end && !errno && v >= 0 && v <= 1023)
			return (int)v;
	}
	x4t_usage_error("--device '%s': expected cpu or cuda:N", s);
}

void x4t_ids(const char *s, int32_t **ids, size_t *n)
{
	size_t cap = 1;
	for (const char *p = s; *p; p++)
		cap += *p == ',';
	int32_t *v = malloc(cap * sizeof *v);
	if (!v)
		x4t_die("out of memory for the token ids");
	size_t k = 0;
	for (const char *p = s;;) {
		char *end;
		errno = 0;
		long x = strtol(p, &end, 10);
		if (end == p || errno || x < 0 || x > INT32_MAX || (*end && *end != ',')) {
			free(v);
			x4t_usage_error("--tokens '%s': expected comma-separated ids like 1,5,9", s);
		}
		v[k++] = (int32_t)x;
		if (!*end)
			break;
		p = end + 1;
	}
	*ids = v;
	*n = k;
}

const char x4t_trunk_help[] =
"      --max-model-len N   positions the cache holds (default min(the model's\n"
"                          context, 4096); at most the model's context)\n"
"      --resid W           residual stream width: f32 (default), f16, bf16\n"
"      --prec P            CPU arithmetic: f32 (default) or f64 (the reference)\n"
"      --kv-cache K        latent cache values: f16 (default with f32) or exact\n"
"                          (the arithmetic's own width; CPU only)\n"
"      --sublayer W        the width attention and the FFN are handed their\n"
"                          normed input in: f32 (default), bf16, f16\n"
"      --hc H              GPU hyper-connection gate: fused (default, one kernel)\n"
"                          or eager (the multi-kernel path, for comparison)\n"
"      --graph on|off      GPU: replay each decode step from a captured CUDA\n"
"                          graph (default on) or launch it eagerly\n"
"      --threads N         CPU threads (default 0 = all)\n"
"      --prefill-chunk N   tokens a prefill forward takes at once (default 0:\n"
"                          automatic, 64 on the CPU, up to 512 on a GPU)\n"
"      --pdl on|off        GPU, sm_90 and later: programmatic dependent launch,\n"
"                          each kernel's weight loads issued before it waits for\n"
"                          its input (default on)\n"
"      --attn A            GPU attention, decode and prefill: auto (default: mma\n"
"                          where the card and the checkpoint take it, else fp32),\n"
"                          fp32, or mma (tensor cores: sm_80 and later, the\n"
"                          model's shape)\n"
"      --gemm G            GPU products: mma (default: tensor cores on sm_80 and\n"
"                          later, fp32-accurate: the prefill's, and the decode\n"
"                          step's IQ4_NL ones and LM head) or fma (the CUDA-core\n"
"                          kernels everywhere, for comparison)\n"
"      --copy C            GPU decode: how the IQ4_NL tensor-core products copy\n"
"                          their weights: block (default: a block's rows as one\n"
"                          contiguous span) or warp (each warp its own slice,\n"
"                          for comparison); the same bits\n";

const char x4t_load_help[] =
"      --device DEV        cpu (default) or cuda:N\n"
"      --gpu-memory SIZE   device memory x4 may hold (e.g. 20G; default: what\n"
"                          is free); a model that does not fit is refused\n";

const char x4t_sampler_help[] =
"      --temperature T     0 = greedy (default 0)\n"
"      --top-k K           keep the K most likely tokens (default 0 = off)\n"
"      --top-p P           nucleus sampling mass (default 1 = off)\n";

static int pick(const char *opt, const char *arg, const char *const *names, int n)
{
	for (int i = 0; i < n; i++)
		if (strcmp(arg, names[i]) == 0)
			return i;
	char list[128] = "";
	for (int i = 0; i < n; i++)
		snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s",
			 i ? (i == n - 1 ? " or " : ", ") : "", names[i]);
	x4t_usage_error("%s '%s': expected %s", opt, arg, list);
}

bool x4t_trunk_opt(int c, const char *arg, x4_trunk_opts *o)
{
	static const char *const resid[] = { "f32", "f16", "bf16" };   /* enum x4_resid */
	static const char *const prec[] = { "f32", "f64" };            /* enum x4_prec */
	static const char *const kv[] = { "f16", "exact" };            /* X4_KV_F16, _EXACT */
	static const char *const hc[] = { "fused", "eager" };
	static const char *const sub[] = { "f32", "bf16", "f16" };     /* enum x4_sub */
	static const char *const onoff[] = { "on", "off" };
	static const char *const attn[] = { "fp32", "mma", "auto" };   /* enum x4_attn */
	static const char *const gemm[] = { "mma", "fma" };            /* enum x4_gemm */
	static const char *const copy[] = { "block", "warp" };         /* warp_copy */
	switch (c) {
	case X4T_O_MAXLEN: o->max_ctx = (int)x4t_long(arg, 1, INT_MAX, "--max-model-len"); break;
	case X4T_O_RESID: o->resid = pick("--resid", arg, resid, 3); break;
	case X4T_O_PREC: o->prec = pick("--prec", arg, prec, 2); break;
	case X4T_O_KV: o->kv = pick("--kv-cache", arg, kv, 2) ? X4_KV_EXACT : X4_KV_F16; break;
	case X4T_O_HC: o->hc_eager = pick("--hc", arg, hc, 2) == 1; break;
	case X4T_O_SUB: o->sublayer = pick("--sublayer", arg, sub, 3); break;
	case X4T_O_GRAPH: o->no_graph = pick("--graph", arg, onoff, 2) == 1; break;
	case X4T_O_THREADS: o->threads = (int)x4t_long(arg, 0, 4096, "--threads"); break;
	case X4T_O_CHUNK: o->prefill_chunk = (int)x4t_long(arg, 0, 1 << 20, "--prefill-chunk"); break;
	case X4T_O_PDL: o->pdl = pick("--pdl", arg, onoff, 2) == 0; break;
	case X4T_O_ATTN: o->attn = pick("--attn", arg, attn, 3); break;
	case X4T_O_GEMM: o->gemm = pick("--gemm", arg, gemm, 2); break;
	case X4T_O_COPY: o->warp_copy = pick("--copy", arg, copy, 2) == 1; break;
	default: return false;
	}
	return true;
}

bool x4t_load_opt(int c, const char *arg, x4_trunk_opts *o)
{
	switch (c) {
	case X4T_O_DEVICE: o->device = x4t_device(arg); break;
	case X4T_O_GPUMEM: o->mem_limit = x4t_size(arg, "--gpu-memory"); break;
	default: return false;
	}
	return true;
}

bool x4t_sampler_opt(int c, const char *arg, x4_sampler_opts *o)
{
	switch (c) {
	case X4T_O_TEMP: o->temperature = (float)x4t_double(arg, 0, 1e6, "--temperature"); break;
	case X4T_O_TOPK: o->top_k = (int)x4t_long(arg, 0, INT_MAX, "--top-k"); break;
	case X4T_O_TOPP: o->top_p = (float)x4t_double(arg, 1e-9, 1, "--top-p"); break;
	default: return false;
	}
	return true;
}

void x4t_device_opts_check(const x4_trunk_opts *o)
{
	if (o->device < 0 && o->mem_limit)
		x4t_usage_error("--gpu-memory caps device memory and means nothing on the CPU: drop "
				"it, or add --device cuda:N");
	if (o->device >= 0 && o->prec == X4_PREC_F64)
		x4t_usage_error("--prec f64 is the CPU reference: use it with --device cpu");
	if (o->device >= 0 && o->kv == X4_KV_EXACT)
		x4t_usage_error("--kv-cache exact runs on the CPU only: the GPU's cache is fp16");
}

const char *x4t_prec_name(int prec) { return prec == X4_PREC_F64 ? "f64" : "f32"; }

const char *x4t_sub_name(int s)
{
	return s == X4_SUB_BF16 ? "bf16" : s == X4_SUB_F16 ? "f16" : "f32";
}

const char *x4t_attn_name(int device, int attn)
{
	return device < 0 ? "n/a" : attn == X4_ATTN_MMA ? "mma" : attn == X4_ATTN_AUTO ? "auto" : "fp32";
}

const char *x4t_gemm_name(const x4_trunk_opts *o)
{
	return o->device < 0 ? "n/a" : o->gemm == X4_GEMM_FMA ? "fma" : "mma";
}

const char *x4t_kv_name(const x4_trunk_opts *o)
{
	if (o->kv == X4_KV_F16)
		return "f16";
	if (o->kv == X4_KV_EXACT)
		return "exact";
	return o->prec == X4_PREC_F64 && o->device < 0 ? "exact" : "f16";
}

const char *x4t_copy_name(const x4_trunk_opts *o)
{
	return o->device < 0 ? "n/a" : o->warp_copy ? "warp" : "block";
}

void x4t_settings(const x4_trunk_opts *o, const x4_sampler_opts *so, char *out, size_t cap)
{
	char chunk[16], ctx[16];
	snprintf(chunk, sizeof chunk, "%d", o->prefill_chunk);
	snprintf(ctx, sizeof ctx, "%d", o->max_ctx);
	snprintf(out, cap, "hc=%s graph=%s pdl=%s attn=%s gemm=%s copy=%s sublayer=%s resid=%s prec=%s "
		 "kv=%s max_ctx=%s chunk=%s threads=%d temperature=%g top_k=%d top_p=%g seed=%llu",
		 o->device < 0 ? "n/a" : o->hc_eager ? "eager" : "fused",
		 o->device < 0 ? "n/a" : o->no_graph ? "off" : "on",
		 o->device < 0 ? "n/a" : o->pdl ? "on" : "off", x4t_attn_name(o->device, o->attn), x4t_gemm_name(o),
		 x4t_copy_name(o), x4t_sub_name(o->sublayer),
		 x4_resid_name(o->resid), x4t_prec_name(o->prec), x4t_kv_name(o),
		 o->max_ctx ? ctx : "auto", o->prefill_chunk ? chunk : "auto",
		 o->threads ? o->threads : x4_ncpu(), so->temperature, so->top_k, so->top_p,
		 (unsigned long long)so->seed);
}

const char *x4t_device_name(int device, char *buf, size_t n)
{
	if (device < 0)
		snprintf(buf, n, "cpu");
	else
		snprintf(buf, n, "cuda:%d", device);
	return buf;
}

/* <bindir>/../build/models/tiny in the build tree, else
 * <bindir>/../share/x4/models/tiny where `make install` puts it; the build
 * tree's path when neither is there, for the message. */
void x4t_default_model(char *out, size_t cap)
{
	char exe[3900]; /* leaves room in a 4096-byte out for the suffix */
	ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
	if (n <= 0) {
		snprintf(out, cap, "build/models/tiny");
		return;
	}
	exe[n] = 0;
	for (int i = 0; i < 2; i++) { /* drop the file name, then bin/ */
		char *slash = strrchr(exe, '/');
		if (slash)
			*slash = 0;
	}
	struct stat st;
	snprintf(out, cap, "%s/share/x4/models/tiny", exe);
	if (stat(out, &st) == 0 && S_ISDIR(st.st_mode)) {
		char build[4096];
		snprintf(build, sizeof build, "%s/build/models/tiny", exe);
		if (stat(build, &st) != 0)
			return;
	}
	snprintf(out, cap, "%s/build/models/tiny", exe);
}

const char *x4t_default_model_hint(const char *model, const char *defmodel)
{
	if (model == defmodel && access(defmodel, F_OK) != 0)
		return " (the default model is the tiny preset: run `make tiny`, or give -m)";
	return "";
}

static int out_errno; /* the first failed write's errno, 0 while all went well */

bool x4t_out(const void *p, size_t n)
{
	if (out_errno)
		return false;
	if (n && fwrite(p, 1, n, stdout) != n)
		out_errno = errno ? errno : EIO;
	return !out_errno;
}

bool x4t_outf(const char *fmt, ...)
{
	if (out_errno)
		return false;
	va_list ap;
	va_start(ap, fmt);
	if (vfprintf(stdout, fmt, ap) < 0)
		out_errno = errno ? errno : EIO;
	va_end(ap);
	return !out_errno;
}

bool x4t_out_flush(void)
{
	if (!out_errno && (fflush(stdout) != 0 || ferror(stdout)))
		out_errno = errno ? errno : EIO;
	return !out_errno;
}

bool x4t_out_failed(void) { return out_errno != 0; }

static void report(const char *what)
{
	x4t_warn("writing %s%sto stdout failed: %s", what ? what : "", what ? " " : "",
		 strerror(out_errno ? out_errno : EIO));
}

void x4t_out_report(void) { report(NULL); }

int x4t_out_done(const char *what)
{
	if (x4t_out_flush())
		return 0;
	report(what);
	return 1;
}

volatile sig_atomic_t x4t_stop_signal;

static void on_stop(int sig)
{
	if (!x4t_stop_signal)
		x4t_stop_signal = sig;
	signal(sig, SIG_DFL); /* a second one ends the process at once */
}

void x4t_catch_stop_signals(void)
{
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_stop;
	sigemptyset(&sa.sa_mask);
	sa.sa_flags = SA_RESTART;
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);
}

int x4t_utf8_len(const unsigned char *s, size_t n)
{
	int len = s[0] < 0x80 ? 1 : (s[0] >> 5) == 6 ? 2 : (s[0] >> 4) == 14 ? 3
		: (s[0] >> 3) == 30 ? 4 : 0;
	if (!len || (size_t)len > n || (len == 2 && s[0] < 0xc2))
		return 0;
	for (int i = 1; i < len; i++)
		if ((s[i] & 0xc0) != 0x80)
			return 0;
	return len;
}

void x4t_json_str(FILE *f, const char *s, size_t n)
{
	const unsigned char *u = (const unsigned char *)s;
	fputc('"', f);
	for (size_t i = 0; i < n;) {
		int len = x4t_utf8_len(u + i, n - i);
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

char *x4t_slurp(FILE *f, const char *name, size_t *len)
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
	if (!buf || ferror(f))
		x4t_die("cannot read %s: %s", name, buf ? strerror(errno) : "out of memory");
	buf[n] = 0;
	*len = n;
	return buf;
}

char *x4t_prompt_read(const char *file, size_t *len)
{
	bool in = !file || strcmp(file, "-") == 0;
	FILE *f = in ? stdin : fopen(file, "rb");
	if (!f)
		x4t_die("cannot open the prompt file %s: %s", file, strerror(errno));
	char *text = x4t_slurp(f, in ? "the prompt from stdin" : file, len);
	if (!in)
		fclose(f);
	if (!*len && !file) {
		free(text);
		return NULL;
	}
	if (*len && text[*len - 1] == '\n') {
		text[--*len] = 0;
		if (*len && text[*len - 1] == '\r')
			text[--*len] = 0;
	}
	return text;
}
