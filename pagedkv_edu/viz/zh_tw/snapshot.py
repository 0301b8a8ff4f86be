"""zh-TW lines of :mod:`pagedkv_edu.viz.snapshot`: a picture's counters as one line (its text/plain)."""

MESSAGES: dict[str, str] = {
    "{used} of {total} blocks used, {free} free; {tokens} tokens in {n} request; waste {waste} slots ({percent:.1f}%)":
        "已用 {used}/{total} 個區塊，空閒 {free}；{n} 個請求共 {tokens} 個 token；浪費 {waste} 個槽位（{percent:.1f}%）",
    "{used} of {total} blocks used, {free} free; {tokens} tokens in {n} requests; waste {waste} slots ({percent:.1f}%)":
        "已用 {used}/{total} 個區塊，空閒 {free}；{n} 個請求共 {tokens} 個 token；浪費 {waste} 個槽位（{percent:.1f}%）",
    "{used} of {total} blocks used, {free} free; {tokens} tokens in {n} request; waste {waste} slots ({percent:.1f}%); "
    "{other} held by other requests":
        "已用 {used}/{total} 個區塊，空閒 {free}；{n} 個請求共 {tokens} 個 token；浪費 {waste} 個槽位（{percent:.1f}%）；"
        "其他請求佔用 {other} 個",
    "{used} of {total} blocks used, {free} free; {tokens} tokens in {n} requests; waste {waste} slots ({percent:.1f}%); "
    "{other} held by other requests":
        "已用 {used}/{total} 個區塊，空閒 {free}；{n} 個請求共 {tokens} 個 token；浪費 {waste} 個槽位（{percent:.1f}%）；"
        "其他請求佔用 {other} 個",
}
