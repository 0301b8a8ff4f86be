"""zh-TW lines of :mod:`pagedkv_edu.viz.online_softmax_view`: the online softmax and the split-K merge, tile by tile."""

MESSAGES: dict[str, str] = {
    # the score patterns, as the control and the titles show them
    "random": "隨機",
    "rising": "上升",
    "falling": "下降",
    "near 1,000": "接近 1,000",
    # refusals
    "tile_n={tile_n} is not a power of two: the kernel's tl.arange(0, TILE_N) needs one (the block size need not "
    "be one; the tile is what the kernel loads at once)":
        "tile_n={tile_n} 不是二的次方：核心的 tl.arange(0, TILE_N) 需要二的次方（區塊大小則不必是；"
        "圖塊是核心一次載入的量）",
    "num_splits={num_splits} is more than the {tiles} of {num_keys} keys in tiles of {tile_n}: a split is a program "
    "over whole tiles, so {extra} would read nothing; use at most {num_tiles} splits, smaller tiles or more keys":
        "num_splits={num_splits} 多於 {num_keys} 個 key 以圖塊大小 {tile_n} 切出的 {tiles}：一個分割是處理完整圖塊的"
        "程式，所以會有 {extra} 個分割什麼都讀不到；請最多用 {num_tiles} 個分割，或改用較小的圖塊、更多的 key",
    # counts
    "{n} tile": "{n} 個圖塊",
    "{n} tiles": "{n} 個圖塊",
    "{n} split": "{n} 個分割",
    "{n} splits": "{n} 個分割",
    "{n} program": "{n} 個程式",
    "{n} programs": "{n} 個程式",
    # the summary (the picture's aria-label and the plain-text display)
    "merged output equals the direct one": "匯合後的輸出等於直接計算的結果",
    "merged output differs from the direct one": "匯合後的輸出與直接計算的結果不同",
    "online softmax: {keys} keys ({pattern}), tiles of {tile}, after tile t{step} of t0–t{last}; {splits}, "
    "{verdict}":
        "線上 softmax：{keys} 個 key（分數：{pattern}），圖塊大小 {tile}，已處理到圖塊 t{step}（共 t0–t{last}）；"
        "{splits}，{verdict}",
    # the key axis
    "scores s": "分數 s",
    "{value} top": "最高 {value}",
    "{value} bottom": "最低 {value}",
    "tiles": "圖塊",
    "l (running sum)": "l（累計總和）",
    "splits": "分割",
    "split {index}": "分割 {index}",
    # the current tile's update
    "key {start}": "位置 {start} 的 key",
    "keys {start}–{last}": "位置 {start}–{last} 的 key",
    "α = exp(−∞ − m_new) = 0: there is nothing summed yet to rescale": "α = exp(−∞ − m_new) = 0：還沒有累加任何東西，不必重新縮放",
    "α = exp({m_old} − {m_new}) = {alpha:.4f}: the max grew, so the old l and acc, summed against the old max, are "
    "multiplied by α":
        "α = exp({m_old} − {m_new}) = {alpha:.4f}：最大值變大了，所以以舊最大值累加的舊 l 與 acc 都要乘上 α",
    "α = exp(0) = 1: this tile's max is not higher, the old l and acc stand as they are":
        "α = exp(0) = 1：這個圖塊的最大值沒有更高，舊的 l 與 acc 維持原樣",
    "tile t{index} ({keys}): its max {tile_max}; running max m: {m_old} → {m_new}":
        "圖塊 t{index}（{keys}）：圖塊內最大值 {tile_max}；累計最大值 m：{m_old} → {m_new}",
    "acc = acc_old·α + Σ exp(s − m_new)·v, one cell per head_dim coordinate:":
        "acc = acc_old·α + Σ exp(s − m_new)·v，每個 head_dim 座標一個儲存格：",
    "acc before this tile": "這個圖塊之前的 acc",
    "× α (rescaled)": "× α（重新縮放）",
    "= acc after this tile": "= 這個圖塊之後的 acc",
    "acc / l: output so far": "acc / l：目前為止的輸出",
    "direct softmax(s)·V": "直接計算的 softmax(s)·V",
    "after the last tile, acc / l equals the direct softmax over all {keys} keys: max |difference| = {error:.1e}":
        "最後一個圖塊之後，acc / l 等於對全部 {keys} 個 key 直接計算的 softmax：最大 |差異| = {error:.1e}",
    "acc / l covers keys 0–{end} so far; step to tile t{last}, the last, for the whole softmax":
        "目前的 acc / l 涵蓋 key 0–{end}；走到最後一個圖塊 t{last}，才是完整的 softmax",
    "inf (float64 overflows past 709.8)": "inf（float64 超過 709.8 就溢位）",
    "Σ exp(s) with no max subtracted: {naive}; with the running max every exponent is ≤ 0":
        "不減去最大值的 Σ exp(s)：{naive}；有了累計最大值，每個指數都 ≤ 0",
    # the split-K panel
    "split-K: {programs} of whole tiles, each ends with its own (m_i, l_i, acc_i)":
        "KV 分割：{programs}，各自處理完整的圖塊，最後各有自己的 (m_i, l_i, acc_i)",
    "merge weight w_i = exp(m_i − m)·l_i / L with m = max m_i = {m}, L = Σ exp(m_i − m)·l_i = {total} (the kernel's "
    "2^(lse_i − max lse) / Σ); right: acc_i / l_i":
        "匯合權重 w_i = exp(m_i − m)·l_i / L，其中 m = max m_i = {m}，L = Σ exp(m_i − m)·l_i = {total}"
        "（即核心的 2^(lse_i − max lse) / Σ）；右側：acc_i / l_i",
    "split {index}: keys {start}–{last} ({tiles}), m {m}, l {l}, lse {lse}":
        "分割 {index}：key {start}–{last}（{tiles}），m {m}，l {l}，lse {lse}",
    "split {index}: no keys left (l = 0, lse = −∞): weight 0": "分割 {index}：沒有分到 key（l = 0，lse = −∞）：權重 0",
    "merged Σ w_i · acc_i / l_i": "匯合後 Σ w_i · acc_i / l_i",
    "merged output equals the direct one: max |difference| = {error:.1e} (float64)":
        "匯合後的輸出等於直接計算的結果：最大 |差異| = {error:.1e}（float64）",
    "merged output DIFFERS FROM the direct one: max |difference| = {error:.1e} (float64)":
        "匯合後的輸出「不等於」直接計算的結果：最大 |差異| = {error:.1e}（float64）",
    # the picture's heading
    "online softmax over {keys} keys ({pattern} scores, seed {seed}), tiles of {tile}: after tile t{step} of "
    "t0–t{last}":
        "線上 softmax，{keys} 個 key（分數：{pattern}，種子 {seed}），圖塊大小 {tile}：已處理到圖塊 t{step}"
        "（共 t0–t{last}）",
    "dots: scores, coloured once their tile is read (grey: not yet); red line: the running max m; sand: the current "
    "tile":
        "圓點：分數，所屬圖塊讀過後才上色（灰色：還沒讀）；紅線：累計最大值 m；沙色：目前的圖塊",
    # the still
    "tiles of {tile} ({count}), {splits}": "圖塊大小 {tile}（共 {count} 個），{splits}",
    "{n} rescale (α < 1 after the first tile)": "重新縮放 {n} 次（第一個圖塊之後 α < 1）",
    "{n} rescales (α < 1 after the first tile)": "重新縮放 {n} 次（第一個圖塊之後 α < 1）",
    "merge weights: {weights}": "匯合權重：{weights}",
    "max |out − direct|: {error:.1e} (equal)": "最大 |輸出 − 直接計算|：{error:.1e}（相等）",
    "max |out − direct|: {error:.1e} (DIFFERENT)": "最大 |輸出 − 直接計算|：{error:.1e}（不同）",
    "the same {keys} keys ({pattern} scores, seed {seed}), cut {ways} ways, each after its last tile":
        "同樣的 {keys} 個 key（分數：{pattern}，種子 {seed}），切成 {ways} 種，每種都處理到最後一個圖塊",
    "online softmax, {n} settings": "線上 softmax，{n} 種設定",
}
