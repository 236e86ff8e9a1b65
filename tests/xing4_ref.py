"""Float64 numpy reference of the Xing4.0 forward pass.

Written from the model's description (now docs/gguf.md 4 and 5, docs/forward.md and
docs/numerics.md 1) and nothing else: no line of x4's C code informed it, which is what makes it
an oracle.  It reads a `xing4_0` GGUF with the `gguf` package, takes every dimension from the
file's own keys and dequantizes the stored bytes with `gguf.quants.dequantize` (the model is
defined by the stored bytes, docs/forward.md 3.3).

Arithmetic is float64 throughout except where the description pins an fp32 step: the RoPE angle
is fl32(fl32(p) * fl32(omega_i)) (docs/forward.md 6.2 and 10.3).  The latent KV cache precision
is a parameter: 'f16' rounds each 576-wide cache row to float16 when it is written (what x4's
fp32 trunk does, docs/numerics.md 1.7), 'f64' keeps it exact.

Tokens are processed one at a time (decode); prefill of a prompt is the same arithmetic.  MLA
runs in the non-absorbed form by default (k_n and v expanded per head from the cached latent);
`absorbed=True` re-associates it as the absorbed form of docs/forward.md 6.4, for a
self-consistency check.

Also here: decoders for IQ4_NL, Q6_K and BF16 written from docs/gguf.md 3 (to check the `gguf`
package's dequantizer against those formulas), and `write_synthetic`, a small random `xing4_0`
file for when no tiny preset has been written yet.
"""
import math

import numpy as np
from gguf import GGMLQuantizationType as QT
from gguf import GGUFReader
from gguf.quants import dequantize

ARCH = "xing4_0"


def _key(reader, name, default=None):
    f = reader.get_field(name)
    if f is None:
        if default is None:
            raise KeyError(f"GGUF key {name} missing")
        return default
    v = f.contents()
    return v


class Hparams:
    """Every dimension and constant the forward pass needs, read from the GGUF keys."""

    def __init__(self, r):
        a = _key(r, "general.architecture")
        if a != ARCH:
            raise ValueError(f"architecture is {a!r}, not {ARCH!r}")
        k = lambda n, d=None: _key(r, f"{ARCH}.{n}", d)
        self.D = int(k("embedding_length"))
        self.V = int(k("vocab_size", -1))
        self.n_blocks = int(k("block_count")) - int(k("nextn_predict_layers", 0))
        self.n_dense = int(k("leading_dense_block_count"))
        self.F_d = int(k("feed_forward_length"))
        self.n_h = int(k("attention.head_count"))
        self.R_q = int(k("attention.q_lora_rank"))
        self.R_kv = int(k("attention.kv_lora_rank"))
        self.d_qk = int(k("attention.key_length_mla"))
        self.d_v = int(k("attention.value_length_mla"))
        self.d_r = int(k("rope.dimension_count"))
        self.d_n = self.d_qk - self.d_r
        self.eps = float(k("attention.layer_norm_rms_epsilon"))
        self.rope_base = float(k("rope.freq_base"))
        self.yarn_factor = float(k("rope.scaling.factor", 1.0))
        self.yarn_orig = int(k("rope.scaling.original_context_length", 0))
        self.beta_fast = float(k("rope.scaling.yarn_beta_fast", 32.0))
        self.beta_slow = float(k("rope.scaling.yarn_beta_slow", 1.0))
        self.yarn_logm = float(k("rope.scaling.yarn_log_multiplier", 0.1))
        self.scaling = k("rope.scaling.type", "none")
        self.E = int(k("expert_count"))
        self.top_k = int(k("expert_used_count"))
        self.n_shared = int(k("expert_shared_count", 1))
        self.F_e = int(k("expert_feed_forward_length"))
        self.gating = int(k("expert_gating_func", 2))
        self.w_norm = bool(k("expert_weights_norm", True))
        self.w_scale = float(k("expert_weights_scale", 1.0))
        self.n_hc = int(k("hyper_connection.count"))
        self.sk_iters = int(k("hyper_connection.sinkhorn_iterations"))
        self.hc_eps = float(k("hyper_connection.epsilon"))
        # The release has no clamp key; the runtime and this reference default to +-30 (docs/forward.md 10.1).
        self.clamp_min = float(k("hyper_connection.clamp_min", -30.0))
        self.clamp_max = float(k("hyper_connection.clamp_max", 30.0))
        if self.gating not in (1, 2):
            raise ValueError(f"expert_gating_func {self.gating} unknown")


