"""zh-TW lines of :mod:`pagedkv_edu.exercises.ch9`: last-block waste at a given block size."""

MESSAGES: dict[str, str] = {
    "the paged-KV-cache article's 825-token request, B = 16": "《分頁式 KV 快取》一文中 825 個 token 的請求，B = 16",
    "a full last block wastes nothing": "最後一個區塊剛好填滿，沒有浪費",
    "one token": "只有一個 token",
    "block size 1 never wastes": "區塊大小為 1 時永遠不會浪費",
    "an empty sequence holds no block": "空序列不佔用任何區塊",
    "hidden case {n}": "隱藏案例 {n}",
    "(n={n}, B={b}): got {got}, expected {expected}: a number of slots is a whole number":
        "(n={n}, B={b})：得到 {got}，應為 {expected}：槽位數一定是整數",
    "that is the filled slots of the last block, not the empty ones": "這是最後一個區塊裡已填入的槽位數，不是空著的槽位數",
    "the last block is exactly full: nothing is wasted": "最後一個區塊剛好填滿：沒有任何浪費",
    "negative: rounded the number of blocks down instead of up?": "是負數：是不是把區塊數無條件捨去了，而不是無條件進位？",
    "-n & (B - 1) is the waste only when B is a power of two; here B = {b}":
        "只有在 B 是二的冪次時，-n & (B - 1) 才等於浪費；這裡 B = {b}",
    "(n={n}, B={b}): got {got}, expected {expected}": "(n={n}, B={b})：得到 {got}，應為 {expected}",
    "(n={n}, B={b}): got {got}, expected {expected} ({hint})": "(n={n}, B={b})：得到 {got}，應為 {expected}（{hint}）",
}
