/*
 * tool.h - what every x4 tool shares and the library does not need: one
 * way to fail (`prog: message` on stderr; exit 2 for usage, 1 otherwise),
 * strict number parsing, the options a request takes (the same flag means
 * the same in every tool), checked writes to stdout, and the signals that
 * stop a run at its next boundary.  Only cmd/ includes this.
 */
#ifndef X4_TOOL_H
#define X4_TOOL_H

#include "x4.h"

#include <signal.h>
#include <stdio.h>

/* The tool's name for messages; set once at the top of main. */
extern const char *x4t_prog;

/* "prog: message (see prog -h)" and exit 2. */
void x4t_usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
/* "prog: message" on stderr (no exit). */
void x4t_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* "prog: message" and exit 1. */
void x4t_die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

/* Strict parsers: the whole of s, in range, or a usage error naming opt. */
long x4t_long(const char *s, long lo, long hi, const char *opt);
double x4t_double(const char *s, double lo, double hi, const char *opt);
uint64_t x4t_u64(const char *s, const char *opt);
/* "20G", "512M", "300000K" or plain bytes. */
uint64_t x4t_size(const char *s, const char *opt);
/* --device: "cpu" -> -1, "cuda:N" -> N. */
int x4t_device(const char *s);
/* --tokens: "1,5,9" -> *ids (malloc'd); ids in [0, INT32_MAX], the
 * vocabulary is the session's to check. */
void x4t_ids(const char *s, int32_t **ids, size_t *n);

/* The request options of the trunk as flags, shared by x4-run, x4-profile
 * and x4-bench-abab's arms: --max-model-len, --resid, --prec, --kv-cache,
 * --hc, --sublayer, --graph, --threads, --prefill-chunk, --pdl, --attn, --gemm, --copy.  X4T_TRUNK_LONGOPTS
 * goes into a getopt_long table; x4t_trunk_opt() handles one of them (true
 * when c was one). */
enum {
	X4T_O_MAXLEN = 1000, X4T_O_RESID, X4T_O_PREC, X4T_O_KV, X4T_O_HC, X4T_O_SUB,
	X4T_O_GRAPH, X4T_O_THREADS, X4T_O_CHUNK, X4T_O_PDL, X4T_O_ATTN, X4T_O_GEMM, X4T_O_COPY,
	/* the load options: they need the weights reloaded */
	X4T_O_DEVICE, X4T_O_GPUMEM,
	/* sampling */
	X4T_O_TEMP, X4T_O_TOPK, X4T_O_TOPP,
};
#define X4T_TRUNK_LONGOPTS                                              \
	{"max-model-len", required_argument, 0, X4T_O_MAXLEN},          \
	{"resid", required_argument, 0, X4T_O_RESID},                   \
	{"prec", required_argument, 0, X4T_O_PREC},                     \
	{"kv-cache", required_argument, 0, X4T_O_KV},                   \
	{"hc", required_argument, 0, X4T_O_HC},                         \
	{"sublayer", required_argument, 0, X4T_O_SUB},                  \
	{"graph", required_argument, 0, X4T_O_GRAPH},                   \
	{"threads", required_argument, 0, X4T_O_THREADS},               \
	{"prefill-chunk", required_argument, 0, X4T_O_CHUNK},            \
	{"pdl", required_argument, 0, X4T_O_PDL},                       \
	{"attn", required_argument, 0, X4T_O_ATTN},                     \
	{"gemm", required_argument, 0, X4T_O_GEMM},                     \
	{"copy", required_argument, 0, X4T_O_COPY}
#define X4T_LOAD_LONGOPTS                                               \
	{"device", required_argument, 0, X4T_O_DEVICE},                 \
	{"gpu-memory", required_argument, 0, X4T_O_GPUMEM}
#define X4T_SAMPLER_LONGOPTS                                            \
	{"temperature", required_argument, 0, X4T_O_TEMP},              \
	{"top-k", required_argument, 0, X4T_O_TOPK},                    \
	{"top-p", required_argument, 0, X4T_O_TOPP}
