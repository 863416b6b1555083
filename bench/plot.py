#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Render benchmark results (bench/results/<gpu>.json) into PNG charts beside it.

Charts (each written only when the JSON holds its rows):
  <gpu>-norm-fwd.png   LayerNorm / RMSNorm forward: TB/s against row length
                       (fp16, 49152 rows) for ours, PyTorch and OneFlow's
                       recorded anchor; at cuDNN's benchmark shapes (bf16) ours
                       and cuDNN's published figure under cuDNN's byte count;
                       the copy bandwidth of the same run as a line.
  <gpu>-norm-bwd.png   the same for the backward.
  <gpu>-liger.png      LLM shapes (bf16): ours, Liger-Kernel, QuACK (where the
                       rows carry it) and PyTorch, µs, forward and
                       forward+backward.
  <gpu>-grid-bf16.png, <gpu>-grid-fp16.png
                       the training-shape grid (rows marked "grid"): per op,
                       PyTorch's, Liger-Kernel's and QuACK's time over ours
                       against the rows, a line per row length.
  <gpu>-quack-bf16.png, <gpu>-quack-fp16.png
                       rows that carry a QuACK column, whichever run they come
                       from: per op (LayerNorm / RMSNorm forward, backward,
                       forward+backward), QuACK's and Liger-Kernel's time over
                       ours against the rows, a line per row length.
  <gpu>-batchnorm.png  BatchNorm (and SyncBatchNorm): PyTorch's and our cuDNN
                       engine's time over our NATIVE engine's, per case (log
                       scale), and our AUTO engine's where it ran cuDNN.
  <gpu>-linear.png     the fully-connected layer: PyTorch's time over ours.
  <gpu>-hf.png         Hugging Face models' training steps (bench_hf.py): the
                       unconverted model's, Liger-Kernel's and the compiled
                       original's step time over ours.
  <gpu>-other.png      rows of any other op that carry vs_torch (the PyTorch
                       drop-in modules, say): PyTorch's time over ours.

