"""zh-TW lines of :mod:`pagedkv_edu.exercises.ch5`: the layout of one forward step of a batch."""

MESSAGES: dict[str, str] = {
    "decode: sequences of 5, 17 and 9 tokens each add one, block size 4":
        "解碼：5、17、9 個 token 的三條序列各加一個 token，區塊大小 4",
    "prefill: prompts of 6 and 3 tokens, block size 4": "預填充：6 個與 3 個 token 的提示詞，區塊大小 4",
    "mixed: 8 of a 13-token prompt cached (prefix hit), next to a decode, block size 4":
        "混合：13 個 token 的提示詞已有 8 個在快取中（前綴命中），與一個解碼同批，區塊大小 4",
    "block size 1: a decode and a 3-token prompt": "區塊大小 1：一個解碼，加上一個 3 個 token 的提示詞",
    "hidden case {n}: tables {tables}, seq_lens {seq_lens}, query_lens {query_lens}, block size {block_size}":
        "隱藏案例 {n}：區塊表 {tables}，seq_lens {seq_lens}，query_lens {query_lens}，區塊大小 {block_size}",
    "block {block} is not in this sequence's table {table}": "區塊 {block} 不在這條序列的區塊表 {table} 裡",
    "block {block}, offset {offset}: the slot of position {position}":
        "區塊 {block}、偏移 {offset}：這是位置 {position} 的槽位",
    "expected three lists (positions, slots, last_token_index), got {got}":
        "應為三個串列（位置、槽位、last_token_index），卻得到 {got}",
    "position": "位置",
    "slot": "槽位",
    "row index": "列索引",
    "the step has {count} new tokens ({sum}); got {positions} positions and {slots} slots":
        "這一步有 {count} 個新 token（{sum}）；得到的卻是 {positions} 個位置與 {slots} 個槽位",
    "{wrong} of {total} tokens wrong": "{total} 個 token 中有 {wrong} 個錯誤",
    # the columns of the rows below it, right-aligned to them (a Chinese character is two columns wide)
    "  token seq position   got   slot   got  where the slot you gave lands":
        " token 序列     位置  得到   槽位  得到  你給的槽位落在哪裡",
    "  ... and {count} more": "  ……還有 {count} 個",
    "last_token_index expected {expected}, got {got} (the logits row of each sequence's last new token)":
        "last_token_index 應為 {expected}，卻得到 {got}（它是每條序列最後一個新 token 的 logits 所在的列）",
}
