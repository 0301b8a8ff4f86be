"""zh-TW lines of :mod:`pagedkv_edu.engine.guards`: the engine's checks on a reader's block manager, which the
graders' layer hands its translator (the engine sits below the language module)."""

MESSAGES: dict[str, str] = {
    "returned {ids}, but the sequence's table is {table}: return the whole table":
        "回傳了 {ids}，但這條序列的區塊表是 {table}：請回傳整個區塊表",
    "the table {table} does not start with the cached prefix's blocks {prefix}":
        "區塊表 {table} 的開頭不是已快取前綴的區塊 {prefix}",
    "returned {new}, but the table went from {old} to {table}: return the ids it gained (a copy-on-write's "
    "replacement first)":
        "回傳了 {new}，但區塊表從 {old} 變成 {table}：請回傳它新增的區塊編號（寫入時複製換上的區塊排在最前面）",
    "the sequence still holds blocks after its release": "釋放之後，這條序列仍佔著區塊",
    "returned {released}, but the sequence held {old}": "回傳了 {released}，但這條序列原本佔著 {old}",
    "the pool had {free} free blocks and has {now} after a release": "區塊池原本有 {free} 個空閒區塊，釋放之後卻只剩 {now} 個",
    "the child's table {child} is not its parent's {parent}": "子序列的區塊表 {child} 和父序列的 {parent} 不同",
    "{part}: {call} raised {kind}: {error}": "{part}：{call} 引發了 {kind}：{error}",
    "refused (None) but changed the memory: free blocks {free_before} -> {free_after}, table {table_before} -> "
    "{table_after}, references {refs_before} -> {refs_after}":
        "拒絕了（None），卻改動了記憶體：空閒區塊 {free_before} -> {free_after}，區塊表 {table_before} -> "
        "{table_after}，引用數 {refs_before} -> {refs_after}",
    "granted, but the sequence holds no table": "已經給予，但這條序列沒有區塊表",
    "the table {table} has {count} blocks for {tokens} tokens; blocks of {size} need {needed}":
        "區塊表 {table} 為 {tokens} 個 token 配了 {count} 個區塊；每個區塊 {size} 個槽位時需要 {needed} 個",
    "the table {table} names blocks it does not hold: {bad}": "區塊表 {table} 列出了它並未佔用的區塊：{bad}",
    "the table {table} names blocks it does not hold (a block twice)": "區塊表 {table} 列出了它並未佔用的區塊（同一個區塊出現兩次）",
    "{part}: {call}: {why}": "{part}：{call}：{why}",
}