Every figure is read from the JSON; nothing is typed in here except the
labels. Usage: plot.py RESULTS_JSON [...] (scripts/plot.sh installs matplotlib).
"""
from __future__ import annotations

import json
import os
import sys
import textwrap

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

SIZE = (10, 6)  # inches at DPI: 1000 x 600 pixels
DPI = 100
NORM_FP16_ROWS = 49152
COLORS = {"ours": "#1f77b4", "torch": "#d62728", "cudnn": "#2ca02c", "oneflow": "#9467bd",
          "liger": "#ff7f0e", "quack": "#8c564b", "copy": "#555555",
          "auto": "#17becf"}
KNOWN_OPS = {"layernorm_fwd", "rmsnorm_fwd", "layernorm_bwd", "rmsnorm_bwd", "layernorm_residual_fwd",
             "rmsnorm_fwd_bwd", "layernorm_fwd_bwd", "batchnorm_fwd_train", "batchnorm_bwd",
             "batchnorm_fwd_infer", "syncbatchnorm_fwd_bwd", "linear_fwd", "linear_bwd", "hf_train_step",
             "hf_train_step_profile", "groupnorm_fwd", "groupnorm_bwd", "groupnorm_fwd_bwd", "vae_decode",
             "unet_block_train_step"}


def main_rows(res: dict) -> list:
    """The rows of the run the file was written by (merged rows carry their
    "source"): the norm charts draw one run, never two runs' rows of one
    cell side by side."""
    return [r for r in res["rows"] if "source" not in r]


def title(res: dict, what: str, rows=()) -> str:
    """The chart's title: the file's GPU, date and commit; rows merged from a
    later run (a "run" field) name that run too, or alone if every row does."""
    runs = sorted({r["run"] for r in rows if r.get("run")})
    commit = f", commit {res['commit']}" if res.get("commit") else ""
    if runs and all(r.get("run") for r in rows):
        commit = ", " + "; ".join(runs)
    elif runs:
        commit += " and " + "; ".join(runs)
    return f"{what} — {res.get('gpu_name', res.get('gpu', '?'))} ({res.get('date', '?')}{commit})"


def save(fig, path: str) -> None:
    fig.savefig(path, dpi=DPI, metadata={"Software": None})
    plt.close(fig)
    print(f"wrote {path} ({os.path.getsize(path) // 1024} KiB)")


def shape_str(shape) -> str:
    return "×".join(str(d) for d in shape)


# ---------------------------------------------------------------------------
# LayerNorm / RMSNorm bandwidth against row length
# ---------------------------------------------------------------------------
def norm_panel(ax, res: dict, op: str, label: str) -> bool:
    rows = [r for r in main_rows(res) if r["op"] == op]
    if not rows:
        ax.set_visible(False)
        return False
    line = sorted((r for r in rows if r["dtype"] == "fp16" and r["shape"][0] == NORM_FP16_ROWS),
                  key=lambda r: r["shape"][1])
    if line:
        cols = [r["shape"][1] for r in line]
        ours = [r["gbps"] / 1e3 for r in line]
        # PyTorch and OneFlow moved the same bytes in their own time.
        torch_ = [r["gbps"] * r["us"] / r["torch_us"] / 1e3 for r in line]
        ax.plot(cols, ours, "o-", color=COLORS["ours"], label=f"ours (fp16, {NORM_FP16_ROWS} rows)")
        ax.plot(cols, torch_, "s--", color=COLORS["torch"], label="PyTorch (same rows)")
        of = [(r["shape"][1], r["gbps"] * r["us"] / r["oneflow_us"] / 1e3) for r in line if r.get("oneflow_us")]
        if of:
            ax.plot(*zip(*of), "^:", color=COLORS["oneflow"], label="OneFlow (design.md §7 anchor, not re-run)")
    pub = [r for r in rows if r.get("cudnn_published_tbps")]
    if pub:
        xs = [r["shape"][1] for r in pub]
        ax.scatter(xs, [r["tbps_cudnn_bytes"] for r in pub], marker="D", s=45, facecolors="none",
                   edgecolors=COLORS["ours"], linewidths=1.5, zorder=3,
                   label="ours at cuDNN's shapes (bf16, cuDNN's byte count)")
    # cuDNN published its figures for the H200 only: no anchor on other GPUs.
    if pub and res.get("gpu") == "h200":
        ax.scatter(xs, [r["cudnn_published_tbps"] for r in pub], marker="*", s=110, color=COLORS["cudnn"],
                   zorder=3, label="cuDNN 9.19.1 published (H200, its byte count)")
        for j, r in enumerate(sorted(pub, key=lambda r: r["shape"][1])):
            ax.annotate(shape_str(r["shape"]), (r["shape"][1], r["cudnn_published_tbps"]),
                        textcoords="offset points", xytext=(0, 8 + 11 * (j % 2)), ha="center", fontsize=7,
                        color=COLORS["cudnn"])
    copy = res["copy_gbps"] / 1e3
    ax.axhline(copy, color=COLORS["copy"], linewidth=1, linestyle="-.")
    ax.text(0.01, copy, f" copy {copy:.2f} TB/s (read + write)", transform=ax.get_yaxis_transform(),
            va="bottom", fontsize=8, color=COLORS["copy"])
    ax.set_xscale("log", base=2)
    ticks = [1 << p for p in range(5, 16)]
    ax.set_xticks(ticks)
    ax.set_xticklabels([f"{t // 1024}k" if t >= 1024 else str(t) for t in ticks], fontsize=8)
    ax.minorticks_off()
    ax.set_xlabel("row length (columns)")
    ax.set_ylabel("TB/s")
    ax.set_ylim(0, copy * 1.12)
    ax.set_title(label, fontsize=11)
    ax.grid(True, which="major", alpha=0.3)
    return True


def plot_norms(res: dict, stem: str) -> None:
    for direction, what in (("fwd", "forward: read x + write y"), ("bwd", "backward: read x, dy + write dx")):
        fig, axes = plt.subplots(1, 2, figsize=SIZE)
        drawn = [norm_panel(axes[0], res, f"layernorm_{direction}", f"LayerNorm {direction}"),
                 norm_panel(axes[1], res, f"rmsnorm_{direction}", f"RMSNorm {direction}")]
        if not any(drawn):
            plt.close(fig)
            continue
        fig.suptitle(title(res, f"LayerNorm / RMSNorm {what}"), fontsize=11)
        legend = {}
        for ax in axes:
            for h, l in zip(*ax.get_legend_handles_labels()):
                legend.setdefault(l, h)
        fig.tight_layout(rect=(0, 0.1, 1, 1))
        fig.legend(legend.values(), legend.keys(), loc="lower center", ncol=3, fontsize=8, frameon=False)
        save(fig, f"{stem}-norm-{direction}.png")


# ---------------------------------------------------------------------------
# Liger-Kernel at LLM shapes
# ---------------------------------------------------------------------------
def plot_liger(res: dict, stem: str) -> None:
    ops = [("rmsnorm_fwd", "RMSNorm forward"), ("layernorm_fwd", "LayerNorm forward"),
           ("rmsnorm_fwd_bwd", "RMSNorm forward + backward"), ("layernorm_fwd_bwd", "LayerNorm forward + backward")]
    # The LLM shapes only (results written before rows carried "llm_shape": every Liger row).
    marked = any("llm_shape" in r for r in res["rows"])
    liger_rows = [r for r in main_rows(res) if r.get("liger_us") and (r.get("llm_shape") or not marked)]
    if not liger_rows:
        return
    fig, axes = plt.subplots(2, 2, figsize=SIZE)
    for ax, (op, label) in zip(axes.flat, ops):
        rows = [r for r in liger_rows if r["op"] == op]
        if not rows:
            ax.set_visible(False)
            continue
        rows.sort(key=lambda r: (r["shape"][0] * r["shape"][1], r["shape"][1]))
        n = len(rows)
        xs = range(n)
        series = [("ours", "ours", [r["us"] for r in rows]), ("Liger-Kernel", "liger", [r["liger_us"] for r in rows])]
        if any(r.get("quack_us") for r in rows):
            series.append(("QuACK", "quack", [r.get("quack_us") or 0 for r in rows]))
        series.append(("PyTorch", "torch", [r["torch_us"] for r in rows]))
        w = 0.81 / len(series)
        for j, (name, color, vals) in enumerate(series):
            ax.bar([x + (j - (len(series) - 1) / 2) * w for x in xs], vals, w, label=name, color=COLORS[color])
        for x, r in zip(xs, rows):
            label = f"{r['vs_liger']:.2f}×" + (f" / {r['vs_quack']:.2f}×" if r.get("vs_quack") else "")
            ax.text(x, max(r["us"], r["liger_us"], r["torch_us"], r.get("quack_us") or 0) * 1.02, label,
                    ha="center", va="bottom", fontsize=7)
        ax.set_xticks(list(xs))
        ax.set_xticklabels([f"{r['shape'][0]}×{r['shape'][1]}" for r in rows], fontsize=7)
        ax.set_ylabel("µs (lower is better)", fontsize=8)
        ax.set_title(f"{label} (bf16)", fontsize=9)
        ax.set_ylim(0, max(max(r["us"], r["liger_us"], r["torch_us"], r.get("quack_us") or 0) for r in rows) * 1.18)
        ax.tick_params(axis="y", labelsize=7)
        ax.grid(True, axis="y", alpha=0.3)
    axes.flat[0].legend(fontsize=7, loc="upper left")
    head = ("Liger-Kernel and QuACK vs ours (label: Liger µs / ours µs, QuACK µs / ours µs)"
            if any(r.get("quack_us") for r in liger_rows) else "Liger-Kernel vs ours (label: Liger µs / ours µs)")
    fig.suptitle(title(res, head), fontsize=10)
    fig.tight_layout()
    save(fig, f"{stem}-liger.png")


# ---------------------------------------------------------------------------
# The training-shape grid
# ---------------------------------------------------------------------------
GRID_PANELS = [("layernorm_fwd", "LayerNorm forward"), ("rmsnorm_fwd", "RMSNorm forward"),
               ("layernorm_residual_fwd", "add & LayerNorm forward"), ("layernorm_bwd", "LayerNorm backward"),
               ("rmsnorm_bwd", "RMSNorm backward"), ("layernorm_fwd_bwd", "LayerNorm forward + backward"),
               ("rmsnorm_fwd_bwd", "RMSNorm forward + backward")]
COLS_COLORS = ["#1f77b4", "#2ca02c", "#9467bd", "#8c564b", "#e377c2"]


def rows_axis(ax, rows) -> None:
    """A ratio panel against the rows: the line at 1, the rows on a log2
    axis ticked at the rows measured."""
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xscale("log", base=2)
    xt = sorted({r["shape"][0] for r in rows})
    ax.set_xticks(xt)
    ax.set_xticklabels([f"{x // 1024}k" for x in xt], fontsize=7)
    ax.minorticks_off()
    ax.tick_params(axis="y", labelsize=7)


def legend_of(axes) -> dict:
    """Every panel's legend entries, once each (label -> handle)."""
    legend = {}
    for ax in axes.flat:
        for h, l in zip(*ax.get_legend_handles_labels()):
            legend.setdefault(l, h)
    return legend


