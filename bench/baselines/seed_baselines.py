#!/usr/bin/python3
"""The seeds' PyTorch implementations, timed: the baselines of the kernel benchmark.

Run with Debian's torch (/usr/bin/python3, python3-torch). One case per process, so that
peak-memory figures do not mix; prints one JSON line:

  /usr/bin/python3 bench/baselines/seed_baselines.py --case mamba_loop --seq-len 2048

Cases (batch 1, float32, torch.no_grad(), torch.set_num_threads(--threads)). Every case but
the *_core ones times the whole mixer, projections included, as attnserve_kernel_bench does:

  causal_linear_step   q/k/v projections (nn.Linear 512->512, no bias, as ours) over the
                       sequence, then the seed's CausalLinearAttention.step (linear-attention-
                       to-mamba.txt) for every token and each of the H=8 heads, one instance
                       per head (its state is per head: S (d, d), z (d), 1-D torch.dot and
                       torch.outer), then o_proj. The seed as it is.
  causal_linear_step_batched
                       the same loop with the eight heads' states stacked, (H, d, d) and
                       (H, d), one set of ops per token: a stronger baseline, for reference.
  standard_full        projections, then standard attention as the seeds write it
                       (softmax(Q Kᵀ/√d) V on (1, 8, L, 64)) with a causal mask: the L×L
                       scores are materialised, out of place, as in the seed.
  linformer            the seed's LinformerAttention (linformer-to-mamba.txt), dim 512,
                       8 heads, k=256, seq_len=L (its projections have biases, as written).
  mamba_loop           a Mamba block that loops over time in Python: linformer-to-mamba.txt's
                       SelectiveSSM (d_model 256, d_state 16, d_conv 4, expand 2) with the
                       fixes listed on the class.
  causal_linear_step_core, causal_linear_step_batched_core, standard_full_core
                       the attention core alone: q, k, v (1, 8, L, 64) made before timing,
                       no projections (attnserve_kernel_bench's *_core cases).
  mamba_loop_core      SelectiveSSM's scan loop with the D skip and the silu(z) gate, on
                       x_conv, dt, z (1, L, 512) and B, C (1, L, 16) made before timing
                       (attnserve_kernel_bench's mamba_scan_core).

Memory: peak RSS increase during warm-up and timed runs (weights and inputs, made before,
are excluded): VmHWM is reset through /proc/self/clear_refs, then VmHWM - VmRSS(before).
A case whose estimated peak exceeds --mem-cap-gib, or whose warm-up run exceeds
--time-cap-s, is reported as skipped with the reason; no case crashes the caller.
"""

import argparse
import gc
import json
import math
import os
import statistics
import subprocess
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

GIB = 1 << 30
HEADS = 8
HEAD_DIM = 64
ATTN_DIM = HEADS * HEAD_DIM  # 512
LINFORMER_K = 256
MAMBA_D_MODEL = 256
MAMBA_D_STATE = 16
MAMBA_D_CONV = 4
MAMBA_EXPAND = 2

CASES = (
    "causal_linear_step",
    "causal_linear_step_batched",
    "standard_full",
    "linformer",
    "mamba_loop",
    # Attention core only: q, k, v (1, 8, L, 64) precomputed, no projections.
    "causal_linear_step_core",
    "causal_linear_step_batched_core",
    "standard_full_core",
    # The selective scan alone, with the D skip and the silu(z) gate (what attnserve's fused
    # scan kernel does), on precomputed x_conv, dt, z (1, L, 512) and B, C (1, L, 16).
    "mamba_loop_core",
)


# --------------------------------------------------------------------------------------
# The seeds' code. Punctuation lost in the text files (=, >, :) restored; otherwise as
# written unless a comment says so.
# --------------------------------------------------------------------------------------


