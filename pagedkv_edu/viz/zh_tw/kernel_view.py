"""zh-TW lines of :mod:`pagedkv_edu.viz.kernel_view`: chapter 4's pictures of the cache rows a kernel touches."""

MESSAGES: dict[str, str] = {
    "physical cache (one row per block, one cell per slot)": "實體快取（每個區塊一列，每個槽位一個儲存格）",
    "block {block}": "區塊 {block}",
    "token positions, tiles of {tile_n} (block size {block_size}, {num_splits} splits per sequence)":
        "token 位置，每個圖塊 {tile_n} 個（區塊大小 {block_size}，每條序列 {num_splits} 個分割）",
    "token positions, tiles of {tile_n} (block size {block_size}, {num_splits} split per sequence)":
        "token 位置，每個圖塊 {tile_n} 個（區塊大小 {block_size}，每條序列 {num_splits} 個分割）",
    "colour: one program (sequence, split); tN: its tile N; hatched: masked, reads nothing":
        "顏色：一個程式（序列、分割）；tN：它的第 N 個圖塊；斜線：被遮罩，什麼都不讀",
    "sequence {seq}": "序列 {seq}",
    "tile reads: {sequences} sequences, block size {block_size}, tiles of {tile_n}, {num_splits} splits, "
    "{slots} slots read":
        "圖塊讀取：{sequences} 條序列，區塊大小 {block_size}，每個圖塊 {tile_n} 個位置，{num_splits} 個分割，"
        "讀取 {slots} 個槽位",
    "new tokens, one program each (the slot each is stored to)": "新的 token，每個由一個程式處理（下一列是它存入的槽位）",
    "token": "新 token",
    "slot": "槽位",
    "skip": "略過",
    "store: {tokens} tokens, {written} written, block size {block_size}":
        "儲存：{tokens} 個 token，寫入 {written} 個，區塊大小 {block_size}",
}
