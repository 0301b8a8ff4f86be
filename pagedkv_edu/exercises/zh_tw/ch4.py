"""zh-TW lines of :mod:`pagedkv_edu.exercises.ch4`: the online-softmax update in PyTorch, and four Triton warm-ups."""

MESSAGES: dict[str, str] = {
    # --- online softmax ---------------------------------------------------------------------------
    "random scores, four tiles of 8": "隨機分數，四個大小為 8 的圖塊",
    "the max grows every tile (old sums must be rescaled)": "最大值每經過一個圖塊就變大（舊的總和必須重新縮放）",
    "the max shrinks after the first tile": "最大值在第一個圖塊之後變小",
    "scores near 1,000 (exp overflows without the running max)": "分數在 1,000 附近（沒有累計最大值時，exp 會溢位）",
    "a ragged last tile padded with -inf": "最後一個圖塊不滿，以 -inf 填充",
    "one tile": "只有一個圖塊",
    "a last tile of only padding (-inf): a tile-local max gives NaN":
        "最後一個圖塊全是填充（-inf）：只取圖塊內的最大值會得到 NaN",
    "hidden case {n}": "隱藏案例 {n}",
    "m (running max)": "m（累計最大值）",
    "l (running sum)": "l（累計總和）",
    "acc (running output)": "acc（累計輸出）",
    "expected a tuple (m, l, acc), got {got}": "應為 tuple (m, l, acc)，卻得到 {got}",
    "dtype: m, l and acc are {got}, but the state and the inputs are {dtype}: keep the state in the dtype it was given":
        "dtype：m、l 與 acc 是 {got}，但狀態與輸入都是 {dtype}：狀態要保持傳入時的 dtype",
    "{name}: expected shape {expected}, got {shape}": "{name}：形狀應為 {expected}，卻得到 {shape}",
    "{name}: dtype {got}, but the state and the inputs are {dtype}: keep the state in the dtype it was given":
        "{name}：dtype 是 {got}，但狀態與輸入都是 {dtype}：狀態要保持傳入時的 dtype",
    "{name}: head {row}: expected {expected}, got {got}": "{name}：查詢頭 {row}：得到 {got}，應為 {expected}",
    "{name}: expected {expected}, got {got}": "{name}：得到 {got}，應為 {expected}",
    "{values} (not finite: did exp overflow? subtract the running max before exponentiating)":
        "{values}（不是有限值：是不是 exp 溢位了？取指數之前，先減去累計最大值）",
    "{values}; max abs error {abs_error:.2g}, max rel error {rel_error:.2g} ({dtype} allows about {rtol:g}): an error "
    "of float32 size, is part of your computation in float32?":
        "{values}；最大絕對誤差 {abs_error:.2g}，最大相對誤差 {rel_error:.2g}（{dtype} 容許約 {rtol:g}）："
        "這是 float32 等級的誤差，你的計算是不是有一部分用了 float32？",
    "{values}; max abs error {abs_error:.2g}, max rel error {rel_error:.2g} ({dtype} allows about {rtol:g})":
        "{values}；最大絕對誤差 {abs_error:.2g}，最大相對誤差 {rel_error:.2g}（{dtype} 容許約 {rtol:g}）",
    "{dtype}, G = {group} heads, D = {head_dim}, tiles of {tiles} tokens, scores around {base:g}":
        "{dtype}，G = {group} 個查詢頭，D = {head_dim}，各圖塊的 token 數為 {tiles}，分數約在 {base:g} 附近",
    "{dtype}, G = {group} heads, D = {head_dim}, tiles of {tiles} tokens":
        "{dtype}，G = {group} 個查詢頭，D = {head_dim}，各圖塊的 token 數為 {tiles}",
    "tile {tile} ({kind}): {error}": "第 {tile} 個圖塊（{kind}）：{error}",
    "after tile {tile} of {tiles} ({kind}):": "第 {tile} 個圖塊之後（共 {tiles} 個；{kind}）：",

    # --- puzzle 1: pad_copy -----------------------------------------------------------------------
    "10 values, blocks of 4, 3 programs (the last block is ragged)": "10 個值，每個區塊 4 個，3 個程式（最後一個區塊不滿）",
    "8 values, one block of 8 (nothing to mask)": "8 個值，只有一個 8 個值的區塊（不需要遮罩）",
    "1 value, blocks of 4, 2 programs (the second program has nothing to copy)":
        "1 個值，每個區塊 4 個，2 個程式（第二個程式沒有東西可複製）",
    "hidden case {n} (seeded random): {count} values, blocks of {block}":
        "隱藏案例 {n}（以固定種子隨機產生）：{count} 個值，每個區塊 {block} 個",
    "the given arguments": "你給的引數",
    "out[{i}] (program {program}, lane {lane}): expected {expected:.4g}, got {got:.4g}":
        "out[{i}]（程式 {program}，通道 {lane}）：得到 {got:.4g}，應為 {expected:.4g}",
    "hint: position {i} is past the n = {n} values, where x holds NaN here: load with mask=offs < n and other=0.0, "
    "and store the whole block":
        "提示：位置 {i} 已超出那 n = {n} 個值，而 x 在這些位置存的是 NaN：以 mask=offs < n 與 other=0.0 載入，"
        "並儲存整個區塊",
    "hint: nothing was stored at {i}: program pid covers pid * BLOCK .. pid * BLOCK + BLOCK - 1 "
    "(offs = pid * BLOCK + tl.arange(0, BLOCK))":
        "提示：位置 {i} 沒有存入任何值：程式 pid 負責的區塊是 pid * BLOCK .. pid * BLOCK + BLOCK - 1"
        "（offs = pid * BLOCK + tl.arange(0, BLOCK)）",

    # --- puzzle 2: gather_rows --------------------------------------------------------------------
    "5 rows gathered by index [3, 0, 3, 6, 1] from 7, head_dim 4, blocks of 4 rows":
        "依索引 [3, 0, 3, 6, 1] 從 7 列中收集 5 列，head_dim 4，每個區塊 4 列",
    "one row": "只有一列",
    "hidden case {n} (seeded random): {count} indices into {rows} rows":
        "隱藏案例 {n}（以固定種子隨機產生）：{count} 個索引，指向 {rows} 列",
    "row {row} of src": "src 的第 {row} 列",
    "NaN (nothing stored)": "NaN（沒有存入任何值）",
    "no row of src": "src 中沒有的一列",
    "out row {i}: idx[{i}] = {index}, so expected src row {index}; got {what}":
        "out 第 {i} 列：idx[{i}] = {index}，所以應為 src 第 {index} 列；得到的卻是 {what}",
    "out row {row} was written, but there are only n = {n} indices: mask the store (rows >= n)":
        "out 第 {row} 列被寫入了，但索引只有 n = {n} 個：儲存時要加上遮罩（遮掉 rows >= n 的列）",
    "the rows are right, but a load whose lanes were not masked read {read} (past n = {n}): mask the index load with "
    "rows < n (on a GPU the index tensor may end there)":
        "各列都正確，但有一次載入沒有遮罩它的通道，讀到了「{read}」（超過 n = {n}）：載入索引時要以 rows < n 加上遮罩"
        "（在 GPU 上，索引張量可能就在那裡結束）",

    # --- puzzle 3: row_stats ----------------------------------------------------------------------
    "3 rows of lengths 5, 1 and 8 in blocks of 8": "3 列，長度分別為 5、1 與 8，每個區塊 8 個值",
    "every value negative: the max is not 0": "每個值都是負的：最大值不是 0",
    "values near 100: exp overflows float32 without subtracting the max": "值在 100 附近：不先減去最大值，exp 會讓 float32 溢位",
    "hidden case {n} (seeded random): blocks of {block}": "隱藏案例 {n}（以固定種子隨機產生）：每個區塊 {block} 個值",
    "{name}[{r}] (a row of {count} values in a block of {block}): expected {expected:.6g}, got {got:.6g}":
        "{name}[{r}]（一列 {count} 個值，放在 {block} 個值的區塊中）：得到 {got:.6g}，應為 {expected:.6g}",
    "hint: the masked lanes read 0, which is larger than every value here: load with other=-float('inf') so padding "
    "never wins the max":
        "提示：被遮罩的通道讀到 0，比這裡的每個值都大：以 other=-float('inf') 載入，填充就永遠不會成為最大值",
    "hint: inf or NaN: subtract the row's max before exp, and give the masked lanes a value that adds nothing "
    "(other=-inf: exp(-inf) = 0)":
        "提示：出現 inf 或 NaN：取 exp 之前先減去該列的最大值，並給被遮罩的通道一個加進總和也沒有影響的值"
        "（other=-inf：exp(-inf) = 0）",

    # --- puzzle 4: scores -------------------------------------------------------------------------
    "4 query heads, 5 keys in a block of 8, head_dim 8": "4 個查詢頭，大小為 8 的區塊中有 5 個 key，head_dim 8",
    "1 query head, 8 keys (nothing masked), head_dim 4": "1 個查詢頭，8 個 key（沒有需要遮罩的），head_dim 4",
    "hidden case {n} (seeded random): keys in a block of {block}":
        "隱藏案例 {n}（以固定種子隨機產生）：key 放在大小為 {block} 的區塊中",
    "out[{g}, {j}] (query head {g}, key {j} of n = {n}): expected {expected:.5g}, got {got:.5g}":
        "out[{g}, {j}]（查詢頭 {g}，key {j}，共 n = {n} 個 key）：得到 {got:.5g}，應為 {expected:.5g}",
    "hint: keys past n are padding: their score must be -inf (tl.where(offs_n < n, s, float('-inf'))), so a softmax "
    "gives them weight 0":
        "提示：超過 n 的 key 是填充：它們的分數必須是 -inf（tl.where(offs_n < n, s, float('-inf'))），"
        "之後的 softmax 才會給它們權重 0",
    "hint: multiply q·k by scale": "提示：q·k 要乘上 scale",
}
