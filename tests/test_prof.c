/*
 * test_prof.c - the profiler's tabulation (lib/prof/prof.c) on records made by
 * hand, so that the GPU side's matching runs without a GPU: a graph's
 * replays against the operations of its capture (by graph node, through
 * the instantiation's clones, and by start order where the node is not
 * known), a branch that runs out of capture order, eager launches by
 * correlation id (the runtime's and the driver's beneath it), the bytes of
 * an operation's kernels part by part or on its longest kernel, the cache
 * rows growing with the step's position, the trunk's count against the
 * records, each kernel's exposed time where kernels overlap, and the
 * trace's file.  The CPU side runs for real in tests/tool_profile.sh.
 */
#include "t.h"
#include "prof_int.h"

#include <math.h>
#include <unistd.h>

static int add_op(x4_prof *p, int cls, const char *label, int nparts, uint64_t b0, uint64_t b1,
		  uint64_t row_bytes, int rows_rel, int step)
{
	x4_prof_opinfo *o = X4_PROF_PUSH(p, ops);
	o->cls = cls;
	o->label = label;
	o->nparts = nparts;
	o->bytes[0] = b0;
	o->bytes[1] = b1;
	o->row_bytes = row_bytes;
	o->rows_rel = rows_rel;
	o->step = step;
	return (int)p->n_ops - 1;
}

static void add_step(x4_prof *p, uint64_t t0, uint64_t t1, int pos, bool counted,
		     int64_t eager_launches)
{
	x4_prof_step *s = X4_PROF_PUSH(p, steps);
	s->t0 = t0;
	s->t1 = t1;
	s->pos = pos;
	s->pos_end = pos + 1;
	s->counted = counted;
	s->enqueued = eager_launches;
	s->pdl_edges = s->full_edges = -1; /* until a graph's replay says (x4_prof_step_begin) */
	s->submit_end = t0 + 5;
}

static void add_launch(x4_prof *p, uint32_t corr, int op, int step, int tmpl, bool outer)
{
	x4_prof_launch *l = X4_PROF_PUSH(p, launches);
	*l = (x4_prof_launch){ corr, op, step, tmpl, outer };
}

/* node: the graph node CUPTI says ran it (0: none, an eager launch). */
static void add_kernel(x4_prof *p, uint32_t corr, int name, uint64_t t0, uint64_t t1,
		       uint64_t node)
{
	x4_prof_ev *ev = X4_PROF_PUSH(p, evs);
	*ev = (x4_prof_ev){ t0, t1, corr, X4_PROF_EV_KERNEL, name, -1, -1, 0, node };
}

/* A captured kernel: its operation and its node in the captured graph. */
static void add_tkernel(x4_prof *p, int op, uint64_t node)
{
	*X4_PROF_PUSH(p, tmpl_kernels) = (x4_prof_tkernel){ op, node };
}

static void add_clone(x4_prof *p, uint64_t node, uint64_t orig)
{
	*X4_PROF_PUSH(p, clones) = (x4_prof_nodepair){ node, orig };
}

/* A GPU profile with kernel names kn[0..n), as CUPTI's records would
 * leave it. */
static x4_prof *new_prof(const char *const *kn, int n)
{
	x4_prof *p = calloc(1, sizeof *p);
	pthread_mutex_init(&p->mu, NULL);
	p->gpu = true;
	p->cur_op = p->cur_ev = p->cur_step = p->last_tmpl = -1;
	p->names = calloc((size_t)n, sizeof *p->names);
	p->name_keys = calloc((size_t)n, sizeof *p->name_keys);
	for (int i = 0; i < n; i++)
		p->names[i] = strdup(kn[i]);
	p->n_names = p->cap_names = (size_t)n;
	return p;
}

static const x4_prof_row *find(const x4_prof_row *r, int n, const char *name, int cls)
{
	for (int i = 0; i < n; i++)
		if (strcmp(r[i].name, name) == 0 && r[i].cls == cls)
			return &r[i];
	return NULL;
}

/* The node map alone: a captured node, a clone of it, a clone of that
 * clone, ids nobody made, and a map that loops. */
