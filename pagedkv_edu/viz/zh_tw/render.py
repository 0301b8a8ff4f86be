"""zh-TW lines of :mod:`pagedkv_edu.viz.render`: the block pool picture every chapter shows (grid, tables, counters)."""

MESSAGES: dict[str, str] = {
    "free": "空閒",
    "held": "佔用",
    "{n} reqs": "{n} 個請求",
    "{request}: {tokens} tokens, waste {waste}": "{request}：{tokens} 個 token，浪費 {waste} 個槽位",
    "logical": "邏輯",
    "physical": "實體",
    "filled": "已填",
    "⋯ {hidden} more rows": "⋯ 還有 {hidden} 列",
    "used {used}/{total} blocks · free {free} · tokens {tokens} · waste {waste} slots ({percent:.1f}%)":
        "已用 {used}/{total} 個區塊 · 空閒 {free} · {tokens} 個 token · 浪費 {waste} 個槽位（{percent:.1f}%）",
    "used {used}/{total} blocks · free {free} · tokens {tokens} · waste {waste} slots ({percent:.1f}%)"
    " · held elsewhere {other}":
        "已用 {used}/{total} 個區塊 · 空閒 {free} · {tokens} 個 token · 浪費 {waste} 個槽位（{percent:.1f}%）"
        " · 他處佔用 {other}",
    "block size {size} · next free: [{free}]": "區塊大小 {size} · 空閒佇列：[{free}]",
    "no live requests": "沒有進行中的請求",
}
