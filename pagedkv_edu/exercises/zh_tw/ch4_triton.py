"""zh-TW lines of :mod:`pagedkv_edu.exercises.ch4_triton`: the five Triton pieces and the interpreter's watch."""

MESSAGES: dict[str, str] = {
    # the stub, and what the watch says about a launch
    "it raises NotImplementedError": "它引發 NotImplementedError",
    "not solved yet ({why}). Write your version above and run the cell again.":
        "尚未作答（{why}）。請在上方寫下你的版本，再執行一次這個儲存格。",
    "this piece is still the stub: write it first": "這個部件還是空白函式：請先把它寫出來",
    "{dim} {index} (past the last, {last})": "{dim} {index}（超出範圍，最後一個是 {last}）",
    "a line of the kernel": "核心裡某一行",
    "line {line} of {file} (`{source}`)": "{file} 第 {line} 行（`{source}`）",
    "{what}, entry {entry}": "{what}，項目 {entry}",
    "the load at {line} would read outside every tensor the kernel was given ({lanes} unmasked lane(s)): a stride "
    "or an index is off, or a mask is missing. Nothing was read":
        "{line}的載入會讀到核心收到的所有張量之外（{lanes} 個未遮罩的通道）：有某個步幅或索引算錯了，"
        "或是少了遮罩。這次什麼都沒有讀取",
    "memory outside {names}": "{names} 之外的記憶體",
    "mask every lane that is not an element of the tensor it stores to": "凡是不對應到所寫入張量中某個元素的通道，都要遮罩掉",
    "the store at {line} would write {where} ({lanes} unmasked lane(s) outside {names}): {advice}. Nothing was "
    "written":
        "{line}的儲存會寫到 {where}（有 {lanes} 個未遮罩的通道落在 {names} 之外）：{advice}。這次什麼都沒有寫入",
    "the launch raised {error}": "啟動時引發了 {error}",
    "the launch raised {error} (the interpreter refuses a mask that combines a block with a scalar test, as in "
    "block_mask & (slot >= 0): section 2's 'How the graders work' says why; test the scalar with if, or broadcast "
    "it first)":
        "啟動時引發了 {error}（直譯器不接受把區塊張量與純量判斷結合起來的遮罩，例如 block_mask & (slot >= 0)："
        "第 2 節的「評分程式如何運作」說明了原因；請用 if 檢查純量，或先把它廣播開來）",
    "slot {slot} (block {block}, offset {offset} at block size {block_size})":
        "槽位 {slot}（區塊大小 {block_size} 下的區塊 {block}、偏移 {offset}）",

    # piece 1: the slot-mapped store
    "the block-table article's walk-through: block size 4, two tokens into blocks 7 and 1":
        "block-table 一文的逐步示範：區塊大小 4，兩個 token 分別寫入區塊 7 與 1",
    "padding (slot -1) between tokens, and slot 0, block size 5": "token 之間夾著填充（槽位 -1），還有槽位 0，區塊大小 5",
    "block size 3, three KV heads of head_dim 6, float16": "區塊大小 3，三個 head_dim 為 6 的 KV 頭，float16",
    "hidden case {n} (seeded random): block size {B}, {heads} KV heads of head_dim {dim}, {dtype}, {tokens} tokens":
        "隱藏案例 {n}（以固定種子隨機產生）：區塊大小 {B}，{heads} 個 head_dim 為 {dim} 的 KV 頭，{dtype}，{tokens} 個 token",
    "the poison (NaN): nothing was written there": "毒化值（NaN）：那裡什麼都沒有寫入",
    "token {t}'s {name} row": "屬於 token {t} 的 {name} 列",
    "a row that is no token's ({written} of {total} values written)": "不屬於任何 token 的一列（{total} 個值中寫入了 {written} 個）",
    "program {t} (token {t}) maps to {where}: {name} head {head} there should be token {t}'s {name} row, but it "
    "holds {owner} (dtype {dtype})":
        "程式 {t}（token {t}）對應到{where}：那裡 {name} 快取的頭 {head} 應該存著 token {t} 的 {name} 列，"
        "但存的卻是{owner}（dtype {dtype}）",
    "{where} was written in the {name} cache, but no token maps there (tokens {padding} are padding, slot -1: skip "
    "them)":
        "{name} 快取中的{where}被寫入了，但沒有任何 token 對應到那裡（token {padding} 是填充，槽位為 -1：請跳過它們）",
    "{where} was written in the {name} cache, but no token maps there":
        "{name} 快取中的{where}被寫入了，但沒有任何 token 對應到那裡",
    "something was written outside the cache's rows: past head_dim (a mask with <= instead of <?), or before "
    "block 0 / after the last block (tokens {padding} have slot -1 and must not be written at all)":
        "有東西寫到了快取列之外：超出 head_dim 的地方（是不是遮罩用了 <=，而不是 <？），或是區塊 0 之前、"
        "最後一個區塊之後（token {padding} 的槽位是 -1，完全不能寫入）",
    "something was written outside the cache's rows: past head_dim (a mask with <= instead of <?), or before "
    "block 0 / after the last block":
        "有東西寫到了快取列之外：超出 head_dim 的地方（是不是遮罩用了 <=，而不是 <？），或是區塊 0 之前、"
        "最後一個區塊之後",
    "hint: token's row is where a power-of-two trick puts it: block size {B} is not a power of two, so shifts and "
    "masks (& (B - 1)) do not split a slot: use slot // B and slot % B":
        "提示：這個 token 的列落在二的次方技巧會放的位置：區塊大小 {B} 不是二的次方，所以移位與遮罩（& (B - 1)）"
        "拆不開一個槽位：請用 slot // B 與 slot % B",
    "hint: slot 0 is a real slot; only -1 means padding": "提示：槽位 0 是真正的槽位；只有 -1 才表示填充",

    # pieces 2 and 3: a tile's slots and its rows
    "the block-table article: 9 tokens in blocks [7, 1, 3], block size 4, tiles of 4":
        "block-table 一文的例子：9 個 token 放在區塊 [7, 1, 3]，區塊大小 4，圖塊大小 4",
    "block size 5, lengths 5 and 11 (a full block and a ragged one), tiles of 8":
        "區塊大小 5，長度 5 與 11（一個填滿的區塊與一個未填滿的區塊），圖塊大小 8",
    "hidden case {n} (seeded random): block size {B}, tiles of {tile}, {seqs} sequence(s), {heads} KV head(s) of "
    "head_dim {dim}, {dtype}":
        "隱藏案例 {n}（以固定種子隨機產生）：區塊大小 {B}，圖塊大小 {tile}，{seqs} 條序列，"
        "{heads} 個 head_dim 為 {dim} 的 KV 頭，{dtype}",
    "sequence {i}'s block-table row": "序列 {i} 的區塊表列",
    "a row past the last sequence": "最後一條序列之後的列",
    "hint: // and % swapped (the table is indexed by pos % B)": "提示：// 與 % 對調了（變成以 pos % B 索引區塊表）",
    "hint: a power-of-two trick: pos >> {shift} and pos & (B - 1) split a position only when B = {B} is a power of "
    "two":
        "提示：用了二的次方技巧：只有當 B = {B} 是二的次方時，pos >> {shift} 與 pos & (B - 1) 才能拆開一個位置",
    "hint: the offset is missing: block * B is the first slot of the block": "提示：少了偏移：block * B 只是該區塊的第一個槽位",
    "hint: block * B is missing: a table entry is a block number, not a slot":
        "提示：少了 block * B：區塊表項目是區塊編號，不是槽位",
    "hint: the position itself was used as the offset (use pos % B)": "提示：把位置本身當成了偏移（請用 pos % B）",
    "hint: the table was skipped: pos is a logical position, the slot is physical":
        "提示：跳過了區塊表：pos 是邏輯位置，槽位則是實體位置",
    "hint: that is the slot at block size {other}, but this case's block size is {B}: use the BLOCK_SIZE argument, "
    "not a number or a global variable":
        "提示：那是區塊大小為 {other} 時的槽位，但這個案例的區塊大小是 {B}：請用 BLOCK_SIZE 引數，而不是寫死的數字或全域變數",
    "nothing (NaN)": "沒有值（NaN）",
    "program (sequence {seq}, tile {tile}) covers positions {first}..{last} of a {n}-token sequence":
        "程式（序列 {seq}、圖塊 {tile}）負責一條 {n} 個 token 的序列中的位置 {first}..{last}",
    "position {pos}: table entry {entry} is block {block}, so expected {where}; got {got}":
        "位置 {pos}：區塊表項目 {entry} 是區塊 {block}，所以應為{where}，卻得到 {got}",
    "the slots are right": "槽位都正確",
    "{right}, but a load whose lanes were not masked read {read}, past the sequence's last block: load the table "
    "with mask=mask_n, so positions past the sequence read nothing (on a GPU the row may end there, and the read "
    "would fall outside it)":
        "{right}，但有一次載入沒有遮罩它的通道，讀到了序列最後一個區塊之後的項目（{read}）：請以 mask=mask_n 載入區塊表，"
        "讓超出序列的位置什麼都不讀（在 GPU 上，這一列可能就在那裡結束，這次讀取就會落到它之外）",
    "NaN (an unwritten slot, or memory outside the row)": "NaN（未寫入的槽位，或是該列之外的記憶體）",
    "zeros": "全為零",
    "the K row of {where}, KV head {head}": "{where}、KV 頭 {head} 的 K 列",
    "values that are no single cache row's (a stride or a column offset is off?)":
        "不等於任何一個快取列的值（是某個步幅或欄偏移算錯了嗎？）",
    "program (sequence {seq}, KV head {head}, tile {tile}), row {row} of the tile (position {pos} of a {n}-token "
    "sequence; dtype {dtype})":
        "程式（序列 {seq}、KV 頭 {head}、圖塊 {tile}），圖塊的第 {row} 列（一條 {n} 個 token 的序列中的位置 {pos}；"
        "dtype {dtype}）",
    "expected the row of {where}, KV head {head}; got {got}": "應為{where}、KV 頭 {head} 的列，卻得到 {got}",
    "columns {first}..{last} pad head_dim {dim} up to {pad}: they must read as 0 (mask them with mask_d), got {got}":
        "欄 {first}..{last} 是把 head_dim 從 {dim} 補齊到 {pad} 的填充：它們必須讀成 0（用 mask_d 遮罩它們），卻得到 {got}",
    "this position is past the sequence (masked): its row must read as 0, got {got}. Load with mask=... and "
    "other=0.0: an unwritten slot may hold NaN, and 0 x NaN is NaN in the sum over V":
        "這個位置超出了序列（被遮罩）：它的列必須讀成 0，卻得到 {got}。請以 mask=... 與 other=0.0 載入："
        "未寫入的槽位可能存有 NaN，而在對 V 的加總中，0 x NaN 仍是 NaN",
    "hint: the row of a slot is (slot // B) * stride_block + (slot % B) * stride_token + kv_head * stride_head; "
    "here blocks are not B rows apart, so slot * stride_token is not it":
        "提示：一個槽位的列位於 (slot // B) * stride_block + (slot % B) * stride_token + kv_head * stride_head；"
        "這裡的區塊彼此並不相隔 B 列，所以 slot * stride_token 不對",
    "hint: block size {B} is not a power of two: no shifts or & masks": "提示：區塊大小 {B} 不是二的次方：不能用移位或 & 遮罩",

    # piece 4: one online-softmax tile update
    "random scores, four tiles of 8, GQA group 4": "隨機分數，四個大小為 8 的圖塊，GQA 群組 4",
    "the max grows every tile (the old sum and output must be rescaled)": "最大值每個圖塊都變大（舊的總和與輸出必須重新縮放）",
    "the max shrinks after the first tile": "最大值在第一個圖塊之後變小",
    "scores near 1,400 in base 2 (exp2 overflows float32 without the running max)":
        "以 2 為底、接近 1,400 的分數（沒有累計最大值時，exp2 會讓 float32 溢位）",
    "a ragged last tile padded with -inf": "最後一個圖塊不滿，以 -inf 填充",
    "a last tile of only padding (all -inf), as a split's tail can be: nothing may change":
        "最後一個圖塊只有填充（全為 -inf），分割的尾端就可能如此：任何值都不能改變",
    "GQA group 3 padded to 4 rows (the padding row's query is 0, so its scores are 0)":
        "GQA 群組 3 補齊到 4 列（填充列的查詢為 0，所以它的分數都是 0）",
    "hidden case {n} (seeded random): group {G}, tiles of {T}, head_dim {D}":
        "隱藏案例 {n}（以固定種子隨機產生）：群組 {G}，圖塊大小 {T}，head_dim {D}",
    "tile {tile} of {tiles}: {error}": "第 {tile} 個圖塊（共 {tiles} 個）：{error}",
    "m (running max)": "m（累計最大值）",
    "l (running sum)": "l（累計總和）",
    "acc (running output)": "acc（累計輸出）",
    "after tile {tile} of {tiles} (tiles of {T}, group {G}, head_dim {D}; float32 state against a float64 "
    "reference), query row {row}:":
        "第 {tile} 個圖塊之後（共 {tiles} 個，圖塊大小 {T}，群組 {G}，head_dim {D}；float32 狀態對照 float64 參考值），"
        "查詢列 {row}：",
    "{name} column {column}: expected {expected:.6g}, got {got:.6g} (relative error {rel:.2g}, tolerance {tol:g})":
        "{name}的欄 {column}：得到 {got:.6g}，應為 {expected:.6g}（相對誤差 {rel:.2g}，容許誤差 {tol:g}）",
    "{name}: expected {expected:.6g}, got {got:.6g} (relative error {rel:.2g}, tolerance {tol:g})":
        "{name}：得到 {got:.6g}，應為 {expected:.6g}（相對誤差 {rel:.2g}，容許誤差 {tol:g}）",
    "hint: this tile is all padding, so its own max is -inf and qk - (-inf) is NaN: subtract the running max "
    "m_new = max(m_i, the tile's max), which is finite after the first tile":
        "提示：這個圖塊全是填充，所以它自己的最大值是 -inf，而 qk - (-inf) 是 NaN：請減去累計最大值 "
        "m_new = max(m_i, 這個圖塊的最大值)，它在第一個圖塊之後就是有限值",
    "hint: inf or NaN: exp2 of a large score overflows float32 unless the running max is subtracted first "
    "(exp2(qk - m_new))":
        "提示：出現 inf 或 NaN：大分數的 exp2 會讓 float32 溢位，除非先減去累計最大值（exp2(qk - m_new)）",
    "hint: m is the largest score so far: the max of the old m and this tile's row maxima (axis 1)":
        "提示：m 是到目前為止最大的分數：取舊的 m 與這個圖塊各列最大值（axis 1）中較大的那個",
    "hint: everything accumulated before this tile was computed against the old max; scale it by "
    "alpha = exp2(m_old - m_new) before adding this tile. Scores are base 2: use exp2, not exp":
        "提示：這個圖塊之前累積的一切，都是相對於舊的最大值算出來的；加上這個圖塊之前，先把它乘上 "
        "alpha = exp2(m_old - m_new)。分數以 2 為底：請用 exp2，不是 exp",
    "hint: the scores are base-2 logits: p = exp2(qk - m_new), l sums p along the tile, acc adds p @ v":
        "提示：分數是以 2 為底的 logit：p = exp2(qk - m_new)，l 是 p 沿著圖塊的總和，acc 則加上 p @ v",

    # piece 5: the split-K merge
    "four query heads, 3 splits each, head_dim 4": "四個查詢頭，各有 3 個分割，head_dim 4",
    "one split (the output is that split's)": "只有一個分割（輸出就是該分割的輸出）",
    "an empty last split (lse -inf, part 0)": "最後一個分割是空的（lse 為 -inf，part 為 0）",
    "log-sum-exps 300 apart (2**300 overflows float32 unless the max is subtracted)":
        "log-sum-exp 彼此相差 300（除非減去最大值，否則 2**300 會讓 float32 溢位）",
    "hidden case {n} (seeded random): {rows} row(s), up to {pad} splits, head_dim {dim}":
        "隱藏案例 {n}（以固定種子隨機產生）：{rows} 列，最多 {pad} 個分割，head_dim {dim}",
    "program {r} (one (token, query head) row), {splits} split(s) of SPLITS_PAD {pad}, float32 against float64:":
        "程式 {r}（負責一個 token 的一個查詢頭，也就是一列），SPLITS_PAD {pad} 之中有 {splits} 個分割，float32 對照 float64：",
    "output column {d}: expected {expected:.6g}, got {got:.6g} (absolute error {err:.2g}, tolerance {tol:g} "
    "relative)":
        "輸出的欄 {d}：得到 {got:.6g}，應為 {expected:.6g}（絕對誤差 {err:.2g}，相對容許誤差 {tol:g}）",
    "hint: inf or NaN: subtract the largest lse before exp2, and read only the first num_splits splits "
    "(mask = offs_s < num_splits; the rows after them are not splits)":
        "提示：出現 inf 或 NaN：在 exp2 之前先減去最大的 lse，而且只讀取前 num_splits 個分割"
        "（mask = offs_s < num_splits；之後的列不是分割）",
    "hint: split s's weight is exp2(lse[s] - max lse) / the sum of those weights; lse is base 2 (exp2, not exp), "
    "and split s's row starts at part_ptr + s * stride_split":
        "提示：分割 s 的權重是 exp2(lse[s] - max lse) / 這些權重的總和；lse 以 2 為底（用 exp2，不是 exp），"
        "而分割 s 的列從 part_ptr + s * stride_split 開始",
}