static void test_node_slot(void)
{
	x4_prof_nodepair slots[] = { { 11, 0 }, { 12, 1 }, { 30, 2 } }; /* sorted */
	x4_prof_nodepair clones[] = { { 21, 11 }, { 22, 12 }, { 31, 21 }, { 40, 41 },
				      { 41, 40 } };
	struct {
		uint64_t node;
		int64_t want;
	} cases[] = { { 11, 0 }, { 12, 1 }, { 30, 2 }, { 21, 0 }, { 22, 1 }, { 31, 0 },
		      { 0, -1 }, { 99, -1 }, { 40, -1 } };
	for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
		int64_t got = x4_prof_node_slot(slots, 3, clones, 5, cases[i].node);
		T_OK(got == cases[i].want, "prof.node_slot", "node %llu: slot %lld, want %lld",
		     (unsigned long long)cases[i].node, (long long)got, (long long)cases[i].want);
	}
	T_OK(x4_prof_node_slot(NULL, 0, NULL, 0, 11) == -1, "prof.node_slot.empty",
	     "a node found in empty maps");
}

/* A graph with a branch: the capture stream forks after `norm`, a small
 * `side` kernel runs on the fork beside `attn`, and the join comes before
 * `ffn`.  Capture order is norm, side, attn, ffn; the replay starts side
 * after attn.  Step 0 replays with every node known (the exact match);
 * step 1's records carry no node and run in capture order (the start-order
 * fallback); step 2 carries one node nobody cloned (that record alone falls
 * back to its place) and another through two clones. */
static void test_branch(void)
{
	const char *kn[] = { "norm_kernel", "side_kernel", "attn_kernel", "ffn_kernel" };
	x4_prof *p = new_prof(kn, 4);
	int ops[] = {
		add_op(p, X4_PC_NORM, "norm", 1, 10, 0, 0, 0, -1),
		add_op(p, X4_PC_ROUTER, "side", 1, 20, 0, 0, 0, -1),
		add_op(p, X4_PC_ATTN, "attn", 1, 30, 0, 0, 0, -1),
		add_op(p, X4_PC_DENSE, "ffn", 1, 40, 0, 0, 0, -1),
	};
	/* Captured nodes 101..104; the instantiation's clones 201..204 (made
	 * in another order than captured); 301 a clone of 201. */
	for (int i = 0; i < 4; i++)
		add_tkernel(p, ops[i], 101 + (uint64_t)i);
	for (int i = 3; i >= 0; i--)
		add_clone(p, 201 + (uint64_t)i, 101 + (uint64_t)i);
	add_clone(p, 301, 201);
	*X4_PROF_PUSH(p, tmpls) = (x4_prof_tmpl){ 0, 4, 4, -1, -1 };
	/* Kernel i (capture order) starts at start[s][i] in step s. */
	static const uint64_t start[3][4] = { { 100, 400, 200, 600 },
					      { 100, 200, 300, 400 },
					      { 100, 400, 200, 600 } };
	static const uint64_t node[3][4] = { { 201, 202, 203, 204 },
					     { 0, 0, 0, 0 },
					     { 301, 202, 203, 999 } };
	for (int s = 0; s < 3; s++) {
		uint64_t base = 1000 * (uint64_t)s;
		add_step(p, base, base + 900, 5 + s, true, 0);
		add_launch(p, 50 + (uint32_t)s, -1, s, 0, true);
		for (int i = 0; i < 4; i++)
			add_kernel(p, 50 + (uint32_t)s, i, base + start[s][i],
				   base + start[s][i] + 50, node[s][i]);
	}
	x4_prof_result r;
	x4_err e = { 0 };
	int rc = x4_prof_finish(p, &r, &e);
	T_OK(rc == 0, "prof.branch.finish", "%s", e.msg);
	if (!rc) {
		static const int cls[] = { X4_PC_NORM, X4_PC_ROUTER, X4_PC_ATTN, X4_PC_DENSE };
		for (int i = 0; i < 4; i++) {
			const x4_prof_row *k = find(r.kernels, r.n_kernels, kn[i], cls[i]);
			T_OK(k && k->launches == 1 && k->bytes == 10.0 * (i + 1), "prof.branch.node",
			     "%s: %s", kn[i], k ? "launches or bytes wrong" : "not its operation's");
		}
		T_OK(r.n_kernels == 4 && r.s.unattributed == 0 && r.s.mismatched_steps == 0,
		     "prof.branch.rows", "%d kernel rows (want 4), %lld unattributed",
		     r.n_kernels, (long long)r.s.unattributed);
	}
	x4_prof_free(p);
}

