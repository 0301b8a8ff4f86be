"""zh-TW lines of :mod:`pagedkv_edu.viz.replay`: chapter 6's replay of a recorded run (frames and filmstrip)."""

MESSAGES: dict[str, str] = {
    "admission burst": "允入高峰",
    "first preemption": "第一次搶佔",
    "shared prefix": "共享前綴",
    "drain": "收尾",
    "running": "執行中",
    "preempted": "被搶佔",
    "waiting": "等待中",
    "finished": "已完成",
    "not arrived": "尚未抵達",
    "running ({n})": "執行中（{n}）",
    "preempted ({n})": "被搶佔（{n}）",
    "waiting ({n})": "等待中（{n}）",
    "tokens this step: {prefill} prefill + {decode} decode of a budget of {cap}":
        "這一步的 token：預填充 {prefill} + 解碼 {decode}，預算 {cap}",
    "tokens this step: {prefill} prefill + {decode} decode (no cap)":
        "這一步的 token：預填充 {prefill} + 解碼 {decode}（不設上限）",
    "admitted {ids}": "允入 {ids}",
    "preempted {ids}": "搶佔 {ids}",
    "finished {ids}": "完成 {ids}",
    "copy-on-write {pairs}": "寫入時複製 {pairs}",
    "decode only": "只有解碼",
    "{request}: no blocks ({where})": "{request}：沒有區塊（{where}）",
    "{request}: {tokens} tokens in 1 block of {size} [{blocks}]":
        "{request}：{tokens} 個 token，佔 1 個區塊（每區塊 {size} 個槽位）[{blocks}]",
    "{request}: {tokens} tokens in {n} blocks of {size} [{blocks}]":
        "{request}：{tokens} 個 token，佔 {n} 個區塊（每區塊 {size} 個槽位）[{blocks}]",
    "blocks of {size}: {used}/{total} used, {shared} shared, {cached} cached; {tokens} tokens in {slots} slots":
        "區塊大小 {size}：已用 {used}/{total}，共用 {shared}，已快取 {cached}；{tokens} 個 token 佔 {slots} 個槽位",
    "step {step}/{steps} · running {running} · preempted {preempted} · waiting {waiting} · {memory}":
        "第 {step}/{steps} 步 · 執行中 {running} · 被搶佔 {preempted} · 等待中 {waiting} · {memory}",
    "{name}: step {step}": "{name}：第 {step} 步",
    ", ": "、",
    "{name} (step {step})": "{name}（第 {step} 步）",
    "key frames: {frames}": "關鍵影格：{frames}",
}
