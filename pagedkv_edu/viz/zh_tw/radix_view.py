"""zh-TW lines of :mod:`pagedkv_edu.viz.radix_view`: chapter 8's pictures of a radix tree."""

MESSAGES: dict[str, str] = {
    "{tokens} of {capacity} tokens, {nodes} nodes": "{tokens}/{capacity} 個 token，{nodes} 個節點",
    "{label} ({n} tokens)": "{label}（{n} 個 token）",
    "{n} tok": "{n} 個 token",
    "{n} tok · in use": "{n} 個 token · 使用中",
    "held by a running request (locked)": "被執行中的請求持有（已鎖住）",
    "unreferenced: evictable, least recently used leaf first": "無人引用：可逐出，最近最少使用的葉節點最先逐出",
    "radix tree": "基數樹",
    "; ": "；",
    "{title}: {nodes} nodes, {tokens} tokens": "{title}：{nodes} 個節點，{tokens} 個 token",
}