def panel_lines(axes, panels, rows_dt):
    """Per panel (op, label) with rows: its axis, label, rows and lines, a
    line per row length (its color by the length's place among all of
    rows_dt's, its rows by row count); panels without rows are hidden."""
    cols_all = sorted({r["shape"][1] for r in rows_dt})
    for ax, (op, label) in zip(axes.flat, panels):
        rows = [r for r in rows_dt if r["op"] == op]
        if not rows:
            ax.set_visible(False)
            continue
        lines = []
        for j, c in enumerate(cols_all):
            line = sorted((r for r in rows if r["shape"][1] == c), key=lambda r: r["shape"][0])
            if line:
                lines.append((c, COLS_COLORS[j % len(COLS_COLORS)], line))
        yield ax, label, rows, lines


def plot_grid(res: dict, stem: str) -> None:
    grid = [r for r in main_rows(res) if r.get("grid")]
    for dtype in sorted({r["dtype"] for r in grid}):
        rows_dt = [r for r in grid if r["dtype"] == dtype]
        fig, axes = plt.subplots(2, 4, figsize=SIZE)
        for ax, label, rows, lines in panel_lines(axes, GRID_PANELS, rows_dt):
            for c, color, line in lines:
                xs = [r["shape"][0] for r in line]
                ax.plot(xs, [r["vs_torch"] for r in line], "o-", color=color, markersize=3, linewidth=1.2,
                        label=f"{c} cols: PyTorch / ours")
                lig = [(r["shape"][0], r["vs_liger"]) for r in line if r.get("vs_liger")]
                if lig:
                    ax.plot(*zip(*lig), "^--", color=color, markersize=3, linewidth=1,
                            label=f"{c} cols: Liger / ours")
                qk = [(r["shape"][0], r["vs_quack"]) for r in line if r.get("vs_quack")]
                if qk:
                    ax.plot(*zip(*qk), "x:", color=color, markersize=4, linewidth=1,
                            label=f"{c} cols: QuACK / ours")
            rows_axis(ax, rows)
            ax.set_title(label, fontsize=8)
            ax.grid(True, alpha=0.3)
            lo = min(min(r["vs_torch"], r.get("vs_liger") or r["vs_torch"], r.get("vs_quack") or r["vs_torch"])
                     for r in rows)
            hi = max(max(r["vs_torch"], r.get("vs_liger") or r["vs_torch"], r.get("vs_quack") or r["vs_torch"])
                     for r in rows)
            ax.set_ylim(min(0.8, lo - 0.05), max(1.2, hi + 0.1))
        legend = legend_of(axes)
        last = axes.flat[-1]
        last.axis("off")
        last.legend(legend.values(), legend.keys(), loc="center", fontsize=7, frameon=False)
        fig.text(0.5, 0.01, "rows (tokens per micro-batch)", ha="center", fontsize=8)
        # Rows merged in from a later, partial run carry it in `run`.
        runs = sorted({r["run"] for r in rows_dt if r.get("run")})
        head = f"Training shapes, {dtype}: other library's time / ours (above 1: ours faster)"
        suptitle = (f"{head} — {res.get('gpu_name', res.get('gpu', '?'))} (run {', '.join(runs)})" if runs
                    else title(res, head))
        fig.suptitle(suptitle, fontsize=10)
        fig.tight_layout(rect=(0, 0.03, 1, 1))
        save(fig, f"{stem}-grid-{dtype}.png")


