"""zh-TW lines of :mod:`pagedkv_edu.exercises.ch3`: gathering a sequence's K/V through its block table."""

MESSAGES: dict[str, str] = {
    "the block-table article: 9 tokens in blocks [7, 1, 3], block size 4":
        "block-table 一文：9 個 token 放在區塊 [7, 1, 3]，區塊大小 4",
    "a full last block: 8 tokens in [5, 2], block size 4": "最後一個區塊剛好填滿：8 個 token 放在 [5, 2]，區塊大小 4",
    "one token": "只有一個 token",
    "block size 1: [3, 0, 2]": "區塊大小 1：[3, 0, 2]",
    "a table longer than the sequence ([6, 0, -1, -1]: unused entries)":
        "區塊表比序列長（[6, 0, -1, -1]：後面是未使用的項目）",
    "hidden case {n}: {tokens} tokens in table {table}, block size {block_size}, {blocks} blocks, {dtype} cache":
        "隱藏案例 {n}：{tokens} 個 token 放在區塊表 {table}，區塊大小 {block_size}，共 {blocks} 個區塊，{dtype} 快取",
    "a row that is not any slot's (first value {first:.4g})": "一列不屬於任何槽位的資料（第一個值為 {first:.4g}）",
    "slot {slot} (block {block}, offset {offset})": "槽位 {slot}（區塊 {block}，偏移 {offset}）",
    "slot {slot} (block {block}, offset {offset}, a block this sequence does not own)":
        "槽位 {slot}（區塊 {block}，偏移 {offset}，這個區塊不屬於這條序列）",
    "{error} (the sequence is empty: the answer is a tensor with 0 rows)": "{error}（序列是空的：答案是一個 0 列的張量）",
    "{error} (the cache holds {slots} slots: {blocks} blocks, and the block size here is {block_size}, cache.shape[1])":
        "{error}（快取共有 {slots} 個槽位，也就是 {blocks} 個區塊；這裡的區塊大小是 {block_size}，即 cache.shape[1]）",
    "expected a tensor of shape {shape}, got {got}": "應為形狀 {shape} 的張量，卻得到 {got}",
    "expected shape {expected}, got {got}": "形狀應為 {expected}，卻得到 {got}",
    "expected shape {expected}, got {got} (whole blocks: the empty tail of the last block is not part of the sequence)":
        "形狀應為 {expected}，卻得到 {got}（你取了整個區塊：最後一個區塊尾端的空位不屬於這條序列）",
    "dtype: the cache is {cache} but the result is {result}. A gather copies rows, it does not convert them: create the "
    "result with dtype=cache.dtype, or index the cache":
        "dtype：快取是 {cache}，結果卻是 {result}。gather 只複製列，不轉換型別：請用 dtype=cache.dtype 建立結果，"
        "或直接對快取做索引",
    "dtype: the cache is {cache} but the result is {result}. A gather copies rows, it does not convert them: create the "
    "result with dtype=cache.dtype, or index the cache (the rows are the right ones otherwise)":
        "dtype：快取是 {cache}，結果卻是 {result}。gather 只複製列，不轉換型別：請用 dtype=cache.dtype 建立結果，"
        "或直接對快取做索引（除此之外，取出的列都是對的）",
    "{wrong} of {total} positions wrong": "{total} 個位置中有 {wrong} 個錯誤",
    "position {p}: expected {expected}, got {got}": "位置 {p}：應為{expected}，卻得到{got}",
    "... and {more} more": "……還有 {more} 個",
    "gather": "收集函式",
    "chapter 5's decoder gathers through it": "第 5 章的解碼器會透過它收集 K/V",
    "returned {got}, not a tensor of shape {shape}": "回傳了 {got}，而不是形狀為 {shape} 的張量",
    "shape {mine}, the engine needs {need}": "形狀為 {mine}，引擎需要 {need}",
    "dtype {mine}, the engine needs {need}": "資料型別為 {mine}，引擎需要 {need}",
    "device {mine}, the engine needs {need}": "裝置為 {mine}，引擎需要 {need}",
    "{problems}; {problem}": "{problems}；{problem}",
    "returned {problems}": "回傳結果的{problems}",
    "returned {problems} (whole blocks: the empty tail of the last block is not part of the sequence)":
        "回傳結果的{problems}（你取了整個區塊：最後一個區塊尾端的空位不屬於這條序列）",
    "position {p} (table entry {entry}: block {block}, slot {slot}) holds {holds}; {wrong} of {length} positions wrong":
        "位置 {p}（區塊表第 {entry} 項：區塊 {block}，槽位 {slot}）放的是{holds}；{length} 個位置中有 {wrong} 個錯誤",
    "position {p} (table entry {entry}: block {block}, slot {slot}) holds {holds}; {wrong} of {length} positions wrong "
    "({cause})":
        "位置 {p}（區塊表第 {entry} 項：區塊 {block}，槽位 {slot}）放的是{holds}；{length} 個位置中有 {wrong} 個錯誤"
        "（{cause}）",
    "your gather_kv ({file})": "你的 gather_kv（{file}）",
    "the step's sequence {s}, its {what}: gather_kv({cache}, {table}, {length})":
        "這一步的序列 {s}，它的 {what}：gather_kv({cache}, {table}, {length})",
    "{part}: {call} {error}": "{part}：{call} {error}",
    "{part}: {call} wrote into the cache: a gather only reads it (every sequence's K/V lives there)":
        "{part}：{call} 寫入了快取：gather 只能讀取快取（每條序列的 K/V 都存在那裡）",
    "{part}: {call}: {problem}": "{part}：{call}：{problem}",
}
