"""The capacity plan: the cheapest setup that meets the latency targets for a number of concurrent users or a
request rate, over the whole catalog by default (a filter narrows it; uploaded and typed-in devices join), with the
sidebar's format, KV dtype and efficiency; a Pareto chart of throughput per device against speed per user; launch
settings for each engine; and the static-batching trade-off with the same knee as the Batching section."""

from __future__ import annotations

import altair as alt
import streamlit as st

from planner import ui_data as ud

from ..common import show_chart, TP_HELP, Context, cached_model, esc, guarded, knee_for, legend_below, show_table


@st.cache_data(max_entries=64, show_spinner="simulating the candidate setups ...")
def cached_plan(model_ref, hw_refs: tuple, scenario, qps, ttft, tpot, kv, eff, formats):
    from ..common import cached_hardware

    hw = [r[1] if r[0] == "catalog" else cached_hardware(r) for r in hw_refs]
    return ud.serving_plan(cached_model(model_ref), hw, scenario, qps, ttft, tpot, kv=kv, efficiency=eff,
                           formats=formats)


@st.cache_data(max_entries=64, show_spinner=False)
def cached_batching(model_ref, hw_ref, weights, kv, prompt, output, eff, knee):
    from ..common import cached_hardware

    return ud.batching_tradeoff(cached_model(model_ref), cached_hardware(hw_ref), weights, kv, prompt, output, eff,
                                knee)


def _reset_targets() -> None:
    from planner.serving import SCENARIOS

    sc = SCENARIOS[st.session_state["serving_scenario"]]
    st.session_state["serving_qps"] = float(sc.workload.qps)
    st.session_state["serving_ttft"] = float(sc.ttft_p95_ms)
    st.session_state["serving_tpot"] = float(sc.tpot_p95_ms)


def inputs(catalog: list[str]) -> dict:
    from planner.serving import SCENARIOS

    ss = st.session_state
    names = list(SCENARIOS)
    ss.setdefault("serving_scenario", "chat" if "chat" in names else names[0])
    sc = SCENARIOS[ss["serving_scenario"]]
    ss.setdefault("serving_qps", float(sc.workload.qps))
    ss.setdefault("serving_ttft", float(sc.ttft_p95_ms))
    ss.setdefault("serving_tpot", float(sc.tpot_p95_ms))
    ss.setdefault("serving_load", "users")
    ss.setdefault("serving_users", 20)
    c = st.columns([2, 1, 1, 1, 1])
    c[0].selectbox("Scenario", names, key="serving_scenario", on_change=_reset_targets,
                   format_func=lambda n: f"{n}: {SCENARIOS[n].description}")
    c[1].radio("Load as", ["users", "rate"], key="serving_load", horizontal=True,
               format_func={"users": "concurrent users", "rate": "requests/s"}.get)
    if ss["serving_load"] == "users":
        c[2].number_input("Concurrent users", min_value=1, max_value=1_000_000, step=1, key="serving_users",
                          help="users each waiting on one streamed answer at a time (no think time)")
    else:
        c[2].number_input("Requests/s", min_value=0.001, max_value=10_000.0, key="serving_qps")
    c[3].number_input("TTFT p95 target (ms)", min_value=1.0, max_value=600_000.0, key="serving_ttft")
    c[4].number_input("TPOT p95 target (ms)", min_value=0.1, max_value=60_000.0, key="serving_tpot")
    f = st.columns([3, 1])
    f[0].multiselect("Only these catalog devices (empty: the whole catalog)", catalog, key="serving_filter")
    f[1].checkbox("Also search other formats", key="serving_all_formats",
                  help="Off: only the sidebar's weight format. On: the scenario's formats (16-bit, fp8, int8, int4).")
    return {"scenario": ss["serving_scenario"], "sc": sc}


def render(ctx: Context) -> None:
    from planner.hardware import list_hardware_ids

    inp, ss = ctx.inputs, st.session_state
    chosen = inputs(list_hardware_ids())
    sc = chosen["sc"]
    ttft, tpot = float(ss["serving_ttft"]), float(ss["serving_tpot"])
    if ss["serving_load"] == "users":
        users = int(ss["serving_users"])
        qps = ud.users_to_qps(users, sc.workload.output.mean, tpot)
        load = (f"{users:,} concurrent users → {qps:,.2f} requests/s (Little's law: users / (mean output "
                f"{sc.workload.output.mean:g} tokens x TPOT target {tpot:g} ms))")
    else:
        qps = float(ss["serving_qps"])
        load = f"{qps:g} requests/s"
    extra = tuple(r for r in ctx.refs if r[0] != "catalog")
    filt = tuple(("catalog", h) for h in ss.get("serving_filter") or [])
    formats = None if ss.get("serving_all_formats") else (inp.weights,)
    if filt:
        hw_refs = filt + extra
    elif extra:  # the whole catalog plus the uploaded / typed-in devices
        hw_refs = tuple(("catalog", h) for h in list_hardware_ids()) + extra
    else:
        hw_refs = ()
    with guarded("capacity plan"):
        out = cached_plan(inp.model_ref, hw_refs, chosen["scenario"], qps, ttft, tpot, inp.kv, inp.eff, formats)
        _show_plan(ctx, out, load, ttft, tpot, hw_refs, extra)
    _batching(ctx)