QUACK_CAP = 3.0  # QuACK's LayerNorm forward at 4096 x 16384 is 13x ours: capped so the rest stays readable


def plot_quack(res: dict, stem: str) -> None:
    """Rows with a QuACK column (the main run's or one merged in): per op,
    QuACK's (solid) and Liger-Kernel's (dashed) time over ours against the
    rows, a line per row length; % of copy of ours in the panel's title."""
    qrows = [r for r in res["rows"] if "quack_us" in r]
    panels = [("layernorm_fwd", "LayerNorm forward"), ("layernorm_bwd", "LayerNorm backward"),
              ("layernorm_fwd_bwd", "LayerNorm forward + backward"), ("rmsnorm_fwd", "RMSNorm forward"),
              ("rmsnorm_bwd", "RMSNorm backward"), ("rmsnorm_fwd_bwd", "RMSNorm forward + backward")]
    for dtype in sorted({r["dtype"] for r in qrows}):
        rows_dt = [r for r in qrows if r["dtype"] == dtype]
        fig, axes = plt.subplots(2, 3, figsize=SIZE)
        for ax, label, rows, lines in panel_lines(axes, panels, rows_dt):
            for c, color, line in lines:
                for key, style, width, who in (("vs_quack", "o-", 1.2, "QuACK"), ("vs_liger", "^--", 1, "Liger")):
                    pts = [(r["shape"][0], r[key]) for r in line if r.get(key)]
                    if not pts:
                        continue
                    # A ratio past the cap is drawn on it, its value written beside.
                    ax.plot([x for x, _ in pts], [min(v, QUACK_CAP) for _, v in pts], style, color=color,
                            markersize=3, linewidth=width, label=f"{c} cols: {who} / ours")
                    for x, v in pts:
                        if v > QUACK_CAP:
                            ax.annotate(f"{v:.1f}", (x, QUACK_CAP), textcoords="offset points", xytext=(-4, -10),
                                        ha="right", fontsize=7, color=color)
            rows_axis(ax, rows)
            vals = [min(v, QUACK_CAP) for r in rows for v in (r.get("vs_quack"), r.get("vs_liger")) if v]
            if vals:
                ax.set_ylim(min(0.8, min(vals) - 0.05), max(1.2, max(vals) + 0.1))
            pct = [r["pct_copy"] for r in rows]
            ax.set_title(f"{label} (ours {min(pct):.0f}–{max(pct):.0f}% of copy)", fontsize=8)
            ax.grid(True, alpha=0.3)
        legend = legend_of(axes)
        fig.text(0.5, 0.01, f"rows (tokens); a ratio above {QUACK_CAP:g} is drawn at {QUACK_CAP:g}, its value "
                 "beside it", ha="center", fontsize=8)
        head = title(res, f"QuACK and Liger-Kernel against ours, {dtype}: their time / ours (above 1: ours faster)",
                     rows_dt)
        fig.suptitle("\n".join(textwrap.wrap(head, 140)), fontsize=9)
        fig.tight_layout(rect=(0, 0.12, 1, 1))
        fig.legend(legend.values(), legend.keys(), loc="lower center", ncol=4, fontsize=7, frameon=False,
                   bbox_to_anchor=(0.5, 0.03))
        save(fig, f"{stem}-quack-{dtype}.png")