class CausalLinearAttention:
    """linear-attention-to-mamba.txt: causal linear attention, recurrent form (one head)."""

    def __init__(self, d_head):
        self.d = d_head
        # S_t = sum_{i<=t} phi(K_i) V_i^T
        self.S = torch.zeros(d_head, d_head)
        self.z = torch.zeros(d_head)

    def step(self, q, k, v):
        q_prime = F.elu(q) + 1
        k_prime = F.elu(k) + 1
        output = torch.matmul(q_prime, self.S) / (torch.dot(q_prime, self.z) + 1e-6)
        self.S += torch.outer(k_prime, v)
        self.z += k_prime
        return output


class BatchedCausalLinearAttention:
    """The seed's step with the H heads' states stacked: S (H, d, d), z (H, d)."""

    def __init__(self, num_heads, d_head):
        self.S = torch.zeros(num_heads, d_head, d_head)
        self.z = torch.zeros(num_heads, d_head)

    def step(self, q, k, v):  # q, k, v: (H, d)
        q_prime = F.elu(q) + 1
        k_prime = F.elu(k) + 1
        num = torch.bmm(q_prime.unsqueeze(1), self.S).squeeze(1)
        den = (q_prime * self.z).sum(-1, keepdim=True) + 1e-6
        self.S += k_prime.unsqueeze(-1) * v.unsqueeze(1)
        self.z += k_prime
        return num / den


class QkvoProjections(nn.Module):
    """q/k/v/o projections around an attention core, as attnserve's mixers have (no bias)."""

    def __init__(self, dim):
        super().__init__()
        self.q_proj = nn.Linear(dim, dim, bias=False)
        self.k_proj = nn.Linear(dim, dim, bias=False)
        self.v_proj = nn.Linear(dim, dim, bias=False)
        self.o_proj = nn.Linear(dim, dim, bias=False)


class CausalLinearStepLoop(QkvoProjections):
    """Projections + the seed's per-token step loop, one CausalLinearAttention per head."""

    def __init__(self, num_heads, head_dim, batched=False):
        super().__init__(num_heads * head_dim)
        self.h = num_heads
        self.d = head_dim
        self.batched = batched

    def core(self, q, k, v):
        """q, k, v: (1, H, L, d) -> (L, H, d), token by token."""
        assert q.shape[0] == 1, "the seed's step is for one sequence"
        q, k, v = (t[0].transpose(0, 1) for t in (q, k, v))  # (L, H, d) views
        N = q.shape[0]
        outs = []
        if self.batched:
            attn = BatchedCausalLinearAttention(self.h, self.d)
            for t in range(N):
                outs.append(attn.step(q[t], k[t], v[t]))
        else:
            heads = [CausalLinearAttention(self.d) for _ in range(self.h)]
            for t in range(N):
                for h in range(self.h):
                    outs.append(heads[h].step(q[t, h], k[t, h], v[t, h]))
        return torch.stack(outs).reshape(N, self.h, self.d)

    def forward(self, x):
        B, N, D = x.shape
        q = self.q_proj(x).reshape(B, N, self.h, self.d).transpose(1, 2)
        k = self.k_proj(x).reshape(B, N, self.h, self.d).transpose(1, 2)
        v = self.v_proj(x).reshape(B, N, self.h, self.d).transpose(1, 2)
        return self.o_proj(self.core(q, k, v).reshape(B, N, D))


def standard_causal_attention(Q, K, V, mask):
    """The seed's standard_attention (linear-attention-to-mamba.txt) plus the causal mask."""
    d = Q.shape[-1]
    scores = torch.matmul(Q, K.transpose(-2, -1)) / math.sqrt(d)
    scores = scores.masked_fill(mask, float("-inf"))
    attn = F.softmax(scores, dim=-1)
    return torch.matmul(attn, V)


