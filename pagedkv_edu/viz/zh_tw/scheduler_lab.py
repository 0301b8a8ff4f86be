"""zh-TW lines of :mod:`pagedkv_edu.viz.scheduler_lab`: chapter 6's scheduler lab (its captions, charts and
refusals)."""

MESSAGES: dict[str, str] = {
    "paged": "分頁式",
    "contiguous": "連續式",
    "no cap": "不設上限",
    "unused": "不使用",
    "{memory} · token budget {budget} · watermark {watermark} · seats {seats} · KV {kv} tokens":
        "{memory}記憶體 · token 預算：{budget} · 水位線：{watermark} · 座位：{seats} · KV：{kv} 個 token",
    "kv_budget_tokens={kv} cannot serve this workload with {memory} memory: {reason}":
        "kv_budget_tokens={kv} 無法以{memory}記憶體服務這份工作負載：{reason}",
    "time to first token: p50 {p50:.1f} ms (dashed), p99 {p99:.1f} ms (dotted)":
        "首個 token 延遲時間：p50 {p50:.1f} ms（虛線），p99 {p99:.1f} ms（點線）",
    "{ms:g} ms (modelled)": "{ms:g} ms（模型時間）",
    "share of requests with their first token": "已得到首個 token 的請求比例",
    "gaps between tokens: p50 {p50:.2f}, p99 {p99:.2f}, worst {worst:.2f} ms":
        "token 之間的間隔：p50 {p50:.2f}、p99 {p99:.2f}、最長 {worst:.2f} ms",
    "× the decode floor ({floor:.2f} ms); bars: log scale": "× 解碼步驟的下限（{floor:.2f} ms）；長條：對數尺度",
    "{preemptions} preemptions ({requests} requests)": "{preemptions} 次搶佔（{requests} 個請求）",
    "no preemption": "沒有搶佔",
    "this run: {steps} steps, {ms:.1f} ms modelled · {preempted} · peak {peak} running":
        "這次執行：{steps} 步，模型時間 {ms:.1f} ms · {preempted} · 最多 {peak} 個同時執行",
}