# ---------------------------------------------------------------------------
# Ratio bars: BatchNorm, linear, other ops
# ---------------------------------------------------------------------------
def ratio_panel(ax, labels, series, ylabel: str, log: bool, horizontal: bool = False) -> None:
    """series: [(name, color, [ratio or None per label])]; a ratio is the
    other side's time over ours (above 1: ours is faster). Bars start at 1,
    so a bar going up (right) is a case where ours is faster, down (left)
    one where it is slower."""
    n = len(labels)
    k = len(series)
    w = 0.8 / k
    for j, (name, color, vals) in enumerate(series):
        pos = [i + (j - (k - 1) / 2) * w for i in range(n)]
        pos, vals = zip(*[(p, v) for p, v in zip(pos, vals) if v]) if any(vals) else ((), ())
        if horizontal:
            ax.barh(pos, [v - 1 for v in vals], w, left=1, label=name, color=color)
            for p, v in zip(pos, vals):
                ax.text(v * (1.03 if log else 1) if v >= 1 else v / (1.03 if log else 1), p,
                        f"{v:.2f}" if v < 10 else f"{v:.0f}", va="center", ha="left" if v >= 1 else "right",
                        fontsize=6)
        else:
            ax.bar(pos, [v - 1 for v in vals], w, bottom=1, label=name, color=color)
    if horizontal:
        ax.axvline(1.0, color="black", linewidth=1)
        ax.set_yticks(range(n))
        ax.set_yticklabels(labels, fontsize=7)
        ax.set_ylim(n - 0.4, -0.6)  # first case on top
        if log:
            ax.set_xscale("log")
        ax.set_xlabel(ylabel, fontsize=8)
        ax.tick_params(axis="x", labelsize=7)
        ax.grid(True, axis="x", alpha=0.3, which="both")
    else:
        ax.axhline(1.0, color="black", linewidth=1)
        ax.set_xticks(range(n))
        ax.set_xticklabels(labels, rotation=30, ha="right", fontsize=7)
        if log:
            ax.set_yscale("log")
        ax.set_ylabel(ylabel, fontsize=8)
        ax.tick_params(axis="y", labelsize=7)
        ax.grid(True, axis="y", alpha=0.3, which="both")
        ax.set_xlim(-0.6, n - 0.4)


