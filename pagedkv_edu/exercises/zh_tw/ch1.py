"""zh-TW lines of :mod:`pagedkv_edu.exercises.ch1`: first-fit placement in an arena."""

MESSAGES: dict[str, str] = {
    "one large hole": "一個大空洞",
    "the first hole is too small, the second fits": "第一個空洞太小，第二個放得下",
    "first fit, not best fit: take the lowest hole that fits": "是首次適配，不是最佳適配：取放得下的空洞中位址最低的那個",
    "first fit, not worst fit": "是首次適配，不是最差適配",
    "holes given out of address order": "空洞沒有按位址順序列出",
    "enough free slots in total, but no hole fits": "空閒槽位總數足夠，但沒有任何空洞放得下",
    "an exact fit": "剛好放得下",
    "hidden case {n}": "隱藏案例 {n}",
    "got {got}, expected {expected!r} (a hole's start, or None when no hole fits)":
        "得到 {got}，應為 {expected!r}（某個空洞的起點；沒有空洞放得下時為 None）",
    "the hole at {start} has {slots} slots, enough for {size}": "位於 {start} 的空洞有 {slots} 個槽位，足以放下 {size} 個",
    "{value} is not the start of any hole": "{value} 不是任何空洞的起點",
    "the hole at {start} has only {slots} slots": "位於 {start} 的空洞只有 {slots} 個槽位",
    "the hole at {start} fits, but the one at {first} fits too and comes first in memory":
        "位於 {start} 的空洞放得下，但位於 {first} 的也放得下，而且在記憶體中排在前面",
    "holes {holes}, size {size}: got {got!r}, expected {expected!r} ({why})":
        "空洞 {holes}，大小 {size}：得到 {got!r}，應為 {expected!r}（{why}）",
}
