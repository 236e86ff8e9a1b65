/*
 * t.h - the tiny test harness every tests/test_*.c uses.
 *
 * Each check prints one line, "PASS name" or "FAIL name: why", so that
 * tests/run.sh can count them across C and Python tests alike; a failing
 * line carries what is needed to rerun the case (op, type, shape, seed).
 */
#ifndef X4_T_H
#define X4_T_H

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int t_passed, t_failed;

static void t_result(int ok, const char *name, const char *fmt, ...)
	__attribute__((format(printf, 3, 4), unused));
static void t_result(int ok, const char *name, const char *fmt, ...)
{
	if (ok) {
		t_passed++;
		printf("PASS %s\n", name);
	} else {
		t_failed++;
		printf("FAIL %s: ", name);
		va_list ap;
		va_start(ap, fmt);
		vprintf(fmt, ap);
		va_end(ap);
		printf("\n");
	}
	fflush(stdout);
}

/* T_OK(cond, name, fmt, ...): one check. */
#define T_OK(cond, name, ...) t_result(!!(cond), (name), __VA_ARGS__)

/* The GPU kernel tests take OP[:CASE] on the command line, to rerun what a
 * FAIL line printed: OP is the operation ("moe_router", "gemv", "rmsnorm";
 * a case names itself "op OP ..." or by its check's name), CASE a piece of
 * its case text ("nan-bias", "tokens 70 tile 64").  t_want(op, cas) is true
 * when no filter is set, or op (NULL: any) is OP and cas contains CASE. */
static const char *t_op, *t_case;
static void t_filter(int argc, char **argv) __attribute__((unused));
static void t_filter(int argc, char **argv)
{
	static char buf[256];
	if (argc < 2)
		return;
	if (argc > 2 || argv[1][0] == '-' || strlen(argv[1]) >= sizeof buf) {
		fprintf(stderr, "usage: %s [OP[:CASE]]\n", argv[0]);
		exit(2);
	}
	strcpy(buf, argv[1]);
	char *colon = strchr(buf, ':');
	if (colon) {
		*colon = 0;
		t_case = colon + 1;
	}
	t_op = buf;
}
static int t_want(const char *op, const char *cas) __attribute__((unused));
static int t_want(const char *op, const char *cas)
{
	size_t n = op ? strlen(op) : 0; /* "hc" takes "hc_post": a group by its prefix */
	if (t_op && op && (strncmp(t_op, op, n) != 0 || (t_op[n] && t_op[n] != '_')))
		return 0;
	return !t_case || !cas || strstr(cas, t_case) != NULL;
}

/* The source tree's root, for tests that run built binaries (tests/run.sh
 * runs every test from there). */
static int t_done(void) __attribute__((unused));
static int t_done(void)
{
	printf("# %d passed, %d failed\n", t_passed, t_failed);
	return t_failed ? 1 : 0;
}

#endif