def plot_batchnorm(res: dict, stem: str) -> None:
    bn = [r for r in res["rows"] if r["op"] in ("batchnorm_fwd_train", "batchnorm_fwd_infer", "batchnorm_bwd",
                                                  "syncbatchnorm_fwd_bwd")]
    if not bn:
        return

    def case(r):
        s = f"{r['dtype']} {shape_str(r['shape'])} {r.get('layout', '')} {r.get('epilogue', '')}"
        if r["op"] == "batchnorm_fwd_infer":
            s += " (inference)"
        if r["op"] == "syncbatchnorm_fwd_bwd":
            s = f"SyncBN, {r.get('ranks', '?')} GPUs: " + s + f" {r.get('batches', '')} (fwd+bwd)"
        return s

    def auto_ratio(r):
        # AUTO's time over NATIVE's, shown only where AUTO took the other engine.
        if not r or not r.get("auto_us") or r.get("auto_engine") in (None, "native"):
            return None
        return r["auto_us"] / r["us"]

    cases = []  # training cases in run order, then inference, then SyncBatchNorm
    for r in sorted(bn, key=lambda r: (r["op"] == "syncbatchnorm_fwd_bwd", r["op"] == "batchnorm_fwd_infer")):
        if case(r) not in cases:
            cases.append(case(r))
    fig, axes = plt.subplots(1, 2, figsize=SIZE, sharey=True)
    for ax, ops, what in ((axes[0], ("batchnorm_fwd_train", "batchnorm_fwd_infer"), "forward"),
                          (axes[1], ("batchnorm_bwd", "syncbatchnorm_fwd_bwd"), "backward")):
        by = {case(r): r for r in bn if r["op"] in ops}
        ratio_panel(ax, cases,
                    [("PyTorch (faster of cuDNN on / off)", COLORS["torch"],
                      [by[c].get("vs_torch") if c in by else None for c in cases]),
                     ("cuDNN through our CUDNN engine", COLORS["cudnn"],
                      [by[c].get("vs_cudnn") if c in by else None for c in cases]),
                     ("our AUTO engine, where it ran cuDNN", COLORS["auto"],
                      [auto_ratio(by.get(c)) for c in cases])],
                    "their time / ours (right of 1: ours faster; log scale)", log=True, horizontal=True)
        ax.set_title(f"BatchNorm {what}", fontsize=9)
    axes[1].tick_params(axis="y", left=False)
    fig.suptitle(title(res, "BatchNorm (ours: NATIVE engine): time relative to ours", bn), fontsize=10)
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    h, l = axes[0].get_legend_handles_labels()
    fig.legend(h, l, loc="lower center", ncol=3, fontsize=8, frameon=False)
    save(fig, f"{stem}-batchnorm.png")


def plot_linear(res: dict, stem: str) -> None:
    panels = []
    for op, what in (("linear_fwd", "forward (m, n, k: rows, outputs, inputs); PyTorch: F.linear, then the activation"),
                     ("linear_bwd", "backward (dx, dw, db); PyTorch: autograd of F.linear + activation")):
        rows = [r for r in res["rows"] if r["op"] == op]
        if rows:
            panels.append((rows, what))
    if not panels:
        return
    epis = ("bias", "bias_relu", "bias_gelu")
    epi_colors = {"bias": "#1f77b4", "bias_relu": "#ff7f0e", "bias_gelu": "#2ca02c"}
    fig, axes = plt.subplots(len(panels), 1, figsize=SIZE, squeeze=False)
    for ax, (rows, what) in zip(axes[:, 0], panels):
        keys = []
        for r in rows:
            key = (r["dtype"], tuple(r["shape"]))
            if key not in keys:
                keys.append(key)
        labels = [f"{dt} m{s[0]} n{s[1]} k{s[2]}" if len(s) == 3 else f"{dt} {shape_str(s)}" for dt, s in keys]
        present = [e for e in epis if any(r["epilogue"] == e for r in rows)]
        present += sorted({r["epilogue"] for r in rows} - set(present))
        series = []
        for e in present:
            by_key = {(r["dtype"], tuple(r["shape"])): r.get("vs_torch") for r in rows if r["epilogue"] == e}
            series.append((e, epi_colors.get(e, None), [by_key.get(k) for k in keys]))
        ratio_panel(ax, labels, series, "PyTorch time / ours", log=False)
        lo = min(v for _, _, vals in series for v in vals if v)
        hi = max(v for _, _, vals in series for v in vals if v)
        ax.set_ylim(min(0.8, lo - 0.05), max(1.2, hi + 0.05))
        ax.set_title(f"linear {what}", fontsize=9)
    axes[0][0].legend(fontsize=7, loc="upper left", ncol=len(epis))
    fig.suptitle(title(res, "Fully-connected layer: PyTorch's time over ours (above 1: ours faster)"), fontsize=10)
    fig.tight_layout()
    save(fig, f"{stem}-linear.png")


