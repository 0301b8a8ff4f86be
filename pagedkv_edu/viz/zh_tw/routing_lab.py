"""zh-TW lines of :mod:`pagedkv_edu.viz.routing_lab`: chapter 11's routing lab (its panels and refusals)."""

MESSAGES: dict[str, str] = {
    "consultants": "顧問",
    "tenants": "租戶",
    "chats": "對話",
    "{blocks:,} blocks per replica refused for the {workload} at {rate:g}/s: {reason}":
        "每個副本 {blocks:,} 個區塊，容納不了每秒 {rate:g} 個請求的{workload}：{reason}",
    "{workload} at {rate:,.0f} requests/s, {replicas} replicas of {blocks:,} blocks":
        "{workload}，每秒 {rate:,.0f} 個請求，{replicas} 個副本，每個 {blocks:,} 個區塊",
    "thresholds {cache:.2f}, {absolute}, {relative:g}x (the shaded rows use them); {measured} of {total} requests "
    "measured":
        "門檻 {cache:.2f}、{absolute}、{relative:g}x（有底色的列使用它們）；量測 {total} 個請求中的 {measured} 個",
    "prefix hit rate": "前綴命中率",
    "TTFT, log: {p50} to {p99} (ms)": "TTFT（對數）：{p50} 到 {p99}（ms）",
    "per replica": "每個副本",
    "Seed {seed}; the first {warmup} requests warm the caches. Bold: the highest hit rate, the lowest p99. ×: the "
    "busiest replica over the mean (red above 2).":
        "種子 {seed}；前 {warmup} 個請求用來暖機快取。粗體：最高的命中率、最低的 p99。"
        "×：最忙的副本與平均的比值（超過 2 時為紅色）。",
    "routing policies compared": "路由策略比較",
    "routing policies compared in {count} settings": "{count} 種設定下的路由策略比較",
    "Each panel: seed {seed}, the first {warmup} requests warm the caches; the hit rate, TTFT p50 / p99 in ms, the "
    "requests each replica served and the busiest over the mean. Bold: the best of a panel.":
        "每個面板：種子 {seed}，前 {warmup} 個請求用來暖機快取；命中率、TTFT p50／p99（ms）、每個副本服務的請求數，"
        "以及最忙的副本與平均的比值。粗體：面板中最好的值。",
}
