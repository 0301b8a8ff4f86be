"""zh-TW lines of :mod:`pagedkv_edu.viz.scheduler_widget`: the scheduler lab's controls (chapter 6)."""

MESSAGES: dict[str, str] = {
    "no cap": "不設上限",
    "memory": "記憶體",
    "token budget": "token 預算",
    "watermark": "水位線",
    "seats": "座位",
    "KV tokens": "KV token 數",
    "step": "步驟",
    "refused: {reason}": "已拒絕：{reason}",
    "scheduler lab: {caption}; step {step} of {steps}, {preemptions} preemptions":
        "排程器實驗：{caption}；第 {step} 步（共 {steps} 步），{preemptions} 次搶佔",
}