/* Kernels that overlap, as under programmatic dependent launch: b starts
 * before a ends (and would wait for a inside itself), c lies wholly inside
 * b, d follows after a gap.  Each is credited what it runs past the latest
 * end before it: a 100 ns, b 60, c none, d 10; their sum is the step's busy
 * time. */
static void test_overlap(void)
{
	const char *kn[] = { "a_kernel", "b_kernel", "c_kernel", "d_kernel" };
	x4_prof *p = new_prof(kn, 4);
	static const int cls[] = { X4_PC_HC, X4_PC_ATTN, X4_PC_ROUTER, X4_PC_ROUTER };
	static const uint64_t t[4][2] = { { 100, 200 }, { 150, 260 }, { 170, 250 }, { 300, 310 } };
	static const double exposed[] = { 0.100, 0.060, 0, 0.010 };
	add_step(p, 0, 1000, 5, true, 4);
	for (int i = 0; i < 4; i++) {
		int op = add_op(p, cls[i], kn[i], 1, 0, 0, 0, 0, 0);
		add_launch(p, 70 + (uint32_t)i, op, 0, -1, true);
		add_kernel(p, 70 + (uint32_t)i, i, t[i][0], t[i][1], 0);
	}
	x4_prof_result r;
	x4_err e = { 0 };
	int rc = x4_prof_finish(p, &r, &e);
	T_OK(rc == 0, "prof.overlap.finish", "%s", e.msg);
	if (!rc) {
		for (int i = 0; i < 4; i++) {
			const x4_prof_row *k = find(r.kernels, r.n_kernels, kn[i], cls[i]);
			T_OK(k && fabs(k->exposed_us - exposed[i]) < 1e-12, "prof.overlap.exposed",
			     "%s: exposed %g us, want %g", kn[i], k ? k->exposed_us : -1,
			     exposed[i]);
		}
		const x4_prof_row *c = find(r.classes, r.n_classes, "moe_router", X4_PC_ROUTER);
		T_OK(c && fabs(c->exposed_us - 0.010) < 1e-12 && fabs(c->us - 0.090) < 1e-12,
		     "prof.overlap.class", "router: exposed %g us, us %g; want 0.01, 0.09",
		     c ? c->exposed_us : -1, c ? c->us : -1);
		T_OK(fabs(r.s.busy_us - 0.170) < 1e-12 && fabs(r.s.kernel_us - 0.300) < 1e-12,
		     "prof.overlap.busy", "busy %g us (want 0.17), kernels %g us (want 0.3)",
		     r.s.busy_us, r.s.kernel_us);
	}
	x4_prof_free(p);
}

