"""zh-TW lines of :mod:`pagedkv_edu.viz.policy_table`: chapter 2's table of runs side by side."""

MESSAGES: dict[str, str] = {
    "waste: over_reserved": "浪費：過度預留",
    "waste: internal": "浪費：內部碎片化",
    "waste: external": "浪費：外部碎片化",
    "utilisation": "利用率",
    "peak concurrency": "峰值並行請求數",
    "running while others wait": "有人等待時的同時執行數",
    "mean queue delay (steps)": "平均排隊延遲（步）",
    "preemptions": "搶佔次數",
    "steps to serve all {n}": "服務完 {n} 個請求的步數",
}