def plot_hf(res: dict, stem: str) -> None:
    """Hugging Face models' training steps: the unconverted model's step time
    over convert(model)'s and convert(model, fuse=True)'s, Liger-Kernel's over
    ours (eager), and the compiled original's over the compiled converted."""
    rows = [r for r in res["rows"] if r["op"] == "hf_train_step" and r.get("step_ms")]
    if not rows:
        return
    cases = []
    for r in rows:
        key = (r["model"], tuple(r["tokens"]), r["mode"])
        if key not in cases:
            cases.append(key)
    get = {(r["model"], tuple(r["tokens"]), r["mode"], r["fuse"]): r for r in rows}
    labels = [f"{m} {t[0]}x{t[1]} {mode}" for m, t, mode in cases]
    series = [
        ("torch / convert(model)", COLORS["ours"], [get.get(c + (False,), {}).get("vs_torch") for c in cases]),
        ("torch / convert(model, fuse=True)", COLORS["oneflow"],
         [get.get(c + (True,), {}).get("vs_torch") for c in cases]),
        ("Liger-Kernel / convert(model)", COLORS["liger"], [get.get(c + (False,), {}).get("vs_liger") for c in cases]),
    ]
    fig, ax = plt.subplots(figsize=(10, 9))
    ratio_panel(ax, labels, series, "the other's step time / ours (right of 1: ours faster)", log=False,
                horizontal=True)
    vals = [v for _, _, vs in series for v in vs if v]
    ax.set_xlim(min(0.85, min(vals) - 0.05), max(1.5, max(vals) + 0.1))
    ax.legend(fontsize=7, loc="lower right")
    fig.suptitle(title(res, "Hugging Face models, training step (bf16, AdamW)", rows), fontsize=10)
    fig.tight_layout()
    save(fig, f"{stem}-hf.png")


def plot_groupnorm(res: dict, stem: str) -> None:
    """GroupNorm: % of the copy bandwidth per shape and layout, forward and
    backward (SiLU; the backward with and without the weight gradients)."""
    rows = [r for r in res["rows"] if r["op"] in ("groupnorm_fwd", "groupnorm_bwd") and r.get("pct_copy")
            and "torch_us" not in r]  # bench/gn_time's rows (bench_groupnorm's: plot_groupnorm_torch)
    if not rows:
        return
    cases = []
    for r in rows:
        key = (shape_str(r["shape"]), r["layout"])
        if key not in cases:
            cases.append(key)
    labels = [f"{s} {lay}" for s, lay in cases]

    def pick(op, epi, wg=None):
        got = {}
        for r in rows:
            if r["op"] == op and r["epilogue"] == epi and (wg is None or r.get("weight_grads") == wg):
                got[(shape_str(r["shape"]), r["layout"])] = r["pct_copy"]
        return [got.get(c) for c in cases]

    series = [("forward", COLORS["liger"], pick("groupnorm_fwd", "none")),
              ("forward, SiLU", COLORS["ours"], pick("groupnorm_fwd", "silu")),
              ("backward, SiLU (dx)", COLORS["oneflow"], pick("groupnorm_bwd", "silu", False)),
              ("backward, SiLU (dx, dgamma, dbeta)", COLORS["torch"], pick("groupnorm_bwd", "silu", True))]
    series = [s for s in series if any(v is not None for v in s[2])]
    fig, ax = plt.subplots(figsize=SIZE)
    w = 0.8 / len(series)
    for j, (name, color, vals) in enumerate(series):
        pos = [i + (j - (len(series) - 1) / 2) * w for i, v in enumerate(vals) if v]
        ax.bar(pos, [v for v in vals if v], w, label=name, color=color)
    ax.set_xticks(range(len(labels)))
    ax.set_xticklabels(labels, rotation=45, ha="right", fontsize=7)
    ax.set_ylabel("% of the copy bandwidth (fwd: read x + write y; bwd: read x, dy + write dx)", fontsize=8)
    ax.axhline(80, color="gray", linestyle="--", linewidth=0.8)  # issue 38's target
    ax.set_ylim(0, 100)
    ax.legend(fontsize=7)
    fig.suptitle(title(res, "GroupNorm (bf16, 32 groups), ours against the copy", rows), fontsize=10)
    fig.tight_layout()
    save(fig, f"{stem}-groupnorm.png")