def _show_plan(ctx, out, load, ttft, tpot, hw_refs, extra) -> None:
    inp = ctx.inputs
    where = ("the devices in the filter" if any(r[0] == "catalog" for r in hw_refs) and len(hw_refs) < 40
             else "the whole catalog") + (f" and {len(extra)} uploaded / typed-in device(s)" if extra else "")
    st.markdown(f"**Capacity plan** for {esc(inp.model_name)} on {where}: {load}; workload {esc(out['workload'])}; "
                f"targets TTFT p95 ≤ {ttft:g} ms, TPOT p95 ≤ {tpot:g} ms; KV cache {inp.kv}; searched formats: "
                f"{', '.join(out['formats'])}. Each row met the targets in its own continuous-batching simulation.")
    if inp.eff.startswith("runtime:"):
        st.caption(f"The simulation uses the calibrated / default efficiencies: the {inp.eff.split(':', 1)[1]} "
                   f"runtime profile applies to the single-configuration numbers above, not to the capacity plan.")
    table, best = out["table"], out["best"]
    if best is None:
        st.warning("No device meets the targets at this load: loosen the targets, lower the load or search other "
                   "formats.")
    else:
        tok = best.get("max_num_seqs") or 1
        st.success(f"Cheapest: {int(best['gpus'])} x {esc(best['hardware'])} ({best['weights']}, TP {int(best['tp'])}"
                   + (f", PP {int(best['pp'])}" if best["pp"] > 1 else "") + f", {int(best['replicas'])} replica(s))"
                   + (f" at ${best['usd_per_hour']:,.2f}/hour" if best.get("usd_per_hour") else "")
                   + f": TTFT p95 {best['ttft_p95_ms']:,.0f} ms, TPOT p95 {best['tpot_p95_ms']:,.1f} ms")
        show_table(table, help_for={"TP": TP_HELP, "PP": TP_HELP})
        _pareto(out["configs"], best)
        _launch(ctx, best, out, int(tok))
    rej = out["rejected"]
    if not rej.empty:
        with st.expander(f"Devices that cannot meet the targets ({len(rej)})"):
            show_table(rej)
    recs = [r for r in out["recommendations"] if r.get("topic") != "batch size"]
    if recs:
        st.markdown("**Recommendations** (each computed by comparing alternatives with the model)")
        st.markdown("\n".join(f"- {esc(r['recommendation'])}" for r in recs))


def _pareto(cfg, best) -> None:
    if cfg.empty:
        return
    chosen = cfg.assign(chosen=(cfg["hardware"] == best["hardware"]) & (cfg["weights"] == best["weights"])
                        & (cfg["tp"] == best["tp"]) & (cfg["pp"] == best["pp"]) & (cfg["gpus"] == best["gpus"]))
    x = alt.X("tok_s_per_user:Q", title="tokens/s per user (1000 / TPOT p95)")
    y = alt.Y("tok_s_per_gpu:Q", title="output tokens/s per device")
    tip = [alt.Tooltip("label:N", title="setup"), alt.Tooltip("tok_s_per_user:Q", title="tok/s per user",
                                                                 format=",.1f"),
           alt.Tooltip("tok_s_per_gpu:Q", title="tok/s per device", format=",.1f"), alt.Tooltip("pareto:N")]
    pts = alt.Chart(chosen).mark_point(filled=True, size=70).encode(
        x=x, y=y, color=alt.Color("hardware:N", title="device", legend=legend_below("device")),
        opacity=alt.condition("datum.pareto", alt.value(1.0), alt.value(0.35)), tooltip=tip)
    front = alt.Chart(chosen[chosen["pareto"]].sort_values("tok_s_per_user")).mark_line(
        color="gray", strokeDash=[4, 3]).encode(x=x, y=y)
    mark = alt.Chart(chosen[chosen["chosen"]]).mark_point(shape="diamond", size=320, color="black",
                                                           strokeWidth=2).encode(x=x, y=y, tooltip=tip)
    txt = mark.mark_text(dy=-16, fontWeight="bold").encode(text=alt.value("chosen"))
    show_chart(alt.layer(front, pts, mark, txt).properties(
        title="Throughput per device vs speed per user (dashed: Pareto front; diamond: the chosen setup)",
        height=320))


def _launch(ctx, best, out, max_seqs) -> None:
    inp = ctx.inputs
    m = cached_model(inp.model_ref)
    need = int(4 * (out["prompt_mean"] + out["output_mean"]))
    max_len = int(min(m.max_position_embeddings, 1 << max(need - 1, 1).bit_length()))
    cmds = ud.launch_commands(m, best["weights"], inp.kv, int(best["tp"]), int(best["pp"]), max_seqs, max_len)
    st.markdown(f"**Launch settings** for one replica of the chosen setup (x{int(best['replicas'])} replicas behind "
                f"a load balancer); `--max-model-len` {max_len:,} covers 4x the mean request:")
    tabs = st.tabs(list(cmds))
    for t, (engine, cmd) in zip(tabs, cmds.items()):
        t.code(cmd, language="bash")


def _batching(ctx: Context) -> None:
    inp = ctx.inputs
    st.markdown(f"**Latency / throughput trade-off** (static batches of the sidebar's prompt {inp.prompt:,} and output "
                f"{inp.output:,}; knee: the same definition and number as the Batching section)")
    if inp.tp > 1:
        st.caption(f"The static-batching table is for one device; the Batching section shows TP {inp.tp}.")
        return
    for ref, e in zip(ctx.refs, ctx.estimates):
        with guarded(f"batching {e.hardware}"):
            k = knee_for(ctx, ref)
            df = cached_batching(inp.model_ref, ref, inp.weights, inp.kv, inp.prompt, inp.output, inp.eff,
                                 k["batch"] if k else None)
            st.caption(f"{esc(e.hardware)}: knee at batch {k['batch']}" if k else f"{esc(e.hardware)}: no batch fits")
            show_table(df)
