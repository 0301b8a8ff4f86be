"""zh-TW lines of :mod:`pagedkv_edu.exercises.ch8`: the hash chain, the checked lookup and the free-queue order."""

MESSAGES: dict[str, str] = {
    # the hash chain
    "a 10-token system prompt, block size 4: two full blocks and 2 tokens":
        "10 個 token 的系統提示詞，區塊大小 4：兩個填滿的區塊，外加 2 個 token",
    "exactly two full blocks: both are hashed": "剛好兩個填滿的區塊：兩個都要計算雜湊",
    "the same block twice: its two hashes differ, their parents do": "同一個區塊出現兩次：它的兩個雜湊不同，因為父雜湊不同",
    "shorter than one block: nothing to hash": "不到一個區塊：沒有東西要計算雜湊",
    "block size 1": "區塊大小 1",
    "hidden case {n}": "隱藏案例 {n}",
    "return a list of hashes, one per full block": "請傳回雜湊的串列，每個填滿的區塊一個",
    "a partly filled last block has no hash: {tokens} tokens fill {blocks} blocks of {size}":
        "未填滿的最後一個區塊沒有雜湊：{tokens} 個 token 填滿 {blocks} 個大小為 {size} 的區塊",
    "the last full block is missing: {tokens} tokens fill {blocks} blocks of {size}":
        "少了最後一個填滿的區塊：{tokens} 個 token 填滿 {blocks} 個大小為 {size} 的區塊",
    "each hash must include its parent's hash, or equal blocks after different beginnings get one hash":
        "每個雜湊都必須納入父區塊的雜湊，否則接在不同開頭之後的相同區塊，會得到同一個雜湊",
    "the first block's parent hash is None": "第一個區塊的父雜湊是 None",
    "expected {count} hash {expected}, got {got}": "應為 {count} 個雜湊 {expected}，得到 {got}",
    "expected {count} hashes {expected}, got {got}": "應為 {count} 個雜湊 {expected}，得到 {got}",
    "expected {count} hash {expected}, got {got}  ({why})": "應為 {count} 個雜湊 {expected}，得到 {got}（{why}）",
    "expected {count} hashes {expected}, got {got}  ({why})": "應為 {count} 個雜湊 {expected}，得到 {got}（{why}）",
    "prompt {prompt} ({count} tokens), block size {size}": "提示詞 {prompt}（{count} 個 token），區塊大小 {size}",
    # the lookup, checked
    "strong hash": "強雜湊",
    "weak hash": "弱雜湊",
    "a cached 10-token system prompt (block size 4), a new question after it":
        "已快取的 10 個 token 系統提示詞（區塊大小 4），後面接著一個新問題",
    "the whole prompt is cached (two full blocks): the last token must still be computed":
        "整個提示詞都已快取（兩個填滿的區塊）：最後一個 token 仍然必須計算",
    "one token more than the cached blocks: both hit": "比已快取的區塊多一個 token：兩個區塊都命中",
    "block 2 was handed out again since (its table entry is stale): it holds other tokens now":
        "區塊 2 之後又被發出去了（它在 table 中的項目已經過期）：它現在裝著別的 token",
    "a weak hash: another block hashes the same and holds other tokens (a forced collision)":
        "弱雜湊：另一個區塊的雜湊相同，裝的卻是別的 token（刻意製造的碰撞）",
    "block 2 was evicted: block 9 cannot be used without it": "區塊 2 已被逐出：少了它，區塊 9 就不能用",
    "the same 4 tokens after another beginning are other K/V: compare the parent too":
        "同樣的 4 個 token 接在另一個開頭之後，就是另一份 K/V：連父雜湊也要比對",
    "a shared prefix shorter than one block never hits (vLLM #54607)":
        "比一個區塊短的共享前綴永遠不會命中（vLLM #54607）",
    "{hit} of {tokens} tokens would hit: nothing would be left to compute the logits from":
        "{tokens} 個 token 中會有 {hit} 個命中：這樣就沒有 token 留下來計算 logits 了",
    "block {index} of the prompt is not in the table: a block is usable only if every block before it is cached too":
        "提示詞的區塊 {index} 不在 table 中：只有在它之前的每個區塊也都已快取時，一個區塊才能使用",
    "the table names block {block}, which holds no full block now: the entry is stale":
        "table 指向區塊 {block}，但它現在沒有裝任何填滿的區塊：這個項目已經過期",
    "the table names block {block}, but it holds tokens {held}, not {wanted}: a collision or a block handed out "
    "again; compare before using it":
        "table 指向區塊 {block}，但它裝的是 token {held}，不是 {wanted}：這是碰撞，或是區塊已被再次發出；使用之前要先比對",
    "block {block} holds these tokens, but after another prefix (parent hash {held!r}, not {wanted!r}): its K/V "
    "differ":
        "區塊 {block} 裝著這些 token，但接在另一段前綴之後：父雜湊是 {held!r}，不是 {wanted!r}，所以它的 K/V 不一樣",
    "block id": "區塊編號",
    "block {block} holds exactly the pair hashed: it is a hit": "區塊 {block} 裝的正是拿來計算雜湊的那個組合：這是命中",
    "prompt {prompt} ({count} tokens), block size {size}, {hash}, {entries} table entries":
        "提示詞 {prompt}（{count} 個 token），區塊大小 {size}，{hash}，table 有 {entries} 個項目",
    "expected blocks {expected}, got {got}": "應為區塊 {expected}，得到 {got}",
    "expected blocks {expected}, got {got}  ({why})": "應為區塊 {expected}，得到 {got}（{why}）",
    # the free queue's order
    "a request finishes, freed tail first: its partial block 2 to the front, its cached 1 and 0 to the back":
        "一個請求結束，從尾端開始釋放：它未填滿的區塊 2 放到前端，已快取的 1 和 0 排到尾端",
    "three uncached blocks freed together keep their order at the front": "一起釋放的三個未快取區塊，在前端保持原本的順序",
    "a block another request shares loses one reference and stays out of the queue":
        "另一個請求也在共享的區塊，只會少一個引用，不會進入佇列",
    "a hit on a free cached block pulls it out of the middle of the queue": "命中一個空閒的已快取區塊，會把它從佇列中間抽出來",
    "a hit on a block in use only takes a reference": "命中一個使用中的區塊，只會多取得一個引用",
    "freeing nothing changes nothing": "什麼都不釋放，就什麼都不會改變",
    "the older vLLM order (both appended); at c59cb79 a freed block without a hash goes to the front":
        "這是較舊的 vLLM 順序，兩者都接到尾端；在 c59cb79，被釋放的無雜湊區塊要放到前端",
    "prepending one block at a time reverses them: the first block given must end up first":
        "一次把一個區塊插到前端，會把它們的順序顛倒：最先給的區塊最後必須排在最前面",
    "the cached blocks go to the back (they may still be hit), the others to the front":
        "已快取的區塊排到尾端，因為它們之後仍可能被命中；其他的放到前端",
    "a block with another reference is still in use: it does not join the queue":
        "還有別的引用的區塊仍在使用中：它不會加入佇列",
    "a hit must take the block out of the free queue, or it could be handed out while in use":
        "命中必須把區塊從空閒佇列中取出，否則它可能在使用中被發給別人",
    "free queue: expected {expected}, got {got}": "空閒佇列：應為 {expected}，得到 {got}",
    "free queue: expected {expected}, got {got}  ({hint})": "空閒佇列：應為 {expected}，得到 {got}（{hint}）",
    "reference counts: expected {expected}, got {got}": "引用計數：應為 {expected}，得到 {got}",
    "{case}:": "{case}：",
    "free queue order (空閒佇列的順序)": "free_blocks 與 touch（空閒佇列的順序）",
    # the three, as the engine's prefix cache
    "{path} does not exist: run the %%writefile cell above first": "{path} 不存在：請先執行上方的 %%writefile 儲存格",
    "importing it {error}": "匯入這個檔案時{error}",
    "it defines no {names}: the file holds your three functions": "檔案中沒有定義 {names}：這個檔案要放你的三個函式",
    ", ": "、",
    "your prefix cache ({path})": "你的前綴快取（{path}）",
    "in the engine it found, evicted and preempted as the shipped cache does; load_parts() now runs it":
        "在引擎中，它找到的命中、逐出的區塊與搶佔的請求都和隨附的快取相同；現在 load_parts() 會執行它",
    "in the engine (the consultants at 1/16 scale, blocks of 3): {error}":
        "在引擎中（1/16 規模的顧問工作負載，每個區塊 3 個 token）：{error}",
    "in the engine (the consultants at 1/16 scale, blocks of 3) your cache found {found} prompt tokens ({resumed} "
    "more for preempted requests), evicted {evicted} blocks and {preempted} requests were preempted; with the "
    "shipped cache {want_found} ({want_resumed}), {want_evicted} and {want_preempted}":
        "在引擎中（1/16 規模的顧問工作負載，每個區塊 3 個 token），你的快取找到 {found} 個提示詞 token"
        "（被搶佔的請求另外找到 {resumed} 個），逐出 {evicted} 個區塊，有 {preempted} 個請求被搶佔；"
        "隨附的快取則分別是 {want_found}（{want_resumed}）、{want_evicted} 與 {want_preempted}",
}
