"""zh-TW lines of :mod:`pagedkv_edu.exercises.ch7`: copy-on-write, beam search's fork and free, the sharing manager."""

MESSAGES: dict[str, str] = {
    # --- copy-on-write ---------------------------------------------------------------------------------------
    "a 6-token prompt forked in two (block size 4): the child appends, then the parent":
        "一段 6 個 token 的提示詞分岔成兩條（區塊大小 4）：子序列先附加，接著換父序列",
    "a full shared last block: a new block is enough, nothing to copy":
        "共享的最後一個區塊已經填滿：取一個新區塊就夠了，不必複製",
    "three samples share a 2-token block of 4; each appends once":
        "三個樣本共享一個可放 4 個 token、已存 2 個的區塊；每個樣本各附加一次",
    "nobody else holds the block: append in place": "沒有其他序列持有這個區塊：就地附加",
    "hidden case {n}": "隱藏案例 {n}",
    "{seq} appends token {n} (block size {b}) to table {table}, ref counts {refs}, free list {free}":
        "{seq} 把 token {n}（區塊大小 {b}）附加到區塊表 {table}，此時引用計數 {refs}，空閒清單 {free}",
    "{step}: {error}": "{step}：{error}",
    "{step}: expected (slot, copy), got {got}": "{step}：應回傳 (slot, copy)，卻得到 {got}",
    "  (token {n} is a multiple of the block size {b}: the last block is full and never written again, so a new "
    "block is enough and nothing needs copying)":
        "（token {n} 的編號是區塊大小 {b} 的倍數：最後一個區塊已經填滿，之後不會再被寫入，所以取一個新區塊就夠了，"
        "什麼都不必複製）",
    "  (nobody else holds block {last}: append in place)": "（沒有其他序列持有區塊 {last}：就地附加）",
    "  (block {last} is shared, ref count {count}, and holds only {used} of {b} tokens: the new token must go into "
    "a copy)":
        "（區塊 {last} 是共享的，引用計數為 {count}，{b} 個 token 的空間只存了 {used} 個：新的 token 必須寫進一份副本）",
    "copy: expected {expected}, got {got}{why}": "複製：應為 {expected}，得到 {got}{why}",
    "  (block {block} is shared: the other sequences would see this token)":
        "（區塊 {block} 是共享的：其他序列也會看到這個 token）",
    "  ({cause})": "（{cause}）",
    "slot: expected {expected}, got {got}{note}": "槽位：應為 {expected}，得到 {got}{note}",
    "{seq}'s block table: expected {expected}, got {got}": "{seq} 的區塊表：應為 {expected}，得到 {got}",
    "free list: expected {expected}, got {got}": "空閒清單：應為 {expected}，得到 {got}",
    "{step}:": "{step}：",

    # --- beam search: fork and free ----------------------------------------------------------------------------
    "four beams: beam 0 has three children, beam 1 one, beams 2 and 3 lose":
        "四個束：束 0 有三個子束，束 1 有一個，束 2 與束 3 落敗",
    "every beam continues itself: nothing changes": "每個束都接續自己：什麼都不變",
    "the loser shares both its blocks with the winner: they only lose a reference":
        "落敗的束與勝出的束共享它的兩個區塊：這兩個區塊只會少一個引用",
    "one beam": "只有一個束",
    "tables {tables}, parents {parents}, ref counts {refs}": "區塊表 {tables}，父束 {parents}，引用計數 {refs}",
    "expected a list of {count} block tables (one per new beam), got {got}":
        "應為由 {count} 張區塊表組成的串列（每個新束一張），卻得到 {got}",
    "block id": "區塊編號",
    "new tables: expected {expected}, got {got}": "新的區塊表：應為 {expected}，得到 {got}",
    "new beams {j} and {i} are the same list object: appending a token to one would change the other; a fork needs "
    "its own copy of the parent's table":
        "新束 {j} 與 {i} 是同一個串列物件：替其中一個附加 token，另一個也會跟著改變；分岔出來的束需要一份屬於自己的"
        "父束區塊表副本",
    "reference counts: expected {expected}, got {got} (blocks {wrong} differ)":
        "引用計數：應為 {expected}，得到 {got}（區塊 {wrong} 不同）",
    "  (a parent's second, third ... child is a fork: every block of the parent's table gains a reference; a block "
    "shared with a surviving beam keeps that beam's reference)":
        "（父束的第二個、第三個……子束是分岔出來的：父束區塊表中的每個區塊都多一個引用；與存活的束共享的區塊，"
        "則保留那個束的引用）",
    "  (every block of a beam nobody continues loses a reference; a parent's first child is the parent itself and "
    "adds none)":
        "（沒有任何新束接續的束，它的每個區塊都少一個引用；父束的第一個子束就是父束自己，不會增加引用）",
    "free blocks (any order): expected {expected}, got {got}  (a block is free when its count reaches 0, and only "
    "then)":
        "空閒區塊（順序不拘）：應為 {expected}，得到 {got}（唯有計數降到 0 時，區塊才會空閒）",

    # --- predict, then run -------------------------------------------------------------------------------------
    "the next cell explains the difference": "下一個儲存格會說明其中的差距",

    # --- your block manager, with sharing ---------------------------------------------------------------------
    "BlockManager: fork and copy-on-write（分岔與寫入時複製）": "BlockManager（分岔與寫入時複製）",
    "the chapter's demo: a 6-token prompt at block size 4 forked into three samples; each first token copies block "
    "1 but the last writer's, which finds it no longer shared":
        "本章的示範：區塊大小 4，一段 6 個 token 的提示詞分岔成三個樣本；每個樣本的第一個 token 都會複製區塊 1，"
        "只有最後一個寫入者例外，因為輪到它時，這個區塊已經不再被共享",
    "a full shared last block: the next tokens go to new blocks, nothing is copied":
        "共享的最後一個區塊已經填滿：接下來的 token 放進新區塊，什麼都不複製",
    "beams that regroup: fork the beam chosen twice, grow every beam (copy-on-write), free the loser":
        "重新分組的束：分岔被選中兩次的束，讓每個束成長（寫入時複製），釋放落敗的束",
    "refusals: a write into a shared block needs a free block for the copy; refused (None), nothing changes":
        "拒絕：寫入共享區塊需要一個空閒區塊來放副本；放不下就拒絕（None），什麼都不變",
    "a grow past the block's edge after a fork: the copy's fresh block first, then the new one; a release drops the "
    "queued copy into the block it frees":
        "分岔後一次越過區塊邊界的 grow：先是副本的新區塊，再來才是新增的區塊；release 會撤銷以它所釋放的區塊為"
        "目的地、仍在佇列中的那筆複製",
    "{n} new block": "{n} 個新區塊",
    "{n} new blocks": "{n} 個新區塊",
    "self.copies.copy must be the list of queued (source, destination) block pairs, which the engine takes each step "
    "(take_copies); it holds {copies}":
        "self.copies.copy 必須是排入佇列的 (source, destination) 區塊對所組成的串列，引擎每一步都會取走它"
        "（take_copies）；它現在存的是 {copies}",
    "take_copies() {error}: ManagerBase's take_copies hands the engine self.copies and starts an empty one; keep it":
        "take_copies() {error}：ManagerBase 的 take_copies 會把 self.copies 交給引擎，再換上一份空的；請保留它",
    "take_copies() handed the engine {yours}, expected {expected}":
        "take_copies() 交給引擎的是 {yours}，應為 {expected}",
    "{call} {error}": "{call} {error}",
    "hint: the copy of block {block} takes a free block too: {seq!r} needs {need} and one for the copy, {total} in "
    "all, and {free} are free. Count the copy's block before taking any, and return None, changing nothing, when "
    "they do not fit":
        "提示：區塊 {block} 的副本也要佔用一個空閒區塊：{seq!r} 需要 {need}，再加上副本的一個，總共 {total} 個，"
        "而空閒的只有 {free} 個。取用任何區塊之前，先把副本的區塊算進去；放不下時回傳 None，什麼都不改",
    "queued copies (self.copies.copy): yours {yours}, expected {expected}":
        "佇列中的複製（self.copies.copy）：你的是 {yours}，應為 {expected}",
    "{child!r}'s table is {parent!r}'s own list object, not a copy: when either grows, the other's table changes "
    "too. Give the child a list of its own, with the same ids":
        "{child!r} 的區塊表就是 {parent!r} 自己的那個串列物件，不是副本：任何一方成長，另一方的區塊表也會跟著改變。"
        "請給子序列一個屬於它自己、內容是相同 id 的串列",
    "{seq!r} holds no table after the fork: self.held must give the child's record its parent's ids":
        "分岔之後 {seq!r} 沒有區塊表：self.held 必須讓子序列的紀錄對應到父序列的那些 id",
    "the fork gave {seq!r} new blocks {fresh}": "分岔給了 {seq!r} 新的區塊 {fresh}",
    "the fork queued copies": "分岔排入了複製",
    "{what}: a child shares every block of its parent ({table}), each gaining a reference, and nothing is copied at "
    "fork. A block is copied later, and only the one a write needs: a shared, partly filled last block, when a "
    "sequence is about to write into it":
        "{what}：子序列共享父序列的每一個區塊（{table}），每個區塊各多一個引用，分岔時什麼都不複製。"
        "區塊要到之後才複製，而且只複製寫入需要的那一個：被共享、尚未填滿的最後一個區塊，在某條序列即將寫入它的時候",
    "{seq!r} names blocks {table}, but their reference counts did not rise: every block a child shares gains a "
    "reference (pool.incref). Without it, the first of the two to be released frees blocks the other still reads, "
    "and the pool hands them to the next sequence":
        "{seq!r} 列出了區塊 {table}，但它們的引用計數沒有增加：子序列共享的每個區塊都要多一個引用（pool.incref）。"
        "少了這一步，兩者中先被釋放的那個會釋放另一個還在讀取的區塊，區塊池接著就把它們交給下一條序列",
    "it returned None, but the copy-on-write was already made (block {last}'s fresh copy taken, its reference "
    "dropped, or the copy queued). A refusal changes nothing, a copy included: count the copy's block with the new "
    "ones, compare with pool.num_free, and only then copy":
        "它回傳了 None，但寫入時複製已經做了（取了區塊 {last} 的新副本、撤銷了它的引用，或排入了複製）。"
        "拒絕時什麼都不改，複製也不例外：把副本的區塊和新區塊一起算，與 pool.num_free 比較，之後才複製",
    "nobody else holds block {last} (reference count 1): {seq!r} writes into it in place. Copy-on-write copies only "
    "a block another sequence also holds":
        "沒有其他序列持有區塊 {last}（引用計數 1）：{seq!r} 就地寫入它即可。寫入時複製只複製另有其他序列也持有的區塊",
    "{seq!r}'s last block {last} is full ({tokens} tokens, a multiple of {size}): the new tokens go to new blocks and "
    "nobody writes block {last} again, so it stays shared and nothing is copied":
        "{seq!r} 的最後一個區塊 {last} 已經填滿（{tokens} 個 token，是 {size} 的倍數）：新的 token 放進新區塊，"
        "不會再有人寫入區塊 {last}，所以它維持共享，什麼都不複製",
    "{call} needs {need} and one more for the copy of block {last} (shared, reference count {holders}): {total} > "
    "{free} free, so it is refused (None), taking nothing":
        "{call} 需要 {need}，還要再一個來放區塊 {last} 的副本（共享中，引用計數 {holders}）：{total} > 空閒的 {free} 個，"
        "所以要拒絕（None），一個區塊也不取",
    "{call} needs {need} and one more for the copy of block {last}: {total} <= {free} free, so it fits":
        "{call} 需要 {need}，還要再一個來放區塊 {last} 的副本：{total} <= 空閒的 {free} 個，所以放得下",
    "{n} token": "{n} 個 token",
    "{n} tokens": "{n} 個 token",
    "block {last} is shared (reference count {holders}) and holds only {filled} of {size}: writing {seq!r}'s new "
    "token into it shows it to the other sequences. First swap it in {seq!r}'s table for a fresh block (the first id "
    "returned), drop {seq!r}'s reference to it, and queue ({last}, fresh) in self.copies.copy: copy-on-write":
        "區塊 {last} 是共享的（引用計數 {holders}），{size} 個槽位只存了 {filled}：把 {seq!r} 的新 token 寫進去，"
        "其他序列也會看到它。應先在 {seq!r} 的區塊表中把它置換成一個新區塊（回傳的第一個 id），撤銷 {seq!r} "
        "對它的引用，再把 ({last}, 新區塊) 排入 self.copies.copy：這就是寫入時複製",
    "block {last} is shared (reference count {holders}) and holds only {filled} of {size}: writing {seq!r}'s new "
    "tokens into it shows them to the other sequences. First swap it in {seq!r}'s table for a fresh block (the first "
    "id returned), drop {seq!r}'s reference to it, and queue ({last}, fresh) in self.copies.copy: copy-on-write":
        "區塊 {last} 是共享的（引用計數 {holders}），{size} 個槽位只存了 {filled}：把 {seq!r} 的新 token 寫進去，"
        "其他序列也會看到它們。應先在 {seq!r} 的區塊表中把它置換成一個新區塊（回傳的第一個 id），撤銷 {seq!r} "
        "對它的引用，再把 ({last}, 新區塊) 排入 self.copies.copy：這就是寫入時複製",
    "the copy took block {fresh}, but block {last} kept {seq!r}'s reference (yours {yours}, expected {expected}): "
    "{seq!r} no longer holds it, so drop one reference (pool.free({last})), or it is never freed":
        "副本取了區塊 {fresh}，但區塊 {last} 仍保留 {seq!r} 的引用（你的是 {yours}，應為 {expected}）：{seq!r} "
        "已經不再持有它，所以要撤銷一個引用（pool.free({last})），否則它永遠不會被釋放",
    "a copy is (source, destination): from the shared block {last} into the fresh {fresh}":
        "一筆複製是 (source, destination)：從共享的區塊 {last} 複製到新的區塊 {fresh}",
    "block {fresh} took block {last}'s place but holds none of its K/V yet: queue ({last}, {fresh}) in "
    "self.copies.copy. The engine takes the queued copies (take_copies) and makes them before the forward pass "
    "writes the new token":
        "區塊 {fresh} 取代了區塊 {last} 的位置，但裡面還沒有它的任何 K/V：請把 ({last}, {fresh}) 排入 "
        "self.copies.copy。引擎會取走佇列中的複製（take_copies），在前向傳遞寫入新 token 之前完成它們",
    "grow returns the fresh block {fresh} first, then the blocks appended after it: the first new id replaces the "
    "table's old last block":
        "grow 先回傳新區塊 {fresh}，再回傳接在它後面的區塊：第一個新 id 取代的是區塊表原本的最後一個區塊",
    "the fresh block {fresh} is one of the ids the table gained: return it, first":
        "新區塊 {fresh} 也是區塊表新增的 id 之一：要回傳它，而且放在第一個",
    "the copy ({src}, {dst}) is still queued, but this release freed block {dst}: nobody reads that copy, and block "
    "{dst} can be handed out again in this step, to a sequence whose own copy-on-write fills it. A release drops the "
    "queued copies into the blocks it frees":
        "複製 ({src}, {dst}) 還在佇列中，但這次 release 已經釋放了區塊 {dst}：沒有人會讀那份副本，而區塊 {dst} "
        "在這一步就可能再被分配出去，交給另一條序列，由它自己的寫入時複製填入內容。release 必須撤銷以它所釋放的"
        "區塊為目的地、仍在佇列中的那些複製",
    " ({parent!r} holds {tokens} tokens in {table}; {seq!r} is a new record with its tokens)":
        "（{parent!r} 在 {table} 中存有 {tokens} 個 token；{seq!r} 是一筆帶著這些 token 的新紀錄）",
    " ({seq!r} holds {tokens} tokens; room for {room}; its last block {last} is shared, reference count {count}, "
    "{used} of {size} slots filled)":
        "（{seq!r} 存有 {tokens} 個 token，要容納到 {room} 個；它的最後一個區塊 {last} 是共享的，引用計數 {count}，"
        "{size} 個槽位已填 {used} 個）",
    " ({seq!r} holds {tokens} tokens; room for {room}; its last block {last} is shared, reference count {count}, "
    "full)":
        "（{seq!r} 存有 {tokens} 個 token，要容納到 {room} 個；它的最後一個區塊 {last} 是共享的，引用計數 {count}，"
        "已填滿）",
    "shared blocks (reference counts) {shared}": "共享的區塊（引用計數）{shared}",
    "queued copies {copies}": "佇列中的複製 {copies}",
    ", {item}": "，{item}",
    "{method} is not written yet: it raises NotImplementedError": "{method} 還沒寫：它引發 NotImplementedError",
    "{path} defines no fork: it is chapter 2's manager. Chapter 7's file is the whole manager: your admit, grow and "
    "release from chapter 2, fork, and copy-on-write in grow (the engine forks a request's samples and a search's "
    "beams)":
        "{path} 沒有定義 fork：它是第 2 章的管理器。第 7 章的檔案是完整的管理器：你第 2 章的 admit、grow 與 release，"
        "加上 fork，以及 grow 中的寫入時複製（引擎會為一個請求的各個樣本、一次搜尋的各個束進行分岔）",
    "\"{case}\"": "「{case}」",
    ", ": "、",
    "also wrong: {cases}": "同樣錯誤的還有：{cases}",
    "{path} is marked passed: load_parts() now gives the engine your BlockManager, forks and copies included (until "
    "you change the file)":
        "{path} 已標記為通過：從現在起 load_parts() 會把你的 BlockManager 交給引擎，分岔與複製都包括在內"
        "（直到你修改這個檔案為止）",
    "{path} passed and defines fork: it is already a chapter-7 file. The next cell saves its own text over it, so "
    "keep your version in that cell":
        "{path} 已通過，而且定義了 fork（分岔）：它已經是第 7 章的檔案。下一個儲存格會用自己的內容覆寫它，"
        "所以請把你的版本保留在那個儲存格裡",
    "your chapter-2 manager passed; the next cell replaces {path}, so it is kept as {copy}. Paste its admit, grow "
    "and release into the next cell:\n":
        "你第 2 章的管理器已通過；下一個儲存格會取代 {path}，所以先把它保留為 {copy}。"
        "請把其中的 admit、grow 與 release 貼進下一個儲存格：\n",
    "your chapter-2 manager, kept earlier as {copy}. Paste its admit, grow and release into the next cell:\n":
        "這是你第 2 章的管理器，先前已保留為 {copy}。請把其中的 admit、grow 與 release 貼進下一個儲存格：\n",
    "no chapter-2 manager to keep ({why}): the next cell's file is the whole manager, so write admit, grow and "
    "release too, by chapter 2's contract":
        "沒有第 2 章的管理器可以保留（{why}）：下一個儲存格的檔案是完整的管理器，所以 admit、grow 與 release "
        "也要依第 2 章的約定一併寫出",
}
