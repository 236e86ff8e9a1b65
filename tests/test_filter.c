/*
 * test_filter.c - the OP[:CASE] filter of the GPU parity program
 * (build/tests/gpu_kern, tests/t.h's t_filter and t_want), on the CPU: the
 * case names a FAIL line prints must rerun that case and no other.
 */
#include "t.h"

/* t_want(op, cas) after t_filter of one argument (NULL: none). */
static int want(const char *arg, const char *op, const char *cas)
{
	char prog[] = "gpu_kern", a[256];
	char *argv[] = { prog, a, NULL };
	t_op = t_case = NULL;
	if (arg) {
		snprintf(a, sizeof a, "%s", arg);
		t_filter(2, argv);
	}
	return t_want(op, cas);
}

int main(void)
{
	T_OK(want(NULL, "gemv", "k 3584"), "filter.none_takes_all", "no filter refused a case");
	T_OK(want("gemv", "gemv", "k 3584") && !want("gemv", "rmsnorm", "rows 7"),
	     "filter.op_only", "OP took another op or refused its own");
	T_OK(want("rmsnorm:rows 7", "rmsnorm", "op rmsnorm rows 7 d 3584") &&
		     !want("rmsnorm:rows 7", "rmsnorm", "op rmsnorm rows 1 d 3584"),
	     "filter.op_and_case", "CASE did not select by the case text");
	T_OK(want("moe_experts:tokens 1 tile 4", "moe_experts",
		  "op moe_experts type IQ4_NL d 3584 f 1024 experts 64 k 4 tokens 1 tile 4 seed 72"),
	     "filter.case_text_with_spaces", "a case text with spaces was refused");
	/* a group's op is a prefix of the ops it holds: the hc group runs
	 * for "hc" and "hc_post", not for "hcx" */
	T_OK(want("hc", "hc", NULL) && want("hc_post", "hc", "x") && !want("hcx", "hc", "x"),
	     "filter.prefix_group", "the op's prefix rule is wrong");
	/* NULL op: a check that belongs to whatever op the filter names */
	T_OK(want("moe_router:nan-bias", NULL, "nan-bias k 4"), "filter.any_op",
	     "a check without an op was refused");
	return t_done();
}