bool x4t_trunk_opt(int c, const char *arg, x4_trunk_opts *o);
bool x4t_load_opt(int c, const char *arg, x4_trunk_opts *o);
bool x4t_sampler_opt(int c, const char *arg, x4_sampler_opts *o);
/* Usage errors for options that mean nothing on the device chosen
 * (--gpu-memory on the CPU; --prec f64 and --kv-cache exact on a GPU). */
void x4t_device_opts_check(const x4_trunk_opts *o);
/* The help lines of those options, for a tool's usage text. */
extern const char x4t_trunk_help[], x4t_load_help[], x4t_sampler_help[];

/* Names of the option values, for stats lines and rows. */
const char *x4t_prec_name(int prec);
const char *x4t_sub_name(int sub);
/* The decode attention (fp32, mma; n/a on the CPU, which has one). */
/* "n/a" on the CPU, else the enum x4_attn's name. */
const char *x4t_attn_name(int device, int attn);
/* The prefill products' core (mma, fma; n/a on the CPU). */
const char *x4t_gemm_name(const x4_trunk_opts *o);
/* --copy's value (n/a on the CPU) */
const char *x4t_copy_name(const x4_trunk_opts *o);
/* What the cache holds as the trunk resolves X4_KV_DEFAULT. */
const char *x4t_kv_name(const x4_trunk_opts *o);
/* Every setting of a request that can change a number, as one word list
 * ("hc=fused graph=on pdl=on attn=fp32 gemm=mma sublayer=f32 resid=f32 prec=f32 kv=f16 max_ctx=4096
 * chunk=auto threads=2 temperature=0 top_k=0 top_p=1 seed=1"), for rows. */
void x4t_settings(const x4_trunk_opts *o, const x4_sampler_opts *so, char *out, size_t cap);
/* "cpu" or "cuda:N". */
const char *x4t_device_name(int device, char *buf, size_t n);

/* The tiny preset beside the running binary, the default model of every
 * tool: <bindir>/../build/models/tiny in the build tree, else
 * <bindir>/../share/x4/models/tiny where `make install` puts it (the library
 * does not know the build tree's shape); and the hint to append when it is
 * missing. */
void x4t_default_model(char *out, size_t cap);
const char *x4t_default_model_hint(const char *model, const char *defmodel);

/* Writes to stdout that stop at the first failure: x4t_out() returns false
 * (and x4t_out_failed() true) once a write or a flush failed; the message
 * names the cause.  With SIGPIPE ignored, a reader that went away is an
 * EPIPE here and ends the run. */
bool x4t_out(const void *p, size_t n);
bool x4t_outf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
bool x4t_out_flush(void);
bool x4t_out_failed(void);
/* "writing to stdout failed: <cause>" (exit status 1 follows). */
void x4t_out_report(void);
/* Flush; 0 when everything reached stdout, else 1 (the exit status) after
 * "writing <what> to stdout failed: <cause>" (what: "the help", "the
 * table"; NULL for none). */
int x4t_out_done(const char *what);

/* SIGINT, SIGTERM and SIGHUP set x4t_stop_signal (the first one's number)
 * and restore the default action, so a second signal ends the process at
 * once; a run checks the flag at its boundaries.  The exit status of a run
 * stopped so is 128 + the signal. */
extern volatile sig_atomic_t x4t_stop_signal;
void x4t_catch_stop_signals(void);

/* Length of the valid UTF-8 sequence at s (0 if invalid: a stray
 * continuation byte, a cut sequence, or the overlong lead bytes C0 and C1). */
int x4t_utf8_len(const unsigned char *s, size_t n);
/* A JSON string (invalid UTF-8 as U+FFFD). */
void x4t_json_str(FILE *f, const char *s, size_t n);

/* A whole stream, NUL-terminated (exit 1 on a read error). */
char *x4t_slurp(FILE *f, const char *name, size_t *len);
/* The prompt from file ("-" or NULL: stdin), one final newline (LF or
 * CRLF) dropped: it ends the line the user typed, it is not part of what
 * was asked.  NULL when file is NULL and stdin held nothing at all (a
 * script's </dev/null: no prompt was given); exit 1 when it cannot be
 * opened or read. */
char *x4t_prompt_read(const char *file, size_t *len);

#endif
