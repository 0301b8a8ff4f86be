"""zh-TW lines of :mod:`pagedkv_edu.viz.explorer_state`: the explorer's answers to clicks and its log."""

MESSAGES: dict[str, str] = {
    "new pool: {num_blocks} blocks of {block_size} slots": "新的區塊池：{num_blocks} 個區塊，每個 {block_size} 個槽位",
    "a prompt needs at least 1 token, got {value!r}": "提示詞至少要有 1 個 token，收到的是 {value!r}",
    "{name}: {tokens} tokens exceed max_seq_len={max_seq_len}; not added":
        "{name}：{tokens} 個 token 超過 max_seq_len={max_seq_len}；未加入",
    "{name} needs {need} blocks for {tokens} tokens but only {free} are free; not added":
        "{name} 需要 {need} 個區塊來放 {tokens} 個 token，但只有 {free} 個空閒；未加入",
    "add {name}: {tokens} tokens in blocks {blocks}": "新增 {name}：{tokens} 個 token，放在區塊 {blocks}",
    "nothing to decode: add a request first": "沒有可解碼的請求：請先新增一個請求",
    "decode step refused: {names} reached max_seq_len={max_seq_len}; finish it first. Nothing changed.":
        "解碼步驟遭拒：{names} 已達 max_seq_len={max_seq_len}；請先結束它。什麼都沒有改變。",
    "decode step refused: {names} needs a new block but only {free} are free. Nothing changed: "
    "finish a request or enlarge the pool.":
        "解碼步驟遭拒：{names} 需要一個新區塊，但只有 {free} 個空閒。什麼都沒有改變：請結束一個請求，或加大區塊池。",
    "decode step refused: {names} each need a new block ({total} in all) but only {free} is free. "
    "Nothing changed: finish a request or enlarge the pool.":
        "解碼步驟遭拒：{names} 各需要一個新區塊（共 {total} 個），但只有 {free} 個空閒。什麼都沒有改變："
        "請結束一個請求，或加大區塊池。",
    "decode step refused: {names} each need a new block ({total} in all) but only {free} are free. "
    "Nothing changed: finish a request or enlarge the pool.":
        "解碼步驟遭拒：{names} 各需要一個新區塊（共 {total} 個），但只有 {free} 個空閒。什麼都沒有改變："
        "請結束一個請求，或加大區塊池。",
    "decode step {step}: {n} requests +1 token": "第 {step} 個解碼步驟：{n} 個請求各 +1 個 token",
    "decode step {step}: {n} request +1 token": "第 {step} 個解碼步驟：{n} 個請求 +1 個 token",
    "{name} copied shared block {source} to block {copy} and took block {block}":
        "{name} 把共用的區塊 {source} 複製到區塊 {copy}，並取用區塊 {block}",
    "{name} copied shared block {source} to block {copy}": "{name} 把共用的區塊 {source} 複製到區塊 {copy}",
    "{name} took block {block}": "{name} 取用區塊 {block}",
    "fork {parent} → {child}: shares blocks {blocks}, no block taken":
        "分岔 {parent} → {child}：共用區塊 {blocks}，沒有取用新區塊",
    "cannot fork {request}: not a live request (live: {live})": "無法分岔 {request}：它不是進行中的請求（進行中：{live}）",
    "cannot finish {request}: not a live request (live: {live})":
        "無法結束 {request}：它不是進行中的請求（進行中：{live}）",
    "none": "無",
    "step ×N needs N >= 1, got {n!r}": "解碼 ×N 需要 N >= 1，收到的是 {n!r}",
    "ran {done} of {n} steps, then: {message}": "{n} 步中執行了 {done} 步，接著：{message}",
    "finish {name}: blocks {freed} back to the free queue": "結束 {name}：區塊 {freed} 回到空閒佇列",
    "finish {name}: blocks {freed} back to the free queue; blocks {kept} still shared":
        "結束 {name}：區塊 {freed} 回到空閒佇列；區塊 {kept} 仍被共用",
    "block size {old} → {new}": "區塊大小 {old} → {new}",
    "pool size {old} → {new} blocks": "區塊池大小 {old} → {new} 個區塊",
    "{what} refused: {error}": "{what}：遭拒（{error}）",
    "{what}: the pool was rebuilt empty ({num_blocks} blocks of {block_size} slots)":
        "{what}：區塊池已重建為空（{num_blocks} 個區塊，每個 {block_size} 個槽位）",
    "{what}: the pool was rebuilt empty ({num_blocks} blocks of {block_size} slots); {dropped} live request dropped":
        "{what}：區塊池已重建為空（{num_blocks} 個區塊，每個 {block_size} 個槽位）；捨棄了 {dropped} 個進行中的請求",
    "{what}: the pool was rebuilt empty ({num_blocks} blocks of {block_size} slots); {dropped} live requests dropped":
        "{what}：區塊池已重建為空（{num_blocks} 個區塊，每個 {block_size} 個槽位）；捨棄了 {dropped} 個進行中的請求",
    "✗ {text}": "✗ {text}",
    "{first}, {rest}": "{first}、{rest}",
    "{first}; {rest}": "{first}；{rest}",
}