class StandardFull(QkvoProjections):
    def __init__(self, num_heads, head_dim, seq_len):
        super().__init__(num_heads * head_dim)
        self.h = num_heads
        self.d = head_dim
        # Built once, as a causal model registers it as a buffer.
        self.register_buffer(
            "mask", torch.triu(torch.ones(seq_len, seq_len, dtype=torch.bool), diagonal=1)
        )

    def core(self, Q, K, V):
        N = Q.shape[2]
        return standard_causal_attention(Q, K, V, self.mask[:N, :N])

    def forward(self, x):
        B, N, D = x.shape
        Q = self.q_proj(x).reshape(B, N, self.h, self.d).transpose(1, 2)
        K = self.k_proj(x).reshape(B, N, self.h, self.d).transpose(1, 2)
        V = self.v_proj(x).reshape(B, N, self.h, self.d).transpose(1, 2)
        out = self.core(Q, K, V)
        return self.o_proj(out.transpose(1, 2).reshape(B, N, D))


class LinformerAttention(nn.Module):
    """linformer-to-mamba.txt, as written."""

    def __init__(self, dim: int, seq_len: int, k: int = 256, num_heads: int = 8):
        super().__init__()
        self.dim = dim
        self.seq_len = seq_len
        self.k = k
        self.num_heads = num_heads
        self.head_dim = dim // num_heads
        self.q_proj = nn.Linear(dim, dim)
        self.k_proj = nn.Linear(dim, dim)
        self.v_proj = nn.Linear(dim, dim)
        self.E = nn.Parameter(torch.randn(seq_len, k))
        self.F = nn.Parameter(torch.randn(seq_len, k))
        self.out_proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, N, D = x.shape
        assert N <= self.seq_len, f"序列长度 {N} 超过预设 {self.seq_len}"
        Q = self.q_proj(x).reshape(B, N, self.num_heads, self.head_dim).transpose(1, 2)
        K = self.k_proj(x).reshape(B, N, self.num_heads, self.head_dim).transpose(1, 2)
        V = self.v_proj(x).reshape(B, N, self.num_heads, self.head_dim).transpose(1, 2)
        K_proj = torch.einsum("bhid,nk->bhkd", K, self.E[:N, :])
        V_proj = torch.einsum("bhid,nk->bhkd", V, self.F[:N, :])
        scale = self.head_dim**-0.5
        attn = torch.matmul(Q, K_proj.transpose(-2, -1)) * scale
        attn = torch.softmax(attn, dim=-1)
        out = torch.matmul(attn, V_proj)
        out = out.transpose(1, 2).reshape(B, N, D)
        return self.out_proj(out)


