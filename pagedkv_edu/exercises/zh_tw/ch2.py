"""zh-TW lines of :mod:`pagedkv_edu.exercises.ch2`: the slot mapping, appending one token, the block manager."""

MESSAGES: dict[str, str] = {
    # --- slot mapping -----------------------------------------------------------------------------------------
    "the paged-KV-cache article: 41 tokens in [7, 3, 12], block size 16":
        "《分頁式 KV 快取》一文：41 個 token 存放在 [7, 3, 12]，區塊大小 16",
    "the block-table article: 9 tokens in [7, 1, 3], block size 4": "block-table 一文：9 個 token 存放在 [7, 1, 3]，區塊大小 4",
    "positions out of order, block size 8": "位置沒有依序排列，區塊大小 8",
    "block size 1": "區塊大小 1",
    "hidden case {n}: table {table}, block size {size}, positions {positions}":
        "隱藏案例 {n}：區塊表 {table}，區塊大小 {size}，位置 {positions}",
    "not an integer slot: {slot}": "不是整數槽位：{slot}",
    "block id {block} is out of range for a pool of {count} blocks": "區塊編號 {block} 超出範圍：區塊池只有 {count} 個區塊",
    "lands in block {block} (offset {offset}), which this table {table} does not hold":
        "落在區塊 {block}（偏移量 {offset}），但這張區塊表 {table} 並沒有這個區塊",
    "lands in block {block}, offset {offset}": "落在區塊 {block}，偏移量 {offset}",
    "these slots are block id + offset: the block id must be multiplied by the block size":
        "這些槽位是「區塊編號 + 偏移量」：區塊編號必須先乘以區塊大小",
    "these are the slots block size {other} would give, but the block size here is {size}: use the block_size "
    "argument (not a global B)":
        "這些是區塊大小為 {other} 時的槽位，但這裡的區塊大小是 {size}：請使用 block_size 參數（而不是全域的 B）",
    "p >> log2(B), p & (B - 1) and << log2(B) equal p // B, p % B and * B only when B is a power of two; the block "
    "size here is {size}":
        "只有在 B 是二的冪次時，p >> log2(B)、p & (B - 1) 與 << log2(B) 才分別等於 p // B、p % B 與 * B；"
        "這裡的區塊大小是 {size}",
    "the slot at block size {other}": "區塊大小為 {other} 時的槽位",
    "what the bit tricks p & (B - 1), p >> log2(B) give (right only when B is a power of two)":
        "位元技巧 p & (B - 1)、p >> log2(B) 算出的槽位（只有 B 是二的冪次時才對）",
    "{first} or {second}, but the block size here is {size}": "這是{first}或{second}，但這裡的區塊大小是 {size}",
    "{cause}, but the block size here is {size}": "這是{cause}，但這裡的區塊大小是 {size}",
    "(a logical block past the end of the table {table}? the block size here is {size})":
        "（是不是用到了超出區塊表 {table} 末端的邏輯區塊？這裡的區塊大小是 {size}）",
    "(a logical block past the end of the table {table}? the block size here is {size}, not a power of two: >> and & "
    "stand for // and % only for powers of two)":
        "（是不是用到了超出區塊表 {table} 末端的邏輯區塊？這裡的區塊大小是 {size}，不是二的冪次：只有在二的冪次下，"
        ">> 與 & 才等同於 // 與 %）",
    "{error} {hint}": "{error}{hint}",
    "slot": "槽位",
    "expected {expected} slots (one per position), got {got}": "應為 {expected} 個槽位（每個位置一個），卻得到 {got} 個",
    "{wrong} of {total} slots wrong": "{total} 個槽位中有 {wrong} 個錯誤",
    # a table's header: each column is 8 characters wide, right-aligned, and a Chinese character takes two
    "position expected      got": "    位置     應為     得到",
    "position expected      got  where 'got' lands": "    位置     應為     得到  「得到」的槽位落在哪裡",
    "... and {count} more": "……還有 {count} 個",

    # --- appending one token ----------------------------------------------------------------------------------
    "the block-table article: [7, 1] holds 7 tokens, block size 4; the 8th and 9th arrive":
        "block-table 一文：[7, 1] 存有 7 個 token，區塊大小 4；接著第 8 與第 9 個 token 到來",
    "the paged-KV-cache article: an empty sequence grows to 42 tokens, block size 16":
        "《分頁式 KV 快取》一文：一條空序列成長到 42 個 token，區塊大小 16",
    "block size 1: every token takes a block": "區塊大小 1：每個 token 都要佔用一個區塊",
    "hidden case {n}: table {table} holds {tokens} tokens, block size {size}, free list {free}; {appends} tokens "
    "arrive":
        "隱藏案例 {n}：區塊表 {table} 存有 {tokens} 個 token，區塊大小 {size}，空閒清單 {free}；接著再來 {appends} 個 token",
    "position {position} is a multiple of the block size {size}: the table is empty, so the token needs a new block":
        "位置 {position} 是區塊大小 {size} 的倍數：區塊表是空的，所以這個 token 需要一個新區塊",
    "position {position} is a multiple of the block size {size}: the last block is full, so the token needs a new "
    "block":
        "位置 {position} 是區塊大小 {size} 的倍數：最後一個區塊已經滿了，所以這個 token 需要一個新區塊",
    "position {position} is not a multiple of the block size {size}: the last block still has {free} free slots":
        "位置 {position} 不是區塊大小 {size} 的倍數：最後一個區塊還有 {free} 個空閒槽位",
    "token at position {position}, starting from table {table}, free list {free}: {error}":
        "位置 {position} 的 token（起始狀態：區塊表 {table}，空閒清單 {free}）：{error}",
    "token at position {position}, starting from table {table}, free list {free}:":
        "位置 {position} 的 token（起始狀態：區塊表 {table}，空閒清單 {free}）：",
    "slot: expected {expected}, got {got} ({why})": "槽位：應為 {expected}，得到 {got}（{why}）",
    "block table: expected {expected}, got {got}": "區塊表：應為 {expected}，得到 {got}",
    "block ids {ids} are out of range for a pool of {count} blocks": "區塊編號 {ids} 超出範圍：區塊池只有 {count} 個區塊",
    "block ids {ids} were never free: another request holds them": "區塊編號 {ids} 從來都不是空閒的：它們由另一個請求持有",
    "free list: expected {expected}, got {got}": "空閒清單：應為 {expected}，得到 {got}",

    # --- the block manager: the cases -------------------------------------------------------------------------
    "the block-table article: a 7-token prompt at block size 4, the 8th and 9th tokens, then release":
        "block-table 一文：區塊大小 4，一段 7 個 token 的提示詞，接著第 8 與第 9 個 token，然後釋放",
    "the paged-KV-cache article: 41 tokens at block size 16, then 8 more (the 49th takes a block), then release":
        "《分頁式 KV 快取》一文：區塊大小 16 下的 41 個 token，再加 8 個（第 49 個要取一個新區塊），然後釋放",
    "a short pool: what does not fit is refused (None) and nothing changes; a prompt admitted in chunks":
        "區塊池不夠用：放不下的呼叫會被拒絕（None），而且什麼都不變；一段分塊允入的提示詞",
    "the watermark: an admission leaves 2 blocks free while any sequence holds memory; growing may use them":
        "水位線：只要有任何序列持有記憶體，允入時就要留下 2 個空閒區塊；成長時可以用掉它們",
    "hidden case {n}": "隱藏案例 {n}",
    "{case} (seeded random calls), call {call}": "{case}（固定種子的隨機呼叫），第 {call} 次呼叫",
    "a pool of {blocks} blocks of {size}, free queue {queue}": "{blocks} 個區塊的區塊池（區塊大小 {size}），空閒佇列 {queue}",
    "a pool of {blocks} blocks of {size}, free queue {queue} ({held} held elsewhere)":
        "{blocks} 個區塊的區塊池（區塊大小 {size}），空閒佇列 {queue}（另有 {held} 個區塊由其他請求持有）",
    "a pool of {blocks} blocks of {size}, free queue {queue}, watermark {watermark} blocks":
        "{blocks} 個區塊的區塊池（區塊大小 {size}），空閒佇列 {queue}，水位線 {watermark} 個區塊",
    "a pool of {blocks} blocks of {size}, free queue {queue} ({held} held elsewhere), watermark {watermark} blocks":
        "{blocks} 個區塊的區塊池（區塊大小 {size}），空閒佇列 {queue}（另有 {held} 個區塊由其他請求持有），"
        "水位線 {watermark} 個區塊",

    # --- the block manager: what differs ----------------------------------------------------------------------
    "self.held must map each sequence's record (the Request, not its id) to its block ids: the base class's "
    "questions read it that way ({error})":
        "self.held 必須把每條序列的紀錄（Request 物件本身，而不是它的 id）對應到它的區塊編號：基礎類別回答查詢時"
        "就是這樣讀取它的（{error}）",
    "self.held must map each record to a list of block ids; it holds {held}":
        "self.held 必須把每筆紀錄對應到一個區塊編號串列；它現在存的是 {held}",
    "your {kind} changed the record: num_computed_tokens {before} -> {after}, tokens {tokens_before} -> "
    "{tokens_after}. A manager only reads the record; the scheduler advances the count after a grant":
        "你的 {kind} 改動了紀錄：num_computed_tokens {before} -> {after}，token 數 {tokens_before} -> {tokens_after}。"
        "管理器只讀取紀錄；計數由排程器在核准之後推進",
    "{kind} is not written yet (it raises NotImplementedError)": "{kind} 還沒寫（它引發 NotImplementedError）",
    "block id": "區塊編號",
    "{call} returned {value}: {problem}; it returns its whole table (a list of block ids), or None":
        "{call} 回傳了 {value}：{problem}；它應該回傳整張區塊表（區塊編號串列），或 None",
    "{call} returned {value}: {problem}; it returns the ids it added (a list of block ids), or None":
        "{call} 回傳了 {value}：{problem}；它應該回傳新增的編號（區塊編號串列），或 None",
    "{call} returned {value}: {problem}; it returns the ids": "{call} 回傳了 {value}：{problem}；它應該回傳釋放的區塊編號",
    "{call} returned {value}: {problem}; it returns the ids (a list of block ids), or None":
        "{call} 回傳了 {value}：{problem}；它應該回傳那些編號（區塊編號串列），或 None",
    "returned: yours {yours}, expected {expected}": "回傳值：你的是 {yours}，應為 {expected}",
    "tables: yours {yours}, expected {expected}": "區塊表：你的是 {yours}，應為 {expected}",
    "free queue: yours {yours}, expected {expected}": "空閒佇列：你的是 {yours}，應為 {expected}",
    "block {block}: yours {yours}, expected {expected}": "區塊 {block}（你的是 {yours}，應為 {expected}）",
    "reference counts: {counts}": "引用計數：{counts}",
    "hint: {hint}": "提示：{hint}",

    # --- the block manager: the causes ------------------------------------------------------------------------
    "the blocks went back first block first. Release the last block first: in chapter 8's prefix cache the blocks "
    "freed first are evicted first, so a sequence's end goes before its beginning, which other sequences are "
    "likelier to share":
        "這些區塊是從第一個區塊開始歸還的。請從最後一個區塊開始釋放：在第 8 章的前綴快取裡，先釋放的區塊會先被逐出，"
        "這樣序列的尾端會比開頭先被逐出，而開頭正是其他序列比較可能共用的部分",
    "blocks {freed} are back in the free queue but still in {seq!r}'s table: a block freed while a table still names "
    "it is handed to the next sequence while this one can still write it. A release removes the table too":
        "區塊 {freed} 已經回到空閒佇列，卻仍在 {seq!r} 的區塊表裡：區塊表還指向的區塊一旦被釋放，就會被交給下一條"
        "序列，而這條序列仍可能寫入它。釋放時也要移除區塊表",
    "{seq!r} still holds its table: a release gives back every block and removes the table":
        "{seq!r} 仍然持有它的區塊表：釋放時要歸還每個區塊，並移除區塊表",
    "it returned None but changed the memory. A refusal changes nothing: count the blocks the call needs, compare "
    "with pool.num_free (and the watermark), and only then take blocks":
        "它回傳了 None，卻改動了記憶體。拒絕時什麼都不改：先算出這次呼叫需要幾個區塊，與 pool.num_free（以及水位線）"
        "比較，之後才取區塊",
    "nothing holds memory, so the watermark does not apply: it keeps {watermark} blocks free for the running "
    "sequences to grow into, and there are none":
        "沒有任何序列持有記憶體，所以水位線不適用：它留下 {watermark} 個空閒區塊，是給執行中的序列成長用的，"
        "而現在一條都沒有",
    "the watermark applies to admissions only: a running sequence may grow into the blocks it keeps free (that is "
    "what they are for)":
        "水位線只適用於允入：執行中的序列可以成長到它保留的空閒區塊裡（這些區塊本來就是為此保留的）",
    "{end} tokens fit in the {count} block {seq!r} holds (ceil({end} / {size}) = {need}): there is nothing to take, "
    "so nothing to refuse":
        "{end} 個 token 放得進 {seq!r} 持有的 {count} 個區塊（ceil({end} / {size}) = {need}）：沒有需要取的區塊，"
        "也就沒有什麼好拒絕的",
    "{end} tokens fit in the {count} blocks {seq!r} holds (ceil({end} / {size}) = {need}): there is nothing to take, "
    "so nothing to refuse":
        "{end} 個 token 放得進 {seq!r} 持有的 {count} 個區塊（ceil({end} / {size}) = {need}）：沒有需要取的區塊，"
        "也就沒有什麼好拒絕的",
    "{call} needs {need} new blocks of {size} for {end} tokens, and {free} are free: it fits":
        "{call} 需要 {need} 個新區塊（區塊大小 {size}）來容納 {end} 個 token，而空閒的有 {free} 個：放得下",
    "the watermark: while any sequence holds memory an admission leaves {watermark} blocks free (room for the running "
    "to grow); {need} + {watermark} > {free} free":
        "水位線：只要有任何序列持有記憶體，允入時就要留下 {watermark} 個空閒區塊（讓執行中的序列有空間成長）；"
        "{need} + {watermark} > 空閒的 {free} 個",
    "{call} needs {need} new blocks of {size} for {end} tokens, but only {free} are free":
        "{call} 需要 {need} 個新區塊（區塊大小 {size}）來容納 {end} 個 token，但空閒的只有 {free} 個",
    "grow returns only the ids the table gained (here {expected}), not the whole table":
        "grow 只回傳區塊表新增的編號（這裡是 {expected}），而不是整張區塊表",
    "these blocks came from the back of the free queue: blocks are taken from its front":
        "這些區塊是從空閒佇列的尾端取的：區塊應該從前端取",
    "grow took a block for {tokens} that fit in the last block's {room} (it takes one on every call, whatever the "
    "tokens): a grow takes blocks only for the tokens past the table's last slot":
        "grow 為 {tokens} 取了一個區塊，但最後一個區塊剩下的 {room}就放得下了（它每次呼叫都取一個區塊，不管 token "
        "有幾個）：grow 只為超出區塊表最後一個槽位的 token 取區塊",
    "{n} token": "{n} 個 token",
    "{n} tokens": "{n} 個 token",
    "{n} free slot": "{n} 個空閒槽位",
    "{n} free slots": "{n} 個空閒槽位",
    "{end} tokens fill exactly {want} blocks of {size}: the last block is full, not partly filled. `tokens // "
    "block_size + 1` counts one block too many; t tokens need ceil(t / block_size)":
        "{end} 個 token 剛好填滿 {want} 個區塊（區塊大小 {size}）：最後一個區塊是滿的，不是只填了一部分。"
        "`tokens // block_size + 1` 會多算一個區塊；t 個 token 需要 ceil(t / block_size) 個區塊",
    "{end} tokens need ceil({end} / {size}) = {want} blocks: the {count} token in the last, partly filled block still "
    "needs a whole block (`tokens // block_size` rounds it away)":
        "{end} 個 token 需要 ceil({end} / {size}) = {want} 個區塊：最後那個只填了一部分的區塊裡的 {count} 個 token，"
        "仍然需要一整個區塊（`tokens // block_size` 會把它捨去）",
    "{end} tokens need ceil({end} / {size}) = {want} blocks: the {count} tokens in the last, partly filled block "
    "still need a whole block (`tokens // block_size` rounds them away)":
        "{end} 個 token 需要 ceil({end} / {size}) = {want} 個區塊：最後那個只填了一部分的區塊裡的 {count} 個 token，"
        "仍然需要一整個區塊（`tokens // block_size` 會把它們捨去）",
    "{end} tokens at block size {size} need ceil({end} / {size}) = {want} blocks; the table has {got}":
        "區塊大小 {size} 下，{end} 個 token 需要 ceil({end} / {size}) = {want} 個區塊；區塊表卻有 {got} 個",
    "a block was freed twice: a release drops each of its blocks' references once (pool.free_all(ids), or "
    "pool.free(id) once per block)":
        "某個區塊被釋放了兩次：釋放時，每個區塊只撤銷一次引用（pool.free_all(ids)，或對每個區塊各呼叫一次 "
        "pool.free(id)）",
    "it asked the pool for more blocks than are free: count first, and return None, taking nothing, when they do not "
    "fit":
        "它向區塊池要的區塊比空閒的還多：先算好，放不下時回傳 None，一個區塊也不取",
    "raised {kind}: {error}, at `{line}`": "引發了 {kind}：{error}，出錯的那一行：`{line}`",

    # --- the block manager: the report ------------------------------------------------------------------------
    "{case}:": "{case}：",
    "earlier calls (both agreed): {calls}": "先前的呼叫（兩邊一致）：{calls}",
    "before: tables {tables}, free queue {queue}{notes}": "呼叫前：區塊表 {tables}，空閒佇列 {queue}{notes}",
    ", {item}": "，{item}",
    "call: {call}{detail}": "呼叫：{call}{detail}",
    " (a sequence of {tokens} tokens, holding none)": "（一條 {tokens} 個 token 的序列，還沒持有任何區塊）",
    " ({seq!r} holds {tokens} tokens; room for {room})": "（{seq!r} 存有 {tokens} 個 token，要容納到 {room} 個）",
    "{{}} (none)": "{{}}（沒有）",
    "{seq!r}: {ids} ({count} tokens)": "{seq!r}: {ids}（{count} 個 token）",

    # --- the block manager: loading the file, the verdict -----------------------------------------------------
    "{path} does not exist: run the %%writefile cell above": "{path} 不存在：請執行上方的 %%writefile 儲存格",
    "importing {path} {error}": "匯入 {path} 時{error}",
    "defines no BlockManager": "沒有定義 BlockManager",
    "defines a BlockManager that is not a class built on ManagerBase": "定義的 BlockManager 不是建立在 ManagerBase 之上的類別",
    "defines BlockManager as {value}, not a class": "把 BlockManager 定義成 {value}，而不是類別",
    "{path} {found}: write `class BlockManager(ManagerBase):` (ManagerBase keeps the tables and answers the "
    "questions; your class makes the decisions)":
        "{path} {found}：請寫成 `class BlockManager(ManagerBase):`（ManagerBase 負責保存區塊表並回答各種查詢；"
        "你的類別負責做決策）",
    "your BlockManager has no {methods}: the scheduler calls admit, grow and release":
        "你的 BlockManager 沒有 {methods}：排程器會呼叫 admit、grow 與 release",
    "{case}: BlockManager(pool, None, watermark_blocks={watermark}) {error} (ManagerBase's constructor takes these: "
    "keep it)":
        "{case}：BlockManager(pool, None, watermark_blocks={watermark}) {error}（ManagerBase 的建構子接受這些參數："
        "請保留它）",
    "admit is not written yet: it raises NotImplementedError": "admit 還沒寫：它引發 NotImplementedError",
    "\"{case}\"": "「{case}」",
    ", ": "、",
    "also wrong: {cases}": "同樣錯誤的還有：{cases}",
    "{path} is marked passed: load_parts() now gives the engine your BlockManager (until you change the file)":
        "{path} 已標記為通過：從現在起 load_parts() 會把你的 BlockManager 交給引擎（直到你修改這個檔案為止）",
}