int main(void)
{
	test_node_slot();
	test_branch();
	test_overlap();

	const char *kn[] = { "gate_kernel", "gu_kernel", "down_kernel", "attn_kernel", "combine" };
	x4_prof *p = new_prof(kn, 5);

	/* Step 0 (a warm-up) captured a graph of three operations and five
	 * kernels; steps 1 and 2 replay it at positions 10 and 11 (the
	 * runtime's graph launch and the driver's beneath it); step 3 runs
	 * the same operations eagerly at 12. */
	add_step(p, 0, 1000, 9, false, 0);
	int g = add_op(p, X4_PC_HC, "gate", 1, 100, 0, 0, 0, 0);
	int x = add_op(p, X4_PC_EXPERTS, "experts", 2, 60, 30, 0, 0, 0);
	int a = add_op(p, X4_PC_ATTN, "attend", 1, 0, 0, 10, 1, 0);
	int tmpl_ops[] = { g, x, x, a, a };
	for (int i = 0; i < 5; i++) {
		add_tkernel(p, tmpl_ops[i], 1001 + (uint64_t)i);
		add_clone(p, 2001 + (uint64_t)i, 1001 + (uint64_t)i);
	}
	x4_prof_tmpl *tp = X4_PROF_PUSH(p, tmpls);
	*tp = (x4_prof_tmpl){ 0, 5, 5, 3, 1 }; /* its kernels' dependencies: 3 programmatic, 1 full */
	add_step(p, 2000, 3000, 10, true, 0);
	add_step(p, 4000, 5000, 11, true, 0);
	add_launch(p, 20, -1, 1, 0, true);
	add_launch(p, 21, -1, 1, 0, false); /* the driver's cuGraphLaunch inside */
	add_launch(p, 40, -1, 2, 0, true);
	/* The driver's id on the replay's records in step 1, the runtime's in 2;
	 * delivered out of order, as buffers may be.  Step 1's records name
	 * their nodes; step 2's do not (matched by start order). */
	int names[] = { 0, 1, 2, 3, 4 };
	uint64_t dur[] = { 10, 40, 20, 50, 5 };
	for (int s = 1; s <= 2; s++)
		for (int i = 4; i >= 0; i--) {
			uint64_t t0 = (uint64_t)s * 2000 + 100 + (uint64_t)i * 100;
			add_kernel(p, s == 1 ? 21 : 40, names[i], t0, t0 + dur[i],
				   s == 1 ? 2001 + (uint64_t)i : 0);
		}
	add_step(p, 6000, 7000, 12, true, 5);
	int g3 = add_op(p, X4_PC_HC, "gate", 1, 100, 0, 0, 0, 3);
	int x3 = add_op(p, X4_PC_EXPERTS, "experts", 2, 60, 30, 0, 0, 3);
	int a3 = add_op(p, X4_PC_ATTN, "attend", 1, 0, 0, 10, 1, 3);
	int ops3[] = { g3, x3, x3, a3, a3 };
	for (int i = 0; i < 5; i++) {
		add_launch(p, (uint32_t)(60 + 2 * i), ops3[i], 3, -1, true);
		add_launch(p, (uint32_t)(61 + 2 * i), ops3[i], 3, -1, false);
		uint64_t t0 = 6100 + (uint64_t)i * 100;
		add_kernel(p, (uint32_t)(60 + 2 * i + (i & 1)), names[i], t0, t0 + dur[i], 0);
	}
	/* One kernel no launch we saw (a library's), in step 3. */
	add_kernel(p, 999, 0, 6800, 6810, 0);

	x4_prof_result r;
	x4_err e = { 0 };
	int rc = x4_prof_finish(p, &r, &e);
	T_OK(rc == 0, "prof.finish", "%s", e.msg);
	if (rc)
		return t_done();
	const x4_prof_summary *s = &r.s;
	T_OK(s->steps == 3, "prof.steps", "%d counted steps, want 3", s->steps);
	T_OK(s->kernels_total == 16 && s->enqueued_total == 15, "prof.counts",
	     "%lld records and %lld enqueued, want 16 and 15 (the driver's nested graph launch "
	     "adds nothing)", (long long)s->kernels_total, (long long)s->enqueued_total);
	T_OK(s->mismatched_steps == 1 && s->unattributed == 1, "prof.unclaimed",
	     "%d mismatched steps and %lld unattributed, want 1 and 1", s->mismatched_steps,
	     (long long)s->unattributed);
	T_OK(s->outside == 0, "prof.outside", "%lld outside", (long long)s->outside);
	T_OK(s->graphed_steps == 2 && s->pdl_edges_total == 6 && s->full_edges_total == 2, "prof.graph_edges",
	     "%d graphed steps, %lld programmatic and %lld full edges, want 2, 6 and 2 (the eager step "
	     "none)", s->graphed_steps, (long long)s->pdl_edges_total, (long long)s->full_edges_total);

	const x4_prof_row *gu = find(r.kernels, r.n_kernels, "gu_kernel", X4_PC_EXPERTS);
	const x4_prof_row *dn = find(r.kernels, r.n_kernels, "down_kernel", X4_PC_EXPERTS);
	const x4_prof_row *at = find(r.kernels, r.n_kernels, "attn_kernel", X4_PC_ATTN);
	const x4_prof_row *cb = find(r.kernels, r.n_kernels, "combine", X4_PC_ATTN);
	const x4_prof_row *gt = find(r.kernels, r.n_kernels, "gate_kernel", X4_PC_HC);
	const x4_prof_row *un = find(r.kernels, r.n_kernels, "gate_kernel", X4_PC_OTHER);
	T_OK(gu && dn && at && cb && gt && un, "prof.rows", "%d kernel rows, some missing",
	     r.n_kernels);
	if (gu && dn && at && cb && gt && un) {
		/* Two parts for two kernels; the cache's rows (pos + 1 of 10
		 * bytes) on attention's longer kernel, none on its combine. */
		T_OK(gu->bytes == 60 && dn->bytes == 30, "prof.bytes.parts", "%g and %g, want 60, 30",
		     gu->bytes, dn->bytes);
		double want_at = (10.0 * (10 + 1) + 10.0 * (11 + 1) + 10.0 * (12 + 1)) / 3;
		T_OK(fabs(at->bytes - want_at) < 1e-9 && cb->bytes == 0, "prof.bytes.cache",
		     "attention %g (want %g), combine %g", at->bytes, want_at, cb->bytes);
		T_OK(gt->launches == 1 && fabs(gt->us - 0.010) < 1e-12 && gt->bytes == 100,
		     "prof.row.gate", "launches %g, us %g, bytes %g", gt->launches, gt->us, gt->bytes);
		T_OK(fabs(un->launches - 1.0 / 3) < 1e-12, "prof.row.unattributed",
		     "launches %g", un->launches);
	}
	double share = 0;
	for (int i = 0; i < r.n_kernels; i++)
		share += r.kernels[i].share;
	T_OK(fabs(share - 1) < 1e-9, "prof.shares", "kernel shares sum to %g", share);
	const x4_prof_row *cx = find(r.classes, r.n_classes, "routed_experts", X4_PC_EXPERTS);
	T_OK(cx && cx->launches == 2 && cx->bytes == 90, "prof.class.experts", "%s",
	     cx ? "launches or bytes wrong" : "no row");
	/* The step: five kernels of 10, 40, 20, 50, 5 ns at 100 ns intervals
	 * (plus the stray one in step 3), wall 1000 ns, submission 5 ns. */
	T_OK(fabs(s->wall_us - 1.0) < 1e-12 && fabs(s->submit_us - 0.005) < 1e-12, "prof.wall",
	     "wall %g us, submit %g us", s->wall_us, s->submit_us);
	double busy = (125 + 125 + 135) / 3.0 / 1e3;
	T_OK(fabs(s->busy_us - busy) < 1e-12, "prof.busy", "busy %g us, want %g", s->busy_us, busy);
	/* Gaps of 90, 60, 80, 50 ns a replay; step 3's stray kernel at 6800
	 * leaves the largest, 295 ns after the last of the five ended. */
	T_OK(fabs(s->gap_max_us - 0.295) < 1e-12 && fabs(s->gaps - 13 / 3.0) < 1e-12, "prof.gaps",
	     "largest gap %g us, %g gaps a step", s->gap_max_us, s->gaps);

	char path[] = "/tmp/x4-test-prof-XXXXXX";
	int fd = mkstemp(path);
	close(fd);
	rc = x4_prof_write_trace(p, path, "{\"k\":1}", NULL, NULL, &e);
	FILE *f = fopen(path, "rb");
	char buf[1 << 14];
	size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
	buf[n] = 0;
	if (f)
		fclose(f);
	unlink(path);
	T_OK(rc == 0 && strstr(buf, "\"traceEvents\"") && strstr(buf, "\"run\":{\"k\":1}}}") &&
	     strstr(buf, "\"name\":\"step 2\""), "prof.trace", "rc %d: %.300s", rc, buf);
	x4_prof_free(p);
	return t_done();
}