def rope_omegas(hp):
    """YaRN frequencies omega_i (docs/forward.md 6.2) rounded to fp32, for i < d_r/2."""
    dim, base = hp.d_r, hp.rope_base
    i = np.arange(dim // 2, dtype=np.float64)
    omega = base ** (-2.0 * i / dim)
    if hp.scaling == "yarn" and hp.yarn_factor > 1.0:
        corr = lambda r: dim * math.log(hp.yarn_orig / (2 * math.pi * r)) / (2 * math.log(base))
        lo = max(math.floor(corr(hp.beta_fast)), 0)
        hi = min(math.ceil(corr(hp.beta_slow)), dim - 1)
        if hi == lo:
            hi += 0.001  # a zero-width ramp would divide by zero
        rho = np.clip((i - lo) / (hi - lo), 0.0, 1.0)
        omega = omega * ((1.0 - rho) + rho / hp.yarn_factor)
    return omega.astype(np.float32)


def score_scale(hp):
    """lambda = mscale^2 / sqrt(key_length_mla), mscale = 1 + log_mult * ln(factor)."""
    ms = 1.0 + hp.yarn_logm * math.log(hp.yarn_factor) if hp.yarn_factor > 1.0 else 1.0
    return ms * ms / math.sqrt(hp.d_qk)


def rope(z, p, omega32):
    """Rotate adjacent pairs (z[2i], z[2i+1]) of the last axis by fl32(fl32(p)*omega_i)."""
    theta = (np.float32(p) * omega32).astype(np.float64)
    c, s = np.cos(theta), np.sin(theta)
    a, b = z[..., 0::2], z[..., 1::2]
    out = np.empty_like(z)
    out[..., 0::2] = a * c - b * s
    out[..., 1::2] = b * c + a * s
    return out


def rms(x, w, eps):
    return w * (x / np.sqrt(np.mean(x * x) + eps))


def sigmoid(z):
    return 1.0 / (1.0 + np.exp(-z))


def silu(z):
    return z * sigmoid(z)


class Xing4Ref:
    """The forward pass of docs/forward.md for one sequence, one token per `step`."""

    def __init__(self, path, kv="f16", absorbed=False):
        if kv not in ("f16", "f64"):
            raise ValueError("kv must be 'f16' or 'f64'")
        self.r = GGUFReader(path)
        self.hp = Hparams(self.r)
        self.t = {t.name: t for t in self.r.tensors}
        self.kv = kv
        self.absorbed = absorbed
        self.omega = rope_omegas(self.hp)
        self.lam = score_scale(self.hp)
        self._w = {}
        self._exp = {}
        if self.hp.V < 0:
            self.hp.V = int(self.t["token_embd.weight"].shape[1])
        # Smallest top-k selection margin seen (k-th minus (k+1)-th biased score): a near-tie here
        # is where an fp32 runtime may legitimately pick another expert.
        self.min_margin = math.inf
        self.reset()

    def reset(self):
        self.pos = 0
        self.max_resid = 0.0  # largest |H| after any A4/F4: shows a loud expert was reached
        self.cache = [[] for _ in range(self.hp.n_blocks)]  # per block: rows [R_kv + d_r]
        self.kn = [[] for _ in range(self.hp.n_blocks)]  # non-absorbed: [n_h, d_n] per token
        self.vv = [[] for _ in range(self.hp.n_blocks)]  # non-absorbed: [n_h, d_v] per token

    # -- weights -------------------------------------------------------------------------------
    def tensor(self, name):
        """Whole tensor dequantized to float64, numpy order (ne reversed)."""
        w = self._w.get(name)
        if w is None:
            t = self.t[name]
            w = dequantize(t.data, t.tensor_type).astype(np.float64)
            self._w[name] = w
        return w

    def expert(self, name, e):
        """Expert e's matrix of a 3-D expert tensor, dequantized on first use."""
        w = self._exp.get((name, e))
        if w is None:
            t = self.t[name]
            w = dequantize(t.data[e], t.tensor_type).astype(np.float64)
            self._exp[(name, e)] = w
        return w

    def embed(self, v):
        t = self.t["token_embd.weight"]
        return dequantize(t.data[v:v + 1], t.tensor_type).astype(np.float64)[0]

    # -- hyper-connections (6.3) ---------------------------------------------------------------
    def hc(self, H, pfx):
        hp = self.hp
        n = hp.n_hc
        W = self.tensor(pfx + "_fn.weight")  # [2n + n*n, n*D]
        b = self.tensor(pfx + "_base.weight")
        al = self.tensor(pfx + "_scale.weight")
        u = H.reshape(-1)
        uh = u / np.sqrt(np.mean(u * u) + hp.eps)
        m = W @ uh
        pre = sigmoid(al[0] * m[:n] + b[:n])
        post = 2.0 * sigmoid(al[1] * m[n:2 * n] + b[n:2 * n])
        lg = np.clip(al[2] * m[2 * n:] + b[2 * n:], hp.clamp_min, hp.clamp_max).reshape(n, n)
        M = np.exp(lg - lg.max(axis=1, keepdims=True))  # [dst, src], max over sources
        for _ in range(hp.sk_iters):
            M = M / (M.sum(axis=1, keepdims=True) + hp.hc_eps)
            M = M / (M.sum(axis=0, keepdims=True) + hp.hc_eps)
        x = pre @ H
        return x, post, M

    # -- MLA (6.5) -----------------------------------------------------------------------------
    def mla(self, l, xh, p):
        hp = self.hp
        pb = f"blk.{l}."
        T = self.tensor
        cq = rms(T(pb + "attn_q_a.weight") @ xh, T(pb + "attn_q_a_norm.weight"), hp.eps)
        q = (T(pb + "attn_q_b.weight") @ cq).reshape(hp.n_h, hp.d_qk)
        qn, qr = q[:, :hp.d_n], rope(q[:, hp.d_n:], p, self.omega)
        a = T(pb + "attn_kv_a_mqa.weight") @ xh
        ckv = rms(a[:hp.R_kv], T(pb + "attn_kv_a_norm.weight"), hp.eps)
        kr = rope(a[hp.R_kv:], p, self.omega)
        row = np.concatenate([ckv, kr])
        if self.kv == "f16":
            row = row.astype(np.float16).astype(np.float64)
        self.cache[l].append(row)
        Wkb = T(pb + "attn_k_b.weight")  # [n_h, R_kv, d_n]: W_kb[h][c][n]
        Wvb = T(pb + "attn_v_b.weight")  # [n_h, d_v, R_kv]: W_vb[h][j][c]
        C = np.stack(self.cache[l])  # [t+1, R_kv + d_r]
        Ckv, Kr = C[:, :hp.R_kv], C[:, hp.R_kv:]
        if self.absorbed:
            qt = np.einsum("hcn,hn->hc", Wkb, qn)
            S = self.lam * (qt @ Ckv.T + qr @ Kr.T)  # [n_h, t+1]
            P = np.exp(S - S.max(axis=1, keepdims=True))
            P /= P.sum(axis=1, keepdims=True)
            ob = P @ Ckv  # [n_h, R_kv]
            o = np.einsum("hjc,hc->hj", Wvb, ob)
        else:
            ck = row[:hp.R_kv]
            self.kn[l].append(np.einsum("hcn,c->hn", Wkb, ck))
            self.vv[l].append(np.einsum("hjc,c->hj", Wvb, ck))
            Kn = np.stack(self.kn[l], axis=1)  # [n_h, t+1, d_n]
            Vv = np.stack(self.vv[l], axis=1)  # [n_h, t+1, d_v]
            S = self.lam * (np.einsum("hn,htn->ht", qn, Kn) + qr @ Kr.T)
            P = np.exp(S - S.max(axis=1, keepdims=True))
            P /= P.sum(axis=1, keepdims=True)
            o = np.einsum("ht,htj->hj", P, Vv)
        return T(pb + "attn_output.weight") @ o.reshape(-1)

    # -- FFN (6.6, 6.7) ------------------------------------------------------------------------
    def dense(self, l, xh):
        pb = f"blk.{l}."
        T = self.tensor
        g = silu(T(pb + "ffn_gate.weight") @ xh) * (T(pb + "ffn_up.weight") @ xh)
        return T(pb + "ffn_down.weight") @ g

    def moe(self, l, xh):
        hp = self.hp
        pb = f"blk.{l}."
        lg = self.tensor(pb + "ffn_gate_inp.weight") @ xh
        if hp.gating == 2:
            g = sigmoid(lg)
        else:
            g = np.exp(lg - lg.max())
            g /= g.sum()
        sel = g + self.tensor(pb + "exp_probs_b.bias")
        order = np.argsort(-sel, kind="stable")  # stable: on an exact tie the lower index wins
        if hp.top_k < hp.E:
            self.min_margin = min(self.min_margin, sel[order[hp.top_k - 1]] - sel[order[hp.top_k]])
        top = np.sort(order[:hp.top_k])  # summed in ascending expert id (docs/forward.md 10.5)
        w = g[top]
        if hp.w_norm:
            w = w / (w.sum() + 1e-20)
        w = w * hp.w_scale
        y = np.zeros(hp.D)
        for e, we in zip(top, w):
            ge = silu(self.expert(pb + "ffn_gate_exps.weight", e) @ xh)
            ue = self.expert(pb + "ffn_up_exps.weight", e) @ xh
            y += we * (self.expert(pb + "ffn_down_exps.weight", e) @ (ge * ue))
        if hp.n_shared > 0:
            T = self.tensor
            gs = silu(T(pb + "ffn_gate_shexp.weight") @ xh) * (T(pb + "ffn_up_shexp.weight") @ xh)
            y += T(pb + "ffn_down_shexp.weight") @ gs
        return y

    # -- one token -----------------------------------------------------------------------------
    def step(self, v):
        """Feed token v at the next position; return its logits (float64 [V])."""
        hp = self.hp
        p = self.pos
        H = np.tile(self.embed(v), (hp.n_hc, 1))  # [n_hc, D]
        for l in range(hp.n_blocks):
            pb = f"blk.{l}."
            x, post, C = self.hc(H, pb + "hc_attn")
            y = self.mla(l, rms(x, self.tensor(pb + "attn_norm.weight"), hp.eps), p)
            H = post[:, None] * y[None, :] + C @ H
            x, post, C = self.hc(H, pb + "hc_ffn")
            xh = rms(x, self.tensor(pb + "ffn_norm.weight"), hp.eps)
            y = self.dense(l, xh) if l < hp.n_dense else self.moe(l, xh)
            H = post[:, None] * y[None, :] + C @ H
            self.max_resid = max(self.max_resid, float(np.abs(H).max()))
        h = rms(H.mean(axis=0), self.tensor("output_norm.weight"), hp.eps)
        self.pos += 1
        return self.tensor("output.weight") @ h

    def run(self, tokens):
        """Logits of every position of `tokens`, fed one by one after reset: [len, V]."""
        self.reset()
        return np.stack([self.step(int(v)) for v in tokens])


# -- block decoders written from docs/gguf.md 3 (to check gguf's dequantizer against them) ------
IQ4NL_K = np.array([-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113],
           dtype=np.float64)


def spec_iq4_nl(raw):
    """raw: uint8 [..., nb*18] -> float64 [..., nb*32]."""
    b = raw.reshape(-1, 18)
    d = b[:, :2].copy().view(np.float16).astype(np.float64)  # [n, 1]
    q = b[:, 2:]
    w = np.concatenate([IQ4NL_K[q & 15], IQ4NL_K[q >> 4]], axis=1) * d
    return w.reshape(*raw.shape[:-1], -1)


def spec_q6_k(raw):
    """raw: uint8 [..., nb*210] -> float64 [..., nb*256]."""
    b = raw.reshape(-1, 210)
    n = b.shape[0]
    ql, qh = b[:, :128].astype(np.int64), b[:, 128:192].astype(np.int64)
    sc = b[:, 192:208].copy().view(np.int8).astype(np.float64)
    d = b[:, 208:210].copy().view(np.float16).astype(np.float64)[:, 0]
    w = np.empty((n, 256))
    for half in range(2):
        L, H, S, o = ql[:, 64 * half:], qh[:, 32 * half:], sc[:, 8 * half:], 128 * half
        for l in range(32):
            g = l // 16
            w[:, o + l] = d * S[:, g] * (((L[:, l] & 15) | ((H[:, l] & 3) << 4)) - 32)
            w[:, o + l + 32] = d * S[:, g + 2] * (((L[:, l + 32] & 15) | (((H[:, l] >> 2) & 3) << 4)) - 32)
            w[:, o + l + 64] = d * S[:, g + 4] * (((L[:, l] >> 4) | (((H[:, l] >> 4) & 3) << 4)) - 32)
            w[:, o + l + 96] = d * S[:, g + 6] * (((L[:, l + 32] >> 4) | (((H[:, l] >> 6) & 3) << 4)) - 32)
    return w.reshape(*raw.shape[:-1], -1)


def spec_bf16(raw):
    """raw: uint8 [..., 2K] -> float64 [..., K]: the upper 16 bits of an IEEE fp32."""
    h = raw.copy().view("<u2").astype(np.uint32) << 16
    return h.view(np.float32).astype(np.float64)


def spec_q8_0(raw):
    """raw: uint8 [..., nb*34] -> float64 [..., nb*32]: fp16 d, then 32 int8 codes."""
    b = raw.reshape(-1, 34)
    d = b[:, :2].copy().view(np.float16).astype(np.float64)  # [n, 1]
    q = b[:, 2:].copy().view(np.int8).astype(np.float64)
    return (q * d).reshape(*raw.shape[:-1], -1)


SPEC_DECODERS = {QT.IQ4_NL: spec_iq4_nl, QT.Q6_K: spec_q6_k, QT.BF16: spec_bf16,
                 QT.Q8_0: spec_q8_0}


# -- a small random xing4_0 file, for development when no tiny preset exists ------------------
def write_synthetic(path, seed=0, D=256, n_h=4, R_q=64, R_kv=64, d_n=32, d_r=16, d_v=32,
            F_d=256, E=8, top_k=2, F_e=64, n_blocks=4, n_dense=2, V=512, n_hc=4):
    """Write a random, structurally complete (NextN tensors left out) `xing4_0` GGUF."""
    import gguf

    rng = np.random.default_rng(seed)
    w = gguf.GGUFWriter(path, ARCH)
    a = ARCH
    w.add_uint32(f"{a}.block_count", n_blocks + 1)
    w.add_uint32(f"{a}.nextn_predict_layers", 1)
    w.add_uint32(f"{a}.context_length", 262144)
    w.add_uint32(f"{a}.vocab_size", V)
    w.add_uint32(f"{a}.embedding_length", D)
    w.add_uint32(f"{a}.feed_forward_length", F_d)
    w.add_uint32(f"{a}.leading_dense_block_count", n_dense)
    w.add_uint32(f"{a}.attention.head_count", n_h)
    w.add_uint32(f"{a}.attention.head_count_kv", 1)
    w.add_uint32(f"{a}.attention.key_length", R_kv + d_r)
    w.add_uint32(f"{a}.attention.value_length", R_kv)
    w.add_uint32(f"{a}.attention.key_length_mla", d_n + d_r)
    w.add_uint32(f"{a}.attention.value_length_mla", d_v)
    w.add_uint32(f"{a}.attention.q_lora_rank", R_q)
    w.add_uint32(f"{a}.attention.kv_lora_rank", R_kv)
    w.add_float32(f"{a}.attention.layer_norm_rms_epsilon", 1e-6)
    w.add_uint32(f"{a}.rope.dimension_count", d_r)
    w.add_float32(f"{a}.rope.freq_base", 10000.0)
    w.add_string(f"{a}.rope.scaling.type", "yarn")
    w.add_float32(f"{a}.rope.scaling.factor", 64.0)
    w.add_uint32(f"{a}.rope.scaling.original_context_length", 4096)
    w.add_float32(f"{a}.rope.scaling.yarn_beta_fast", 32.0)
    w.add_float32(f"{a}.rope.scaling.yarn_beta_slow", 1.0)
    w.add_float32(f"{a}.rope.scaling.yarn_log_multiplier", 0.1)
    w.add_uint32(f"{a}.expert_count", E)
    w.add_uint32(f"{a}.expert_used_count", top_k)
    w.add_uint32(f"{a}.expert_shared_count", 1)
    w.add_uint32(f"{a}.expert_feed_forward_length", F_e)
    w.add_uint32(f"{a}.expert_gating_func", 2)
    w.add_bool(f"{a}.expert_weights_norm", True)
    w.add_float32(f"{a}.expert_weights_scale", 2.0)
    w.add_uint32(f"{a}.expert_group_count", 1)
    w.add_uint32(f"{a}.expert_group_used_count", 1)
    w.add_uint32(f"{a}.hyper_connection.count", n_hc)
    w.add_uint32(f"{a}.hyper_connection.sinkhorn_iterations", 20)
    w.add_float32(f"{a}.hyper_connection.epsilon", 1e-6)

    def f32(name, x):
        w.add_tensor(name, np.asarray(x, dtype=np.float32))

    def bf16(name, shape, std):
        x = (rng.standard_normal(shape) * std).astype(np.float32)
        u = (x.view(np.uint32) >> 16).astype(np.uint16)  # truncation is fine for random weights
        w.add_tensor(name, u.view(np.uint8).reshape(*shape[:-1], 2 * shape[-1]), raw_dtype=QT.BF16)

    def iq4(name, shape, std):
        nb = shape[-1] // 32
        blk = np.zeros((*shape[:-1], nb, 18), dtype=np.uint8)
        d = np.full((*shape[:-1], nb), std / 60.0, dtype=np.float16)
        blk[..., :2] = d[..., None].view(np.uint8).reshape(*d.shape, 2)
        blk[..., 2:] = rng.integers(0, 256, (*shape[:-1], nb, 16), dtype=np.uint8)
        w.add_tensor(name, blk.reshape(*shape[:-1], nb * 18), raw_dtype=QT.IQ4_NL)

    def q6k(name, shape, std):
        nb = shape[-1] // 256
        blk = rng.integers(0, 256, (*shape[:-1], nb, 210), dtype=np.uint8)
        blk[..., 192:208] = rng.integers(1, 64, (*shape[:-1], nb, 16)).astype(np.int8).view(np.uint8)
        d = np.full((*shape[:-1], nb), std / (32.0 * 18.0), dtype=np.float16)
        blk[..., 208:210] = d[..., None].view(np.uint8).reshape(*d.shape, 2)
        w.add_tensor(name, blk.reshape(*shape[:-1], nb * 210), raw_dtype=QT.Q6_K)

    s = lambda k: 1.0 / math.sqrt(k)
    bf16("token_embd.weight", (V, D), 1.0)
    f32("output_norm.weight", 1.0 + 0.1 * rng.standard_normal(D))
    q6k("output.weight", (V, D), 1.0)
    nc = 2 * n_hc + n_hc * n_hc
    for l in range(n_blocks):
        pb = f"blk.{l}."
        f32(pb + "attn_norm.weight", 1.0 + 0.1 * rng.standard_normal(D))
        bf16(pb + "attn_q_a.weight", (R_q, D), s(D))
        f32(pb + "attn_q_a_norm.weight", 1.0 + 0.1 * rng.standard_normal(R_q))
        bf16(pb + "attn_q_b.weight", (n_h * (d_n + d_r), R_q), s(R_q))
        bf16(pb + "attn_kv_a_mqa.weight", (R_kv + d_r, D), s(D))
        f32(pb + "attn_kv_a_norm.weight", 1.0 + 0.1 * rng.standard_normal(R_kv))
        bf16(pb + "attn_k_b.weight", (n_h, R_kv, d_n), s(R_kv))
        bf16(pb + "attn_v_b.weight", (n_h, d_v, R_kv), s(R_kv))
        bf16(pb + "attn_output.weight", (D, n_h * d_v), s(n_h * d_v))
        for g in ("attn", "ffn"):
            bf16(pb + f"hc_{g}_fn.weight", (nc, n_hc * D), s(n_hc * D))
            f32(pb + f"hc_{g}_base.weight", rng.standard_normal(nc))
            f32(pb + f"hc_{g}_scale.weight", 0.5 + rng.random(3))
        f32(pb + "ffn_norm.weight", 1.0 + 0.1 * rng.standard_normal(D))
        if l < n_dense:
            iq4(pb + "ffn_gate.weight", (F_d, D), s(D))
            iq4(pb + "ffn_up.weight", (F_d, D), s(D))
            iq4(pb + "ffn_down.weight", (D, F_d), s(F_d))
        else:
            f32(pb + "ffn_gate_inp.weight", rng.standard_normal((E, D)) * s(D))
            f32(pb + "exp_probs_b.bias", 0.05 * rng.standard_normal(E))
            iq4(pb + "ffn_gate_exps.weight", (E, F_e, D), s(D))
            iq4(pb + "ffn_up_exps.weight", (E, F_e, D), s(D))
            iq4(pb + "ffn_down_exps.weight", (E, D, F_e), s(F_e))
            iq4(pb + "ffn_gate_shexp.weight", (F_e, D), s(D))
            iq4(pb + "ffn_up_shexp.weight", (F_e, D), s(D))
            iq4(pb + "ffn_down_shexp.weight", (D, F_e), s(F_e))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
