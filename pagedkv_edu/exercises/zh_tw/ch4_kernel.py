"""zh-TW lines of :mod:`pagedkv_edu.exercises.ch4_kernel`: the whole paged decode kernel and its split-K merge."""

MESSAGES: dict[str, str] = {
    # --- the cases --------------------------------------------------------------------------------
    "block size 5, GQA group 3 (6 query heads, 2 KV heads), lengths 1, 5, 6 and 37, tiles of 8":
        "區塊大小 5，GQA 群組 3（6 個查詢頭、2 個 KV 頭），長度 1、5、6 與 37，圖塊大小 8",
    "scores that fall by about 300 (base 2) after the first tile: exp2 overflows without the running max":
        "分數在第一個圖塊之後下降約 300（以 2 為底）：沒有累計最大值時，exp2 會溢位",
    "split-K: 3 splits, block size 6, GQA group 4, lengths 7 (two splits empty), 48 and 61":
        "KV 分割：3 個分割，區塊大小 6，GQA 群組 4，長度 7（有兩個分割是空的）、48 與 61",
    "block size 12, head_dim 6 (padded to 8), 2 splits, float16, lengths 24 and 25":
        "區塊大小 12，head_dim 6（補齊到 8），2 個分割，float16，長度 24 與 25",
    "hidden case {n} (seeded random): block size {block_size}, tiles of {tile_n}, {heads} query heads on {kv_heads} "
    "KV head(s), {seqs} sequence(s), {splits} split(s), {dtype}":
        "隱藏案例 {n}（以固定種子隨機產生）：區塊大小 {block_size}，圖塊大小 {tile_n}，{heads} 個查詢頭共用 "
        "{kv_heads} 個 KV 頭，{seqs} 條序列，{splits} 個分割，{dtype}",

    # --- what to mask, by the padding a lane landed in ---------------------------------------------
    "rows g >= GROUP of a KV head's tile are no query heads of its own (on the last KV head, past the last one): "
    "mask them with mask_g = offs_g < GROUP":
        "KV 頭的圖塊中，g >= GROUP 的列不是它自己的查詢頭（在最後一個 KV 頭上，更是超出了最後一個查詢頭）："
        "以 mask_g = offs_g < GROUP 把它們遮掉",
    "columns past HEAD_DIM are padding: mask them with mask_d = offs_d < HEAD_DIM":
        "超過 HEAD_DIM 的欄是填充：以 mask_d = offs_d < HEAD_DIM 把它們遮掉",
    "only the first num_splits splits exist: mask the split axis with offs_s < num_splits":
        "只有前 num_splits 個分割存在：以 offs_s < num_splits 遮罩分割這一軸",
    "the merge's grid has one program per query head": "匯合核心的網格是每個查詢頭一個程式",

    # --- a wrong split, a wrong merge, a watched read ----------------------------------------------
    "every split and the output are right, but a load whose lanes were not masked read {read}, padding outside "
    "{tensor}: {advice} (on a GPU the tensor may end there, and the read would fall outside it)":
        "每個分割與輸出都正確，但有一次載入沒有遮罩它的通道，讀到了「{read}」，那是 {tensor} 之外的填充：{advice}"
        "（在 GPU 上，張量可能就在那裡結束，這次讀取就會落到它之外）",
    "every split and the output are right": "每個分割與輸出都正確",
    "positions {start}..{last}": "位置 {start}..{last}",
    "no position: chunks of {chunk}, so split {k} would start at {start}, at or past the end":
        "不含任何位置：每段 {chunk} 個位置，所以分割 {k} 會從 {start} 開始，已經在序列結尾或更後面",
    "{n} tokens": "{n} 個 token",
    "{n} token": "{n} 個 token",
    "sequence {s} ({tokens}, block size {block_size}, {splits} split(s) of whole tiles of {tile_n}), query head {h} "
    "(KV head {kv_head}), split {k} ({span})":
        "序列 {s}（{tokens}，區塊大小 {block_size}，{splits} 個分割，每個都由大小 {tile_n} 的完整圖塊組成），"
        "查詢頭 {h}（KV 頭 {kv_head}），分割 {k}（{span}）",
    "it stored part[..., column {d}] = {part:.6g} (expected {want_part:.6g}) and lse = {lse:.6g} (expected "
    "{want_lse:.6g}, base 2), against a float64 reference of this split ({dtype} cache, tolerance {tol:g})":
        "它存入了 part[..., column {d}] = {part:.6g}（應為 {want_part:.6g}）與 lse = {lse:.6g}（應為 "
        "{want_lse:.6g}，以 2 為底），對照的是這個分割的 float64 參考值（{dtype} 快取，容許誤差 {tol:g}）",
    "a load whose lanes were not masked read {read}, q's NaN padding":
        "有一次載入沒有遮罩它的通道，讀到了「{read}」，也就是 q 的 NaN 填充",
    "hint: that read is the cause: with q's padding zeroed instead of NaN, every split is right. Load q with "
    "mask=mask_g[:, None] & mask_d[None, :] and other=0.0 ({advice})":
        "提示：原因就是這次讀取：把 q 的填充歸零（而不是 NaN）之後，每個分割都正確。載入 q 時請用 "
        "mask=mask_g[:, None] & mask_d[None, :] 與 other=0.0（{advice}）",
    "(a load whose lanes were not masked also read {read}, past the sequence's last block)":
        "（另外還有一次載入沒有遮罩它的通道，讀到了「{read}」，超出了序列的最後一個區塊）",
    "hint: without the grader's poison this case passes: a masked tl.load without other= is read. The interpreter "
    "fills its masked lanes with 0; a GPU leaves them undefined, so the grader fills them with NaN. Give every masked "
    "load that feeds a sum an other=":
        "提示：拿掉評分程式的 NaN 毒化，這個案例就會通過：有個帶遮罩卻沒有 other= 的 tl.load 被讀進來了。"
        "直譯器把被遮罩的通道填成 0；GPU 則讓它們保持未定義，所以評分程式把它們填成 NaN。"
        "每個會流入總和的帶遮罩載入，都要給它 other=",
    "hint: inf or NaN where the scores fall by 300 after the first tile: subtract the running max (the max of every "
    "score so far, not of this tile alone) before exp2":
        "提示：分數在第一個圖塊之後下降 300 的地方出現了 inf 或 NaN：取 exp2 之前先減去累計最大值"
        "（目前為止所有分數的最大值，而不只是這個圖塊的）",

    # --- an empty split ---------------------------------------------------------------------------
    "hint: split {k} holds no position and stored nothing: part and lse kept what the grader put there before the "
    "launch (NaN, and {sentinel:g} in a second run). An empty split must still store part = 0 and lse = -inf, whose "
    "weight in the merge is 2^-inf = 0":
        "提示：分割 {k} 不含任何位置，而且什麼都沒存：part 與 lse 保留了評分程式在啟動前放進去的值"
        "（NaN；第二次執行時是 {sentinel:g}）。空的分割仍然必須存入 part = 0 與 lse = -inf，"
        "它在匯合時的權重是 2^-inf = 0",
    "hint: a split that holds no position (l = 0) must store output 0, not 0 / 0: divide by l only where l > 0 (its "
    "lse, -inf, is right)":
        "提示：不含任何位置的分割（l = 0）必須存入輸出 0，而不是 0 / 0：只在 l > 0 的地方除以 l"
        "（它的 lse 是 -inf，這是對的）",
    "hint: split {k} holds no position, yet it stored a finite lse: its range must come from chunk = "
    "cdiv(cdiv(seq_len, num_splits), TILE_N) * TILE_N, start = split * chunk":
        "提示：分割 {k} 不含任何位置，卻存入了有限的 lse：它的範圍必須由 "
        "chunk = cdiv(cdiv(seq_len, num_splits), TILE_N) * TILE_N 與 start = split * chunk 算出",
    "hint: a split that holds no position must store part = 0 and lse = -inf":
        "提示：不含任何位置的分割必須存入 part = 0 與 lse = -inf",

    # --- a split over the wrong positions, or with the wrong values ---------------------------------
    "the positions of a sequence one token shorter": "短一個 token 的序列的位置",
    "the whole sequence": "整條序列",
    "chunks of cdiv(seq_len, num_splits) = {c} positions, not whole tiles":
        "每段 cdiv(seq_len, num_splits) = {c} 個位置，而不是完整的圖塊",
    "no position": "空範圍",
    "hint: split {k} holds {held}, the split of a sequence one token shorter: the last position is left out. A "
    "sequence of seq_len tokens has positions 0 .. seq_len - 1, and the new token's own key (just stored) is the last":
        "提示：分割 {k} 涵蓋的是{held}，那是短一個 token 的序列會有的分割：最後一個位置被漏掉了。"
        "seq_len 個 token 的序列有位置 0 .. seq_len - 1，而新 token 自己的 key（剛剛才存入）就是最後一個",
    "hint: split {k} attended over {held} ({what}), where it holds {own}: chunk = cdiv(cdiv(seq_len, num_splits), "
    "TILE_N) * TILE_N, start = split * chunk, end = min(start + chunk, seq_len)":
        "提示：分割 {k} 的注意力涵蓋了{held}（{what}），但它應涵蓋的是{own}："
        "chunk = cdiv(cdiv(seq_len, num_splits), TILE_N) * TILE_N，start = split * chunk，"
        "end = min(start + chunk, seq_len)",
    "hint: lse is the base-2 log-sum-exp, m_i + log2(l_i): the scores are base-2 logits (qk_scale holds log2 e), and "
    "the merge weighs split s by exp2(lse[s] - max lse)":
        "提示：lse 是以 2 為底的 log-sum-exp，即 m_i + log2(l_i)：分數是以 2 為底的 logit（qk_scale 裡含有 log2 e），"
        "而匯合時以 exp2(lse[s] - max lse) 為分割 s 加權",
    "hint: part is the normalised partial output acc / l_i, not the accumulator acc":
        "提示：part 是正規化後的部分輸出 acc / l_i，而不是累加器 acc",
    "hint: query head h shares KV head h // GROUP (here heads {first}..{last} share KV head {kv_head}); the rows of a "
    "program's tile are heads kv_head * GROUP + offs_g":
        "提示：查詢頭 h 共用的是 KV 頭 h // GROUP（這裡是查詢頭 {first}..{last} 共用 KV 頭 {kv_head}）；"
        "一個程式的圖塊中，各列是查詢頭 kv_head * GROUP + offs_g",

    # --- the merge --------------------------------------------------------------------------------
    "sequence {s} ({tokens} tokens, {splits} split(s)), query head {h}, column {d} of the merged output: expected "
    "{expected:.5g}, got {got:.5g} ({dtype}, tolerance {tol:g})":
        "序列 {s}（{tokens} 個 token，{splits} 個分割），查詢頭 {h}，匯合後輸出的第 {d} 欄：得到 {got:.5g}，"
        "應為 {expected:.5g}（{dtype}，容許誤差 {tol:g}）",
    "every split's part and lse are right (checked against float64 first): the merge kernel is wrong. Split s's "
    "weight is exp2(lse[s] - max lse) / the sum of weights, over the first num_splits splits only":
        "每個分割的 part 與 lse 都正確（已先與 float64 比對過）：錯的是匯合核心。分割 s 的權重是 "
        "exp2(lse[s] - max lse) 除以權重總和，而且只計入前 num_splits 個分割",
    "hint: it read {read}, padding past the splits stage 1 wrote: {advice}":
        "提示：它讀到了「{read}」，那是第 1 階段寫入的分割之後的填充：{advice}",
    "hint: without the grader's poison this case passes: a masked tl.load without other= is read; give every masked "
    "load that feeds a sum an other=":
        "提示：拿掉評分程式的 NaN 毒化，這個案例就會通過：有個帶遮罩卻沒有 other= 的 tl.load 被讀進來了；"
        "每個會流入總和的帶遮罩載入，都要給它 other=",

    # --- the verdict, the try helper, the bandwidth, chapter 5's file ------------------------------
    "{name} ({counted})": "{name}（{counted}）",
    "{shown} shown and {hidden} hidden cases, every split checked":
        "{shown} 個公開案例與 {hidden} 個隱藏案例，每個分割都檢查過",
    "(no GPU here: the kernels ran in the interpreter; compiled timing and bandwidth are skipped)":
        "（這裡沒有 GPU：核心是在直譯器中執行的，所以略過編譯後的計時與頻寬）",
    "this kernel is still the stub: write it first": "這個核心還是尚未填寫的空白函式：請先寫出它",
    "  compiled on {device}: batch {batch} x {context:,} tokens, one Llama-3.2-1B layer in bf16: {ms:.3f} ms, "
    "{gbps:,.0f} GB/s of K/V read = {share:.0%} of this device's copy bandwidth ({copy_gbps:,.0f} GB/s)":
        "  在 {device} 上編譯執行：批次 {batch} × {context:,} 個 token，一層 Llama-3.2-1B（bf16）：{ms:.3f} ms，"
        "讀取 K/V 的速度為 {gbps:,.0f} GB/s，達這個裝置複製頻寬（{copy_gbps:,.0f} GB/s）的 {share:.0%}",
    "yours, from {path} (passed in chapter 4)": "你的版本，來自 {path}（已通過第 4 章）",
    "the shipped solution: {why}": "隨書附的解答：{why}",
}