def plot_groupnorm_torch(res: dict, stem: str) -> None:
    """GroupNorm against PyTorch (bench/bench_groupnorm.py): PyTorch's time
    over ours per case, eager and torch.compile, forward and forward+backward
    (log scale); the VAE decode and the UNet-style step in ms."""
    rows = [r for r in res["rows"] if r["op"] in ("groupnorm_fwd", "groupnorm_fwd_bwd") and r.get("vs_torch")]
    e2e = [r for r in res["rows"] if r["op"] in ("vae_decode", "unet_block_train_step")]
    if not rows and not e2e:
        return
    fig, (ax, bx) = plt.subplots(1, 2, figsize=SIZE, gridspec_kw={"width_ratios": [3, 1]})
    cases = []
    for r in rows:
        key = (shape_str(r["shape"]), r["layout"])
        if key not in cases:
            cases.append(key)
    series = []
    for op, tag in (("groupnorm_fwd", "fwd"), ("groupnorm_fwd_bwd", "fwd+bwd")):
        for key, name, color in (("vs_torch", "eager", COLORS["torch"]), ("vs_torch_compile", "compile", COLORS["liger"])):
            got = {(shape_str(r["shape"]), r["layout"]): r.get(key) for r in rows if r["op"] == op}
            series.append((f"{tag}: PyTorch {name} / ours", color if tag == "fwd" else COLORS["quack" if name == "compile" else "oneflow"],
                           [got.get(c) for c in cases]))
    w = 0.8 / len(series)
    for j, (name, color, vals) in enumerate(series):
        pos = [i + (j - (len(series) - 1) / 2) * w for i, v in enumerate(vals) if v]
        ax.bar(pos, [v for v in vals if v], w, label=name, color=color)
    ax.set_yscale("log")
    ax.axhline(1, color="gray", linewidth=0.8)
    ax.set_xticks(range(len(cases)))
    ax.set_xticklabels([f"{s} {lay}" for s, lay in cases], rotation=45, ha="right", fontsize=7)
    ax.set_ylabel("PyTorch's time / ours (above 1: ours faster)", fontsize=8)
    ax.legend(fontsize=7)
    labels, vals, colors = [], [], []
    for r in e2e:
        labels.append(("VAE " if r["op"] == "vae_decode" else "UNet step ") + f"{r['impl']} {r['layout']}"
                      + (f" {r['mode']}" if r.get("mode", "eager") != "eager" else ""))
        vals.append(r["ms"])
        colors.append(COLORS["ours"] if r["impl"] == "ours" else COLORS["torch"])
    bx.barh(range(len(vals)), vals, color=colors)
    bx.set_yticks(range(len(vals)))
    bx.set_yticklabels(labels, fontsize=7)
    bx.invert_yaxis()
    bx.set_xlabel("ms", fontsize=8)
    fig.suptitle(title(res, "GroupNorm + SiLU (bf16, 32 groups) against PyTorch", rows + e2e), fontsize=10)
    fig.tight_layout()
    save(fig, f"{stem}-groupnorm-torch.png")


def plot_other(res: dict, stem: str) -> None:
    rows = [r for r in res["rows"] if r["op"] not in KNOWN_OPS and r.get("vs_torch")]
    if not rows:
        return
    labels = [(f"{r['op']} {r.get('dtype', '')} {shape_str(r.get('shape', []))}"
               + (f" {r['ranks']} GPUs" if r.get("ranks") else "")).strip() for r in rows]
    fig, ax = plt.subplots(figsize=SIZE)
    ratio_panel(ax, labels, [("PyTorch time / ours", COLORS["torch"], [r["vs_torch"] for r in rows])],
                "PyTorch time / ours (above 1: ours faster)", log=False)
    ax.set_ylim(min(0.8, min(r["vs_torch"] for r in rows) - 0.05), max(1.2, max(r["vs_torch"] for r in rows) + 0.05))
    fig.suptitle(title(res, "Other rows against PyTorch", rows), fontsize=10)
    fig.tight_layout()
    save(fig, f"{stem}-other.png")


def main() -> int:
    if len(sys.argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    for path in sys.argv[1:]:
        with open(path) as f:
            res = json.load(f)
        stem = path[:-5] if path.endswith(".json") else path
        plot_norms(res, stem)
        plot_liger(res, stem)
        plot_grid(res, stem)
        plot_quack(res, stem)
        plot_batchnorm(res, stem)
        plot_linear(res, stem)
        plot_other(res, stem)
        plot_hf(res, stem)
        plot_groupnorm(res, stem)
        plot_groupnorm_torch(res, stem)
    return 0


if __name__ == "__main__":
    sys.exit(main())