class SelectiveSSM(nn.Module):
    """linformer-to-mamba.txt's Mamba block, Python loop over time, with three fixes.

    1. x_proj is d_inner -> dt_rank + 2 * d_state and dt_proj is dt_rank -> d_inner with
       dt_rank = ceil(d_model / 16), split (dt, B, C) as in Hugging Face Mamba (the seed has
       width 2 * d_state + 1 and a rank-1 dt).
    2. dA = exp(dt * A) broadcasts (B, L, D, 1) with A (D, N); the seed's A.unsqueeze(1)
       only broadcasts when L == D. dA is still materialised, (B, L, d_inner, d_state).
    3. The input term is dt * B * x (zero-order-hold / Euler, as DESIGN.md and ours); the
       seed drops dt. dt * x is formed once before the loop, so the loop body is the seed's.
    """

    def __init__(self, d_model: int, d_state: int = 16, d_conv: int = 4, expand: int = 2):
        super().__init__()
        self.d_model = d_model
        self.d_state = d_state
        self.d_conv = d_conv
        self.d_inner = d_model * expand
        self.dt_rank = math.ceil(d_model / 16)
        self.in_proj = nn.Linear(d_model, self.d_inner * 2, bias=False)
        self.conv1d = nn.Conv1d(
            in_channels=self.d_inner,
            out_channels=self.d_inner,
            kernel_size=d_conv,
            padding=d_conv - 1,
            groups=self.d_inner,
        )
        self.x_proj = nn.Linear(self.d_inner, self.dt_rank + d_state * 2, bias=False)
        self.dt_proj = nn.Linear(self.dt_rank, self.d_inner, bias=True)
        self.A_log = nn.Parameter(
            torch.log(torch.arange(1, d_state + 1).float()).repeat(self.d_inner, 1)
        )
        self.D = nn.Parameter(torch.ones(self.d_inner))
        self.out_proj = nn.Linear(self.d_inner, d_model, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, L, D = x.shape
        xz = self.in_proj(x)
        x_branch, z = xz.chunk(2, dim=-1)
        x_conv = self.conv1d(x_branch.transpose(1, 2))[:, :, :L].transpose(1, 2)
        x_conv = F.silu(x_conv)
        ssm_params = self.x_proj(x_conv)
        dt, B_param, C_param = ssm_params.split(
            [self.dt_rank, self.d_state, self.d_state], dim=-1
        )
        dt = F.softplus(self.dt_proj(dt))
        A = -torch.exp(self.A_log)
        y = self._ssm_scan(x_conv, A, B_param, C_param, dt)
        y = y + self.D * x_conv
        y = y * F.silu(z)
        return self.out_proj(y)

    def core(self, x_conv, dt, B_param, C_param, z):
        """The scan with the skip and the gate: forward() between x_proj and out_proj."""
        A = -torch.exp(self.A_log)
        y = self._ssm_scan(x_conv, A, B_param, C_param, dt)
        y = y + self.D * x_conv
        return y * F.silu(z)

    def _ssm_scan(self, x, A, B, C, dt):
        B_batch, L, D_inner = x.shape
        N = self.d_state
        dA = torch.exp(dt.unsqueeze(-1) * A)  # (B, L, D, N), materialised (fix 2)
        dtx = dt * x  # fix 3
        h = torch.zeros(B_batch, D_inner, N, device=x.device)
        ys = []
        for t in range(L):
            h = dA[:, t] * h + torch.einsum("bd,bn->bdn", dtx[:, t], B[:, t])
            y_t = torch.einsum("bdn,bn->bd", h, C[:, t])
            ys.append(y_t)
        return torch.stack(ys, dim=1)


# --------------------------------------------------------------------------------------
# Harness
# --------------------------------------------------------------------------------------


def build_case(case, L):
    """Returns (fn, inputs): the timed call is fn(*inputs)."""
    core = case.endswith("_core")
    base = case[: -len("_core")] if core else case
    if base in ("causal_linear_step", "causal_linear_step_batched"):
        model = CausalLinearStepLoop(HEADS, HEAD_DIM, batched=base.endswith("_batched"))
        d_model = ATTN_DIM
    elif base == "standard_full":
        model = StandardFull(HEADS, HEAD_DIM, L)
        d_model = ATTN_DIM
    elif base == "linformer" and not core:
        model = LinformerAttention(ATTN_DIM, seq_len=L, k=LINFORMER_K, num_heads=HEADS)
        d_model = ATTN_DIM
    elif base == "mamba_loop":
        model = SelectiveSSM(MAMBA_D_MODEL, MAMBA_D_STATE, MAMBA_D_CONV, MAMBA_EXPAND)
        d_model = MAMBA_D_MODEL
    else:
        raise ValueError(f"unknown case {case}")
    model.eval()
    if core and base == "mamba_loop":
        d_inner, n = model.d_inner, model.d_state
        inputs = (torch.randn(1, L, d_inner), F.softplus(torch.randn(1, L, d_inner)),
                  torch.randn(1, L, n), torch.randn(1, L, n), torch.randn(1, L, d_inner))
        return model.core, inputs
    if core:
        return model.core, tuple(torch.randn(1, HEADS, L, HEAD_DIM) for _ in range(3))
    return model, (torch.randn(1, L, d_model),)


def estimated_peak_bytes(case, L):
    """A generous estimate of the case's peak working memory, to skip before running."""
    f = 4
    if case.startswith("standard_full"):
        # Two L×L float tensors live at once (matmul result and its scaled copy, then the
        # masked scores and the softmax), plus the bool mask, plus O(L·D) activations.
        return 2 * HEADS * L * L * f + L * L + 16 * L * ATTN_DIM * f
    if case == "linformer":
        return 2 * HEADS * L * LINFORMER_K * f + 16 * L * ATTN_DIM * f
    if case == "mamba_loop":
        d_inner = MAMBA_EXPAND * MAMBA_D_MODEL
        return L * d_inner * MAMBA_D_STATE * f + 16 * L * d_inner * f
    return 16 * L * ATTN_DIM * f  # the step loops: O(L·D) plus per-token tensors


def read_status_kib(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")


def reset_peak_rss():
    """Resets VmHWM to the current RSS (Linux >= 4.0). False if not allowed."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def run_case(args):
    result = {
        "impl": "baseline",
        "case": args.case,
        "seq_len": args.seq_len,
        "threads": args.threads,
        "torch": torch.__version__,
    }
    need = estimated_peak_bytes(args.case, args.seq_len)
    result["estimated_peak_bytes"] = need
    if need > args.mem_cap_gib * GIB:
        result.update(
            status="skipped",
            reason=f"needs ~{need / GIB:.1f} GiB > cap {args.mem_cap_gib:g} GiB",
        )
        return result

    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    with torch.no_grad():
        fn, inputs = build_case(args.case, args.seq_len)
        gc.collect()
        exact = reset_peak_rss()
        base_kib = read_status_kib("VmRSS")

        t0 = time.perf_counter()
        fn(*inputs)
        warm = time.perf_counter() - t0
        for _ in range(args.warmup - 1):
            fn(*inputs)
        if warm > args.time_cap_s:
            result.update(
                status="skipped",
                reason=f"one run took {warm:.1f} s > time cap {args.time_cap_s:g} s",
                warmup_seconds=warm,
            )
            return result
        # Keep within the time cap: at least one timed run.
        repeats = max(1, min(args.repeats, int(args.time_cap_s / max(warm, 1e-9)) - 1))
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            fn(*inputs)
            times.append(time.perf_counter() - t0)
        peak_kib = read_status_kib("VmHWM")

    seconds = statistics.median(times)
    result.update(
        status="ok",
        repeats=repeats,
        warmup_seconds=warm,
        seconds=seconds,
        min_seconds=min(times),
        times=times,
        tokens_per_s=args.seq_len / seconds,
        peak_rss_increase_bytes=max(0, peak_kib - base_kib) * 1024,
        peak_rss_exact=exact,
    )
    return result


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--case", required=True, choices=CASES + ("all",))
    parser.add_argument("--seq-len", type=int, default=1024)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3, help="timed runs (median)")
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--mem-cap-gib", type=float, default=12.0)
    parser.add_argument("--time-cap-s", type=float, default=300.0)
    args = parser.parse_args()
    args.warmup = max(1, args.warmup)

    if args.case == "all":  # each case in its own process, one JSON line each
        rc = 0
        for case in CASES:
            cmd = [sys.executable, os.path.abspath(__file__), "--case", case]
            for name in ("seq_len", "threads", "repeats", "warmup", "seed", "mem_cap_gib",
                         "time_cap_s"):
                cmd += ["--" + name.replace("_", "-"), str(getattr(args, name))]
            rc |= subprocess.call(cmd)
        return rc

    try:
        result = run_case(args)
    except Exception as e:  # reported, never raised to the caller
        result = {
            "impl": "baseline",
            "case": args.case,
            "seq_len": args.seq_len,
            "status": "error",
            "reason": f"{type(e).__name__}: {e}",
        }
    print(json.dumps(result), flush=True)
    return 1 if result["status"] == "error" else 0


if __name__ == "__main__":
    sys.exit(main())
