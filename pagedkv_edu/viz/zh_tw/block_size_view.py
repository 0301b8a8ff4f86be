"""zh-TW lines of :mod:`pagedkv_edu.viz.block_size_view`: chapter 9's four costs over every block size."""

MESSAGES: dict[str, str] = {
    "A100-40GB on PCIe 4.0": "A100-40GB（PCIe 4.0 介面）",
    "swap": "置換",
    "recompute": "重新計算",
    "B = {block_size}, shared prefix {shared_prefix} tokens, {device}: {unused:.1%} of held slots empty, "
    "{entries:.1f} table entries a request, {hash_hits:.0f} tokens found by the hash chain ({radix_hit:.0f} by the "
    "radix tree), {cheaper} is cheaper ({swap:.0f} against {recompute:.0f} ms)":
        "B = {block_size}，共享前綴 {shared_prefix} 個 token，{device}：佔用的槽位中有 {unused:.1%} 是空的，"
        "每個請求 {entries:.1f} 個區塊表項目，雜湊鏈找到 {hash_hits:.0f} 個 token（基數樹找到 {radix_hit:.0f} 個），"
        "{cheaper}的成本較低（{swap:.0f} 對 {recompute:.0f} 毫秒）",
    "shared_prefix={shared_prefix} is longer than the shortest prompt ({shortest} tokens): every prompt must hold "
    "the whole shared prefix":
        "shared_prefix={shared_prefix} 比最短的提示詞（{shortest} 個 token）還長：每個提示詞都必須容納整段共享前綴",
    # the picture
    "Block size B = {block_size}: shared prefix {shared_prefix} tokens, {device}":
        "區塊大小 B = {block_size}：共享前綴 {shared_prefix} 個 token，{device}",
    "The grey band marks B = {block_size}; each curve is the whole sweep. Waste, table and hits: counted; "
    "preemption: a model.":
        "灰色帶標出 B = {block_size}；每條曲線都是完整的掃描。浪費、區塊表與命中是實際計數；搶佔是模型推算。",
    "block size B (tokens)": "區塊大小 B（token）",
    "Last-block waste: share of held slots empty": "最後一個區塊的浪費：佔用的槽位中空著的比例",
    "{share:.2%} of held slots empty at B = {block_size}": "B = {block_size} 時，佔用的槽位中有 {share:.2%} 是空的",
    "empty share": "空著的比例",
    "Block table: entries per request": "區塊表：每個請求的項目數",
    "{entries:.1f} entries ({bytes:,.0f} bytes of int32 ids)": "{entries:.1f} 個項目（{bytes:,.0f} 位元組的 int32 id）",
    "entries": "項目數",
    "Prefix hits: of {shared_prefix} shared tokens, found": "前綴命中：{shared_prefix} 個共享 token 中找到的數量",
    "hash chain {hash_hits:.0f} tokens, radix tree {radix_hit:.0f}": "雜湊鏈 {hash_hits:.0f} 個 token，基數樹 {radix_hit:.0f} 個",
    "hash chain": "雜湊鏈",
    "radix tree": "基數樹",
    "Preempting one {tokens:,}-token sequence (ms, model)": "搶佔一個 {tokens:,} token 的序列（毫秒，模型推算）",
    "swap {swap:.0f} ms, recompute {recompute:.0f} ms: {cheaper} is cheaper":
        "置換 {swap:.0f} 毫秒，重新計算 {recompute:.0f} 毫秒：{cheaper}的成本較低",
    "swap out + in": "置換出去再換回來",
}
