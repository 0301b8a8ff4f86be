"""zh-TW lines of :mod:`pagedkv_edu.exercises.ch8_cache`: chapter 8's functions as the engine's prefix cache, stopped
by name when they answer what the engine must not use."""

MESSAGES: dict[str, str] = {
    "your prefix cache": "你的前綴快取",
    "{part}: {call} {error}": "{part}：{call} {error}",
    "{part}: {call}: {why}": "{part}：{call}：{why}",
    # the free queue's order, on the pool's real queue
    "free_blocks(free_queue={queue}, ref_counts=<{count} counts>, blocks={blocks}, cached={cached})":
        "free_blocks(free_queue={queue}, ref_counts=<{count} 個區塊的計數>, blocks={blocks}, cached={cached})",
    "touch(free_queue={queue}, ref_counts=<{count} counts>, block={block})":
        "touch(free_queue={queue}, ref_counts=<{count} 個區塊的計數>, block={block})",
    "reference count": "引用計數",
    "ref_counts: {problem}": "ref_counts 有誤：{problem}",
    "ref_counts has {count} counts for {blocks} blocks": "ref_counts 有 {count} 個計數，但區塊有 {blocks} 個",
    "block {block}'s reference count is {got}, expected {expected} (it was {was}; a release drops one reference, a "
    "hit adds one)":
        "區塊 {block} 的引用計數是 {got}，應為 {expected}（原本是 {was}；一次釋放減少一個引用，一次命中增加一個）",
    "block id": "區塊編號",
    "the free queue: {problem}": "空閒佇列：{problem}",
    "blocks {blocks} are in use (nobody else may be handed them)": "區塊 {blocks} 正在使用中（不可以再發給別人）",
    "free blocks {blocks} are missing (never handed out again)": "空閒區塊 {blocks} 不見了（這樣它們就再也不會被發出去）",
    "blocks {blocks} are in it twice": "區塊 {blocks} 在佇列中出現了兩次",
    "the free queue is {queue}: {problems}": "空閒佇列是 {queue}：{problems}",
    "; ": "；",
    # the hash chain and the checked lookup
    "cached_prefix_blocks({ids} ({count} tokens), {size}, hash_fn, table, holds)":
        "cached_prefix_blocks({ids} ({count} 個 token), {size}, hash_fn, table, holds)",
    "block_hashes({ids} ({count} tokens), {size}, hash_fn)": "block_hashes({ids} ({count} 個 token), {size}, hash_fn)",
    "returned {value}: return a list of hashes, one per full block": "傳回了 {value}：請傳回雜湊的串列，每個填滿的區塊一個",
    "returned {count} hashes; {tokens} tokens fill {blocks} blocks of {size} (a partly filled last block has no hash)":
        "傳回了 {count} 個雜湊；{tokens} 個 token 填滿 {blocks} 個大小為 {size} 的區塊（未填滿的最後一個區塊沒有雜湊）",
    "hash {i} is {mine}, but the engine's chain, which its blocks are registered under, has {engine} (block i's hash "
    "is hash_fn(block i - 1's hash, its tokens), the first block's parent None)":
        "雜湊 {i} 是 {mine}，但引擎登記區塊時所用的鏈在這裡是 {engine}"
        "（區塊 i 的雜湊是 hash_fn(區塊 i - 1 的雜湊, 它的 token)，第一個區塊的父雜湊是 None）",
    "returned {count} blocks, {hit} of {tokens} tokens: the last token must be left to compute":
        "傳回了 {count} 個區塊，涵蓋 {tokens} 個 token 中的 {hit} 個：必須留下最後一個 token 來計算",
    "returned {blocks}: block {block} is outside the pool of {count} blocks":
        "傳回了 {blocks}：區塊 {block} 超出了只有 {count} 個區塊的區塊池",
    "free and caches nothing": "是空閒的，沒有快取任何內容",
    "in use and caches nothing": "正在使用中，但沒有快取任何內容",
    "returned {blocks}: block {block} is {state} (evicted, or never a full block); only a block in holds can be a hit":
        "傳回了 {blocks}：區塊 {block} {state}（已被逐出，或從來不是填滿的區塊）；只有 holds 中的區塊才能算命中",
    "returned {blocks}: block {block} holds tokens {held} after parent {parent}, not block {i} of this prompt "
    "({wanted} after {wanted_parent}): its K/V are another prefix's":
        "傳回了 {blocks}：區塊 {block} 裝的是接在父雜湊 {parent} 之後的 token {held}，而不是這個提示詞的區塊 {i}"
        "（接在 {wanted_parent} 之後的 {wanted}）：它的 K/V 屬於另一段前綴",
    "returned {blocks}, a block twice": "傳回了 {blocks}，其中有區塊出現兩次",
    "ReaderPrefixCache({part}: {count} cached blocks, lookup hit rate {rate:.1%} = {hit}/{queried} tokens, "
    "{evictions} evictions)":
        "ReaderPrefixCache({part}：{count} 個已快取的區塊，查找命中率 {rate:.1%} = {hit}/{queried} 個 token，"
        "{evictions} 次逐出)",
}
